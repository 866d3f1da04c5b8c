//! The port to the payment provider. The service only sees [`PaymentProvider`]; behind it
//! sit the in-process simulator (the default) and, with `PROVIDER_URL`, the HTTP client.

mod http;
pub mod sim_server;
mod simulator;
pub mod webhook_delivery;

pub use http::HttpProvider;
pub use simulator::{InProcessProvider, Simulator};
pub use webhook_delivery::{RetryPolicy, WebhookDelivery};

use futures_util::future::LocalBoxFuture;
use serde::{Deserialize, Serialize};

/// `POST /v1/charges` body. `reference` is our payment id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChargeRequest {
    pub amount: i64,
    pub currency: String,
    pub payment_method: String,
    pub reference: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderStatus {
    Succeeded,
    Failed,
    /// Finished later by a signed webhook.
    Pending,
}

/// The provider's answer to a charge: what it did with the money.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    pub id: String,
    pub status: ProviderStatus,
    pub amount: i64,
    pub currency: String,
    pub reference: String,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
}

/// `POST /v1/refunds` body. `reference` is our refund id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundRequest {
    /// The provider's charge being refunded (`ch_…`).
    pub charge: String,
    pub amount: i64,
    pub reference: String,
}

/// The provider's answer to a refund (`pr_…`): whether the money went back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderRefund {
    pub id: String,
    pub status: ProviderStatus,
    pub amount: i64,
    pub charge: String,
    pub reference: String,
    pub failure_code: Option<String>,
}

/// A timeout, a broken connection or a 5xx: the charge may or may not have happened.
/// The only safe move is to ask again later with the same idempotency key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("provider outcome unknown: {0}")]
pub struct OutcomeUnknown(pub String);

pub trait PaymentProvider: Send + Sync + 'static {
    /// Charges at most once per `idempotency_key`: the same key again returns the first
    /// result and moves no money.
    fn create_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a ChargeRequest,
    ) -> LocalBoxFuture<'a, Result<Charge, OutcomeUnknown>>;

    /// Refunds at most once per `idempotency_key` (our refund id): the same key again
    /// returns the first result and moves no money.
    fn create_refund<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a RefundRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderRefund, OutcomeUnknown>>;
}
