//! One test binary for the client (it links the service once): the retry rules against a
//! scripted stub, the typed API and webhook verification against the real service, and the
//! thousand payments through a lossy network and a restart.
//! `cargo test` runs on SQLite; `TEST_DATABASE_URL=postgres://… cargo test` on PostgreSQL.

mod api;
mod chaos;
mod harness;
mod proxy;
mod retries;
mod stub;
mod webhooks;
