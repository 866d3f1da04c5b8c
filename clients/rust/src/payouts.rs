//! Payouts: money sent from the available balance to a bank account.

use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::Error;
use crate::list::{ListParams, Page};
use crate::mutation::Mutation;

/// `pending` until the provider's outcome is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PayoutStatus {
    /// Not final yet (answered 202); its amount is out of `available` already.
    Pending,
    Paid,
    /// `failure_code` says why; the amount is back in `available`.
    Failed,
    /// A status this client does not know.
    #[serde(other)]
    Unknown,
}

impl PayoutStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Paid => "paid",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }

    /// Whether the provider's answer is in: anything but `pending`.
    pub fn is_final(self) -> bool {
        self != Self::Pending
    }
}

/// The payout object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Payout {
    /// `po_…`
    pub id: String,
    /// Minor units.
    pub amount: i64,
    pub currency: String,
    /// The bank account, `ba_…`.
    pub destination: String,
    pub description: Option<String>,
    pub status: PayoutStatus,
    pub provider_payout_id: Option<String>,
    pub failure_code: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/payouts`. Build it with [`CreatePayout::new`] and the setters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreatePayout {
    /// Minor units, 1 … 99 999 999, at most what is available in `currency`.
    pub amount: i64,
    /// ISO 4217, any case.
    pub currency: String,
    /// `ba_` and 1 to 64 of A–Z a–z 0–9 `_`; the server's default is `ba_test_instant`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// At most 1000 characters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl CreatePayout {
    pub fn new(amount: i64, currency: impl Into<String>) -> Self {
        Self {
            amount,
            currency: currency.into(),
            destination: None,
            description: None,
        }
    }

    pub fn destination(mut self, destination: impl Into<String>) -> Self {
        self.destination = Some(destination.into());
        self
    }

    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// Filters and paging of `GET /v1/payouts` (newest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPayouts {
    pub limit: Option<u32>,
    pub starting_after: Option<String>,
    pub status: Option<PayoutStatus>,
}

impl ListParams for ListPayouts {
    fn limit(&self) -> Option<u32> {
        self.limit
    }

    fn starting_after(&self) -> Option<&str> {
        self.starting_after.as_deref()
    }

    fn filters(&self) -> Vec<(&'static str, String)> {
        let status = self.status.map(|s| ("status", s.as_str().to_owned()));
        status.into_iter().collect()
    }
}

impl Client {
    /// Pays out from the available balance: 201 with the final payout (`paid`, or `failed`
    /// with its amount back in `available`), 202 with a `pending` one; 422
    /// `insufficient_balance` when it is more than is available (the key's final answer:
    /// a new attempt needs a new key). Sent with a new `Idempotency-Key` (or yours), the
    /// same on every retry: one payout at most per key.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use std::time::Duration;
    /// use payments_client::{CreatePayout, ErrorCode};
    ///
    /// match client
    ///     .create_payout(&CreatePayout::new(4000, "usd").description("weekly"))
    ///     .idempotency_key("payout-2026-w48")
    ///     .wait_until_final(Duration::from_secs(60))
    ///     .await
    /// {
    ///     Ok(payout) => println!("{} {:?}", payout.id, payout.status),
    ///     Err(e) if e.code() == Some(&ErrorCode::InsufficientBalance) => eprintln!("not enough available"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn create_payout(&self, params: &CreatePayout) -> Mutation<Payout> {
        self.mutation(self.url(&["payouts"]), params)
    }

    /// The payout as it is now (404 `not_found` for another merchant's).
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let payout = client.get_payout("po_…").await?;
    /// # Ok(()) }
    /// ```
    pub async fn get_payout(&self, id: &str) -> Result<Payout, Error> {
        self.get(self.url(&["payouts", id])).await
    }

    /// One page of payouts, newest first. A refused payout (422) is not a payout and is
    /// never listed.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{ListPayouts, PayoutStatus};
    ///
    /// let page = client
    ///     .list_payouts(&ListPayouts { status: Some(PayoutStatus::Failed), ..Default::default() })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn list_payouts(&self, params: &ListPayouts) -> Result<Page<Payout>, Error> {
        self.list(&["payouts"], params).await
    }

    /// Every payout that matches, newest first, page after page.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::TryStreamExt;
    ///
    /// let payouts: Vec<_> = client.stream_payouts(Default::default()).try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn stream_payouts(&self, params: ListPayouts) -> BoxStream<'static, Result<Payout, Error>> {
        self.list_all(&["payouts"], &params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payout_request_sends_only_what_was_set() {
        let plain = serde_json::to_value(CreatePayout::new(1500, "usd")).expect("json");
        assert_eq!(
            plain,
            serde_json::json!({"amount": 1500, "currency": "usd"})
        );
        let full = CreatePayout::new(1500, "usd")
            .destination("ba_test_async")
            .description("weekly");
        assert_eq!(
            serde_json::to_value(full).expect("json"),
            serde_json::json!({"amount": 1500, "currency": "usd",
                "destination": "ba_test_async", "description": "weekly"})
        );
    }

    #[test]
    fn a_payout_parses_and_unknown_statuses_are_kept_apart() {
        let json = r#"{"id":"po_1","object":"payout","amount":4000,"currency":"usd",
            "destination":"ba_test_instant","description":"weekly","status":"paid",
            "provider_payout_id":"tr_1","failure_code":null,
            "created_at":"2026-11-27T06:52:37.404613Z","updated_at":"2026-11-27T06:52:37.5Z"}"#;
        let payout: Payout = serde_json::from_str(json).expect("payout");
        assert_eq!(payout.status, PayoutStatus::Paid);
        assert!(payout.status.is_final());
        assert_eq!(payout.provider_payout_id.as_deref(), Some("tr_1"));
        let newer: Payout =
            serde_json::from_str(&json.replace(r#""paid""#, r#""in_transit""#)).expect("payout");
        assert_eq!(newer.status, PayoutStatus::Unknown);
        assert_eq!(
            ListPayouts {
                status: Some(PayoutStatus::Pending),
                ..Default::default()
            }
            .filters(),
            [("status", "pending".to_owned())]
        );
    }
}
