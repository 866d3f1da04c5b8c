//! Each event applied once: concurrent and repeated deliveries, conflicts, events that
//! would change nothing, bodies that are not events, failures while applying, pruning.

use super::*;

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
    let deleted = inbound::prune_expired_events(&app.state.db, now)
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
