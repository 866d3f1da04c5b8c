//! Disputes: a customer's bank taking a charge back. The provider opens and moves them by
//! webhook; the merchant answers with evidence or accepts the loss, each step an operation
//! of the one idempotent mechanism ([`step`]).
//!
//! ```text
//! charge.dispute.created ──▶ open: INSERT dispute (unique provider id)      needs_response
//!                                  payment: amount_disputed += a, disputes_open += 1
//!                                  post `dispute` (− a, fee DISPUTE_FEE), event dispute.created
//! POST /v1/disputes/{id} {submit} ─▶ step: provider evidence ─▶ advance → under_review
//! POST /v1/disputes/{id}/close ───▶ step: provider close ────▶ advance → lost
//! charge.dispute.updated/closed ──▶ advance → under_review | won | lost
//!                 advance (one function for every path): guarded status move, forward only;
//!                 closing: disputes_open −= 1 (won: amount_disputed −= a, post
//!                 `dispute_reversal` + a); its event dispute.updated | dispute.closed
//! ```
//!
//! Everything a move changes happens in the transaction of the move, so it happens once
//! whichever path (webhook, request, retry, recovery) makes it first.

pub mod request;
pub mod step;
pub mod view;

use crate::auth::Merchant;
use crate::db::DbConnection;
use crate::db::disputes::{self as rows, DisputeRow};
use crate::domain::{
    DisputeId, DisputeStatus, LedgerPolicy, PaymentStatus, RequestRef, Timestamp, sanitized,
};
use crate::error::ApiError;
use crate::events::{self, EventType, NewEvent};
use crate::ledger::{self, Posting};
use crate::state::AppState;

pub use step::DisputeStep;

/// How long a merchant has to answer when the provider does not say.
const DEFAULT_RESPONSE_DAYS: i64 = 7;

/// A dispute as the provider opens it (`charge.dispute.created`).
#[derive(Debug, Clone)]
pub struct Opening {
    pub provider_dispute_id: String,
    pub charge_id: Option<String>,
    /// Our payment id.
    pub reference: String,
    pub amount: i64,
    pub currency: String,
    pub reason: Option<String>,
    pub evidence_due_by: Option<Timestamp>,
}

/// What [`open`] did.
#[derive(Debug)]
pub enum Opened {
    Opened(DisputeRow),
    /// This provider dispute is open here already: nothing changed.
    Known(DisputeRow),
    /// The payment is ours but not final: the opening waits for it.
    PaymentNotFinal(String),
    /// The payment ended without a capture (or was never charged): no dispute can open.
    NotCaptured {
        payment_id: String,
    },
    /// The opening contradicts the payment (its charge, currency or amount).
    Mismatch {
        payment_id: String,
        field: &'static str,
    },
    UnknownPayment,
}

/// Opens the dispute, once per provider dispute, in the caller's transaction (the webhook's,
/// which records its id beside it).
pub fn open(
    conn: &mut DbConnection,
    opening: &Opening,
    at: Timestamp,
    policy: &LedgerPolicy,
) -> diesel::QueryResult<Opened> {
    if let Some(known) = rows::find_by_provider_id(conn, &opening.provider_dispute_id)? {
        return Ok(Opened::Known(known));
    }
    let Some(payment) = rows::find_payment(conn, &opening.reference)? else {
        return Ok(Opened::UnknownPayment);
    };
    match payment.status {
        PaymentStatus::Processing | PaymentStatus::RequiresCapture => {
            return Ok(Opened::PaymentNotFinal(payment.id));
        }
        PaymentStatus::Failed | PaymentStatus::Canceled => {
            return Ok(Opened::NotCaptured {
                payment_id: payment.id,
            });
        }
        PaymentStatus::Succeeded => {}
    }
    let mismatch = if opening
        .charge_id
        .as_deref()
        .zip(payment.provider_charge_id.as_deref())
        .is_some_and(|(told, known)| told != known)
    {
        Some("charge_id")
    } else if !opening.currency.eq_ignore_ascii_case(&payment.currency) {
        Some("currency")
    } else if opening.amount < 1 {
        Some("amount")
    } else {
        None
    };
    if let Some(field) = mismatch {
        return Ok(Opened::Mismatch {
            payment_id: payment.id,
            field,
        });
    }
    // Its other open and lost disputes hold part of the capture already: together they
    // cannot take back more than was captured. Decided by the guarded write, not by the
    // read above, so two disputes opened at once cannot both pass.
    if !rows::open_on_payment(conn, &payment.id, opening.amount)? {
        // The write waited for one that opened this same dispute, and sees it now.
        if let Some(known) = rows::find_by_provider_id(conn, &opening.provider_dispute_id)? {
            return Ok(Opened::Known(known));
        }
        return Ok(Opened::Mismatch {
            payment_id: payment.id,
            field: "amount",
        });
    }
    let row = DisputeRow {
        id: DisputeId::generate().into_string(),
        merchant_id: payment.merchant_id.clone(),
        payment_id: payment.id.clone(),
        provider_dispute_id: opening.provider_dispute_id.clone(),
        amount: opening.amount,
        currency: payment.currency.clone(),
        reason: opening
            .reason
            .clone()
            .map(sanitized)
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| "general".to_owned()),
        status: DisputeStatus::NeedsResponse,
        evidence_text: None,
        evidence_submitted_at: None,
        evidence_due_by: opening
            .evidence_due_by
            .unwrap_or(at + chrono::Duration::days(DEFAULT_RESPONSE_DAYS)),
        step_id: None,
        created_at: at,
        updated_at: at,
    };
    if !rows::insert(conn, &row)? {
        // Opened by another delivery of the same dispute at the same moment: what this one
        // held on the payment is given back (as a won dispute's is).
        rows::close_on_payment(conn, &row.payment_id, row.amount, true)?;
        return match rows::find_by_provider_id(conn, &row.provider_dispute_id)? {
            Some(known) => Ok(Opened::Known(known)),
            None => Err(diesel::result::Error::RollbackTransaction),
        };
    }
    ledger::post(
        conn,
        &[Posting::dispute(
            policy,
            &row.merchant_id,
            &row.id,
            row.amount,
            &row.currency,
            at,
        )],
    )?;
    record_event(conn, &row, EventType::DisputeCreated, None)?;
    Ok(Opened::Opened(row))
}

/// What [`advance`] did.
#[derive(Debug)]
pub enum Advanced {
    Moved(DisputeRow),
    /// The dispute is at `to` already, or past it: a move backwards or sideways changes
    /// nothing.
    NotForward(DisputeRow),
}

/// Moves a dispute forward to `to`, whichever path asks (a provider webhook, a merchant's
/// step), with everything that goes with the move, in the caller's transaction: closing
/// frees the payment's refunds, a won dispute gives its amount back (`dispute_reversal`),
/// and every move has its event.
pub fn advance(
    conn: &mut DbConnection,
    dispute: DisputeRow,
    to: DisputeStatus,
    at: Timestamp,
    made_by: Option<&RequestRef>,
) -> diesel::QueryResult<Advanced> {
    let mut dispute = dispute;
    // A concurrent move between the read and the guarded write: read again and decide again
    // (each miss is someone else's move forward, so this ends quickly).
    for _ in 0..4 {
        let from = dispute.status;
        if !from.can_become(to) {
            return Ok(Advanced::NotForward(dispute));
        }
        if rows::move_status(conn, &dispute.id, from, to, at)? {
            dispute.status = to;
            dispute.updated_at = at;
            if from.is_open() && !to.is_open() {
                let won = to == DisputeStatus::Won;
                rows::close_on_payment(conn, &dispute.payment_id, dispute.amount, won)?;
                if won {
                    ledger::post(
                        conn,
                        &[Posting::dispute_reversal(
                            &dispute.merchant_id,
                            &dispute.id,
                            dispute.amount,
                            &dispute.currency,
                            at,
                        )],
                    )?;
                }
            }
            record_event(conn, &dispute, EventType::of_dispute_status(to), made_by)?;
            return Ok(Advanced::Moved(dispute));
        }
        dispute = rows::find_by_id(conn, &dispute.id)?.ok_or(diesel::result::Error::NotFound)?;
    }
    Err(diesel::result::Error::RollbackTransaction)
}

fn record_event(
    conn: &mut DbConnection,
    dispute: &DisputeRow,
    kind: EventType,
    made_by: Option<&RequestRef>,
) -> diesel::QueryResult<()> {
    let body = view::render(dispute)
        .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
    events::record(
        conn,
        NewEvent {
            merchant_id: &dispute.merchant_id,
            kind,
            object_id: &dispute.id,
            object: &body,
            request: made_by,
        },
    )
    .map(|_| ())
}

pub async fn get_dispute(
    state: &AppState,
    merchant: &Merchant,
    id: DisputeId,
) -> Result<String, ApiError> {
    let row = find(state, merchant, &id).await?;
    view::render(&row).map_err(ApiError::internal)
}

/// The merchant's dispute `id`, or 404.
pub(crate) async fn find(
    state: &AppState,
    merchant: &Merchant,
    id: &DisputeId,
) -> Result<DisputeRow, ApiError> {
    let (merchant_id, id) = (merchant.id.clone(), id.as_str().to_owned());
    state
        .db
        .run(move |conn| rows::find_for_merchant(conn, &merchant_id, &id))
        .await?
        .ok_or_else(|| ApiError::NotFound("no such dispute".to_owned()))
}

pub async fn list_disputes(
    state: &AppState,
    merchant: &Merchant,
    limit: i64,
    starting_after: Option<String>,
    status: Option<DisputeStatus>,
    payment_id: Option<String>,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let page = state
        .db
        .run(move |conn| {
            rows::list(
                conn,
                &merchant_id,
                limit,
                starting_after.as_deref(),
                status,
                payment_id.as_deref(),
            )
        })
        .await?
        .ok_or_else(|| ApiError::unknown_cursor("dispute"))?;
    let (rows, has_more) = crate::db::page(page, limit);
    view::render_list(&rows, has_more).map_err(ApiError::internal)
}
