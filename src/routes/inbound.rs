//! `POST /v1/webhooks/provider`: the webhooks the payment provider sends us, read and handed
//! to [`crate::inbound`].

use actix_web::{HttpRequest, HttpResponse, web};

use super::input::{Repeated, header_once, read_body};
use crate::error::ApiError;
use crate::inbound::{self, SignedHeaders};
use crate::state::AppState;

/// The payment provider's events: authenticated by their signature, not by an API key.
/// Standard Webhooks v1: `webhook-signature` holds `v1,<base64 HMAC-SHA256>` entries over
/// `{webhook-id}.{webhook-timestamp}.{raw body}`; each event id is applied once.
#[utoipa::path(
    post,
    path = "/v1/webhooks/provider",
    operation_id = "receive_provider_webhook",
    tag = "webhooks",
    params(
        ("webhook-id" = String, Header, description = "The event id; a redelivery carries the same one"),
        ("webhook-timestamp" = i64, Header, description = "Unix seconds; more than 300 s off is refused"),
        ("webhook-signature" = String, Header, description = "Space-separated `v1,<base64>` entries"),
    ),
    request_body(content = ProviderEvent, content_type = "application/json"),
    responses(
        (status = 200, description = "Received (`duplicate` is true for a redelivery, which changes nothing)", body = Received),
        super::problems::ProviderWebhookProblems,
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
    let receipt = inbound::receive_provider_event(&state, headers, &body).await?;
    Ok(HttpResponse::Ok().json(Received {
        received: true,
        duplicate: receipt.duplicate,
    }))
}

/// An event of the provider, as its body is read once the signature has been checked.
// Only describes the body for the OpenAPI document: the raw bytes are parsed elsewhere.
#[derive(utoipa::ToSchema)]
#[expect(
    dead_code,
    reason = "documents the request body; the flow parses the raw bytes"
)]
struct ProviderEvent {
    /// `charge.succeeded`, `charge.failed`, `refund.succeeded`, `refund.failed`,
    /// `payout.paid`, `payout.failed`, `charge.dispute.created`, `charge.dispute.updated`,
    /// `charge.dispute.closed`; other types are recorded and answered 200.
    #[schema(example = "charge.succeeded")]
    r#type: String,
    /// When the provider made the event (RFC 3339).
    #[schema(example = "2026-11-22T06:00:00Z")]
    timestamp: Option<String>,
    /// What the event is about; an event without it is recorded and changes nothing.
    data: Option<ProviderEventData>,
}

/// `data` of a provider event: the charge fields for `charge.*`, the refund fields for
/// `refund.*`, the payout's for `payout.*`, the dispute's for `charge.dispute.*`. Every
/// field is optional here: an event missing what its type needs is recorded and changes
/// nothing. Fields not listed are ignored.
#[derive(utoipa::ToSchema)]
#[expect(
    dead_code,
    reason = "documents the request body; the flow parses the raw bytes"
)]
struct ProviderEventData {
    /// The provider's charge id.
    #[schema(example = "ch_0190a0b0c0d0e0f00000000000000000")]
    charge_id: Option<String>,
    /// Our id: the payment's (`pay_…`) for `charge.*` and `charge.dispute.created`, the
    /// refund's (`re_…`) for `refund.*`, the payout's (`po_…`) for `payout.*`.
    #[schema(example = "pay_0190a0b0c0d0e0f00000000000000000")]
    reference: Option<String>,
    #[schema(example = 2000)]
    amount: Option<i64>,
    #[schema(example = "usd")]
    currency: Option<String>,
    #[schema(example = "card_declined")]
    failure_code: Option<String>,
    #[schema(example = "Your card was declined.")]
    failure_message: Option<String>,
    /// The provider's refund id (`refund.*`).
    #[schema(example = "pr_0190a0b0c0d0e0f00000000000000000")]
    refund_id: Option<String>,
    /// The provider's payout id (`payout.*`).
    payout_id: Option<String>,
    /// The provider's dispute id (`charge.dispute.*`).
    #[schema(example = "du_0190a0b0c0d0e0f00000000000000000")]
    dispute_id: Option<String>,
    /// `under_review` (`charge.dispute.updated`), `won` or `lost` (`charge.dispute.closed`).
    status: Option<String>,
    /// Why the customer's bank disputed the charge (`charge.dispute.created`).
    reason: Option<String>,
    /// When evidence is due (`charge.dispute.created`, RFC 3339).
    evidence_due_by: Option<String>,
}

/// `{"received": true, "duplicate": …}`, in that order.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Received {
    received: bool,
    duplicate: bool,
}

/// A header sent at most once, as text; repeated or not visible ASCII is malformed (401).
fn single_header<'a>(req: &'a HttpRequest, name: &str) -> Result<Option<&'a str>, ApiError> {
    let Some(value) = header_once(req, name)
        .map_err(|Repeated| ApiError::InvalidSignature("each webhook header must be sent once"))?
    else {
        return Ok(None);
    };
    value
        .to_str()
        .map(Some)
        .map_err(|_| ApiError::InvalidSignature("webhook headers must be visible ASCII"))
}
