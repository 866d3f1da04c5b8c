//! Captures and cancels: in full, partial, over, from the wrong status, with their reason,
//! keys per endpoint, and races between them.

use super::*;

#[actix_web::test]
async fn a_manual_payment_is_authorized_then_captured_in_full_once() {
    let app = spawn_app().await;
    let created = app.post_payment("order-1", &manual(2000)).await;
    assert_eq!(created.status, 201, "{}", created.text());
    let payment = created.json();
    let id = payment["id"].as_str().unwrap();
    assert!(payment["provider_charge_id"].is_string());
    assert_eq!(app.charges(), 1);

    // No body: capture all that is capturable.
    let path = format!("/v1/payments/{id}/capture");
    let headers = [
        ("Authorization", format!("Bearer {}", app.api_key)),
        ("Idempotency-Key", "ship-1".to_owned()),
    ];
    let captured = app.request("POST", &path, &headers, Vec::new()).await;
    assert_eq!(captured.status, 200, "{}", captured.text());
    let body = captured.json();
    assert_eq!(body["status"], "succeeded");
    assert_eq!(body["amount_captured"], 2000);
    assert_eq!(body["amount_capturable"], 0);
    assert_eq!(app.simulator.captures().len(), 1);

    let again = app.request("POST", &path, &headers, Vec::new()).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, captured.body, "byte-identical replay");
    assert_eq!(
        app.simulator.capture_calls(),
        1,
        "a replay asks no provider"
    );

    // The create request's own answer stays the authorization it first was.
    let create_replay = app.post_payment("order-1", &manual(2000)).await;
    assert_eq!(create_replay.body, created.body);
    assert_eq!(app.payment_now(id).await["status"], "succeeded");
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn a_partial_capture_bounds_refunds_by_what_was_captured() {
    let app = spawn_app().await;
    let id = app.authorized_payment(2000).await;
    let captured = app.capture(&id, "part", &json!({"amount": 1500})).await;
    assert_eq!(captured.status, 200, "{}", captured.text());
    assert_eq!(captured.json()["amount_captured"], 1500);
    assert_eq!(captured.json()["amount_capturable"], 0);
    assert_eq!(app.simulator.captures()[0].amount_captured, Some(1500));

    let too_much = app
        .post_refund(&id, "r-big", &json!({"amount": 1600}))
        .await;
    too_much.assert_problem(422, "amount_exceeds_refundable");
    let rest = app.post_refund(&id, "r-all", &json!({})).await;
    assert_eq!(rest.status, 201, "{}", rest.text());
    assert_eq!(
        rest.json()["amount"],
        1500,
        "the default is what was captured"
    );
    let more = app.post_refund(&id, "r-more", &json!({"amount": 1})).await;
    more.assert_problem(409, "payment_not_refundable");
    assert_eq!(app.provider_refunds().len(), 1);
}

#[actix_web::test]
async fn an_over_capture_is_refused_and_stored_and_the_authorization_stays() {
    let app = spawn_app().await;
    let id = app.authorized_payment(2000).await;
    let over = app.capture(&id, "over", &json!({"amount": 2001})).await;
    over.assert_problem(422, "amount_exceeds_capturable");
    let replay = app.capture(&id, "over", &json!({"amount": 2001})).await;
    replay.assert_problem(422, "amount_exceeds_capturable");
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, over.body);
    assert_eq!(
        app.simulator.capture_calls(),
        0,
        "nothing reached the provider"
    );

    let reused = app.capture(&id, "over", &json!({"amount": 10})).await;
    reused.assert_problem(422, "idempotency_key_reused");

    let captured = app.capture(&id, "right", &json!({"amount": 2000})).await;
    assert_eq!(captured.status, 200, "{}", captured.text());
    assert_eq!(app.simulator.captures().len(), 1);
}

#[actix_web::test]
async fn only_requires_capture_payments_can_be_captured_or_canceled() {
    let app = spawn_app().await;
    let automatic = app.paid_payment(1000).await;
    let capture = app.capture(&automatic, "c1", &json!({})).await;
    capture.assert_problem(409, "payment_not_capturable");
    let cancel = app.cancel(&automatic, "c1", &json!({})).await;
    cancel.assert_problem(409, "payment_not_cancelable");
    // A stored refusal is the key's final answer.
    let replay = app.capture(&automatic, "c1", &json!({})).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, capture.body);

    let id = app.authorized_payment(500).await;
    assert_eq!(app.cancel(&id, "undo", &json!({})).await.status, 200);
    app.capture(&id, "late", &json!({}))
        .await
        .assert_problem(409, "payment_not_capturable");
    app.cancel(&id, "undo-again", &json!({}))
        .await
        .assert_problem(409, "payment_not_cancelable");
    app.post_refund(&id, "r", &json!({}))
        .await
        .assert_problem(409, "payment_not_refundable");
    assert_eq!(
        app.simulator.capture_calls() + app.simulator.cancel_calls(),
        1
    );
}

#[actix_web::test]
async fn a_cancel_releases_the_authorization_once_with_its_reason() {
    let app = spawn_app().await;
    let id = app.authorized_payment(3000).await;
    let body = json!({"cancellation_reason": "requested_by_customer"});
    let canceled = app.cancel(&id, "cancel-1", &body).await;
    assert_eq!(canceled.status, 200, "{}", canceled.text());
    let payment = canceled.json();
    assert_eq!(payment["status"], "canceled");
    assert_eq!(payment["amount_capturable"], 0);
    assert_eq!(payment["amount_captured"], 0);
    assert_eq!(payment["cancellation_reason"], "requested_by_customer");
    let replay = app.cancel(&id, "cancel-1", &body).await;
    assert_eq!(replay.body, canceled.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(app.simulator.cancels().len(), 1);
    assert_eq!(app.simulator.cancel_calls(), 1);

    let listed = app.get("/v1/payments?status=canceled").await.json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
    assert_eq!(listed["data"][0]["id"], id.as_str());
}

#[actix_web::test]
async fn keys_are_scoped_per_endpoint_and_bad_requests_store_nothing() {
    let app = spawn_app().await;
    let id = app.authorized_payment(1000).await;
    for (body, param) in [
        (json!({"amount": 0}), "amount"),
        (json!({"amount": "5"}), "amount"),
        (json!({"amount": 5, "extra": 1}), "extra"),
    ] {
        let refused = app.capture(&id, "k", &body).await;
        let problem = refused.assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], param);
    }
    let expired = app
        .cancel(&id, "k", &json!({"cancellation_reason": "expired"}))
        .await;
    expired.assert_problem(400, "invalid_request");
    let no_key = app
        .post_json(
            &format!("/v1/payments/{id}/capture"),
            &app.api_key,
            None,
            &json!({}),
        )
        .await;
    no_key.assert_problem(400, "idempotency_key_missing");
    let missing = app
        .capture("pay_0000000000000000000000000000000", "k", &json!({}))
        .await;
    missing.assert_problem(404, "not_found");
    let other_merchant = app.create_merchant("other").await;
    let foreign = app
        .post_json(
            &format!("/v1/payments/{id}/capture"),
            &other_merchant,
            Some("k"),
            &json!({}),
        )
        .await;
    foreign.assert_problem(404, "not_found");
    assert_eq!(
        app.operation_rows().await,
        0,
        "validation and 404 store nothing"
    );

    // The same key on capture and on cancel names two different requests.
    assert_eq!(app.capture(&id, "k", &json!({})).await.status, 200);
    app.cancel(&id, "k", &json!({}))
        .await
        .assert_problem(409, "payment_not_cancelable");
}

#[actix_web::test]
async fn racing_captures_and_cancels_with_different_keys_move_the_payment_once() {
    let provider = spawn_provider().await;
    // Slow answers keep every request in flight at once.
    provider.faults.latency_ms.store(200, Ordering::SeqCst);
    let app = spawn_app_with_provider(&provider, |_| {}).await;
    let id = app.authorized_payment(5000).await;
    let requests = (0..40).map(|i| {
        let app = &app;
        let id = id.clone();
        async move {
            if i % 2 == 0 {
                app.capture(&id, &format!("capture-{i}"), &json!({})).await
            } else {
                app.cancel(&id, &format!("cancel-{i}"), &json!({})).await
            }
        }
    });
    let answers = join_all(requests).await;
    let winners: Vec<&TestResponse> = answers.iter().filter(|r| r.status == 200).collect();
    assert_eq!(winners.len(), 1, "exactly one capture or cancel wins");
    for loser in answers.iter().filter(|r| r.status != 200) {
        let problem = loser.json();
        assert_eq!(loser.status, 409, "{problem}");
        assert!(
            problem["code"] == "payment_not_capturable"
                || problem["code"] == "payment_not_cancelable",
            "{problem}"
        );
    }
    let moved = provider.simulator.captures().len() + provider.simulator.cancels().len();
    assert_eq!(moved, 1, "one provider operation");
    assert_eq!(
        provider.simulator.capture_calls() + provider.simulator.cancel_calls(),
        1,
        "the losers never reached the provider"
    );
    let payment = app.payment_now(&id).await;
    let status = winners[0].json()["status"].clone();
    assert_eq!(payment["status"], status);
    assert_eq!(app.operation_rows().await, 40);
}
