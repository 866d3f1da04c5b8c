//! Refunding payments: where money goes back, at most once per request and never more
//! than was paid.
//!
//! ```text
//! client ──POST──▶ 404 unless the merchant's payment exists (nothing stored)
//!                  claim, ONE transaction:  INSERT refund (unique merchant+key)   ← decides the winner
//!                                           UPDATE payments SET amount_reserved += a
//!                                             WHERE status='succeeded' AND amount - amount_reserved >= a
//!                    │ reserved ──▶ drive: provider.create_refund(Idempotency-Key = refund id)
//!                    │                     (no DB connection held)
//!                    │              apply_refund_outcome: pending → succeeded (amount_refunded += a)
//!                    │                                            → failed    (amount_reserved -= a)
//!                    │                                    and the 201 every retry replays
//!                    │ not refundable ──▶ the 409/422 stored as the key's final answer
//!                    └ lost ──▶ follow: 422 on a different request, replay, wait, take over
//! ```
//!
//! Because the amount is reserved before the provider is called, in the same transaction
//! that claims the key, the sum of refunds that have not failed can never exceed what was
//! paid, however many requests race.

pub mod request;
pub mod view;

use crate::auth::Merchant;
use crate::config::Settings;
use crate::db::DbConnection;
use crate::db::refunds::{self as rows, RefundRow};
use crate::domain::RequestRef;
use crate::domain::{IdempotencyKey, PaymentId, PaymentStatus, RefundId, RefundStatus, Timestamp};
use crate::error::ApiError;
use crate::events::EventType;
use crate::idempotency::{Answer, Sent, idempotent_record};
use crate::ledger::{self, Posting};
use crate::operations::{self, Called, Claimed, Lease, Operation, Settle, Settled};
use crate::provider::{
    OutcomeUnknown, PROVIDER_REFUSED, ProviderError, ProviderRefund, ProviderStatus, RefundRequest,
};
use crate::state::AppState;

pub use request::{NewRefund, RefundReason};

/// How often a claim re-reads the payment when a concurrent refund changed it between its
/// read and its guarded update (PostgreSQL only: on SQLite the claim holds the write lock).
/// Every miss means another refund made progress, so this is never reached in practice.
const RESERVE_ATTEMPTS: usize = 50;

/// The final outcome of a refund at the provider, by whichever path it arrives (the
/// request itself, a retry, the recovery worker, a `refund.succeeded`/`refund.failed`
/// webhook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    Succeeded {
        /// `None`: the one known already stands (a webhook that left it out).
        provider_refund_id: Option<String>,
    },
    Failed {
        provider_refund_id: Option<String>,
        failure_code: Option<String>,
    },
}

impl RefundOutcome {
    /// The provider's id for the refund, if this outcome names one.
    fn provider_refund_id(&self) -> Option<&String> {
        match self {
            Self::Succeeded { provider_refund_id }
            | Self::Failed {
                provider_refund_id, ..
            } => provider_refund_id.as_ref(),
        }
    }

    /// The outcome a provider answer carries; `None` while it is still pending.
    pub fn from_provider(refund: ProviderRefund) -> Option<Self> {
        match refund.status {
            ProviderStatus::Succeeded => Some(Self::Succeeded {
                provider_refund_id: Some(refund.id),
            }),
            ProviderStatus::Failed => Some(Self::Failed {
                provider_refund_id: Some(refund.id),
                failure_code: refund.failure_code,
            }),
            ProviderStatus::Pending
            | ProviderStatus::RequiresCapture
            | ProviderStatus::Canceled => None,
        }
    }
}

/// What [`apply_refund_outcome`] did.
pub type OutcomeApplied = Settled<RefundRow>;

/// Finishes a pending refund: status, the provider's refund id, the money on the payment
/// (`amount_refunded` grows on success; the reservation is given back, and the amount comes
/// back to the balance, on failure), the 201 every retry of the refund request replays and
/// the refund's event, all in one transaction ([`operations::settle`]).
///
/// Only the `pending → final` move changes anything, and of concurrent callers exactly one
/// makes it, so the money moves once however many paths report the same outcome.
pub fn apply_refund_outcome(
    conn: &mut DbConnection,
    refund_id: &str,
    outcome: &RefundOutcome,
    made_by: Option<&RequestRef>,
) -> diesel::QueryResult<OutcomeApplied> {
    operations::settle::<CreateRefund>(conn, refund_id, outcome, made_by)
}

impl Settle for CreateRefund {
    type Row = RefundRow;
    type Outcome = RefundOutcome;

    fn lock_unfinished(
        conn: &mut DbConnection,
        id: &str,
        at: Timestamp,
    ) -> diesel::QueryResult<bool> {
        rows::lock_unfinished(conn, id, at)
    }

    fn find(conn: &mut DbConnection, id: &str) -> diesel::QueryResult<Option<RefundRow>> {
        rows::find_by_id(conn, id)
    }

    fn settle(
        conn: &mut DbConnection,
        row: &mut RefundRow,
        outcome: &RefundOutcome,
        at: Timestamp,
    ) -> diesel::QueryResult<()> {
        if let Some(id) = outcome.provider_refund_id() {
            row.provider_refund_id = Some(id.clone());
        }
        match outcome {
            RefundOutcome::Succeeded { .. } => {
                row.status = row.status.move_to(RefundStatus::Succeeded)?;
                row.failure_code = None;
                rows::add_refunded(conn, &row.payment_id, row.amount, at)?;
            }
            RefundOutcome::Failed { failure_code, .. } => {
                row.status = row.status.move_to(RefundStatus::Failed)?;
                row.failure_code = failure_code.clone();
                rows::release_reservation(conn, &row.payment_id, row.amount)?;
                // The amount comes back to the balance, with the failure.
                ledger::post(
                    conn,
                    &[Posting::refund_failure(
                        &row.merchant_id,
                        &row.id,
                        row.amount,
                        &row.currency,
                        at,
                    )],
                )?;
            }
        }
        Ok(())
    }

    fn finish(conn: &mut DbConnection, row: &RefundRow) -> diesel::QueryResult<bool> {
        rows::finish(conn, row)
    }

    fn render(row: &RefundRow) -> serde_json::Result<String> {
        view::render(row)
    }

    fn event(row: &RefundRow) -> Option<(EventType, &str, &str)> {
        EventType::of_refund_status(row.status)
            .map(|kind| (kind, row.merchant_id.as_str(), row.id.as_str()))
    }
}

idempotent_record!(RefundRow);
operations::settled_row!(RefundRow);

/// Refunding, as an [`Operation`]: the claim also reserves the amount on the payment; the
/// provider call is the refund of the payment's charge.
pub struct CreateRefund;

impl Operation for CreateRefund {
    type Row = RefundRow;
    /// The payment's provider charge.
    type Call = String;
    type Outcome = RefundOutcome;

    fn resource(_: &RefundRow) -> &'static str {
        RESOURCE
    }

    fn claim(
        conn: &mut DbConnection,
        claim: &RefundRow,
        _: &Settings,
    ) -> diesel::QueryResult<Claimed<RefundRow, String>> {
        claim_refund(conn, claim)
    }

    fn find_by_key(
        conn: &mut DbConnection,
        claim: &RefundRow,
    ) -> diesel::QueryResult<Option<RefundRow>> {
        rows::find_by_idempotency_key(conn, &claim.merchant_id, &claim.idempotency_key)
    }

    fn call_for(conn: &mut DbConnection, row: &RefundRow) -> diesel::QueryResult<String> {
        rows::find_payment(conn, &row.merchant_id, &row.payment_id)?
            .and_then(|p| p.provider_charge_id)
            .ok_or(diesel::result::Error::NotFound)
    }

    async fn call(
        state: &AppState,
        row: &RefundRow,
        charge: &String,
    ) -> Result<Called<RefundOutcome>, OutcomeUnknown> {
        let request = RefundRequest {
            charge: charge.clone(),
            amount: row.amount,
            reference: row.id.clone(),
        };
        let refund = match state.provider.create_refund(&row.id, &request).await {
            Ok(refund) => refund,
            // A final refusal: nothing moved, the refund fails and its amount is free again.
            Err(ProviderError::Refused(_)) => {
                return Ok(Called::Final(RefundOutcome::Failed {
                    provider_refund_id: None,
                    failure_code: Some(PROVIDER_REFUSED.to_owned()),
                }));
            }
            Err(ProviderError::Unknown(unknown)) => return Err(unknown),
        };
        let id = refund.id.clone();
        Ok(match RefundOutcome::from_provider(refund) {
            Some(outcome) => Called::Final(outcome),
            None => Called::Pending(Some(id)),
        })
    }

    fn finish(
        conn: &mut DbConnection,
        row: &RefundRow,
        outcome: &RefundOutcome,
        request: Option<&RequestRef>,
        _settings: &Settings,
    ) -> diesel::QueryResult<Settled<RefundRow>> {
        apply_refund_outcome(conn, &row.id, outcome, request)
    }

    /// The amount stays reserved while the outcome is unknown; the 202 is the refund,
    /// `pending`.
    fn render_unfinished(_: &mut DbConnection, row: &RefundRow) -> diesel::QueryResult<String> {
        view::render(row).map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))
    }
}

pub async fn create_refund(
    state: &AppState,
    merchant: &Merchant,
    payment_id: PaymentId,
    key: IdempotencyKey,
    request: NewRefund,
    request_id: Option<String>,
    sent: Option<Sent>,
) -> Result<Answer, ApiError> {
    // An unknown (or another merchant's) payment is answered before anything is stored,
    // like a validation failure: there is nothing a key could be bound to. (A key whose
    // final answer this instance has seen is answered from memory by `execute` before any
    // claim; this read comes first only because a claim needs the payment's currency.)
    let payment = {
        let merchant_id = merchant.id.clone();
        let payment_id = payment_id.clone();
        state
            .db
            .run(move |conn| rows::find_payment(conn, &merchant_id, payment_id.as_str()))
            .await?
            .ok_or_else(no_such_payment)?
    };
    let lease = Lease::new(state);
    let claim = RefundRow {
        id: RefundId::generate().to_string(),
        merchant_id: merchant.id.clone(),
        payment_id: payment.id.clone(),
        idempotency_key: key.as_str().to_owned(),
        request_fingerprint: request.fingerprint(payment_id.as_str()),
        // 0 stands for "what is left", resolved by the claim.
        amount: request.amount.map(|a| a.minor_units()).unwrap_or(0),
        currency: payment.currency,
        status: RefundStatus::Pending,
        reason: request.reason.map(|r| r.as_str().to_owned()),
        provider_refund_id: None,
        failure_code: None,
        response_status: None,
        response_body: None,
        lease_token: Some(lease.token),
        lease_expires_at: Some(lease.expires_at),
        provider_attempts: 1,
        created_at: lease.at,
        updated_at: lease.at,
    };
    let origin = request_id.map(|id| RequestRef {
        id,
        idempotency_key: Some(key.as_str().to_owned()),
    });
    operations::execute_sent::<CreateRefund>(state, claim, origin, sent).await
}

/// Names refunds in the idempotency scopes and metrics.
pub const RESOURCE: &str = "refund";

/// One transaction: the insert that decides the winner (first, so on SQLite the
/// transaction writes before it reads, and on PostgreSQL a unique violation aborts
/// nothing else), then the guarded reservation, or the stored refusal. An amount of 0 in
/// the claim asks for all that is left.
fn claim_refund(
    conn: &mut DbConnection,
    claim: &RefundRow,
) -> diesel::QueryResult<Claimed<RefundRow, String>> {
    use diesel::Connection;
    let requested = (claim.amount > 0).then_some(claim.amount);
    conn.transaction(|conn| {
        rows::insert(conn, claim)?;
        for _ in 0..RESERVE_ATTEMPTS {
            let payment = rows::find_payment(conn, &claim.merchant_id, &claim.payment_id)?
                .ok_or(diesel::result::Error::NotFound)?;
            let left = payment.refundable();
            let refusal = if payment.status != PaymentStatus::Succeeded {
                Some(ApiError::PaymentNotRefundable(format!(
                    "payment {} has status `{}`: only succeeded payments can be refunded",
                    payment.id, payment.status
                )))
            } else if payment.disputes_open > 0 || crate::inbound::dispute_kept(conn, &payment.id)?
            {
                Some(ApiError::PaymentDisputed(format!(
                    "payment {} has an open dispute: it can be refunded once the dispute \
                     is closed",
                    payment.id
                )))
            } else if left <= 0 {
                Some(ApiError::PaymentNotRefundable(format!(
                    "payment {} has nothing left to refund",
                    payment.id
                )))
            } else {
                requested.filter(|&a| a > left).map(|a| {
                    ApiError::AmountExceedsRefundable(format!(
                        "the refund amount {a} exceeds the {left} left to refund on payment {}",
                        payment.id
                    ))
                })
            };
            if let Some(refusal) = refusal {
                let answer = Answer::refusal(&refusal);
                rows::reject(
                    conn,
                    &claim.id,
                    requested.unwrap_or(0),
                    i32::from(answer.status),
                    &answer.body,
                )?;
                return Ok(Claimed::Answered(answer));
            }
            let amount = requested.unwrap_or(left);
            if rows::reserve(conn, &claim.payment_id, amount)? {
                if amount != claim.amount {
                    rows::set_amount(conn, &claim.id, amount)?;
                }
                let mut row = claim.clone();
                row.amount = amount;
                // Promised back to the customer: it leaves the balance now, with the claim.
                ledger::post(
                    conn,
                    &[Posting::refund(
                        &row.merchant_id,
                        &row.id,
                        amount,
                        &row.currency,
                        row.created_at,
                    )],
                )?;
                let charge = payment
                    .provider_charge_id
                    .ok_or(diesel::result::Error::NotFound)?;
                return Ok(Claimed::Won(row, charge));
            }
            // A concurrent refund changed the payment after our read: read it again.
        }
        Err(diesel::result::Error::QueryBuilderError(
            "could not reserve the refund amount under contention".into(),
        ))
    })
}

fn no_such_payment() -> ApiError {
    ApiError::NotFound("no such payment".to_owned())
}

/// The refunds of one of the merchant's payments, newest first.
pub async fn list_refunds(
    state: &AppState,
    merchant: &Merchant,
    payment_id: PaymentId,
    limit: i64,
    starting_after: Option<String>,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let rows = state
        .db
        .run(move |conn| {
            if rows::find_payment(conn, &merchant_id, payment_id.as_str())?.is_none() {
                return Ok(Err(no_such_payment()));
            }
            let page = rows::list_for_payment(
                conn,
                payment_id.as_str(),
                limit,
                starting_after.as_deref(),
            )?;
            Ok(page.ok_or_else(|| ApiError::unknown_cursor("refund")))
        })
        .await??;
    let (rows, has_more) = crate::db::page(rows, limit);
    view::render_list(&rows, has_more).map_err(ApiError::internal)
}
