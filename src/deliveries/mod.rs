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
//! delivery is attempted again (same `webhook-id`): at least once, through anything. A
//! stopped worker (SIGTERM) starts no attempt and waits for those in flight to be recorded.
//! Bounded slots per endpoint and in total keep a hanging endpoint from delaying others.

pub mod attempt;
pub mod schedule;
pub mod send;
pub mod slots;

use std::time::{Duration, Instant};

use crate::db::deliveries as rows;
use crate::domain::{Timestamp, now};
use crate::metrics;
use crate::shutdown::Shutdown;
use crate::state::AppState;
use attempt::attempt;
use slots::{MAX_EXTRA_IN_FLIGHT, MAX_IN_FLIGHT_PER_ENDPOINT, Slots};

const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Endpoints looked at per pass.
const ENDPOINTS_PER_PASS: i64 = 500;
const BACKLOG_EVERY: Duration = Duration::from_secs(5);
const WARN_EVERY: Duration = Duration::from_secs(10);

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
    // Stopping: no attempt is started any more, and those in flight end and are recorded
    // (within the shutdown's grace), so a restart does not send them again once their
    // leases run out. A slot given back wakes this loop.
    while !slots.per_endpoint.borrow().is_empty() {
        slots.wake.notified().await;
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

/// Sets the age of the oldest delivery still waiting for an enabled endpoint.
async fn observe_backlog(state: &AppState) {
    if let Ok(oldest) = state.db.run(rows::oldest_pending).await {
        let age = oldest.map_or(0, |at| (now() - at).num_seconds().max(0));
        metrics::webhook_delivery_backlog(age);
    }
}
