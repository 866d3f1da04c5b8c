//! One integration-test binary: every module starts the real server on port 0.
//! `cargo test` runs on SQLite; `TEST_DATABASE_URL=postgres://… cargo test` on PostgreSQL.

mod helpers;
mod idempotency;
mod ops;
mod payments;
mod recovery;
mod refunds;
mod schema;
mod validation;
mod webhooks;
