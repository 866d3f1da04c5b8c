//! Lost responses, provider outages, crashes and several instances: every one ends in
//! exactly one charge and one final answer.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::Value;

use crate::support::{
    ServiceProcess, TestDatabase, assert_holds_for, spawn_app_with, spawn_app_with_provider,
    spawn_cluster, spawn_provider, test_client, visa, wait_until,
};

#[actix_web::test]
async fn a_provider_500_is_retried_with_the_same_key_and_charges_once() {
    let provider = spawn_provider().await;
    provider.faults.fail_next.store(1, Ordering::SeqCst);
    let app = spawn_app_with_provider(&provider, |s| s.provider_max_attempts = 3).await;

    let response = app.post_payment("retry-500", &visa(1500)).await;
    assert_eq!(response.status, 201, "{}", response.text());
    assert_eq!(response.json()["status"], "succeeded");
    assert_eq!(
        provider.faults.http_calls.load(Ordering::SeqCst),
        2,
        "one 500, one success"
    );
    assert_eq!(app.charges(), 1);
}

/// Any 4xx is the provider's final refusal (CONTRACT §7), 408 and 429 included: nothing
/// moved, so the payment fails at once and nobody asks again, neither a retry nor the
/// recovery worker. A 5xx before it is "outcome unknown": retried with the same key.
#[actix_web::test]
async fn a_charge_the_provider_refuses_fails_at_once_and_is_not_asked_again() {
    let provider = spawn_provider().await;
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_max_attempts = 3;
        s.processing_lease = Duration::from_millis(200);
        s.recovery_interval = Duration::from_millis(100);
    })
    .await;
    let calls = || provider.faults.http_calls.load(Ordering::SeqCst);

    for (key, statuses) in [
        ("refused-409", vec![503, 409]),
        ("refused-408", vec![408]),
        ("refused-429", vec![429]),
    ] {
        let calls_before = calls();
        provider
            .faults
            .refuse_next
            .lock()
            .unwrap()
            .extend(statuses.iter().copied());
        let response = app.post_payment(key, &visa(1500)).await;
        assert_eq!(response.status, 201, "{key}: {}", response.text());
        let payment = response.json();
        assert_eq!(payment["status"], "failed", "{key}");
        assert_eq!(payment["failure_code"], "provider_refused", "{key}");
        let message = payment["failure_message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("the provider refused the charge: provider answered 4"),
            "{key}: {message}"
        );
        assert!(
            !message.contains("simulated"),
            "the provider's own body stays out: {message}"
        );
        assert_eq!(payment["provider_charge_id"], Value::Null, "{key}");
        assert_eq!(
            calls() - calls_before,
            statuses.len() as u64,
            "{key}: only a 5xx is retried"
        );

        // Leases and recovery passes come and go: the payment is final, nobody asks again.
        let asked = statuses.len() as u64;
        assert_holds_for(
            Duration::from_millis(600),
            "nobody asks the provider again",
            || async { calls() - calls_before <= asked },
        )
        .await;
        let retry = app.post_payment(key, &visa(1500)).await;
        assert_eq!(retry.status, 201);
        assert_eq!(retry.header("idempotent-replayed"), Some("true"));
        assert_eq!(retry.body, response.body);
        assert_eq!(
            calls() - calls_before,
            statuses.len() as u64,
            "{key}: asked again"
        );
        let events = app.events_of(payment["id"].as_str().unwrap()).await;
        let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(types, ["payment.failed"], "{key}");
    }
    assert!(provider.simulator.charges().is_empty());
}

/// A refund the provider refuses fails at once, and its amount is free again.
#[actix_web::test]
async fn a_refund_the_provider_refuses_fails_and_frees_its_amount() {
    let provider = spawn_provider().await;
    let app = spawn_app_with_provider(&provider, |s| s.provider_max_attempts = 3).await;
    let payment_id = app.paid_payment(1000).await;
    provider.faults.refuse_next.lock().unwrap().push_back(422);
    let calls_before = provider.faults.http_calls.load(Ordering::SeqCst);

    let refused = app
        .post_refund(&payment_id, "refused", &serde_json::json!({"amount": 400}))
        .await;
    assert_eq!(refused.status, 201, "{}", refused.text());
    let refund = refused.json();
    assert_eq!(refund["status"], "failed");
    assert_eq!(refund["failure_code"], "provider_refused");
    assert_eq!(refund["provider_refund_id"], Value::Null);
    assert_eq!(
        provider.faults.http_calls.load(Ordering::SeqCst),
        calls_before + 1
    );
    assert!(app.provider_refunds().is_empty());
    assert_eq!(app.refund_totals(&payment_id).await, (0, 0));

    // All of the payment is still refundable.
    let full = app
        .post_refund(&payment_id, "full", &serde_json::json!({}))
        .await;
    assert_eq!(full.status, 201, "{}", full.text());
    assert_eq!(full.json()["amount"], 1000);
    assert_eq!(app.refund_totals(&payment_id).await, (1000, 1000));
    assert_eq!(app.provider_refunds().len(), 1);
}

#[actix_web::test]
async fn a_dropped_response_is_retried_and_the_charge_is_not_repeated() {
    let provider = spawn_provider().await;
    provider.faults.drop_next.store(1, Ordering::SeqCst);
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_timeout = Duration::from_millis(300);
        s.provider_max_attempts = 3;
    })
    .await;

    let response = app.post_payment("dropped", &visa(2500)).await;
    assert_eq!(response.status, 201, "{}", response.text());
    let payment = response.json();
    assert_eq!(payment["status"], "succeeded");
    assert_eq!(provider.faults.http_calls.load(Ordering::SeqCst), 2);
    let charges = provider.simulator.charges();
    assert_eq!(charges.len(), 1, "the retry found the first charge");
    assert_eq!(payment["provider_charge_id"], charges[0].id.as_str());
}

#[actix_web::test]
async fn every_answer_lost_gives_202_and_recovery_finishes_with_one_charge() {
    let provider = spawn_provider().await;
    provider.faults.drop_next.store(2, Ordering::SeqCst);
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_timeout = Duration::from_millis(200);
        s.provider_max_attempts = 2;
        // Longer than the request's own attempts (2 × 200 ms and a backoff): the worker
        // resumes the payment the request gave up, not one it is still asking about.
        s.processing_lease = Duration::from_millis(1000);
        s.recovery_interval = Duration::from_millis(100);
    })
    .await;

    let response = app.post_payment("all-lost", &visa(900)).await;
    assert_eq!(response.status, 202, "{}", response.text());
    let pending = response.json();
    assert_eq!(pending["status"], "processing");
    assert_eq!(
        app.charges(),
        1,
        "the provider charged although no answer came back"
    );

    let id = pending["id"].as_str().unwrap();
    let finished = app.wait_until_final(id, Duration::from_secs(10)).await;
    assert_eq!(finished["status"], "succeeded");
    assert_eq!(app.charges(), 1, "resuming used the same idempotency key");

    let retry = app.post_payment("all-lost", &visa(900)).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json(), finished);
}

#[actix_web::test]
async fn the_in_process_providers_answer_later_than_the_timeout_is_an_unknown_outcome() {
    // PROVIDER_LATENCY_MS past PROVIDER_TIMEOUT_MS: the simulator in this process times out
    // as a provider over HTTP would, attempt after attempt, with the money moved.
    let app = spawn_app_with(|s| {
        s.provider_latency = Duration::from_millis(1500);
        s.provider_timeout = Duration::from_millis(200);
        s.provider_max_attempts = 2;
    })
    .await;
    let response = app.post_payment("in-process-timeout", &visa(700)).await;
    assert_eq!(response.status, 202, "{}", response.text());
    assert_eq!(response.json()["status"], "processing");
    assert_eq!(
        app.charges(),
        1,
        "the money moved once, whatever the attempts"
    );
    assert_eq!(app.payment_rows().await, 1);
}

#[actix_web::test]
async fn provider_down_gives_202_and_the_recovery_worker_finishes_once_it_is_back() {
    let provider = spawn_provider().await;
    provider.faults.down.store(true, Ordering::SeqCst);
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_max_attempts = 2;
        s.processing_lease = Duration::from_millis(300);
        s.recovery_interval = Duration::from_millis(100);
    })
    .await;

    let response = app.post_payment("outage", &visa(1200)).await;
    assert_eq!(response.status, 202);
    let id = response.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.charges(), 0);
    // While the provider is down the payment stays processing, whoever retries.
    assert_holds_for(
        Duration::from_millis(500),
        "the payment stays processing while the provider is down",
        || async { app.get(&format!("/v1/payments/{id}")).await.json()["status"] == "processing" },
    )
    .await;
    assert_eq!(
        app.get(&format!("/v1/payments/{id}")).await.json()["status"],
        "processing"
    );

    provider.faults.down.store(false, Ordering::SeqCst);
    let finished = app.wait_until_final(&id, Duration::from_secs(10)).await;
    assert_eq!(finished["status"], "succeeded");
    assert_eq!(app.charges(), 1);
    let retry = app.post_payment("outage", &visa(1200)).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
}

#[actix_web::test]
async fn a_retry_after_202_takes_the_payment_over_at_once() {
    let provider = spawn_provider().await;
    provider.faults.down.store(true, Ordering::SeqCst);
    // A lease far longer than the test: only the 202's release lets the retry in.
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_max_attempts = 1;
        s.processing_lease = Duration::from_secs(600);
        s.recovery_interval = Duration::from_secs(600);
    })
    .await;
    let first = app.post_payment("resume", &visa(300)).await;
    assert_eq!(first.status, 202);
    provider.faults.down.store(false, Ordering::SeqCst);

    let retry = app.post_payment("resume", &visa(300)).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.json()["status"], "succeeded");
    assert_eq!(retry.json()["id"], first.json()["id"]);
    assert_eq!(app.charges(), 1);
    let again = app.post_payment("resume", &visa(300)).await;
    assert_eq!(again.body, retry.body);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
}

#[actix_web::test]
async fn three_instances_on_one_database_charge_once_for_200_identical_requests() {
    let provider = spawn_provider().await;
    provider.faults.latency_ms.store(300, Ordering::SeqCst);
    let (apps, _database) = spawn_cluster(3, &provider, |s| {
        s.bootstrap_api_key = Some("sk_test_cluster_shared_key_0001".to_owned());
    })
    .await;

    let body = visa(7700);
    let responses =
        join_all((0..200).map(|i| apps[i % apps.len()].post_payment("cluster-storm", &body))).await;
    let statuses: HashSet<u16> = responses.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(statuses, HashSet::from([201]));
    let bodies: HashSet<&[u8]> = responses.iter().map(|r| r.body.as_slice()).collect();
    assert_eq!(bodies.len(), 1, "one body across all instances");
    assert_eq!(provider.simulator.charges().len(), 1);
    assert_eq!(
        provider.simulator.charge_calls(),
        1,
        "only the winner called the provider"
    );
    assert_eq!(apps[0].payment_rows().await, 1);
}

#[actix_web::test]
async fn duplicates_of_a_key_claimed_by_another_instance_share_one_poller_per_instance() {
    let provider = spawn_provider().await;
    provider.faults.latency_ms.store(1000, Ordering::SeqCst);
    let (apps, _database) = spawn_cluster(2, &provider, |s| {
        s.bootstrap_api_key = Some("sk_test_cluster_poll_key_0001".to_owned());
    })
    .await;
    let (a, b) = (&apps[0], &apps[1]);
    let body = visa(4200);

    let first = a.post_payment("poll-storm", &body);
    let duplicates = async {
        claimed_in_the_database(b).await;
        let polls_before = b.state.inflight.polls();
        let responses = join_all((0..100).map(|_| b.post_payment("poll-storm", &body))).await;
        (responses, b.state.inflight.polls() - polls_before)
    };
    let (first, (responses, polls)) = futures_util::future::join(first, duplicates).await;

    assert_eq!(first.status, 201, "{}", first.text());
    for response in &responses {
        assert_eq!(response.status, 201, "{}", response.text());
        assert_eq!(
            response.body, first.body,
            "every duplicate gets the first answer"
        );
        assert_eq!(response.header("idempotent-replayed"), Some("true"));
    }
    assert_eq!(provider.simulator.charge_calls(), 1);
    assert_eq!(b.payment_rows().await, 1);
    // One request on B polls while A asks the provider (at most 200 reads in a second);
    // the other 99 wait on it. Polling one by one, 100 keys' worth of pollers would read
    // every 25 ms each: 4 000 times.
    assert!(polls >= 1, "B must have read the row to learn A's answer");
    assert!(
        polls < 1000,
        "{polls} reads of one row: the duplicates polled one by one"
    );
}

/// Waits until the key's claim is stored: from then on a duplicate sent to an instance that
/// did not claim it can learn its outcome only from the database.
async fn claimed_in_the_database(app: &crate::support::TestApp) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while app.payment_rows().await == 0 {
        assert!(Instant::now() < deadline, "the key was never claimed");
        actix_web::rt::time::sleep(Duration::from_millis(10)).await;
    }
}

#[actix_web::test]
async fn duplicates_waiting_in_another_instance_answer_202_when_the_request_gives_up() {
    let provider = spawn_provider().await;
    // The first charge moves the money and is never answered: A times out and answers 202.
    provider.faults.drop_next.store(1, Ordering::SeqCst);
    let (apps, _database) = spawn_cluster(2, &provider, |s| {
        s.bootstrap_api_key = Some("sk_test_cluster_given_up_0001".to_owned());
        s.provider_max_attempts = 1;
        s.provider_timeout = Duration::from_millis(1000);
        s.idempotency_wait = Duration::from_secs(30);
        s.processing_lease = Duration::from_secs(600);
        s.recovery_interval = Duration::from_secs(600);
    })
    .await;
    let (a, b) = (&apps[0], &apps[1]);
    let body = visa(4300);

    let first = a.post_payment("given-up", &body);
    let duplicates = async {
        claimed_in_the_database(b).await;
        join_all((0..10).map(|_| b.post_payment("given-up", &body))).await
    };
    let (first, duplicates) = futures_util::future::join(first, duplicates).await;

    assert_eq!(first.status, 202, "{}", first.text());
    for duplicate in &duplicates {
        // As the duplicates waiting in A's own instance would: the outcome is unknown.
        assert_eq!(duplicate.status, 202, "{}", duplicate.text());
        assert_eq!(duplicate.json()["id"], first.json()["id"]);
        assert_eq!(duplicate.json()["status"], "processing");
        assert_eq!(duplicate.header("idempotent-replayed"), None);
    }
    assert_eq!(
        provider.faults.http_calls.load(Ordering::SeqCst),
        1,
        "no waiting duplicate took the payment over"
    );
    // A retry sent after the 202 takes it over at once, with the same provider key.
    let retry = b.post_payment("given-up", &body).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.json()["status"], "succeeded");
    assert_eq!(provider.simulator.charges().len(), 1);
    assert_eq!(b.payment_rows().await, 1);
}

#[actix_web::test]
async fn a_duplicate_that_took_over_an_expired_lease_replays_the_answer_stored_before_its_own() {
    let provider = spawn_provider().await;
    // A's charge outlives its lease: a duplicate on B takes the payment over and asks the
    // provider again (same key, same charge), and A's answer is stored first.
    provider.faults.latency_ms.store(2500, Ordering::SeqCst);
    let (apps, _database) = spawn_cluster(2, &provider, |s| {
        s.bootstrap_api_key = Some("sk_test_cluster_took_over_0001".to_owned());
        s.processing_lease = Duration::from_millis(1000);
        s.provider_timeout = Duration::from_secs(10);
        s.idempotency_wait = Duration::from_secs(30);
        s.recovery_interval = Duration::from_secs(600);
    })
    .await;
    let (a, b) = (&apps[0], &apps[1]);
    let body = visa(4400);

    let first = a.post_payment("took-over", &body);
    let duplicate = async {
        claimed_in_the_database(b).await;
        b.post_payment("took-over", &body).await
    };
    let (first, duplicate) = futures_util::future::join(first, duplicate).await;

    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.header("idempotent-replayed"), None);
    assert_eq!(
        provider.simulator.charge_calls(),
        2,
        "the duplicate took the payment over and asked the provider again"
    );
    assert_eq!(duplicate.status, 201, "{}", duplicate.text());
    assert_eq!(
        duplicate.body, first.body,
        "the first final answer, byte for byte"
    );
    assert_eq!(duplicate.header("idempotent-replayed"), Some("true"));
    assert_eq!(provider.simulator.charges().len(), 1);
}

#[actix_web::test]
async fn a_service_killed_mid_charge_finishes_the_payment_after_restart_with_one_charge() {
    let provider = spawn_provider().await;
    provider.faults.latency_ms.store(1500, Ordering::SeqCst);
    let (_database, url) = TestDatabase::create();
    let key = "sk_test_kill9_0000000000000001".to_owned();
    let env = [
        ("DATABASE_URL", url),
        ("BOOTSTRAP_API_KEY", key.clone()),
        ("PROVIDER_URL", provider.url.clone()),
        ("PROCESSING_LEASE_MS", "1000".to_owned()),
        ("RECOVERY_INTERVAL_MS", "200".to_owned()),
    ];
    let mut service = ServiceProcess::start(&env).await;
    let client = test_client();
    let post = |address: String| {
        client
            .post(format!("{address}/v1/payments"))
            .insert_header(("Authorization", format!("Bearer {key}")))
            .insert_header(("Idempotency-Key", "crash-1"))
            .send_json(&visa(4400))
    };

    // The charge is made and the provider is still answering when the process dies.
    let in_flight = actix_web::rt::spawn(post(service.address.clone()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while provider.simulator.charges().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the charge never reached the provider"
        );
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
    }
    service.kill_9();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the client lost its answer"
    );

    let restarted = ServiceProcess::start(&env).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let finished = loop {
        let mut response = post(restarted.address.clone())
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
    assert_eq!(finished["status"], "succeeded");
    let charges = provider.simulator.charges();
    assert_eq!(charges.len(), 1, "exactly one charge at the provider");
    assert_eq!(finished["provider_charge_id"], charges[0].id.as_str());
}

#[actix_web::test]
async fn a_refund_whose_answer_was_lost_is_finished_by_recovery_once() {
    let provider = spawn_provider().await;
    let app = spawn_app_with_provider(&provider, |s| {
        s.provider_timeout = Duration::from_millis(200);
        s.provider_max_attempts = 1;
        // Longer than the request's own attempt: the worker resumes what it gave up.
        s.processing_lease = Duration::from_millis(1000);
        s.recovery_interval = Duration::from_millis(100);
    })
    .await;
    let payment_id = app.paid_payment(2000).await;
    provider.faults.drop_next.store(1, Ordering::SeqCst);
    let pending = app
        .post_refund(
            &payment_id,
            "lost-refund",
            &serde_json::json!({"amount": 500}),
        )
        .await;
    assert_eq!(pending.status, 202, "{}", pending.text());
    assert_eq!(
        provider.simulator.refunds().len(),
        1,
        "the money went back, the answer did not"
    );

    wait_until(
        Duration::from_secs(10),
        "the refund is finished",
        || async { app.refund_totals(&payment_id).await == (500, 500) },
    )
    .await;
    assert_eq!(
        provider.simulator.refunds().len(),
        1,
        "resumed with the same refund id"
    );
    let retry = app
        .post_refund(
            &payment_id,
            "lost-refund",
            &serde_json::json!({"amount": 500}),
        )
        .await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.json()["status"], "succeeded");
}

#[actix_web::test]
async fn another_instance_replays_and_refuses_from_the_database() {
    let provider = spawn_provider().await;
    let (apps, _database) = spawn_cluster(2, &provider, |s| {
        s.bootstrap_api_key = Some("sk_test_cluster_shared_key_0002".to_owned());
    })
    .await;
    let first = apps[0].post_payment("cross-instance", &visa(610)).await;
    assert_eq!(first.status, 201);
    // apps[1] never saw this key: its answers come from the stored row.
    let replay = apps[1].post_payment("cross-instance", &visa(610)).await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, first.body);
    apps[1]
        .post_payment("cross-instance", &visa(611))
        .await
        .assert_problem(422, "idempotency_key_reused");
    assert_eq!(provider.simulator.charge_calls(), 1);
}
