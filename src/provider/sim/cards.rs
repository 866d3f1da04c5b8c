//! The test payment methods of the contract (docs/provider.md) and the outcome the
//! simulator gives each.

use crate::provider::protocol::ProviderStatus;

/// Why a charge failed, in one byte (the simulator keeps one with every charge it made).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failure {
    CardDeclined,
    InsufficientFunds,
    InvalidPaymentMethod,
}

impl Failure {
    pub(super) fn code(self) -> &'static str {
        match self {
            Self::CardDeclined => "card_declined",
            Self::InsufficientFunds => "insufficient_funds",
            Self::InvalidPaymentMethod => "invalid_payment_method",
        }
    }

    pub(super) fn message(self) -> &'static str {
        match self {
            Self::CardDeclined => "Your card was declined.",
            Self::InsufficientFunds => "Your card has insufficient funds.",
            Self::InvalidPaymentMethod => "The payment method is not valid.",
        }
    }
}

/// Succeeds, then is disputed once its money is captured (docs/provider.md).
pub(super) const DISPUTED: &str = "pm_card_dispute";

/// The outcome the simulator gives a payment method.
pub(super) fn decide(payment_method: &str) -> (ProviderStatus, Option<Failure>) {
    match payment_method {
        "pm_card_visa" | "pm_card_mastercard" | "pm_card_amex" | DISPUTED => {
            (ProviderStatus::Succeeded, None)
        }
        "pm_card_declined" => (ProviderStatus::Failed, Some(Failure::CardDeclined)),
        "pm_card_insufficient_funds" => (ProviderStatus::Failed, Some(Failure::InsufficientFunds)),
        "pm_card_async" | "pm_card_async_declined" => (ProviderStatus::Pending, None),
        _ => (ProviderStatus::Failed, Some(Failure::InvalidPaymentMethod)),
    }
}

/// How a pending (async) charge completes: `pm_card_async_declined` fails, others succeed.
/// Kept with the charge until then: whether it declines.
pub(super) fn declines_later(payment_method: &str) -> bool {
    payment_method == "pm_card_async_declined"
}

/// The outcome of a pending charge that [`declines_later`] or not.
pub(super) fn decide_async(declines: bool) -> (ProviderStatus, Option<Failure>) {
    if declines {
        (ProviderStatus::Failed, Some(Failure::CardDeclined))
    } else {
        (ProviderStatus::Succeeded, None)
    }
}

/// An approval without capture is an authorization.
pub(super) fn held_unless_captured(status: ProviderStatus, capture: bool) -> ProviderStatus {
    match status {
        ProviderStatus::Succeeded if !capture => ProviderStatus::RequiresCapture,
        other => other,
    }
}
