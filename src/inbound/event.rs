//! What a provider event asks for, read from its body before the database is touched.

use serde::{Deserialize, Serialize};

use crate::provider::ProviderStatus;

/// The envelope every provider event shares. Unknown fields are allowed: the provider
/// may add some, and the signature already vouches for the content.
#[derive(Debug, Deserialize)]
pub(super) struct Envelope {
    #[serde(rename = "type")]
    pub(super) kind: String,
    #[serde(default)]
    pub(super) data: serde_json::Value,
}

/// `data` of `charge.succeeded` / `charge.failed`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct ChargeData {
    pub(super) charge_id: String,
    /// Our payment id.
    pub(super) reference: String,
    pub(super) amount: Option<i64>,
    pub(super) currency: Option<String>,
    pub(super) failure_code: Option<String>,
    pub(super) failure_message: Option<String>,
}

/// `data` of `refund.succeeded` / `refund.failed`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct RefundData {
    pub(super) refund_id: Option<String>,
    /// Our refund id.
    pub(super) reference: String,
    pub(super) charge_id: Option<String>,
    pub(super) amount: Option<i64>,
    pub(super) failure_code: Option<String>,
}

/// `data` of `payout.paid` / `payout.failed`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct PayoutData {
    pub(super) payout_id: Option<String>,
    /// Our payout id.
    pub(super) reference: String,
    pub(super) amount: Option<i64>,
    pub(super) currency: Option<String>,
    pub(super) failure_code: Option<String>,
}

/// The longest provider dispute id taken, in bytes (as every id the contract bounds). It is
/// a unique key: PostgreSQL refuses an index entry over about 2 700 bytes, so a longer one
/// was a 500 the provider would retry for ever. Longer, the event's data is malformed.
const MAX_DISPUTE_ID: usize = 255;

fn dispute_id<'de, D: serde::Deserializer<'de>>(from: D) -> Result<String, D::Error> {
    let id = String::deserialize(from)?;
    if id.len() > MAX_DISPUTE_ID {
        return Err(serde::de::Error::custom(format_args!(
            "dispute id longer than {MAX_DISPUTE_ID} bytes"
        )));
    }
    Ok(id)
}

/// `data` of `charge.dispute.created`. Kept as it came (serialised again) while its payment
/// is not final.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub(super) struct DisputeCreatedData {
    #[serde(deserialize_with = "dispute_id")]
    pub(super) dispute_id: String,
    pub(super) charge_id: Option<String>,
    /// Our payment id.
    pub(super) reference: String,
    pub(super) amount: i64,
    pub(super) currency: String,
    pub(super) reason: Option<String>,
    /// RFC 3339.
    pub(super) evidence_due_by: Option<String>,
}

/// `data` of `charge.dispute.updated` / `charge.dispute.closed`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub(super) struct DisputeMoveData {
    #[serde(deserialize_with = "dispute_id")]
    pub(super) dispute_id: String,
    pub(super) status: String,
}

/// What an event asks for, decided before the database is touched.
#[derive(Debug)]
pub(super) enum Effect {
    FinishPayment {
        status: ProviderStatus,
        data: ChargeData,
    },
    FinishRefund {
        succeeded: bool,
        data: RefundData,
    },
    FinishPayout {
        paid: bool,
        data: PayoutData,
    },
    OpenDispute(DisputeCreatedData),
    /// `closing`: `charge.dispute.closed` (else `.updated`).
    MoveDispute {
        closing: bool,
        data: DisputeMoveData,
    },
    /// Recorded and answered 200, nothing else: retrying would not make it applicable.
    Ignore(&'static str),
}

pub(super) const DISPUTE_CREATED: &str = "charge.dispute.created";
pub(super) const DISPUTE_UPDATED: &str = "charge.dispute.updated";
pub(super) const DISPUTE_CLOSED: &str = "charge.dispute.closed";

pub(super) fn effect_of(envelope: Envelope) -> Effect {
    let status = match envelope.kind.as_str() {
        "charge.succeeded" => ProviderStatus::Succeeded,
        "charge.failed" => ProviderStatus::Failed,
        "charge.requires_capture" => ProviderStatus::RequiresCapture,
        kind @ ("refund.succeeded" | "refund.failed") => {
            return match serde_json::from_value::<RefundData>(envelope.data) {
                Ok(data) => Effect::FinishRefund {
                    succeeded: kind == "refund.succeeded",
                    data,
                },
                Err(_) => Effect::Ignore("refund event data is malformed"),
            };
        }
        kind @ ("payout.paid" | "payout.failed") => {
            return match serde_json::from_value::<PayoutData>(envelope.data) {
                Ok(data) => Effect::FinishPayout {
                    paid: kind == "payout.paid",
                    data,
                },
                Err(_) => Effect::Ignore("payout event data is malformed"),
            };
        }
        DISPUTE_CREATED => {
            return match serde_json::from_value::<DisputeCreatedData>(envelope.data) {
                Ok(data) => Effect::OpenDispute(data),
                Err(_) => Effect::Ignore("dispute event data is malformed"),
            };
        }
        kind @ (DISPUTE_UPDATED | DISPUTE_CLOSED) => {
            return match serde_json::from_value::<DisputeMoveData>(envelope.data) {
                Ok(data) => Effect::MoveDispute {
                    closing: kind == DISPUTE_CLOSED,
                    data,
                },
                Err(_) => Effect::Ignore("dispute event data is malformed"),
            };
        }
        _ => return Effect::Ignore("unknown event type"),
    };
    match serde_json::from_value::<ChargeData>(envelope.data) {
        Ok(data) => Effect::FinishPayment { status, data },
        Err(_) => Effect::Ignore("charge event data is malformed"),
    }
}
