//! The recovery worker: finishes payments whose request died (kill -9, crash, lost
//! instance) or answered 202 and was never retried.
//!
//! Every instance runs one. Taking a payment over is the same guarded update a retry uses
//! (`WHERE status = 'processing' AND lease is free`), so of several workers (and retries)
//! exactly one owns a payment at a time; resuming asks the provider again with the same
//! idempotency key, so it cannot charge twice.

use futures_util::future::join_all;

use super::{drive, lease};
use crate::db::payments as rows;
use crate::db::refunds as refund_rows;
use crate::domain::{new_lease_token, now};
use crate::error::ApiError;
use crate::metrics;
use crate::shutdown::Shutdown;
use crate::startup::AppState;

/// Payments taken over per pass; the rest wait for the next tick.
const BATCH: i64 = 20;

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

/// One pass over payments and refunds. Returns how many were resumed.
pub async fn recover_abandoned(state: &AppState) -> Result<usize, ApiError> {
    Ok(recover_payments(state).await? + recover_refunds(state).await?)
}

/// Pending refunds whose request died or answered 202: resumed with the same refund id as
/// the provider's idempotency key, so the money goes back at most once.
async fn recover_refunds(state: &AppState) -> Result<usize, ApiError> {
    let current = now();
    let idle_since = current - lease(state);
    let abandoned = state
        .db
        .run(move |conn| refund_rows::find_abandoned(conn, current, idle_since, BATCH))
        .await?;
    let mut count = 0;
    for row in abandoned {
        let id = row.id.clone();
        match crate::refunds::resume(state, row).await {
            Ok(Some(_)) => {
                tracing::info!(refund_id = %id, "recovery: resumed abandoned refund");
                metrics::recovery("refund_resumed");
                count += 1;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(refund_id = %id, error = %e, "recovery: resuming a refund failed")
            }
        }
    }
    Ok(count)
}

/// Takes over and resumes abandoned payments.
async fn recover_payments(state: &AppState) -> Result<usize, ApiError> {
    let current = now();
    let untouched_since = current - lease(state);
    let abandoned = state
        .db
        .run(move |conn| rows::find_abandoned(conn, current, untouched_since, BATCH))
        .await?;
    let resumed = join_all(abandoned.into_iter().map(|row| async move {
        let token = new_lease_token();
        let (id, t, lease) = (row.id.clone(), token.clone(), lease(state));
        let won = state
            .db
            .run(move |conn| rows::take_over(conn, &id, &t, now(), lease))
            .await?;
        if !won {
            return Ok::<bool, ApiError>(false);
        }
        tracing::info!(payment_id = %row.id, "recovery: resuming abandoned payment");
        drive(state, row, token).await.map(|_| true)
    }))
    .await;
    let mut count = 0;
    for outcome in resumed {
        match outcome {
            Ok(true) => {
                metrics::recovery("payment_resumed");
                count += 1;
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "recovery: resuming a payment failed"),
        }
    }
    Ok(count)
}
