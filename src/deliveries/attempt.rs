//! One delivery attempt: claim the delivery, send it, record how it went and what it says
//! about the endpoint, in one transaction.

use std::time::Duration;

use super::schedule::{jitter, next_step, signing_secrets};
use super::send;
use super::slots::Slot;
use crate::db::DbConnection;
use crate::db::deliveries::{self as rows, AttemptRecord, NextStep};
use crate::db::webhook_endpoints;
use crate::domain::{Timestamp, new_lease_token, now};
use crate::metrics;
use crate::state::AppState;

/// A lease lasts the attempt's timeout plus this: time to claim, connect and look up.
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);
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

/// Claims one delivery, sends it, records how it went.
pub(super) async fn attempt(
    state: &AppState,
    client: &awc::Client,
    delivery_id: String,
    slot: Slot,
) {
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
        Ok(Recorded::Deleted) => {
            tracing::info!(delivery_id = %delivery_id, "delivery deleted with its endpoint during the attempt");
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
    Done {
        disabled: bool,
    },
    LeaseLost,
    /// The delivery is gone: its endpoint was deleted (its deliveries with it) meanwhile.
    Deleted,
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
            return Ok(match rows::load_claimed(conn, delivery_id)? {
                Some(_) => Recorded::LeaseLost,
                None => Recorded::Deleted,
            });
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
