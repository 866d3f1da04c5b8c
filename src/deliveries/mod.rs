//! The delivery worker, one in every instance: the database is the queue.
//!
//! ```text
//! every 250 ms, when a retry falls due, or when an attempt ends:
//!   endpoints with due deliveries (enabled, lease free), leaving out those this instance
//!   already sends to as much as it may ─▶ up to the free slots, round robin per endpoint
//!   per delivery, on its own task:
//!     claim: UPDATE … SET lease WHERE id = ? AND status = 'pending' AND lease free   (won?)
//!     POST, signed, within WEBHOOK_TIMEOUT_MS                    [no DB connection held]
//!     one transaction: record the attempt + next step (guarded by the lease token),
//!                      the endpoint's health (success, failing since, 410 → disabled)
//! ```
//!
//! The lease outlasts the longest attempt, so across instances a delivery has at most one
//! attempt in flight; a worker killed mid-attempt leaves a lease that runs out, and the
//! delivery is attempted again (same `webhook-id`): at least once, through anything.
//! Bounded slots per endpoint and in total keep a hanging endpoint from delaying others.

pub mod send;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::db::deliveries::{self as rows, AttemptRecord, NextStep};
use crate::db::{DbConnection, webhook_endpoints};
use crate::domain::{Timestamp, new_lease_token, now};
use crate::metrics;
use crate::shutdown::Shutdown;
use crate::signing::WebhookSecret;
use crate::state::AppState;

const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Attempts in flight to one endpoint, per instance. The first is every endpoint's own, so
/// no number of slow endpoints can keep another waiting; the others (up to
/// [`MAX_IN_FLIGHT_PER_ENDPOINT`] - 1 each, to work off a backlog faster) come from
/// [`MAX_EXTRA_IN_FLIGHT`] shared by all endpoints.
pub const MAX_IN_FLIGHT_PER_ENDPOINT: usize = 4;
/// Attempts in flight beyond each endpoint's first, per instance.
pub const MAX_EXTRA_IN_FLIGHT: usize = 64;
/// A lease lasts the attempt's timeout plus this: time to claim, connect and look up.
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// Endpoints looked at per pass.
const ENDPOINTS_PER_PASS: i64 = 500;
const BACKLOG_EVERY: Duration = Duration::from_secs(5);
const WARN_EVERY: Duration = Duration::from_secs(10);

/// How an attempt ended, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    Succeeded,
    /// Failed; another attempt is scheduled.
    Retrying,
    /// Failed, and it was the last attempt (or the receiver answered 410).
    Failed,
}

impl DeliveryOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Retrying => "retrying",
            Self::Failed => "failed",
        }
    }
}

/// Where a delivery goes after attempt number `attempts_made` (1-based) ended at `ended`.
/// A schedule of N delays means N + 1 attempts; each delay is stretched by `jitter`
/// (0.8 … 1.2) and never shorter than the receiver's `Retry-After`.
pub fn next_step(
    schedule: &[Duration],
    attempts_made: usize,
    attempt: &send::Attempt,
    ended: Timestamp,
    jitter: f64,
) -> NextStep {
    if attempt.succeeded() {
        return NextStep::Succeeded;
    }
    if attempt.gone() {
        return NextStep::Failed;
    }
    let Some(delay) = attempts_made.checked_sub(1).and_then(|i| schedule.get(i)) else {
        return NextStep::Failed;
    };
    let mut wait = delay.mul_f64(jitter.clamp(0.8, 1.2));
    if let Some(asked) = attempt.retry_after {
        wait = wait.max(asked);
    }
    let wait = chrono::TimeDelta::from_std(wait).unwrap_or(chrono::TimeDelta::MAX);
    NextStep::RetryAt(ended.checked_add_signed(wait).unwrap_or(Timestamp::MAX))
}

/// A uniform factor in 0.8 … 1.2 (±20 %), from the OS generator through UUIDv4.
fn jitter() -> f64 {
    let r = (uuid::Uuid::new_v4().as_u128() % 1_000_000) as f64 / 1_000_000.0;
    0.8 + 0.4 * r
}

/// The secrets a delivery is signed with now: the endpoint's, and during a rotation's
/// overlap the previous one too (new first).
pub fn signing_secrets(
    current: &str,
    previous: Option<&str>,
    previous_until: Option<Timestamp>,
    now: Timestamp,
) -> Vec<WebhookSecret> {
    let previous = previous.filter(|_| previous_until.is_some_and(|until| until > now));
    std::iter::once(current)
        .chain(previous)
        .filter_map(|s| WebhookSecret::parse(s).ok())
        .collect()
}

/// This instance's attempts in flight, per endpoint. The worker and its attempts share one
/// thread (awc's client is not `Send`), hence `Rc`.
#[derive(Clone, Default)]
struct Slots {
    per_endpoint: Rc<RefCell<HashMap<String, usize>>>,
    wake: Rc<Notify>,
}

/// One attempt's place; given back (and the worker woken) when dropped.
struct Slot {
    slots: Slots,
    endpoint_id: String,
}

impl Slots {
    /// Attempts in flight beyond their endpoint's first.
    fn extra(&self) -> usize {
        self.per_endpoint
            .borrow()
            .values()
            .map(|n| n.saturating_sub(1))
            .sum()
    }

    /// Endpoints that can take no attempt now: at their limit, or holding their first
    /// while the shared extra slots are all taken.
    fn busy(&self) -> Vec<String> {
        let extras_left = self.extra() < MAX_EXTRA_IN_FLIGHT;
        self.per_endpoint
            .borrow()
            .iter()
            .filter(|(_, n)| **n >= MAX_IN_FLIGHT_PER_ENDPOINT || !extras_left)
            .map(|(id, _)| id.clone())
            .collect()
    }

    fn take(&self, endpoint_id: &str) -> Option<Slot> {
        let used = self
            .per_endpoint
            .borrow()
            .get(endpoint_id)
            .copied()
            .unwrap_or(0);
        let room =
            used == 0 || (used < MAX_IN_FLIGHT_PER_ENDPOINT && self.extra() < MAX_EXTRA_IN_FLIGHT);
        if !room {
            return None;
        }
        *self
            .per_endpoint
            .borrow_mut()
            .entry(endpoint_id.to_owned())
            .or_default() += 1;
        Some(Slot {
            slots: self.clone(),
            endpoint_id: endpoint_id.to_owned(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = self.slots.per_endpoint.borrow_mut();
        if let Some(n) = map.get_mut(&self.endpoint_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.endpoint_id);
            }
        }
        self.slots.wake.notify_one();
    }
}

/// Spawns the worker under the shutdown handle.
pub fn spawn_worker(state: &AppState) {
    let state = state.clone();
    let shutdown = state.shutdown.clone();
    shutdown.spawn("webhook-deliveries", |stop| run(state, stop));
}

async fn run(state: AppState, stop: Shutdown) {
    // No connection limit: the slots bound the attempts, and a limit below them would
    // queue one endpoint's attempt behind another's.
    let client = send::client(state.settings.webhook_timeout, 0, &state.tls);
    let slots = Slots::default();
    let mut backlog_seen: Option<Instant> = None;
    let mut warned: Option<Instant> = None;
    let mut next_pass = Instant::now() + POLL_INTERVAL;
    loop {
        tokio::select! {
            _ = stop.requested() => break,
            _ = actix_web::rt::time::sleep_until(next_pass.into()) => {}
            _ = slots.wake.notified() => {}
        }
        if backlog_seen.is_none_or(|at| at.elapsed() >= BACKLOG_EVERY) {
            backlog_seen = Some(Instant::now());
            observe_backlog(&state).await;
        }
        // The next pass comes when the next retry falls due, if that is sooner: a retry
        // waits its scheduled delay, not that rounded up to the polling interval.
        let next_due = match dispatch(&state, &client, &slots).await {
            Ok(next_due) => next_due,
            Err(e) => {
                if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    warned = Some(Instant::now());
                    tracing::warn!(error = %e, "looking for due webhook deliveries failed; will retry");
                }
                None
            }
        };
        let until_due = next_due.map_or(POLL_INTERVAL, |due| {
            (due - now()).to_std().unwrap_or(Duration::ZERO)
        });
        next_pass = Instant::now() + until_due.min(POLL_INTERVAL);
    }
}

/// Starts an attempt for every due delivery this instance has room for. Returns when the
/// next pending delivery falls due, if later.
async fn dispatch(
    state: &AppState,
    client: &awc::Client,
    slots: &Slots,
) -> Result<Option<Timestamp>, crate::db::DbError> {
    let busy = slots.busy();
    let in_flight = slots.per_endpoint.borrow().clone();
    let extra_free = MAX_EXTRA_IN_FLIGHT.saturating_sub(slots.extra());
    let at = now();
    // Round robin: a few deliveries per endpoint, so one endpoint's backlog never fills
    // the pass while another's deliveries wait.
    let (due, next_due) = state
        .db
        .run(move |conn| {
            let mut due = Vec::new();
            let mut extra_free = extra_free;
            for endpoint_id in rows::endpoints_with_due(conn, at, &busy, ENDPOINTS_PER_PASS)? {
                let used = in_flight.get(&endpoint_id).copied().unwrap_or(0);
                // Its own first slot, if free, and what it may take of the shared ones.
                let first = usize::from(used == 0);
                let extra = (MAX_IN_FLIGHT_PER_ENDPOINT - used.max(1)).min(extra_free);
                let wanted = first + extra;
                if wanted == 0 {
                    continue;
                }
                let ids = rows::due_for_endpoint(conn, &endpoint_id, at, wanted as i64)?;
                extra_free -= ids.len().saturating_sub(first).min(extra);
                due.extend(ids.into_iter().map(|id| (id, endpoint_id.clone())));
            }
            Ok((due, rows::next_due_after(conn, at)?))
        })
        .await?;
    for (delivery_id, endpoint_id) in due {
        let Some(slot) = slots.take(&endpoint_id) else {
            continue;
        };
        let (state, client) = (state.clone(), client.clone());
        actix_web::rt::spawn(async move { attempt(&state, &client, delivery_id, slot).await });
    }
    Ok(next_due)
}

/// Claims one delivery, sends it, records how it went.
async fn attempt(state: &AppState, client: &awc::Client, delivery_id: String, slot: Slot) {
    let settings = &state.settings;
    let token = new_lease_token();
    let claimed_at = now();
    let lease = chrono::TimeDelta::from_std(settings.webhook_timeout + LEASE_MARGIN)
        .unwrap_or(chrono::TimeDelta::MAX);
    let claim = {
        let (id, token) = (delivery_id.clone(), token.clone());
        state
            .db
            .run(move |conn| {
                if rows::claim(conn, &id, &token, claimed_at, claimed_at + lease)? {
                    rows::load_claimed(conn, &id)
                } else {
                    Ok(None)
                }
            })
            .await
    };
    let claimed = match claim {
        Ok(Some(claimed)) => claimed,
        Ok(None) => return, // another worker got it first
        Err(e) => {
            tracing::warn!(delivery_id = %delivery_id, error = %e, "claiming a delivery failed");
            return;
        }
    };
    let secrets = signing_secrets(
        &claimed.secret,
        claimed.previous_secret.as_deref(),
        claimed.previous_secret_expires_at,
        now(),
    );
    let started_at = now();
    let result = send::send(
        client,
        &send::Outgoing {
            url: &claimed.url,
            webhook_id: &claimed.event_id,
            body: &claimed.body,
            secrets: &secrets,
        },
        settings.webhook_timeout,
        settings.webhook_allow_private_urls,
    )
    .await;
    let ended = now();
    let attempts_made = usize::try_from(claimed.attempts).unwrap_or(0) + 1;
    let next = next_step(
        &settings.webhook_retry_schedule,
        attempts_made,
        &result,
        ended,
        jitter(),
    );
    let outcome = match next {
        NextStep::Succeeded => DeliveryOutcome::Succeeded,
        NextStep::RetryAt(_) => DeliveryOutcome::Retrying,
        NextStep::Failed => DeliveryOutcome::Failed,
    };
    metrics::webhook_delivery(outcome.as_str(), result.duration);
    let record = AttemptRecord {
        at: started_at,
        status_code: result.status_code.map(i32::from),
        error: result.error.clone(),
        duration_ms: i64::try_from(result.duration.as_millis()).unwrap_or(i64::MAX),
    };
    let health = if result.succeeded() {
        Health::Healthy
    } else if result.gone() {
        Health::Gone
    } else {
        Health::Failing
    };
    let disable_after = chrono::TimeDelta::from_std(settings.webhook_disable_after)
        .unwrap_or(chrono::TimeDelta::MAX);
    let (id, endpoint_id) = (delivery_id.clone(), claimed.endpoint_id.clone());
    let recorded = state
        .db
        .run(move |conn| {
            record_attempt(
                conn,
                &id,
                &token,
                &record,
                next,
                &endpoint_id,
                health,
                ended,
                disable_after,
            )
        })
        .await;
    match recorded {
        Ok(Recorded::Done { disabled: true }) => {
            tracing::warn!(endpoint_id = %claimed.endpoint_id, "webhook endpoint disabled after failed deliveries");
        }
        Ok(Recorded::Done { disabled: false }) => {}
        Ok(Recorded::LeaseLost) => {
            tracing::warn!(delivery_id = %delivery_id, "delivery lease ran out before the attempt was recorded");
        }
        Err(e) => {
            // The lease runs out and the delivery is attempted again: at least once.
            tracing::warn!(delivery_id = %delivery_id, error = %e, "recording a delivery attempt failed");
        }
    }
    tracing::info!(
        delivery_id = %delivery_id,
        event_id = %claimed.event_id,
        endpoint_id = %claimed.endpoint_id,
        status_code = result.status_code,
        outcome = outcome.as_str(),
        duration_ms = result.duration.as_secs_f64() * 1000.0,
        "webhook delivery attempt"
    );
    drop(slot);
}

/// What an attempt says about its endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Healthy,
    Failing,
    /// 410: disable at once.
    Gone,
}

enum Recorded {
    Done { disabled: bool },
    LeaseLost,
}

/// The attempt, the delivery's next step and the endpoint's health, in one transaction.
#[allow(clippy::too_many_arguments)]
fn record_attempt(
    conn: &mut DbConnection,
    delivery_id: &str,
    token: &str,
    record: &AttemptRecord,
    next: NextStep,
    endpoint_id: &str,
    health: Health,
    ended: Timestamp,
    disable_after: chrono::TimeDelta,
) -> diesel::QueryResult<Recorded> {
    use diesel::Connection;
    conn.transaction(|conn| {
        // The guarded write first: it is the proof this worker still holds the delivery.
        if !rows::finish_attempt(conn, delivery_id, token, record, next)? {
            return Ok(Recorded::LeaseLost);
        }
        let disabled = match health {
            Health::Healthy => {
                webhook_endpoints::record_success(conn, endpoint_id)?;
                false
            }
            Health::Gone => webhook_endpoints::disable(conn, endpoint_id, ended)?,
            Health::Failing => {
                webhook_endpoints::record_failure(conn, endpoint_id, ended, disable_after)?
            }
        };
        Ok(Recorded::Done { disabled })
    })
}

/// Sets the age of the oldest delivery still waiting for an enabled endpoint.
async fn observe_backlog(state: &AppState) {
    if let Ok(oldest) = state.db.run(rows::oldest_pending).await {
        let age = oldest.map_or(0, |at| (now() - at).num_seconds().max(0));
        metrics::webhook_delivery_backlog(age);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(status: Option<u16>, retry_after: Option<Duration>) -> send::Attempt {
        send::Attempt {
            status_code: status,
            error: None,
            retry_after,
            duration: Duration::from_millis(5),
        }
    }

    fn at(secs: i64) -> Timestamp {
        chrono::DateTime::from_timestamp(1_700_000_000 + secs, 0)
            .unwrap()
            .naive_utc()
    }

    #[test]
    fn n_delays_mean_n_plus_one_attempts_counted_from_the_end_of_the_last() {
        let schedule = [Duration::from_secs(5), Duration::from_secs(300)];
        let failed = attempt(Some(500), None);
        assert_eq!(
            next_step(&schedule, 1, &failed, at(0), 1.0),
            NextStep::RetryAt(at(5))
        );
        assert_eq!(
            next_step(&schedule, 2, &failed, at(10), 1.0),
            NextStep::RetryAt(at(310))
        );
        assert_eq!(
            next_step(&schedule, 3, &failed, at(400), 1.0),
            NextStep::Failed
        );
        assert_eq!(next_step(&[], 1, &failed, at(0), 1.0), NextStep::Failed);
        assert_eq!(
            next_step(&schedule, 3, &attempt(Some(204), None), at(0), 1.0),
            NextStep::Succeeded
        );
    }

    #[test]
    fn jitter_stays_within_20_percent_and_retry_after_is_a_floor() {
        let schedule = [Duration::from_secs(100)];
        let failed = attempt(None, None);
        assert_eq!(
            next_step(&schedule, 1, &failed, at(0), 0.8),
            NextStep::RetryAt(at(80))
        );
        assert_eq!(
            next_step(&schedule, 1, &failed, at(0), 1.2),
            NextStep::RetryAt(at(120))
        );
        assert_eq!(
            next_step(&schedule, 1, &failed, at(0), 5.0),
            NextStep::RetryAt(at(120))
        );
        let busy = attempt(Some(503), Some(Duration::from_secs(600)));
        assert_eq!(
            next_step(&schedule, 1, &busy, at(0), 1.0),
            NextStep::RetryAt(at(600))
        );
        let short = attempt(Some(429), Some(Duration::from_secs(1)));
        assert_eq!(
            next_step(&schedule, 1, &short, at(0), 1.0),
            NextStep::RetryAt(at(100))
        );
        for _ in 0..1000 {
            assert!((0.8..=1.2).contains(&jitter()));
        }
    }

    #[test]
    fn a_410_fails_the_delivery_at_once() {
        let schedule = [Duration::from_secs(5); 7];
        assert_eq!(
            next_step(&schedule, 1, &attempt(Some(410), None), at(0), 1.0),
            NextStep::Failed
        );
    }

    #[test]
    fn the_previous_secret_signs_only_until_it_expires() {
        let (new, old) = (WebhookSecret::generate(), WebhookSecret::generate());
        assert_eq!(
            signing_secrets(&new, Some(&old), Some(at(10)), at(0)).len(),
            2
        );
        assert_eq!(
            signing_secrets(&new, Some(&old), Some(at(10)), at(10)).len(),
            1
        );
        assert_eq!(signing_secrets(&new, None, None, at(0)).len(), 1);
    }
}
