//! `payments-api`: a payment API that charges at most once per request, however often the
//! request is sent, by however many clients, through whatever crash or lost response.

pub mod auth;
pub mod config;
pub mod db;
pub mod domain;
pub mod error;
pub mod idempotency;
pub mod metrics;
pub mod openapi;
pub mod payments;
pub mod provider;
pub mod refunds;
pub mod routes;
pub mod shutdown;
pub mod startup;
pub mod telemetry;
pub mod webhooks;
