//! A duplicate of a request that another request (here or in another instance) has
//! claimed: replayed if final, taken over if nobody owns it, else waited for.

use std::future::Future;
use std::time::{Duration, Instant};

use super::answer::Answer;
use super::in_flight::{InFlight, RETRY_AFTER_SECS, wait_for_outcome};
use super::record::IdempotentRecord;
use crate::domain::{new_lease_token, now};
use crate::error::ApiError;

/// What a duplicate request ends with.
pub enum Followed<R> {
    /// A replay of the final answer, or the 202 of the in-process request it waited on.
    Answer(Answer),
    /// Nobody owned the record and this request took it over with this lease token:
    /// it must now drive the work itself.
    TakenOver(R, String),
    /// The request it waited on, in another instance, gave its lease up unfinished: it
    /// answered 202 (outcome unknown), and so does this duplicate, with the record as it
    /// is, as the duplicates waiting in that instance do.
    GivenUp(R),
}

/// Counts what a duplicate was told (replay or in use), for the metrics.
pub fn observe<R>(resource: &'static str, followed: &Result<Followed<R>, crate::error::ApiError>) {
    use crate::metrics::{IdempotencyOutcome, idempotency};
    match followed {
        Ok(Followed::Answer(answer)) if answer.replayed => {
            idempotency(resource, IdempotencyOutcome::Replayed)
        }
        Err(crate::error::ApiError::IdempotencyKeyInUse { .. }) => {
            idempotency(resource, IdempotencyOutcome::InUse)
        }
        _ => {}
    }
}

/// A duplicate of an existing record: replay it if final, take it over if nobody owns it,
/// otherwise wait up to `wait` for the request that owns it, then 409 with `Retry-After`.
/// If that request gives its lease up unfinished (it answered 202), the duplicate answers
/// 202 too ([`Followed::GivenUp`]) rather than take the record over: only a retry sent
/// after the 202 resumes it. A lease that ran out (its holder died) is taken over.
///
/// `take_over(row, token)` tries to take a free lease (a guarded update; true if won);
/// `reload(row)` reads the record again.
pub async fn follow<R, T, TF, L, LF>(
    inflight: &InFlight,
    wait: Duration,
    mut row: R,
    take_over: T,
    reload: L,
) -> Result<Followed<R>, ApiError>
where
    R: IdempotentRecord,
    T: Fn(&R, String) -> TF,
    TF: Future<Output = Result<bool, ApiError>>,
    L: Fn(&R) -> LF,
    LF: Future<Output = Result<R, ApiError>>,
{
    let deadline = Instant::now() + wait;
    let mut polling = None;
    // Whether this duplicate has found the record owned, and so waits on its owner.
    let mut waited = false;
    loop {
        if let Some(answer) = row.stored_answer() {
            return Ok(Followed::Answer(answer.replayed()));
        }
        if waited && row.lease_expires_at().is_none() {
            return Ok(Followed::GivenUp(row));
        }
        if row.lease_is_free(now()) {
            let token = new_lease_token();
            if take_over(&row, token.clone()).await? {
                tracing::info!(id = %row.record_id(), "unfinished request taken over");
                return Ok(Followed::TakenOver(row, token));
            }
        }
        waited = true;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(ApiError::IdempotencyKeyInUse {
                retry_after_secs: RETRY_AFTER_SECS,
            });
        }
        // Running in this process: wake exactly when it settles. It may end with 202
        // (outcome unknown); its duplicates answer 202 too rather than all retrying at once.
        if let Some(answer) = wait_for_outcome(inflight, row.record_id(), remaining).await {
            return Ok(Followed::Answer(answer.for_duplicate()));
        }
        if inflight.subscribe(row.record_id()).is_none() {
            // Running elsewhere (another instance), or it just ended: poll.
            let polling = polling.get_or_insert_with(|| inflight.start_polling());
            actix_web::rt::time::sleep(polling.interval().min(remaining)).await;
        }
        inflight.count_poll();
        row = reload(&row).await?;
    }
}

/// Keeps trying to store a final provider answer while the database is unavailable, for at
/// most `lease` (after that a retry or the recovery worker asks the provider again, with
/// the same key, and gets the same answer). `store` is one attempt.
pub async fn store_when_possible<F, Fut>(what: String, lease: Duration, mut store: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Answer, ApiError>>,
{
    let deadline = Instant::now() + lease;
    let mut pause = Duration::from_millis(200);
    while Instant::now() < deadline {
        actix_web::rt::time::sleep(pause).await;
        match store().await {
            Ok(_) => {
                tracing::info!(id = %what, "provider answer stored after the database came back");
                return;
            }
            Err(ApiError::ServiceUnavailable) => pause = (pause * 2).min(Duration::from_secs(2)),
            Err(e) => {
                tracing::warn!(id = %what, error = %e, "storing the provider's answer failed");
                return;
            }
        }
    }
}
