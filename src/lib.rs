//! `payments-api`: a payment API that charges at most once per request, however often the
//! request is sent, by however many clients, through whatever crash or lost response.

pub mod api_keys;
pub mod auth;
pub mod body;
pub mod config;
pub mod connections;
pub mod dashboard;
pub mod db;
pub mod deliveries;
pub mod demo;
pub mod disputes;
pub mod domain;
pub mod error;
pub mod events;
pub mod idempotency;
pub mod inbound;
pub mod ledger;
pub mod metrics;
pub mod operations;
pub mod payments;
pub mod payouts;
pub mod provider;
pub mod rate_limit;
pub mod reconcile;
pub mod refunds;
pub mod routes;
pub mod shutdown;
pub mod signing;
pub mod startup;
pub mod state;
pub mod telemetry;
pub mod tls;
pub mod webhook_endpoints;

/// The OpenAPI document, built from the route table.
pub use routes::openapi;
