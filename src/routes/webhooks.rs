use actix_web::{HttpRequest, HttpResponse, web};

use super::input::read_body;
use crate::error::ApiError;
use crate::startup::AppState;
use crate::webhooks::{self, SignedHeaders};

/// `POST /v1/webhooks/provider`: authenticated by its signature, not by an API key.
/// Standard Webhooks v1: `webhook-signature` holds `v1,<base64 HMAC-SHA256>` entries over
/// `{webhook-id}.{webhook-timestamp}.{raw body}`; each event id is applied once.
#[utoipa::path(
    post,
    path = "/v1/webhooks/provider",
    tag = "webhooks",
    params(
        ("webhook-id" = String, Header, description = "The event id; a redelivery carries the same one"),
        ("webhook-timestamp" = i64, Header, description = "Unix seconds; more than 300 s off is refused"),
        ("webhook-signature" = String, Header, description = "Space-separated `v1,<base64>` entries"),
    ),
    request_body(content = serde_json::Value, content_type = "application/json",
        description = "`{\"type\": \"charge.succeeded|charge.failed|refund.succeeded|refund.failed|…\", \"timestamp\": …, \"data\": {…}}`"),
    responses(
        (status = 200, description = "Received (`duplicate` is true for a redelivery, which changes nothing)", body = Received),
        (status = 400, description = "`invalid_request`: signed, but not an event", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`invalid_signature`", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`webhook_id_conflict`: the id was received with another body", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`service_unavailable`: nothing was recorded; redeliver", body = crate::error::Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying"))),
    )
)]
pub async fn provider(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    // The size limit applies before anything is hashed.
    let body = read_body(&req, payload).await?;
    let headers = SignedHeaders {
        id: single_header(&req, "webhook-id")?,
        timestamp: single_header(&req, "webhook-timestamp")?,
        signature: single_header(&req, "webhook-signature")?,
    };
    let receipt = webhooks::receive_provider_event(&state, headers, &body).await?;
    Ok(HttpResponse::Ok().json(Received {
        received: true,
        duplicate: receipt.duplicate,
    }))
}

/// `{"received": true, "duplicate": …}`, in that order.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Received {
    received: bool,
    duplicate: bool,
}

/// A header sent at most once, as text; repeated or not visible ASCII is malformed (401).
fn single_header<'a>(req: &'a HttpRequest, name: &str) -> Result<Option<&'a str>, ApiError> {
    let mut values = req.headers().get_all(name);
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::InvalidSignature(
            "each webhook header must be sent once",
        ));
    }
    first
        .to_str()
        .map(Some)
        .map_err(|_| ApiError::InvalidSignature("webhook headers must be visible ASCII"))
}
