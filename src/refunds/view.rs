//! The refund object as the API shows it.

use serde::Serialize;

use crate::db::refunds::RefundRow;
use crate::domain::format_timestamp;

#[derive(Serialize)]
pub struct RefundObject<'a> {
    id: &'a str,
    object: &'static str,
    payment_id: &'a str,
    amount: i64,
    currency: &'a str,
    status: &'a str,
    reason: Option<&'a str>,
    provider_refund_id: Option<&'a str>,
    failure_code: Option<&'a str>,
    created_at: String,
    updated_at: String,
}

impl<'a> RefundObject<'a> {
    pub fn from_row(row: &'a RefundRow) -> Self {
        Self {
            id: &row.id,
            object: "refund",
            payment_id: &row.payment_id,
            amount: row.amount,
            currency: &row.currency,
            status: &row.status,
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
    #[derive(Serialize)]
    struct List<'a> {
        object: &'static str,
        data: Vec<RefundObject<'a>>,
        has_more: bool,
    }
    serde_json::to_string(&List {
        object: "list",
        data: rows.iter().map(RefundObject::from_row).collect(),
        has_more,
    })
}
