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

pub mod recovery;
pub mod request;
pub mod view;

use std::time::Duration;

use crate::auth::Merchant;
use crate::db::DbError;
use crate::db::payments::{self as rows, ListFilter, PaymentRow};
use crate::domain::{IdempotencyKey, PaymentId, Timestamp, new_lease_token, now};
use crate::error::ApiError;
use crate::idempotency::{
    self, Answer, Followed, IdempotentRecord, Joined, join_running, scope_key,
};
use crate::metrics::{self, IdempotencyOutcome};
use crate::provider::{Charge, ChargeRequest, ProviderStatus};
use crate::startup::AppState;

pub use request::NewPayment;
pub use view::PaymentStatus;

pub async fn create_payment(
    state: &AppState,
    merchant: &Merchant,
    key: IdempotencyKey,
    request: NewPayment,
) -> Result<Answer, ApiError> {
    let fingerprint = request.fingerprint();
    let answers = &state.final_answers;
    if let Some(answer) = answers.answer(RESOURCE, &merchant.id, key.as_str(), &fingerprint) {
        return answer;
    }
    let scope = scope_key(RESOURCE, &merchant.id, key.as_str());
    let wait = state.settings.idempotency_wait;
    let answer = match join_running(&state.inflight, RESOURCE, &scope, &fingerprint, wait).await? {
        Joined::Answer(answer) => answer,
        Joined::NotRunning { wait_left } => {
            claim_or_follow(state, merchant, &key, request, &fingerprint, wait_left).await?
        }
    };
    answers.remember(RESOURCE, &merchant.id, key.as_str(), &fingerprint, &answer);
    Ok(answer)
}

/// Names payments in the idempotency scopes and metrics.
const RESOURCE: &str = "payment";

async fn claim_or_follow(
    state: &AppState,
    merchant: &Merchant,
    key: &IdempotencyKey,
    request: NewPayment,
    fingerprint: &str,
    wait: Duration,
) -> Result<Answer, ApiError> {
    let created_at = now();
    let token = new_lease_token();
    let claim = PaymentRow {
        id: PaymentId::generate().to_string(),
        merchant_id: merchant.id.clone(),
        idempotency_key: key.as_str().to_owned(),
        request_fingerprint: fingerprint.to_owned(),
        amount: request.amount.minor_units(),
        currency: request.currency.as_str().to_owned(),
        metadata: request.metadata_json(),
        payment_method: request.payment_method,
        customer_id: request.customer_id,
        description: request.description,
        status: PaymentStatus::Processing.as_str().to_owned(),
        amount_refunded: 0,
        provider_charge_id: None,
        failure_code: None,
        failure_message: None,
        response_status: None,
        response_body: None,
        lease_token: Some(token.clone()),
        lease_expires_at: Some(created_at + lease(state)),
        provider_attempts: 1,
        created_at,
        updated_at: created_at,
    };

    // The database decides the winner: of all requests with this key, exactly one insert
    // succeeds, and only that request calls the provider.
    let inserted = {
        let claim = claim.clone();
        state.db.run(move |conn| rows::insert(conn, &claim)).await
    };
    match inserted {
        Ok(()) => {
            tracing::info!(payment_id = %claim.id, "payment claimed");
            metrics::idempotency(RESOURCE, IdempotencyOutcome::Created);
            return drive_detached(state, claim, token).await;
        }
        Err(DbError::UniqueViolation(_)) => {}
        Err(e) => return Err(e.into()),
    }

    let (merchant_id, key_text) = (merchant.id.clone(), key.as_str().to_owned());
    let existing = state
        .db
        .run(move |conn| rows::find_by_idempotency_key(conn, &merchant_id, &key_text))
        .await?
        .ok_or_else(|| ApiError::internal("idempotency key conflict without a stored payment"))?;
    if existing.request_fingerprint != claim.request_fingerprint {
        metrics::idempotency(RESOURCE, IdempotencyOutcome::Reused);
        return Err(ApiError::IdempotencyKeyReused);
    }
    follow(state, existing, wait).await
}

/// A duplicate of an existing payment: replay it if final, take it over if nobody owns it,
/// otherwise wait up to `wait` (what is left of `IDEMPOTENCY_WAIT_MS`) for its owner.
async fn follow(state: &AppState, row: PaymentRow, wait: Duration) -> Result<Answer, ApiError> {
    let merchant_id = row.merchant_id.clone();
    let followed = idempotency::follow(
        &state.inflight,
        wait,
        row,
        |id, token| {
            let lease = lease(state);
            async move {
                Ok(state
                    .db
                    .run(move |conn| rows::take_over(conn, &id, &token, now(), lease))
                    .await?)
            }
        },
        |id| {
            let merchant_id = merchant_id.clone();
            async move {
                state
                    .db
                    .run(move |conn| rows::find(conn, &merchant_id, &id))
                    .await?
                    .ok_or_else(|| ApiError::internal("payment vanished while waiting"))
            }
        },
    )
    .await;
    idempotency::observe(RESOURCE, &followed);
    match followed? {
        Followed::Answer(answer) => Ok(answer),
        Followed::TakenOver(row, token) => drive_detached(state, row, token).await,
    }
}

impl IdempotentRecord for PaymentRow {
    fn record_id(&self) -> &str {
        &self.id
    }

    fn stored_response(&self) -> (Option<i32>, Option<&str>) {
        (self.response_status, self.response_body.as_deref())
    }

    fn lease_expires_at(&self) -> Option<Timestamp> {
        self.lease_expires_at
    }
}

pub(crate) fn lease(state: &AppState) -> chrono::Duration {
    chrono::Duration::from_std(state.settings.processing_lease).unwrap_or(chrono::Duration::MAX)
}

/// Runs the provider call on its own task, so that a client hanging up mid-request does
/// not abandon a charge half-way: the work finishes and its outcome is stored regardless.
async fn drive_detached(
    state: &AppState,
    row: PaymentRow,
    token: String,
) -> Result<Answer, ApiError> {
    let state = state.clone();
    actix_web::rt::spawn(async move { drive(&state, row, token).await })
        .await
        .map_err(|e| ApiError::internal(format!("payment task failed: {e}")))?
}

/// Holds the lease of `row`: asks the provider (with our payment id as its idempotency
/// key, so asking again can never charge twice) and records what it said.
pub async fn drive(state: &AppState, row: PaymentRow, token: String) -> Result<Answer, ApiError> {
    let inflight = state.inflight.register(
        &row.id,
        scope_key(RESOURCE, &row.merchant_id, &row.idempotency_key),
        &row.request_fingerprint,
    );
    let request = ChargeRequest {
        amount: row.amount,
        currency: row.currency.clone(),
        payment_method: row.payment_method.clone(),
        reference: row.id.clone(),
    };
    let answer = match state.provider.create_charge(&row.id, &request).await {
        Ok(charge) if charge.status != ProviderStatus::Pending => {
            match finish(state, row.clone(), charge.clone()).await {
                Err(ApiError::ServiceUnavailable) => {
                    // The provider answered but the database is away: this request says
                    // 503, and the answer is kept to be stored as soon as the database is
                    // back, so retries then get the replay rather than wait out the lease.
                    let (state, id) = (state.clone(), row.id.clone());
                    actix_web::rt::spawn(async move {
                        let lease = state.settings.processing_lease;
                        idempotency::store_when_possible(id, lease, || {
                            finish(&state, row.clone(), charge.clone())
                        })
                        .await
                    });
                    return Err(ApiError::ServiceUnavailable);
                }
                finished => finished?,
            }
        }
        Ok(charge) => {
            tracing::info!(payment_id = %row.id, charge_id = %charge.id, "charge pending at the provider");
            release(state, row, &token, Some(charge.id)).await?
        }
        Err(unknown) => {
            tracing::warn!(payment_id = %row.id, error = %unknown, "charge outcome unknown");
            release(state, row, &token, None).await?
        }
    };
    inflight.settle(&answer);
    Ok(answer)
}

/// The payment as the provider's final answer leaves it, with the response that every
/// retry of the original request replays from then on: 201 and the rendered payment. The
/// request path and the webhook path both build it here, so whichever finishes a payment
/// stores the same kind of answer. Returns the row and that body.
pub fn final_state(
    mut row: PaymentRow,
    charge: Charge,
    at: Timestamp,
) -> Result<(PaymentRow, String), ApiError> {
    row.status = match charge.status {
        ProviderStatus::Succeeded => PaymentStatus::Succeeded,
        _ => PaymentStatus::Failed,
    }
    .as_str()
    .to_owned();
    row.provider_charge_id = Some(charge.id);
    row.failure_code = charge.failure_code;
    row.failure_message = charge.failure_message;
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

/// Records a final provider answer. If someone else (a webhook, another instance) finished
/// the payment first, their stored answer is the answer.
async fn finish(state: &AppState, row: PaymentRow, charge: Charge) -> Result<Answer, ApiError> {
    let (row, body) = final_state(row, charge, now())?;
    let (id, merchant_id) = (row.id.clone(), row.merchant_id.clone());
    if state.db.run(move |conn| rows::finish(conn, &row)).await? {
        tracing::info!(payment_id = %id, "payment finished");
        return Ok(Answer::new(FINAL_STATUS, body));
    }
    let current = state
        .db
        .run(move |conn| rows::find(conn, &merchant_id, &id))
        .await?
        .ok_or_else(|| ApiError::internal("payment vanished while finishing"))?;
    current
        .stored_answer()
        .ok_or_else(|| ApiError::internal("payment not final after a lost finish"))
}

/// The outcome is not known yet: give up the lease so a retry or the recovery worker can
/// resume at once, and answer 202 with the payment as it is.
async fn release(
    state: &AppState,
    mut row: PaymentRow,
    token: &str,
    charge_id: Option<String>,
) -> Result<Answer, ApiError> {
    row.provider_charge_id = charge_id.or(row.provider_charge_id);
    row.lease_token = None;
    row.lease_expires_at = None;
    row.updated_at = now();
    let (id, token, charge_id, updated_at) = (
        row.id.clone(),
        token.to_owned(),
        row.provider_charge_id.clone(),
        row.updated_at,
    );
    state
        .db
        .run(move |conn| rows::release(conn, &id, &token, charge_id.as_deref(), updated_at))
        .await?;
    Ok(Answer::new(202, view::render(&row)?))
}

pub async fn get_payment(
    state: &AppState,
    merchant: &Merchant,
    id: String,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let row = state
        .db
        .run(move |conn| rows::find(conn, &merchant_id, &id))
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
    let limit = usize::try_from(filter.limit).unwrap_or(0);
    let mut rows = state
        .db
        .run(move |conn| rows::list(conn, &merchant_id, &filter))
        .await?;
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    view::render_list(&rows, has_more)
}
