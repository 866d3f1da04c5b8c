//! Signatures: what is signed right finishes the payment; tampered, wrong, stale, missing
//! or malformed is refused; either secret during a rotation.

use super::*;

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
