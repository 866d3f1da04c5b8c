//! What the running service holds and hands to every flow: the pool, the provider, the
//! settings and the in-memory registries. It sits below the flows (payments, refunds,
//! webhooks) and above the layers they use; `startup` only builds it.

use std::sync::Arc;

use crate::auth::ApiKeyCache;
use crate::config::Settings;
use crate::db::Db;
use crate::db::payments::PaymentWrites;
use crate::idempotency::{FinalAnswers, InFlight};
use crate::provider::PaymentProvider;
use crate::rate_limit::RateLimits;
use crate::shutdown::Shutdown;
use crate::tls::ClientTls;

/// Shared by every worker and background task.
#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub provider: Arc<dyn PaymentProvider>,
    pub settings: Arc<Settings>,
    pub inflight: InFlight,
    pub api_keys: ApiKeyCache,
    /// `RATE_LIMIT_PER_SECOND`, checked right after authentication.
    pub rate_limits: RateLimits,
    pub final_answers: FinalAnswers,
    /// Background tasks spawn through this and stop when it fires (see [`Shutdown`]).
    pub shutdown: Shutdown,
    /// How new payments are written: group-committed on PostgreSQL, alone on SQLite.
    pub payment_writes: PaymentWrites,
    /// How webhook deliveries verify `https` endpoints.
    pub tls: ClientTls,
}

/// The caller's request id if it is a sane token, else a new one; set on every request by
/// the server's middleware, read by flows that record which request made a change.
#[derive(Clone, Debug)]
pub struct RequestId(pub actix_web::http::header::HeaderValue);

impl RequestId {
    /// The id as text (visible ASCII, checked when it was taken or made).
    pub fn as_str(&self) -> &str {
        self.0.to_str().unwrap_or_default()
    }
}
