//! Payouts in the provider's protocol: `POST /v1/payouts` with `Idempotency-Key: <our payout
//! id>`, finished at once or later by a `payout.paid` / `payout.failed` webhook.

use serde::{Deserialize, Serialize};

use super::{provider_id, provider_text};

/// `POST /v1/payouts` body. `reference` is our payout id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutRequest {
    pub amount: i64,
    pub currency: String,
    /// The merchant's bank account (`ba_…`).
    pub destination: String,
    pub reference: String,
}

/// Where a payout is at the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayoutState {
    Paid,
    Failed,
    /// Finished later by a signed webhook.
    Pending,
}

impl PayoutState {
    /// The status as the protocol writes it (also the metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Paid => "paid",
            Self::Failed => "failed",
            Self::Pending => "pending",
        }
    }
}

/// The provider's answer to a payout (`tr_…`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderPayout {
    #[serde(deserialize_with = "provider_id")]
    pub id: String,
    pub status: PayoutState,
    #[serde(default)]
    pub amount: i64,
    #[serde(default)]
    pub currency: String,
    #[serde(default)]
    pub reference: String,
    #[serde(default, deserialize_with = "provider_text")]
    pub failure_code: Option<String>,
}

/// How the simulator treats a payout, by its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulatedPayout {
    /// Where it ends.
    pub outcome: PayoutState,
    pub failure_code: Option<&'static str>,
    /// Answered `pending` first, and finished by a webhook.
    pub delayed: bool,
}

impl SimulatedPayout {
    /// `ba_test_instant` is paid at once; `ba_test_async` pending, then paid;
    /// `ba_test_closed` pending, then failed (`account_closed`); `ba_test_declined` failed
    /// at once (`account_frozen`); anything else failed at once (`invalid_destination`).
    pub fn of(destination: &str) -> Self {
        let (outcome, failure_code, delayed) = match destination {
            "ba_test_instant" => (PayoutState::Paid, None, false),
            "ba_test_async" => (PayoutState::Paid, None, true),
            "ba_test_closed" => (PayoutState::Failed, Some("account_closed"), true),
            "ba_test_declined" => (PayoutState::Failed, Some("account_frozen"), false),
            _ => (PayoutState::Failed, Some("invalid_destination"), false),
        };
        Self {
            outcome,
            failure_code,
            delayed,
        }
    }

    /// The first answer's status.
    pub fn answered(&self) -> PayoutState {
        if self.delayed {
            PayoutState::Pending
        } else {
            self.outcome
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payout_answer_is_understood() {
        let payout: ProviderPayout =
            serde_json::from_str(r#"{"id": "tr_1", "status": "pending"}"#).unwrap();
        assert_eq!(payout.status, PayoutState::Pending);
        assert!(serde_json::from_str::<ProviderPayout>(r#"{"id": "", "status": "paid"}"#).is_err());
    }

    #[test]
    fn test_destinations_decide_the_outcome() {
        let of = SimulatedPayout::of;
        assert_eq!(of("ba_test_instant").answered(), PayoutState::Paid);
        assert_eq!(of("ba_test_async").answered(), PayoutState::Pending);
        assert_eq!(of("ba_test_async").outcome, PayoutState::Paid);
        assert_eq!(of("ba_test_closed").outcome, PayoutState::Failed);
        assert_eq!(of("ba_test_closed").failure_code, Some("account_closed"));
        assert_eq!(of("ba_test_declined").answered(), PayoutState::Failed);
        assert_eq!(of("ba_test_declined").failure_code, Some("account_frozen"));
        assert_eq!(of("ba_other").failure_code, Some("invalid_destination"));
    }
}
