//! The payment row, as read and written whole.

use diesel::prelude::*;

use crate::db::schema::payments;
use crate::domain::{PaymentStatus, Timestamp};

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = payments)]
pub struct PaymentRow {
    pub id: String,
    pub merchant_id: String,
    pub idempotency_key: String,
    pub request_fingerprint: String,
    pub amount: i64,
    pub currency: String,
    pub payment_method: String,
    pub customer_id: Option<String>,
    pub description: Option<String>,
    /// Canonical JSON object of string values.
    pub metadata: String,
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub status: PaymentStatus,
    pub amount_refunded: i64,
    pub provider_charge_id: Option<String>,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    pub response_status: Option<i32>,
    pub response_body: Option<String>,
    pub lease_token: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub provider_attempts: i32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// `automatic` or `manual` (authorize now, capture later).
    pub capture_method: String,
    /// What the authorization holds while `requires_capture`, else 0.
    pub amount_capturable: i64,
    /// What was charged: the whole amount once an automatic payment succeeded, the
    /// captured amount for a manual one.
    pub amount_captured: i64,
    pub cancellation_reason: Option<String>,
    /// When the provider authorized it (manual payments): it expires from then on.
    pub authorized_at: Option<Timestamp>,
    /// The capture or cancel that holds the authorization (see `payment_operations`).
    pub operation_id: Option<String>,
    /// The amount of its open and lost disputes.
    pub amount_disputed: i64,
}
