//! The expiry of authorizations nobody captured or canceled in time.

use super::operation::{CaptureOrCancel, expiry_cutoff, new_claim};
use super::request::{CancellationReason, NewCancel, Requested};
use crate::db::captures as rows;
use crate::domain::now;
use crate::error::ApiError;
use crate::operations;
use crate::state::AppState;

/// Authorizations expired per pass; the rest wait for the next one.
const EXPIRY_BATCH: i64 = 50;

/// Cancels authorizations nobody captured or canceled within `AUTHORIZATION_EXPIRY_MS`,
/// with `cancellation_reason: "expired"`, through the same cancel operation a merchant
/// uses (so the provider is asked once per cancel, and a capture racing the expiry is
/// decided by the same hold). Returns how many it canceled or left pending at the provider.
pub async fn expire_authorizations(state: &AppState) -> Result<usize, ApiError> {
    let Some(cutoff) = expiry_cutoff(&state.settings) else {
        return Ok(0);
    };
    let expired = state
        .db
        .run(move |conn| rows::find_expired(conn, cutoff, EXPIRY_BATCH))
        .await?;
    let mut count = 0;
    for (payment_id, merchant_id) in expired {
        if expire(state, &payment_id, &merchant_id).await {
            count += 1;
        }
    }
    Ok(count)
}

/// Cancels one expired authorization (`cancellation_reason: "expired"`); true if it is
/// canceled, or left pending at the provider.
pub(super) async fn expire(state: &AppState, payment_id: &str, merchant_id: &str) -> bool {
    // A key no client can send (a tab is not visible ASCII), new for each attempt: the
    // hold, not the key, decides whether this cancel may run.
    let key = format!(
        "authorization-expiry\t{payment_id}\t{}",
        now().and_utc().timestamp_millis()
    );
    let cancel = Requested::Cancel(NewCancel {
        cancellation_reason: Some(CancellationReason::Expired),
    });
    let claim = new_claim(state, merchant_id, payment_id, &key, &cancel);
    match operations::execute::<CaptureOrCancel>(state, claim, None).await {
        Ok(answer) if answer.status < 300 => {
            tracing::info!(%payment_id, status = answer.status, "authorization expired: canceled");
            crate::metrics::recovery(crate::metrics::RecoveryAction::AuthorizationExpired);
            true
        }
        Ok(answer) => {
            tracing::info!(%payment_id, status = answer.status, "authorization expiry refused");
            false
        }
        Err(e) => {
            tracing::warn!(%payment_id, error = %e, "expiring an authorization failed");
            false
        }
    }
}
