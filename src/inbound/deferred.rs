//! The provider's dispute events that came before their payment was final: applied, oldest
//! first, in the transaction that captures the payment, and otherwise by the recovery pass
//! once the payment is final (an opening for a payment that ended without a capture then
//! changes nothing, as it would have on arrival). While an opening is kept, the payment's
//! refunds wait as they do for an open dispute.

use super::apply::{Applied, apply, log_applied};
use super::event::{DISPUTE_CREATED, Envelope, effect_of};
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

/// Applies the kept dispute events of payments just captured, in the transaction that
/// captured them, so the dispute is open from the moment the money is (the recovery pass
/// would apply them up to `RECOVERY_INTERVAL_MS` later). Each in a savepoint of its own: one
/// that fails is left kept for the recovery pass, and the capture stands.
///
/// Lock order: the caller holds the payments' rows, and each event takes its provider
/// dispute's lock (`apply`). A webhook that holds a dispute's lock never waits for a payment
/// that is not final: it keeps its event without touching the payment's row.
pub(crate) fn apply_kept_of_captured(
    conn: &mut DbConnection,
    captured: &[(&str, &LedgerPolicy)],
    at: Timestamp,
) -> diesel::QueryResult<()> {
    use diesel::Connection;
    if captured.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = captured.iter().map(|(id, _)| *id).collect();
    for kept in rows::kept_for(conn, &ids)? {
        let Some((_, policy)) = captured.iter().find(|(id, _)| *id == kept.payment_id) else {
            continue;
        };
        if let Err(e) = conn.transaction(|conn| apply_kept(conn, &kept, at, policy)) {
            tracing::warn!(webhook_id = %kept.webhook_id, payment_id = %kept.payment_id, error = %e, "applying a kept dispute event at capture failed; the recovery pass will");
        }
    }
    Ok(())
}

/// Whether the provider opened a dispute of this payment that is kept until the payment is
/// final: its money is disputed already, so a refund waits as for an open dispute.
pub(crate) fn dispute_kept(conn: &mut DbConnection, payment_id: &str) -> diesel::QueryResult<bool> {
    rows::opening_kept(conn, payment_id, DISPUTE_CREATED)
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
