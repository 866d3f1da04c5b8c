//! What kinds of event there are, as their `type` names them.

use serde::Serialize;

use crate::domain::{DisputeStatus, PaymentStatus, PayoutStatus, RefundStatus};

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
    #[serde(rename = "payout.paid")]
    PayoutPaid,
    #[serde(rename = "payout.failed")]
    PayoutFailed,
    #[serde(rename = "dispute.created")]
    DisputeCreated,
    #[serde(rename = "dispute.updated")]
    DisputeUpdated,
    #[serde(rename = "dispute.closed")]
    DisputeClosed,
}

/// The `type` of the test delivery (`POST /v1/webhook_endpoints/{id}/test`): sent, never
/// recorded, so not an [`EventType`] an endpoint can subscribe to.
pub const TEST_EVENT_TYPE: &str = "webhook_endpoint.test";

impl EventType {
    pub const ALL: [Self; 11] = [
        Self::PaymentSucceeded,
        Self::PaymentFailed,
        Self::PaymentRequiresCapture,
        Self::PaymentCanceled,
        Self::RefundSucceeded,
        Self::RefundFailed,
        Self::PayoutPaid,
        Self::PayoutFailed,
        Self::DisputeCreated,
        Self::DisputeUpdated,
        Self::DisputeClosed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PaymentSucceeded => "payment.succeeded",
            Self::PaymentFailed => "payment.failed",
            Self::PaymentRequiresCapture => "payment.requires_capture",
            Self::PaymentCanceled => "payment.canceled",
            Self::RefundSucceeded => "refund.succeeded",
            Self::RefundFailed => "refund.failed",
            Self::PayoutPaid => "payout.paid",
            Self::PayoutFailed => "payout.failed",
            Self::DisputeCreated => "dispute.created",
            Self::DisputeUpdated => "dispute.updated",
            Self::DisputeClosed => "dispute.closed",
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

    /// The event of a payout that has just moved to `status`; none for `pending`.
    pub fn of_payout_status(status: PayoutStatus) -> Option<Self> {
        match status {
            PayoutStatus::Paid => Some(Self::PayoutPaid),
            PayoutStatus::Failed => Some(Self::PayoutFailed),
            PayoutStatus::Pending | PayoutStatus::Rejected => None,
        }
    }

    /// The event of a dispute that has just moved to `status` (its opening is
    /// `dispute.created`, recorded by whoever opens it).
    pub fn of_dispute_status(status: DisputeStatus) -> Self {
        match status {
            DisputeStatus::NeedsResponse | DisputeStatus::UnderReview => Self::DisputeUpdated,
            DisputeStatus::Won | DisputeStatus::Lost => Self::DisputeClosed,
        }
    }
}
