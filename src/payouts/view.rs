//! The payout object as the API shows it.

use serde::Serialize;

use crate::db::payouts::PayoutRow;
use crate::domain::format_timestamp;

/// `pending` until the provider's outcome is known; then `paid` or `failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum PayoutStatus {
    Pending,
    Paid,
    Failed,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Payout)]
pub struct PayoutObject<'a> {
    #[schema(example = "po_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    id: &'a str,
    #[schema(example = "payout")]
    object: &'static str,
    /// Minor units.
    #[schema(example = 1500)]
    amount: i64,
    #[schema(example = "usd")]
    currency: &'a str,
    #[schema(example = "ba_test_instant")]
    destination: &'a str,
    #[schema(required = true)]
    description: Option<&'a str>,
    #[schema(value_type = PayoutStatus)]
    status: &'a str,
    #[schema(required = true)]
    provider_payout_id: Option<&'a str>,
    #[schema(required = true)]
    failure_code: Option<&'a str>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
}

/// A page of payouts, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PayoutList<'a> {
    #[schema(example = "list")]
    object: &'static str,
    data: Vec<PayoutObject<'a>>,
    has_more: bool,
}

impl<'a> PayoutObject<'a> {
    pub fn from_row(row: &'a PayoutRow) -> Self {
        Self {
            id: &row.id,
            object: "payout",
            amount: row.amount,
            currency: &row.currency,
            destination: &row.destination,
            description: row.description.as_deref(),
            status: row.status.as_str(),
            provider_payout_id: row.provider_payout_id.as_deref(),
            failure_code: row.failure_code.as_deref(),
            created_at: format_timestamp(row.created_at),
            updated_at: format_timestamp(row.updated_at),
        }
    }
}

pub fn render(row: &PayoutRow) -> serde_json::Result<String> {
    serde_json::to_string(&PayoutObject::from_row(row))
}

pub fn render_list(rows: &[PayoutRow], has_more: bool) -> serde_json::Result<String> {
    serde_json::to_string(&PayoutList {
        object: "list",
        data: rows.iter().map(PayoutObject::from_row).collect(),
        has_more,
    })
}
