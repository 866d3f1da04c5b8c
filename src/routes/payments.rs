use actix_web::{HttpRequest, HttpResponse, web};

use super::input::{Query, idempotency_key, read_json_body};
use crate::auth::Authenticated;
use crate::db::payments::ListFilter;
use crate::domain::PaymentId;
use crate::error::ApiError;
use crate::payments::{self, NewPayment, PaymentStatus};
use crate::startup::AppState;

pub async fn create(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_json_body(&req, payload).await?;
    let key = idempotency_key(&req)?;
    let request = NewPayment::parse(&body)?;
    let answer = payments::create_payment(&state, &merchant, key, request).await?;
    Ok(answer.into_response())
}

pub async fn get(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let body = payments::get_payment(&state, &merchant, path.into_inner()).await?;
    Ok(json(body))
}

pub async fn list(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req, &["limit", "starting_after", "status", "customer_id"])?;
    let limit = match query.get("limit") {
        None => 10,
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| {
                ApiError::invalid("limit", "`limit` must be an integer from 1 to 100")
            })?,
    };
    let starting_after = query
        .get("starting_after")
        .map(|v| {
            PaymentId::parse(v).map(|id| id.to_string()).ok_or_else(|| {
                ApiError::invalid("starting_after", "`starting_after` must be a payment id")
            })
        })
        .transpose()?;
    let status = query
        .get("status")
        .map(|v| {
            PaymentStatus::parse(v)
                .map(|s| s.as_str().to_owned())
                .ok_or_else(|| {
                    ApiError::invalid("status", "`status` must be processing, succeeded or failed")
                })
        })
        .transpose()?;
    let filter = ListFilter {
        limit,
        starting_after,
        status,
        customer_id: query.get("customer_id").map(str::to_owned),
    };
    let body = payments::list_payments(&state, &merchant, filter).await?;
    Ok(json(body))
}

fn json(body: String) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(body)
}
