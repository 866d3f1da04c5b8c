//! The dispute object as the API shows it.

use serde::Serialize;

use crate::db::disputes::DisputeRow;
use crate::domain::format_timestamp;

/// The evidence a merchant saved.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Evidence<'a> {
    /// At most 20 000 characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Dispute)]
pub struct DisputeObject<'a> {
    #[schema(example = "dp_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    id: &'a str,
    #[schema(example = "dispute")]
    object: &'static str,
    payment_id: &'a str,
    /// Minor units: what the customer's bank took back.
    #[schema(example = 2000)]
    amount: i64,
    #[schema(example = "usd")]
    currency: &'a str,
    #[schema(example = "fraudulent")]
    reason: &'a str,
    #[schema(value_type = crate::domain::DisputeStatus)]
    status: &'a str,
    evidence: Evidence<'a>,
    #[schema(required = true, format = DateTime)]
    evidence_submitted_at: Option<String>,
    #[schema(format = DateTime)]
    evidence_due_by: String,
    provider_dispute_id: &'a str,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
}

/// A page of disputes, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct DisputeList<'a> {
    #[schema(example = "list")]
    object: &'static str,
    data: Vec<DisputeObject<'a>>,
    has_more: bool,
}

impl<'a> DisputeObject<'a> {
    pub fn from_row(row: &'a DisputeRow) -> Self {
        Self {
            id: &row.id,
            object: "dispute",
            payment_id: &row.payment_id,
            amount: row.amount,
            currency: &row.currency,
            reason: &row.reason,
            status: row.status.as_str(),
            evidence: Evidence {
                text: row.evidence_text.as_deref(),
            },
            evidence_submitted_at: row.evidence_submitted_at.map(format_timestamp),
            evidence_due_by: format_timestamp(row.evidence_due_by),
            provider_dispute_id: &row.provider_dispute_id,
            created_at: format_timestamp(row.created_at),
            updated_at: format_timestamp(row.updated_at),
        }
    }
}

pub fn render(row: &DisputeRow) -> serde_json::Result<String> {
    serde_json::to_string(&DisputeObject::from_row(row))
}

pub fn render_list(rows: &[DisputeRow], has_more: bool) -> serde_json::Result<String> {
    serde_json::to_string(&DisputeList {
        object: "list",
        data: rows.iter().map(DisputeObject::from_row).collect(),
        has_more,
    })
}
