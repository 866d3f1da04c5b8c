//! What a request with an already-used key is told, and how duplicates wait for the first
//! request without querying the database in a loop.
//!
//! Duplicates in this process subscribe to the running request's outcome through
//! [`InFlight`] and wake the moment it settles. Duplicates whose first request runs in
//! another instance poll the row with a growing interval instead. [`follow`] is that
//! loop, shared by every endpoint whose rows are their own idempotency records.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use actix_web::HttpResponse;
use actix_web::http::{StatusCode, header};
use tokio::sync::watch;

use crate::domain::{Timestamp, new_lease_token, now};
use crate::error::{ApiError, PROBLEM_JSON};

pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// A response as sent: status and exact body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: Arc<str>,
    /// Set on replays of a stored final response.
    pub replayed: bool,
}

impl Answer {
    pub fn new(status: u16, body: impl Into<Arc<str>>) -> Self {
        Self {
            status,
            body: body.into(),
            replayed: false,
        }
    }

    /// A refusal as the final answer stored for an idempotency key (the 409/422 refusals
    /// of refunds, captures and cancels), replayed verbatim.
    pub fn refusal(error: &ApiError) -> Self {
        use actix_web::ResponseError;
        Self::new(error.status_code().as_u16(), error.problem_json())
    }

    pub fn replayed(mut self) -> Self {
        self.replayed = true;
        self
    }

    /// Final answers (201/200, and stored refusals such as 409/422) are fixed; 202
    /// ("still processing") is not.
    pub fn is_final(&self) -> bool {
        self.status != 202
    }

    pub fn into_response(self) -> HttpResponse {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = HttpResponse::build(status);
        // A stored refusal is a problem document, replayed as one.
        let content_type = if self.status >= 400 {
            PROBLEM_JSON
        } else {
            "application/json"
        };
        response.insert_header((header::CONTENT_TYPE, content_type));
        if self.replayed {
            response.insert_header((REPLAYED_HEADER, "true"));
        }
        response.body(self.body.to_string())
    }
}

type Outcome = Option<Answer>;

/// Names one idempotency scope: a merchant's key on one kind of request.
pub fn scope_key(resource: &str, merchant_id: &str, idempotency_key: &str) -> String {
    format!("{resource}\u{0}{merchant_id}\u{0}{idempotency_key}")
}

#[derive(Default)]
struct Registry {
    /// Running requests by object id, each with a channel its duplicates can wait on.
    by_id: HashMap<String, watch::Receiver<Outcome>>,
    /// The same requests by idempotency scope: (fingerprint of the claiming request, id).
    by_scope: HashMap<String, (String, String)>,
}

/// The requests running in this process.
#[derive(Default, Clone)]
pub struct InFlight {
    registry: Arc<Mutex<Registry>>,
}

impl InFlight {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        // Only inserts and removes happen under the lock; a poisoned map is still consistent.
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Announces that this request now works on `id`, claimed under `scope` by a request
    /// with `fingerprint`. The guard must be settled with the outcome; dropped unsettled
    /// (an error), its waiters fall back to reading the row.
    pub fn register(&self, id: &str, scope: String, fingerprint: &str) -> InFlightGuard {
        let (sender, receiver) = watch::channel(None);
        let mut registry = self.registry();
        registry.by_id.insert(id.to_owned(), receiver);
        registry
            .by_scope
            .insert(scope.clone(), (fingerprint.to_owned(), id.to_owned()));
        InFlightGuard {
            registry: self.clone(),
            id: id.to_owned(),
            scope,
            sender,
        }
    }

    pub fn subscribe(&self, id: &str) -> Option<watch::Receiver<Outcome>> {
        self.registry().by_id.get(id).cloned()
    }

    /// The request running under `scope` here: (its fingerprint, its object id).
    pub fn running_under(&self, scope: &str) -> Option<(String, String)> {
        self.registry().by_scope.get(scope).cloned()
    }
}

pub struct InFlightGuard {
    registry: InFlight,
    id: String,
    scope: String,
    sender: watch::Sender<Outcome>,
}

impl InFlightGuard {
    pub fn settle(self, answer: &Answer) {
        self.sender.send_replace(Some(answer.clone()));
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut registry = self.registry.registry();
        // A later request may have registered the same id after a takeover: leave its entry.
        if registry
            .by_id
            .get(&self.id)
            .is_some_and(|r| r.same_channel(&self.sender.subscribe()))
        {
            registry.by_id.remove(&self.id);
            if registry
                .by_scope
                .get(&self.scope)
                .is_some_and(|(_, id)| *id == self.id)
            {
                registry.by_scope.remove(&self.scope);
            }
        }
    }
}

/// What a request learnt from a request running under its key in this process.
pub enum Joined {
    /// Its outcome: a replay of the final answer, or the 202 it ended with.
    Answer(Answer),
    /// Nothing runs under the key here (or it ended without an outcome): go to the
    /// database, with this much of the wait left.
    NotRunning { wait_left: Duration },
}

/// A duplicate of a request running in this process waits on it directly: no insert that
/// is bound to fail, no reads. A storm of identical requests costs the database only the
/// first request's work.
pub async fn join_running(
    inflight: &InFlight,
    resource: &'static str,
    scope: &str,
    fingerprint: &str,
    wait: Duration,
) -> Result<Joined, crate::error::ApiError> {
    use crate::metrics::{IdempotencyOutcome, idempotency};
    let Some((claimed, id)) = inflight.running_under(scope) else {
        return Ok(Joined::NotRunning { wait_left: wait });
    };
    if claimed != fingerprint {
        idempotency(resource, IdempotencyOutcome::Reused);
        return Err(crate::error::ApiError::IdempotencyKeyReused);
    }
    let started = Instant::now();
    match wait_for_outcome(inflight, &id, wait).await {
        Some(answer) if answer.is_final() => {
            idempotency(resource, IdempotencyOutcome::Replayed);
            Ok(Joined::Answer(answer.replayed()))
        }
        Some(answer) => Ok(Joined::Answer(answer)),
        None => Ok(Joined::NotRunning {
            wait_left: wait.saturating_sub(started.elapsed()),
        }),
    }
}

/// Waits for the outcome of the request running `id` in this process, for at most `wait`.
/// `None`: nothing runs it here, it ended without an outcome, or time ran out.
pub async fn wait_for_outcome(
    registry: &InFlight,
    id: &str,
    wait: std::time::Duration,
) -> Option<Answer> {
    let mut receiver = registry.subscribe(id)?;
    let settled = actix_web::rt::time::timeout(wait, receiver.wait_for(Option::is_some)).await;
    match settled {
        Ok(Ok(outcome)) => outcome.clone(),
        _ => None,
    }
}

/// How long a duplicate told "in use" should wait before retrying.
pub const RETRY_AFTER_SECS: u64 = 1;
/// Polling bounds for duplicates whose first request runs in another instance.
const POLL_FIRST: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(250);

/// A row that is its own idempotency record: a stored final answer once finished, and a
/// lease naming the request that works on it until then.
pub trait IdempotentRecord {
    fn record_id(&self) -> &str;
    fn merchant_id(&self) -> &str;
    fn idempotency_key(&self) -> &str;
    /// The fingerprint of the request that claimed the key.
    fn fingerprint(&self) -> &str;
    /// The token of the request that owns the record (none: nobody).
    fn lease_token(&self) -> Option<&str>;
    /// The stored response columns (status, body): set exactly when the record is final.
    fn stored_response(&self) -> (Option<i32>, Option<&str>);
    /// Until when the request holding the lease owns the record (none: nobody).
    fn lease_expires_at(&self) -> Option<Timestamp>;

    /// The final answer, if there is one (replayed byte for byte).
    fn stored_answer(&self) -> Option<Answer> {
        let (status, body) = self.stored_response();
        let status = u16::try_from(status?).ok()?;
        Some(Answer::new(status, body?))
    }

    /// Nobody owns the record: the lease was given up or has run out.
    fn lease_is_free(&self, now: Timestamp) -> bool {
        self.lease_expires_at().is_none_or(|until| until <= now)
    }
}

/// What a duplicate request ends with.
pub enum Followed<R> {
    /// A replay of the final answer, or the 202 of the in-process request it waited on.
    Answer(Answer),
    /// Nobody owned the record and this request took it over with this lease token:
    /// it must now drive the work itself.
    TakenOver(R, String),
}

/// Implements [`IdempotentRecord`] for a row struct with the shared columns (`id`,
/// `merchant_id`, `idempotency_key`, `request_fingerprint`, `response_status`,
/// `response_body`, `lease_token`, `lease_expires_at`).
macro_rules! idempotent_record {
    ($row:ty) => {
        impl $crate::idempotency::IdempotentRecord for $row {
            fn record_id(&self) -> &str {
                &self.id
            }
            fn merchant_id(&self) -> &str {
                &self.merchant_id
            }
            fn idempotency_key(&self) -> &str {
                &self.idempotency_key
            }
            fn fingerprint(&self) -> &str {
                &self.request_fingerprint
            }
            fn lease_token(&self) -> Option<&str> {
                self.lease_token.as_deref()
            }
            fn stored_response(&self) -> (Option<i32>, Option<&str>) {
                (self.response_status, self.response_body.as_deref())
            }
            fn lease_expires_at(&self) -> Option<$crate::domain::Timestamp> {
                self.lease_expires_at
            }
        }
    };
}
pub(crate) use idempotent_record;

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
///
/// `take_over(id, token)` tries to take a free lease (a guarded update; true if won);
/// `reload(id)` reads the record again.
pub async fn follow<R, T, TF, L, LF>(
    inflight: &InFlight,
    wait: Duration,
    mut row: R,
    take_over: T,
    reload: L,
) -> Result<Followed<R>, ApiError>
where
    R: IdempotentRecord,
    T: Fn(String, String) -> TF,
    TF: Future<Output = Result<bool, ApiError>>,
    L: Fn(String) -> LF,
    LF: Future<Output = Result<R, ApiError>>,
{
    let deadline = Instant::now() + wait;
    let mut poll = POLL_FIRST;
    loop {
        if let Some(answer) = row.stored_answer() {
            return Ok(Followed::Answer(answer.replayed()));
        }
        if row.lease_is_free(now()) {
            let token = new_lease_token();
            if take_over(row.record_id().to_owned(), token.clone()).await? {
                tracing::info!(id = %row.record_id(), "unfinished request taken over");
                return Ok(Followed::TakenOver(row, token));
            }
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(ApiError::IdempotencyKeyInUse {
                retry_after_secs: RETRY_AFTER_SECS,
            });
        }
        // Running in this process: wake exactly when it settles. It may end with 202
        // (outcome unknown); its duplicates answer 202 too rather than all retrying at once.
        if let Some(answer) = wait_for_outcome(inflight, row.record_id(), remaining).await {
            return Ok(Followed::Answer(if answer.is_final() {
                answer.replayed()
            } else {
                answer
            }));
        }
        if inflight.subscribe(row.record_id()).is_none() {
            // Running elsewhere (another instance), or it just ended: poll with backoff.
            actix_web::rt::time::sleep(poll.min(remaining)).await;
            poll = (poll * 2).min(POLL_MAX);
        }
        row = reload(row.record_id().to_owned()).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn waiters_receive_the_outcome_once_settled() {
        let registry = InFlight::default();
        let guard = registry.register("pay_1", scope_key("payment", "m", "k1"), "fp");
        let waiter = {
            let registry = registry.clone();
            actix_web::rt::spawn(async move {
                wait_for_outcome(&registry, "pay_1", Duration::from_secs(5)).await
            })
        };
        actix_web::rt::task::yield_now().await;
        guard.settle(&Answer::new(201, "{}"));
        assert_eq!(waiter.await.unwrap(), Some(Answer::new(201, "{}")));
        assert!(
            registry.subscribe("pay_1").is_none(),
            "settled entries are removed"
        );
    }

    #[test]
    fn final_answers_replay_the_same_request_and_refuse_another() {
        let answers = FinalAnswers::default();
        answers.remember(
            "payment",
            "mer_1",
            "k",
            "fp-a",
            &Answer::new(201, "{\"a\":1}"),
        );
        answers.remember(
            "payment",
            "mer_1",
            "pending",
            "fp-a",
            &Answer::new(202, "{}"),
        );

        let replay = answers
            .answer("payment", "mer_1", "k", "fp-a")
            .unwrap()
            .unwrap();
        assert_eq!(replay, Answer::new(201, "{\"a\":1}").replayed());
        assert!(matches!(
            answers.answer("payment", "mer_1", "k", "fp-b"),
            Some(Err(crate::error::ApiError::IdempotencyKeyReused))
        ));
        assert!(
            answers.answer("payment", "mer_2", "k", "fp-a").is_none(),
            "per merchant"
        );
        assert!(
            answers.answer("refund", "mer_1", "k", "fp-a").is_none(),
            "per resource"
        );
        assert!(
            answers.get("payment", "mer_1", "pending").is_none(),
            "202 is not final"
        );
    }

    #[test]
    fn final_answers_stay_within_their_size_and_keep_a_hot_key() {
        let answers = FinalAnswers::with_capacity(64 * 1024);
        let body = "x".repeat(900);
        answers.remember(
            "payment",
            "m",
            "hot",
            "fp",
            &Answer::new(201, body.as_str()),
        );
        for i in 0..2000 {
            // The storm's key is asked for again and again while one-off keys stream by.
            assert!(
                answers.get("payment", "m", "hot").is_some(),
                "hot key lost at {i}"
            );
            answers.remember(
                "payment",
                "m",
                &format!("k{i}"),
                "fp",
                &Answer::new(201, body.as_str()),
            );
        }
        assert!(answers.len() < 80, "bounded: {} entries", answers.len());
        assert!(answers.len() > 20, "not emptied: {} entries", answers.len());
    }

    #[actix_web::test]
    async fn an_unsettled_guard_releases_its_waiters() {
        let registry = InFlight::default();
        let guard = registry.register("pay_2", scope_key("payment", "m", "k2"), "fp");
        let waiter = {
            let registry = registry.clone();
            actix_web::rt::spawn(async move {
                wait_for_outcome(&registry, "pay_2", Duration::from_secs(5)).await
            })
        };
        actix_web::rt::task::yield_now().await;
        drop(guard);
        assert_eq!(waiter.await.unwrap(), None);
    }
}

/// Final answers already seen, by (resource, merchant, key): a replay or a reuse is
/// answered from memory, with no database round trip.
///
/// Safe because a final answer never changes once stored (the contract fixes it from that
/// moment, in every instance), and a key is never freed; only final answers go in, so the
/// insert still decides every winner. Bounded by size ([`FinalAnswers::MAX_BYTES`]):
/// `quick_cache` evicts with S3-FIFO, which keeps the hot entries (a retry storm's key)
/// and lets one-hit entries go first; a miss only costs the database lookup it would have
/// cost anyway.
#[derive(Clone)]
pub struct FinalAnswers {
    answers: Arc<quick_cache::sync::Cache<String, (String, Answer), AnswerWeight>>,
}

/// An entry's weight is its size in bytes, roughly: the scope key, the fingerprint, the
/// body and the bookkeeping around them.
#[derive(Clone)]
struct AnswerWeight;

impl quick_cache::Weighter<String, (String, Answer)> for AnswerWeight {
    fn weight(&self, key: &String, (fingerprint, answer): &(String, Answer)) -> u64 {
        (key.len() + fingerprint.len() + answer.body.len() + 96) as u64
    }
}

impl Default for FinalAnswers {
    fn default() -> Self {
        Self::with_capacity(Self::MAX_BYTES)
    }
}

impl FinalAnswers {
    /// What the map may hold: about 8 MiB, some 6 000 payment answers.
    pub const MAX_BYTES: u64 = 8 * 1024 * 1024;

    pub fn with_capacity(max_bytes: u64) -> Self {
        let estimated_items = usize::try_from(max_bytes / 1400).unwrap_or(1024).max(16);
        Self {
            answers: Arc::new(quick_cache::sync::Cache::with_weighter(
                estimated_items,
                max_bytes,
                AnswerWeight,
            )),
        }
    }

    /// The stored `(fingerprint, answer)` of this key, if seen here.
    pub fn get(
        &self,
        resource: &str,
        merchant_id: &str,
        idempotency_key: &str,
    ) -> Option<(String, Answer)> {
        self.answers
            .get(&scope_key(resource, merchant_id, idempotency_key))
    }

    /// What a request with this key and fingerprint is answered from memory, if the key's
    /// final answer is known here: the replay, or 422 for a different request.
    pub fn answer(
        &self,
        resource: &'static str,
        merchant_id: &str,
        idempotency_key: &str,
        fingerprint: &str,
    ) -> Option<Result<Answer, crate::error::ApiError>> {
        use crate::metrics::{IdempotencyOutcome, idempotency};
        let (stored, answer) = self.get(resource, merchant_id, idempotency_key)?;
        if stored != fingerprint {
            idempotency(resource, IdempotencyOutcome::Reused);
            return Some(Err(crate::error::ApiError::IdempotencyKeyReused));
        }
        idempotency(resource, IdempotencyOutcome::Replayed);
        Some(Ok(answer.replayed()))
    }

    /// Remembers a final answer (anything else is ignored).
    pub fn remember(
        &self,
        resource: &str,
        merchant_id: &str,
        idempotency_key: &str,
        fingerprint: &str,
        answer: &Answer,
    ) {
        if !answer.is_final() {
            return;
        }
        let mut stored = answer.clone();
        stored.replayed = false;
        self.answers.insert(
            scope_key(resource, merchant_id, idempotency_key),
            (fingerprint.to_owned(), stored),
        );
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
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
