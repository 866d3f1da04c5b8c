//! The steps of one request under the idempotency rules (see the diagram in the room's `mod.rs`).

use std::future::Future;
use std::time::Duration;

use futures_util::future::Either;

use super::operation::{Called, Claimed, Operation};
use super::settle::Settled;
use crate::db::DbError;
use crate::db::lease::Leased;
use crate::domain::RequestRef;
use crate::domain::now;
use crate::error::ApiError;
use crate::idempotency::{
    Answer, Followed, IdempotentRecord, Joined, Sent, follow, lead_or_join, observe, scope_key,
    store_when_possible,
};
use crate::metrics::{self, IdempotencyOutcome};
use crate::state::AppState;

/// Runs one request of operation `O` under the idempotency rules. `claim` is the row to insert,
/// built with a [`super::operation::Lease`]; `request` names the API request (for its events).
///
/// The row goes on the heap here, once: a future keeps its arguments for as long as it
/// runs, and a request's future runs until the provider answers, so a row passed by value
/// down the stages would be held several times over (half a kilobyte each) by every
/// request waiting on the provider.
pub fn execute<O: Operation>(
    state: &AppState,
    claim: O::Row,
    request: Option<RequestRef>,
) -> impl Future<Output = Result<Answer, ApiError>> + '_ {
    execute_boxed::<O>(state, Box::new(claim), request, None)
}

/// [`execute`] for a request whose bytes are known (an API request's; not a dashboard
/// form's): its final answer is remembered with them, so that a retry sent exactly alike is
/// replayed before it is parsed ([`crate::idempotency::FinalAnswers::answer_sent`], which
/// the route asks first).
pub fn execute_sent<O: Operation>(
    state: &AppState,
    claim: O::Row,
    request: Option<RequestRef>,
    sent: Option<Sent>,
) -> impl Future<Output = Result<Answer, ApiError>> + '_ {
    execute_boxed::<O>(state, Box::new(claim), request, sent)
}

/// [`execute`] with the row on the heap.
async fn execute_boxed<O: Operation>(
    state: &AppState,
    claim: Box<O::Row>,
    request: Option<RequestRef>,
    sent: Option<Sent>,
) -> Result<Answer, ApiError> {
    // Final answers never change: a key seen final here is answered from memory.
    if let Some(answer) = state.final_answers.answer(
        O::resource(&claim),
        O::scope(&claim),
        claim.merchant_id(),
        claim.idempotency_key(),
        claim.fingerprint(),
    ) {
        return answer;
    }
    // The rest on a task of its own, which the request only waits for: a client that hangs
    // up drops the request's future, and with it whatever that future was awaiting. Dropped
    // between the claim's commit and the provider call, the claim stood with nobody to drive
    // it until its lease ran out, and retries were answered 409 meanwhile; dropped while
    // leading the key in this process, its duplicates lost their leader.
    let task = actix_web::rt::spawn(settle_key::<O>(state.clone(), claim, request, sent));
    task.await
        .map_err(|e| ApiError::internal(format!("operation task failed: {e}")))?
}

/// Leads the key in this process (or follows its leader), claims it in the database (or
/// follows the row that has it), and remembers the final answer.
async fn settle_key<O: Operation>(
    state: AppState,
    claim: Box<O::Row>,
    request: Option<RequestRef>,
    sent: Option<Sent>,
) -> Result<Answer, ApiError> {
    let state = &state;
    let (resource, scope) = (O::resource(&claim), O::scope(&claim));
    let (merchant, key, fingerprint) = (
        claim.merchant_id().to_owned(),
        claim.idempotency_key().to_owned(),
        claim.fingerprint().to_owned(),
    );
    let answers = &state.final_answers;
    let in_process = scope_key(scope, &merchant, &key);
    let wait = state.settings.idempotency_wait;
    // Boxed, and awaited before the match rather than in it: a match keeps what it matches
    // on until it ends, and this one lasts as long as the provider call.
    let joined = Box::pin(lead_or_join(
        &state.inflight,
        resource,
        &in_process,
        &fingerprint,
        wait,
    ))
    .await?;
    let (guard, wait_left) = match joined {
        Joined::Answer(answer) => return Ok(answer),
        Joined::Lead { guard, wait_left } => (Some(guard), wait_left),
        Joined::Apart { wait_left } => (None, wait_left),
    };
    let answer = claim_or_follow::<O>(state, claim, request, wait_left).await?;
    // In memory before the lead is given up, so that no later duplicate here finds
    // neither.
    answers.remember(
        scope,
        &merchant,
        &key,
        (&fingerprint, sent.as_ref()),
        &answer,
    );
    if let Some(guard) = guard {
        guard.settle(&answer);
    }
    Ok(answer)
}

async fn claim_or_follow<O: Operation>(
    state: &AppState,
    claim: Box<O::Row>,
    request: Option<RequestRef>,
    wait: Duration,
) -> Result<Answer, ApiError> {
    let resource = O::resource(&claim);
    // The database decides the winner: of all requests with this key, exactly one insert
    // succeeds, and only that request calls the provider.
    // Boxed, like the other stages below: a request's future is as large as its largest
    // stage for as long as it runs, and most of its life is spent waiting on the provider
    // with small state; boxed, a stage takes its space only while it runs.
    // Decided in a match that ends before the long wait, which the match only sets up: a
    // match keeps what it matches on (here the claimed row) until it ends.
    let next = match Box::pin(O::run_claim(state, (*claim).clone())).await {
        Ok(Claimed::Won(row, call)) => {
            metrics::idempotency(resource, IdempotencyOutcome::Created);
            tracing::info!(id = %row.record_id(), "{resource} claimed");
            let token = row.lease_token().unwrap_or_default().to_owned();
            // On this request's own task already (`execute_boxed`): driven here.
            Either::Left(Box::pin(drive::<O>(
                state.clone(),
                Box::new(row),
                token,
                call,
                request,
                Driver::Claimant,
            )))
        }
        Ok(Claimed::Answered(answer)) => {
            metrics::idempotency(resource, IdempotencyOutcome::Created);
            tracing::info!(id = %claim.record_id(), status = answer.status, "{resource} answered at the claim");
            return Ok(answer);
        }
        Ok(Claimed::Unstored(refusal)) => return Err(refusal),
        Err(DbError::UniqueViolation(_)) => {
            Either::Right(Box::pin(follow_key::<O>(state, claim, request, wait)))
        }
        Err(e) => return Err(e.into()),
    };
    next.await
}

/// Another request has the key: its row is replayed, taken over or waited for, unless
/// this request differs from it (a reused key).
async fn follow_key<O: Operation>(
    state: &AppState,
    claim: Box<O::Row>,
    request: Option<RequestRef>,
    wait: Duration,
) -> Result<Answer, ApiError> {
    // The row goes to the lookup: only its fingerprint is needed after.
    let fingerprint = claim.fingerprint().to_owned();
    let existing = Box::pin(state.db.run(move |conn| O::find_by_key(conn, &claim)))
        .await?
        .ok_or_else(|| ApiError::internal("idempotency key conflict without a stored row"))?;
    if existing.fingerprint() != fingerprint {
        metrics::idempotency(O::resource(&existing), IdempotencyOutcome::Reused);
        return Err(ApiError::IdempotencyKeyReused);
    }
    follow_existing::<O>(state, existing, request, wait).await
}

/// A duplicate of an existing row: replay it if final, take it over if nobody owns it,
/// otherwise wait up to `wait` (what is left of `IDEMPOTENCY_WAIT_MS`) for its owner.
async fn follow_existing<O: Operation>(
    state: &AppState,
    row: O::Row,
    request: Option<RequestRef>,
    wait: Duration,
) -> Result<Answer, ApiError> {
    let resource = O::resource(&row);
    let followed = follow(
        &state.inflight,
        wait,
        row,
        |row, token| {
            let (row, lease) = (row.clone(), O::lease(state, row));
            async move {
                Ok(state
                    .db
                    .run(move |conn| row.take_over(conn, &token, now(), lease))
                    .await?)
            }
        },
        |row| {
            let row = row.clone();
            async move {
                state
                    .db
                    .run(move |conn| row.reload(conn))
                    .await?
                    .ok_or_else(|| ApiError::internal("row vanished while waiting"))
            }
        },
    )
    .await;
    observe(resource, &followed);
    match followed? {
        Followed::Answer(answer) => Ok(answer),
        Followed::TakenOver(row, token) => {
            Box::pin(resume_owned::<O>(state, row, token, request)).await
        }
        Followed::GivenUp(row) => {
            let body = state
                .db
                .run(move |conn| O::render_unfinished(conn, &row))
                .await?;
            Ok(Answer::new(202, body))
        }
    }
}

/// Who drives a row, which decides whether an answer another path stored first is a replay
/// to it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Driver {
    /// The request that claimed the key: the first to answer it, even if another path (a
    /// webhook) stored its final answer first, so never a replay.
    Claimant,
    /// A duplicate or the recovery worker that took the row over: an answer stored first by
    /// another path (the request that claimed it, a webhook) is that path's, a replay.
    TookOver,
}

impl Driver {
    /// The answer to this driver: `stored_here` says whether its own finish stored it.
    fn answer(self, answer: Answer, stored_here: bool) -> Answer {
        if stored_here || self == Self::Claimant {
            answer
        } else {
            answer.replayed()
        }
    }
}

/// Drives a row whose lease this caller has just taken: a request's take-over (on the
/// request's own task, `execute_boxed`) or the recovery worker's (on a task of its own per
/// row, `recover`), so that nobody waiting for it can abandon it half-way.
pub(super) async fn resume_owned<O: Operation>(
    state: &AppState,
    row: O::Row,
    token: String,
    request: Option<RequestRef>,
) -> Result<Answer, ApiError> {
    let call = {
        let row = row.clone();
        state.db.run(move |conn| O::call_for(conn, &row)).await?
    };
    Box::pin(drive::<O>(
        state.clone(),
        Box::new(row),
        token,
        call,
        request,
        Driver::TookOver,
    ))
    .await
}

/// Holds the lease of `row`: asks the provider (our row id is its idempotency key, so
/// asking again can never move money twice) and records what it said. Runs on a task that
/// no client can drop (`execute_boxed`, `recover`); owns what it needs, the row boxed.
async fn drive<O: Operation>(
    state: AppState,
    row: Box<O::Row>,
    token: String,
    call: O::Call,
    request: Option<RequestRef>,
    driver: Driver,
) -> Result<Answer, ApiError> {
    let state = &state;
    let resource = O::resource(&row);
    let inflight = state.inflight.drive(row.record_id());
    // Not matched on directly: the match would keep the call's future until it ends.
    let called = O::call(state, &row, &call).await;
    let answer = match called {
        Ok(Called::Final(outcome)) => {
            match Box::pin(finish::<O>(
                state,
                (*row).clone(),
                outcome.clone(),
                request.clone(),
                driver,
            ))
            .await
            {
                Err(ApiError::ServiceUnavailable) => {
                    // The provider answered but the database is away: this request says
                    // 503, and the answer is kept to be stored as soon as the database is
                    // back, so retries then get the replay rather than wait out the lease.
                    let (state, id) = (state.clone(), row.record_id().to_owned());
                    actix_web::rt::spawn(async move {
                        let lease = state.settings.processing_lease;
                        store_when_possible(id, lease, || {
                            finish::<O>(
                                &state,
                                (*row).clone(),
                                outcome.clone(),
                                request.clone(),
                                driver,
                            )
                        })
                        .await
                    });
                    return Err(ApiError::ServiceUnavailable);
                }
                finished => finished?,
            }
        }
        Ok(Called::Pending(provider_ref)) => {
            tracing::info!(id = %row.record_id(), provider_ref, "{resource} pending at the provider");
            Box::pin(release::<O>(state, *row, token, provider_ref, driver)).await?
        }
        Err(unknown) => {
            tracing::warn!(id = %row.record_id(), error = %unknown, "{resource} outcome unknown");
            Box::pin(release::<O>(state, *row, token, None, driver)).await?
        }
    };
    inflight.settle(&answer);
    Ok(answer)
}

/// Records a final provider answer. If another path (a webhook, another instance) finished
/// the row first, its stored answer is the answer, a replay to a driver that took the row
/// over ([`Driver`]).
fn finish<O: Operation>(
    state: &AppState,
    row: O::Row,
    outcome: O::Outcome,
    request: Option<RequestRef>,
    driver: Driver,
) -> impl Future<Output = Result<Answer, ApiError>> + 'static {
    let state = state.clone();
    async move {
        let (finished, ours) = match O::run_finish(&state, row, outcome, request).await? {
            Settled::Applied(row) => (row, true),
            Settled::AlreadyFinal(row) => (row, false),
            Settled::Unknown => return Err(ApiError::internal("operation row vanished")),
        };
        tracing::info!(id = %finished.record_id(), here = ours, "{} finished", O::resource(&finished));
        let answer = finished
            .stored_answer()
            .ok_or_else(|| ApiError::internal("operation not final after finishing"))?;
        Ok(driver.answer(answer, ours))
    }
}

/// The outcome is not known yet: give up the lease so a retry or the recovery worker can
/// resume at once, and answer 202. Unless it is known after all: a webhook may have
/// finished the row while the provider's `pending` (or a timeout) was on its way, and then
/// the answer is the final one it stored, 201 like every retry's.
async fn release<O: Operation>(
    state: &AppState,
    row: O::Row,
    token: String,
    provider_ref: Option<String>,
    driver: Driver,
) -> Result<Answer, ApiError> {
    let mut row = row;
    let answer = state
        .db
        .run(move |conn| {
            let ours = row.release(conn, &token, provider_ref.as_deref(), now())?;
            let body = O::render_unfinished(conn, &row)?;
            // Not ours: someone else had the row meanwhile, and may have finished it (its
            // answer, as in `finish`).
            let finished = if ours {
                None
            } else {
                row.reload(conn)?
                    .and_then(|now| now.stored_answer())
                    .map(|answer| driver.answer(answer, false))
            };
            Ok(finished.unwrap_or_else(|| Answer::new(202, body)))
        })
        .await?;
    Ok(answer)
}
