//! A capture or a cancel as an operation of the one mechanism: the claim that holds the
//! authorization, the provider call, and the finish that moves the payment.

use super::request::{CancellationReason, Requested, fingerprint};
use crate::config::Settings;
use crate::db::DbConnection;
use crate::db::captures::{self as rows, Age, CANCEL, CAPTURE, CaptureRow};
use crate::db::payments as payment_rows;
use crate::domain::RequestRef;
use crate::domain::{LedgerPolicy, OperationId, PaymentStatus, StepStatus, Timestamp, now};
use crate::error::ApiError;
use crate::events::{self, EventType, NewEvent};
use crate::idempotency::{Answer, idempotent_record};
use crate::ledger::{self, Posting};
use crate::operations::{Called, Claimed, Lease, Operation, Settled};
use crate::payments::view;
use crate::provider::{
    CaptureRequest, ChargeUpdate, OutcomeUnknown, ProviderError, ProviderStatus,
};
use crate::state::AppState;

idempotent_record!(CaptureRow);

/// What the provider said to a capture or cancel.
#[derive(Debug, Clone)]
pub enum CaptureOutcome {
    Done(ChargeUpdate),
    /// A final 4xx: nothing moved.
    Refused(String),
}

/// A capture or a cancel (by the row's `kind`), as an [`Operation`].
pub struct CaptureOrCancel;

impl Operation for CaptureOrCancel {
    type Row = CaptureRow;
    /// The provider's charge of the payment.
    type Call = String;
    type Outcome = CaptureOutcome;

    fn resource(row: &CaptureRow) -> &'static str {
        if row.kind == CAPTURE { CAPTURE } else { CANCEL }
    }

    fn claim(
        conn: &mut DbConnection,
        claim: &CaptureRow,
        settings: &Settings,
    ) -> diesel::QueryResult<Claimed<CaptureRow, String>> {
        claim_operation(conn, claim, expiry_cutoff(settings))
    }

    fn find_by_key(
        conn: &mut DbConnection,
        claim: &CaptureRow,
    ) -> diesel::QueryResult<Option<CaptureRow>> {
        rows::find_by_idempotency_key(
            conn,
            &claim.merchant_id,
            &claim.kind,
            &claim.idempotency_key,
        )
    }

    fn call_for(_: &mut DbConnection, row: &CaptureRow) -> diesel::QueryResult<String> {
        row.provider_charge_id
            .clone()
            .ok_or(diesel::result::Error::NotFound)
    }

    async fn call(
        state: &AppState,
        row: &CaptureRow,
        charge: &String,
    ) -> Result<Called<CaptureOutcome>, OutcomeUnknown> {
        let answer = if row.kind == CAPTURE {
            let request = CaptureRequest { amount: row.amount };
            state
                .provider
                .capture_charge(&row.id, charge, &request)
                .await
        } else {
            state.provider.cancel_charge(&row.id, charge).await
        };
        let expected = if row.kind == CAPTURE {
            ProviderStatus::Succeeded
        } else {
            ProviderStatus::Canceled
        };
        match answer {
            Ok(update) if update.status == expected => {
                Ok(Called::Final(CaptureOutcome::Done(update)))
            }
            // Accepted, not finished: the hold stays, and a retry or the recovery worker
            // asks again with the same key. Letting it go could capture the payment twice.
            Ok(update) if update.status == ProviderStatus::Pending => Ok(Called::Pending(None)),
            // A 200 that did not do what was asked moved nothing we can count on.
            Ok(update) => Ok(Called::Final(CaptureOutcome::Refused(format!(
                "the provider answered status `{}`",
                update.status.as_str()
            )))),
            Err(ProviderError::Refused(why)) => Ok(Called::Final(CaptureOutcome::Refused(why))),
            Err(ProviderError::Unknown(unknown)) => Err(unknown),
        }
    }

    fn finish(
        conn: &mut DbConnection,
        row: &CaptureRow,
        outcome: &CaptureOutcome,
        request: Option<&RequestRef>,
        settings: &Settings,
    ) -> diesel::QueryResult<Settled<CaptureRow>> {
        finish_operation(conn, row, outcome, request, &settings.ledger)
    }

    /// The 202 body is the payment as it is (still `requires_capture`, held).
    fn render_unfinished(conn: &mut DbConnection, row: &CaptureRow) -> diesel::QueryResult<String> {
        render_payment(conn, &row.payment_id)
    }
}

fn render_payment(conn: &mut DbConnection, payment_id: &str) -> diesel::QueryResult<String> {
    let payment =
        payment_rows::find_by_id(conn, payment_id)?.ok_or(diesel::result::Error::NotFound)?;
    view::render(&payment).map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))
}

/// One transaction: the insert that decides the key's winner, then the hold on the
/// authorization that decides the payment's one capture or cancel, or the stored refusal.
/// The guarded update decides; the payment is read only after it, to learn what was held
/// or to explain the refusal. Past `expiry` (authorizations given at or before it are
/// expired) only the expiry's own cancel may hold it.
fn claim_operation(
    conn: &mut DbConnection,
    claim: &CaptureRow,
    expiry: Option<Timestamp>,
) -> diesel::QueryResult<Claimed<CaptureRow, String>> {
    use diesel::Connection;
    let age = match expiry {
        None => Age::Any,
        Some(cutoff) if is_expiry(claim) => Age::Expired(cutoff),
        Some(cutoff) => Age::Live(cutoff),
    };
    conn.transaction(|conn| {
        rows::insert(conn, claim)?;
        let capture = claim.kind == CAPTURE;
        // 0: a capture of all that is capturable, or a cancel.
        let requested = claim.amount;
        let held = rows::hold(conn, &claim.payment_id, &claim.id, requested, age)?;
        let payment = rows::find_payment(conn, &claim.merchant_id, &claim.payment_id)?
            .ok_or(diesel::result::Error::NotFound)?;
        if held {
            let amount = match requested {
                0 if capture => payment.amount_capturable,
                requested => requested,
            };
            let charge = payment
                .provider_charge_id
                .ok_or(diesel::result::Error::NotFound)?;
            rows::set_claimed(conn, &claim.id, amount, &charge)?;
            let mut row = claim.clone();
            row.amount = amount;
            row.provider_charge_id = Some(charge.clone());
            return Ok(Claimed::Won(row, charge));
        }
        let expired = expiry.is_some_and(|cutoff| payment.expired_by(cutoff));
        let capturable_now = payment.status == PaymentStatus::RequiresCapture
            && payment.operation_id.is_none()
            && !expired;
        let refusal = if capturable_now && capture && requested > payment.amount_capturable {
            ApiError::AmountExceedsCapturable(format!(
                "the capture amount {requested} exceeds the {} capturable on payment {}",
                payment.amount_capturable, payment.id
            ))
        } else if expired {
            not_possible(capture, &payment.id, "its authorization has expired")
        } else {
            let why = format!(
                "it is `{}`, or another capture or cancel has it",
                payment.status
            );
            not_possible(capture, &payment.id, &why)
        };
        let answer = Answer::refusal(&refusal);
        rows::reject(conn, &claim.id, i32::from(answer.status), &answer.body)?;
        Ok(Claimed::Answered(answer))
    })
}

/// Whether this is the service's own cancel of an expired authorization (a merchant
/// cannot give the reason `expired`).
fn is_expiry(row: &CaptureRow) -> bool {
    row.cancellation_reason.as_deref() == Some(CancellationReason::Expired.as_str())
}

fn not_possible(capture: bool, payment_id: &str, why: &str) -> ApiError {
    if capture {
        ApiError::PaymentNotCapturable(format!(
            "payment {payment_id} cannot be captured: {why}; only a `requires_capture` \
             payment can be captured, once"
        ))
    } else {
        ApiError::PaymentNotCancelable(format!(
            "payment {payment_id} cannot be canceled: {why}; only a `requires_capture` \
             payment can be canceled, once"
        ))
    }
}

/// Applies the provider's answer in one transaction, guarded by the operation still being
/// pending: the payment moves (captured or canceled) or lets the authorization go (a
/// refusal), and the answer every retry replays is stored. Returns the operation after.
fn finish_operation(
    conn: &mut DbConnection,
    row: &CaptureRow,
    outcome: &CaptureOutcome,
    request: Option<&RequestRef>,
    policy: &LedgerPolicy,
) -> diesel::QueryResult<Settled<CaptureRow>> {
    use diesel::Connection;
    conn.transaction(|conn| {
        let at = now();
        // Write first: it is the guard, and on SQLite it takes the write lock before any read.
        if !rows::lock_unfinished(conn, &row.id, at)? {
            return Ok(Settled::already_final(rows::find_by_id(conn, &row.id)?));
        }
        let mut op = row.clone();
        let capture = op.kind == CAPTURE;
        let answer = match outcome {
            CaptureOutcome::Refused(why) if !is_expiry(&op) => {
                rows::let_go(conn, &op.payment_id, &op.id)?;
                op.status = op.status.move_to(StepStatus::Failed)?;
                let detail = format!("the provider refused: {why}");
                let refusal = if capture {
                    ApiError::PaymentNotCapturable(detail)
                } else {
                    ApiError::PaymentNotCancelable(detail)
                };
                Answer::refusal(&refusal)
            }
            // The expiry's cancel ends the authorization whatever the provider says: past
            // its expiry nothing may capture it here, so letting it go would leave it
            // `requires_capture` for ever, and the expiry asking again every pass. A
            // refusal means the provider has nothing to cancel, or lets it lapse itself.
            outcome => {
                op.status = op.status.move_to(match outcome {
                    CaptureOutcome::Done(_) => StepStatus::Succeeded,
                    CaptureOutcome::Refused(why) => {
                        tracing::warn!(payment_id = %op.payment_id, reason = %why, "the provider refused to cancel an expired authorization; canceled here all the same");
                        StepStatus::Failed
                    }
                })?;
                let moved = if capture {
                    // What we asked for: the provider captures exactly that (its echo is
                    // not trusted to change our books).
                    rows::capture_payment(conn, &op.payment_id, &op.id, op.amount, at)?
                } else {
                    rows::cancel_payment(
                        conn,
                        &op.payment_id,
                        &op.id,
                        op.cancellation_reason.as_deref(),
                        at,
                    )?
                };
                if !moved {
                    // Only the holder moves a held payment; never store half an outcome.
                    return Err(diesel::result::Error::RollbackTransaction);
                }
                let payment =
                    payment_rows::find_by_id(conn, &op.payment_id)?.ok_or(diesel::result::Error::NotFound)?;
                if capture {
                    // The captured money, posted with the capture.
                    ledger::post(
                        conn,
                        &[Posting::charge(
                            policy,
                            &payment.merchant_id,
                            &payment.id,
                            payment.amount_captured,
                            &payment.currency,
                            at,
                        )],
                    )?;
                }
                let payment = view::render(&payment)
                    .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
                // The payment's one capture or cancel is its one `payment.succeeded` /
                // `payment.canceled`, in this transaction.
                let kind = if capture {
                    EventType::PaymentSucceeded
                } else {
                    EventType::PaymentCanceled
                };
                events::record(
                    conn,
                    NewEvent {
                        merchant_id: &op.merchant_id,
                        kind,
                        object_id: &op.payment_id,
                        object: &payment,
                        request,
                    },
                )?;
                if capture {
                    // Dispute events the provider sent before the capture open now, with it.
                    crate::inbound::apply_kept_of_captured(
                        conn,
                        &[(op.payment_id.as_str(), policy)],
                        at,
                    )?;
                }
                Answer::new(200, payment)
            }
        };
        op.response_status = Some(i32::from(answer.status));
        op.response_body = Some(answer.body.to_string());
        op.lease_token = None;
        op.lease_expires_at = None;
        op.updated_at = at;
        if !rows::finish(conn, &op)? {
            return Err(diesel::result::Error::RollbackTransaction);
        }
        Ok(Settled::Applied(op))
    })
}

pub(super) fn new_claim(
    state: &AppState,
    merchant_id: &str,
    payment_id: &str,
    key: &str,
    requested: &Requested,
) -> CaptureRow {
    let (kind, amount, reason) = match requested {
        Requested::Capture(c) => (CAPTURE, c.amount.map(|a| a.minor_units()), None),
        Requested::Cancel(c) => (CANCEL, None, c.cancellation_reason.map(|r| r.as_str())),
    };
    let lease = Lease::new(state);
    CaptureRow {
        id: OperationId::generate(kind).to_string(),
        merchant_id: merchant_id.to_owned(),
        payment_id: payment_id.to_owned(),
        kind: kind.to_owned(),
        idempotency_key: key.to_owned(),
        request_fingerprint: fingerprint(kind, payment_id, amount, reason),
        amount: amount.unwrap_or(0),
        cancellation_reason: reason.map(str::to_owned),
        provider_charge_id: None,
        status: StepStatus::Pending,
        response_status: None,
        response_body: None,
        lease_token: Some(lease.token),
        lease_expires_at: Some(lease.expires_at),
        provider_attempts: 1,
        created_at: lease.at,
        updated_at: lease.at,
    }
}

/// Authorizations made at or before this are expired (`None`: none can be).
pub(super) fn expiry_cutoff(settings: &Settings) -> Option<Timestamp> {
    let expiry =
        chrono::Duration::from_std(settings.authorization_expiry).unwrap_or(chrono::Duration::MAX);
    now().checked_sub_signed(expiry)
}
