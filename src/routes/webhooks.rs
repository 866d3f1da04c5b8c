use actix_web::{HttpRequest, HttpResponse, web};

use super::input::read_body;
use crate::error::ApiError;
use crate::startup::AppState;
use crate::webhooks::{self, SignedHeaders};

/// `POST /v1/webhooks/provider`: authenticated by its signature, not by an API key.
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
#[derive(serde::Serialize)]
struct Received {
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
