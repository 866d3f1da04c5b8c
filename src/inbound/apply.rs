//! Applying a recorded event, inside the transaction that recorded it: a payment or refund
//! still in flight is finished through the same functions every other path uses, and an
//! event that contradicts what we know is recorded and changes nothing.

use crate::db::DbConnection;
use crate::db::payments::{self as payment_rows, PaymentRow};
use crate::db::payouts as payout_rows;
use crate::db::refunds as refund_rows;
use crate::domain::{LedgerPolicy, PayoutStatus, RefundStatus, Timestamp};
use crate::payments::{CaptureMethod, Charged, PaymentStatus, final_state};
use crate::payouts::{self, PayoutApplied, PayoutOutcome};
use crate::provider::{Charge, ProviderStatus};
use crate::refunds::{self, OutcomeApplied, RefundOutcome};

use super::event::{
    ChargeData, DISPUTE_CLOSED, DISPUTE_CREATED, DISPUTE_UPDATED, DisputeCreatedData,
    DisputeMoveData, Effect, PayoutData, RefundData,
};
use crate::db::disputes::{self as dispute_rows, DeferredRow};
use crate::disputes::{self, Advanced, Opened, Opening};
use crate::domain::DisputeStatus;

/// What applying an effect did, for the log.
#[derive(Debug)]
pub(super) enum Applied {
    PaymentFinished {
        payment_id: String,
        status: PaymentStatus,
    },
    /// The payment is already final: the event would move it backwards or sideways (or
    /// repeats what is stored), so nothing changes.
    PaymentAlreadyFinal {
        payment_id: String,
        current: PaymentStatus,
        event_status: PaymentStatus,
    },
    /// The event contradicts what we know of the charge (another charge id, amount or
    /// currency): never trusted to finish the payment.
    PaymentMismatch {
        payment_id: String,
        field: &'static str,
    },
    UnknownReference,
    RefundFinished {
        refund_id: String,
        status: RefundStatus,
    },
    /// The event contradicts what we know of the refund (another refund id, charge or
    /// amount): never trusted to finish it.
    RefundMismatch {
        refund_id: String,
        field: &'static str,
    },
    /// The refund is already final: nothing changes.
    RefundAlreadyFinal {
        refund_id: String,
        current: RefundStatus,
    },
    PayoutFinished {
        payout_id: String,
        status: PayoutStatus,
    },
    /// The event contradicts the pending payout it names (another provider id, amount or
    /// currency): never trusted to finish it.
    PayoutMismatch {
        payout_id: String,
        field: &'static str,
    },
    PayoutAlreadyFinal {
        payout_id: String,
        current: PayoutStatus,
    },
    DisputeOpened {
        dispute_id: String,
        payment_id: String,
    },
    DisputeAlreadyOpen {
        dispute_id: String,
    },
    /// Kept until its payment is final (the provider's webhooks can come out of order).
    DisputeDeferred {
        payment_id: String,
    },
    /// A move of a dispute that has not opened here yet: kept, and applied when it opens.
    DisputeMoveKept,
    /// The payment ended without a capture: no dispute can open on it.
    DisputeNotCaptured {
        payment_id: String,
    },
    DisputeMismatch {
        payment_id: String,
        field: &'static str,
    },
    DisputeMoved {
        dispute_id: String,
        status: DisputeStatus,
    },
    /// The move would go backwards or sideways (or repeats the status): nothing changed.
    DisputeNotForward {
        dispute_id: String,
        current: DisputeStatus,
        event_status: DisputeStatus,
    },
    Ignored(&'static str),
}

/// Runs inside the transaction that recorded the event `webhook_id`: an error rolls back
/// both.
pub(super) fn apply(
    conn: &mut DbConnection,
    webhook_id: &str,
    effect: Effect,
    at: Timestamp,
    policy: &LedgerPolicy,
) -> diesel::QueryResult<Applied> {
    match effect {
        Effect::FinishPayment { status, data } => finish_payment(conn, status, data, at, policy),
        Effect::FinishRefund { succeeded, data } => finish_refund(conn, succeeded, data),
        Effect::FinishPayout { paid, data } => finish_payout(conn, paid, data),
        Effect::OpenDispute(data) => open_dispute(conn, webhook_id, data, at, policy),
        Effect::MoveDispute { closing, data } => move_dispute(conn, webhook_id, closing, data, at),
        Effect::Ignore(why) => Ok(Applied::Ignored(why)),
    }
}

/// Opens the dispute once; an opening for a payment that is not final yet is kept for the
/// recovery pass to apply once it is.
fn open_dispute(
    conn: &mut DbConnection,
    webhook_id: &str,
    data: DisputeCreatedData,
    at: Timestamp,
    policy: &LedgerPolicy,
) -> diesel::QueryResult<Applied> {
    dispute_rows::lock_provider_dispute(conn, &data.dispute_id)?;
    let opening = Opening {
        provider_dispute_id: data.dispute_id.clone(),
        charge_id: data.charge_id.clone(),
        reference: data.reference.clone(),
        amount: data.amount,
        currency: data.currency.clone(),
        reason: data.reason.clone(),
        evidence_due_by: data
            .evidence_due_by
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.naive_utc()),
    };
    Ok(match disputes::open(conn, &opening, at, policy)? {
        Opened::Opened(row) => {
            // The moves that came before it, oldest first, now that there is what they move.
            for kept in dispute_rows::kept_moves(conn, &data.dispute_id)? {
                super::deferred::apply_kept(conn, &kept, at, policy)?;
            }
            Applied::DisputeOpened {
                dispute_id: row.id,
                payment_id: row.payment_id,
            }
        }
        Opened::Known(row) => Applied::DisputeAlreadyOpen { dispute_id: row.id },
        Opened::PaymentNotFinal(payment_id) => {
            let body = serde_json::to_string(&data)
                .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
            defer(
                conn,
                webhook_id,
                &data.dispute_id,
                &payment_id,
                DISPUTE_CREATED,
                body,
                at,
            )?;
            Applied::DisputeDeferred { payment_id }
        }
        Opened::NotCaptured { payment_id } => Applied::DisputeNotCaptured { payment_id },
        Opened::Mismatch { payment_id, field } => Applied::DisputeMismatch { payment_id, field },
        Opened::UnknownPayment => Applied::UnknownReference,
    })
}

/// Moves the dispute forward; a move of a dispute whose opening is kept waits with it.
fn move_dispute(
    conn: &mut DbConnection,
    webhook_id: &str,
    closing: bool,
    data: DisputeMoveData,
    at: Timestamp,
) -> diesel::QueryResult<Applied> {
    let to = match (closing, data.status.as_str()) {
        (false, "under_review") => DisputeStatus::UnderReview,
        (true, "won") => DisputeStatus::Won,
        (true, "lost") => DisputeStatus::Lost,
        _ => {
            return Ok(Applied::Ignored(
                "dispute event with a status it cannot carry",
            ));
        }
    };
    dispute_rows::lock_provider_dispute(conn, &data.dispute_id)?;
    let Some(dispute) = dispute_rows::find_by_provider_id(conn, &data.dispute_id)? else {
        // Kept: with its dispute's opening if that waits for its payment, else until the
        // opening comes (a provider's webhooks are not ordered; a move never followed by
        // its opening stays kept and moves nothing).
        let waits_for = dispute_rows::deferred_payment_of(conn, &data.dispute_id)?;
        let kind = if closing {
            DISPUTE_CLOSED
        } else {
            DISPUTE_UPDATED
        };
        let body = serde_json::to_string(&data)
            .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
        let until = waits_for.as_deref().unwrap_or(dispute_rows::UNTIL_OPENED);
        defer(conn, webhook_id, &data.dispute_id, until, kind, body, at)?;
        return Ok(match waits_for {
            Some(payment_id) => Applied::DisputeDeferred { payment_id },
            None => Applied::DisputeMoveKept,
        });
    };
    Ok(match disputes::advance(conn, dispute, to, at, None)? {
        Advanced::Moved(row) => Applied::DisputeMoved {
            dispute_id: row.id,
            status: row.status,
        },
        Advanced::NotForward(row) => Applied::DisputeNotForward {
            dispute_id: row.id,
            current: row.status,
            event_status: to,
        },
    })
}

#[allow(clippy::too_many_arguments)] // the kept event's columns, named
fn defer(
    conn: &mut DbConnection,
    webhook_id: &str,
    provider_dispute_id: &str,
    payment_id: &str,
    event_type: &str,
    data: String,
    at: Timestamp,
) -> diesel::QueryResult<()> {
    dispute_rows::defer(
        conn,
        &DeferredRow {
            webhook_id: webhook_id.to_owned(),
            provider_dispute_id: provider_dispute_id.to_owned(),
            payment_id: payment_id.to_owned(),
            event_type: event_type.to_owned(),
            data,
            created_at: at,
        },
    )
}

/// Finishes the `pending` refund named by `data.reference` through the one function every
/// path uses (request, retry, recovery, webhook): only `pending → final` changes anything.
fn finish_refund(
    conn: &mut DbConnection,
    succeeded: bool,
    data: RefundData,
) -> diesel::QueryResult<Applied> {
    if let Some(field) = refund_mismatch(conn, &data)? {
        return Ok(Applied::RefundMismatch {
            refund_id: data.reference,
            field,
        });
    }
    let outcome = if succeeded {
        RefundOutcome::Succeeded {
            provider_refund_id: data.refund_id,
        }
    } else {
        RefundOutcome::Failed {
            provider_refund_id: data.refund_id,
            failure_code: data.failure_code,
        }
    };
    Ok(
        match refunds::apply_refund_outcome(conn, &data.reference, &outcome, None)? {
            OutcomeApplied::Applied(row) => Applied::RefundFinished {
                refund_id: row.id,
                status: row.status,
            },
            OutcomeApplied::AlreadyFinal(row) => Applied::RefundAlreadyFinal {
                refund_id: row.id,
                current: row.status,
            },
            OutcomeApplied::Unknown => Applied::UnknownReference,
        },
    )
}

fn finish_payment(
    conn: &mut DbConnection,
    status: ProviderStatus,
    data: ChargeData,
    at: Timestamp,
    policy: &LedgerPolicy,
) -> diesel::QueryResult<Applied> {
    let Some(row) = payment_rows::find_by_id(conn, &data.reference)? else {
        return Ok(Applied::UnknownReference);
    };
    let event_status = match status {
        ProviderStatus::Succeeded => PaymentStatus::Succeeded,
        ProviderStatus::RequiresCapture => PaymentStatus::RequiresCapture,
        _ => PaymentStatus::Failed,
    };
    let already_final = |row: &PaymentRow| Applied::PaymentAlreadyFinal {
        payment_id: row.id.clone(),
        current: row.status,
        event_status,
    };
    if row.status != PaymentStatus::Processing {
        return Ok(already_final(&row));
    }
    if let Some(field) = mismatch(&row, status, &data) {
        return Ok(Applied::PaymentMismatch {
            payment_id: row.id,
            field,
        });
    }
    let charge = Charge {
        id: data.charge_id,
        status,
        amount: row.amount,
        currency: row.currency.clone(),
        reference: row.id.clone(),
        failure_code: data.failure_code,
        failure_message: data.failure_message,
    };
    let (final_row, body) = final_state(row.clone(), Charged::Answered(charge), at)
        .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))?;
    // Guarded by `status = 'processing'`: if the request path finished it meanwhile, its
    // stored answer stands (and its event is the payment's one event).
    if crate::payments::finish_recorded(conn, &final_row, &body, None, policy)? {
        Ok(Applied::PaymentFinished {
            payment_id: final_row.id,
            status: final_row.status,
        })
    } else {
        // Finished meanwhile: report the state it was finished in, not the one read above.
        let now = payment_rows::find_by_id(conn, &row.id)?.unwrap_or(row);
        Ok(already_final(&now))
    }
}

fn mismatch(row: &PaymentRow, status: ProviderStatus, data: &ChargeData) -> Option<&'static str> {
    // An automatic payment is charged, never only authorized; a manual one is authorized,
    // never charged before its capture.
    let manual = row.capture_method == CaptureMethod::Manual.as_str();
    match status {
        ProviderStatus::Succeeded if manual => return Some("capture_method"),
        ProviderStatus::RequiresCapture if !manual => return Some("capture_method"),
        _ => {}
    }
    if row
        .provider_charge_id
        .as_deref()
        .is_some_and(|known| known != data.charge_id)
    {
        return Some("charge_id");
    }
    if data.amount.is_some_and(|amount| amount != row.amount) {
        return Some("amount");
    }
    if data
        .currency
        .as_deref()
        .is_some_and(|c| !c.eq_ignore_ascii_case(&row.currency))
    {
        return Some("currency");
    }
    None
}

/// What a refund event contradicts in the pending refund it names, if anything: a final
/// or unknown refund is left to [`refunds::apply_refund_outcome`] to report.
fn refund_mismatch(
    conn: &mut DbConnection,
    data: &RefundData,
) -> diesel::QueryResult<Option<&'static str>> {
    let Some(refund) = refund_rows::find_by_id(conn, &data.reference)? else {
        return Ok(None);
    };
    if refund.status != RefundStatus::Pending {
        return Ok(None);
    }
    let differs = |known: Option<&str>, told: Option<&str>| {
        known.zip(told).is_some_and(|(known, told)| known != told)
    };
    if differs(
        refund.provider_refund_id.as_deref(),
        data.refund_id.as_deref(),
    ) {
        return Ok(Some("refund_id"));
    }
    if data.amount.is_some_and(|amount| amount != refund.amount) {
        return Ok(Some("amount"));
    }
    let charge = payment_rows::find_by_id(conn, &refund.payment_id)?
        .and_then(|payment| payment.provider_charge_id);
    if differs(charge.as_deref(), data.charge_id.as_deref()) {
        return Ok(Some("charge_id"));
    }
    Ok(None)
}

/// Finishes the `pending` payout named by `data.reference`: only `pending → final` changes
/// anything; an event that contradicts the pending payout changes nothing.
fn finish_payout(
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
            .is_some_and(|c| !c.eq_ignore_ascii_case(&pending.currency))
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

pub(super) fn log_applied(id: &str, event_type: &str, applied: &Applied) {
    match applied {
        Applied::PaymentFinished { payment_id, status } => {
            tracing::info!(webhook_id = %id, %event_type, %payment_id, %status, "payment finished by webhook");
        }
        Applied::PaymentAlreadyFinal {
            payment_id,
            current,
            event_status,
        } if current == event_status => {
            tracing::info!(webhook_id = %id, %event_type, %payment_id, "payment already in the event's state; nothing changed");
        }
        Applied::PaymentAlreadyFinal {
            payment_id,
            current,
            event_status,
        } => {
            tracing::warn!(webhook_id = %id, %event_type, %payment_id, %current, %event_status, "webhook would move a final payment; nothing changed");
        }
        Applied::PaymentMismatch { payment_id, field } => {
            tracing::warn!(webhook_id = %id, %event_type, %payment_id, field, "webhook does not match the payment; nothing changed");
        }
        Applied::UnknownReference => {
            tracing::warn!(webhook_id = %id, %event_type, "webhook for an unknown reference; recorded only");
        }
        Applied::RefundFinished { refund_id, status } => {
            tracing::info!(webhook_id = %id, %event_type, %refund_id, %status, "refund finished by webhook");
        }
        Applied::RefundMismatch { refund_id, field } => {
            tracing::warn!(webhook_id = %id, %event_type, %refund_id, field, "webhook does not match the refund; nothing changed");
        }
        Applied::RefundAlreadyFinal { refund_id, current } => {
            tracing::info!(webhook_id = %id, %event_type, %refund_id, %current, "refund already final; nothing changed");
        }
        Applied::PayoutFinished { payout_id, status } => {
            tracing::info!(webhook_id = %id, %event_type, %payout_id, %status, "payout finished by webhook");
        }
        Applied::PayoutMismatch { payout_id, field } => {
            tracing::warn!(webhook_id = %id, %event_type, %payout_id, field, "webhook does not match the payout; nothing changed");
        }
        Applied::PayoutAlreadyFinal { payout_id, current } => {
            tracing::info!(webhook_id = %id, %event_type, %payout_id, %current, "payout already final; nothing changed");
        }
        Applied::DisputeOpened {
            dispute_id,
            payment_id,
        } => {
            tracing::info!(webhook_id = %id, %event_type, %dispute_id, %payment_id, "dispute opened by webhook");
        }
        Applied::DisputeAlreadyOpen { dispute_id } => {
            tracing::info!(webhook_id = %id, %event_type, %dispute_id, "dispute already open; nothing changed");
        }
        Applied::DisputeDeferred { payment_id } => {
            tracing::info!(webhook_id = %id, %event_type, %payment_id, "dispute event kept until its payment is final");
        }
        Applied::DisputeMoveKept => {
            tracing::info!(webhook_id = %id, %event_type, "move of a dispute not opened here yet; kept until it opens");
        }
        Applied::DisputeNotCaptured { payment_id } => {
            tracing::warn!(webhook_id = %id, %event_type, %payment_id, "dispute for a payment that ended without a capture; recorded only");
        }
        Applied::DisputeMismatch { payment_id, field } => {
            tracing::warn!(webhook_id = %id, %event_type, %payment_id, field, "dispute does not match its payment; recorded only");
        }
        Applied::DisputeMoved { dispute_id, status } => {
            tracing::info!(webhook_id = %id, %event_type, %dispute_id, %status, "dispute moved by webhook");
        }
        Applied::DisputeNotForward {
            dispute_id,
            current,
            event_status,
        } => {
            tracing::warn!(webhook_id = %id, %event_type, %dispute_id, %current, %event_status, "webhook would not move the dispute forward; nothing changed");
        }
        Applied::Ignored(why) => {
            tracing::info!(webhook_id = %id, %event_type, reason = why, "webhook recorded only");
        }
    }
}
