//! Per-merchant rate limits (CONTRACT §11): 429 `rate_limited` with `Retry-After` before
//! anything is stored; merchants limited independently; operational routes never limited.
//!
//! The quota is a GCRA bucket of `RATE_LIMIT_PER_SECOND` requests, refilled one request
//! every `1 / RATE_LIMIT_PER_SECOND` s. Over a burst that takes `elapsed` from its first
//! request sent to its last answer, a full bucket lets through at least its size and at
//! most its size plus `floor(elapsed × rate)` refills: the bounds asserted below.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use payments_api::db::{merchants, payments as payment_rows};
use payments_api::inbound::{WebhookSecret, sign};
use serde_json::json;

use crate::support::{TEST_WEBHOOK_SECRET, TestApp, TestResponse, spawn_app_with, visa};

/// Asserts a well-formed 429 and returns its `Retry-After` seconds.
fn assert_rate_limited(response: &TestResponse) -> u64 {
    response.assert_problem(429, "rate_limited");
    let retry_after: u64 = response
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("whole seconds");
    assert!(retry_after >= 1, "{retry_after}");
    retry_after
}

/// The most a full bucket of `rate` lets through during `elapsed`.
fn most_allowed(rate: u32, elapsed: Duration) -> usize {
    rate as usize + (elapsed.as_secs_f64() * f64::from(rate)).floor() as usize
}

async fn payment_rows_of(app: &TestApp, merchant: &str) -> i64 {
    let name = merchant.to_owned();
    app.state
        .db
        .run(move |conn| {
            let merchant =
                merchants::find_by_name(conn, &name)?.ok_or(diesel::result::Error::NotFound)?;
            payment_rows::count_for_merchant(conn, &merchant.id)
        })
        .await
        .expect("count payments")
}

fn rate_limited_total(metrics: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("rate_limited_requests_total "))
        .and_then(|v| v.trim().parse().ok())
        .expect("rate_limited_requests_total on /metrics")
}

/// Sends GETs with `key` until one is refused; panics if none is within `max`.
async fn exhaust(app: &TestApp, key: &str, max: usize) -> usize {
    for sent in 1..=max {
        let response = app.get_as("/v1/payments", key).await;
        if response.status == 429 {
            assert_rate_limited(&response);
            return sent;
        }
        assert_eq!(response.status, 200, "{}", response.text());
    }
    panic!("no 429 after {max} requests");
}

#[actix_web::test]
async fn a_burst_over_the_limit_is_refused_with_429_and_stores_nothing() {
    const RATE: u32 = 5;
    let app = spawn_app_with(|s| s.rate_limit_per_second = Some(RATE)).await;
    let before = rate_limited_total(&app.get("/metrics").await.text());
    // Authenticate once so the burst is not spread out by key lookups, then let the bucket
    // fill again (it refills in 1/RATE s; a whole second leaves margin).
    assert_eq!(app.get("/v1/payments").await.status, 200);
    actix_web::rt::time::sleep(Duration::from_secs(1)).await;

    let started = Instant::now();
    let responses = join_all((0..30).map(|i| {
        let app = &app;
        async move { app.post_payment(&format!("burst-{i}"), &visa(900)).await }
    }))
    .await;
    let elapsed = started.elapsed();

    let created = responses.iter().filter(|r| r.status == 201).count();
    let limited: Vec<&TestResponse> = responses.iter().filter(|r| r.status == 429).collect();
    assert_eq!(created + limited.len(), 30, "only 201 or 429");
    assert!(
        (RATE as usize..=most_allowed(RATE, elapsed)).contains(&created),
        "{created} created in {elapsed:?}"
    );
    for response in &limited {
        assert_rate_limited(response);
    }
    // Nothing of a refused request was stored or charged.
    assert_eq!(app.payment_rows().await, created as i64);
    assert_eq!(app.charges(), created);
    let after = rate_limited_total(&app.get("/metrics").await.text());
    assert!(after - before >= limited.len() as u64, "{before} → {after}");

    // A refused request is not remembered: once the bucket refills, the same
    // Idempotency-Key creates its payment.
    let refused = (0..30)
        .find(|i| responses[*i].status == 429)
        .expect("a refused request");
    let key = format!("burst-{refused}");
    let deadline = Instant::now() + Duration::from_secs(5);
    let retried = loop {
        let response = app.post_payment(&key, &visa(900)).await;
        if response.status != 429 {
            break response;
        }
        let wait = assert_rate_limited(&response);
        assert!(Instant::now() < deadline, "still limited");
        assert!(wait <= 1, "Retry-After {wait} for a 5/s quota");
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(retried.status, 201, "{}", retried.text());
    assert_eq!(retried.header("idempotent-replayed"), None);
    assert_eq!(app.charges(), created + 1);
}

#[actix_web::test]
async fn merchants_are_limited_independently() {
    const RATE: u32 = 2;
    let app = spawn_app_with(|s| s.rate_limit_per_second = Some(RATE)).await;
    let other = app.create_merchant("other").await;
    let sent = exhaust(&app, &app.api_key.clone(), 50).await;
    assert!(sent > RATE as usize, "the first {RATE} pass");
    // The other merchant's bucket is untouched and full: a whole burst passes, whatever
    // the timing.
    let responses = join_all((0..RATE).map(|i| {
        let (app, other) = (&app, &other);
        async move {
            let key = format!("other-{i}");
            app.post_json("/v1/payments", other, Some(&key), &visa(300))
                .await
        }
    }))
    .await;
    for response in &responses {
        assert_eq!(response.status, 201, "{}", response.text());
    }
    assert_eq!(payment_rows_of(&app, "other").await, i64::from(RATE));
    assert_eq!(app.payment_rows().await, 0);
}

#[actix_web::test]
async fn health_metrics_docs_and_provider_webhooks_are_never_limited() {
    let app = spawn_app_with(|s| s.rate_limit_per_second = Some(1)).await;
    exhaust(&app, &app.api_key.clone(), 20).await;

    let secret = WebhookSecret::parse(TEST_WEBHOOK_SECRET).unwrap();
    for round in 0..10 {
        for path in [
            "/health/live",
            "/health/ready",
            "/metrics",
            "/openapi.json",
            "/docs/",
        ] {
            let response = app.get(path).await;
            assert_eq!(response.status, 200, "{path}: {}", response.text());
        }
        let (id, timestamp) = (
            format!("evt_limits_{round}"),
            chrono::Utc::now().timestamp(),
        );
        let body = json!({"type": "test.ping", "timestamp": "2026-11-23T00:00:00Z", "data": {}})
            .to_string()
            .into_bytes();
        let headers = vec![
            ("Content-Type", "application/json".to_owned()),
            ("webhook-id", id.clone()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", sign(&secret, &id, timestamp, &body)),
        ];
        let response = app
            .request("POST", "/v1/webhooks/provider", &headers, body)
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
    }
}
