//! Payouts: money sent from a merchant's available balance to its bank account, at most
//! once per request and never more than is available.
//!
//! ```text
//! client ──POST──▶ claim, ONE transaction:  INSERT payout (unique merchant+key)   ← decides the winner
//!                                           lock the merchant's balance in the currency
//!                                           available ≥ amount?  post `payout` (− amount)
//!                    │ fits ──▶ drive: provider.create_payout(Idempotency-Key = payout id)
//!                    │          apply_payout_outcome: pending → paid
//!                    │                                        → failed (post `payout_failure`)
//!                    │ does not fit ──▶ 422 insufficient_balance, the key's final answer
//!                    └ lost ──▶ follow: 422 on a different request, replay, wait, take over
//! ```
//!
//! The balance check and the posting that takes the money out of `available` happen under
//! one lock per merchant and currency, held to the end of the claim's transaction (on every
//! instance: it is the database's), so of concurrent payouts exactly those that fit are
//! made, in some order, and the rest are refused.

pub mod request;
pub mod view;

use crate::config::Settings;
use crate::db::DbConnection;
use crate::db::ledger as ledger_rows;
use crate::db::merchants::Merchant;
use crate::db::payouts::{self as rows, PayoutRow};
use crate::domain::RequestRef;
use crate::domain::{IdempotencyKey, PayoutId, PayoutStatus, Timestamp, now};
use crate::error::ApiError;
use crate::events::EventType;
use crate::idempotency::{Answer, Sent, idempotent_record};
use crate::ledger::{self, Posting};
use crate::operations::{self, Called, Claimed, Lease, Operation, Settle, Settled};
use crate::provider::{
    OutcomeUnknown, PROVIDER_REFUSED, PayoutRequest, PayoutState, ProviderError, ProviderPayout,
};
use crate::state::AppState;

pub use request::NewPayout;

/// Names payouts in the idempotency scopes and metrics.
pub const RESOURCE: &str = "payout";

/// The final outcome of a payout at the provider, by whichever path it arrives (the
/// request, a retry, the recovery worker, a `payout.paid`/`payout.failed` webhook).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayoutOutcome {
    Paid {
        /// `None`: the one known already stands.
        provider_payout_id: Option<String>,
    },
    Failed {
        provider_payout_id: Option<String>,
        failure_code: Option<String>,
    },
}

impl PayoutOutcome {
    fn provider_payout_id(&self) -> Option<&String> {
        match self {
            Self::Paid { provider_payout_id }
            | Self::Failed {
                provider_payout_id, ..
            } => provider_payout_id.as_ref(),
        }
    }

    /// The outcome a provider answer carries; `None` while it is still pending.
    pub fn from_provider(payout: ProviderPayout) -> Option<Self> {
        match payout.status {
            PayoutState::Paid => Some(Self::Paid {
                provider_payout_id: Some(payout.id),
            }),
            PayoutState::Failed => Some(Self::Failed {
                provider_payout_id: Some(payout.id),
                failure_code: payout.failure_code,
            }),
            PayoutState::Pending => None,
        }
    }
}

/// What [`apply_payout_outcome`] did.
pub type PayoutApplied = Settled<PayoutRow>;

/// Finishes a pending payout: its status, the provider's id, on failure the
/// `payout_failure` that gives the amount back, the 201 every retry replays and its event,
/// all in one transaction ([`operations::settle`]). Only the `pending → final` move changes
/// anything, and of concurrent callers exactly one makes it.
pub fn apply_payout_outcome(
    conn: &mut DbConnection,
    payout_id: &str,
    outcome: &PayoutOutcome,
    made_by: Option<&RequestRef>,
) -> diesel::QueryResult<PayoutApplied> {
    operations::settle::<CreatePayout>(conn, payout_id, outcome, made_by)
}

impl Settle for CreatePayout {
    type Row = PayoutRow;
    type Outcome = PayoutOutcome;

    fn lock_unfinished(
        conn: &mut DbConnection,
        id: &str,
        at: Timestamp,
    ) -> diesel::QueryResult<bool> {
        rows::lock_unfinished(conn, id, at)
    }

    fn find(conn: &mut DbConnection, id: &str) -> diesel::QueryResult<Option<PayoutRow>> {
        rows::find_by_id(conn, id)
    }

    fn settle(
        conn: &mut DbConnection,
        row: &mut PayoutRow,
        outcome: &PayoutOutcome,
        at: Timestamp,
    ) -> diesel::QueryResult<()> {
        if let Some(id) = outcome.provider_payout_id() {
            row.provider_payout_id = Some(id.clone());
        }
        match outcome {
            PayoutOutcome::Paid { .. } => {
                row.status = row.status.move_to(PayoutStatus::Paid)?;
                row.failure_code = None;
            }
            PayoutOutcome::Failed { failure_code, .. } => {
                row.status = row.status.move_to(PayoutStatus::Failed)?;
                row.failure_code = failure_code.clone();
                // The amount comes back to the balance, with the failure.
                ledger::post(
                    conn,
                    &[Posting::payout_failure(
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

    fn finish(conn: &mut DbConnection, row: &PayoutRow) -> diesel::QueryResult<bool> {
        rows::finish(conn, row)
    }

    fn render(row: &PayoutRow) -> serde_json::Result<String> {
        view::render(row)
    }

    fn event(row: &PayoutRow) -> Option<(EventType, &str, &str)> {
        EventType::of_payout_status(row.status)
            .map(|kind| (kind, row.merchant_id.as_str(), row.id.as_str()))
    }
}

idempotent_record!(PayoutRow);
operations::settled_row!(PayoutRow);

/// Paying out, as an [`Operation`]: the claim also takes the amount out of the available
/// balance (or refuses it); the provider call sends it.
pub struct CreatePayout;

impl Operation for CreatePayout {
    type Row = PayoutRow;
    /// Everything the call needs is on the row.
    type Call = ();
    type Outcome = PayoutOutcome;

    fn resource(_: &PayoutRow) -> &'static str {
        RESOURCE
    }

    fn claim(
        conn: &mut DbConnection,
        claim: &PayoutRow,
        _: &Settings,
    ) -> diesel::QueryResult<Claimed<PayoutRow, ()>> {
        claim_payout(conn, claim)
    }

    fn find_by_key(
        conn: &mut DbConnection,
        claim: &PayoutRow,
    ) -> diesel::QueryResult<Option<PayoutRow>> {
        rows::find_by_idempotency_key(conn, &claim.merchant_id, &claim.idempotency_key)
    }

    fn call_for(_: &mut DbConnection, _: &PayoutRow) -> diesel::QueryResult<()> {
        Ok(())
    }

    async fn call(
        state: &AppState,
        row: &PayoutRow,
        _: &(),
    ) -> Result<Called<PayoutOutcome>, OutcomeUnknown> {
        let request = PayoutRequest {
            amount: row.amount,
            currency: row.currency.clone(),
            destination: row.destination.clone(),
            reference: row.id.clone(),
        };
        let payout = match state.provider.create_payout(&row.id, &request).await {
            Ok(payout) => payout,
            // A final refusal: nothing moved, the payout fails and its amount comes back.
            Err(ProviderError::Refused(_)) => {
                return Ok(Called::Final(PayoutOutcome::Failed {
                    provider_payout_id: None,
                    failure_code: Some(PROVIDER_REFUSED.to_owned()),
                }));
            }
            Err(ProviderError::Unknown(unknown)) => return Err(unknown),
        };
        let id = payout.id.clone();
        Ok(match PayoutOutcome::from_provider(payout) {
            Some(outcome) => Called::Final(outcome),
            None => Called::Pending(Some(id)),
        })
    }

    fn finish(
        conn: &mut DbConnection,
        row: &PayoutRow,
        outcome: &PayoutOutcome,
        request: Option<&RequestRef>,
        _: &Settings,
    ) -> diesel::QueryResult<Settled<PayoutRow>> {
        apply_payout_outcome(conn, &row.id, outcome, request)
    }

    /// The amount stays out of the balance while the outcome is unknown; the 202 is the
    /// payout, `pending`.
    fn render_unfinished(_: &mut DbConnection, row: &PayoutRow) -> diesel::QueryResult<String> {
        view::render(row).map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))
    }
}

pub async fn create_payout(
    state: &AppState,
    merchant: &Merchant,
    key: IdempotencyKey,
    request: NewPayout,
    request_id: Option<String>,
    sent: Option<Sent>,
) -> Result<Answer, ApiError> {
    let lease = Lease::new(state);
    let claim = PayoutRow {
        id: PayoutId::generate().to_string(),
        merchant_id: merchant.id.clone(),
        idempotency_key: key.as_str().to_owned(),
        request_fingerprint: request.fingerprint(),
        amount: request.amount.minor_units(),
        currency: request.currency.as_str().to_owned(),
        destination: request.destination,
        description: request.description,
        status: PayoutStatus::Pending,
        provider_payout_id: None,
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
    operations::execute_sent::<CreatePayout>(state, claim, origin, sent).await
}

/// One transaction: the insert that decides the winner (first: on SQLite it takes the
/// write lock, which also serialises every balance check), the merchant's balance lock,
/// then either the `payout` posting or the stored 422.
fn claim_payout(
    conn: &mut DbConnection,
    claim: &PayoutRow,
) -> diesel::QueryResult<Claimed<PayoutRow, ()>> {
    use diesel::Connection;
    conn.transaction(|conn| {
        rows::insert(conn, claim)?;
        rows::lock_balance(conn, &claim.merchant_id, &claim.currency)?;
        let available = ledger_rows::available(conn, &claim.merchant_id, &claim.currency, now())?;
        if claim.amount > available {
            let refusal = ApiError::InsufficientBalance(format!(
                "the payout of {} is more than the {} {} available",
                claim.amount, available, claim.currency
            ));
            let answer = Answer::refusal(&refusal);
            rows::reject(conn, &claim.id, i32::from(answer.status), &answer.body)?;
            return Ok(Claimed::Answered(answer));
        }
        ledger::post(
            conn,
            &[Posting::payout(
                &claim.merchant_id,
                &claim.id,
                claim.amount,
                &claim.currency,
                claim.created_at,
            )],
        )?;
        Ok(Claimed::Won(claim.clone(), ()))
    })
}

pub async fn get_payout(
    state: &AppState,
    merchant: &Merchant,
    id: PayoutId,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let row = state
        .db
        .run(move |conn| rows::find_for_merchant(conn, &merchant_id, id.as_str()))
        .await?
        .ok_or_else(|| ApiError::NotFound("no such payout".to_owned()))?;
    view::render(&row).map_err(ApiError::internal)
}

pub async fn list_payouts(
    state: &AppState,
    merchant: &Merchant,
    limit: i64,
    starting_after: Option<String>,
    status: Option<PayoutStatus>,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let page = state
        .db
        .run(move |conn| rows::list(conn, &merchant_id, limit, starting_after.as_deref(), status))
        .await?
        .ok_or_else(|| ApiError::unknown_cursor("payout"))?;
    let (rows, has_more) = crate::db::page(page, limit);
    view::render_list(&rows, has_more).map_err(ApiError::internal)
}
