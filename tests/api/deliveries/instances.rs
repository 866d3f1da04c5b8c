//! Several instances, a killed one, and an attempt whose outcome the database missed.

use super::*;

#[actix_web::test]
async fn three_instances_never_overlap_attempts_of_one_delivery() {
    let provider = spawn_provider().await;
    let (apps, _database) = spawn_cluster(3, &provider, |s| {
        s.bootstrap_api_key = Some("sk_test_delivery_cluster_00001".to_owned());
        s.webhook_allow_private_urls = true;
        s.webhook_retry_schedule = vec![MS(20), MS(20)];
        s.webhook_timeout = Duration::from_secs(10);
    })
    .await;
    // Slow, and failing twice per event before it succeeds.
    let receiver = Receiver::start(|_, before| {
        Reply::status(if before < 2 { 500 } else { 200 }).after(MS(300))
    })
    .await;
    apps[0].create_endpoint(&receiver.url, &["*"]).await;
    join_all((0..15).map(|i| apps[i % 3].paid_payment(500 + i as i64))).await;

    let received = receiver
        .wait_for("15 successful deliveries", |r| {
            r.iter()
                .filter(|r| r.status == 200 && r.answered.is_some())
                .count()
                >= 15
        })
        .await;
    actix_web::rt::time::sleep(MS(500)).await;
    let mut by_id: HashMap<String, Vec<Received>> = HashMap::new();
    for r in receiver.received() {
        by_id
            .entry(r.header("webhook-id").to_owned())
            .or_default()
            .push(r);
    }
    assert_eq!(by_id.len(), 15, "{} events", by_id.len());
    for (id, mut attempts) in by_id {
        attempts.sort_by_key(|r| r.arrived);
        assert_eq!(attempts.len(), 3, "{id}: {} attempts", attempts.len());
        for pair in attempts.windows(2) {
            assert!(
                pair[0].answered.unwrap() <= pair[1].arrived,
                "{id}: two attempts in flight at once"
            );
        }
    }
    assert!(received.len() >= 45);
}

#[actix_web::test]
async fn a_delivery_in_flight_when_the_instance_is_killed_arrives_after_the_restart() {
    let receiver = Receiver::start(|_, before| {
        // The first attempt hangs: the instance is killed while it waits.
        Reply::status(200).after(if before == 0 {
            Duration::from_secs(120)
        } else {
            Duration::ZERO
        })
    })
    .await;
    let (_database, url) = TestDatabase::create();
    let env = process_env(url, "sk_test_kill9_deliveries_000001");
    let mut service = crate::support::ServiceProcess::start(&env).await;
    let endpoint_id = endpoint_and_payment(&service.address, &env, &receiver.url).await;
    let first = receiver
        .wait_for("the first attempt", |r| r.len() == 1)
        .await;
    service.kill_9();

    let restarted = crate::support::ServiceProcess::start(&env).await;
    let received = receiver
        .wait_for("the attempt after the restart", |r| r.len() == 2)
        .await;
    assert_eq!(
        received[1].header("webhook-id"),
        first[0].header("webhook-id")
    );
    assert_eq!(received[1].body, first[0].body);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let deliveries = deliveries_of(&restarted.address, &env, &endpoint_id).await;
        if deliveries[0]["status"] == "succeeded" {
            break;
        }
        assert!(Instant::now() < deadline, "{deliveries:?}");
        actix_web::rt::time::sleep(MS(100)).await;
    }
}

#[actix_web::test]
async fn sigterm_lets_an_attempt_in_flight_end_and_records_it() {
    let receiver = Receiver::start(|_, _| Reply::status(200).after(MS(1500))).await;
    let (_database, url) = TestDatabase::create();
    let env = process_env(url, "sk_test_sigterm_deliveries_00001");
    let mut service = crate::support::ServiceProcess::start(&env).await;
    let endpoint_id = endpoint_and_payment(&service.address, &env, &receiver.url).await;
    receiver.wait_for("the attempt", |r| r.len() == 1).await;
    let exited = service.terminate().await;
    assert!(exited.success(), "{exited:?}");
    assert!(
        receiver.received()[0].answered.is_some(),
        "the receiver answered before the process exited"
    );
    // Recorded before the exit: nothing is left for a lease to run out on and be sent again.
    let restarted = crate::support::ServiceProcess::start(&env).await;
    let deliveries = deliveries_of(&restarted.address, &env, &endpoint_id).await;
    assert_eq!(deliveries[0]["status"], "succeeded", "{deliveries:?}");
    assert_eq!(deliveries[0]["attempts"], 1, "{deliveries:?}");
    assert_eq!(deliveries[0]["last_attempt"]["status_code"], 200);
    assert_eq!(receiver.received().len(), 1);
}

/// The real binary's settings for the tests above: a 2 s attempt timeout, so a lease left
/// by a killed process runs out within the test.
fn process_env(url: String, key: &str) -> [(&'static str, String); 4] {
    [
        ("DATABASE_URL", url),
        ("BOOTSTRAP_API_KEY", key.to_owned()),
        ("WEBHOOK_ALLOW_PRIVATE_URLS", "true".to_owned()),
        ("WEBHOOK_TIMEOUT_MS", "2000".to_owned()),
    ]
}

fn bearer(env: &[(&str, String)]) -> String {
    let key = env.iter().find(|(name, _)| *name == "BOOTSTRAP_API_KEY");
    format!(
        "Bearer {}",
        key.map(|(_, k)| k.as_str()).unwrap_or_default()
    )
}

/// An endpoint for every event at `receiver`, then one paid payment; the endpoint's id.
async fn endpoint_and_payment(address: &str, env: &[(&str, String)], receiver: &str) -> String {
    let client = test_client();
    let created: Value = client
        .post(format!("{address}/v1/webhook_endpoints"))
        .insert_header(("Authorization", bearer(env)))
        .send_json(&json!({"url": receiver, "enabled_events": ["*"]}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paid = client
        .post(format!("{address}/v1/payments"))
        .insert_header(("Authorization", bearer(env)))
        .insert_header(("Idempotency-Key", "process-delivery"))
        .send_json(&visa(3300))
        .await
        .unwrap();
    assert_eq!(paid.status(), 201);
    created["id"].as_str().unwrap().to_owned()
}

/// The endpoint's one delivery list (exactly one delivery: the payment's event).
async fn deliveries_of(address: &str, env: &[(&str, String)], endpoint_id: &str) -> Vec<Value> {
    let deliveries: Value = test_client()
        .get(format!(
            "{address}/v1/webhook_endpoints/{endpoint_id}/deliveries"
        ))
        .insert_header(("Authorization", bearer(env)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let data = deliveries["data"].as_array().cloned().unwrap_or_default();
    assert_eq!(data.len(), 1, "{deliveries}");
    data
}

#[actix_web::test]
async fn an_attempt_whose_outcome_the_database_missed_is_made_again_once_it_is_back() {
    let receiver = Receiver::start(|_, before| {
        Reply::status(200).after(if before == 0 {
            MS(1000)
        } else {
            Duration::ZERO
        })
    })
    .await;
    let Some((app, proxy, _schema)) = crate::support::app_behind_proxy(|s| {
        s.webhook_allow_private_urls = true;
        s.webhook_timeout = Duration::from_secs(2);
    })
    .await
    else {
        return;
    };
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let first = receiver
        .wait_for("the first attempt", |r| r.len() == 1)
        .await;
    // The database goes away while the attempt is in flight: its 200 cannot be recorded.
    proxy.cut();
    receiver
        .wait_for("the answer to the first attempt", |r| {
            r[0].answered.is_some()
        })
        .await;
    // Longer than a pool checkout may wait (3 s): recording the attempt must fail, not
    // merely wait for the database to come back.
    actix_web::rt::time::sleep(MS(4000)).await;
    proxy.restore();
    let received = receiver
        .wait_for("the attempt again", |r| r.len() == 2)
        .await;
    assert_eq!(
        received[1].header("webhook-id"),
        first[0].header("webhook-id")
    );
    assert_eq!(received[1].body, first[0].body);
    let delivered = app.wait_for_delivery(&endpoint_id, "succeeded").await;
    assert_eq!(delivered["attempts"], 1, "the attempt that was recorded");
}
