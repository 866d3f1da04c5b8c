//! `POST /v1/payments/{id}/capture` and `…/cancel`: the request's way in.

use super::expiry::expire;
use super::operation::{CaptureOrCancel, expiry_cutoff, new_claim};
use super::request::Requested;
use crate::auth::Merchant;
use crate::db::captures as rows;
use crate::domain::RequestRef;
use crate::domain::{IdempotencyKey, PaymentId};
use crate::error::ApiError;
use crate::idempotency::Answer;
use crate::operations;
use crate::state::AppState;

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

/// The capture or cancel of a payment known to exist, under the idempotency rules: what
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
    operations::execute::<CaptureOrCancel>(state, claim, origin).await
}
