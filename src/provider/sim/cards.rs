//! The test payment methods of the contract (docs/provider.md) and the outcome the
//! simulator gives each.

use crate::provider::protocol::ProviderStatus;

/// Why a charge failed: (code, message).
pub(super) type Failure = &'static (&'static str, &'static str);
const CARD_DECLINED: Failure = &("card_declined", "Your card was declined.");
const INSUFFICIENT_FUNDS: Failure = &("insufficient_funds", "Your card has insufficient funds.");
const INVALID_PAYMENT_METHOD: Failure =
    &("invalid_payment_method", "The payment method is not valid.");

/// Succeeds, then is disputed once its money is captured (docs/provider.md).
pub(super) const DISPUTED: &str = "pm_card_dispute";

/// The outcome the simulator gives a payment method.
pub(super) fn decide(payment_method: &str) -> (ProviderStatus, Option<Failure>) {
    match payment_method {
        "pm_card_visa" | "pm_card_mastercard" | "pm_card_amex" | DISPUTED => {
            (ProviderStatus::Succeeded, None)
        }
        "pm_card_declined" => (ProviderStatus::Failed, Some(CARD_DECLINED)),
        "pm_card_insufficient_funds" => (ProviderStatus::Failed, Some(INSUFFICIENT_FUNDS)),
        "pm_card_async" | "pm_card_async_declined" => (ProviderStatus::Pending, None),
        _ => (ProviderStatus::Failed, Some(INVALID_PAYMENT_METHOD)),
    }
}

/// How a pending (async) charge completes: `pm_card_async_declined` fails, others succeed.
pub(super) fn decide_async(payment_method: &str) -> (ProviderStatus, Option<Failure>) {
    match payment_method {
        "pm_card_async_declined" => (ProviderStatus::Failed, Some(CARD_DECLINED)),
        _ => (ProviderStatus::Succeeded, None),
    }
}

/// An approval without capture is an authorization.
pub(super) fn held_unless_captured(status: ProviderStatus, capture: bool) -> ProviderStatus {
    match status {
        ProviderStatus::Succeeded if !capture => ProviderStatus::RequiresCapture,
        other => other,
    }
}
