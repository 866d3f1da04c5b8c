//! The provider's dispute events that came before their payment was final: applied by the
//! recovery pass, oldest first, once it is (an opening for a payment that ended without a
//! capture then changes nothing, as it would have on arrival).

use super::apply::{Applied, apply, log_applied};
use super::event::{Envelope, effect_of};
use crate::db::DbConnection;
use crate::db::disputes::{self as rows, DeferredRow};
use crate::domain::{LedgerPolicy, Timestamp, now};
use crate::state::AppState;

/// Kept events applied per pass; the rest wait for the next.
const BATCH: i64 = 100;

/// Applies the kept events whose payment is final now, each in its own transaction, taken
/// by exactly one instance. Returns how many it applied.
pub async fn apply_deferred_disputes(state: &AppState) -> usize {
    let policy = state.settings.ledger;
    let applied = state
        .db
        .run(move |conn| {
            use diesel::Connection;
            let mut applied = 0;
            for kept in rows::ready(conn, BATCH)? {
                let done = conn.transaction(|conn| apply_kept(conn, &kept, now(), &policy))?;
                if done.is_some() {
                    applied += 1;
                }
            }
            Ok(applied)
        })
        .await;
    applied.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "applying kept dispute events failed; will retry");
        0
    })
}

/// Takes a kept event and applies it, in the caller's transaction; `None` when another
/// taker had it. The recovery pass runs it once a payment is final, and an opening for the
/// moves that came before it.
pub(super) fn apply_kept(
    conn: &mut DbConnection,
    kept: &DeferredRow,
    at: Timestamp,
    policy: &LedgerPolicy,
) -> diesel::QueryResult<Option<Applied>> {
    if !rows::take(conn, &kept.webhook_id)? {
        return Ok(None);
    }
    let envelope = Envelope {
        kind: kept.event_type.clone(),
        data: serde_json::from_str(&kept.data).unwrap_or_default(),
    };
    let result = apply(conn, &kept.webhook_id, effect_of(envelope), at, policy)?;
    log_applied(&kept.webhook_id, &kept.event_type, &result);
    Ok(Some(result))
}
