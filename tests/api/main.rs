//! One integration-test binary: every module starts the real server on port 0. The service's
//! tests are the modules here; the Rust client's (`payments-client`) are under `client/`;
//! both use the one test-support tree, `support/`.
//! `cargo test` runs on SQLite; `TEST_DATABASE_URL=postgres://… cargo test` on PostgreSQL.

mod captures;
mod client;
mod dashboard;
mod deliveries;
mod disputes;
mod events;
mod group_commit;
mod hostile;
mod idempotency;
mod keys;
mod ledger;
mod ops;
mod payments;
mod payouts;
mod payouts_recovery;
mod pooler;
mod rate_limits;
mod reconcile;
mod recovery;
mod refunds;
mod schema;
mod support;
mod validation;
mod webhooks;
