//! What kinds of event there are, as their `type` names them.

use serde::Serialize;

use crate::domain::{PaymentStatus, RefundStatus};

/// Every kind of event. `payment.requires_capture` and `payment.canceled` come from
/// manual capture through the same [`record`](super::record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, utoipa::ToSchema)]
#[schema(
    description = "A type of recorded event: what the events list holds and what \
    `enabled_events` can name. `payment.requires_capture` and `payment.canceled` are those of \
    payments created with `capture_method: manual`."
)]
pub enum EventType {
    #[serde(rename = "payment.succeeded")]
    PaymentSucceeded,
    #[serde(rename = "payment.failed")]
    PaymentFailed,
    #[serde(rename = "payment.requires_capture")]
    PaymentRequiresCapture,
    #[serde(rename = "payment.canceled")]
    PaymentCanceled,
    #[serde(rename = "refund.succeeded")]
    RefundSucceeded,
    #[serde(rename = "refund.failed")]
    RefundFailed,
}

/// The `type` of the test delivery (`POST /v1/webhook_endpoints/{id}/test`): sent, never
/// recorded, so not an [`EventType`] an endpoint can subscribe to.
pub const TEST_EVENT_TYPE: &str = "webhook_endpoint.test";

impl EventType {
    pub const ALL: [Self; 6] = [
        Self::PaymentSucceeded,
        Self::PaymentFailed,
        Self::PaymentRequiresCapture,
        Self::PaymentCanceled,
        Self::RefundSucceeded,
        Self::RefundFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PaymentSucceeded => "payment.succeeded",
            Self::PaymentFailed => "payment.failed",
            Self::PaymentRequiresCapture => "payment.requires_capture",
            Self::PaymentCanceled => "payment.canceled",
            Self::RefundSucceeded => "refund.succeeded",
            Self::RefundFailed => "refund.failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }

    /// The event of a payment that has just moved to `status`; none for `processing`.
    pub fn of_payment_status(status: PaymentStatus) -> Option<Self> {
        match status {
            PaymentStatus::Succeeded => Some(Self::PaymentSucceeded),
            PaymentStatus::Failed => Some(Self::PaymentFailed),
            PaymentStatus::RequiresCapture => Some(Self::PaymentRequiresCapture),
            PaymentStatus::Canceled => Some(Self::PaymentCanceled),
            PaymentStatus::Processing => None,
        }
    }

    /// The event of a refund that has just moved to `status`; none for `pending`.
    pub fn of_refund_status(status: RefundStatus) -> Option<Self> {
        match status {
            RefundStatus::Succeeded => Some(Self::RefundSucceeded),
            RefundStatus::Failed => Some(Self::RefundFailed),
            RefundStatus::Pending | RefundStatus::Rejected => None,
        }
    }
}
