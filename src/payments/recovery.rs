//! The recovery worker: finishes operations whose request died (kill -9, crash, lost
//! instance) or answered 202 and was never retried, and expires authorizations nobody
//! captured in time.
//!
//! Every instance runs one. Taking a row over is the same guarded update a retry uses
//! (`WHERE <unfinished> AND lease is free`), so of several workers (and retries) exactly
//! one owns a row at a time; resuming asks the provider again with the same idempotency
//! key, so it cannot move money twice. One loop serves every kind of operation through
//! [`operations::recover`].

use super::CreatePayment;
use super::authorization::{PaymentOperation, expire_authorizations};
use crate::error::ApiError;
use crate::operations::recover;
use crate::refunds::CreateRefund;
use crate::shutdown::Shutdown;
use crate::state::AppState;

pub async fn run(state: AppState, stop: Shutdown) {
    let mut ticks = actix_web::rt::time::interval(state.settings.recovery_interval);
    loop {
        tokio::select! {
            _ = stop.requested() => break,
            _ = ticks.tick() => {}
        }
        match recover_abandoned(&state).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(resumed = n, "recovery pass"),
            Err(e) => tracing::warn!(error = %e, "recovery pass failed"),
        }
    }
}

/// One pass over every kind of operation, then the authorizations that expired. Returns
/// how many were resumed or expired.
pub async fn recover_abandoned(state: &AppState) -> Result<usize, ApiError> {
    use crate::metrics::RecoveryAction;
    let resumed = recover::<CreatePayment>(state, RecoveryAction::PaymentResumed).await
        + recover::<CreateRefund>(state, RecoveryAction::RefundResumed).await
        + recover::<PaymentOperation>(state, RecoveryAction::OperationResumed).await;
    Ok(resumed + expire_authorizations(state).await?)
}
