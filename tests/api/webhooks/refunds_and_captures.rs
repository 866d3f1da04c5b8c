//! Refund and capture events, the metrics of webhook outcomes, and a webhook that overtakes
//! the provider's pending answer.

use super::*;

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
