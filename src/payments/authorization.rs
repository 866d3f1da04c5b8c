//! Authorize now, capture later (§10): captures and cancels of a `requires_capture`
//! payment, and the expiry of authorizations nobody took in time.
//!
//! ```text
//! POST …/capture or …/cancel ─▶ 404 unless the merchant's payment exists (nothing stored)
//!   claim, ONE transaction: INSERT payment_operations (unique merchant+kind+key)
//!                           UPDATE payments SET operation_id = op
//!                             WHERE status='requires_capture' AND operation_id IS NULL
//!                               AND amount_capturable >= amount          ← one winner
//!     │ held ─▶ provider capture/cancel (Idempotency-Key = op id) ─▶ finish, ONE transaction:
//!     │          payment succeeded/canceled, the op's 200 answer (the payment) stored
//!     │          (a provider refusal lets the authorization go: 409 stored)
//!     └ not held ─▶ 409 payment_not_capturable / _cancelable, 422 amount_exceeds_capturable,
//!                   stored as the key's final answer
//! ```

use serde::Serialize;

use super::view;
use crate::auth::Merchant;
use crate::body::JsonObject;
use crate::config::Settings;
use crate::db::DbConnection;
use crate::db::payment_operations::{
    self as rows, Age, CANCEL, CAPTURE, FAILED, OperationRow, PENDING, SUCCEEDED,
};
use crate::db::payments as payment_rows;
use crate::domain::{Amount, IdempotencyKey, OperationId, PaymentId, Timestamp, now, sha256_hex};
use crate::error::ApiError;
use crate::events::{self, EventType, NewEvent};
use crate::idempotency::{Answer, idempotent_record};
use crate::operations::{self, Called, Claimed, Lease, Operation, Released, RequestRef};
use crate::provider::{
    CaptureRequest, ChargeUpdate, OutcomeUnknown, ProviderError, ProviderStatus,
};
use crate::state::AppState;

idempotent_record!(OperationRow);

/// `POST /v1/payments/{id}/capture` body.
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = CapturePaymentRequest)]
pub struct NewCapture {
    /// Minor units; absent: all of `amount_capturable`.
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 99_999_999, example = 1500)]
    pub amount: Option<Amount>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum CancellationReason {
    RequestedByCustomer,
    Duplicate,
    Fraudulent,
    Abandoned,
    /// Set by the service when an authorization expires; not accepted in requests.
    Expired,
}

impl CancellationReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequestedByCustomer => "requested_by_customer",
            Self::Duplicate => "duplicate",
            Self::Fraudulent => "fraudulent",
            Self::Abandoned => "abandoned",
            Self::Expired => "expired",
        }
    }

    /// The reasons a merchant may give.
    fn parse_requested(s: &str) -> Option<Self> {
        match s {
            "requested_by_customer" => Some(Self::RequestedByCustomer),
            "duplicate" => Some(Self::Duplicate),
            "fraudulent" => Some(Self::Fraudulent),
            "abandoned" => Some(Self::Abandoned),
            _ => None,
        }
    }
}

/// `POST /v1/payments/{id}/cancel` body.
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = CancelPaymentRequest)]
pub struct NewCancel {
    /// `requested_by_customer`, `duplicate`, `fraudulent` or `abandoned`.
    #[schema(value_type = Option<String>, example = "requested_by_customer")]
    pub cancellation_reason: Option<CancellationReason>,
}

impl NewCapture {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse_or_empty(body, &["amount"])?;
        let amount = object
            .optional_integer("amount")?
            .map(|a| {
                Amount::parse(a).map_err(|e| ApiError::invalid("amount", format!("`amount` {e}")))
            })
            .transpose()?;
        Ok(Self { amount })
    }
}

impl NewCancel {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse_or_empty(body, &["cancellation_reason"])?;
        let cancellation_reason = object
            .optional_string("cancellation_reason", 64)?
            .map(|r| {
                CancellationReason::parse_requested(&r).ok_or_else(|| {
                    ApiError::invalid(
                        "cancellation_reason",
                        "`cancellation_reason` must be requested_by_customer, duplicate, \
                         fraudulent or abandoned",
                    )
                })
            })
            .transpose()?;
        Ok(Self {
            cancellation_reason,
        })
    }
}

/// SHA-256 of the normalised request, its payment included: one key names one operation
/// on one payment. An absent amount ("all") differs from an explicit one.
fn fingerprint(kind: &str, payment_id: &str, amount: Option<i64>, reason: Option<&str>) -> String {
    #[derive(Serialize)]
    struct Canonical<'a> {
        endpoint: String,
        payment_id: &'a str,
        amount: Option<i64>,
        reason: Option<&'a str>,
    }
    let canonical = Canonical {
        endpoint: format!("POST /v1/payments/{{id}}/{kind}"),
        payment_id,
        amount,
        reason,
    };
    // A struct of strings and integers always serialises.
    sha256_hex(&serde_json::to_vec(&canonical).unwrap_or_default())
}

/// What the provider said to a capture or cancel.
#[derive(Debug, Clone)]
pub enum OperationOutcome {
    Done(ChargeUpdate),
    /// A final 4xx: nothing moved.
    Refused(String),
}

/// A capture or a cancel (by the row's `kind`), as an [`Operation`].
pub struct PaymentOperation;

impl Operation for PaymentOperation {
    type Row = OperationRow;
    /// The provider's charge of the payment.
    type Call = String;
    type Outcome = OperationOutcome;

    fn resource(row: &OperationRow) -> &'static str {
        if row.kind == CAPTURE { CAPTURE } else { CANCEL }
    }

    fn claim(
        conn: &mut DbConnection,
        claim: &OperationRow,
        settings: &Settings,
    ) -> diesel::QueryResult<Claimed<OperationRow, String>> {
        claim_operation(conn, claim, expiry_cutoff(settings))
    }

    fn find_by_key(
        conn: &mut DbConnection,
        claim: &OperationRow,
    ) -> diesel::QueryResult<Option<OperationRow>> {
        rows::find_by_idempotency_key(
            conn,
            &claim.merchant_id,
            &claim.kind,
            &claim.idempotency_key,
        )
    }

    fn find(conn: &mut DbConnection, id: &str) -> diesel::QueryResult<Option<OperationRow>> {
        rows::find_by_id(conn, id)
    }

    fn take_over(
        conn: &mut DbConnection,
        id: &str,
        token: &str,
        now: Timestamp,
        lease: chrono::Duration,
    ) -> diesel::QueryResult<bool> {
        rows::take_over(conn, id, token, now, lease)
    }

    fn call_for(_: &mut DbConnection, row: &OperationRow) -> diesel::QueryResult<String> {
        row.provider_charge_id
            .clone()
            .ok_or(diesel::result::Error::NotFound)
    }

    async fn call(
        state: &AppState,
        row: &OperationRow,
        charge: &String,
    ) -> Result<Called<OperationOutcome>, OutcomeUnknown> {
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
                Ok(Called::Final(OperationOutcome::Done(update)))
            }
            // Accepted, not finished: the hold stays, and a retry or the recovery worker
            // asks again with the same key. Letting it go could capture the payment twice.
            Ok(update) if update.status == ProviderStatus::Pending => Ok(Called::Pending(None)),
            // A 200 that did not do what was asked moved nothing we can count on.
            Ok(update) => Ok(Called::Final(OperationOutcome::Refused(format!(
                "the provider answered status `{}`",
                update.status.as_str()
            )))),
            Err(ProviderError::Refused(why)) => Ok(Called::Final(OperationOutcome::Refused(why))),
            Err(ProviderError::Unknown(unknown)) => Err(unknown),
        }
    }

    fn finish(
        conn: &mut DbConnection,
        row: &OperationRow,
        outcome: &OperationOutcome,
        request: Option<&RequestRef>,
    ) -> diesel::QueryResult<OperationRow> {
        finish_operation(conn, row, outcome, request)
    }

    /// The 202 body is the payment as it is (still `requires_capture`, held).
    fn release(
        conn: &mut DbConnection,
        row: &OperationRow,
        token: &str,
        _provider_ref: Option<&str>,
    ) -> diesel::QueryResult<Released> {
        let ours = rows::release(
            conn,
            &row.id,
            token,
            row.provider_charge_id.as_deref(),
            now(),
        )?;
        let body = render_payment(conn, &row.payment_id)?;
        Ok(Released { ours, body })
    }

    fn find_abandoned(
        conn: &mut DbConnection,
        now: Timestamp,
        idle_since: Timestamp,
        limit: i64,
    ) -> diesel::QueryResult<Vec<OperationRow>> {
        rows::find_abandoned(conn, now, idle_since, limit)
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
    claim: &OperationRow,
    expiry: Option<Timestamp>,
) -> diesel::QueryResult<Claimed<OperationRow, String>> {
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
        let capturable_now = payment.status == super::PaymentStatus::RequiresCapture.as_str()
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
        Ok(Claimed::Refused(answer))
    })
}

/// Whether this is the service's own cancel of an expired authorization (a merchant
/// cannot give the reason `expired`).
fn is_expiry(row: &OperationRow) -> bool {
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
    row: &OperationRow,
    outcome: &OperationOutcome,
    request: Option<&RequestRef>,
) -> diesel::QueryResult<OperationRow> {
    use diesel::Connection;
    conn.transaction(|conn| {
        let at = now();
        // Write first: it is the guard, and on SQLite it takes the write lock before any read.
        if !rows::lock_unfinished(conn, &row.id, at)? {
            return rows::find_by_id(conn, &row.id)?.ok_or(diesel::result::Error::NotFound);
        }
        let mut op = row.clone();
        let capture = op.kind == CAPTURE;
        let answer = match outcome {
            OperationOutcome::Refused(why) if !is_expiry(&op) => {
                rows::let_go(conn, &op.payment_id, &op.id)?;
                op.status = FAILED.to_owned();
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
                op.status = match outcome {
                    OperationOutcome::Done(_) => SUCCEEDED.to_owned(),
                    OperationOutcome::Refused(why) => {
                        tracing::warn!(payment_id = %op.payment_id, reason = %why, "the provider refused to cancel an expired authorization; canceled here all the same");
                        FAILED.to_owned()
                    }
                };
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
                let payment = render_payment(conn, &op.payment_id)?;
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
        Ok(op)
    })
}

/// What a capture or cancel request asks for.
pub enum Requested {
    Capture(NewCapture),
    Cancel(NewCancel),
}

/// `POST /v1/payments/{id}/capture` and `…/cancel`.
pub async fn operate(
    state: &AppState,
    merchant: &Merchant,
    payment_id: PaymentId,
    key: IdempotencyKey,
    requested: Requested,
    request_id: Option<String>,
) -> Result<Answer, ApiError> {
    // An unknown (or another merchant's) payment is answered before anything is stored.
    let payment = {
        let merchant_id = merchant.id.clone();
        let payment_id = payment_id.clone();
        state
            .db
            .run(move |conn| rows::find_payment(conn, &merchant_id, payment_id.as_str()))
            .await?
            .ok_or_else(|| ApiError::NotFound("no such payment".to_owned()))?
    };
    // Past AUTHORIZATION_EXPIRY_MS the authorization is expired, whether or not the
    // periodic pass has reached it yet: it is canceled now, and this request finds it so.
    // (The hold decides all the same: an authorization that expires between this read and
    // the claim refuses the claim.)
    if expiry_cutoff(&state.settings).is_some_and(|cutoff| payment.expired_by(cutoff)) {
        expire(state, &payment.id, &payment.merchant_id).await;
    }
    claim_and_run(state, merchant, &payment_id, &key, &requested, request_id).await
}

/// The capture or cancel of a payment known to exist, under the §3 rules: what
/// [`operate`] runs after its read of the payment (public so that tests can run it as a
/// request whose read came before the authorization expired).
pub async fn claim_and_run(
    state: &AppState,
    merchant: &Merchant,
    payment_id: &PaymentId,
    key: &IdempotencyKey,
    requested: &Requested,
    request_id: Option<String>,
) -> Result<Answer, ApiError> {
    let origin = request_id.map(|id| RequestRef {
        id,
        idempotency_key: Some(key.as_str().to_owned()),
    });
    let claim = new_claim(
        state,
        &merchant.id,
        payment_id.as_str(),
        key.as_str(),
        requested,
    );
    operations::execute::<PaymentOperation>(state, claim, origin).await
}

fn new_claim(
    state: &AppState,
    merchant_id: &str,
    payment_id: &str,
    key: &str,
    requested: &Requested,
) -> OperationRow {
    let (kind, amount, reason) = match requested {
        Requested::Capture(c) => (CAPTURE, c.amount.map(|a| a.minor_units()), None),
        Requested::Cancel(c) => (CANCEL, None, c.cancellation_reason.map(|r| r.as_str())),
    };
    let lease = Lease::new(state);
    OperationRow {
        id: OperationId::generate(kind).to_string(),
        merchant_id: merchant_id.to_owned(),
        payment_id: payment_id.to_owned(),
        kind: kind.to_owned(),
        idempotency_key: key.to_owned(),
        request_fingerprint: fingerprint(kind, payment_id, amount, reason),
        amount: amount.unwrap_or(0),
        cancellation_reason: reason.map(str::to_owned),
        provider_charge_id: None,
        status: PENDING.to_owned(),
        response_status: None,
        response_body: None,
        lease_token: Some(lease.token),
        lease_expires_at: Some(lease.expires_at),
        provider_attempts: 1,
        created_at: lease.at,
        updated_at: lease.at,
    }
}

/// Authorizations expired per pass; the rest wait for the next one.
const EXPIRY_BATCH: i64 = 50;

/// Cancels authorizations nobody captured or canceled within `AUTHORIZATION_EXPIRY_MS`,
/// with `cancellation_reason: "expired"`, through the same cancel operation a merchant
/// uses (so the provider is asked once per cancel, and a capture racing the expiry is
/// decided by the same hold). Returns how many it canceled or left pending at the provider.
pub async fn expire_authorizations(state: &AppState) -> Result<usize, ApiError> {
    let Some(cutoff) = expiry_cutoff(&state.settings) else {
        return Ok(0);
    };
    let expired = state
        .db
        .run(move |conn| rows::find_expired(conn, cutoff, EXPIRY_BATCH))
        .await?;
    let mut count = 0;
    for (payment_id, merchant_id) in expired {
        if expire(state, &payment_id, &merchant_id).await {
            count += 1;
        }
    }
    Ok(count)
}

/// Authorizations made at or before this are expired (`None`: none can be).
fn expiry_cutoff(settings: &Settings) -> Option<Timestamp> {
    let expiry =
        chrono::Duration::from_std(settings.authorization_expiry).unwrap_or(chrono::Duration::MAX);
    now().checked_sub_signed(expiry)
}

/// Cancels one expired authorization (`cancellation_reason: "expired"`); true if it is
/// canceled, or left pending at the provider.
async fn expire(state: &AppState, payment_id: &str, merchant_id: &str) -> bool {
    // A key no client can send (a tab is not visible ASCII), new for each attempt: the
    // hold, not the key, decides whether this cancel may run.
    let key = format!(
        "authorization-expiry\t{payment_id}\t{}",
        now().and_utc().timestamp_millis()
    );
    let cancel = Requested::Cancel(NewCancel {
        cancellation_reason: Some(CancellationReason::Expired),
    });
    let claim = new_claim(state, merchant_id, payment_id, &key, &cancel);
    match operations::execute::<PaymentOperation>(state, claim, None).await {
        Ok(answer) if answer.status < 300 => {
            tracing::info!(%payment_id, status = answer.status, "authorization expired: canceled");
            crate::metrics::recovery(crate::metrics::RecoveryAction::AuthorizationExpired);
            true
        }
        Ok(answer) => {
            tracing::info!(%payment_id, status = answer.status, "authorization expiry refused");
            false
        }
        Err(e) => {
            tracing::warn!(%payment_id, error = %e, "expiring an authorization failed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_parse_and_refuse_what_they_must() {
        assert_eq!(NewCapture::parse(b"").unwrap().amount, None);
        assert_eq!(NewCapture::parse(b"{}").unwrap().amount, None);
        assert_eq!(
            NewCapture::parse(br#"{"amount": 1500}"#)
                .unwrap()
                .amount
                .map(|a| a.minor_units()),
            Some(1500)
        );
        for bad in [
            &br#"{"amount": 0}"#[..],
            br#"{"amount": "1"}"#,
            br#"{"x": 1}"#,
            b"[]",
        ] {
            assert!(
                NewCapture::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            NewCancel::parse(br#"{"cancellation_reason": "abandoned"}"#)
                .unwrap()
                .cancellation_reason,
            Some(CancellationReason::Abandoned)
        );
        assert!(NewCancel::parse(br#"{"cancellation_reason": "expired"}"#).is_err());
        assert!(NewCancel::parse(br#"{"amount": 1}"#).is_err());
    }

    #[test]
    fn fingerprints_bind_the_payment_the_kind_and_the_request() {
        let base = fingerprint(CAPTURE, "pay_1", Some(100), None);
        assert_eq!(base, fingerprint(CAPTURE, "pay_1", Some(100), None));
        assert_ne!(base, fingerprint(CAPTURE, "pay_2", Some(100), None));
        assert_ne!(base, fingerprint(CAPTURE, "pay_1", None, None));
        assert_ne!(base, fingerprint(CANCEL, "pay_1", Some(100), None));
        assert_ne!(
            fingerprint(CANCEL, "pay_1", None, Some("duplicate")),
            fingerprint(CANCEL, "pay_1", None, None)
        );
    }
}
