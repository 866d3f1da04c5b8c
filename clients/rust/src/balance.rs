//! The balance and balance transactions: what the merchant holds, and every movement of its
//! money.

use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::Error;
use crate::list::{ListParams, Page};

/// An amount in one currency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Money {
    /// ISO 4217, lower case.
    pub currency: String,
    /// Minor units; `available` can be below zero (a refund of money still pending).
    pub amount: i64,
}

/// The balance object: one entry per currency the merchant has transactions in, exact at
/// the moment of the request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Balance {
    /// What may be paid out.
    pub available: Vec<Money>,
    /// Captured money whose `available_on` has not come yet.
    pub pending: Vec<Money>,
}

impl Balance {
    /// `available` in `currency` (any case); 0 when the merchant has none in it.
    pub fn available_in(&self, currency: &str) -> i64 {
        amount_in(&self.available, currency)
    }

    /// `pending` in `currency` (any case); 0 when the merchant has none in it.
    pub fn pending_in(&self, currency: &str) -> i64 {
        amount_in(&self.pending, currency)
    }
}

fn amount_in(amounts: &[Money], currency: &str) -> i64 {
    amounts
        .iter()
        .find(|m| m.currency.eq_ignore_ascii_case(currency))
        .map_or(0, |m| m.amount)
}

/// What moved the money.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BalanceTransactionType {
    /// A payment's money captured.
    Charge,
    /// A refund created.
    Refund,
    /// A refund failed: its amount comes back.
    RefundFailure,
    Payout,
    /// A payout failed: its amount comes back.
    PayoutFailure,
    Dispute,
    DisputeReversal,
    /// A type this client does not know.
    #[serde(other)]
    Unknown,
}

impl BalanceTransactionType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Charge => "charge",
            Self::Refund => "refund",
            Self::RefundFailure => "refund_failure",
            Self::Payout => "payout",
            Self::PayoutFailure => "payout_failure",
            Self::Dispute => "dispute",
            Self::DisputeReversal => "dispute_reversal",
            Self::Unknown => "unknown",
        }
    }
}

/// `pending` until `available_on`, then `available` (read off the server's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BalanceTransactionStatus {
    Pending,
    Available,
    /// A status this client does not know.
    #[serde(other)]
    Unknown,
}

/// The balance transaction object: one movement of the merchant's money, never changed
/// once written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BalanceTransaction {
    /// `txn_…`
    pub id: String,
    #[serde(rename = "type")]
    pub transaction_type: BalanceTransactionType,
    /// Signed minor units: money in is positive.
    pub amount: i64,
    /// What the platform kept (≥ 0).
    pub fee: i64,
    /// `amount − fee`: what the balance moved by.
    pub net: i64,
    pub currency: String,
    pub status: BalanceTransactionStatus,
    pub available_on: DateTime<Utc>,
    /// The payment (`pay_…`), refund (`re_…`) or payout (`po_…`) that moved the money.
    pub source: String,
    pub created_at: DateTime<Utc>,
}

/// Filters and paging of `GET /v1/balance_transactions` (newest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListBalanceTransactions {
    pub limit: Option<u32>,
    pub starting_after: Option<String>,
    /// Only transactions of this type.
    pub transaction_type: Option<BalanceTransactionType>,
    /// Only the transactions of this payment, refund or payout.
    pub source: Option<String>,
}

impl ListParams for ListBalanceTransactions {
    fn limit(&self) -> Option<u32> {
        self.limit
    }

    fn starting_after(&self) -> Option<&str> {
        self.starting_after.as_deref()
    }

    fn filters(&self) -> Vec<(&'static str, String)> {
        let kind = self
            .transaction_type
            .map(|t| ("type", t.as_str().to_owned()));
        let source = self.source.clone().map(|s| ("source", s));
        kind.into_iter().chain(source).collect()
    }
}

impl Client {
    /// The balance now, per currency.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let balance = client.get_balance().await?;
    /// println!("{} usd may be paid out", balance.available_in("usd"));
    /// # Ok(()) }
    /// ```
    pub async fn get_balance(&self) -> Result<Balance, Error> {
        self.get(self.url(&["balance"])).await
    }

    /// One balance transaction (404 `not_found` for another merchant's).
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let txn = client.get_balance_transaction("txn_…").await?;
    /// # Ok(()) }
    /// ```
    pub async fn get_balance_transaction(&self, id: &str) -> Result<BalanceTransaction, Error> {
        self.get(self.url(&["balance_transactions", id])).await
    }

    /// One page of balance transactions, newest first.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{BalanceTransactionType, ListBalanceTransactions};
    ///
    /// let page = client
    ///     .list_balance_transactions(&ListBalanceTransactions {
    ///         transaction_type: Some(BalanceTransactionType::Charge),
    ///         ..Default::default()
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn list_balance_transactions(
        &self,
        params: &ListBalanceTransactions,
    ) -> Result<Page<BalanceTransaction>, Error> {
        self.list(&["balance_transactions"], params).await
    }

    /// Every balance transaction that matches, newest first, page after page.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{ListBalanceTransactions, TryStreamExt};
    ///
    /// let params = ListBalanceTransactions { source: Some("pay_…".into()), ..Default::default() };
    /// let moves: Vec<_> = client.stream_balance_transactions(params).try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn stream_balance_transactions(
        &self,
        params: ListBalanceTransactions,
    ) -> BoxStream<'static, Result<BalanceTransaction, Error>> {
        self.list_all(&["balance_transactions"], &params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_balance_transaction_parses_and_unknown_types_are_kept_apart() {
        let json = r#"{"id":"txn_1","object":"balance_transaction","type":"charge","amount":2000,
            "fee":88,"net":1912,"currency":"usd","status":"pending",
            "available_on":"2026-11-29T06:52:37.404613Z","source":"pay_1",
            "created_at":"2026-11-27T06:52:37.404613Z"}"#;
        let txn: BalanceTransaction = serde_json::from_str(json).expect("transaction");
        assert_eq!(txn.transaction_type, BalanceTransactionType::Charge);
        assert_eq!(txn.status, BalanceTransactionStatus::Pending);
        assert_eq!((txn.amount, txn.fee, txn.net), (2000, 88, 1912));

        let newer = json
            .replace(r#""charge""#, r#""chargeback_fee""#)
            .replace(r#""pending""#, r#""frozen""#);
        let txn: BalanceTransaction = serde_json::from_str(&newer).expect("transaction");
        assert_eq!(txn.transaction_type, BalanceTransactionType::Unknown);
        assert_eq!(txn.status, BalanceTransactionStatus::Unknown);
    }

    #[test]
    fn a_balance_reads_per_currency() {
        let json = r#"{"object":"balance","available":[{"currency":"usd","amount":4680}],
            "pending":[{"currency":"usd","amount":1912}]}"#;
        let balance: Balance = serde_json::from_str(json).expect("balance");
        assert_eq!(balance.available_in("USD"), 4680);
        assert_eq!(balance.pending_in("usd"), 1912);
        assert_eq!(balance.available_in("eur"), 0);
    }

    #[test]
    fn lists_filter_by_type_and_source() {
        let params = ListBalanceTransactions {
            transaction_type: Some(BalanceTransactionType::PayoutFailure),
            source: Some("po_1".into()),
            ..Default::default()
        };
        assert_eq!(
            params.filters(),
            [
                ("type", "payout_failure".to_owned()),
                ("source", "po_1".to_owned())
            ]
        );
        assert!(ListBalanceTransactions::default().filters().is_empty());
    }
}
