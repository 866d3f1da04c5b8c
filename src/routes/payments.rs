use actix_web::{HttpRequest, HttpResponse, web};

use super::authenticate::Authenticated;
use super::input::{
    NoQuery, Query, idempotency_key, path_id, read_json_body, read_optional_json_body, request_id,
    sent_unless_replayed,
};
use crate::db::payments::ListFilter;
use crate::domain::PaymentId;
use crate::error::ApiError;
use crate::payments::authorization::{self, NewCancel, NewCapture, Requested};
use crate::payments::request::MAX_CUSTOMER_ID_CHARS;
use crate::payments::{self, NewPayment, PaymentStatus};
use crate::state::AppState;

/// Create a payment: charges at most once per `Idempotency-Key`, however often it is sent.
#[utoipa::path(
    post,
    path = "/v1/payments",
    operation_id = "create_payment",
    tag = "payments",
    security(("api_key" = [])),
    params(crate::routes::openapi::IdempotencyKeyHeader),
    request_body(content = NewPayment, content_type = "application/json"),
    responses(
        (status = 201, description = "Final: `succeeded`, `requires_capture` for a manual one, or `failed` for a decline (a decline is a created payment)",
            body = crate::payments::view::PaymentObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` when this is the stored response of an earlier request with the same key"))),
        (status = 202, description = "Outcome not known yet: the payment is `processing`; retry with the same key",
            body = crate::payments::view::PaymentObject),
        super::problems::CreatePaymentProblems,
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
    let sent = match sent_unless_replayed(&state, &merchant, payments::RESOURCE, &key, &req, body) {
        Ok(sent) => sent,
        Err(replay) => return Ok(replay.into_response()),
    };
    let request = NewPayment::parse(&sent.body)?;
    let request_id = request_id(&req);
    let answer =
        payments::create_payment(&state, &merchant, key, request, request_id, Some(sent)).await?;
    Ok(answer.into_response())
}

/// Capture an authorized (`requires_capture`) payment, in full or in part; at most once per
/// payment, whatever the keys.
#[utoipa::path(
    post,
    path = "/v1/payments/{id}/capture",
    operation_id = "capture_payment",
    tag = "payments",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Payment id (`pay_…`)"), crate::routes::openapi::IdempotencyKeyHeader),
    request_body(content = Option<NewCapture>, content_type = "application/json", description = "Optional: no body captures all of `amount_capturable`"),
    responses(
        (status = 200, description = "Captured: the payment is `succeeded`, `amount_captured` is what was charged, `amount_capturable` 0",
            body = crate::payments::view::PaymentObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` when this is the stored response of an earlier request with the same key"))),
        (status = 202, description = "Outcome not known yet: the payment as it is; retry with the same key",
            body = crate::payments::view::PaymentObject),
        super::problems::CaptureProblems,
    )
)]
pub async fn capture(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let parse = |body: &[u8]| NewCapture::parse(body).map(Requested::Capture);
    operate(&state, &merchant, &req, &path, payload, parse).await
}

/// Cancel an authorized (`requires_capture`) payment: the hold is released, nothing is
/// charged; at most once per payment, whatever the keys.
#[utoipa::path(
    post,
    path = "/v1/payments/{id}/cancel",
    operation_id = "cancel_payment",
    tag = "payments",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Payment id (`pay_…`)"), crate::routes::openapi::IdempotencyKeyHeader),
    request_body(content = Option<NewCancel>, content_type = "application/json", description = "Optional"),
    responses(
        (status = 200, description = "Canceled: the payment is `canceled`, `amount_capturable` 0",
            body = crate::payments::view::PaymentObject,
            headers(("Idempotent-Replayed" = bool, description = "`true` when this is the stored response of an earlier request with the same key"))),
        (status = 202, description = "Outcome not known yet: the payment as it is; retry with the same key",
            body = crate::payments::view::PaymentObject),
        super::problems::CancelProblems,
    )
)]
pub async fn cancel(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let parse = |body: &[u8]| NewCancel::parse(body).map(Requested::Cancel);
    operate(&state, &merchant, &req, &path, payload, parse).await
}

/// A capture or a cancel: the payment id, the optional body, the key, then the operation.
async fn operate(
    state: &AppState,
    merchant: &crate::auth::Merchant,
    req: &HttpRequest,
    path: &str,
    payload: web::Payload,
    parse: impl FnOnce(&[u8]) -> Result<Requested, ApiError>,
) -> Result<HttpResponse, ApiError> {
    let payment_id = path_id::<PaymentId>(path)?;
    let body = read_optional_json_body(req, payload).await?;
    let key = idempotency_key(req)?;
    let requested = parse(&body)?;
    let request_id = request_id(req);
    let answer =
        authorization::operate(state, merchant, payment_id, key, requested, request_id).await?;
    Ok(answer.into_response())
}

/// A payment as it is now.
#[utoipa::path(
    get,
    path = "/v1/payments/{id}",
    operation_id = "get_payment",
    tag = "payments",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Payment id (`pay_…`)")),
    responses(
        (status = 200, description = "The payment", body = crate::payments::view::PaymentObject),
        super::problems::PaymentProblems,
    )
)]
pub async fn get(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    _: NoQuery,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path_id::<PaymentId>(&path)?;
    let body = payments::get_payment(&state, &merchant, id).await?;
    Ok(json(body))
}

/// Payments, newest first.
#[utoipa::path(
    get,
    path = "/v1/payments",
    operation_id = "list_payments",
    tag = "payments",
    security(("api_key" = [])),
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "Page size, 1 to 100 (default 10)"),
        ("starting_after" = Option<String>, Query, description = "A payment id: the page starts after it"),
        ("status" = Option<PaymentStatus>, Query, description = "Only payments in this status"),
        ("customer_id" = Option<String>, Query, description = "Only this customer's payments"),
    ),
    responses(
        (status = 200, description = "A page of payments", body = crate::payments::view::PaymentList),
        (status = 404, description = "`not_found`: `starting_after` names no payment of yours", body = crate::error::Problem, content_type = "application/problem+json"),
        super::problems::ListProblems,
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req, &["limit", "starting_after", "status", "customer_id"])?;
    let limit = query.limit()?;
    let starting_after = query.starting_after("a payment id", |v| PaymentId::parse(v).is_some())?;
    let status = query
        .get("status")
        .map(|v| {
            PaymentStatus::parse(v).ok_or_else(|| {
                ApiError::invalid(
                    "status",
                    "`status` must be processing, requires_capture, succeeded, failed or \
                     canceled",
                )
            })
        })
        .transpose()?;
    let filter = ListFilter {
        limit,
        starting_after,
        status,
        customer_id: query
            .text("customer_id", MAX_CUSTOMER_ID_CHARS)?
            .map(str::to_owned),
        ..ListFilter::default()
    };
    let body = payments::list_payments(&state, &merchant, filter).await?;
    Ok(json(body))
}

fn json(body: String) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(body)
}
