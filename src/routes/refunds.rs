use actix_web::{HttpRequest, HttpResponse, web};

use super::authenticate::Authenticated;
use super::input::{
    Query, idempotency_key, path_id, read_optional_json_body, request_id, sent_unless_replayed,
};
use crate::domain::{PaymentId, RefundId};
use crate::error::ApiError;
use crate::refunds::{self, NewRefund};
use crate::state::AppState;

/// Refund a succeeded payment, in full or in part; at most once per `Idempotency-Key`.
#[utoipa::path(
    post,
    path = "/v1/payments/{id}/refunds",
    operation_id = "create_refund",
    tag = "refunds",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Payment id (`pay_…`)"), crate::routes::openapi::IdempotencyKeyHeader),
    request_body(content = Option<NewRefund>, content_type = "application/json", description = "Optional: no body refunds all that is left"),
    responses(
        (status = 201, description = "Final: `succeeded`, or `failed`", body = crate::refunds::view::RefundObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` when this is the stored response of an earlier request with the same key"))),
        (status = 202, description = "Outcome not known yet: the refund is `pending` (its amount stays reserved); retry with the same key",
            body = crate::refunds::view::RefundObject),
        super::problems::RefundProblems,
    )
)]
pub async fn create(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let payment_id = path_id::<PaymentId>(&path)?;
    // Every field is optional: no body refunds all that is left.
    let body = read_optional_json_body(&req, payload).await?;
    let key = idempotency_key(&req)?;
    let sent = match sent_unless_replayed(&state, &merchant, refunds::RESOURCE, &key, &req, body) {
        Ok(sent) => sent,
        Err(replay) => return Ok(replay.into_response()),
    };
    let request = NewRefund::parse(&sent.body)?;
    let request_id = request_id(&req);
    let answer = refunds::create_refund(
        &state,
        &merchant,
        payment_id,
        key,
        request,
        request_id,
        Some(sent),
    )
    .await?;
    Ok(answer.into_response())
}

/// The payment's refunds, newest first.
#[utoipa::path(
    get,
    path = "/v1/payments/{id}/refunds",
    operation_id = "list_refunds",
    tag = "refunds",
    security(("api_key" = [])),
    params(
        ("id" = String, Path, description = "Payment id (`pay_…`)"),
        ("limit" = Option<i64>, Query, description = "1 to 100, default 10"),
        ("starting_after" = Option<String>, Query, description = "A refund id: the page after it"),
    ),
    responses(
        (status = 200, description = "A page of refunds", body = crate::refunds::view::RefundList),
        (status = 404, description = "`not_found`: no such payment for this merchant (or `id` is not a payment id), or `starting_after` names no refund of it", body = crate::error::Problem, content_type = "application/problem+json"),
        super::problems::ListProblems,
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let payment_id = path_id::<PaymentId>(&path)?;
    let query = Query::parse(&req, &["limit", "starting_after"])?;
    let limit = query.limit()?;
    let starting_after = query.starting_after("a refund id", |v| RefundId::parse(v).is_some())?;
    let body = refunds::list_refunds(&state, &merchant, payment_id, limit, starting_after).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(body))
}
