//! The requests running in this process: only the first request of an idempotency scope
//! goes to the database, and its duplicates here wait on it and wake the moment it answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::answer::Answer;
use crate::error::ApiError;

type Outcome = Option<Answer>;

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

    /// Counts one read of a row by a duplicate waiting for another instance.
    pub(super) fn count_poll(&self) {
        self.polls.fetch_add(1, Ordering::Relaxed);
        crate::metrics::idempotency_poll();
    }

    /// Reads of rows by duplicates waiting for a request in another instance, since start.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Counts a duplicate among the pollers until the returned guard drops.
    pub(super) fn start_polling(&self) -> Polling {
        self.pollers.fetch_add(1, Ordering::Relaxed);
        Polling(self.pollers.clone())
    }
}

/// One duplicate polling a row, counted while it lives.
pub(super) struct Polling(Arc<AtomicUsize>);

impl Polling {
    /// How long this poller waits between reads: see [`poll_interval`].
    pub(super) fn interval(&self) -> Duration {
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
    /// The request leading the key here has another body: this one goes to the database on
    /// its own (leading nothing), which decides between them. The leader is not the key's
    /// owner until its insert wins: it may lose to this very body from another instance.
    Apart { wait_left: Duration },
}

/// Leads the key in this process, or waits on the request that does: no insert that is
/// bound to fail, no reads. A storm of identical requests costs the database only the
/// leader's work, per instance. A leader that fails (an error, not an answer) hands the
/// lead to one of its waiters; one whose wait runs out is answered 409 with `Retry-After`.
/// A request with another body than the leader's is never judged by it ([`Joined::Apart`]):
/// only the database knows whose body the key holds.
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
            let wait_left = deadline.saturating_duration_since(Instant::now());
            return Ok(Joined::Apart { wait_left });
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
