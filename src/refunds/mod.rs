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
use crate::db::refunds::{self as rows, FAILED, PENDING, RefundRow, SUCCEEDED};
use crate::db::{DbConnection, DbError};
use crate::domain::{IdempotencyKey, RefundId, Timestamp, new_lease_token, now};
use crate::error::ApiError;
use crate::idempotency::{self, Answer, Followed, IdempotentRecord};
use crate::metrics::{self, IdempotencyOutcome};
use crate::payments::lease;
use crate::provider::{ProviderRefund, ProviderStatus, RefundRequest};
use crate::startup::AppState;

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
        provider_refund_id: String,
    },
    Failed {
        provider_refund_id: Option<String>,
        failure_code: Option<String>,
    },
}

impl RefundOutcome {
    /// The outcome a provider answer carries; `None` while it is still pending.
    pub fn from_provider(refund: ProviderRefund) -> Option<Self> {
        match refund.status {
            ProviderStatus::Succeeded => Some(Self::Succeeded {
                provider_refund_id: refund.id,
            }),
            ProviderStatus::Failed => Some(Self::Failed {
                provider_refund_id: Some(refund.id),
                failure_code: refund.failure_code,
            }),
            ProviderStatus::Pending => None,
        }
    }
}

/// What [`apply_refund_outcome`] did.
#[derive(Debug, Clone)]
pub enum OutcomeApplied {
    /// This call moved the refund from `pending` to final and settled the money.
    Applied(RefundRow),
    /// The refund was final already (or a stored refusal): nothing changed. An outcome that
    /// disagrees with `row.status` would have moved it backwards or sideways.
    AlreadyFinal(RefundRow),
    /// No refund has this id.
    UnknownRefund,
}

/// Finishes a pending refund: status, the provider's refund id, the money on the payment
/// (`amount_refunded` grows on success; the reservation is given back on failure) and the
/// 201 every retry of the refund request replays, all in one transaction (a savepoint when
/// the caller already runs one, e.g. a webhook that records its event id alongside).
///
/// Only the `pending → final` move changes anything, and of concurrent callers exactly one
/// makes it, so the money moves once however many paths report the same outcome.
pub fn apply_refund_outcome(
    conn: &mut DbConnection,
    refund_id: &str,
    outcome: &RefundOutcome,
) -> diesel::QueryResult<OutcomeApplied> {
    use diesel::Connection;
    conn.transaction(|conn| {
        let at = now();
        // Write first: it is the guard, and on SQLite it takes the write lock before any read.
        let ours = rows::lock_pending(conn, refund_id, at)?;
        let Some(mut row) = rows::find(conn, refund_id)? else {
            return Ok(OutcomeApplied::UnknownRefund);
        };
        if !ours {
            return Ok(OutcomeApplied::AlreadyFinal(row));
        }
        match outcome {
            RefundOutcome::Succeeded { provider_refund_id } => {
                row.status = SUCCEEDED.to_owned();
                row.provider_refund_id = Some(provider_refund_id.clone());
                row.failure_code = None;
                rows::add_refunded(conn, &row.payment_id, row.amount)?;
            }
            RefundOutcome::Failed {
                provider_refund_id,
                failure_code,
            } => {
                row.status = FAILED.to_owned();
                row.provider_refund_id = provider_refund_id.clone().or(row.provider_refund_id);
                row.failure_code = failure_code.clone();
                rows::release_reservation(conn, &row.payment_id, row.amount)?;
            }
        }
        row.lease_token = None;
        row.lease_expires_at = None;
        row.updated_at = at;
        let body = view::render(&row)
            .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
        row.response_status = Some(201);
        row.response_body = Some(body);
        if !rows::finish(conn, &row)? {
            // Cannot happen while this transaction holds the pending row; never half-apply.
            return Err(diesel::result::Error::RollbackTransaction);
        }
        Ok(OutcomeApplied::Applied(row))
    })
}

pub async fn create_refund(
    state: &AppState,
    merchant: &Merchant,
    payment_id: String,
    key: IdempotencyKey,
    request: NewRefund,
) -> Result<Answer, ApiError> {
    // A key whose final answer (a refund, or a stored refusal) this instance has seen is
    // answered from memory: final answers never change.
    let fingerprint = request.fingerprint(&payment_id);
    let answers = &state.final_answers;
    if let Some(answer) = answers.answer(RESOURCE, &merchant.id, key.as_str(), &fingerprint) {
        return answer;
    }
    let answer = claim_or_follow(state, merchant, payment_id, &key, request, &fingerprint).await?;
    answers.remember(RESOURCE, &merchant.id, key.as_str(), &fingerprint, &answer);
    Ok(answer)
}

/// Names refunds in the idempotency scopes and metrics.
const RESOURCE: &str = "refund";

async fn claim_or_follow(
    state: &AppState,
    merchant: &Merchant,
    payment_id: String,
    key: &IdempotencyKey,
    request: NewRefund,
    fingerprint: &str,
) -> Result<Answer, ApiError> {
    // An unknown (or another merchant's) payment is answered before anything is stored,
    // like a validation failure: there is nothing a key could be bound to.
    let payment = {
        let merchant_id = merchant.id.clone();
        state
            .db
            .run(move |conn| rows::find_payment(conn, &merchant_id, &payment_id))
            .await?
            .ok_or_else(no_such_payment)?
    };
    // A succeeded payment's charge never changes: the refund below can use this one.
    let charge_id = payment.provider_charge_id.clone();
    let created_at = now();
    let token = new_lease_token();
    let requested = request.amount.map(|a| a.minor_units());
    let claim = RefundRow {
        id: RefundId::generate().to_string(),
        merchant_id: merchant.id.clone(),
        payment_id: payment.id.clone(),
        idempotency_key: key.as_str().to_owned(),
        request_fingerprint: fingerprint.to_owned(),
        amount: requested.unwrap_or(0),
        currency: payment.currency,
        status: PENDING.to_owned(),
        reason: request.reason.map(|r| r.as_str().to_owned()),
        provider_refund_id: None,
        failure_code: None,
        response_status: None,
        response_body: None,
        lease_token: Some(token.clone()),
        lease_expires_at: Some(created_at + lease(state)),
        provider_attempts: 1,
        created_at,
        updated_at: created_at,
    };

    let claimed = {
        let claim = claim.clone();
        state
            .db
            .run(move |conn| claim_refund(conn, &claim, requested))
            .await
    };
    match claimed {
        Ok(Claimed::Reserved(row)) => {
            metrics::idempotency(RESOURCE, IdempotencyOutcome::Created);
            tracing::info!(refund_id = %row.id, payment_id = %row.payment_id, amount = row.amount, "refund claimed");
            return drive_detached(state, *row, token, charge_id).await;
        }
        Ok(Claimed::Refused(answer)) => {
            tracing::info!(refund_id = %claim.id, status = answer.status, "refund refused");
            return Ok(answer);
        }
        Err(DbError::UniqueViolation(_)) => {}
        Err(e) => return Err(e.into()),
    }

    let (merchant_id, key_text) = (merchant.id.clone(), key.as_str().to_owned());
    let existing = state
        .db
        .run(move |conn| rows::find_by_idempotency_key(conn, &merchant_id, &key_text))
        .await?
        .ok_or_else(|| ApiError::internal("idempotency key conflict without a stored refund"))?;
    if existing.request_fingerprint != claim.request_fingerprint {
        return Err(ApiError::IdempotencyKeyReused);
    }
    follow(state, existing).await
}

enum Claimed {
    /// The key is ours and the amount is held on the payment: call the provider.
    Reserved(Box<RefundRow>),
    /// The key is ours but the payment cannot give this refund: a stored final answer.
    Refused(Answer),
}

/// One transaction: the insert that decides the winner (first, so on SQLite the
/// transaction writes before it reads, and on PostgreSQL a unique violation aborts
/// nothing else), then the guarded reservation, or the stored refusal.
fn claim_refund(
    conn: &mut DbConnection,
    claim: &RefundRow,
    requested: Option<i64>,
) -> diesel::QueryResult<Claimed> {
    use diesel::Connection;
    conn.transaction(|conn| {
        rows::insert(conn, claim)?;
        for _ in 0..RESERVE_ATTEMPTS {
            let payment = rows::find_payment(conn, &claim.merchant_id, &claim.payment_id)?
                .ok_or(diesel::result::Error::NotFound)?;
            let left = payment.refundable();
            let refusal = if payment.status != SUCCEEDED {
                Some(ApiError::PaymentNotRefundable(format!(
                    "payment {} has status `{}`: only succeeded payments can be refunded",
                    payment.id, payment.status
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
                use actix_web::ResponseError;
                let status = refusal.status_code().as_u16();
                let body = refusal.problem_json();
                rows::reject(
                    conn,
                    &claim.id,
                    requested.unwrap_or(0),
                    i32::from(status),
                    &body,
                )?;
                return Ok(Claimed::Refused(Answer::new(status, body)));
            }
            let amount = requested.unwrap_or(left);
            if rows::reserve(conn, &claim.payment_id, amount)? {
                if amount != claim.amount {
                    rows::set_amount(conn, &claim.id, amount)?;
                }
                let mut row = claim.clone();
                row.amount = amount;
                return Ok(Claimed::Reserved(Box::new(row)));
            }
            // A concurrent refund changed the payment after our read: read it again.
        }
        Err(diesel::result::Error::QueryBuilderError(
            "could not reserve the refund amount under contention".into(),
        ))
    })
}

impl IdempotentRecord for RefundRow {
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

fn no_such_payment() -> ApiError {
    ApiError::NotFound("no such payment".to_owned())
}

/// A duplicate of an existing refund request: replay it if final, take it over if nobody
/// owns it, otherwise wait up to `IDEMPOTENCY_WAIT_MS` for the request that owns it.
async fn follow(state: &AppState, row: RefundRow) -> Result<Answer, ApiError> {
    let followed = idempotency::follow(
        &state.inflight,
        state.settings.idempotency_wait,
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
        |id| async move {
            state
                .db
                .run(move |conn| rows::find(conn, &id))
                .await?
                .ok_or_else(|| ApiError::internal("refund vanished while waiting"))
        },
    )
    .await;
    idempotency::observe(RESOURCE, &followed);
    match followed? {
        Followed::Answer(answer) => Ok(answer),
        Followed::TakenOver(row, token) => drive_detached(state, row, token, None).await,
    }
}

/// For the recovery worker: takes over an abandoned pending refund and drives it to an
/// outcome. `None` when someone else owns it (or it is no longer pending).
pub async fn resume(state: &AppState, row: RefundRow) -> Result<Option<Answer>, ApiError> {
    let token = new_lease_token();
    let (id, t, lease) = (row.id.clone(), token.clone(), lease(state));
    let won = state
        .db
        .run(move |conn| rows::take_over(conn, &id, &t, now(), lease))
        .await?;
    if !won {
        return Ok(None);
    }
    drive_detached(state, row, token, None).await.map(Some)
}

/// Runs the provider call on its own task, so that a client hanging up mid-request does
/// not abandon a refund half-way: the work finishes and its outcome is stored regardless.
async fn drive_detached(
    state: &AppState,
    row: RefundRow,
    token: String,
    charge_id: Option<String>,
) -> Result<Answer, ApiError> {
    let state = state.clone();
    actix_web::rt::spawn(async move { drive(&state, row, token, charge_id).await })
        .await
        .map_err(|e| ApiError::internal(format!("refund task failed: {e}")))?
}

/// Holds the lease of `row` (whose amount is reserved): asks the provider, with our refund
/// id as its idempotency key so asking again can never refund twice, and records the answer.
/// `charge_id` is the payment's provider charge when the caller already read it.
pub async fn drive(
    state: &AppState,
    row: RefundRow,
    token: String,
    charge_id: Option<String>,
) -> Result<Answer, ApiError> {
    let inflight = state.inflight.register(
        &row.id,
        idempotency::scope_key(RESOURCE, &row.merchant_id, &row.idempotency_key),
        &row.request_fingerprint,
    );
    let charge = match charge_id {
        Some(charge) => charge,
        None => {
            let (merchant_id, payment_id) = (row.merchant_id.clone(), row.payment_id.clone());
            state
                .db
                .run(move |conn| rows::find_payment(conn, &merchant_id, &payment_id))
                .await?
                .and_then(|p| p.provider_charge_id)
                .ok_or_else(|| {
                    ApiError::internal("refund of a payment without a provider charge")
                })?
        }
    };
    let request = RefundRequest {
        charge,
        amount: row.amount,
        reference: row.id.clone(),
    };
    let answer = match state.provider.create_refund(&row.id, &request).await {
        Ok(refund) => match RefundOutcome::from_provider(refund.clone()) {
            Some(outcome) => match finish(state, &row.id, outcome.clone()).await {
                Err(ApiError::ServiceUnavailable) => {
                    // As for payments: 503 now, the answer stored once the database is back.
                    let (state, id) = (state.clone(), row.id.clone());
                    actix_web::rt::spawn(async move {
                        let lease = state.settings.processing_lease;
                        idempotency::store_when_possible(id.clone(), lease, || {
                            finish(&state, &id, outcome.clone())
                        })
                        .await
                    });
                    return Err(ApiError::ServiceUnavailable);
                }
                finished => finished?,
            },
            None => {
                tracing::info!(refund_id = %row.id, provider_refund_id = %refund.id, "refund pending at the provider");
                release(state, row, &token, Some(refund.id)).await?
            }
        },
        Err(unknown) => {
            tracing::warn!(refund_id = %row.id, error = %unknown, "refund outcome unknown");
            release(state, row, &token, None).await?
        }
    };
    inflight.settle(&answer);
    Ok(answer)
}

/// Records a final provider answer. If another path (a webhook, another instance) finished
/// the refund first, its stored answer is the answer.
async fn finish(
    state: &AppState,
    refund_id: &str,
    outcome: RefundOutcome,
) -> Result<Answer, ApiError> {
    let id = refund_id.to_owned();
    let applied = state
        .db
        .run(move |conn| apply_refund_outcome(conn, &id, &outcome))
        .await?;
    let row = match applied {
        OutcomeApplied::Applied(row) => {
            tracing::info!(refund_id = %row.id, status = %row.status, "refund finished");
            row
        }
        OutcomeApplied::AlreadyFinal(row) => row,
        OutcomeApplied::UnknownRefund => {
            return Err(ApiError::internal("refund vanished while finishing"));
        }
    };
    row.stored_answer()
        .ok_or_else(|| ApiError::internal("refund not final after finishing"))
}

/// The outcome is not known yet: give up the lease so a retry or the recovery worker can
/// resume at once, and answer 202 with the refund as it is. The amount stays reserved.
async fn release(
    state: &AppState,
    mut row: RefundRow,
    token: &str,
    provider_refund_id: Option<String>,
) -> Result<Answer, ApiError> {
    row.provider_refund_id = provider_refund_id.or(row.provider_refund_id);
    row.lease_token = None;
    row.lease_expires_at = None;
    row.updated_at = now();
    let (id, token, refund_id, updated_at) = (
        row.id.clone(),
        token.to_owned(),
        row.provider_refund_id.clone(),
        row.updated_at,
    );
    state
        .db
        .run(move |conn| rows::release(conn, &id, &token, refund_id.as_deref(), updated_at))
        .await?;
    Ok(Answer::new(
        202,
        view::render(&row).map_err(ApiError::internal)?,
    ))
}

/// The refunds of one of the merchant's payments, newest first.
pub async fn list_refunds(
    state: &AppState,
    merchant: &Merchant,
    payment_id: String,
    limit: i64,
    starting_after: Option<String>,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let mut rows = state
        .db
        .run(move |conn| {
            if rows::find_payment(conn, &merchant_id, &payment_id)?.is_none() {
                return Ok(None);
            }
            rows::list_for_payment(conn, &payment_id, limit, starting_after.as_deref()).map(Some)
        })
        .await?
        .ok_or_else(no_such_payment)?;
    let page = usize::try_from(limit).unwrap_or(0);
    let has_more = rows.len() > page;
    rows.truncate(page);
    view::render_list(&rows, has_more).map_err(ApiError::internal)
}
