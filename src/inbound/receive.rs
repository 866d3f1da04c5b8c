//! One delivery of a provider event: signature checked on the raw bytes, then the event id
//! recorded and its effect applied in one transaction, or recognised as a redelivery.

use crate::body::parse_provider_json;
use crate::db::webhook_events::{self as events, Recorded, WebhookEventRow};
use crate::domain::{now, sha256_hex};
use crate::error::ApiError;
use crate::metrics::{self, WebhookOutcome};
use crate::signing::{self, SignedHeaders};
use crate::state::AppState;

use super::apply::{apply, log_applied};
use super::event::{Envelope, effect_of};

/// What the endpoint answers: `{"received": true, "duplicate": …}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    pub duplicate: bool,
}

/// Verifies, records and applies one delivery. `body` is the raw body, unparsed.
pub async fn receive_provider_event(
    state: &AppState,
    headers: SignedHeaders<'_>,
    body: &[u8],
) -> Result<Receipt, ApiError> {
    let outcome = receive(state, headers, body).await;
    metrics::webhook(match &outcome {
        Ok(Receipt { duplicate: false }) => WebhookOutcome::Accepted,
        Ok(Receipt { duplicate: true }) => WebhookOutcome::Duplicate,
        Err(_) => WebhookOutcome::Rejected,
    });
    outcome
}

async fn receive(
    state: &AppState,
    headers: SignedHeaders<'_>,
    body: &[u8],
) -> Result<Receipt, ApiError> {
    let secrets = signing::parse_secrets(&state.settings.webhook_secrets);
    let id = signing::verify(&secrets, headers, body, chrono::Utc::now().timestamp())
        .map_err(|e| {
            tracing::warn!(reason = e.reason(), "webhook refused");
            ApiError::InvalidSignature(e.reason())
        })?
        .to_owned();

    // The same parser as every other request body, but text no column may hold (a NUL
    // would make the database refuse the event forever) becomes U+FFFD instead of a 400:
    // the provider's event has happened, and must be recorded and applied.
    let envelope: Envelope = serde_json::from_value(parse_provider_json(body)?).map_err(|_| {
        ApiError::InvalidRequest {
            detail: "the event is not a JSON object with a string `type`".to_owned(),
            param: None,
        }
    })?;
    let event = WebhookEventRow {
        id: id.clone(),
        body_sha256: sha256_hex(body),
        event_type: envelope.kind.chars().take(255).collect(),
        received_at: now(),
    };
    let event_type = event.event_type.clone();
    let effect = effect_of(envelope);

    let stored = event.clone();
    let webhook_id = id.clone();
    let policy = state.settings.ledger;
    let recorded = state
        .db
        .run(move |conn| {
            events::record_and_apply(conn, &stored, |conn| {
                apply(conn, &webhook_id, effect, stored.received_at, &policy)
            })
        })
        .await
        .map_err(|e| {
            // Rolled back: neither the event nor its effect is stored, and the 5xx makes
            // the provider deliver it again.
            tracing::error!(webhook_id = %id, %event_type, error = %e, "webhook not applied");
            ApiError::from(e)
        })?;
    match recorded {
        Recorded::Applied(applied) => {
            log_applied(&id, &event_type, &applied);
            Ok(Receipt { duplicate: false })
        }
        Recorded::AlreadyRecorded(existing) if existing.body_sha256 == event.body_sha256 => {
            tracing::info!(webhook_id = %id, %event_type, "webhook redelivered; already applied");
            Ok(Receipt { duplicate: true })
        }
        Recorded::AlreadyRecorded(_) => {
            tracing::warn!(webhook_id = %id, %event_type, "webhook id reused with a different body");
            Err(ApiError::WebhookIdConflict)
        }
    }
}
