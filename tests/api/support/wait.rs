//! Waiting on what a test can observe instead of sleeping a fixed time: a bounded poll that
//! fails with what it waited for.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(10);

/// Polls `check` until it gives `Some`, and returns that; panics after `timeout` with
/// "timed out after …: waiting until `what`".
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: waiting until {what}"
        );
        actix_web::rt::time::sleep(POLL).await;
    }
}

/// Polls `condition` until it holds; panics after `timeout` naming `what`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(timeout, what, || {
        let holds = condition();
        async move { holds.await.then_some(()) }
    })
    .await
}

/// For what must *not* happen, which no wait can see: checks `condition` throughout
/// `window` (the time the test gives the service to do it wrongly) and at its end, and
/// panics as soon as it fails, naming `what`.
pub async fn assert_holds_for<F, Fut>(window: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + window;
    loop {
        let last = Instant::now() >= end;
        assert!(condition().await, "{what}: broken within {window:?}");
        if last {
            return;
        }
        actix_web::rt::time::sleep(
            POLL.max(window / 20)
                .min(end.saturating_duration_since(Instant::now())),
        )
        .await;
    }
}
