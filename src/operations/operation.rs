//! What an operation is: the trait each kind implements, and what its steps return.

use crate::config::Settings;
use crate::db::lease::Leased;
use crate::db::{DbConnection, DbError};
use crate::domain::{Timestamp, new_lease_token, now};
use crate::error::ApiError;
use crate::idempotency::{Answer, IdempotentRecord};
use crate::operations::Settled;
use crate::provider::OutcomeUnknown;
use crate::state::AppState;

/// The API request that asked for a change: named by the events it causes. Changes made by
/// a provider webhook, the recovery worker or the expiry of an authorization have none.
use crate::domain::RequestRef;

/// What a claim decided.
pub enum Claimed<R, C> {
    /// The key is ours and the operation's guard let it through: make the call.
    Won(R, C),
    /// The key is ours and its final answer was decided in the claim's own transaction:
    /// a refusal (409/422) of an operation that cannot run, or the answer of an operation
    /// that only writes the database and did all its work there. Replayed from now on.
    Answered(Answer),
    /// An answer that is not the key's (a 404 found inside the claim's transaction):
    /// nothing was stored, the key is still free.
    Unstored(ApiError),
}

/// What the call said.
pub enum Called<O> {
    /// A final outcome: finish the operation with it.
    Final(O),
    /// Accepted but not finished (an async charge, a pending refund): a webhook or a later
    /// call finishes it. Carries the provider's reference to keep meanwhile.
    Pending(Option<String>),
}

/// A lease for a new claim: the token that owns it and until when.
pub struct Lease {
    pub token: String,
    pub at: Timestamp,
    pub expires_at: Timestamp,
}

impl Lease {
    /// A lease of `PROCESSING_LEASE_MS`, the lease of every money operation.
    pub fn new(state: &AppState) -> Self {
        Self::lasting(lease_duration(state))
    }

    pub fn lasting(duration: chrono::Duration) -> Self {
        let at = now();
        Self {
            token: new_lease_token(),
            at,
            expires_at: at + duration,
        }
    }
}

pub fn lease_duration(state: &AppState) -> chrono::Duration {
    chrono::Duration::from_std(state.settings.processing_lease).unwrap_or(chrono::Duration::MAX)
}

/// One kind of idempotent operation: only what differs between kinds. Every database
/// function runs inside one `Db::run` (one connection, never held across the call).
#[allow(async_fn_in_trait)] // static dispatch only, on actix's single-threaded runtime
pub trait Operation: 'static {
    /// The row that is its own idempotency record, owned through a lease while unfinished.
    type Row: IdempotentRecord + Leased + Clone + Send + 'static;
    /// What the call needs besides the row. Known at the claim; rebuilt from the database
    /// when a retry or the recovery worker resumes.
    type Call: Clone + Send + 'static;
    /// The call's final answer.
    type Outcome: Clone + Send + 'static;

    /// Names the operation in logs and metrics.
    fn resource(row: &Self::Row) -> &'static str;

    /// Names the scope of the row's key in this process (the requests in flight and the
    /// final answers in memory): the resource, unless one resource has several scopes.
    fn scope(row: &Self::Row) -> &'static str {
        Self::resource(row)
    }

    /// How long a request owns a row it takes over: by default `PROCESSING_LEASE_MS`.
    fn lease(state: &AppState, _row: &Self::Row) -> chrono::Duration {
        lease_duration(state)
    }

    /// Inserts the claim (a unique violation means another request has the key) and, in
    /// the same transaction, applies the operation's guard, which may depend on the
    /// settings (an authorization's expiry).
    fn claim(
        conn: &mut DbConnection,
        claim: &Self::Row,
        settings: &Settings,
    ) -> diesel::QueryResult<Claimed<Self::Row, Self::Call>>;

    /// Runs [`Operation::claim`]: by default alone, on a pooled connection. An operation
    /// may instead hand it to the database's write path (group commit): a claim it did not
    /// insert answers `UniqueViolation`, like a lost single insert.
    async fn run_claim(
        state: &AppState,
        claim: Self::Row,
    ) -> Result<Claimed<Self::Row, Self::Call>, DbError> {
        let settings = state.settings.clone();
        state
            .db
            .run(move |conn| Self::claim(conn, &claim, &settings))
            .await
    }

    /// Runs [`Operation::finish`]: by default alone; or through the write path, like
    /// [`Self::run_claim`].
    async fn run_finish(
        state: &AppState,
        row: Self::Row,
        outcome: Self::Outcome,
        request: Option<RequestRef>,
    ) -> Result<Settled<Self::Row>, DbError> {
        let settings = state.settings.clone();
        state
            .db
            .run(move |conn| Self::finish(conn, &row, &outcome, request.as_ref(), &settings))
            .await
    }

    /// The row holding the claim's key (merchant, scope, key).
    fn find_by_key(
        conn: &mut DbConnection,
        claim: &Self::Row,
    ) -> diesel::QueryResult<Option<Self::Row>>;

    /// What the call needs for a claimed row, when a retry or the worker resumes it.
    fn call_for(conn: &mut DbConnection, row: &Self::Row) -> diesel::QueryResult<Self::Call>;

    /// Makes the call (at the provider: with the row id as its idempotency key, so asking
    /// again can never move money twice).
    async fn call(
        state: &AppState,
        row: &Self::Row,
        call: &Self::Call,
    ) -> Result<Called<Self::Outcome>, OutcomeUnknown>;

    /// Records a final outcome in one transaction, guarded by the row still being
    /// unfinished, with the answer every retry replays, and the money it moved posted to
    /// the ledger by the settings' policy. Returns the row as it is after:
    /// [`Settled::Applied`] if this call finished it, [`Settled::AlreadyFinal`] if whoever
    /// was first did (its answer stands).
    fn finish(
        conn: &mut DbConnection,
        row: &Self::Row,
        outcome: &Self::Outcome,
        request: Option<&RequestRef>,
        settings: &Settings,
    ) -> diesel::QueryResult<Settled<Self::Row>>;

    /// The body of the 202 answered while the outcome is unknown: the object as it is.
    fn render_unfinished(conn: &mut DbConnection, row: &Self::Row) -> diesel::QueryResult<String>;
}
