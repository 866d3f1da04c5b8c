//! Health and metrics, and background tasks that stop with the server.

use super::*;

// ---------------------------------------------------------------------------------------
// Health

#[actix_web::test]
async fn live_and_ready_answer_200() {
    let app = spawn_app().await;
    let live = app.request("GET", "/health/live", &[], Vec::new()).await;
    assert_eq!(live.status, 200);
    assert_eq!(live.json()["status"], "ok");
    let ready = app.request("GET", "/health/ready", &[], Vec::new()).await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert_eq!(ready.json()["status"], "ready");
    assert!(ready.header("x-request-id").is_some());
}

// ---------------------------------------------------------------------------------------
// Metrics

/// The value of one series in a Prometheus text page (0 when absent).
fn series(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(name_and_labels)?;
            rest.strip_prefix(' ')?.trim().parse::<f64>().ok()
        })
        .unwrap_or(0.0)
}

async fn scrape(app: &crate::support::TestApp) -> String {
    let response = app.request("GET", "/metrics", &[], Vec::new()).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert!(
        response
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{:?}",
        response.header("content-type")
    );
    response.text()
}

const CREATED: &str = r#"idempotency_outcomes_total{outcome="created",resource="payment"}"#;
const REPLAYED: &str = r#"idempotency_outcomes_total{outcome="replayed",resource="payment"}"#;
const REUSED: &str = r#"idempotency_outcomes_total{outcome="reused",resource="payment"}"#;
const IN_USE: &str = r#"idempotency_outcomes_total{outcome="in_use",resource="payment"}"#;
const CHARGE_OK: &str = r#"provider_calls_total{operation="charge",outcome="succeeded"}"#;
const CHARGE_DECLINED: &str = r#"provider_calls_total{operation="charge",outcome="failed"}"#;
const GET_PAYMENT_200: &str =
    r#"http_requests_total{method="GET",route="/v1/payments/{id}",status="200"}"#;
const UNMATCHED_404: &str = r#"http_requests_total{method="GET",route="unmatched",status="404"}"#;

#[actix_web::test]
async fn metrics_count_requests_by_route_template_and_idempotency_and_provider_outcomes() {
    let app = spawn_app().await;
    // Tests share the process's registry and run in parallel: compare before and after.
    let before = scrape(&app).await;

    let first = app.post_payment("metrics-1", &visa(1500)).await;
    assert_eq!(first.status, 201);
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.post_payment("metrics-1", &visa(1500)).await.status, 201);
    app.post_payment("metrics-1", &visa(1501))
        .await
        .assert_problem(422, "idempotency_key_reused");
    let declined = json!({"amount": 100, "currency": "usd", "payment_method": "pm_card_declined"});
    assert_eq!(app.post_payment("metrics-2", &declined).await.status, 201);
    assert_eq!(app.get(&format!("/v1/payments/{id}")).await.status, 200);
    let secret_path = "/no-such-route-with-an-id-pay_0123456789";
    assert_eq!(app.get(secret_path).await.status, 404);

    let after = scrape(&app).await;
    let grew = |series_name: &str, by: f64| {
        let delta = series(&after, series_name) - series(&before, series_name);
        assert!(
            delta >= by,
            "{series_name} grew by {delta}, expected {by}:\n{after}"
        );
    };
    grew(CREATED, 2.0);
    grew(REPLAYED, 1.0);
    grew(REUSED, 1.0);
    grew(CHARGE_OK, 1.0);
    grew(CHARGE_DECLINED, 1.0);
    grew(GET_PAYMENT_200, 1.0);
    grew(UNMATCHED_404, 1.0);
    assert!(after.contains("provider_call_duration_seconds_bucket{operation=\"charge\""));
    assert!(
        after.contains(
            "http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/payments\""
        )
    );
    // Route templates only: no ids, no raw paths in label values.
    assert!(!after.contains(&id), "a payment id leaked into the metrics");
    assert!(!after.contains(secret_path));
    // The pool, observed at scrape time: the pool of this app has at least one connection.
    assert!(series(&after, "db_pool_connections") >= 1.0, "{after}");
    assert!(series(&after, "db_pool_max_connections") >= 1.0, "{after}");
    assert!(after.contains("# TYPE db_pool_idle_connections gauge"));
    // Families the parallel branches will feed are already exposed.
    assert!(after.contains(r#"webhooks_total{outcome="duplicate"}"#));
}

#[actix_web::test]
async fn metrics_count_a_duplicate_told_in_use() {
    let app = spawn_app_with(|s| {
        s.provider_latency = Duration::from_millis(1500);
        s.idempotency_wait = Duration::ZERO;
    })
    .await;
    let before = scrape(&app).await;
    let body = visa(700);
    let (first, second) = tokio::join!(app.post_payment("busy-1", &body), async {
        wait_until(
            Duration::from_secs(10),
            "the first request has claimed the key",
            || async { app.payment_rows().await == 1 },
        )
        .await;
        app.post_payment("busy-1", &body).await
    });
    assert_eq!(first.status, 201);
    second.assert_problem(409, "idempotency_key_in_use");
    let after = scrape(&app).await;
    assert!(
        series(&after, IN_USE) - series(&before, IN_USE) >= 1.0,
        "{after}"
    );
}

// ---------------------------------------------------------------------------------------
// Background tasks stop with the server

#[actix_web::test]
async fn background_tasks_are_told_to_stop_when_the_server_stops() {
    let (_database, url) = TestDatabase::create();
    let app = Application::build(test_settings(url)).await.unwrap();
    let handle = app.handle();
    let shutdown = app.state().shutdown.clone();
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    shutdown.spawn("test-worker", |stop| async move {
        loop {
            tokio::select! {
                _ = stop.requested() => break,
                _ = actix_web::rt::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        flag.store(true, Ordering::SeqCst);
    });
    let server = actix_web::rt::spawn(app.run_until_stopped());
    assert_holds_for(
        Duration::from_millis(200),
        "the worker runs until the server stops",
        || async { !finished.load(Ordering::SeqCst) },
    )
    .await;
    handle.stop(true).await;
    let stopped = actix_web::rt::time::timeout(Duration::from_secs(30), server).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    assert!(
        finished.load(Ordering::SeqCst),
        "the worker was not stopped"
    );
    assert!(shutdown.is_requested());
}
