//! The mechanism's rows for requests that move no money: a record in `idempotency_keys`
//! per (merchant, scope, key), carrying the request's work.
//!
//! Most such requests only write the database ([`WriteOnce`]): the claim, the work and the
//! answer are ONE transaction, so a key is never left half-used, and a duplicate replays
//! the stored answer (on PostgreSQL its insert waits for the first transaction; on SQLite
//! the write lock orders them). Their call type is [`Infallible`]: there is nothing to
//! resume, and the compiler knows it. A request that also leaves the database (a test
//! delivery to a merchant's endpoint) is an ordinary [`Operation`] over the same rows, whose
//! claim holds a lease while it calls.

use std::convert::Infallible;
use std::marker::PhantomData;

use super::operation::{Called, Claimed, Operation};
use super::settle::Settled;
use crate::auth::Merchant;
use crate::config::Settings;
use crate::db::DbConnection;
use crate::db::idempotency_keys::{self as key_rows, KeyRow};
use crate::db::lease::Leased;
use crate::domain::RequestRef;
use crate::domain::{IdempotencyKey, Timestamp, now};
use crate::error::ApiError;
use crate::idempotency::{Answer, IdempotentRecord, scope_key};
use crate::provider::OutcomeUnknown;
use crate::state::AppState;

/// A request's `idempotency_keys` record with what the request does.
#[derive(Clone)]
pub struct KeyClaim<W> {
    pub row: KeyRow,
    /// The operation (route template) the key is used on.
    pub scope: &'static str,
    /// Names the record in this process (requests in flight, logs): records have no id.
    name: String,
    pub work: W,
}

impl<W> KeyClaim<W> {
    /// A new claim of `key` for `scope`, held by `token` until `lease_until` (a request
    /// that answers in its claim's transaction holds it only while that runs).
    pub fn new(
        merchant: &Merchant,
        key: &IdempotencyKey,
        scope: &'static str,
        fingerprint: String,
        (token, lease_until): (String, Timestamp),
        work: W,
    ) -> Self {
        let row = KeyRow {
            merchant_id: merchant.id.clone(),
            scope: scope.to_owned(),
            idempotency_key: key.as_str().to_owned(),
            request_fingerprint: fingerprint,
            response_status: None,
            response_body: None,
            lease_token: Some(token),
            lease_expires_at: Some(lease_until),
            created_at: now(),
        };
        Self::of(row, scope, work)
    }

    fn of(row: KeyRow, scope: &'static str, work: W) -> Self {
        // The same text as the key's in-flight scope entry; they are kept apart by kind.
        let name = scope_key(scope, &row.merchant_id, &row.idempotency_key);
        Self {
            row,
            scope,
            name,
            work,
        }
    }

    /// The stored record of this claim's key, if any, carrying this claim's work.
    pub fn find(&self, conn: &mut DbConnection) -> diesel::QueryResult<Option<Self>>
    where
        W: Clone,
    {
        let found = key_rows::find(
            conn,
            &self.row.merchant_id,
            &self.row.scope,
            &self.row.idempotency_key,
        )?;
        Ok(found.map(|row| Self::of(row, self.scope, self.work.clone())))
    }

    /// Stores the final answer; only the lease's holder can.
    pub fn store(&self, conn: &mut DbConnection, answer: &Answer) -> diesel::QueryResult<bool> {
        let token = self.row.lease_token.as_deref().unwrap_or_default();
        let status = i32::from(answer.status);
        key_rows::store_answer(conn, &self.row, token, status, &answer.body)
    }
}

impl<W> IdempotentRecord for KeyClaim<W> {
    fn record_id(&self) -> &str {
        &self.name
    }

    fn merchant_id(&self) -> &str {
        &self.row.merchant_id
    }

    fn idempotency_key(&self) -> &str {
        &self.row.idempotency_key
    }

    fn fingerprint(&self) -> &str {
        &self.row.request_fingerprint
    }

    fn lease_token(&self) -> Option<&str> {
        self.row.lease_token.as_deref()
    }

    fn stored_response(&self) -> (Option<i32>, Option<&str>) {
        (self.row.response_status, self.row.response_body.as_deref())
    }

    fn lease_expires_at(&self) -> Option<Timestamp> {
        self.row.lease_expires_at
    }
}

impl<W: Clone> Leased for KeyClaim<W> {
    fn reload(&self, conn: &mut DbConnection) -> diesel::QueryResult<Option<Self>> {
        self.find(conn)
    }

    fn take_over(
        &self,
        conn: &mut DbConnection,
        token: &str,
        now: Timestamp,
        lease: chrono::Duration,
    ) -> diesel::QueryResult<bool> {
        key_rows::take_over(conn, &self.row, token, now, now + lease)
    }

    fn release(
        &mut self,
        conn: &mut DbConnection,
        token: &str,
        _provider_ref: Option<&str>,
        _now: Timestamp,
    ) -> diesel::QueryResult<bool> {
        self.row.lease_token = None;
        self.row.lease_expires_at = None;
        key_rows::give_up(conn, &self.row, token)
    }
}

/// Why a claim's transaction ended without an answer to store (a database-only request's,
/// or a dispute step's that finds another step at the provider).
pub enum Refusal {
    /// An answer that is not the key's (a 404): the transaction, key claim included, is
    /// rolled back and the key stays free.
    Api(ApiError),
    Db(diesel::result::Error),
}

impl Refusal {
    /// A claim's transaction as the mechanism takes it: a refusal rolled it back, key claim
    /// included, so it is [`Claimed::Unstored`] and the key stays free.
    pub fn unstored<R, C>(
        done: Result<Claimed<R, C>, Refusal>,
    ) -> diesel::QueryResult<Claimed<R, C>> {
        match done {
            Ok(claimed) => Ok(claimed),
            Err(Refusal::Api(refusal)) => Ok(Claimed::Unstored(refusal)),
            Err(Refusal::Db(e)) => Err(e),
        }
    }
}

impl From<diesel::result::Error> for Refusal {
    fn from(e: diesel::result::Error) -> Self {
        Self::Db(e)
    }
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

/// The work of a request that only writes the database.
pub trait DbWork: Clone + Send + 'static {
    /// Names these requests in logs and metrics.
    const RESOURCE: &'static str;

    /// Does the work inside the claim's transaction and says what to answer.
    fn run(&self, conn: &mut DbConnection, merchant_id: &str) -> Result<Answer, Refusal>;
}

/// The database-only mode of the mechanism: work `W` under an `Idempotency-Key`.
pub struct WriteOnce<W>(PhantomData<W>);

impl<W: DbWork> Operation for WriteOnce<W> {
    type Row = KeyClaim<W>;
    type Call = Infallible;
    type Outcome = Infallible;

    fn resource(_: &KeyClaim<W>) -> &'static str {
        W::RESOURCE
    }

    fn scope(row: &KeyClaim<W>) -> &'static str {
        row.scope
    }

    fn claim(
        conn: &mut DbConnection,
        claim: &KeyClaim<W>,
        _: &Settings,
    ) -> diesel::QueryResult<Claimed<KeyClaim<W>, Infallible>> {
        use diesel::Connection;
        let done = conn.transaction::<Answer, Refusal, _>(|conn| {
            // First: the insert decides which request with this key runs.
            key_rows::insert(conn, &claim.row)?;
            let answer = claim.work.run(conn, &claim.row.merchant_id)?;
            claim.store(conn, &answer)?;
            Ok(answer)
        });
        Refusal::unstored(done.map(Claimed::Answered))
    }

    fn find_by_key(
        conn: &mut DbConnection,
        claim: &KeyClaim<W>,
    ) -> diesel::QueryResult<Option<KeyClaim<W>>> {
        claim.find(conn)
    }

    /// A record without its answer cannot exist: its claim stored both in one transaction.
    fn call_for(_: &mut DbConnection, _: &KeyClaim<W>) -> diesel::QueryResult<Infallible> {
        Err(diesel::result::Error::QueryBuilderError(
            "a database-only request has nothing to resume".into(),
        ))
    }

    async fn call(
        _: &AppState,
        _: &KeyClaim<W>,
        call: &Infallible,
    ) -> Result<Called<Infallible>, OutcomeUnknown> {
        match *call {}
    }

    fn finish(
        _: &mut DbConnection,
        _: &KeyClaim<W>,
        outcome: &Infallible,
        _: Option<&RequestRef>,
        _settings: &Settings,
    ) -> diesel::QueryResult<Settled<KeyClaim<W>>> {
        match *outcome {}
    }

    fn render_unfinished(_: &mut DbConnection, _: &KeyClaim<W>) -> diesel::QueryResult<String> {
        Err(diesel::result::Error::QueryBuilderError(
            "a database-only request is never unfinished".into(),
        ))
    }
}

/// Runs `work` once per key: through the mechanism when the request has a key, else just
/// in one transaction.
pub async fn write_once<W: DbWork>(
    state: &AppState,
    merchant: &Merchant,
    key: Option<IdempotencyKey>,
    scope: &'static str,
    fingerprint: String,
    work: W,
) -> Result<Answer, ApiError> {
    let Some(key) = key else {
        let merchant_id = merchant.id.clone();
        let done = state
            .db
            .run(move |conn| {
                use diesel::Connection;
                match conn.transaction::<Answer, Refusal, _>(|conn| work.run(conn, &merchant_id)) {
                    Ok(answer) => Ok(Ok(answer)),
                    Err(Refusal::Api(refusal)) => Ok(Err(refusal)),
                    Err(Refusal::Db(e)) => Err(e),
                }
            })
            .await?;
        return done;
    };
    // Held only while the claim's own transaction runs: nothing outlives it unanswered.
    let lease = (crate::domain::new_lease_token(), now());
    let claim = KeyClaim::new(merchant, &key, scope, fingerprint, lease, work);
    super::execute::execute::<WriteOnce<W>>(state, claim, None).await
}
