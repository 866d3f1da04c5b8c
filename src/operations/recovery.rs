//! The recovery worker: finishes work whose request died (kill -9, crash, lost instance)
//! or answered 202 and was never retried, with the same provider key as before, so nothing
//! moves twice.
//!
//! Every instance runs one. Taking a row over is the same guarded update a retry uses
//! (`WHERE <unfinished> AND lease is free`), so of several workers (and retries) exactly
//! one owns a row at a time. The kinds it serves are registered once, where the service is
//! put together ([`Recovery::resume`]), so this room knows no operation by name.

use std::rc::Rc;
use std::time::Duration;

use futures_util::future::{LocalBoxFuture, join_all};

use super::execute::resume_owned;
use super::operation::{Operation, lease_duration};
use crate::db::lease::{Leased, Recoverable};
use crate::domain::{new_lease_token, now};
use crate::error::ApiError;
use crate::idempotency::IdempotentRecord;
use crate::metrics;
use crate::state::AppState;

/// One step of a recovery pass: returns how many rows it finished.
type Step = Rc<dyn Fn(AppState) -> LocalBoxFuture<'static, usize>>;

/// What the recovery worker does on each pass, in order.
#[derive(Default, Clone)]
pub struct Recovery {
    steps: Vec<Step>,
}

impl Recovery {
    /// Resumes the abandoned rows of operation `O`, counted as `action`.
    pub fn resume<O>(self, action: metrics::RecoveryAction) -> Self
    where
        O: Operation<Row: Recoverable>,
    {
        self.then(move |state| async move { recover::<O>(&state, action).await })
    }

    /// Runs `step` after the steps before it (e.g. the expiry of authorizations, which is
    /// no abandoned row but is due all the same).
    pub fn then<F, Fut>(mut self, step: F) -> Self
    where
        F: Fn(AppState) -> Fut + 'static,
        Fut: std::future::Future<Output = usize> + 'static,
    {
        self.steps.push(Rc::new(move |state| Box::pin(step(state))));
        self
    }

    /// One pass of every step. Returns how many rows were finished.
    pub async fn pass(&self, state: &AppState) -> usize {
        let mut finished = 0;
        for step in &self.steps {
            finished += step(state.clone()).await;
        }
        finished
    }

    /// Runs a pass every `RECOVERY_INTERVAL_MS`, the first at once, until shutdown.
    pub fn spawn(self, state: &AppState) {
        let every = state.settings.recovery_interval;
        let worker = state.clone();
        state
            .shutdown
            .spawn_periodic("recovery", Duration::ZERO, every, move || {
                let (recovery, state) = (self.clone(), worker.clone());
                async move {
                    match recovery.pass(&state).await {
                        0 => {}
                        n => tracing::info!(resumed = n, "recovery pass"),
                    }
                }
            });
    }
}

/// Rows taken over per pass and kind; the rest wait for the next pass.
const RECOVERY_BATCH: i64 = 20;

/// For the recovery worker: takes over abandoned rows of `O` (their request died, or
/// answered 202 and was never retried) and drives each to an outcome, with the same
/// provider key as before, so nothing moves twice. Returns how many it resumed.
pub async fn recover<O>(state: &AppState, action: metrics::RecoveryAction) -> usize
where
    O: Operation<Row: Recoverable>,
{
    let action_name = action.as_str();
    let current = now();
    let idle_since = current - lease_duration(state);
    let abandoned = match state
        .db
        .run(move |conn| O::Row::find_abandoned(conn, current, idle_since, RECOVERY_BATCH))
        .await
    {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(action = action_name, error = %e, "recovery: listing abandoned rows failed");
            return 0;
        }
    };
    // Each row on a task of its own, as a request's operation is (`execute_boxed`): a pass
    // dropped at shutdown leaves no provider call it started unrecorded.
    let resumed = join_all(abandoned.into_iter().map(|row| {
        let state = state.clone();
        actix_web::rt::spawn(async move {
            let token = new_lease_token();
            let (claimed, t, lease) = (row.clone(), token.clone(), O::lease(&state, &row));
            let won = state
                .db
                .run(move |conn| claimed.take_over(conn, &t, now(), lease))
                .await?;
            if !won {
                return Ok::<bool, ApiError>(false);
            }
            tracing::info!(id = %row.record_id(), action = action_name, "recovery: resuming");
            resume_owned::<O>(&state, row, token, None)
                .await
                .map(|_| true)
        })
    }))
    .await;
    let mut count = 0;
    for outcome in resumed {
        let outcome = outcome
            .unwrap_or_else(|e| Err(ApiError::internal(format!("recovery task failed: {e}"))));
        match outcome {
            Ok(true) => {
                metrics::recovery(action);
                count += 1;
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(action = action_name, error = %e, "recovery: resuming failed"),
        }
    }
    count
}
