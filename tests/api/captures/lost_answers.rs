//! Captures the provider leaves pending or whose answer is lost, abandoned captures finished
//! by recovery, a service killed mid-capture, and async authorizations.

use super::*;

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
    let payment = wait_for(
        Duration::from_secs(10),
        "the capture is recovered",
        || async {
            let payment = app.payment_now(&id).await;
            (payment["status"] == "succeeded").then_some(payment)
        },
    )
    .await;
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
    let payment = wait_for(
        Duration::from_secs(10),
        "the payment is authorized",
        || async {
            let payment = app.payment_now(&id).await;
            (payment["status"] != "processing").then_some(payment)
        },
    )
    .await;
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
