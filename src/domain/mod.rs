//! Domain types that can only exist valid: parse once at the edge, trust inside.

mod amount;
mod currency;
mod destination;
mod digest;
mod fees;
mod idempotency_key;
mod ids;
mod status;
mod text;
mod time;

pub use amount::Amount;
pub use currency::Currency;
pub use destination::{DestinationError, EndpointUrl};
pub use digest::{push_hex, sha256_hex};
pub use fees::LedgerPolicy;
pub use idempotency_key::IdempotencyKey;
pub use ids::{
    ApiKeyId, DeliveryId, DisputeId, DisputeStepId, EndpointId, EventId, MerchantId, ObjectId,
    OperationId, PaymentId, PayoutId, RefundId, TransactionId, new_api_key, new_lease_token,
    v7_now,
};
pub use status::{
    DeliveryStatus, DisputeStatus, EndpointStatus, IllegalMove, PaymentStatus, PayoutStatus,
    RefundStatus, StepStatus,
};
pub use text::{check_text, is_token, sanitized};
pub use time::{Timestamp, follow_database_clock, format_timestamp, now, write_timestamp};

/// The API request that made a change: its `X-Request-Id` and `Idempotency-Key`. Events
/// name it; a change made by a provider webhook, the recovery worker or an expiry has none.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct RequestRef {
    pub id: String,
    pub idempotency_key: Option<String>,
}
