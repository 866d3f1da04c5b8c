//! Payments and their capture or cancel.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::Error;
use crate::list::{ListParams, Page};
use crate::mutation::Mutation;

/// Where a payment stands. Only `processing` can still change by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PaymentStatus {
    /// The provider's outcome is not known yet (answered 202).
    Processing,
    /// Authorized, waiting for [`Client::capture_payment`] or [`Client::cancel_payment`].
    RequiresCapture,
    Succeeded,
    /// Declined: `failure_code` says why.
    Failed,
    Canceled,
    /// A status this client does not know.
    #[serde(other)]
    Unknown,
}

impl PaymentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Processing => "processing",
            Self::RequiresCapture => "requires_capture",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
            Self::Unknown => "unknown",
        }
    }

    /// Whether the provider's answer is in: anything but `processing`.
    pub fn is_final(self) -> bool {
        self != Self::Processing
    }
}

/// `automatic` charges at once; `manual` authorizes now and captures later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CaptureMethod {
    #[default]
    Automatic,
    Manual,
    #[serde(other)]
    Unknown,
}

/// Why a payment was canceled; `expired` is set by the service itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CancellationReason {
    RequestedByCustomer,
    Duplicate,
    Fraudulent,
    Abandoned,
    Expired,
    #[serde(other)]
    Unknown,
}

/// The payment object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Payment {
    /// `pay_…`
    pub id: String,
    /// Minor units (cents).
    pub amount: i64,
    /// ISO 4217, lower case.
    pub currency: String,
    pub status: PaymentStatus,
    /// Absent from servers before manual capture: then `automatic`.
    #[serde(default)]
    pub capture_method: CaptureMethod,
    /// What an authorization holds while `requires_capture` (servers before manual capture: 0).
    #[serde(default)]
    pub amount_capturable: i64,
    /// What was charged (servers before manual capture do not send it: 0).
    #[serde(default)]
    pub amount_captured: i64,
    /// The sum of succeeded refunds.
    pub amount_refunded: i64,
    /// The amount of its open and lost disputes (servers before disputes do not send it: 0).
    #[serde(default)]
    pub amount_disputed: i64,
    pub payment_method: String,
    pub customer_id: Option<String>,
    pub description: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    pub provider_charge_id: Option<String>,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    #[serde(default)]
    pub cancellation_reason: Option<CancellationReason>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/payments`. Build it with [`CreatePayment::new`] and the setters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreatePayment {
    /// Minor units, 1 … 99 999 999.
    pub amount: i64,
    /// ISO 4217, any case.
    pub currency: String,
    /// A test token such as `pm_card_visa` (a test payment method of the simulator).
    pub payment_method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub customer_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// At most 50 keys of ≤ 40 characters, string values of ≤ 500.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_method: Option<CaptureMethod>,
}

impl CreatePayment {
    pub fn new(
        amount: i64,
        currency: impl Into<String>,
        payment_method: impl Into<String>,
    ) -> Self {
        Self {
            amount,
            currency: currency.into(),
            payment_method: payment_method.into(),
            customer_id: None,
            description: None,
            metadata: BTreeMap::new(),
            capture_method: None,
        }
    }

    pub fn customer_id(mut self, customer_id: impl Into<String>) -> Self {
        self.customer_id = Some(customer_id.into());
        self
    }

    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// `manual`: authorize now, capture later.
    pub fn capture_method(mut self, method: CaptureMethod) -> Self {
        self.capture_method = Some(method);
        self
    }
}

/// Filters and paging of `GET /v1/payments`. `limit` is the page size (1…100, server
/// default 10).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPayments {
    pub limit: Option<u32>,
    pub starting_after: Option<String>,
    pub status: Option<PaymentStatus>,
    pub customer_id: Option<String>,
}

impl ListParams for ListPayments {
    fn limit(&self) -> Option<u32> {
        self.limit
    }

    fn starting_after(&self) -> Option<&str> {
        self.starting_after.as_deref()
    }

    fn filters(&self) -> Vec<(&'static str, String)> {
        let status = self.status.map(|s| ("status", s.as_str().to_owned()));
        let customer = self.customer_id.clone().map(|c| ("customer_id", c));
        status.into_iter().chain(customer).collect()
    }
}

/// `POST /v1/payments/{id}/capture`: `amount` defaults to all of
/// `amount_capturable`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CapturePayment {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<i64>,
}

/// `POST /v1/payments/{id}/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CancelPayment {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cancellation_reason: Option<CancellationReason>,
}

impl Client {
    /// Creates a payment: 201 with the final payment (`succeeded`, `requires_capture`, or
    /// `failed` for a decline), 202 with a `processing` one when the provider's outcome is
    /// not known yet. Sent with a new `Idempotency-Key` (or yours), the same on every retry.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use std::time::Duration;
    /// use payments_client::CreatePayment;
    ///
    /// let payment = client
    ///     .create_payment(&CreatePayment::new(2000, "usd", "pm_card_visa").customer_id("cus_1"))
    ///     .idempotency_key("order-1001")              // optional: a new UUIDv4 otherwise
    ///     .wait_until_final(Duration::from_secs(60))  // optional: wait out a 202
    ///     .await?;
    /// println!("{} {:?}", payment.id, payment.status);
    /// # Ok(()) }
    /// ```
    pub fn create_payment(&self, params: &CreatePayment) -> Mutation<Payment> {
        self.mutation(self.url(&["payments"]), params)
    }

    /// The payment as it is now (404 `not_found` for another merchant's).
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let payment = client.get_payment("pay_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f").await?;
    /// # Ok(()) }
    /// ```
    pub async fn get_payment(&self, id: &str) -> Result<Payment, Error> {
        self.get(self.url(&["payments", id])).await
    }

    /// One page of payments, newest first.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{ListPayments, PaymentStatus};
    ///
    /// let page = client
    ///     .list_payments(&ListPayments { status: Some(PaymentStatus::Succeeded), limit: Some(20), ..Default::default() })
    ///     .await?;
    /// for payment in &page.data { println!("{}", payment.id) }
    /// # Ok(()) }
    /// ```
    pub async fn list_payments(&self, params: &ListPayments) -> Result<Page<Payment>, Error> {
        self.list(&["payments"], params).await
    }

    /// Every payment that matches, newest first, fetching page after page (`limit` is the
    /// page size) from `starting_after` on.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{ListPayments, TryStreamExt};
    ///
    /// let mut payments = client.stream_payments(ListPayments { customer_id: Some("cus_1".into()), ..Default::default() });
    /// while let Some(payment) = payments.try_next().await? {
    ///     println!("{} {}", payment.id, payment.amount);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn stream_payments(
        &self,
        params: ListPayments,
    ) -> BoxStream<'static, Result<Payment, Error>> {
        self.list_all(&["payments"], &params)
    }

    /// Captures an authorized (`requires_capture`) payment: 200 with the payment
    /// `succeeded`; 409 `payment_not_capturable`, 422 `amount_exceeds_capturable`.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::CapturePayment;
    ///
    /// let payment = client.capture_payment("pay_…", &CapturePayment { amount: Some(1500) }).await?;
    /// # Ok(()) }
    /// ```
    pub fn capture_payment(&self, id: &str, params: &CapturePayment) -> Mutation<Payment> {
        self.mutation(self.url(&["payments", id, "capture"]), params)
    }

    /// Cancels an authorized (`requires_capture`) payment: 200 with the payment
    /// `canceled`; 409 `payment_not_cancelable`.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{CancelPayment, CancellationReason};
    ///
    /// let params = CancelPayment { cancellation_reason: Some(CancellationReason::RequestedByCustomer) };
    /// let payment = client.cancel_payment("pay_…", &params).await?;
    /// # Ok(()) }
    /// ```
    pub fn cancel_payment(&self, id: &str, params: &CancelPayment) -> Mutation<Payment> {
        self.mutation(self.url(&["payments", id, "cancel"]), params)
    }
}
