//! One integration-test binary: every module starts the real server on port 0.
//! `cargo test` runs on SQLite; `TEST_DATABASE_URL=postgres://… cargo test` on PostgreSQL.

mod captures;
mod deliveries;
mod events;
mod group_commit;
mod helpers;
mod hostile;
mod idempotency;
mod keys;
mod ledger;
mod ops;
mod payments;
mod payouts;
mod pooler;
mod rate_limits;
mod recovery;
mod refunds;
mod schema;
mod validation;
mod webhooks;
