//! Payouts whose outcome was lost (the provider's answer dropped, or the service killed while
//! the provider answered): resumed with the same provider key, so each ends with exactly one
//! payout at the provider, its final answer replayed, and a ledger that holds.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::future::join;
use serde_json::{Value, json};

use crate::ledger::verify_command;
use crate::payouts::{final_payout, funds_at_once};
use crate::support::{
    ServiceProcess, TestDatabase, spawn_app_with_provider, spawn_provider, test_client, visa,
};

#[actix_web::test]
async fn payouts_whose_answers_were_lost_are_finished_by_recovery_once() {
    let provider = spawn_provider().await;
    let app = spawn_app_with_provider(&provider, |s| {
        funds_at_once(s);
        s.provider_timeout = Duration::from_millis(200);
        s.provider_max_attempts = 1;
        // Longer than the requests' own attempts: the worker resumes the payouts the
        // requests gave up, not ones they are still asking about.
        s.processing_lease = Duration::from_millis(1000);
        s.recovery_interval = Duration::from_millis(100);
    })
    .await;
    app.paid_payment(5000).await;
    let calls = || provider.faults.http_calls.load(Ordering::SeqCst);
    let calls_before = calls();

    // The provider pays both out (one to be paid, one the bank refuses) and neither
    // answer comes back.
    provider.faults.drop_next.store(2, Ordering::SeqCst);
    let paid_body = json!({"amount": 2000, "currency": "usd"});
    let failed_body = json!({"amount": 1000, "currency": "usd", "destination": "ba_test_declined"});
    // Both at once: each takes one of the dropped answers, long before the worker
    // resumes either.
    let answers = join(
        app.post_payout("lost-paid", &paid_body),
        app.post_payout("lost-failed", &failed_body),
    )
    .await;
    let mut pending = Vec::new();
    for (key, response) in [("lost-paid", answers.0), ("lost-failed", answers.1)] {
        assert_eq!(response.status, 202, "{key}: {}", response.text());
        let payout = response.json();
        assert_eq!(payout["status"], "pending", "{key}");
        assert_eq!(payout["provider_payout_id"], Value::Null, "{key}");
        pending.push(payout["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        provider.simulator.payouts.all().len(),
        2,
        "the money went out, the answers did not"
    );
    // Both amounts are out of the balance while their outcome is unknown.
    assert_eq!(app.available_usd().await, 2000);

    let paid = final_payout(&app, &pending[0]).await;
    let failed = final_payout(&app, &pending[1]).await;
    assert_eq!(paid["status"], "paid");
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_code"], "account_frozen");

    // Resumed with the same provider key: still one payout each at the provider, asked
    // twice each (the lost call, the recovery worker's).
    let at_provider = provider.simulator.payouts.all();
    assert_eq!(at_provider.len(), 2, "one provider payout per payout");
    assert_eq!(provider.simulator.payouts.calls(), 4);
    assert_eq!(calls() - calls_before, 4);
    for payout in [&paid, &failed] {
        let reference = payout["id"].as_str().unwrap();
        let theirs = at_provider
            .iter()
            .find(|p| p.reference == reference)
            .unwrap_or_else(|| panic!("no provider payout for {reference}"));
        assert_eq!(payout["provider_payout_id"], theirs.id.as_str());
    }
    // Finished by the worker, not by a request.
    let paid_events = app.get("/v1/events?type=payout.paid").await.json();
    assert_eq!(paid_events["data"].as_array().unwrap().len(), 1);
    assert_eq!(paid_events["data"][0]["data"]["object"]["id"], pending[0]);
    assert_eq!(paid_events["data"][0]["request"], Value::Null);

    // Retries with the same keys learn the final answers, and nobody asks again.
    for (key, body, finished) in [
        ("lost-paid", &paid_body, &paid),
        ("lost-failed", &failed_body, &failed),
    ] {
        let retry = app.post_payout(key, body).await;
        assert_eq!(retry.status, 201, "{key}: {}", retry.text());
        assert_eq!(retry.header("idempotent-replayed"), Some("true"), "{key}");
        assert_eq!(&retry.json(), finished, "{key}");
    }
    assert_eq!(provider.simulator.payouts.calls(), 4);
    assert_eq!(calls() - calls_before, 4);

    assert_eq!(app.movements_of(&pending[0]).await, ["payout -2000"]);
    assert_eq!(
        app.movements_of(&pending[1]).await,
        ["payout -1000", "payout_failure 1000"]
    );
    assert_eq!(app.available_usd().await, 3000);
    // The ledger is verified when `app` stops.
}

#[actix_web::test]
async fn a_service_killed_mid_payout_finishes_it_after_restart_with_one_provider_payout() {
    let provider = spawn_provider().await;
    let (_database, url) = TestDatabase::create();
    let key = "sk_test_kill9_payout_00000000001".to_owned();
    let env = [
        ("DATABASE_URL", url.clone()),
        ("BOOTSTRAP_API_KEY", key.clone()),
        ("PROVIDER_URL", provider.url.clone()),
        ("PROCESSING_LEASE_MS", "2000".to_owned()),
        ("RECOVERY_INTERVAL_MS", "200".to_owned()),
        ("BALANCE_PENDING_MS", "0".to_owned()),
        ("FEE_PERCENT_BPS", "0".to_owned()),
        ("FEE_FIXED", "0".to_owned()),
    ];
    let mut service = ServiceProcess::start(&env).await;
    let client = test_client();
    let auth = ("Authorization", format!("Bearer {key}"));
    let post = |address: &str, path: &str, idempotency_key: &str, body: &Value| {
        client
            .post(format!("{address}{path}"))
            .insert_header(auth.clone())
            .insert_header(("Idempotency-Key", idempotency_key.to_owned()))
            .send_json(body)
    };
    let get = |address: &str, path: &str| {
        let request = client
            .get(format!("{address}{path}"))
            .insert_header(auth.clone())
            .send();
        async move {
            let mut response = request.await.expect("answered");
            assert_eq!(response.status(), 200);
            response.json::<Value>().await.expect("json body")
        }
    };

    for i in 0..2 {
        let response = post(
            &service.address,
            "/v1/payments",
            &format!("fund-{i}"),
            &visa(3000),
        )
        .await
        .expect("answered");
        assert_eq!(response.status(), 201);
    }
    let balance = get(&service.address, "/v1/balance").await;
    assert_eq!(
        balance["available"],
        json!([{"currency": "usd", "amount": 6000}])
    );

    // The payout is made and the provider is still answering when the process dies.
    provider.faults.latency_ms.store(1500, Ordering::SeqCst);
    let payout = json!({"amount": 4500, "currency": "usd"});
    let in_flight = actix_web::rt::spawn(post(
        &service.address,
        "/v1/payouts",
        "payout-crash-1",
        &payout,
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    while provider.simulator.payouts.all().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the payout never reached the provider"
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    service.kill_9();
    provider.faults.latency_ms.store(0, Ordering::SeqCst);
    assert!(
        in_flight.await.unwrap().is_err(),
        "the client lost its answer"
    );

    let restarted = ServiceProcess::start(&env).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let finished = loop {
        let mut response = post(&restarted.address, "/v1/payouts", "payout-crash-1", &payout)
            .await
            .expect("retry answered");
        let body: Value = response.json().await.expect("json body");
        if response.status() == 201 {
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
    assert_eq!(finished["status"], "paid");
    let at_provider = provider.simulator.payouts.all();
    assert_eq!(at_provider.len(), 1, "exactly one payout at the provider");
    assert_eq!(
        provider.simulator.payouts.calls(),
        2,
        "asked once before the crash and once to resume, with the same key"
    );
    assert_eq!(finished["provider_payout_id"], at_provider[0].id.as_str());
    assert_eq!(at_provider[0].reference, finished["id"].as_str().unwrap());

    let id = finished["id"].as_str().unwrap();
    let moved = get(
        &restarted.address,
        &format!("/v1/balance_transactions?source={id}"),
    )
    .await;
    let moved = moved["data"].as_array().unwrap();
    assert_eq!(moved.len(), 1, "{moved:?}");
    assert_eq!(
        (&moved[0]["type"], &moved[0]["amount"]),
        (&json!("payout"), &json!(-4500))
    );
    let balance = get(&restarted.address, "/v1/balance").await;
    assert_eq!(
        balance["available"],
        json!([{"currency": "usd", "amount": 1500}])
    );

    drop(restarted);
    let (code, out) = verify_command(&url);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("3 transactions"), "{out}");
    assert!(out.contains("0 violations"), "{out}");
}
