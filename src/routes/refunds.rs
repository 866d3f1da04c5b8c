use actix_web::{HttpRequest, HttpResponse, web};

use super::input::{Query, idempotency_key, read_json_body};
use crate::auth::Authenticated;
use crate::domain::RefundId;
use crate::error::ApiError;
use crate::refunds::{self, NewRefund};
use crate::startup::AppState;

pub async fn create(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let body = read_json_body(&req, payload).await?;
    let key = idempotency_key(&req)?;
    let request = NewRefund::parse(&body)?;
    let answer = refunds::create_refund(&state, &merchant, path.into_inner(), key, request).await?;
    Ok(answer.into_response())
}

pub async fn list(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req, &["limit", "starting_after"])?;
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
            RefundId::parse(v).map(|id| id.to_string()).ok_or_else(|| {
                ApiError::invalid("starting_after", "`starting_after` must be a refund id")
            })
        })
        .transpose()?;
    let body =
        refunds::list_refunds(&state, &merchant, path.into_inner(), limit, starting_after).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(body))
}
