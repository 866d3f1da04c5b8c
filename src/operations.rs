//! The one mechanism every money operation runs on: payments, refunds, captures and
//! cancels each implement [`Operation`] (their row, their guard, their provider call, their
//! final state) and get the idempotency rules from the functions below.
//!
//! ```text
//! execute ─▶ known final answer here? ─▶ replay / 422
//!         ─▶ same key led here?         ─▶ wait for its leader (replay, or its 202)
//!         ─▶ lead the key here (one request per key and instance goes on below)
//!         ─▶ claim: Operation::claim in one transaction (the insert decides the winner,
//!                   then the operation's own guard, e.g. money reserved)
//!               │ won ─────▶ drive: Operation::call at the provider, our row id as its
//!               │                   idempotency key, no DB connection held
//!               │                     final   ─▶ finish: Operation::finish (guarded, stores
//!               │                                the answer every retry replays)
//!               │                     unknown ─▶ release: lease given up, 202
//!               │ refused ─▶ the stored 409/422 (the key's final answer)
//!               └ lost ────▶ follow: 422 if another request, replay if final, wait or
//!                            take over a free lease ─▶ drive
//! recover ─▶ Operation::find_abandoned ─▶ take over ─▶ drive (the worker, per kind)
//! ```

use std::future::Future;
use std::time::Duration;

use futures_util::future::{Either, join_all};

use crate::config::Settings;
use crate::db::{DbConnection, DbError};
use crate::domain::{Timestamp, new_lease_token, now};
use crate::error::ApiError;
use crate::idempotency::{
    Answer, Followed, IdempotentRecord, Joined, follow, lead_or_join, observe, scope_key,
    store_when_possible,
};
use crate::metrics::{self, IdempotencyOutcome};
use crate::provider::OutcomeUnknown;
use crate::state::AppState;

/// The API request that asked for a change: named by the events it causes. Changes made by
/// a provider webhook, the recovery worker or the expiry of an authorization have none.
pub use crate::events::RequestRef;

/// What a claim decided.
pub enum Claimed<R, C> {
    /// The key is ours and the operation's guard let it through: call the provider with
    /// this request.
    Won(R, C),
    /// The key is ours but the operation cannot run (409/422): stored as the key's final
    /// answer, replayed from now on.
    Refused(Answer),
}

/// What the provider said.
pub enum Called<O> {
    /// A final outcome: finish the operation with it.
    Final(O),
    /// Accepted but not finished (an async charge, a pending refund): a webhook or a later
    /// call finishes it. Carries the provider's reference to keep meanwhile.
    Pending(Option<String>),
}

/// What giving up a lease found ([`Operation::release`]).
pub struct Released {
    /// The lease was still this request's. If not, a webhook, the recovery worker or
    /// another request had the row meanwhile, and may have finished it.
    pub ours: bool,
    /// The 202 body: the object as it is.
    pub body: String,
}

/// A lease for a new claim: the token that owns it and until when.
pub struct Lease {
    pub token: String,
    pub at: Timestamp,
    pub expires_at: Timestamp,
}

impl Lease {
    pub fn new(state: &AppState) -> Self {
        let at = now();
        Self {
            token: new_lease_token(),
            at,
            expires_at: at + lease_duration(state),
        }
    }
}

pub fn lease_duration(state: &AppState) -> chrono::Duration {
    chrono::Duration::from_std(state.settings.processing_lease).unwrap_or(chrono::Duration::MAX)
}

/// One kind of idempotent money operation: only what differs between kinds. Every
/// database function runs inside one `Db::run` (one connection, no provider call).
#[allow(async_fn_in_trait)] // static dispatch only, on actix's single-threaded runtime
pub trait Operation: 'static {
    /// The row that is its own idempotency record.
    type Row: IdempotentRecord + Clone + Send + 'static;
    /// What the provider is asked. Known at the claim; rebuilt from the database when a
    /// retry or the recovery worker resumes.
    type Call: Clone + Send + 'static;
    /// The provider's final answer.
    type Outcome: Clone + Send + 'static;

    /// Names the operation in idempotency scopes, logs and metrics.
    fn resource(row: &Self::Row) -> &'static str;

    /// Inserts the claim (a unique violation means another request has the key) and, in
    /// the same transaction, applies the operation's guard, which may depend on the
    /// settings (an authorization's expiry).
    fn claim(
        conn: &mut DbConnection,
        claim: &Self::Row,
        settings: &Settings,
    ) -> diesel::QueryResult<Claimed<Self::Row, Self::Call>>;

    /// Runs [`Operation::claim`]: by default alone, on a pooled connection. An operation
    /// may instead coalesce concurrent claims into one statement (group commit): a claim it
    /// did not insert answers `UniqueViolation`, like a lost single insert.
    async fn run_claim(
        state: &AppState,
        claim: Self::Row,
    ) -> Result<Claimed<Self::Row, Self::Call>, DbError> {
        claim_alone::<Self>(state, claim).await
    }

    /// Runs [`Operation::finish`]: by default alone; or coalesced, like [`Self::run_claim`].
    async fn run_finish(
        state: &AppState,
        row: Self::Row,
        outcome: Self::Outcome,
        request: Option<RequestRef>,
    ) -> Result<Self::Row, DbError> {
        state
            .db
            .run(move |conn| Self::finish(conn, &row, &outcome, request.as_ref()))
            .await
    }

    /// The row holding the claim's key (merchant, scope, key).
    fn find_by_key(
        conn: &mut DbConnection,
        claim: &Self::Row,
    ) -> diesel::QueryResult<Option<Self::Row>>;

    fn find(conn: &mut DbConnection, id: &str) -> diesel::QueryResult<Option<Self::Row>>;

    /// Takes over an unfinished row whose lease is free (guarded update; true if won).
    fn take_over(
        conn: &mut DbConnection,
        id: &str,
        token: &str,
        now: Timestamp,
        lease: chrono::Duration,
    ) -> diesel::QueryResult<bool>;

    /// The provider request of a claimed row, for resuming it.
    fn call_for(conn: &mut DbConnection, row: &Self::Row) -> diesel::QueryResult<Self::Call>;

    /// Asks the provider, with the row id as its idempotency key.
    async fn call(
        state: &AppState,
        row: &Self::Row,
        call: &Self::Call,
    ) -> Result<Called<Self::Outcome>, OutcomeUnknown>;

    /// Records a final outcome in one transaction, guarded by the row still being
    /// unfinished, with the answer every retry replays. Returns the row as it is after:
    /// finished by this call, or by whoever was first (its answer stands).
    fn finish(
        conn: &mut DbConnection,
        row: &Self::Row,
        outcome: &Self::Outcome,
        request: Option<&RequestRef>,
    ) -> diesel::QueryResult<Self::Row>;

    /// Gives up the lease (outcome unknown or pending at the provider), keeping the
    /// provider's reference if there is one, and renders the 202 body.
    fn release(
        conn: &mut DbConnection,
        row: &Self::Row,
        token: &str,
        provider_ref: Option<&str>,
    ) -> diesel::QueryResult<Released>;

    /// Unfinished rows nobody owns, untouched since `idle_since`. Oldest first.
    fn find_abandoned(
        conn: &mut DbConnection,
        now: Timestamp,
        idle_since: Timestamp,
        limit: i64,
    ) -> diesel::QueryResult<Vec<Self::Row>>;
}

/// Runs [`Operation::claim`] alone, on a pooled connection: what [`Operation::run_claim`]
/// does unless the operation coalesces claims.
pub async fn claim_alone<O: Operation + ?Sized>(
    state: &AppState,
    claim: O::Row,
) -> Result<Claimed<O::Row, O::Call>, DbError> {
    let settings = state.settings.clone();
    state
        .db
        .run(move |conn| O::claim(conn, &claim, &settings))
        .await
}

/// Runs one request of operation `O` under the idempotency rules. `claim` is the row to insert,
/// built with a [`Lease`]; `request` names the API request (for its events).
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
    execute_boxed::<O>(state, Box::new(claim), request)
}

/// [`execute`] with the row on the heap.
async fn execute_boxed<O: Operation>(
    state: &AppState,
    claim: Box<O::Row>,
    request: Option<RequestRef>,
) -> Result<Answer, ApiError> {
    let resource = O::resource(&claim);
    let (merchant, key, fingerprint) = (
        claim.merchant_id().to_owned(),
        claim.idempotency_key().to_owned(),
        claim.fingerprint().to_owned(),
    );
    // Final answers never change: a key seen final here is answered from memory.
    let answers = &state.final_answers;
    if let Some(answer) = answers.answer(resource, &merchant, &key, &fingerprint) {
        return answer;
    }
    let scope = scope_key(resource, &merchant, &key);
    let wait = state.settings.idempotency_wait;
    // Boxed, and awaited before the match rather than in it: a match keeps what it matches
    // on until it ends, and this one lasts as long as the provider call.
    let joined = Box::pin(lead_or_join(
        &state.inflight,
        resource,
        &scope,
        &fingerprint,
        wait,
    ))
    .await?;
    let (guard, wait_left) = match joined {
        Joined::Answer(answer) => return Ok(answer),
        Joined::Lead { guard, wait_left } => (guard, wait_left),
    };
    let answer = claim_or_follow::<O>(state, claim, request, wait_left).await?;
    // In memory before the lead is given up, so that no later duplicate here finds
    // neither.
    answers.remember(resource, &merchant, &key, &fingerprint, &answer);
    guard.settle(&answer);
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
            Either::Left(drive_detached::<O>(state, row, token, call, request))
        }
        Ok(Claimed::Refused(answer)) => {
            metrics::idempotency(resource, IdempotencyOutcome::Created);
            tracing::info!(id = %claim.record_id(), status = answer.status, "{resource} refused");
            return Ok(answer);
        }
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
        |id, token| {
            let lease = lease_duration(state);
            async move {
                Ok(state
                    .db
                    .run(move |conn| O::take_over(conn, &id, &token, now(), lease))
                    .await?)
            }
        },
        |id| async move {
            state
                .db
                .run(move |conn| O::find(conn, &id))
                .await?
                .ok_or_else(|| ApiError::internal("row vanished while waiting"))
        },
    )
    .await;
    observe(resource, &followed);
    match followed? {
        Followed::Answer(answer) => Ok(answer),
        Followed::TakenOver(row, token) => {
            Box::pin(resume_owned::<O>(state, row, token, request)).await
        }
    }
}

/// Drives a row whose lease this caller has just taken.
async fn resume_owned<O: Operation>(
    state: &AppState,
    row: O::Row,
    token: String,
    request: Option<RequestRef>,
) -> Result<Answer, ApiError> {
    let call = {
        let row = row.clone();
        state.db.run(move |conn| O::call_for(conn, &row)).await?
    };
    drive_detached::<O>(state, row, token, call, request).await
}

/// Runs the provider call on its own task, so that a client hanging up mid-request does
/// not abandon the operation half-way: it finishes and its outcome is stored regardless.
/// Spawned here, in a plain function, so the task's future is never part of the caller's;
/// the caller waits on the task alone.
fn drive_detached<O: Operation>(
    state: &AppState,
    row: O::Row,
    token: String,
    call: O::Call,
    request: Option<RequestRef>,
) -> impl Future<Output = Result<Answer, ApiError>> + 'static {
    let task = actix_web::rt::spawn(drive::<O>(
        state.clone(),
        Box::new(row),
        token,
        call,
        request,
    ));
    async move {
        task.await
            .map_err(|e| ApiError::internal(format!("operation task failed: {e}")))?
    }
}

/// Holds the lease of `row`: asks the provider (our row id is its idempotency key, so
/// asking again can never move money twice) and records what it said. Owns what it needs
/// (the task outlives the request), the row boxed.
async fn drive<O: Operation>(
    state: AppState,
    row: Box<O::Row>,
    token: String,
    call: O::Call,
    request: Option<RequestRef>,
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
                            finish::<O>(&state, (*row).clone(), outcome.clone(), request.clone())
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
            Box::pin(release::<O>(state, *row, token, provider_ref)).await?
        }
        Err(unknown) => {
            tracing::warn!(id = %row.record_id(), error = %unknown, "{resource} outcome unknown");
            Box::pin(release::<O>(state, *row, token, None)).await?
        }
    };
    inflight.settle(&answer);
    Ok(answer)
}

/// Records a final provider answer. If another path (a webhook, another instance) finished
/// the row first, its stored answer is the answer.
fn finish<O: Operation>(
    state: &AppState,
    row: O::Row,
    outcome: O::Outcome,
    request: Option<RequestRef>,
) -> impl Future<Output = Result<Answer, ApiError>> + 'static {
    let state = state.clone();
    async move {
        let finished = O::run_finish(&state, row, outcome, request).await?;
        tracing::info!(id = %finished.record_id(), "{} finished", O::resource(&finished));
        finished
            .stored_answer()
            .ok_or_else(|| ApiError::internal("operation not final after finishing"))
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
) -> Result<Answer, ApiError> {
    let answer = state
        .db
        .run(move |conn| {
            let released = O::release(conn, &row, &token, provider_ref.as_deref())?;
            let finished = if released.ours {
                None
            } else {
                O::find(conn, row.record_id())?.and_then(|now| now.stored_answer())
            };
            Ok(finished.unwrap_or_else(|| Answer::new(202, released.body)))
        })
        .await?;
    Ok(answer)
}

/// Rows taken over per pass and kind; the rest wait for the next pass.
const RECOVERY_BATCH: i64 = 20;

/// For the recovery worker: takes over abandoned rows of `O` (their request died, or
/// answered 202 and was never retried) and drives each to an outcome, with the same
/// provider key as before, so nothing moves twice. Returns how many it resumed.
pub async fn recover<O: Operation>(state: &AppState, action: metrics::RecoveryAction) -> usize {
    let action_name = action.as_str();
    let current = now();
    let idle_since = current - lease_duration(state);
    let abandoned = match state
        .db
        .run(move |conn| O::find_abandoned(conn, current, idle_since, RECOVERY_BATCH))
        .await
    {
        Ok(rows) => rows,
        Err(e) => {
            tracing::warn!(action = action_name, error = %e, "recovery: listing abandoned rows failed");
            return 0;
        }
    };
    let resumed = join_all(abandoned.into_iter().map(|row| async move {
        let token = new_lease_token();
        let (id, t, lease) = (
            row.record_id().to_owned(),
            token.clone(),
            lease_duration(state),
        );
        let won = state
            .db
            .run(move |conn| O::take_over(conn, &id, &t, now(), lease))
            .await?;
        if !won {
            return Ok::<bool, ApiError>(false);
        }
        tracing::info!(id = %row.record_id(), action = action_name, "recovery: resuming");
        resume_owned::<O>(state, row, token, None)
            .await
            .map(|_| true)
    }))
    .await;
    let mut count = 0;
    for outcome in resumed {
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
