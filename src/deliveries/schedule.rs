//! When a delivery is tried again, and with which secrets it is signed.

use std::time::Duration;

use super::send;
use crate::db::deliveries::NextStep;
use crate::domain::Timestamp;
use crate::signing::WebhookSecret;

/// Where a delivery goes after attempt number `attempts_made` (1-based) ended at `ended`.
/// A schedule of N delays means N + 1 attempts; each delay is stretched by `jitter`
/// (0.8 … 1.2) and never shorter than the receiver's `Retry-After`.
pub fn next_step(
    schedule: &[Duration],
    attempts_made: usize,
    attempt: &send::Attempt,
    ended: Timestamp,
    jitter: f64,
) -> NextStep {
    if attempt.succeeded() {
        return NextStep::Succeeded;
    }
    if attempt.gone() {
        return NextStep::Failed;
    }
    let Some(delay) = attempts_made.checked_sub(1).and_then(|i| schedule.get(i)) else {
        return NextStep::Failed;
    };
    let mut wait = delay.mul_f64(jitter.clamp(0.8, 1.2));
    if let Some(asked) = attempt.retry_after {
        wait = wait.max(asked);
    }
    let wait = chrono::TimeDelta::from_std(wait).unwrap_or(chrono::TimeDelta::MAX);
    NextStep::RetryAt(ended.checked_add_signed(wait).unwrap_or(Timestamp::MAX))
}

/// A uniform factor in 0.8 … 1.2 (±20 %), from the OS generator through UUIDv4.
pub(super) fn jitter() -> f64 {
    let r = (uuid::Uuid::new_v4().as_u128() % 1_000_000) as f64 / 1_000_000.0;
    0.8 + 0.4 * r
}

/// The secrets a delivery is signed with now: the endpoint's, and during a rotation's
/// overlap the previous one too (new first).
pub fn signing_secrets(
    current: &str,
    previous: Option<&str>,
    previous_until: Option<Timestamp>,
    now: Timestamp,
) -> Vec<WebhookSecret> {
    let previous = previous.filter(|_| previous_until.is_some_and(|until| until > now));
    std::iter::once(current)
        .chain(previous)
        .filter_map(|s| WebhookSecret::parse(s).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(status: Option<u16>, retry_after: Option<Duration>) -> send::Attempt {
        send::Attempt {
            status_code: status,
            error: None,
            retry_after,
            duration: Duration::from_millis(5),
        }
    }

    fn at(secs: i64) -> Timestamp {
        chrono::DateTime::from_timestamp(1_700_000_000 + secs, 0)
            .unwrap()
            .naive_utc()
    }

    #[test]
    fn n_delays_mean_n_plus_one_attempts_counted_from_the_end_of_the_last() {
        let schedule = [Duration::from_secs(5), Duration::from_secs(300)];
        let failed = attempt(Some(500), None);
        assert_eq!(
            next_step(&schedule, 1, &failed, at(0), 1.0),
            NextStep::RetryAt(at(5))
        );
        assert_eq!(
            next_step(&schedule, 2, &failed, at(10), 1.0),
            NextStep::RetryAt(at(310))
        );
        assert_eq!(
            next_step(&schedule, 3, &failed, at(400), 1.0),
            NextStep::Failed
        );
        assert_eq!(next_step(&[], 1, &failed, at(0), 1.0), NextStep::Failed);
        assert_eq!(
            next_step(&schedule, 3, &attempt(Some(204), None), at(0), 1.0),
            NextStep::Succeeded
        );
    }

    #[test]
    fn jitter_stays_within_20_percent_and_retry_after_is_a_floor() {
        let schedule = [Duration::from_secs(100)];
        let failed = attempt(None, None);
        assert_eq!(
            next_step(&schedule, 1, &failed, at(0), 0.8),
            NextStep::RetryAt(at(80))
        );
        assert_eq!(
            next_step(&schedule, 1, &failed, at(0), 1.2),
            NextStep::RetryAt(at(120))
        );
        assert_eq!(
            next_step(&schedule, 1, &failed, at(0), 5.0),
            NextStep::RetryAt(at(120))
        );
        let busy = attempt(Some(503), Some(Duration::from_secs(600)));
        assert_eq!(
            next_step(&schedule, 1, &busy, at(0), 1.0),
            NextStep::RetryAt(at(600))
        );
        let short = attempt(Some(429), Some(Duration::from_secs(1)));
        assert_eq!(
            next_step(&schedule, 1, &short, at(0), 1.0),
            NextStep::RetryAt(at(100))
        );
        for _ in 0..1000 {
            assert!((0.8..=1.2).contains(&jitter()));
        }
    }

    #[test]
    fn a_410_fails_the_delivery_at_once() {
        let schedule = [Duration::from_secs(5); 7];
        assert_eq!(
            next_step(&schedule, 1, &attempt(Some(410), None), at(0), 1.0),
            NextStep::Failed
        );
    }

    #[test]
    fn the_previous_secret_signs_only_until_it_expires() {
        let (new, old) = (WebhookSecret::generate(), WebhookSecret::generate());
        assert_eq!(
            signing_secrets(&new, Some(&old), Some(at(10)), at(0)).len(),
            2
        );
        assert_eq!(
            signing_secrets(&new, Some(&old), Some(at(10)), at(10)).len(),
            1
        );
        assert_eq!(signing_secrets(&new, None, None, at(0)).len(), 1);
    }
}
