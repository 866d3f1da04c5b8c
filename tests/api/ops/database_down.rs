//! The database goes away and comes back: PostgreSQL behind a proxy the test cuts
//! (`support::pg_proxy`), and a SQLite file another process locks.

use super::*;
use crate::support::pg_proxy::{Proxy, app_behind_proxy, postgres_behind_proxy, split_authority};

/// Cuts the database once the provider has been called: the claim is committed, the
/// provider's answer not yet stored.
async fn cut_once_called(proxy: &Proxy, called: impl Fn() -> bool) {
    let called = &called;
    wait_until(
        Duration::from_secs(60),
        "the provider is called",
        || async move { called() },
    )
    .await;
    proxy.cut();
}

async fn wait_until_ready(app: &crate::support::TestApp) {
    wait_until(
        Duration::from_secs(30),
        "the service recovers: /health/ready answers 200",
        || async {
            app.request("GET", "/health/ready", &[], Vec::new())
                .await
                .status
                == 200
        },
    )
    .await;
}

#[actix_web::test]
async fn with_the_database_down_requests_answer_503_and_service_recovers_without_restart() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|_| {}).await else {
        return;
    };
    let first = app.post_payment("db-down-1", &visa(300)).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        app.request("GET", "/health/ready", &[], Vec::new())
            .await
            .status,
        200
    );

    // What bounds the wait: a short checkout timeout. (Recovery comes from dropping the
    // connections that lost their server; the second half of this test proves it.)
    let pool = app.state.db.pool();
    assert!(pool.connection_timeout() <= Duration::from_secs(5));

    proxy.cut();
    let checks = [
        ("GET", "/health/ready".to_owned()),
        ("GET", format!("/v1/payments/{id}")),
        ("GET", "/v1/payments".to_owned()),
        ("POST", "/v1/payments".to_owned()),
    ];
    for (method, path) in &checks {
        let started = Instant::now();
        let response = if *method == "POST" {
            app.post_payment("db-down-2", &visa(301)).await
        } else if path.starts_with("/health") {
            app.request(method, path, &[], Vec::new()).await
        } else {
            app.get(path).await
        };
        // Answered (the client's own timeout would fail the test on a hang), never a 500.
        response.assert_problem(503, "service_unavailable");
        assert!(
            response.header("retry-after").is_some(),
            "{method} {path} has no Retry-After"
        );
        eprintln!(
            "{method} {path} with the database down: 503 after {:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        app.charges(),
        1,
        "nothing was charged while the database was down"
    );

    proxy.restore();
    wait_until_ready(&app).await;
    let fetched = app.get(&format!("/v1/payments/{id}")).await;
    assert_eq!(fetched.status, 200, "{}", fetched.text());
    let again = app.post_payment("db-down-3", &visa(302)).await;
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(app.charges(), 2);
}

/// A database that accepts and never answers is no hang either (CONTRACT §2: 503 within
/// 5 s): the network timeouts end only connections whose packets go unanswered, so each
/// request gives up on the server by itself. What it sent may apply once the server answers
/// again, as after a connection lost after COMMIT: the retry finds it, nothing is charged
/// twice.
#[actix_web::test]
async fn a_database_that_never_answers_gets_503_not_a_hang() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.processing_lease = Duration::from_millis(500);
    })
    .await
    else {
        return;
    };
    let first = app.post_payment("frozen-1", &visa(300)).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let id = first.json()["id"].as_str().unwrap().to_owned();

    proxy.freeze();
    let started = Instant::now();
    let path = format!("/v1/payments/{id}");
    let body = visa(301);
    let (fetched, listed, created) = tokio::join!(
        app.get(&path),
        app.get("/v1/payments"),
        app.post_payment("frozen-2", &body),
    );
    for response in [&fetched, &listed, &created] {
        // Answered (the client's own timeout would fail the test on a hang), never a 500.
        response.assert_problem(503, "service_unavailable");
        assert!(response.header("retry-after").is_some());
    }
    eprintln!(
        "with the database silent: three 503s after {:?}",
        started.elapsed()
    );

    proxy.thaw();
    wait_until_ready(&app).await;
    let mut again = app.post_payment("frozen-2", &visa(301)).await;
    for _ in 0..20 {
        if again.status != 409 {
            break;
        }
        // The claim sent into the silence committed late, under a lease nobody holds.
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
        again = app.post_payment("frozen-2", &visa(301)).await;
    }
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(app.charges(), 2);
}

/// Every request that meets a silent database answers 503 within 5 s of asking (CONTRACT
/// §2), also one whose write queued behind a batch already stuck on it: the wait is
/// counted from the request, not from when its own batch started.
#[actix_web::test]
async fn writes_queued_behind_a_stuck_batch_answer_503_within_5_s() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|_| {}).await else {
        return;
    };
    // Warm the API key cache, so only the payments' own writes meet the silence.
    assert_eq!(app.get("/v1/payments").await.status, 200);
    proxy.freeze();
    let app = &app;
    let answers = futures_util::future::join_all((0..12u64).map(|i| async move {
        actix_web::rt::time::sleep(Duration::from_millis(30 * i)).await;
        let asked = Instant::now();
        let response = app.post_payment(&format!("queued-{i}"), &visa(100)).await;
        (response, asked.elapsed())
    }))
    .await;
    for (response, took) in &answers {
        response.assert_problem(503, "service_unavailable");
        assert!(*took <= Duration::from_secs(5), "answered after {took:?}");
    }
    proxy.thaw();
}

/// SQLite's "cannot be reached": another process holds the file's write lock past the busy
/// timeout. A write then answers 503 with `Retry-After` within 5 s, not a 500, and goes
/// through once the lock is let go.
#[actix_web::test]
async fn a_sqlite_file_locked_by_another_process_answers_503_then_recovers() {
    use diesel::{Connection, SqliteConnection};
    let app = spawn_app().await;
    let Some(path) = app.state.settings.database_url.strip_prefix("sqlite://") else {
        return; // PostgreSQL: see the proxy tests
    };
    assert_eq!(app.get("/v1/payments").await.status, 200);
    let mut other = SqliteConnection::establish(path).unwrap();
    other.batch_execute("BEGIN EXCLUSIVE").unwrap();
    let asked = Instant::now();
    let locked = app.post_payment("locked-1", &visa(700)).await;
    let took = asked.elapsed();
    locked.assert_problem(503, "service_unavailable");
    assert!(locked.header("retry-after").is_some());
    assert!(took <= Duration::from_secs(5), "answered after {took:?}");
    other.batch_execute("ROLLBACK").unwrap();

    let after = app.post_payment("locked-1", &visa(700)).await;
    assert_eq!(after.status, 201, "{}", after.text());
    assert_eq!(app.charges(), 1);
}

/// SIGTERM ends the process even while the database is silent: a request whose call to
/// it was given up (503) leaves a thread waiting on the server, and the process does not
/// wait for that thread to exit.
#[actix_web::test]
async fn sigterm_exits_while_the_database_never_answers() {
    let Some((proxy, _schema, url)) = postgres_behind_proxy() else {
        return;
    };
    let mut service = Service::start(&[
        ("DATABASE_URL", &url),
        ("BOOTSTRAP_API_KEY", API_KEY),
        ("PROVIDER_LATENCY_MS", "0"),
    ])
    .await;
    let auth = format!("Bearer {API_KEY}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Idempotency-Key", "before"),
    ];
    let body = visa(500).to_string();
    assert_eq!(
        service
            .send("POST", "/v1/payments", &headers, &body)
            .await
            .0,
        201
    );

    proxy.freeze();
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Idempotency-Key", "into-the-silence"),
    ];
    let (status, _) = service.send("POST", "/v1/payments", &headers, &body).await;
    assert_eq!(status, 503);
    service.sigterm();
    let exited = service.wait_for_exit().await;
    assert!(exited.success(), "{exited}");
    proxy.thaw();
}

#[actix_web::test]
async fn a_database_outage_during_a_payment_answers_503_and_a_retry_charges_once() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.provider_latency = Duration::from_millis(1000);
        s.processing_lease = Duration::from_millis(500);
    })
    .await
    else {
        return;
    };
    // Warm the API key cache, so only the payment's own writes meet the outage.
    assert_eq!(app.get("/v1/payments").await.status, 200);
    let body = visa(450);
    let (during, ()) = tokio::join!(
        app.post_payment("outage-1", &body),
        cut_once_called(&proxy, || app.simulator.charge_calls() > 0)
    );
    // The provider charged, but the outcome could not be stored: not a 500, not a hang.
    during.assert_problem(503, "service_unavailable");
    assert!(during.header("retry-after").is_some());

    proxy.restore();
    wait_until_ready(&app).await;
    // The retry takes the abandoned payment over (its lease has run out) and asks the
    // provider again with the same idempotency key: the customer is charged once.
    let mut retry = app.post_payment("outage-1", &body).await;
    for _ in 0..40 {
        if retry.status != 409 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
        retry = app.post_payment("outage-1", &body).await;
    }
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.json()["status"], "succeeded");
    assert_eq!(app.charges(), 1, "the outage made the customer pay twice");
    assert_eq!(app.payment_rows().await, 1);
}

#[test]
fn split_authority_replaces_host_and_port() {
    let (host, url) = split_authority(
        "postgres://postgres@127.0.0.1:5432/postgres?x=1",
        "127.0.0.1:6000",
    );
    assert_eq!(host, "127.0.0.1:5432");
    assert_eq!(url, "postgres://postgres@127.0.0.1:6000/postgres?x=1");
    let (host, _) = split_authority("postgresql://db/app", "h:1");
    assert_eq!(host, "db:5432");
}

#[actix_web::test]
async fn an_answer_the_database_missed_is_stored_once_it_is_back() {
    // A lease far longer than the test: only the background store can finish the payment.
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.provider_latency = Duration::from_millis(1000);
        s.processing_lease = Duration::from_secs(120);
        s.recovery_interval = Duration::from_secs(120);
    })
    .await
    else {
        return;
    };
    assert_eq!(app.get("/v1/payments").await.status, 200);
    let body = visa(460);
    let (during, ()) = tokio::join!(
        app.post_payment("outage-2", &body),
        cut_once_called(&proxy, || app.simulator.charge_calls() > 0)
    );
    during.assert_problem(503, "service_unavailable");

    proxy.restore();
    wait_until_ready(&app).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        let list = app.get("/v1/payments?status=succeeded").await.json();
        if let Some(id) = list["data"][0]["id"].as_str() {
            break id.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "the provider's answer was never stored"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    };
    let retry = app.post_payment("outage-2", &body).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json()["id"], id.as_str());
    assert_eq!(
        app.simulator.charge_calls(),
        1,
        "stored without asking the provider again"
    );
}

#[actix_web::test]
async fn a_refund_answer_the_database_missed_is_stored_once_it_is_back() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.provider_latency = Duration::from_millis(1000);
        s.processing_lease = Duration::from_secs(120);
        s.recovery_interval = Duration::from_secs(120);
    })
    .await
    else {
        return;
    };
    let payment_id = app.paid_payment(800).await;
    let body = json!({"amount": 300});
    let (during, ()) = tokio::join!(
        app.post_refund(&payment_id, "outage-r", &body),
        cut_once_called(&proxy, || app.simulator.refund_calls() > 0)
    );
    during.assert_problem(503, "service_unavailable");

    proxy.restore();
    wait_until_ready(&app).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.refund_totals(&payment_id).await != (300, 300) {
        assert!(
            Instant::now() < deadline,
            "the provider's refund answer was never stored"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
    let retry = app.post_refund(&payment_id, "outage-r", &body).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        app.simulator.refund_calls(),
        1,
        "stored without asking the provider again"
    );
}
