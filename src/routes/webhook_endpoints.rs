use actix_web::{HttpRequest, HttpResponse, web};

use super::authenticate::Authenticated;
use super::events::{json, request_ref};
use super::input::{NoQuery, Query, idempotency_key, read_json_body, read_optional_json_body};
use super::openapi::OptionalIdempotencyKeyHeader;
use crate::domain::{DeliveryId, DeliveryStatus, EndpointId, IdempotencyKey};
use crate::error::ApiError;
use crate::state::AppState;
use crate::webhook_endpoints::{self as endpoints, EndpointUpdate, NewEndpoint, Replay, Rotation};

/// `Idempotency-Key` is optional on these POSTs; when given, the idempotency rules apply.
fn optional_key(req: &HttpRequest) -> Result<Option<IdempotencyKey>, ApiError> {
    if req.headers().contains_key("idempotency-key") {
        idempotency_key(req).map(Some)
    } else {
        Ok(None)
    }
}

/// Register an endpoint. Its `secret` is in this answer only: keep it to verify deliveries.
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints",
    operation_id = "create_webhook_endpoint",
    tag = "webhook endpoints",
    security(("api_key" = [])),
    params(OptionalIdempotencyKeyHeader),
    request_body(content = NewEndpoint, content_type = "application/json"),
    responses(
        (status = 201, description = "Created, with its `secret` (shown this once)", body = crate::webhook_endpoints::view::EndpointObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` when this is the stored response of an earlier request with the same key"))),
        super::problems::NewEndpointProblems,
    )
)]
pub async fn create(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_json_body(&req, payload).await?;
    let key = optional_key(&req)?;
    let request = NewEndpoint::parse(&body)?;
    let answer = endpoints::create(&state, &merchant, key, request).await?;
    Ok(answer.into_response())
}

/// The merchant's endpoints, newest first (never their secrets).
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints",
    operation_id = "list_webhook_endpoints",
    tag = "webhook endpoints",
    security(("api_key" = [])),
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "Page size, 1 to 100 (default 10)"),
        ("starting_after" = Option<String>, Query, description = "An endpoint id: the page starts after it"),
    ),
    responses(
        (status = 200, description = "A page of endpoints", body = crate::webhook_endpoints::view::EndpointList),
        (status = 404, description = "`not_found`: `starting_after` names no webhook endpoint of yours", body = crate::error::Problem, content_type = "application/problem+json"),
        super::problems::ListProblems,
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req, &["limit", "starting_after"])?;
    let limit = query.limit()?;
    let starting_after = query.starting_after("an endpoint id", EndpointId::is_valid)?;
    Ok(json(
        endpoints::list(&state, &merchant, starting_after, limit).await?,
    ))
}

/// One endpoint (never its secret).
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints/{id}",
    operation_id = "get_webhook_endpoint",
    tag = "webhook endpoints",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Endpoint id (`we_…`)")),
    responses(
        (status = 200, description = "The endpoint", body = crate::webhook_endpoints::view::EndpointObject),
        super::problems::EndpointProblems,
    )
)]
pub async fn get(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    _: NoQuery,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    Ok(json(
        endpoints::get(&state, &merchant, path.into_inner()).await?,
    ))
}

/// Change an endpoint's `url`, `enabled_events`, `description` or `status`; enabling it
/// again resumes delivery of what is pending.
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints/{id}",
    operation_id = "update_webhook_endpoint",
    tag = "webhook endpoints",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Endpoint id (`we_…`)"), OptionalIdempotencyKeyHeader),
    request_body(content = EndpointUpdate, content_type = "application/json"),
    responses(
        (status = 200, description = "The endpoint as it is now", body = crate::webhook_endpoints::view::EndpointObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` on a replay"))),
        super::problems::EndpointPostProblems,
    )
)]
pub async fn update(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_json_body(&req, payload).await?;
    let key = optional_key(&req)?;
    let request = EndpointUpdate::parse(&body)?;
    let answer = endpoints::update(&state, &merchant, path.into_inner(), key, request).await?;
    Ok(answer.into_response())
}

/// Delete an endpoint and its deliveries.
#[utoipa::path(
    delete,
    path = "/v1/webhook_endpoints/{id}",
    operation_id = "delete_webhook_endpoint",
    tag = "webhook endpoints",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Endpoint id (`we_…`)")),
    responses(
        (status = 200, description = "Deleted", body = crate::webhook_endpoints::view::Deleted),
        super::problems::EndpointProblems,
    )
)]
pub async fn delete(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    _: NoQuery,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    // The API's DELETE takes no Idempotency-Key (a second one is a 404).
    let answer = endpoints::delete(&state, &merchant, path.into_inner(), None).await?;
    Ok(answer.into_response())
}

/// A new secret (in this answer only). Until the current one expires, every delivery
/// carries two `v1` signatures: the new secret's and the current one's.
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints/{id}/rotate_secret",
    operation_id = "rotate_webhook_endpoint_secret",
    tag = "webhook endpoints",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Endpoint id (`we_…`)"), OptionalIdempotencyKeyHeader),
    request_body(content = Option<Rotation>, content_type = "application/json", description = "Optional"),
    responses(
        (status = 200, description = "The endpoint with its new `secret`", body = crate::webhook_endpoints::view::EndpointObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` on a replay"))),
        super::problems::EndpointPostProblems,
    )
)]
pub async fn rotate_secret(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_optional_json_body(&req, payload).await?;
    let key = optional_key(&req)?;
    let rotation = Rotation::parse(&body)?;
    let answer =
        endpoints::rotate_secret(&state, &merchant, path.into_inner(), key, rotation).await?;
    Ok(answer.into_response())
}

/// The endpoint's deliveries, newest first.
#[utoipa::path(
    get,
    path = "/v1/webhook_endpoints/{id}/deliveries",
    operation_id = "list_webhook_deliveries",
    tag = "webhook endpoints",
    security(("api_key" = [])),
    params(
        ("id" = String, Path, description = "Endpoint id (`we_…`)"),
        ("status" = Option<crate::domain::DeliveryStatus>, Query, description = "Only deliveries in this status"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "Page size, 1 to 100 (default 10)"),
        ("starting_after" = Option<String>, Query, description = "A delivery id: the page starts after it"),
    ),
    responses(
        (status = 200, description = "A page of deliveries", body = crate::webhook_endpoints::view::DeliveryList),
        (status = 404, description = "`not_found`: no such endpoint of yours, or `starting_after` names no delivery of it", body = crate::error::Problem, content_type = "application/problem+json"),
        super::problems::ListProblems,
    )
)]
pub async fn deliveries(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req, &["status", "limit", "starting_after"])?;
    let limit = query.limit()?;
    let starting_after = query.starting_after("a delivery id", DeliveryId::is_valid)?;
    let status = match query.get("status") {
        None => None,
        Some(s) => Some(DeliveryStatus::parse(s).ok_or_else(|| {
            ApiError::invalid("status", "`status` must be pending, succeeded or failed")
        })?),
    };
    Ok(json(
        endpoints::list_deliveries(
            &state,
            &merchant,
            path.into_inner(),
            status,
            starting_after,
            limit,
        )
        .await?,
    ))
}

/// Deliver earlier events again, with their original `webhook-id`: those whose delivery
/// failed (default), or all of them.
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints/{id}/replay",
    operation_id = "replay_webhook_deliveries",
    tag = "webhook endpoints",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Endpoint id (`we_…`)"), OptionalIdempotencyKeyHeader),
    request_body(content = Replay, content_type = "application/json"),
    responses(
        (status = 202, description = "Queued for delivery", body = crate::webhook_endpoints::view::Queued,
            headers(("Idempotent-Replayed" = bool, description = "`true` on a replay"))),
        super::problems::EndpointPostProblems,
    )
)]
pub async fn replay(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_json_body(&req, payload).await?;
    let key = optional_key(&req)?;
    let request = Replay::parse(&body)?;
    let answer = endpoints::replay(&state, &merchant, path.into_inner(), key, request).await?;
    Ok(answer.into_response())
}

/// Send a signed `webhook_endpoint.test` event now (not kept in the feed).
#[utoipa::path(
    post,
    path = "/v1/webhook_endpoints/{id}/test",
    operation_id = "test_webhook_endpoint",
    tag = "webhook endpoints",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Endpoint id (`we_…`)"), OptionalIdempotencyKeyHeader),
    request_body(content = Option<crate::routes::openapi::NoFields>, content_type = "application/json", description = "`{}`, or no body"),
    responses(
        (status = 200, description = "How the attempt went", body = crate::webhook_endpoints::view::TestResult,
            headers(("Idempotent-Replayed" = bool, description = "`true` on a replay"))),
        super::problems::EndpointPostProblems,
    )
)]
pub async fn test(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_optional_json_body(&req, payload).await?;
    let key = optional_key(&req)?;
    super::input::JsonObject::parse_or_empty(&body, &[])?;
    let made_by = request_ref(&req, key.as_ref());
    let answer = endpoints::send_test(&state, &merchant, path.into_inner(), key, made_by).await?;
    Ok(answer.into_response())
}
