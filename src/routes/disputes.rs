use actix_web::{HttpRequest, HttpResponse, web};

use super::authenticate::Authenticated;
use super::events::json;
use super::input::{
    NoQuery, Query, idempotency_key, path_id, read_json_body, read_optional_json_body, request_id,
};
use crate::disputes::request::{DisputeEvidence, parse_close};
use crate::disputes::{self, step};
use crate::domain::{DisputeId, DisputeStatus, PaymentId};
use crate::error::ApiError;
use crate::state::AppState;

/// The merchant's disputes, newest first.
#[utoipa::path(
    get,
    path = "/v1/disputes",
    operation_id = "list_disputes",
    tag = "disputes",
    security(("api_key" = [])),
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "Page size, 1 to 100 (default 10)"),
        ("starting_after" = Option<String>, Query, description = "A dispute id (`dp_…`): the page after it"),
        ("status" = Option<crate::domain::DisputeStatus>, Query, description = "Only disputes with this status"),
        ("payment_id" = Option<String>, Query, description = "Only the disputes of this payment (`pay_…`)"),
    ),
    responses(
        (status = 200, description = "A page of disputes", body = crate::disputes::view::DisputeList),
        (status = 404, description = "`not_found`: `starting_after` names no dispute of yours", body = crate::error::Problem, content_type = "application/problem+json"),
        super::problems::ListProblems,
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req, &["limit", "starting_after", "status", "payment_id"])?;
    let limit = query.limit()?;
    let starting_after = query.starting_after("a dispute id", |v| DisputeId::parse(v).is_some())?;
    let status = query
        .get("status")
        .map(|v| {
            DisputeStatus::parse(v).ok_or_else(|| {
                ApiError::invalid(
                    "status",
                    "`status` must be needs_response, under_review, won or lost",
                )
            })
        })
        .transpose()?;
    let payment_id = query
        .get("payment_id")
        .map(|v| {
            PaymentId::parse(v)
                .map(|id| id.as_str().to_owned())
                .ok_or_else(|| {
                    ApiError::invalid("payment_id", "`payment_id` must be a payment id (`pay_…`)")
                })
        })
        .transpose()?;
    Ok(json(
        disputes::list_disputes(&state, &merchant, limit, starting_after, status, payment_id)
            .await?,
    ))
}

/// One dispute.
#[utoipa::path(
    get,
    path = "/v1/disputes/{id}",
    operation_id = "get_dispute",
    tag = "disputes",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Dispute id (`dp_…`)")),
    responses(
        (status = 200, description = "The dispute", body = crate::disputes::view::DisputeObject),
        super::problems::DisputeNotFoundProblems,
    )
)]
pub async fn get(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    _: NoQuery,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id::<DisputeId>(&path)?;
    Ok(json(disputes::get_dispute(&state, &merchant, id).await?))
}

/// Save evidence on a `needs_response` dispute; with `"submit": true` send it to the
/// provider (the dispute moves to `under_review`). Once per `Idempotency-Key`.
#[utoipa::path(
    post,
    path = "/v1/disputes/{id}",
    operation_id = "update_dispute",
    tag = "disputes",
    security(("api_key" = [])),
    params(
        ("id" = String, Path, description = "Dispute id (`dp_…`)"),
        crate::routes::openapi::IdempotencyKeyHeader,
    ),
    request_body(content = DisputeEvidence, content_type = "application/json"),
    responses(
        (status = 200, description = "The dispute with its evidence (and `under_review` if submitted)", body = crate::disputes::view::DisputeObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` when this is the stored response of an earlier request with the same key"))),
        (status = 202, description = "Submitted, the provider's answer not known yet: retry with the same key", body = crate::disputes::view::DisputeObject),
        super::problems::DisputeStepProblems,
    )
)]
pub async fn update(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let id = path_id::<DisputeId>(&path)?;
    let body = read_json_body(&req, payload).await?;
    let key = idempotency_key(&req)?;
    let evidence = DisputeEvidence::parse(&body)?;
    let answer =
        step::update_dispute(&state, &merchant, id, key, evidence, request_id(&req)).await?;
    Ok(answer.into_response())
}

/// Accept the loss of a `needs_response` dispute: it is `lost`. Once per `Idempotency-Key`.
#[utoipa::path(
    post,
    path = "/v1/disputes/{id}/close",
    operation_id = "close_dispute",
    tag = "disputes",
    security(("api_key" = [])),
    params(
        ("id" = String, Path, description = "Dispute id (`dp_…`)"),
        crate::routes::openapi::IdempotencyKeyHeader,
    ),
    request_body(content = Option<crate::routes::openapi::NoFields>, content_type = "application/json", description = "`{}`, or no body"),
    responses(
        (status = 200, description = "The dispute, `lost`", body = crate::disputes::view::DisputeObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` when this is the stored response of an earlier request with the same key"))),
        (status = 202, description = "The provider's answer not known yet: retry with the same key", body = crate::disputes::view::DisputeObject),
        super::problems::DisputeStepProblems,
    )
)]
pub async fn close(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let id = path_id::<DisputeId>(&path)?;
    let body = read_optional_json_body(&req, payload).await?;
    let key = idempotency_key(&req)?;
    parse_close(&body)?;
    let answer = step::close_dispute(&state, &merchant, id, key, request_id(&req)).await?;
    Ok(answer.into_response())
}
