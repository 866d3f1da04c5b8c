//! The OpenAPI 3 document, generated from the code: the operations come from the
//! `#[utoipa::path]` of each handler in [`crate::routes::ROUTES`] (the same table the server
//! is configured from), the schemas from `#[derive(ToSchema)]` on the request and response
//! types those operations name (collected from the operations, no list to keep). Served at `GET /openapi.json`, rendered at `GET /docs`.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, ObjectBuilder, RefOr, Required, ResponseBuilder, Type};
use utoipa::{IntoParams, Modify, OpenApi};

use super::ROUTES;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "payments-api",
        description = "An idempotent payment API: a payment request, however often it is sent, \
            causes at most one charge. Money is in integer minor units; errors are RFC 9457 \
            problem details with a stable `code`; every response carries `X-Request-Id`.",
    ),
    modifiers(&CommonParts),
    tags(
        (name = "payments", description = "Create and read payments"),
        (name = "operations", description = "Health, metrics and this document (no API key needed)"),
    )
)]
struct ApiDoc;

/// The whole document: the declared parts above plus one operation per served route.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    for route in ROUTES {
        (route.doc)(&mut doc);
    }
    CommonParts.modify(&mut doc);
    doc
}

/// Adds the operation of a `#[utoipa::path]` handler (its generated `__path_<fn>` type) to
/// `doc`, with its tags and the schemas it refers to, as `#[openapi(paths(..))]` would.
/// Used as `doc: openapi::operation::<payments::__path_create>` in [`ROUTES`].
pub fn operation<P>(doc: &mut utoipa::openapi::OpenApi)
where
    P: utoipa::Path + utoipa::__dev::SchemaReferences + for<'t> utoipa::__dev::Tags<'t>,
{
    let mut operation = P::operation();
    let tags = P::tags();
    if !tags.is_empty() {
        operation.tags = Some(tags.into_iter().map(str::to_owned).collect());
    }
    doc.paths
        .add_path_operation(P::path(), P::methods(), operation);
    let mut schemas = Vec::new();
    P::schemas(&mut schemas);
    let components = doc.components.get_or_insert_with(Default::default);
    for (name, schema) in schemas {
        components.schemas.entry(name).or_insert(schema);
    }
}

/// The `Idempotency-Key` request header, for `params(...)` of the POSTs that require it.
pub struct IdempotencyKeyHeader;

impl IntoParams for IdempotencyKeyHeader {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![
            ParameterBuilder::new()
                .name("Idempotency-Key")
                .parameter_in(ParameterIn::Header)
                .required(Required::True)
                .description(Some(
                    "1–255 visible ASCII characters, unique per request you mean to make once; \
                     the bare form `abc` and the quoted form `\"abc\"` are the same key. A retry \
                     with the same key and request replays the first final response.",
                ))
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .min_length(Some(1))
                        .max_length(Some(255)),
                ))
                .build(),
        ]
    }
}

/// What every operation shares: the `X-Request-Id` header both ways, the 500 problem, and
/// the bearer API key scheme.
struct CommonParts;

impl Modify for CommonParts {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("`Authorization: Bearer <api key>`"))
                    .build(),
            ),
        );
        let string = || ObjectBuilder::new().schema_type(Type::String);
        for item in doc.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
                &mut item.delete,
            ]
            .into_iter()
            .flatten()
            {
                let parameters = operation.parameters.get_or_insert_with(Vec::new);
                let has_request_id = parameters
                    .iter()
                    .any(|p| matches!(p, RefOr::T(p) if p.name == "X-Request-Id"));
                if !has_request_id {
                    parameters.push(RefOr::T(
                        ParameterBuilder::new()
                            .name("X-Request-Id")
                            .parameter_in(ParameterIn::Header)
                            .required(Required::False)
                            .description(Some(
                                "Your id for this request (1–200 visible ASCII characters); \
                                 echoed in the response and the logs. One is made up if absent.",
                            ))
                            .schema(Some(string()))
                            .build(),
                    ));
                }
                operation
                    .responses
                    .responses
                    .entry("500".to_owned())
                    .or_insert_with(|| {
                        RefOr::T(
                            ResponseBuilder::new()
                                .description("`internal_error`: the body reveals no internals")
                                .content(
                                    crate::error::PROBLEM_JSON,
                                    ContentBuilder::new()
                                        .schema(Some(utoipa::openapi::Ref::from_schema_name(
                                            "Problem",
                                        )))
                                        .build(),
                                )
                                .build(),
                        )
                    });
                for response in operation.responses.responses.values_mut() {
                    if let RefOr::T(response) = response {
                        response
                            .headers
                            .entry("X-Request-Id".to_owned())
                            .or_insert_with(|| {
                                RefOr::T(
                                    HeaderBuilder::new()
                                        .schema(Some(string()))
                                        .description(Some("The request's id (yours, or a new one)"))
                                        .build(),
                                )
                            });
                    }
                }
            }
        }
    }
}
