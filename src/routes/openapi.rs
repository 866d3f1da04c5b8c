//! The OpenAPI 3 document, generated from the code: the operations come from the
//! `#[utoipa::path]` of each handler in [`crate::routes::ROUTES`] (the same table the server
//! is configured from), the schemas from `#[derive(ToSchema)]` on the request and response
//! types those operations name (collected from the operations, no list to keep). Served at `GET /openapi.json`, rendered at `GET /docs`.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{
    HttpMethod, OperationBuilder, Parameter, ParameterBuilder, ParameterIn, PathItem,
};
use utoipa::openapi::request_body::RequestBodyBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, ObjectBuilder, Ref, RefOr, Required, ResponseBuilder, Type};
use utoipa::{IntoParams, Modify, OpenApi};

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
        (name = "balance", description = "What the merchant holds: the balance and every movement of its money"),
        (name = "disputes", description = "Charges the customer's bank took back: evidence, or accepting the loss"),
        (name = "operations", description = "Health, metrics and this document (no API key needed)"),
    )
)]
struct ApiDoc;

/// The whole document: the declared parts above plus one operation per served route
/// (each route's `doc`, from [`crate::routes::ROUTES`]: see [`crate::routes::document`]).
pub fn document_of(
    operations: impl IntoIterator<Item = fn(&mut utoipa::openapi::OpenApi)>,
) -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    for add in operations {
        add(&mut doc);
    }
    CommonParts.modify(&mut doc);
    request_bodies(&mut doc);
    doc.webhooks = Some(
        utoipa::openapi::PathsBuilder::new()
            .path("event", event_delivery())
            .build(),
    );
    doc
}

/// What the annotations cannot say of the API's request bodies: a body typed `Option<…>`
/// may be left out, but is never JSON `null` (a body must be an object), so it is not
/// required, and its schema is the object's. (That the API's request objects refuse a field
/// they do not name, each says itself with `#[serde(deny_unknown_fields)]`.)
fn request_bodies(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::schema::{Schema, SchemaType};
    let is_null = |schema: &RefOr<Schema>| matches!(schema, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null));
    for item in doc.paths.paths.values_mut() {
        let operations = [
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ];
        for operation in operations.into_iter().flatten() {
            let Some(RefOr::T(body)) = operation.request_body.as_mut() else {
                continue;
            };
            for content in body.content.values_mut() {
                let RefOr::T(content) = content else {
                    continue;
                };
                if let Some(RefOr::T(Schema::OneOf(one))) = &content.schema
                    && one.items.len() == 2
                    && one.items.iter().any(is_null)
                {
                    content.schema = one.items.iter().find(|s| !is_null(s)).cloned();
                    body.required = Some(Required::False);
                }
            }
        }
    }
}

/// What the service sends to a merchant's webhook endpoints, for the document's top-level
/// `webhooks`: one event per POST, signed like the provider's webhooks are.
fn event_delivery() -> PathItem {
    let header = |name: &str, description: &str| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(Required::True)
            .description(Some(description))
            .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
            .build()
    };
    let operation = OperationBuilder::new()
        .operation_id(Some("receive_event"))
        .summary(Some("An event, delivered to your webhook endpoint"))
        .description(Some(
            "Sent to each enabled endpoint whose `enabled_events` match the event's `type`, and \
             once, at your request, by `POST /v1/webhook_endpoints/{id}/test`. Check the \
             signature over the raw body before you parse it; an event may arrive more than \
             once (same `webhook-id`) and out of order.",
        ))
        .parameter(header(
            "webhook-id",
            "The event id (`evt_…`); every attempt of the same event carries the same one",
        ))
        .parameter(header(
            "webhook-timestamp",
            "When this attempt was signed, Unix seconds",
        ))
        .parameter(header(
            "webhook-signature",
            "Space-separated `v1,<base64 HMAC-SHA256>` entries over \
             `{webhook-id}.{webhook-timestamp}.{raw body}`, one per secret of the endpoint \
             (two while a rotated secret is still valid)",
        ))
        .request_body(Some(
            RequestBodyBuilder::new()
                .required(Some(Required::True))
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Event")))
                        .build(),
                )
                .build(),
        ))
        .response(
            "2XX",
            ResponseBuilder::new().description("Received: the event is not sent again"),
        )
        .response(
            "410",
            ResponseBuilder::new()
                .description("Gone: this event is not sent again, and the endpoint is disabled"),
        )
        .response(
            "default",
            ResponseBuilder::new().description(
                "Any other answer, a redirect, or none within the timeout: sent again later",
            ),
        );
    PathItem::new(HttpMethod::Post, operation)
}

/// Adds the operation of a `#[utoipa::path]` handler (its generated `__path_<fn>` type) to
/// `doc`, with its tags and the schemas it refers to, as `#[openapi(paths(..))]` would.
/// Used as `doc: openapi::operation::<payments::__path_create>` in [`crate::routes::ROUTES`].
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

/// The body of a POST that takes no fields: `{}`, or none (`request_body(content =
/// Option<NoFields>)`).
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoFields {}

/// The `Idempotency-Key` request header, for `params(...)` of the POSTs that require it.
pub struct IdempotencyKeyHeader;

impl IntoParams for IdempotencyKeyHeader {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![idempotency_key_header(
            Required::True,
            "1–255 visible ASCII characters, unique per request you mean to make once; the \
             bare form `abc` and the quoted form `\"abc\"` are the same key. A retry with the \
             same key and request replays the first final response.",
        )]
    }
}

/// The optional `Idempotency-Key` of the webhook endpoint POSTs, for `params(...)`.
pub struct OptionalIdempotencyKeyHeader;

impl IntoParams for OptionalIdempotencyKeyHeader {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![idempotency_key_header(
            Required::False,
            "Optional. When given, the rules of payments apply: a retry with the same key and \
             request replays the first answer; another request with it is 422.",
        )]
    }
}

fn idempotency_key_header(required: Required, description: &str) -> Parameter {
    ParameterBuilder::new()
        .name("Idempotency-Key")
        .parameter_in(ParameterIn::Header)
        .required(required)
        .description(Some(description))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(255)),
        ))
        .build()
}

/// What every operation shares: the `X-Request-Id` header both ways, the 500 problem, and
/// the bearer API key scheme.
struct CommonParts;

impl Modify for CommonParts {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        // Referred to by name where utoipa does not collect them: the shared problem
        // responses name `Problem`; the events list's `type` filter names `EventType`.
        for (name, schema) in [
            (
                <crate::error::Problem as utoipa::ToSchema>::name(),
                <crate::error::Problem as utoipa::PartialSchema>::schema as fn() -> _,
            ),
            (
                <crate::events::EventType as utoipa::ToSchema>::name(),
                <crate::events::EventType as utoipa::PartialSchema>::schema,
            ),
            (
                <crate::ledger::view::TransactionType as utoipa::ToSchema>::name(),
                <crate::ledger::view::TransactionType as utoipa::PartialSchema>::schema,
            ),
        ] {
            components
                .schemas
                .entry(name.into_owned())
                .or_insert_with(schema);
        }
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
                    .or_insert_with(|| RefOr::T(super::problems::internal_error()));
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

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// `(method, path, operation)` of every operation in the document.
    fn operations(doc: &Value) -> Vec<(String, String, Value)> {
        let mut out = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("path item") {
                out.push((method.clone(), path.clone(), operation.clone()));
            }
        }
        out
    }

    fn doc() -> Value {
        serde_json::to_value(crate::routes::document()).expect("the document serialises")
    }

    /// Rate limiting and authentication answer before a handler runs, so every operation
    /// that takes an API key lists their problems; the others are never rate limited. An
    /// `{id}` that names nothing of the caller's is a 404.
    #[test]
    fn every_route_lists_what_authentication_rate_limiting_and_its_path_id_answer() {
        let doc = doc();
        for (method, path, operation) in operations(&doc) {
            let responses = &operation["responses"];
            let takes_key = operation["security"]
                .as_array()
                .is_some_and(|s| s.iter().any(|r| r.get("api_key").is_some()));
            if takes_key {
                for status in ["401", "429", "503", "500"] {
                    assert!(
                        responses[status].is_object(),
                        "{method} {path}: no {status}"
                    );
                }
                for status in ["429", "503"] {
                    assert!(
                        responses[status]["headers"]["Retry-After"].is_object(),
                        "{method} {path}: {status} without Retry-After"
                    );
                }
                let unauthorized = responses["401"]["description"].as_str().unwrap_or("");
                assert!(unauthorized.contains("`unauthorized`"), "{method} {path}");
                let limited = responses["429"]["description"].as_str().unwrap_or("");
                assert!(limited.contains("`rate_limited`"), "{method} {path}");
            } else {
                assert!(
                    responses.get("429").is_none(),
                    "{method} {path} is never limited"
                );
            }
            if path.contains("{id}") {
                let not_found = responses["404"]["description"].as_str().unwrap_or("");
                assert!(not_found.contains("`not_found`"), "{method} {path}");
            }
        }
    }

    /// The sets list each problem under the status the service answers it with.
    #[test]
    fn problem_responses_are_listed_under_their_own_status() {
        let doc = doc();
        let create = &doc["paths"]["/v1/payments/{id}/capture"]["post"]["responses"];
        for (status, code) in [
            ("400", "`idempotency_key_missing`"),
            ("409", "`payment_not_capturable`"),
            ("409", "`idempotency_key_in_use`"),
            ("413", "`payload_too_large`"),
            ("415", "`unsupported_media_type`"),
            ("422", "`amount_exceeds_capturable`"),
            ("422", "`idempotency_key_reused`"),
        ] {
            let description = create[status]["description"].as_str().unwrap_or("");
            assert!(
                description.contains(code),
                "capture {status}: {description}"
            );
        }
        let endpoint = &doc["paths"]["/v1/webhook_endpoints"]["post"]["responses"];
        let bad_request = endpoint["400"]["description"].as_str().unwrap_or("");
        assert!(
            !bad_request.contains("idempotency_key_missing"),
            "the key is optional there: {bad_request}"
        );
    }

    #[test]
    fn operation_ids_are_all_snake_case() {
        let doc = doc();
        for (method, path, operation) in operations(&doc) {
            let id = operation["operationId"].as_str().unwrap_or("");
            let snake = !id.is_empty()
                && id
                    .split('_')
                    .all(|word| !word.is_empty() && word.bytes().all(|b| b.is_ascii_lowercase()));
            assert!(snake, "{method} {path}: operationId {id:?}");
        }
    }

    /// Descriptions are for the API's users: no Rust paths, rustdoc links or pointers to the
    /// developers' documents.
    #[test]
    fn descriptions_name_nothing_internal() {
        fn check(value: &Value, at: &str) {
            match value {
                Value::Object(map) => {
                    for (key, v) in map {
                        let at = format!("{at}/{key}");
                        match v {
                            Value::String(text) if key == "description" || key == "summary" => {
                                for internal in ["::", "CONTRACT", "§", "[`", ".rs", "crate"] {
                                    assert!(!text.contains(internal), "{at}: {text}");
                                }
                            }
                            _ => check(v, &at),
                        }
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| check(v, at)),
                _ => {}
            }
        }
        check(&doc(), "");
    }

    /// A receiver's client parses every event it can be sent, the test event among them;
    /// the list filter still names only recorded types.
    #[test]
    fn the_event_type_a_receiver_parses_includes_the_test_event() {
        let doc = doc();
        let schemas = &doc["components"]["schemas"];
        let reference = doc["components"]["schemas"]["Event"]["properties"]["type"]["$ref"]
            .as_str()
            .unwrap_or("");
        let name = reference.rsplit('/').next().unwrap_or("");
        let types: Vec<&str> = schemas[name]["enum"]
            .as_array()
            .map(|e| e.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert!(types.contains(&"webhook_endpoint.test"), "{types:?}");
        for kind in crate::events::EventType::ALL {
            assert!(types.contains(&kind.as_str()), "{types:?}");
        }
        let delivered = &doc["webhooks"]["event"]["post"]["requestBody"]["content"];
        assert_eq!(
            delivered["application/json"]["schema"]["$ref"],
            "#/components/schemas/Event"
        );
        let list = doc["paths"]["/v1/events"]["get"]["parameters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let filter = list
            .iter()
            .find(|p| p["name"] == "type")
            .map(|p| match p["schema"]["$ref"].as_str() {
                Some(r) => schemas[r.rsplit('/').next().unwrap_or("")].clone(),
                None => p["schema"].clone(),
            })
            .and_then(|schema| schema["enum"].as_array().cloned())
            .unwrap_or_default();
        assert_eq!(
            filter.len(),
            crate::events::EventType::ALL.len(),
            "{list:?}"
        );
        assert!(!filter.contains(&Value::from("webhook_endpoint.test")));
    }
}
