//! The Rust client's (`payments-client`) tests: the retry rules against a scripted stub,
//! the typed API (payments, refunds, the balance, payouts and disputes) and webhook
//! verification against the real service, and the thousand payments through a lossy
//! network and a restart.

mod api;
mod chaos;
mod disputes;
mod ledger;
mod proxy;
mod retries;
mod stub;
mod webhooks;
