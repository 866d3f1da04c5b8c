//! Per-merchant request quotas (`RATE_LIMIT_PER_SECOND`, CONTRACT §11).
//!
//! Checked by the [`Authenticated`](crate::routes::authenticate::Authenticated) extractor right after the
//! key is known, so every merchant route is limited and nothing else is: health, metrics,
//! docs and provider webhooks never authenticate as a merchant. A refused request has not
//! read its body nor touched an idempotency key: it stores nothing, and the same key may be
//! sent again later.
//!
//! The quota is per instance (no shared state, no extra database round trip): N instances
//! let a merchant through up to N times the setting.

use std::num::NonZeroU32;
use std::sync::Arc;

use governor::clock::Clock;
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::db::merchants::Merchant;
use crate::error::ApiError;

/// `None` = unlimited (`RATE_LIMIT_PER_SECOND` unset or 0).
#[derive(Clone, Default)]
pub struct RateLimits {
    // Keyed by merchant id. Merchants are created by operators only, so the key set is
    // bounded and the states are never pruned.
    limiter: Option<Arc<DefaultKeyedRateLimiter<String>>>,
}

impl RateLimits {
    /// `per_second` requests a second per merchant, with a burst of the same size (GCRA:
    /// a full bucket of `per_second`, refilled one request every `1/per_second` s).
    pub fn new(per_second: Option<u32>) -> Self {
        let limiter = per_second
            .and_then(NonZeroU32::new)
            .map(|n| Arc::new(DefaultKeyedRateLimiter::keyed(Quota::per_second(n))));
        Self { limiter }
    }

    /// Spends one request of `merchant`'s quota, or refuses with 429 `rate_limited` and
    /// the whole seconds (at least 1) until the next request would be allowed.
    pub fn check(&self, merchant: &Merchant) -> Result<(), ApiError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        limiter.check_key(&merchant.id).map_err(|not_until| {
            crate::metrics::rate_limited();
            let wait = not_until.wait_time_from(limiter.clock().now());
            ApiError::RateLimited {
                retry_after_secs: retry_after_secs(wait),
            }
        })
    }
}

/// `Retry-After` counts whole seconds: round up, never 0 (0 would invite an instant retry
/// that is refused again).
fn retry_after_secs(wait: std::time::Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn merchant(id: &str) -> Merchant {
        Merchant {
            id: id.to_owned(),
            name: id.to_owned(),
        }
    }

    #[test]
    fn a_full_burst_passes_then_the_next_is_refused() {
        let limits = RateLimits::new(Some(3));
        let a = merchant("mer_a");
        for _ in 0..3 {
            limits.check(&a).expect("within the burst");
        }
        match limits.check(&a) {
            Err(ApiError::RateLimited { retry_after_secs }) => assert_eq!(retry_after_secs, 1),
            other => panic!("expected rate_limited, got {other:?}"),
        }
        // Another merchant has its own bucket.
        limits.check(&merchant("mer_b")).expect("independent");
    }

    #[test]
    fn unset_or_zero_is_unlimited() {
        for setting in [None, Some(0)] {
            let limits = RateLimits::new(setting);
            let a = merchant("mer_a");
            for _ in 0..10_000 {
                limits.check(&a).expect("no limit");
            }
        }
    }

    #[test]
    fn retry_after_is_whole_seconds_at_least_one() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1000)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001)), 2);
    }
}
