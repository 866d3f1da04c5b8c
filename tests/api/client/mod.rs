//! The Rust client's (`payments-client`) tests: the retry rules against a scripted stub,
//! the typed API and webhook verification against the real service, and the thousand
//! payments through a lossy network and a restart.

mod api;
mod chaos;
mod proxy;
mod retries;
mod stub;
mod webhooks;
