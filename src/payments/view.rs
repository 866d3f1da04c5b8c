//! The payment object as the API shows it.

use serde::Serialize;

use crate::db::payments::PaymentRow;
use crate::domain::format_timestamp;
use crate::error::ApiError;

pub use crate::domain::PaymentStatus;

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Payment)]
pub struct PaymentObject<'a> {
    #[schema(example = "pay_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    id: &'a str,
    #[schema(example = "payment")]
    object: &'static str,
    /// Minor units (cents).
    #[schema(example = 2000)]
    amount: i64,
    /// ISO 4217, lower case.
    #[schema(example = "usd")]
    currency: &'a str,
    #[schema(value_type = PaymentStatus)]
    status: &'a str,
    #[schema(value_type = crate::payments::request::CaptureMethod)]
    capture_method: &'a str,
    /// What the authorization holds while `requires_capture`, else 0.
    amount_capturable: i64,
    /// What was charged: the whole amount of an automatic payment that succeeded, the
    /// captured amount of a manual one, else 0.
    amount_captured: i64,
    amount_refunded: i64,
    /// The amount of its open and lost disputes.
    amount_disputed: i64,
    #[schema(example = "pm_card_visa")]
    payment_method: &'a str,
    #[schema(required = true)]
    customer_id: Option<&'a str>,
    #[schema(required = true)]
    description: Option<&'a str>,
    #[schema(value_type = std::collections::HashMap<String, String>)]
    metadata: serde_json::Value,
    #[schema(required = true)]
    provider_charge_id: Option<&'a str>,
    #[schema(required = true)]
    failure_code: Option<&'a str>,
    #[schema(required = true)]
    failure_message: Option<&'a str>,
    /// `requested_by_customer`, `duplicate`, `fraudulent`, `abandoned`, or `expired` when
    /// the service canceled an authorization nobody captured in time.
    #[schema(required = true)]
    cancellation_reason: Option<&'a str>,
    /// RFC 3339, UTC.
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
}

impl<'a> PaymentObject<'a> {
    pub fn from_row(row: &'a PaymentRow) -> Result<Self, ApiError> {
        let metadata = serde_json::from_str(&row.metadata).map_err(|e| {
            ApiError::internal(format!("stored metadata of {} is not JSON: {e}", row.id))
        })?;
        Ok(Self {
            id: &row.id,
            object: "payment",
            amount: row.amount,
            currency: &row.currency,
            status: row.status.as_str(),
            capture_method: &row.capture_method,
            amount_capturable: row.amount_capturable,
            amount_captured: row.amount_captured,
            amount_refunded: row.amount_refunded,
            amount_disputed: row.amount_disputed,
            payment_method: &row.payment_method,
            customer_id: row.customer_id.as_deref(),
            description: row.description.as_deref(),
            metadata,
            provider_charge_id: row.provider_charge_id.as_deref(),
            failure_code: row.failure_code.as_deref(),
            failure_message: row.failure_message.as_deref(),
            cancellation_reason: row.cancellation_reason.as_deref(),
            created_at: format_timestamp(row.created_at),
            updated_at: format_timestamp(row.updated_at),
        })
    }
}

/// The payment as a JSON document.
pub fn render(row: &PaymentRow) -> Result<String, ApiError> {
    serde_json::to_string(&PaymentObject::from_row(row)?).map_err(ApiError::internal)
}

/// A page of payments, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PaymentList<'a> {
    #[schema(example = "list")]
    object: &'static str,
    data: Vec<PaymentObject<'a>>,
    has_more: bool,
}

/// A page of payments: `{"object": "list", "data": [...], "has_more": …}`.
pub fn render_list(rows: &[PaymentRow], has_more: bool) -> Result<String, ApiError> {
    let data = rows
        .iter()
        .map(PaymentObject::from_row)
        .collect::<Result<_, _>>()?;
    serde_json::to_string(&PaymentList {
        object: "list",
        data,
        has_more,
    })
    .map_err(ApiError::internal)
}
