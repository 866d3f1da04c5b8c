//! What a request with an already-used key is told, and how duplicates wait for the first
//! request without querying the database in a loop.
//!
//! In one process, only the first request of an idempotency scope goes to the database
//! (it claims, or follows a claim made elsewhere): its duplicates here wait on it through
//! [`InFlight`] and wake the moment it answers, however many they are. The one request
//! following a claim made in another instance polls the row with a growing interval
//! ([`follow`], shared by every endpoint whose rows are their own idempotency records), so
//! a storm spread over instances costs each instance one poller, not one per request.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

    /// What a duplicate that waited for this answer is told: the replay of a final answer,
    /// or the same 202 (rather than all of them retrying at once).
    pub fn for_duplicate(self) -> Self {
        if self.is_final() {
            self.replayed()
        } else {
            self
        }
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

/// Where a running request is registered.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Entry {
    /// The request that leads an idempotency scope here, with its fingerprint.
    Scope(String),
    /// The request that holds the lease of a row here (it is asking the provider).
    Row(String),
}

struct Running {
    fingerprint: String,
    outcome: watch::Receiver<Outcome>,
}

/// The requests running in this process, with a channel their duplicates wait on.
#[derive(Default, Clone)]
pub struct InFlight {
    running: Arc<Mutex<HashMap<Entry, Running>>>,
    /// Reads of a row by duplicates waiting for another instance (see [`follow`]).
    polls: Arc<AtomicU64>,
    /// Duplicates polling a row right now, one per key (see [`follow`]).
    pollers: Arc<AtomicUsize>,
}

/// This request's turn under an idempotency scope in this process.
pub enum Turn {
    /// It is the first: it goes to the database and settles the guard with its answer.
    Lead(InFlightGuard),
    /// Another request here leads the scope: wait for its answer.
    Join {
        fingerprint: String,
        outcome: watch::Receiver<Outcome>,
    },
}

impl InFlight {
    fn running(&self) -> MutexGuard<'_, HashMap<Entry, Running>> {
        // Only inserts and removes happen under the lock; a poisoned map is still consistent.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers `entry` (the lock is held by the caller, who has checked it is free).
    fn register(
        &self,
        running: &mut HashMap<Entry, Running>,
        entry: Entry,
        fingerprint: &str,
    ) -> InFlightGuard {
        let (sender, outcome) = watch::channel(None);
        let fingerprint = fingerprint.to_owned();
        running.insert(
            entry.clone(),
            Running {
                fingerprint,
                outcome,
            },
        );
        InFlightGuard {
            registry: self.clone(),
            entry,
            sender,
        }
    }

    /// Leads `scope` in this process if no request does yet (decided under one lock, so
    /// of simultaneous duplicates exactly one leads), else joins the one that does.
    pub fn lead_or_join(&self, scope: &str, fingerprint: &str) -> Turn {
        let entry = Entry::Scope(scope.to_owned());
        let mut running = self.running();
        match running.get(&entry) {
            Some(leader) => Turn::Join {
                fingerprint: leader.fingerprint.clone(),
                outcome: leader.outcome.clone(),
            },
            None => Turn::Lead(self.register(&mut running, entry, fingerprint)),
        }
    }

    /// Announces that this request holds the lease of row `id` and is asking the provider.
    /// The guard must be settled with the outcome; dropped unsettled (an error), its
    /// waiters fall back to reading the row.
    pub fn drive(&self, id: &str) -> InFlightGuard {
        // A takeover after a lost lease may register a row again: the newest entry wins.
        self.register(&mut self.running(), Entry::Row(id.to_owned()), "")
    }

    pub fn subscribe(&self, id: &str) -> Option<watch::Receiver<Outcome>> {
        self.running()
            .get(&Entry::Row(id.to_owned()))
            .map(|r| r.outcome.clone())
    }

    /// Reads of rows by duplicates waiting for a request in another instance, since start.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Counts a duplicate among the pollers until the returned guard drops.
    fn start_polling(&self) -> Polling {
        self.pollers.fetch_add(1, Ordering::Relaxed);
        Polling(self.pollers.clone())
    }
}

/// One duplicate polling a row, counted while it lives.
struct Polling(Arc<AtomicUsize>);

impl Polling {
    /// How long this poller waits between reads: see [`poll_interval`].
    fn interval(&self) -> Duration {
        poll_interval(self.0.load(Ordering::Relaxed))
    }
}

impl Drop for Polling {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

pub struct InFlightGuard {
    registry: InFlight,
    entry: Entry,
    sender: watch::Sender<Outcome>,
}

impl InFlightGuard {
    pub fn settle(self, answer: &Answer) {
        self.sender.send_replace(Some(answer.clone()));
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut running = self.registry.running();
        // A later request may have registered the same entry after a takeover: leave it.
        if running
            .get(&self.entry)
            .is_some_and(|r| r.outcome.same_channel(&self.sender.subscribe()))
        {
            running.remove(&self.entry);
        }
    }
}

/// What a request learnt from the request leading its key in this process.
pub enum Joined {
    /// Its answer: a replay of the final answer, or the 202 it ended with.
    Answer(Answer),
    /// This request leads its key here: it goes to the database with this much of the wait
    /// left, and settles `guard` with its answer for the duplicates that join meanwhile.
    Lead {
        guard: InFlightGuard,
        wait_left: Duration,
    },
}

/// Leads the key in this process, or waits on the request that does: no insert that is
/// bound to fail, no reads. A storm of identical requests costs the database only the
/// leader's work, per instance. A leader that fails (an error, not an answer) hands the
/// lead to one of its waiters; one whose wait runs out is answered 409 with `Retry-After`.
pub async fn lead_or_join(
    inflight: &InFlight,
    resource: &'static str,
    scope: &str,
    fingerprint: &str,
    wait: Duration,
) -> Result<Joined, ApiError> {
    use crate::metrics::{IdempotencyOutcome, idempotency};
    let deadline = Instant::now() + wait;
    loop {
        let (claimed, mut outcome) = match inflight.lead_or_join(scope, fingerprint) {
            Turn::Lead(guard) => {
                let wait_left = deadline.saturating_duration_since(Instant::now());
                return Ok(Joined::Lead { guard, wait_left });
            }
            Turn::Join {
                fingerprint,
                outcome,
            } => (fingerprint, outcome),
        };
        if claimed != fingerprint {
            idempotency(resource, IdempotencyOutcome::Reused);
            return Err(ApiError::IdempotencyKeyReused);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        match settled(&mut outcome, remaining).await {
            Settled::Answer(answer) => {
                let answer = answer.for_duplicate();
                if answer.replayed {
                    idempotency(resource, IdempotencyOutcome::Replayed);
                }
                return Ok(Joined::Answer(answer));
            }
            // The leader ended without an answer: take a turn (lead, or join the next).
            Settled::Ended => {}
            Settled::TimedOut => {
                idempotency(resource, IdempotencyOutcome::InUse);
                return Err(ApiError::IdempotencyKeyInUse {
                    retry_after_secs: RETRY_AFTER_SECS,
                });
            }
        }
    }
}

/// How waiting on a running request's channel ended.
enum Settled {
    Answer(Answer),
    /// It ended without an answer (an error; its guard was dropped unsettled).
    Ended,
    TimedOut,
}

async fn settled(outcome: &mut watch::Receiver<Outcome>, wait: Duration) -> Settled {
    match actix_web::rt::time::timeout(wait, outcome.wait_for(Option::is_some)).await {
        Ok(Ok(answer)) => answer.clone().map_or(Settled::Ended, Settled::Answer),
        Ok(Err(_)) => Settled::Ended,
        Err(_) => Settled::TimedOut,
    }
}

/// Waits for the outcome of the request driving row `id` in this process, for at most
/// `wait`. `None`: nothing drives it here, it ended without an outcome, or time ran out.
pub async fn wait_for_outcome(
    registry: &InFlight,
    id: &str,
    wait: std::time::Duration,
) -> Option<Answer> {
    let mut receiver = registry.subscribe(id)?;
    match settled(&mut receiver, wait).await {
        Settled::Answer(answer) => Some(answer),
        Settled::Ended | Settled::TimedOut => None,
    }
}

/// How long a duplicate told "in use" should wait before retrying.
pub const RETRY_AFTER_SECS: u64 = 1;
/// How often a duplicate reads the row of a request running in another instance, with
/// `pollers` keys being polled in this process. Only one request per key and instance polls
/// (the others wait on it, see [`lead_or_join`]). The polls share a budget of about
/// 1 000 reads/s per instance, however many keys wait: a lone key (a storm over several
/// instances) is read every 5 ms, 100 keys each every 100 ms; only past 1 000 keys does
/// each key's one read a second take the total over the budget.
fn poll_interval(pollers: usize) -> Duration {
    let share = POLL_BUDGET_PERIOD.saturating_mul(u32::try_from(pollers).unwrap_or(u32::MAX));
    share.clamp(POLL_MIN, POLL_MAX)
}
/// One read per this period, shared among the keys being polled.
const POLL_BUDGET_PERIOD: Duration = Duration::from_millis(1);
const POLL_MIN: Duration = Duration::from_millis(5);
/// An answer is seen at most this long after it is stored.
const POLL_MAX: Duration = Duration::from_secs(1);

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
    let mut polling = None;
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
            return Ok(Followed::Answer(answer.for_duplicate()));
        }
        if inflight.subscribe(row.record_id()).is_none() {
            // Running elsewhere (another instance), or it just ended: poll.
            let polling = polling.get_or_insert_with(|| inflight.start_polling());
            actix_web::rt::time::sleep(polling.interval().min(remaining)).await;
        }
        inflight.polls.fetch_add(1, Ordering::Relaxed);
        crate::metrics::idempotency_poll();
        row = reload(row.record_id().to_owned()).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix_web::test]
    async fn waiters_receive_the_outcome_once_settled() {
        let registry = InFlight::default();
        let guard = registry.drive("pay_1");
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
        let guard = registry.drive("pay_2");
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

    #[test]
    fn pollers_share_a_budget_of_reads_within_bounds() {
        let ms = Duration::from_millis;
        assert_eq!(poll_interval(1), ms(5), "a lone key is read every 5 ms");
        assert_eq!(poll_interval(10), ms(10), "10 keys share 1 000 reads/s");
        assert_eq!(poll_interval(100), ms(100), "and so do 100");
        assert_eq!(poll_interval(1_000), ms(1_000));
        assert_eq!(
            poll_interval(10_000),
            ms(1_000),
            "never slower than a second"
        );

        let registry = InFlight::default();
        let first = registry.start_polling();
        let others: Vec<_> = (0..9).map(|_| registry.start_polling()).collect();
        assert_eq!(first.interval(), ms(10), "10 pollers count");
        drop(others);
        assert_eq!(
            first.interval(),
            ms(5),
            "pollers that ended no longer count"
        );
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
    /// What the map may hold: about 2 MiB, some 1 500 payment answers (a retry storm's
    /// key stays; a miss costs one database read). Measured: 8 MiB cost 6 MiB of peak RSS.
    pub const MAX_BYTES: u64 = 2 * 1024 * 1024;

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
