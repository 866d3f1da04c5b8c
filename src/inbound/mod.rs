//! Inbound: the webhooks the payment provider sends us, about the charges and refunds it
//! finished. Only signed events are trusted, and each event is applied exactly once.
//!
//! ```text
//! POST /v1/webhooks/provider ─▶ body ≤ 64 KiB ─▶ verify signature on the raw bytes (401)
//!   ─▶ parse the event ─▶ one transaction: INSERT webhook_events(id) ; apply the effect
//!        │                                  (UPDATE payments … WHERE status='processing')
//!        └─ unique violation ─▶ rolled back ─▶ same body hash? 200 duplicate : 409 conflict
//! ```
//!
//! Not to be confused with the other webhooks: `webhook_endpoints/` are merchants' endpoints,
//! `deliveries/` sends our events to them, and `provider::sim::webhooks` is the simulated
//! provider's sender. The route is `routes::inbound`; the event ids seen are kept in the
//! `webhook_events` table (`db::webhook_events`).

mod apply;
mod deferred;
mod event;
mod receive;
mod retention;

pub use crate::signing::{SignedHeaders, WebhookSecret, sign};
pub use deferred::apply_deferred_disputes;
pub(crate) use deferred::{apply_kept_of_captured, dispute_kept};
pub use receive::{Receipt, receive_provider_event};
pub use retention::{
    PRUNE_BATCH, PRUNE_INTERVAL, RETENTION, prune_expired_events, spawn_retention_task,
};
