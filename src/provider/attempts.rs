//! The one retry loop of every provider call: up to `max_attempts` attempts, always with the
//! same idempotency key (the caller's), exponential backoff with full jitter between them.
//! The HTTP provider's attempts are requests; the in-process simulator's are its latency,
//! which times out as a request would (`PROVIDER_TIMEOUT_MS`).

use std::future::Future;
use std::time::Duration;

use super::protocol::{OutcomeUnknown, ProviderError};

/// How one attempt ended.
pub enum Attempt<T> {
    Done(T),
    /// Worth another attempt: the request may not have arrived, or the provider failed.
    Retry(String),
    /// Another attempt would get the same answer.
    GiveUp(String),
    /// A 4xx: the provider refused the operation, final, nothing moved.
    Refused(String),
}

/// Backoff before attempt `n + 1`: uniformly random in [0, min(cap, base · 2ⁿ)].
fn backoff(attempt: u32) -> Duration {
    const BASE_MS: u64 = 100;
    const CAP_MS: u64 = 2_000;
    let ceiling = BASE_MS.saturating_mul(1u64 << attempt.min(16)).min(CAP_MS);
    let random = (uuid::Uuid::new_v4().as_u128() >> 64) as u64;
    Duration::from_millis(random % (ceiling + 1))
}

/// Runs `attempt` until it is done, refused or given up, or `max_attempts` (at least one)
/// have failed; the outcome of a call none of whose attempts was answered is unknown.
pub async fn attempts<T, Fut>(
    what: &str,
    max_attempts: u32,
    mut attempt: impl FnMut() -> Fut,
) -> Result<T, ProviderError>
where
    Fut: Future<Output = Attempt<T>>,
{
    let mut last = String::new();
    for n in 0..max_attempts.max(1) {
        if n > 0 {
            actix_web::rt::time::sleep(backoff(n - 1)).await;
        }
        match attempt().await {
            Attempt::Done(value) => return Ok(value),
            Attempt::Retry(why) => {
                tracing::warn!(path = what, attempt = n + 1, reason = %why, "provider attempt failed");
                last = why;
            }
            Attempt::GiveUp(why) => {
                tracing::error!(path = what, reason = %why, "provider call failed");
                return Err(OutcomeUnknown(why).into());
            }
            Attempt::Refused(why) => return Err(ProviderError::Refused(why)),
        }
    }
    Err(OutcomeUnknown(last).into())
}

/// The reason an attempt that took `timeout` without an answer gives.
pub fn no_answer_within(timeout: Duration) -> String {
    format!("no answer within {} ms", timeout.as_millis())
}

#[cfg(test)]
mod tests {
    use super::backoff;
    use std::time::Duration;

    #[test]
    fn backoff_is_jittered_under_an_exponential_cap() {
        for attempt in 0..10 {
            let cap = Duration::from_millis((100u64 << attempt).min(2000));
            for _ in 0..50 {
                assert!(backoff(attempt) <= cap);
            }
        }
        let samples: std::collections::HashSet<Duration> = (0..50).map(|_| backoff(5)).collect();
        assert!(samples.len() > 1, "full jitter varies");
    }
}
