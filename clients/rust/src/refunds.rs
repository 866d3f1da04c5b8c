//! Refunds.

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
pub enum RefundStatus {
    Pending,
    Succeeded,
    Failed,
    #[serde(other)]
    Unknown,
}

impl RefundStatus {
    /// Whether the provider's answer is in: anything but `pending`.
    pub fn is_final(self) -> bool {
        self != Self::Pending
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RefundReason {
    RequestedByCustomer,
    Duplicate,
    Fraudulent,
    #[serde(other)]
    Unknown,
}

/// The refund object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Refund {
    /// `re_…`
    pub id: String,
    pub payment_id: String,
    /// Minor units.
    pub amount: i64,
    pub currency: String,
    pub status: RefundStatus,
    pub reason: Option<RefundReason>,
    pub provider_refund_id: Option<String>,
    pub failure_code: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/payments/{id}/refunds`: `amount` defaults to what is left to refund.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CreateRefund {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<RefundReason>,
}

/// Paging of `GET /v1/payments/{id}/refunds`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListRefunds {
    pub limit: Option<u32>,
    pub starting_after: Option<String>,
}

impl ListParams for ListRefunds {
    fn limit(&self) -> Option<u32> {
        self.limit
    }

    fn starting_after(&self) -> Option<&str> {
        self.starting_after.as_deref()
    }
}

impl Client {
    /// Refunds (part of) a succeeded payment: 201 with the final refund, 202 with a
    /// `pending` one; 409 `payment_not_refundable`, 422 `amount_exceeds_refundable` (both
    /// the key's final answer: a new attempt needs a new key).
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{CreateRefund, RefundReason};
    ///
    /// let refund = client
    ///     .create_refund("pay_…", &CreateRefund { amount: Some(500), reason: Some(RefundReason::RequestedByCustomer) })
    ///     .idempotency_key("refund-1001-a")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn create_refund(&self, payment_id: &str, params: &CreateRefund) -> Mutation<Refund> {
        self.mutation(self.url(&["payments", payment_id, "refunds"]), params)
    }

    /// One page of a payment's refunds, newest first.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let page = client.list_refunds("pay_…", &Default::default()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn list_refunds(
        &self,
        payment_id: &str,
        params: &ListRefunds,
    ) -> Result<Page<Refund>, Error> {
        self.list(&["payments", payment_id, "refunds"], params)
            .await
    }

    /// Every refund of a payment, newest first, page after page.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::TryStreamExt;
    ///
    /// let refunds: Vec<_> = client.stream_refunds("pay_…", Default::default()).try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn stream_refunds(
        &self,
        payment_id: &str,
        params: ListRefunds,
    ) -> BoxStream<'static, Result<Refund, Error>> {
        self.list_all(&["payments", payment_id, "refunds"], &params)
    }
}
