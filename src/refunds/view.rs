//! The refund object as the API shows it.

use serde::Serialize;

use crate::db::refunds::RefundRow;
use crate::domain::format_timestamp;

/// `pending` until the provider's outcome is known; then `succeeded` or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum RefundStatus {
    Pending,
    Succeeded,
    Failed,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Refund)]
pub struct RefundObject<'a> {
    #[schema(example = "re_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    id: &'a str,
    #[schema(example = "refund")]
    object: &'static str,
    #[schema(example = "pay_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    payment_id: &'a str,
    /// Minor units (cents).
    #[schema(example = 500)]
    amount: i64,
    #[schema(example = "usd")]
    currency: &'a str,
    #[schema(value_type = RefundStatus)]
    status: &'a str,
    #[schema(required = true, value_type = Option<crate::refunds::request::RefundReason>)]
    reason: Option<&'a str>,
    #[schema(required = true)]
    provider_refund_id: Option<&'a str>,
    #[schema(required = true)]
    failure_code: Option<&'a str>,
    /// RFC 3339, UTC.
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
}

/// A page of refunds, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct RefundList<'a> {
    #[schema(example = "list")]
    object: &'static str,
    data: Vec<RefundObject<'a>>,
    has_more: bool,
}

impl<'a> RefundObject<'a> {
    pub fn from_row(row: &'a RefundRow) -> Self {
        Self {
            id: &row.id,
            object: "refund",
            payment_id: &row.payment_id,
            amount: row.amount,
            currency: &row.currency,
            status: row.status.as_str(),
            reason: row.reason.as_deref(),
            provider_refund_id: row.provider_refund_id.as_deref(),
            failure_code: row.failure_code.as_deref(),
            created_at: format_timestamp(row.created_at),
            updated_at: format_timestamp(row.updated_at),
        }
    }
}

/// The refund as a JSON document.
pub fn render(row: &RefundRow) -> serde_json::Result<String> {
    serde_json::to_string(&RefundObject::from_row(row))
}

/// A page of refunds: `{"object": "list", "data": [...], "has_more": …}`.
pub fn render_list(rows: &[RefundRow], has_more: bool) -> serde_json::Result<String> {
    serde_json::to_string(&RefundList {
        object: "list",
        data: rows.iter().map(RefundObject::from_row).collect(),
        has_more,
    })
}
