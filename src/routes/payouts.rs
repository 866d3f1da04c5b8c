use actix_web::{HttpRequest, HttpResponse, web};

use super::authenticate::Authenticated;
use super::events::json;
use super::input::{
    NoQuery, Query, idempotency_key, path_id, read_json_body, sent_unless_replayed,
};
use crate::domain::{PayoutId, PayoutStatus};
use crate::error::ApiError;
use crate::payouts::{self, NewPayout};
use crate::state::AppState;

/// Send money from the available balance to a bank account; at most once per
/// `Idempotency-Key`, and never more than is available.
#[utoipa::path(
    post,
    path = "/v1/payouts",
    operation_id = "create_payout",
    tag = "balance",
    security(("api_key" = [])),
    params(crate::routes::openapi::IdempotencyKeyHeader),
    request_body(content = NewPayout, content_type = "application/json"),
    responses(
        (status = 201, description = "Final: `paid`, or `failed`", body = crate::payouts::view::PayoutObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` when this is the stored response of an earlier request with the same key"))),
        (status = 202, description = "Not final yet: the payout is `pending` (its amount is out of the available balance); finished by the provider, or retry with the same key",
            body = crate::payouts::view::PayoutObject),
        super::problems::PayoutProblems,
    )
)]
pub async fn create(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_json_body(&req, payload).await?;
    let key = idempotency_key(&req)?;
    let sent = match sent_unless_replayed(&state, &merchant, payouts::RESOURCE, &key, &req, body) {
        Ok(sent) => sent,
        Err(replay) => return Ok(replay.into_response()),
    };
    let request = NewPayout::parse(&sent.body)?;
    let request_id = super::input::request_id(&req);
    let answer =
        payouts::create_payout(&state, &merchant, key, request, request_id, Some(sent)).await?;
    Ok(answer.into_response())
}

/// The merchant's payouts, newest first.
#[utoipa::path(
    get,
    path = "/v1/payouts",
    operation_id = "list_payouts",
    tag = "balance",
    security(("api_key" = [])),
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "Page size, 1 to 100 (default 10)"),
        ("starting_after" = Option<String>, Query, description = "A payout id (`po_…`): the page after it"),
        ("status" = Option<crate::payouts::view::PayoutStatus>, Query, description = "Only payouts with this status"),
    ),
    responses(
        (status = 200, description = "A page of payouts", body = crate::payouts::view::PayoutList),
        (status = 404, description = "`not_found`: `starting_after` names no payout of yours", body = crate::error::Problem, content_type = "application/problem+json"),
        super::problems::ListProblems,
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req, &["limit", "starting_after", "status"])?;
    let limit = query.limit()?;
    let starting_after = query.starting_after("a payout id", |v| PayoutId::parse(v).is_some())?;
    let status = query
        .get("status")
        .map(|v| {
            PayoutStatus::parse(v)
                .filter(|s| *s != PayoutStatus::Rejected)
                .ok_or_else(|| {
                    ApiError::invalid("status", "`status` must be pending, paid or failed")
                })
        })
        .transpose()?;
    Ok(json(
        payouts::list_payouts(&state, &merchant, limit, starting_after, status).await?,
    ))
}

/// One payout.
#[utoipa::path(
    get,
    path = "/v1/payouts/{id}",
    operation_id = "get_payout",
    tag = "balance",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Payout id (`po_…`)")),
    responses(
        (status = 200, description = "The payout", body = crate::payouts::view::PayoutObject),
        super::problems::PayoutNotFoundProblems,
    )
)]
pub async fn get(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    _: NoQuery,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id::<PayoutId>(&path)?;
    Ok(json(payouts::get_payout(&state, &merchant, id).await?))
}
