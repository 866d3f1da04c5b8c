//! Per-merchant request quotas (`RATE_LIMIT_PER_SECOND`, docs/settings.md).
//!
//! Checked by the [`Authenticated`](crate::routes::authenticate::Authenticated) extractor right after the
//! key is known, so every merchant route is limited and nothing else is: health, metrics,
//! docs and provider webhooks never authenticate as a merchant. A refused request has not
//! read its body nor touched an idempotency key: it stores nothing, and the same key may be
//! sent again later.
//!
//! The quota is per instance (no shared state, no extra database round trip): N instances
//! let a merchant through up to N times the setting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::db::merchants::Merchant;
use crate::error::ApiError;

/// The merchants' quotas (`None` = unlimited: `RATE_LIMIT_PER_SECOND` unset or 0), and the
/// wrong keys tried at the dashboard's sign-in per client address.
#[derive(Clone, Default)]
pub struct RateLimits {
    limiter: Option<Arc<Limiter>>,
    wrong_keys: Arc<WrongKeys>,
}

/// Wrong keys allowed per second and client address when `RATE_LIMIT_PER_SECOND` is unset.
const WRONG_KEYS_PER_SECOND: u32 = 5;

/// Wrong keys per client address in the current second, on this instance.
struct WrongKeys {
    per_second: u32,
    /// Only the current second's addresses are kept.
    counts: Mutex<HashMap<std::net::IpAddr, (i64, u32)>>,
}

impl Default for WrongKeys {
    fn default() -> Self {
        Self {
            per_second: WRONG_KEYS_PER_SECOND,
            counts: Mutex::default(),
        }
    }
}

/// A bucket of `per_second` requests per merchant, refilled one request every
/// `1 / per_second` s (GCRA: each merchant's state is the time its bucket will be full again).
///
/// The clock is read under the lock that orders the checks, so a whole burst passes however
/// the requests interleave; `governor`, used before, read it first, and one of eight
/// requests checked at once on a full bucket was now and then refused.
struct Limiter {
    /// Time to refill one request.
    every: Duration,
    /// How far ahead of now a merchant's full-again time may be and still let a request in.
    slack: Duration,
    /// Keyed by merchant id. Merchants are created by operators only, so the key set is
    /// bounded and nothing is pruned.
    full_at: Mutex<HashMap<String, Instant>>,
}

impl Limiter {
    fn new(per_second: u32) -> Self {
        let every = Duration::from_secs(1) / per_second;
        Self {
            every,
            slack: every * (per_second - 1),
            full_at: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(wait)` when the merchant's bucket is empty: the wait until it holds one request.
    fn check(&self, merchant_id: &str) -> Result<(), Duration> {
        // A panic while holding the lock leaves at worst one merchant's time unwritten.
        let mut full_at = self.full_at.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let Some(at) = full_at.get_mut(merchant_id) else {
            // A merchant's first request: a full bucket, less this one.
            full_at.insert(merchant_id.to_owned(), now + self.every);
            return Ok(());
        };
        let full = (*at).max(now);
        let ahead = full - now;
        if ahead > self.slack {
            return Err(ahead - self.slack);
        }
        *at = full + self.every;
        Ok(())
    }
}

impl RateLimits {
    /// `per_second` requests a second per merchant, with a burst of the same size.
    pub fn new(per_second: Option<u32>) -> Self {
        let per_second = per_second.filter(|&n| n > 0);
        let limiter = per_second.map(|n| Arc::new(Limiter::new(n)));
        let wrong_keys = Arc::new(WrongKeys {
            per_second: per_second.unwrap_or(WRONG_KEYS_PER_SECOND),
            counts: Mutex::default(),
        });
        Self {
            limiter,
            wrong_keys,
        }
    }

    /// Whether `client` has tried more wrong API keys this second than allowed (the
    /// merchant quota, or 5 when unset), counting this one when `wrong`.
    pub fn wrong_keys_exceeded(&self, client: Option<std::net::IpAddr>, wrong: bool) -> bool {
        let Some(client) = client else {
            return false;
        };
        let second = chrono::Utc::now().timestamp();
        let mut counts = self
            .wrong_keys
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        counts.retain(|_, (at, _)| *at == second);
        let entry = counts.entry(client).or_insert((second, 0));
        if wrong {
            entry.1 = entry.1.saturating_add(1);
        }
        entry.1 > self.wrong_keys.per_second
    }

    /// Spends one request of `merchant`'s quota, or refuses with 429 `rate_limited` and
    /// the whole seconds (at least 1) until the next request would be allowed.
    pub fn check(&self, merchant: &Merchant) -> Result<(), ApiError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        limiter.check(&merchant.id).map_err(|wait| {
            crate::metrics::rate_limited();
            ApiError::RateLimited {
                retry_after_secs: retry_after_secs(wait),
            }
        })
    }
}

/// `Retry-After` counts whole seconds: round up, never 0 (0 would invite an instant retry
/// that is refused again).
fn retry_after_secs(wait: Duration) -> u64 {
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

    /// A full bucket lets a whole burst through however the requests interleave: many
    /// threads checking at once, each burst exactly the size of the bucket.
    #[test]
    fn a_burst_checked_at_once_from_many_threads_passes_whole() {
        const BURST: u32 = 8;
        for round in 0..300 {
            let limits = RateLimits::new(Some(BURST));
            let start = std::sync::Barrier::new(BURST as usize);
            let refused = std::thread::scope(|s| {
                let threads: Vec<_> = (0..BURST)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            limits.check(&merchant("mer_a")).is_err()
                        })
                    })
                    .collect();
                threads
                    .into_iter()
                    .map(|t| t.join().unwrap_or(true))
                    .filter(|&refused| refused)
                    .count()
            });
            assert_eq!(refused, 0, "round {round}: refused within a full burst");
            assert!(
                limits.check(&merchant("mer_a")).is_err(),
                "one more is refused"
            );
        }
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
