//! Creating and reading payments: where the charge is made.
//!
//! ```text
//! client ──POST──▶ claim: INSERT payment (unique merchant+key) ──won──▶ drive: call provider
//!                    │                                                  │ (no DB connection held)
//!                    └─lost─▶ follow: same fingerprint?                 ▼
//!                              no  → 422 idempotency_key_reused       finish: UPDATE … WHERE status='processing'
//!                              final → replay stored response         (stores the response every retry replays)
//!                              running → wait (in-process channel,
//!                                        or polling with backoff) → replay or 409
//!                              lease free → take over → drive
//! ```

pub mod authorization;
pub mod request;
pub mod view;

use crate::auth::Merchant;
use crate::config::Settings;
use crate::db::group_commit::WritePath;
use crate::db::payments::{self as rows, FinalState, ListFilter, PaymentRow, PaymentWrites};
use crate::db::{Db, DbConnection, DbError};
use crate::domain::RequestRef;
use crate::domain::{IdempotencyKey, LedgerPolicy, PaymentId, Timestamp, now};
use crate::error::ApiError;
use crate::events::{self, EventType, NewEvent};
use crate::idempotency::{Answer, Sent, idempotent_record};
use crate::ledger::Posting;
use crate::operations::{self, Called, Claimed, Lease, Operation, Settled};
use crate::provider::{
    Charge, ChargeRequest, OutcomeUnknown, PROVIDER_REFUSED, ProviderError, ProviderStatus,
};
use crate::state::AppState;

pub use request::{CaptureMethod, NewPayment};
pub use view::PaymentStatus;

idempotent_record!(PaymentRow);

/// What became of a charge at the provider: its answer, or its final refusal (a 4xx:
/// nothing moved, and the payment fails with [`PROVIDER_REFUSED`]).
#[derive(Debug, Clone)]
pub enum Charged {
    Answered(Charge),
    Refused(String),
}

/// Creating a payment, as an [`Operation`]: the row is the claim, the provider call is the
/// charge (or the authorization, for a manual capture).
pub struct CreatePayment;

impl Operation for CreatePayment {
    type Row = PaymentRow;
    type Call = ();
    type Outcome = Charged;

    fn resource(_: &PaymentRow) -> &'static str {
        RESOURCE
    }

    fn claim(
        conn: &mut DbConnection,
        claim: &PaymentRow,
        _: &Settings,
    ) -> diesel::QueryResult<Claimed<PaymentRow, ()>> {
        rows::insert(conn, claim)?;
        Ok(Claimed::Won(claim.clone(), ()))
    }

    async fn run_claim(
        state: &AppState,
        claim: PaymentRow,
    ) -> Result<Claimed<PaymentRow, ()>, DbError> {
        if state.payment_writes.claims.submit(claim.clone()).await? {
            Ok(Claimed::Won(claim, ()))
        } else {
            Err(DbError::UniqueViolation(
                "the idempotency key is taken".to_owned(),
            ))
        }
    }

    async fn run_finish(
        state: &AppState,
        row: PaymentRow,
        charge: Charged,
        request: Option<RequestRef>,
    ) -> Result<Settled<PaymentRow>, DbError> {
        let (finished, body) = final_state(row, charge, now())
            .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
        let final_state = FinalState {
            row: finished.clone(),
            body,
            made_by: request,
            policy: state.settings.ledger,
        };
        if state.payment_writes.finishes.submit(final_state).await? {
            return Ok(Settled::Applied(finished));
        }
        // Someone else (a webhook, another instance) finished it first: theirs stands.
        let id = finished.id;
        let theirs = state
            .db
            .run(move |conn| rows::find_by_id(conn, &id))
            .await?;
        Ok(Settled::already_final(theirs))
    }

    fn find_by_key(
        conn: &mut DbConnection,
        claim: &PaymentRow,
    ) -> diesel::QueryResult<Option<PaymentRow>> {
        rows::find_by_idempotency_key(conn, &claim.merchant_id, &claim.idempotency_key)
    }

    fn call_for(_: &mut DbConnection, _: &PaymentRow) -> diesel::QueryResult<()> {
        Ok(())
    }

    async fn call(
        state: &AppState,
        row: &PaymentRow,
        _: &(),
    ) -> Result<Called<Charged>, OutcomeUnknown> {
        let request = ChargeRequest {
            amount: row.amount,
            currency: row.currency.clone(),
            payment_method: row.payment_method.clone(),
            reference: row.id.clone(),
            capture: row.capture_method != CaptureMethod::Manual.as_str(),
        };
        match state.provider.create_charge(&row.id, &request).await {
            Ok(charge) if charge.status == ProviderStatus::Pending => {
                Ok(Called::Pending(Some(charge.id)))
            }
            Ok(charge) => Ok(Called::Final(Charged::Answered(charge))),
            Err(ProviderError::Refused(why)) => Ok(Called::Final(Charged::Refused(why))),
            Err(ProviderError::Unknown(unknown)) => Err(unknown),
        }
    }

    fn finish(
        conn: &mut DbConnection,
        row: &PaymentRow,
        charge: &Charged,
        request: Option<&RequestRef>,
        settings: &Settings,
    ) -> diesel::QueryResult<Settled<PaymentRow>> {
        let (finished, body) = final_state(row.clone(), charge.clone(), now())
            .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
        if finish_recorded(conn, &finished, &body, request, &settings.ledger)? {
            return Ok(Settled::Applied(finished));
        }
        // Someone else (a webhook, another instance) finished it first: theirs stands.
        Ok(Settled::already_final(rows::find_by_id(
            conn,
            &finished.id,
        )?))
    }

    /// While its outcome is unknown, a payment answers 202 with itself, `processing`.
    fn render_unfinished(_: &mut DbConnection, row: &PaymentRow) -> diesel::QueryResult<String> {
        view::render(row).map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))
    }
}

/// Writes a payment's final state (`row`, rendered as `body`) and its event in one
/// transaction (a savepoint inside a caller's, e.g. a webhook's). The update is guarded by
/// `status = 'processing'`, so of every path that finishes a payment (the request, a
/// retry, the recovery worker, a webhook, another instance) exactly one emits its event.
/// Returns false, with nothing written, if the payment was already final.
pub fn finish_recorded(
    conn: &mut DbConnection,
    row: &PaymentRow,
    body: &str,
    made_by: Option<&RequestRef>,
    policy: &LedgerPolicy,
) -> diesel::QueryResult<bool> {
    let state = FinalState {
        row: row.clone(),
        body: body.to_owned(),
        made_by: made_by.cloned(),
        policy: *policy,
    };
    let mut finished = finish_recorded_all(conn, std::slice::from_ref(&state))?;
    Ok(finished.pop().unwrap_or(false))
}

/// [`finish_recorded`] for many payments in one transaction: the group commit of
/// finishes, one guarded update and one insert of events for the whole batch. True for
/// each payment this call finished, in order. Of two final states for one payment only
/// the first is tried: the second cannot be the one that finishes it.
pub fn finish_recorded_all(
    conn: &mut DbConnection,
    states: &[FinalState],
) -> diesel::QueryResult<Vec<bool>> {
    use diesel::Connection;
    let mut ids = std::collections::HashSet::new();
    let first: Vec<bool> = states.iter().map(|s| ids.insert(&s.row.id)).collect();
    let tried: Vec<&PaymentRow> = states
        .iter()
        .zip(&first)
        .filter(|(_, first)| **first)
        .map(|(s, _)| &s.row)
        .collect();
    conn.transaction(|conn| {
        let mut applied = rows::finish_many(conn, &tried)?.into_iter();
        let finished: Vec<bool> = first
            .iter()
            .map(|first| *first && applied.next().unwrap_or(false))
            .collect();
        let events: Vec<NewEvent<'_>> = states
            .iter()
            .zip(&finished)
            .filter(|(_, finished)| **finished)
            .filter_map(|(s, _)| {
                EventType::of_payment_status(s.row.status).map(|kind| NewEvent {
                    merchant_id: &s.row.merchant_id,
                    kind,
                    object_id: &s.row.id,
                    object: &s.body,
                    request: s.made_by.as_ref(),
                })
            })
            .collect();
        // The payments this call made succeed: their money was captured as they did.
        let captured: Vec<&FinalState> = states
            .iter()
            .zip(&finished)
            .filter(|(s, finished)| {
                **finished && s.row.status == crate::domain::PaymentStatus::Succeeded
            })
            .map(|(s, _)| s)
            .collect();
        // Their money, recorded with their events.
        let charges: Vec<Posting> = captured
            .iter()
            .map(|s| {
                Posting::charge(
                    &s.policy,
                    &s.row.merchant_id,
                    &s.row.id,
                    s.row.amount_captured,
                    &s.row.currency,
                    s.row.updated_at,
                )
            })
            .collect();
        events::record_all(conn, &events, &charges)?;
        // Dispute events the provider sent before the charge was final open now, with it.
        let kept_for: Vec<(&str, &LedgerPolicy)> = captured
            .iter()
            .map(|s| (s.row.id.as_str(), &s.policy))
            .collect();
        crate::inbound::apply_kept_of_captured(conn, &kept_for, now())?;
        Ok(finished)
    })
}

/// Starts the write path of new payments on `db` (see [`PaymentWrites`]).
pub fn start_writes(db: &Db) -> PaymentWrites {
    PaymentWrites {
        claims: WritePath::start(db, "payment_claim", rows::insert_many),
        finishes: WritePath::start(db, "payment_finish", finish_recorded_all),
    }
}

/// Names payments in the idempotency scopes and metrics.
pub const RESOURCE: &str = "payment";

/// Creates a payment for `request`, parsed from `sent` (whose bytes its final answer is
/// remembered with).
pub fn create_payment<'a>(
    state: &'a AppState,
    merchant: &Merchant,
    key: IdempotencyKey,
    request: NewPayment,
    request_id: Option<String>,
    sent: Option<Sent>,
) -> impl Future<Output = Result<Answer, ApiError>> + 'a {
    let lease = Lease::new(state);
    let claim = PaymentRow {
        id: PaymentId::generate().to_string(),
        merchant_id: merchant.id.clone(),
        idempotency_key: key.as_str().to_owned(),
        request_fingerprint: request.fingerprint(),
        amount: request.amount.minor_units(),
        currency: request.currency.as_str().to_owned(),
        metadata: request.metadata_json(),
        payment_method: request.payment_method,
        customer_id: request.customer_id,
        description: request.description,
        status: PaymentStatus::Processing,
        amount_refunded: 0,
        provider_charge_id: None,
        failure_code: None,
        failure_message: None,
        response_status: None,
        response_body: None,
        lease_token: Some(lease.token),
        lease_expires_at: Some(lease.expires_at),
        provider_attempts: 1,
        created_at: lease.at,
        updated_at: lease.at,
        capture_method: request.capture_method.as_str().to_owned(),
        amount_capturable: 0,
        amount_captured: 0,
        cancellation_reason: None,
        authorized_at: None,
        operation_id: None,
        amount_disputed: 0,
    };
    let origin = request_id.map(|id| RequestRef {
        id,
        idempotency_key: Some(key.as_str().to_owned()),
    });
    operations::execute_sent::<CreatePayment>(state, claim, origin, sent)
}

/// The payment as the provider's final answer (or refusal) leaves it, with the response that every
/// retry of the original request replays from then on: 201 and the rendered payment. The
/// request path and the webhook path both build it here, so whichever finishes a payment
/// stores the same kind of answer. Returns the row and that body.
pub fn final_state(
    mut row: PaymentRow,
    charged: Charged,
    at: Timestamp,
) -> Result<(PaymentRow, String), ApiError> {
    let status = match &charged {
        Charged::Answered(charge) => match charge.status {
            ProviderStatus::Succeeded => PaymentStatus::Succeeded,
            ProviderStatus::RequiresCapture => PaymentStatus::RequiresCapture,
            _ => PaymentStatus::Failed,
        },
        Charged::Refused(_) => PaymentStatus::Failed,
    };
    match status {
        PaymentStatus::Succeeded => row.amount_captured = row.amount,
        PaymentStatus::RequiresCapture => {
            row.amount_capturable = row.amount;
            row.authorized_at = Some(at);
        }
        _ => {}
    }
    row.status = row.status.move_to(status).map_err(ApiError::internal)?;
    match charged {
        Charged::Answered(charge) => {
            row.provider_charge_id = Some(charge.id);
            row.failure_code = charge.failure_code;
            row.failure_message = charge.failure_message;
        }
        Charged::Refused(why) => {
            row.failure_code = Some(PROVIDER_REFUSED.to_owned());
            row.failure_message = Some(format!("the provider refused the charge: {why}"));
        }
    }
    row.lease_token = None;
    row.lease_expires_at = None;
    row.updated_at = at;
    let body = view::render(&row)?;
    row.response_status = Some(i32::from(FINAL_STATUS));
    row.response_body = Some(body.clone());
    Ok((row, body))
}

/// The status of a final answer: the payment was created, whatever its outcome.
const FINAL_STATUS: u16 = 201;

pub async fn get_payment(
    state: &AppState,
    merchant: &Merchant,
    id: PaymentId,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let row = state
        .db
        .run(move |conn| rows::find(conn, &merchant_id, id.as_str()))
        .await?
        .ok_or_else(|| ApiError::NotFound("no such payment".to_owned()))?;
    view::render(&row)
}

pub async fn list_payments(
    state: &AppState,
    merchant: &Merchant,
    filter: ListFilter,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let limit = filter.limit;
    let rows = state
        .db
        .run(move |conn| rows::list(conn, &merchant_id, &filter))
        .await?
        .ok_or_else(|| ApiError::unknown_cursor("payment"))?;
    let (rows, has_more) = crate::db::page(rows, limit);
    view::render_list(&rows, has_more)
}
