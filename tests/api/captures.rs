//! Authorize now, capture later (§10): every capture and cancel follows the §3 rules, and a
//! payment is captured or canceled at most once, whatever races it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::support::{
    ScriptedProvider, ServiceProcess, TestApp, TestDatabase, TestResponse, provider_answer,
    spawn_app, spawn_app_with, spawn_app_with_provider, spawn_app_with_provider_url,
    spawn_provider, test_client,
};

fn manual(amount: i64) -> Value {
    json!({"amount": amount, "currency": "usd", "payment_method": "pm_card_visa",
           "capture_method": "manual"})
}

impl TestApp {
    /// An authorized manual payment of `amount`: its id.
    async fn authorized_payment(&self, amount: i64) -> String {
        let key = format!("auth-{}", uuid::Uuid::new_v4().simple());
        let response = self.post_payment(&key, &manual(amount)).await;
        assert_eq!(response.status, 201, "{}", response.text());
        let payment = response.json();
        assert_eq!(payment["status"], "requires_capture", "{payment}");
        assert_eq!(payment["amount_capturable"], amount);
        assert_eq!(payment["amount_captured"], 0);
        assert_eq!(payment["capture_method"], "manual");
        payment["id"].as_str().unwrap().to_owned()
    }

    async fn capture(&self, payment_id: &str, key: &str, body: &Value) -> TestResponse {
        let path = format!("/v1/payments/{payment_id}/capture");
        self.post_json(&path, &self.api_key, Some(key), body).await
    }

    async fn cancel(&self, payment_id: &str, key: &str, body: &Value) -> TestResponse {
        let path = format!("/v1/payments/{payment_id}/cancel");
        self.post_json(&path, &self.api_key, Some(key), body).await
    }

    async fn payment_now(&self, payment_id: &str) -> Value {
        self.get(&format!("/v1/payments/{payment_id}")).await.json()
    }

    /// Rows in `payment_operations` (captures and cancels, refusals included).
    async fn operation_rows(&self) -> i64 {
        use diesel::prelude::*;
        use payments_api::db::schema::payment_operations;
        self.state
            .db
            .run(|conn| payment_operations::table.count().get_result(conn))
            .await
            .expect("count operations")
    }
}

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

#[actix_web::test]
async fn an_authorization_nobody_captures_is_canceled_as_expired() {
    let app = spawn_app_with(|s| {
        s.authorization_expiry = Duration::from_millis(300);
        s.recovery_interval = Duration::from_millis(100);
    })
    .await;
    let id = app.authorized_payment(800).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let payment = loop {
        let payment = app.payment_now(&id).await;
        if payment["status"] != "requires_capture" {
            break payment;
        }
        assert!(Instant::now() < deadline, "never expired: {payment}");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(payment["status"], "canceled");
    assert_eq!(payment["cancellation_reason"], "expired");
    assert_eq!(payment["amount_capturable"], 0);
    // Give further expiry passes the chance to (wrongly) act again.
    actix_web::rt::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(app.simulator.cancels().len(), 1);
    assert_eq!(app.simulator.cancel_calls(), 1);
    app.capture(&id, "too-late", &json!({}))
        .await
        .assert_problem(409, "payment_not_capturable");
}

/// Past the expiry the authorization is expired even before the periodic pass reaches it:
/// a capture (or a cancel) then finds it canceled as `expired`, and nothing is captured.
#[actix_web::test]
async fn an_authorization_past_its_expiry_cannot_be_captured_before_the_pass_runs() {
    let app = spawn_app_with(|s| {
        s.authorization_expiry = Duration::from_millis(300);
        // No pass during the test: only the requests see the expiry.
        s.recovery_interval = Duration::from_secs(3600);
    })
    .await;
    let (late, later) = (
        app.authorized_payment(800).await,
        app.authorized_payment(900).await,
    );
    actix_web::rt::time::sleep(Duration::from_millis(400)).await;

    let capture = app.capture(&late, "too-late", &json!({})).await;
    capture.assert_problem(409, "payment_not_capturable");
    let cancel = app.cancel(&later, "too-late", &json!({})).await;
    cancel.assert_problem(409, "payment_not_cancelable");
    for id in [&late, &later] {
        let payment = app.payment_now(id).await;
        assert_eq!(payment["status"], "canceled", "{payment}");
        assert_eq!(payment["cancellation_reason"], "expired");
        assert_eq!(payment["amount_captured"], 0);
    }
    assert!(app.simulator.captures().is_empty());
    assert_eq!(app.simulator.cancels().len(), 2);
    // The refusal is the key's final answer.
    let again = app.capture(&late, "too-late", &json!({})).await;
    assert_eq!(again.body, capture.body);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
}

/// The expiry is decided by the hold, not only by the request's first read: a capture or
/// cancel whose read came before the authorization expired, and whose claim after, is
/// refused (stored as the key's answer), and the expiry still cancels it once.
#[actix_web::test]
async fn an_authorization_that_expires_between_the_read_and_the_claim_is_not_held() {
    use payments_api::auth::Merchant;
    use payments_api::domain::{IdempotencyKey, PaymentId};
    use payments_api::payments::authorization::{
        self, NewCancel, NewCapture, Requested, claim_and_run,
    };
    let app = spawn_app_with(|s| {
        s.authorization_expiry = Duration::from_millis(300);
        s.recovery_interval = Duration::from_secs(3600);
    })
    .await;
    let merchant = Merchant {
        id: app.merchant_id.clone(),
        name: "default".to_owned(),
    };
    let (late, later) = (
        app.authorized_payment(800).await,
        app.authorized_payment(900).await,
    );
    actix_web::rt::time::sleep(Duration::from_millis(400)).await;

    // As a request does after a read that saw the authorization still live.
    let run = |payment: &str, key: &str, requested: Requested| {
        let (payment, key) = (
            PaymentId::parse(payment).unwrap(),
            IdempotencyKey::parse(key.as_bytes()).unwrap(),
        );
        let (state, merchant) = (app.state.clone(), merchant.clone());
        async move { claim_and_run(&state, &merchant, &payment, &key, &requested, None).await }
    };
    let capture = run(
        &late,
        "late",
        Requested::Capture(NewCapture { amount: None }),
    )
    .await
    .unwrap();
    let cancel = run(
        &later,
        "late",
        Requested::Cancel(NewCancel {
            cancellation_reason: None,
        }),
    )
    .await
    .unwrap();
    assert_eq!(capture.status, 409, "{}", capture.body);
    assert!(
        capture.body.contains("payment_not_capturable"),
        "{}",
        capture.body
    );
    assert!(capture.body.contains("expired"), "{}", capture.body);
    assert_eq!(cancel.status, 409, "{}", cancel.body);
    assert!(
        cancel.body.contains("payment_not_cancelable"),
        "{}",
        cancel.body
    );
    assert!(app.simulator.captures().is_empty(), "nothing captured");
    assert!(app.simulator.cancels().is_empty(), "no merchant cancel");

    // The expiry itself still holds them, once per payment.
    assert_eq!(
        authorization::expire_authorizations(&app.state)
            .await
            .unwrap(),
        2
    );
    for id in [&late, &later] {
        let payment = app.payment_now(id).await;
        assert_eq!(payment["status"], "canceled", "{payment}");
        assert_eq!(payment["cancellation_reason"], "expired");
        assert_eq!(payment["amount_captured"], 0);
    }
    assert_eq!(app.simulator.cancels().len(), 2);
    assert_eq!(
        authorization::expire_authorizations(&app.state)
            .await
            .unwrap(),
        0
    );
    // The refusal is the key's final answer, replayed over HTTP.
    let again = app.capture(&late, "late", &json!({})).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.body, capture.body.as_bytes());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
}

/// The provider refusing the expiry's cancel (say, 409: the authorization has lapsed on
/// its side) still ends the authorization here: canceled as `expired`, one event, never
/// captured, and the expiry does not ask again on every pass.
#[actix_web::test]
async fn an_expiry_the_provider_refuses_still_ends_the_authorization_once() {
    use payments_api::payments::authorization;
    let provider = spawn_provider().await;
    let app = spawn_app_with_provider(&provider, |s| {
        s.authorization_expiry = Duration::from_millis(300);
        s.recovery_interval = Duration::from_secs(3600);
    })
    .await;
    let id = app.authorized_payment(700).await;
    actix_web::rt::time::sleep(Duration::from_millis(400)).await;
    let calls_before = provider.faults.http_calls.load(Ordering::SeqCst);
    provider.faults.refuse_next.lock().unwrap().push_back(409);

    assert_eq!(
        authorization::expire_authorizations(&app.state)
            .await
            .unwrap(),
        1
    );
    let payment = app.payment_now(&id).await;
    assert_eq!(payment["status"], "canceled", "{payment}");
    assert_eq!(payment["cancellation_reason"], "expired");
    assert_eq!(payment["amount_capturable"], 0);
    assert_eq!(payment["amount_captured"], 0);
    let events = app.get("/v1/events?type=payment.canceled").await.json();
    assert_eq!(events["data"].as_array().unwrap().len(), 1, "{events}");

    // Nothing more to expire, and nothing can capture it.
    assert_eq!(
        authorization::expire_authorizations(&app.state)
            .await
            .unwrap(),
        0
    );
    app.capture(&id, "late", &json!({}))
        .await
        .assert_problem(409, "payment_not_capturable");
    assert_eq!(
        provider.faults.http_calls.load(Ordering::SeqCst) - calls_before,
        1,
        "one cancel call, refused; no capture call"
    );
    assert!(provider.simulator.captures().is_empty());
}

/// A capture the provider answers `pending` keeps its hold (202): nothing else may
/// capture or cancel the payment meanwhile, and a retry asks again with the same key.
#[actix_web::test]
async fn a_capture_the_provider_leaves_pending_keeps_the_authorization_held() {
    let provider = ScriptedProvider::start(vec![
        provider_answer(r#"{"id": "ch_m", "status": "requires_capture"}"#),
        provider_answer(r#"{"id": "ch_m", "status": "pending"}"#),
        provider_answer(r#"{"id": "ch_m", "status": "succeeded", "amount_captured": 900}"#),
    ]);
    let app = spawn_app_with_provider_url(&provider.url, |s| {
        s.recovery_interval = Duration::from_secs(3600);
    })
    .await;
    let id = app.authorized_payment(900).await;
    let first = app.capture(&id, "cap-1", &json!({})).await;
    assert_eq!(first.status, 202, "{}", first.text());
    assert_eq!(first.json()["status"], "requires_capture");
    app.cancel(&id, "cnl-1", &json!({}))
        .await
        .assert_problem(409, "payment_not_cancelable");
    app.capture(&id, "cap-2", &json!({}))
        .await
        .assert_problem(409, "payment_not_capturable");

    let retry = app.capture(&id, "cap-1", &json!({})).await;
    assert_eq!(retry.status, 200, "{}", retry.text());
    assert_eq!(retry.json()["status"], "succeeded");
    assert_eq!(retry.json()["amount_captured"], 900);
    let calls = provider.calls();
    let captures: Vec<_> = calls
        .iter()
        .filter(|c| c.path.ends_with("/capture"))
        .collect();
    assert_eq!(captures.len(), 2, "{calls:?}");
    assert_eq!(captures[0].idempotency_key, captures[1].idempotency_key);
    assert_eq!(calls.len(), 3, "no cancel reached the provider: {calls:?}");
}

#[actix_web::test]
async fn a_capture_whose_answer_is_lost_answers_202_and_a_retry_captures_once() {
    let provider = spawn_provider().await;
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_timeout = Duration::from_millis(300);
        s.provider_max_attempts = 1;
    })
    .await;
    let id = app.authorized_payment(2500).await;
    // The provider captures, then its answer never arrives.
    provider.faults.drop_next.store(1, Ordering::SeqCst);
    let lost = app.capture(&id, "ship", &json!({})).await;
    assert_eq!(lost.status, 202, "{}", lost.text());
    assert_eq!(
        lost.json()["status"],
        "requires_capture",
        "the payment as it is"
    );
    assert_eq!(provider.simulator.captures().len(), 1, "the money moved");

    let retried = app.capture(&id, "ship", &json!({})).await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(retried.json()["status"], "succeeded");
    assert_eq!(provider.simulator.captures().len(), 1, "captured once");
    assert_eq!(
        provider.simulator.capture_calls(),
        2,
        "asked again, same key"
    );
    // A concurrent cancel meanwhile was refused: the capture held the authorization.
    app.cancel(&id, "nope", &json!({}))
        .await
        .assert_problem(409, "payment_not_cancelable");
}

#[actix_web::test]
async fn an_abandoned_capture_is_finished_by_the_recovery_worker() {
    let provider = spawn_provider().await;
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_timeout = Duration::from_millis(200);
        s.provider_max_attempts = 1;
        // Longer than the request's own attempt: the worker resumes what it gave up.
        s.processing_lease = Duration::from_millis(1000);
        s.recovery_interval = Duration::from_millis(100);
    })
    .await;
    let id = app.authorized_payment(900).await;
    provider.faults.drop_next.store(1, Ordering::SeqCst);
    let lost = app.capture(&id, "ship", &json!({"amount": 700})).await;
    assert_eq!(lost.status, 202, "{}", lost.text());
    let deadline = Instant::now() + Duration::from_secs(10);
    let payment = loop {
        let payment = app.payment_now(&id).await;
        if payment["status"] == "succeeded" {
            break payment;
        }
        assert!(Instant::now() < deadline, "never recovered: {payment}");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(payment["amount_captured"], 700);
    assert_eq!(provider.simulator.captures().len(), 1);
    let replay = app.capture(&id, "ship", &json!({"amount": 700})).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
}

#[actix_web::test]
async fn a_service_killed_mid_capture_captures_once_after_restart() {
    let provider = spawn_provider().await;
    let (_database, url) = TestDatabase::create();
    let key = "sk_test_kill9_capture_000000001".to_owned();
    let env = [
        ("DATABASE_URL", url),
        ("BOOTSTRAP_API_KEY", key.clone()),
        ("PROVIDER_URL", provider.url.clone()),
        ("PROCESSING_LEASE_MS", "1000".to_owned()),
        ("RECOVERY_INTERVAL_MS", "200".to_owned()),
    ];
    let mut service = ServiceProcess::start(&env).await;
    let client = test_client();
    let post = |address: String, path: &str, idempotency_key: &'static str, body: Value| {
        client
            .post(format!("{address}{path}"))
            .insert_header(("Authorization", format!("Bearer {key}")))
            .insert_header(("Idempotency-Key", idempotency_key))
            .send_json(&body)
    };
    let mut created = post(
        service.address.clone(),
        "/v1/payments",
        "hold",
        manual(4200),
    )
    .await
    .expect("created");
    assert_eq!(created.status(), 201);
    let payment: Value = created.json().await.expect("json");
    let capture_path = format!("/v1/payments/{}/capture", payment["id"].as_str().unwrap());

    // The capture is made and the provider is still answering when the process dies.
    provider.faults.latency_ms.store(1500, Ordering::SeqCst);
    let in_flight = actix_web::rt::spawn(post(
        service.address.clone(),
        &capture_path,
        "ship",
        json!({}),
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    while provider.simulator.captures().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the capture never reached the provider"
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    service.kill_9();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the client lost its answer"
    );
    provider.faults.latency_ms.store(0, Ordering::SeqCst);

    let restarted = ServiceProcess::start(&env).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let finished = loop {
        let mut response = post(restarted.address.clone(), &capture_path, "ship", json!({}))
            .await
            .expect("retry answered");
        let body: Value = response.json().await.expect("json body");
        if response.status() == 200 {
            break body;
        }
        assert!(
            response.status() == 202 || response.status() == 409,
            "unexpected {}: {body}",
            response.status()
        );
        assert!(Instant::now() < deadline, "never finished: {body}");
        actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(finished["status"], "succeeded");
    assert_eq!(finished["amount_captured"], 4200);
    assert_eq!(
        provider.simulator.captures().len(),
        1,
        "captured exactly once"
    );
}

#[actix_web::test]
async fn an_async_authorization_is_finished_by_charge_requires_capture() {
    let app = spawn_app_with(|s| s.provider_async_delay = Duration::from_millis(200)).await;
    let body = json!({"amount": 1200, "currency": "usd", "payment_method": "pm_card_async",
                      "capture_method": "manual"});
    let pending = app.post_payment("async-hold", &body).await;
    assert_eq!(pending.status, 202, "{}", pending.text());
    let id = pending.json()["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    let payment = loop {
        let payment = app.payment_now(&id).await;
        if payment["status"] != "processing" {
            break payment;
        }
        assert!(Instant::now() < deadline, "never authorized: {payment}");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(payment["status"], "requires_capture");
    assert_eq!(payment["amount_capturable"], 1200);
    let listed = app.get("/v1/payments?status=requires_capture").await.json();
    assert_eq!(listed["data"][0]["id"], id.as_str());

    let captured = app.capture(&id, "ship", &json!({})).await;
    assert_eq!(captured.status, 200, "{}", captured.text());
    assert_eq!(app.simulator.captures().len(), 1);
    // The create request's key now replays the authorization.
    let replay = app.post_payment("async-hold", &body).await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.json()["status"], "requires_capture");
}
