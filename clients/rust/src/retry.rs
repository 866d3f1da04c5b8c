//! When and how long to wait before sending a call again.

use std::time::{Duration, SystemTime};

/// How a call is retried: up to `max_attempts` requests and `max_elapsed` in total, with
/// exponential backoff and full jitter between them (a random wait between zero and
/// `min(max_delay, initial_delay × 2^(n−1))` before the n-th retry), and never sooner than
/// the server's `Retry-After`. When the next wait would end past `max_elapsed`, the call
/// gives up instead of retrying early.
///
/// Retried: connection errors, timeouts, a connection that broke before the answer, 409
/// `idempotency_key_in_use`, 429 and every 5xx. Nothing else: another 4xx is an answer.
///
/// ```
/// use std::time::Duration;
/// use payments_client::RetryPolicy;
///
/// let policy = RetryPolicy::default()
///     .max_attempts(10)
///     .max_elapsed(Duration::from_secs(120))
///     .initial_delay(Duration::from_millis(200));
/// assert_eq!(policy.get_max_attempts(), 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    max_elapsed: Duration,
    initial_delay: Duration,
    max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 8 attempts within 60 s, backoff from 250 ms up to 10 s.
    fn default() -> Self {
        Self {
            max_attempts: 8,
            max_elapsed: Duration::from_secs(60),
            initial_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// No retries: one request per call.
    pub fn never() -> Self {
        Self::default().max_attempts(1)
    }

    /// Requests per call, the first included (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The total time a call may take, retries and waits included.
    pub fn max_elapsed(mut self, elapsed: Duration) -> Self {
        self.max_elapsed = elapsed;
        self
    }

    /// The backoff's first ceiling.
    pub fn initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// The backoff's largest ceiling (a `Retry-After` may still ask for longer).
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    pub fn get_max_attempts(&self) -> u32 {
        self.max_attempts
    }

    pub fn get_max_elapsed(&self) -> Duration {
        self.max_elapsed
    }

    /// The ceiling of the wait before retry number `retry` (1 = the first retry).
    pub(crate) fn ceiling(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.saturating_sub(1).min(30));
        self.initial_delay
            .saturating_mul(factor)
            .min(self.max_delay)
    }

    /// The wait before retry number `retry`: full jitter under the ceiling, and at least
    /// what the server asked for.
    pub(crate) fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let jittered = self.ceiling(retry).mul_f64(random_fraction());
        jittered.max(retry_after.unwrap_or(Duration::ZERO))
    }
}

/// A uniform number in `[0, 1)`, from the OS generator (through a UUIDv4's random bits).
fn random_fraction() -> f64 {
    let bits = (uuid::Uuid::new_v4().as_u128() >> 75) as u64; // 53 random bits
    bits as f64 / (1u64 << 53) as f64
}

/// `Retry-After` as delay-seconds or an HTTP date; a date in the past means now.
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let at = SystemTime::from(date.with_timezone(&chrono::Utc));
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_doubles_up_to_the_maximum() {
        let policy = RetryPolicy::default()
            .initial_delay(Duration::from_millis(100))
            .max_delay(Duration::from_millis(1000));
        let ceilings: Vec<_> = (1..=6).map(|n| policy.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(policy.ceiling(500), Duration::from_millis(1000));
    }

    #[test]
    fn full_jitter_stays_under_the_ceiling_and_spreads() {
        let policy = RetryPolicy::default()
            .initial_delay(Duration::from_millis(1000))
            .max_delay(Duration::from_millis(1000));
        let delays: Vec<_> = (0..200).map(|_| policy.delay(1, None)).collect();
        assert!(delays.iter().all(|d| *d < Duration::from_millis(1000)));
        assert!(delays.iter().any(|d| *d < Duration::from_millis(250)));
        assert!(delays.iter().any(|d| *d > Duration::from_millis(750)));
    }

    #[test]
    fn retry_after_is_a_lower_bound() {
        let policy = RetryPolicy::default().initial_delay(Duration::from_millis(10));
        for _ in 0..50 {
            assert!(policy.delay(1, Some(Duration::from_secs(2))) >= Duration::from_secs(2));
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06T08:49:37Z
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    #[test]
    fn at_least_one_attempt() {
        assert_eq!(RetryPolicy::default().max_attempts(0).get_max_attempts(), 1);
        assert_eq!(RetryPolicy::never().get_max_attempts(), 1);
    }
}
