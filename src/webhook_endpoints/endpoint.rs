//! What every endpoint request shares.

/// Names these requests in the idempotency metrics.
pub(super) const RESOURCE: &str = "webhook_endpoint";
/// Events one replay looks at, at most (oldest first); replay again from a later `since`
/// for more.
pub const REPLAY_LIMIT: i64 = 10_000;

pub(super) fn no_such_endpoint() -> crate::error::ApiError {
    crate::error::ApiError::NotFound("no such webhook endpoint".to_owned())
}
