//! A Rust client for `payments-api` that makes the safe way to call it the easy way.
//!
//! - **An idempotency key on every mutating call.** Each `POST` gets a new UUIDv4
//!   `Idempotency-Key` unless you give one ([`Mutation::idempotency_key`]), and every retry
//!   of that call sends the same key and the same bytes: however often it is sent, the
//!   server runs it once and charges at most once.
//! - **Retries done right.** Connection errors, timeouts, a connection that broke before
//!   the answer, 409 `idempotency_key_in_use`, 429 and 5xx are retried with exponential
//!   backoff and full jitter, within a [`RetryPolicy`]'s attempts and total time, and never
//!   sooner than `Retry-After`. Other 4xx are answers and come back as a typed
//!   [`Problem`] at once.
//! - **Waiting out a 202.** [`Mutation::wait_until_final`] keeps asking with the same key
//!   until the provider's outcome is in.
//! - **Webhooks.** [`WebhookVerifier`] checks a delivery (Standard Webhooks v1) and returns
//!   the typed [`Event`].
//!
//! ```no_run
//! use std::time::Duration;
//! use payments_client::{Client, CreatePayment, ErrorCode};
//!
//! # async fn run() -> Result<(), payments_client::Error> {
//! let client = Client::new("http://127.0.0.1:8080", "sk_test_…")?;
//! match client
//!     .create_payment(&CreatePayment::new(2000, "usd", "pm_card_visa"))
//!     .idempotency_key("order-1001")
//!     .wait_until_final(Duration::from_secs(60))
//!     .await
//! {
//!     Ok(payment) => println!("{} {:?}", payment.id, payment.status),
//!     Err(e) if e.code() == Some(&ErrorCode::IdempotencyKeyReused) => eprintln!("order-1001 was another payment"),
//!     // Outcome unknown: sending the same call with `e.idempotency_key()` later learns it.
//!     Err(e) => eprintln!("{e}; retry later with key {:?}", e.idempotency_key()),
//! }
//! # Ok(()) }
//! ```
//!
//! Every operation of the contract has a method on [`Client`]: payments
//! ([`Client::create_payment`], [`Client::get_payment`], [`Client::list_payments`],
//! [`Client::stream_payments`], [`Client::capture_payment`], [`Client::cancel_payment`]),
//! refunds ([`Client::create_refund`], [`Client::list_refunds`],
//! [`Client::stream_refunds`]), the balance and its transactions ([`Client::get_balance`],
//! [`Client::get_balance_transaction`], [`Client::list_balance_transactions`],
//! [`Client::stream_balance_transactions`]), payouts ([`Client::create_payout`],
//! [`Client::get_payout`], [`Client::list_payouts`], [`Client::stream_payouts`]), disputes
//! ([`Client::get_dispute`], [`Client::list_disputes`], [`Client::stream_disputes`],
//! [`Client::update_dispute`], [`Client::close_dispute`]), events
//! ([`Client::get_event`], [`Client::list_events`], [`Client::stream_events`],
//! [`Client::events_feed`], [`Client::stream_events_feed`]) and
//! webhook endpoints ([`Client::create_webhook_endpoint`] and the rest). Lists come one
//! page at a time (`list_*`) or as a [`Stream`] over every page
//! (`stream_*`).
//!
//! The client is async on tokio (any runtime flavour) and `Send + Sync`.
//!
//! **https** works out of the box: `https://` base URLs go over TLS (rustls on the ring
//! crypto provider: no OpenSSL, no C toolchain), verified against Mozilla's roots compiled
//! into the crate (webpki-roots), not the machine's certificate store. A service behind a
//! private CA needs that CA's certificate, as PEM bytes ([`ClientBuilder::add_ca_pem`]) or a
//! file ([`ClientBuilder::add_ca_file`]):
//!
//! ```no_run
//! let client = payments_client::Client::builder("https://payments.internal", "sk_live_…")
//!     .add_ca_file("/etc/payments/ca.pem")
//!     .build()?;
//! # Ok::<(), payments_client::Error>(())
//! ```
//!
//! `http://` stays available for local runs.

mod balance;
mod builder;
mod client;
mod disputes;
mod error;
mod events;
mod list;
mod mutation;
mod payments;
mod payouts;
mod refunds;
mod request;
mod retry;
mod tls;
mod webhook;
mod webhook_endpoints;

pub use balance::{
    Balance, BalanceTransaction, BalanceTransactionStatus, BalanceTransactionType,
    ListBalanceTransactions, Money,
};
pub use builder::ClientBuilder;
pub use client::Client;
pub use disputes::{Dispute, DisputeEvidence, DisputeStatus, ListDisputes, UpdateDispute};
pub use error::{Error, ErrorCode, ErrorKind, Problem};
pub use events::{Event, EventData, EventObject, EventRequest, EventType, ListEvents};
pub use list::{HasId, Page};
pub use mutation::{Awaitable, Mutation};
pub use payments::{
    CancelPayment, CancellationReason, CaptureMethod, CapturePayment, CreatePayment, ListPayments,
    Payment, PaymentStatus,
};
pub use payouts::{CreatePayout, ListPayouts, Payout, PayoutStatus};
pub use refunds::{CreateRefund, ListRefunds, Refund, RefundReason, RefundStatus};
pub use request::Response;
pub use retry::RetryPolicy;
pub use webhook::{DEFAULT_TOLERANCE, WebhookError, WebhookHeaders, WebhookVerifier};
pub use webhook_endpoints::{
    CreateWebhookEndpoint, Deleted, DeliveryAttempt, DeliveryStatus, EndpointStatus,
    ListDeliveries, ListWebhookEndpoints, Queued, ReplayDeliveries, ReplayScope,
    RotateWebhookSecret, SigningSecret, TestDelivery, UpdateWebhookEndpoint, WebhookDelivery,
    WebhookEndpoint,
};

/// Stream helpers for the `stream_*` methods (`try_next`, `try_collect`, …).
pub use futures_util::{Stream, StreamExt, TryStreamExt};
