//! Inbound provider webhooks: signed by the test code itself with the server's secret.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use futures_util::future::join_all;
use payments_api::db::webhook_events::{self, WebhookEventRow};
use payments_api::domain::now;
use payments_api::provider::webhook_delivery;
use payments_api::provider::{Charge, ProviderStatus, RetryPolicy, WebhookDelivery};
use payments_api::signing as signature;
use payments_api::webhooks::{self, SignedHeaders, WebhookSecret, sign};
use serde_json::{Value, json};

use crate::support::{
    ScriptedProvider, TEST_WEBHOOK_SECRET, TestApp, TestResponse, provider_answer, spawn_app,
    spawn_app_with, spawn_app_with_provider, spawn_app_with_provider_url, spawn_provider,
};

const PATH: &str = "/v1/webhooks/provider";

pub(crate) fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub(crate) fn test_secret() -> WebhookSecret {
    WebhookSecret::parse(TEST_WEBHOOK_SECRET).unwrap()
}

fn event_id() -> String {
    format!("evt_{}", uuid::Uuid::new_v4().simple())
}

/// The headers a provider sends for this body, signed with `secret` at `timestamp`.
pub(crate) fn signed_headers(
    secret: &WebhookSecret,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".to_owned()),
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", sign(secret, id, timestamp, body)),
    ]
}

pub(crate) fn charge_event(kind: &str, payment: &Value) -> Vec<u8> {
    let failed = kind == "charge.failed";
    json!({
        "type": kind,
        "timestamp": "2026-11-22T06:00:00Z",
        "data": {
            "charge_id": payment["provider_charge_id"],
            "reference": payment["id"],
            "amount": payment["amount"],
            "currency": payment["currency"],
            "failure_code": if failed { json!("card_declined") } else { Value::Null },
            "failure_message": if failed { json!("Your card was declined.") } else { Value::Null },
        }
    })
    .to_string()
    .into_bytes()
}

impl TestApp {
    /// A payment left `processing` at the provider: the simulator's own webhook is an hour away.
    async fn processing_payment(&self, key: &str) -> Value {
        let body = json!({"amount": 2000, "currency": "usd", "payment_method": "pm_card_async"});
        let response = self.post_payment(key, &body).await;
        assert_eq!(response.status, 202, "{}", response.text());
        let payment = response.json();
        assert_eq!(payment["status"], "processing");
        assert!(payment["provider_charge_id"].is_string(), "{payment}");
        payment
    }

    async fn post_webhook(&self, id: &str, body: &[u8]) -> TestResponse {
        let headers = signed_headers(&test_secret(), id, unix_now(), body);
        self.request("POST", PATH, &headers, body.to_vec()).await
    }

    async fn webhook_events(&self) -> i64 {
        self.state
            .db
            .run(webhook_events::count)
            .await
            .expect("count events")
    }

    async fn payment(&self, id: &Value) -> Value {
        let response = self
            .get(&format!("/v1/payments/{}", id.as_str().unwrap()))
            .await;
        assert_eq!(response.status, 200);
        response.json()
    }
}

async fn spawn_app_with_slow_webhooks() -> TestApp {
    spawn_app_with(|s| s.provider_async_delay = Duration::from_secs(3600)).await
}

fn assert_receipt(response: &TestResponse, duplicate: bool) {
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(
        response.text(),
        format!(r#"{{"received":true,"duplicate":{duplicate}}}"#)
    );
}

#[actix_web::test]
async fn a_signed_charge_succeeded_finishes_the_payment_and_fixes_the_replayed_answer() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-1").await;
    let body = charge_event("charge.succeeded", &payment);

    let response = app.post_webhook(&event_id(), &body).await;
    assert_receipt(&response, false);
    assert_eq!(app.webhook_events().await, 1);

    let now = app.payment(&payment["id"]).await;
    assert_eq!(now["status"], "succeeded");
    assert_eq!(now["provider_charge_id"], payment["provider_charge_id"]);

    // The original request, retried: the final answer the webhook stored, replayed.
    let retry = app
        .post_payment(
            "wh-1",
            &json!({"amount": 2000, "currency": "usd", "payment_method": "pm_card_async"}),
        )
        .await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json(), now);
    let again = app
        .post_payment(
            "wh-1",
            &json!({"amount": 2000, "currency": "usd", "payment_method": "pm_card_async"}),
        )
        .await;
    assert_eq!(again.body, retry.body, "the stored answer is fixed");
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn a_signed_charge_failed_fails_the_payment() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-f").await;
    let response = app
        .post_webhook(&event_id(), &charge_event("charge.failed", &payment))
        .await;
    assert_receipt(&response, false);
    let now = app.payment(&payment["id"]).await;
    assert_eq!(now["status"], "failed");
    assert_eq!(now["failure_code"], "card_declined");
}

#[actix_web::test]
async fn a_tampered_body_is_refused_and_changes_nothing() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-t").await;
    let id = event_id();
    let body = charge_event("charge.succeeded", &payment);
    let headers = signed_headers(&test_secret(), &id, unix_now(), &body);
    let tampered = charge_event("charge.failed", &payment);
    app.request("POST", PATH, &headers, tampered)
        .await
        .assert_problem(401, "invalid_signature");
    // Whitespace counts too: the signature is over the raw bytes.
    let mut spaced = body.clone();
    spaced.push(b' ');
    app.request("POST", PATH, &headers, spaced)
        .await
        .assert_problem(401, "invalid_signature");
    assert_eq!(app.webhook_events().await, 0);
    assert_eq!(app.payment(&payment["id"]).await["status"], "processing");
}

#[actix_web::test]
async fn a_wrong_secret_is_refused() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-w").await;
    let body = charge_event("charge.succeeded", &payment);
    let other = WebhookSecret::parse(&WebhookSecret::generate()).unwrap();
    let headers = signed_headers(&other, &event_id(), unix_now(), &body);
    app.request("POST", PATH, &headers, body)
        .await
        .assert_problem(401, "invalid_signature");
    assert_eq!(app.webhook_events().await, 0);
    assert_eq!(app.payment(&payment["id"]).await["status"], "processing");
}

#[actix_web::test]
async fn stale_and_future_timestamps_are_refused() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-s").await;
    let body = charge_event("charge.succeeded", &payment);
    for offset in [-301 - 30, 301 + 30, -86_400, 86_400] {
        let headers = signed_headers(&test_secret(), &event_id(), unix_now() + offset, &body);
        let problem = app
            .request("POST", PATH, &headers, body.clone())
            .await
            .assert_problem(401, "invalid_signature");
        assert!(
            problem["detail"].as_str().unwrap().contains("300 seconds"),
            "{problem}"
        );
    }
    assert_eq!(app.webhook_events().await, 0);
    // Inside the window (either way) is fine.
    let headers = signed_headers(&test_secret(), &event_id(), unix_now() - 240, &body);
    assert_receipt(
        &app.request("POST", PATH, &headers, body.clone()).await,
        false,
    );
    let headers = signed_headers(&test_secret(), &event_id(), unix_now() + 240, &body);
    assert_receipt(&app.request("POST", PATH, &headers, body).await, false);
    assert_eq!(app.webhook_events().await, 2);
}

#[actix_web::test]
async fn missing_and_malformed_headers_are_401_never_500() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-h").await;
    let body = charge_event("charge.succeeded", &payment);
    let good = signed_headers(&test_secret(), &event_id(), unix_now(), &body);
    let without = |name: &str| -> Vec<(&'static str, String)> {
        good.iter().filter(|(n, _)| *n != name).cloned().collect()
    };
    let replacing = |name: &str, value: &str| -> Vec<(&'static str, String)> {
        good.iter()
            .map(|(n, v)| {
                if *n == name {
                    (*n, value.to_owned())
                } else {
                    (*n, v.clone())
                }
            })
            .collect()
    };
    let signature = good[3].1.clone();
    let mut repeated = good.clone();
    repeated.push(("webhook-id", event_id()));
    let cases = vec![
        without("webhook-id"),
        without("webhook-timestamp"),
        without("webhook-signature"),
        replacing("webhook-timestamp", "yesterday"),
        replacing("webhook-timestamp", "1.5e9"),
        replacing("webhook-timestamp", ""),
        replacing("webhook-signature", ""),
        replacing("webhook-signature", "v1,!!!not-base64!!!"),
        replacing("webhook-signature", &signature.replacen("v1,", "v2,", 1)),
        replacing("webhook-signature", &signature.replacen("v1,", "v1", 1)),
        replacing("webhook-signature", "v1,"),
        replacing("webhook-id", "has space"),
        repeated,
    ];
    for headers in cases {
        app.request("POST", PATH, &headers, body.clone())
            .await
            .assert_problem(401, "invalid_signature");
    }
    // Nothing at all, not even a body.
    app.request("POST", PATH, &[], Vec::new())
        .await
        .assert_problem(401, "invalid_signature");
    assert_eq!(app.webhook_events().await, 0);
    assert_eq!(app.payment(&payment["id"]).await["status"], "processing");
}

#[actix_web::test]
async fn with_no_secret_configured_every_webhook_is_refused() {
    let app = spawn_app_with(|s| s.webhook_secrets.clear()).await;
    let body = br#"{"type": "charge.succeeded", "data": {}}"#;
    app.post_webhook(&event_id(), body)
        .await
        .assert_problem(401, "invalid_signature");
    assert_eq!(app.webhook_events().await, 0);
}

#[actix_web::test]
async fn during_rotation_either_secret_is_accepted() {
    let new_secret = WebhookSecret::generate();
    let configured = new_secret.clone();
    let app = spawn_app_with(move |s| {
        s.provider_async_delay = Duration::from_secs(3600);
        s.webhook_secrets = vec![configured, TEST_WEBHOOK_SECRET.to_owned()];
    })
    .await;
    let new_secret = WebhookSecret::parse(&new_secret).unwrap();
    let body = br#"{"type": "ping", "timestamp": "2026-11-22T06:00:00Z", "data": {}}"#;
    for secret in [&new_secret, &test_secret()] {
        let headers = signed_headers(secret, &event_id(), unix_now(), body);
        assert_receipt(
            &app.request("POST", PATH, &headers, body.to_vec()).await,
            false,
        );
    }
    // Several entries: one matching entry is enough, whatever else is there.
    let id = event_id();
    let ts = unix_now();
    let stale_key = WebhookSecret::parse(&WebhookSecret::generate()).unwrap();
    let header = format!(
        "{} v2,abc {}",
        sign(&stale_key, &id, ts, body),
        sign(&new_secret, &id, ts, body)
    );
    let headers = vec![
        ("Content-Type", "application/json".to_owned()),
        ("webhook-id", id),
        ("webhook-timestamp", ts.to_string()),
        ("webhook-signature", header),
    ];
    assert_receipt(
        &app.request("POST", PATH, &headers, body.to_vec()).await,
        false,
    );
    assert_eq!(app.webhook_events().await, 3);
}

#[actix_web::test]
async fn fifty_concurrent_deliveries_of_one_event_apply_it_once() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-c").await;
    let id = event_id();
    let body = charge_event("charge.succeeded", &payment);
    let headers = signed_headers(&test_secret(), &id, unix_now(), &body);
    let responses =
        join_all((0..50).map(|_| app.request("POST", PATH, &headers, body.clone()))).await;
    let mut first = 0;
    let mut duplicates = 0;
    for response in &responses {
        assert_eq!(response.status, 200, "{}", response.text());
        match response.json()["duplicate"].as_bool() {
            Some(false) => first += 1,
            Some(true) => duplicates += 1,
            None => panic!("no duplicate flag: {}", response.text()),
        }
    }
    assert_eq!((first, duplicates), (1, 49));
    assert_eq!(app.webhook_events().await, 1);
    assert_eq!(app.payment(&payment["id"]).await["status"], "succeeded");
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn a_redelivery_after_success_is_a_duplicate_with_no_second_effect() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-r").await;
    let id = event_id();
    let body = charge_event("charge.succeeded", &payment);
    assert_receipt(&app.post_webhook(&id, &body).await, false);
    let finished = app.payment(&payment["id"]).await;
    // Re-signed at a later time, as a provider's redelivery is: still the same event.
    actix_web::rt::time::sleep(Duration::from_millis(1100)).await;
    assert_receipt(&app.post_webhook(&id, &body).await, true);
    assert_receipt(&app.post_webhook(&id, &body).await, true);
    assert_eq!(app.webhook_events().await, 1);
    assert_eq!(
        app.payment(&payment["id"]).await,
        finished,
        "not even updated_at moved"
    );
}

#[actix_web::test]
async fn the_same_id_with_a_different_body_is_a_conflict() {
    let app = spawn_app_with_slow_webhooks().await;
    let first = app.processing_payment("wh-x1").await;
    let second = app.processing_payment("wh-x2").await;
    let id = event_id();
    assert_receipt(
        &app.post_webhook(&id, &charge_event("charge.succeeded", &first))
            .await,
        false,
    );
    app.post_webhook(&id, &charge_event("charge.succeeded", &second))
        .await
        .assert_problem(409, "webhook_id_conflict");
    assert_eq!(app.webhook_events().await, 1);
    assert_eq!(app.payment(&second["id"]).await["status"], "processing");
}

#[actix_web::test]
async fn an_event_that_would_move_a_final_payment_changes_nothing() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-b").await;
    assert_receipt(
        &app.post_webhook(&event_id(), &charge_event("charge.succeeded", &payment))
            .await,
        false,
    );
    let succeeded = app.payment(&payment["id"]).await;
    // A different event (new id) saying the opposite: recorded, answered 200, not applied.
    assert_receipt(
        &app.post_webhook(&event_id(), &charge_event("charge.failed", &payment))
            .await,
        false,
    );
    assert_eq!(app.payment(&payment["id"]).await, succeeded);
    assert_eq!(app.webhook_events().await, 2);
}

#[actix_web::test]
async fn an_event_for_another_charge_or_amount_changes_nothing() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-m").await;
    for (field, value) in [
        ("charge_id", json!("ch_someone_else")),
        ("amount", json!(1)),
    ] {
        let mut event: Value =
            serde_json::from_slice(&charge_event("charge.succeeded", &payment)).unwrap();
        event["data"][field] = value;
        let body = event.to_string().into_bytes();
        assert_receipt(&app.post_webhook(&event_id(), &body).await, false);
    }
    assert_eq!(app.payment(&payment["id"]).await["status"], "processing");
    assert_eq!(app.webhook_events().await, 2);
}

#[actix_web::test]
async fn unknown_types_references_and_refund_events_are_recorded_and_answered_200() {
    let app = spawn_app().await;
    let unknown_reference = json!({
        "type": "charge.succeeded", "timestamp": "2026-11-22T06:00:00Z",
        "data": {"charge_id": "ch_x", "reference": "pay_00000000000000000000000000000000",
                 "amount": 100, "currency": "usd", "failure_code": null, "failure_message": null}
    });
    let bodies = [
        json!({"type": "customer.created", "timestamp": "2026-11-22T06:00:00Z", "data": {"id": "cus_1"}}),
        unknown_reference,
        json!({"type": "refund.succeeded", "timestamp": "2026-11-22T06:00:00Z",
               "data": {"refund_id": "pr_1", "reference": "re_1", "charge_id": "ch_1", "amount": 100}}),
        json!({"type": "charge.failed", "data": "not an object"}),
    ];
    for body in &bodies {
        let body = body.to_string().into_bytes();
        let id = event_id();
        assert_receipt(&app.post_webhook(&id, &body).await, false);
        assert_receipt(&app.post_webhook(&id, &body).await, true);
    }
    assert_eq!(app.webhook_events().await, bodies.len() as i64);
    assert_eq!(app.payment_rows().await, 0);
}

#[actix_web::test]
async fn a_signed_body_that_is_not_an_event_is_400_and_not_recorded() {
    let app = spawn_app().await;
    for body in [&b"not json"[..], br#"{"data": {}}"#, b"[1,2]"] {
        let response = app.post_webhook(&event_id(), body).await;
        response.assert_problem(400, "invalid_request");
    }
    assert_eq!(app.webhook_events().await, 0);
}

#[actix_web::test]
async fn a_body_over_64_kib_is_413_before_any_signature_check() {
    let app = spawn_app().await;
    let body = format!(
        r#"{{"type": "ping", "data": {{"pad": "{}"}}}}"#,
        "x".repeat(65 * 1024)
    )
    .into_bytes();
    // Correctly signed, still too large; and unsigned, too large rather than 401.
    app.post_webhook(&event_id(), &body)
        .await
        .assert_problem(413, "payload_too_large");
    app.request("POST", PATH, &[], body)
        .await
        .assert_problem(413, "payload_too_large");
    assert_eq!(app.webhook_events().await, 0);
}

#[actix_web::test]
async fn a_failure_while_applying_records_nothing_and_the_redelivery_applies_it() {
    let app = spawn_app_with_slow_webhooks().await;
    let payment = app.processing_payment("wh-e").await;
    let payment_id = payment["id"].as_str().unwrap().to_owned();
    // Break the row so that rendering its final answer fails inside the transaction.
    let sql = format!("UPDATE payments SET metadata = 'not json' WHERE id = '{payment_id}'");
    app.state
        .db
        .run(move |conn| conn.batch_execute(&sql))
        .await
        .unwrap();
    let id = event_id();
    let body = charge_event("charge.succeeded", &payment);
    let response = app.post_webhook(&id, &body).await;
    response.assert_problem(500, "internal_error");
    assert_eq!(app.webhook_events().await, 0, "the event row rolled back");

    let sql = format!("UPDATE payments SET metadata = '{{}}' WHERE id = '{payment_id}'");
    app.state
        .db
        .run(move |conn| conn.batch_execute(&sql))
        .await
        .unwrap();
    assert_eq!(app.payment(&payment["id"]).await["status"], "processing");
    assert_receipt(&app.post_webhook(&id, &body).await, false);
    assert_eq!(app.payment(&payment["id"]).await["status"], "succeeded");
    assert_eq!(app.webhook_events().await, 1);
}

#[actix_web::test]
async fn event_ids_older_than_30_days_are_pruned_and_newer_kept() {
    let app = spawn_app().await;
    let now = now();
    let rows = [
        ("evt_old", now - chrono::Duration::days(31)),
        ("evt_older", now - chrono::Duration::days(400)),
        ("evt_recent", now - chrono::Duration::days(29)),
        ("evt_today", now),
    ];
    for (id, received_at) in rows {
        let row = WebhookEventRow {
            id: id.to_owned(),
            body_sha256: "00".repeat(32),
            event_type: "ping".to_owned(),
            received_at,
        };
        app.state
            .db
            .run(move |conn| webhook_events::record_and_apply(conn, &row, |_| Ok(())))
            .await
            .unwrap();
    }
    let deleted = webhooks::prune_expired_events(&app.state.db, now)
        .await
        .unwrap();
    assert_eq!(deleted, 2);
    assert_eq!(app.webhook_events().await, 2);
    let kept = app
        .state
        .db
        .run(|conn| webhook_events::find(conn, "evt_recent"))
        .await
        .unwrap();
    assert!(kept.is_some());
}

async fn poll_until_final(app: &TestApp, id: &Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let payment = app.payment(id).await;
        if payment["status"] != "processing" {
            return payment;
        }
        assert!(Instant::now() < deadline, "still processing: {payment}");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_web::test]
async fn an_async_payment_is_finished_by_the_simulators_signed_webhook() {
    let app = spawn_app_with(|s| s.provider_async_delay = Duration::from_millis(200)).await;
    let request = json!({"amount": 4200, "currency": "usd", "payment_method": "pm_card_async"});
    let first = app.post_payment("async-1", &request).await;
    assert_eq!(first.status, 202, "{}", first.text());
    let payment = first.json();
    assert_eq!(payment["status"], "processing");

    let finished = poll_until_final(&app, &payment["id"]).await;
    assert_eq!(finished["status"], "succeeded");
    assert_eq!(
        finished["provider_charge_id"],
        payment["provider_charge_id"]
    );
    assert_eq!(app.webhook_events().await, 1, "it came by webhook");

    let retry = app.post_payment("async-1", &request).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json(), finished);
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn an_async_decline_is_failed_by_the_simulators_signed_webhook() {
    let app = spawn_app_with(|s| s.provider_async_delay = Duration::from_millis(200)).await;
    let request =
        json!({"amount": 700, "currency": "eur", "payment_method": "pm_card_async_declined"});
    let first = app.post_payment("async-2", &request).await;
    assert_eq!(first.status, 202, "{}", first.text());
    let finished = poll_until_final(&app, &first.json()["id"]).await;
    assert_eq!(finished["status"], "failed");
    assert_eq!(finished["failure_code"], "card_declined");
    let retry = app.post_payment("async-2", &request).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(app.webhook_events().await, 1);
}

/// A receiver that refuses the first `refusals` deliveries with 503, checking every
/// signature it gets; returns its URL and what it saw: (webhook-id, valid signature).
async fn flaky_receiver(refusals: usize) -> (String, Arc<Mutex<Vec<(String, bool)>>>) {
    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let log = seen.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = actix_web::HttpServer::new(move || {
        let log = log.clone();
        actix_web::App::new().default_service(actix_web::web::to(
            move |req: actix_web::HttpRequest, body: actix_web::web::Bytes| {
                let log = log.clone();
                async move {
                    let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
                    let headers = SignedHeaders {
                        id: header("webhook-id"),
                        timestamp: header("webhook-timestamp"),
                        signature: header("webhook-signature"),
                    };
                    let valid =
                        signature::verify(&[test_secret()], headers, &body, unix_now()).is_ok();
                    let mut seen = log.lock().unwrap();
                    seen.push((headers.id.unwrap_or("").to_owned(), valid));
                    if seen.len() <= refusals {
                        actix_web::HttpResponse::ServiceUnavailable().finish()
                    } else {
                        actix_web::HttpResponse::Ok().finish()
                    }
                }
            },
        ))
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    (format!("http://127.0.0.1:{port}/hook"), seen)
}

fn quick_retries(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        first_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        timeout: Duration::from_secs(5),
    }
}

fn succeeded_charge() -> Charge {
    Charge {
        id: "ch_1".into(),
        status: ProviderStatus::Succeeded,
        amount: 100,
        currency: "usd".into(),
        reference: "pay_1".into(),
        failure_code: None,
        failure_message: None,
    }
}

#[actix_web::test]
async fn delivery_is_retried_with_the_same_id_until_a_2xx() {
    let (url, seen) = flaky_receiver(3).await;
    let delivery = WebhookDelivery::new(url, test_secret(), quick_retries(10));
    let event = webhook_delivery::charge_event(&succeeded_charge()).unwrap();
    assert_eq!(delivery.deliver(&event).await.unwrap(), 4);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "three refusals, then the delivery");
    assert!(
        seen.iter().all(|(id, valid)| *id == event.id && *valid),
        "{seen:?}"
    );
}

#[actix_web::test]
async fn delivery_gives_up_after_its_attempts() {
    let (url, seen) = flaky_receiver(usize::MAX).await;
    let delivery = WebhookDelivery::new(url, test_secret(), quick_retries(3));
    let event = webhook_delivery::charge_event(&succeeded_charge()).unwrap();
    let failed = delivery.deliver(&event).await.unwrap_err();
    assert_eq!(failed.attempts, 3);
    assert_eq!(seen.lock().unwrap().len(), 3);
}

/// The provider's event for `refund` of the charge `charge_id`, under a refund id of the
/// provider's own if ours has none yet.
fn refund_event(kind: &str, refund: &Value, charge_id: &str) -> Vec<u8> {
    let provider_id = match refund["provider_refund_id"].as_str() {
        Some(known) => known.to_owned(),
        None => format!("pr_{}", uuid::Uuid::new_v4().simple()),
    };
    json!({
        "type": kind,
        "timestamp": "2026-11-22T06:00:00Z",
        "data": {
            "refund_id": provider_id,
            "reference": refund["id"],
            "charge_id": charge_id,
            "amount": refund["amount"],
            "failure_code": if kind == "refund.failed" { json!("expired_card") } else { Value::Null },
        }
    })
    .to_string()
    .into_bytes()
}

#[actix_web::test]
async fn refund_events_finish_pending_refunds_once() {
    let provider = spawn_provider().await;
    // Nothing but the webhooks may finish the pending refunds here.
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_max_attempts = 1;
        s.processing_lease = Duration::from_secs(600);
        s.recovery_interval = Duration::from_secs(600);
    })
    .await;
    let payment_id = app.paid_payment(1000).await;
    provider
        .faults
        .down
        .store(true, std::sync::atomic::Ordering::SeqCst);

    let pending = app
        .post_refund(&payment_id, "r-ok", &json!({"amount": 400}))
        .await;
    assert_eq!(pending.status, 202, "{}", pending.text());
    let refund = pending.json();
    assert_eq!(refund["status"], "pending");
    assert_eq!(
        app.refund_totals(&payment_id).await,
        (400, 0),
        "reserved, not refunded"
    );

    let charge = provider.simulator.charges()[0].id.clone();
    let succeeded = refund_event("refund.succeeded", &refund, &charge);
    let id = event_id();
    let deliveries = join_all((0..10).map(|_| app.post_webhook(&id, &succeeded))).await;
    assert_eq!(
        deliveries
            .iter()
            .filter(|r| r.json()["duplicate"] == false)
            .count(),
        1
    );
    assert_eq!(
        app.refund_totals(&payment_id).await,
        (400, 400),
        "refunded once"
    );
    let payment = app.get(&format!("/v1/payments/{payment_id}")).await.json();
    assert_eq!(payment["amount_refunded"], 400);

    // The original request now replays the final answer the webhook fixed.
    let retry = app
        .post_refund(&payment_id, "r-ok", &json!({"amount": 400}))
        .await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json()["status"], "succeeded");

    // A failed refund gives its reservation back; a late success for it changes nothing.
    let pending = app
        .post_refund(&payment_id, "r-fail", &json!({"amount": 600}))
        .await;
    assert_eq!(pending.status, 202);
    let refund = pending.json();
    assert_eq!(app.refund_totals(&payment_id).await, (1000, 400));
    assert_receipt(
        &app.post_webhook(
            &event_id(),
            &refund_event("refund.failed", &refund, &charge),
        )
        .await,
        false,
    );
    assert_eq!(app.refund_totals(&payment_id).await, (400, 400));
    assert_receipt(
        &app.post_webhook(
            &event_id(),
            &refund_event("refund.succeeded", &refund, &charge),
        )
        .await,
        false,
    );
    assert_eq!(
        app.refund_totals(&payment_id).await,
        (400, 400),
        "a final refund never moves"
    );
    assert!(
        provider.simulator.refunds().is_empty(),
        "the provider was down throughout"
    );
}

/// A refund event that contradicts the pending refund it names (another provider refund
/// id, amount or charge) changes nothing, like a charge event that does; one that leaves
/// the refund id out finishes it and keeps the id the provider gave before.
#[actix_web::test]
async fn a_refund_event_that_contradicts_its_refund_changes_nothing() {
    let provider = ScriptedProvider::start(vec![
        provider_answer(r#"{"id": "ch_r", "status": "succeeded"}"#),
        provider_answer(r#"{"id": "pr_known", "status": "pending"}"#),
    ]);
    let app = spawn_app_with_provider_url(&provider.url, |s| {
        s.processing_lease = Duration::from_secs(600);
        s.recovery_interval = Duration::from_secs(600);
    })
    .await;
    let payment_id = app.paid_payment(1000).await;
    let pending = app
        .post_refund(&payment_id, "r-1", &json!({"amount": 400}))
        .await;
    assert_eq!(pending.status, 202, "{}", pending.text());
    let refund = pending.json();
    assert_eq!(refund["provider_refund_id"], "pr_known");

    let event = |field: &str, value: Value| {
        let mut event: Value =
            serde_json::from_slice(&refund_event("refund.succeeded", &refund, "ch_r")).unwrap();
        if value.is_null() {
            event["data"].as_object_mut().unwrap().remove(field);
        } else {
            event["data"][field] = value;
        }
        event.to_string().into_bytes()
    };
    for (field, value) in [
        ("refund_id", json!("pr_other")),
        ("amount", json!(1)),
        ("charge_id", json!("ch_other")),
    ] {
        assert_receipt(
            &app.post_webhook(&event_id(), &event(field, value)).await,
            false,
        );
        assert_eq!(app.refund_totals(&payment_id).await, (400, 0), "{field}");
    }
    assert_receipt(
        &app.post_webhook(&event_id(), &event("refund_id", Value::Null))
            .await,
        false,
    );
    assert_eq!(app.refund_totals(&payment_id).await, (400, 400));
    let finished = app
        .get(&format!("/v1/payments/{payment_id}/refunds"))
        .await
        .json();
    assert_eq!(finished["data"][0]["status"], "succeeded", "{finished}");
    assert_eq!(finished["data"][0]["provider_refund_id"], "pr_known");
    assert_eq!(provider.calls().len(), 2, "one charge, one refund");
}

/// A charge event whose kind contradicts the payment's `capture_method` (an automatic
/// payment only authorized, a manual one charged before any capture) changes nothing.
#[actix_web::test]
async fn a_charge_event_that_contradicts_the_capture_method_changes_nothing() {
    let app = spawn_app_with_slow_webhooks().await;
    let automatic = app.processing_payment("wh-auto").await;
    let manual = {
        let body = json!({"amount": 2000, "currency": "usd", "payment_method": "pm_card_async",
                          "capture_method": "manual"});
        let response = app.post_payment("wh-manual", &body).await;
        assert_eq!(response.status, 202, "{}", response.text());
        response.json()
    };
    for (kind, payment) in [
        ("charge.requires_capture", &automatic),
        ("charge.succeeded", &manual),
    ] {
        let body = charge_event(kind, payment);
        assert_receipt(&app.post_webhook(&event_id(), &body).await, false);
        assert_eq!(
            app.payment(&payment["id"]).await["status"],
            "processing",
            "{kind}"
        );
    }
    // The kinds that fit still finish them.
    for (kind, payment, status) in [
        ("charge.succeeded", &automatic, "succeeded"),
        ("charge.requires_capture", &manual, "requires_capture"),
    ] {
        let body = charge_event(kind, payment);
        assert_receipt(&app.post_webhook(&event_id(), &body).await, false);
        assert_eq!(
            app.payment(&payment["id"]).await["status"],
            status,
            "{kind}"
        );
    }
}

#[actix_web::test]
async fn webhook_outcomes_are_counted_in_the_metrics() {
    let app = spawn_app().await;
    let count = |text: &str, outcome: &str| -> f64 {
        let name = format!("webhooks_total{{outcome=\"{outcome}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(&name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    // Tests share the process's registry and run in parallel: compare before and after.
    let before = app.get("/metrics").await.text();
    let body = json!({"type": "customer.created", "timestamp": "2026-11-22T06:00:00Z", "data": {}})
        .to_string()
        .into_bytes();
    let id = event_id();
    assert_receipt(&app.post_webhook(&id, &body).await, false);
    assert_receipt(&app.post_webhook(&id, &body).await, true);
    let wrong = signed_headers(
        &WebhookSecret::parse("whsec_MDEyMzQ1Njc4OWFiY2RlZg==").unwrap(),
        &id,
        unix_now(),
        &body,
    );
    app.request("POST", PATH, &wrong, body.clone())
        .await
        .assert_problem(401, "invalid_signature");
    let after = app.get("/metrics").await.text();
    for outcome in ["accepted", "duplicate", "rejected"] {
        assert!(
            count(&after, outcome) - count(&before, outcome) >= 1.0,
            "{outcome} not counted:\n{after}"
        );
    }
}

#[actix_web::test]
async fn a_webhook_that_overtakes_the_providers_pending_answer_makes_the_request_final() {
    // The simulator's webhook finishes the charge at 100 ms; its `pending` answer to the
    // charge itself arrives at 1 s. The request answers what is true by then: final.
    let app = spawn_app_with(|s| {
        s.provider_async_delay = Duration::from_millis(100);
        s.provider_latency = Duration::from_millis(1000);
    })
    .await;
    let request = json!({"amount": 4200, "currency": "usd", "payment_method": "pm_card_async"});
    let first = app.post_payment("overtaken-1", &request).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let payment = first.json();
    assert_eq!(payment["status"], "succeeded");
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(app.webhook_events().await, 1, "it came by webhook");
    assert_eq!(app.payment(&payment["id"]).await, payment);

    let retry = app.post_payment("overtaken-1", &request).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, first.body, "one answer, first and replayed");
    assert_eq!(app.charges(), 1);
}
