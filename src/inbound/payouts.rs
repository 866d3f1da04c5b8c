//! A `payout.paid` / `payout.failed` event, applied through the function every path that
//! finishes a payout uses.

use crate::db::DbConnection;
use crate::db::payouts as payout_rows;
use crate::domain::PayoutStatus;
use crate::payouts::{self, PayoutApplied, PayoutOutcome};

use super::apply::Applied;
use super::event::PayoutData;

/// Finishes the `pending` payout named by `data.reference`: only `pending → final` changes
/// anything; an event that contradicts the pending payout changes nothing.
pub(super) fn finish_payout(
    conn: &mut DbConnection,
    paid: bool,
    data: PayoutData,
) -> diesel::QueryResult<Applied> {
    if let Some(pending) = payout_rows::find_by_id(conn, &data.reference)?
        .filter(|p| p.status == PayoutStatus::Pending)
    {
        let field = if pending
            .provider_payout_id
            .as_deref()
            .zip(data.payout_id.as_deref())
            .is_some_and(|(known, told)| known != told)
        {
            Some("payout_id")
        } else if data.amount.is_some_and(|a| a != pending.amount) {
            Some("amount")
        } else if data
            .currency
            .as_deref()
            .is_some_and(|c| c != pending.currency)
        {
            Some("currency")
        } else {
            None
        };
        if let Some(field) = field {
            return Ok(Applied::PayoutMismatch {
                payout_id: pending.id,
                field,
            });
        }
    }
    let outcome = if paid {
        PayoutOutcome::Paid {
            provider_payout_id: data.payout_id,
        }
    } else {
        PayoutOutcome::Failed {
            provider_payout_id: data.payout_id,
            failure_code: data.failure_code,
        }
    };
    Ok(
        match payouts::apply_payout_outcome(conn, &data.reference, &outcome, None)? {
            PayoutApplied::Applied(row) => Applied::PayoutFinished {
                payout_id: row.id,
                status: row.status,
            },
            PayoutApplied::AlreadyFinal(row) => Applied::PayoutAlreadyFinal {
                payout_id: row.id,
                current: row.status,
            },
            PayoutApplied::Unknown => Applied::UnknownReference,
        },
    )
}
