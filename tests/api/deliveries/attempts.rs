//! Deliveries and their attempts: signed bodies, the retry schedule, Retry-After, 410 and
//! disabling, hanging endpoints, and replaying failed deliveries.

use super::*;

#[actix_web::test]
async fn a_change_is_delivered_signed_with_the_events_exact_body_to_each_matching_endpoint() {
    let app = app_delivering(|_| {}).await;
    let all = Receiver::always(200).await;
    let refunds_only = Receiver::always(204).await;
    let (all_id, all_secret) = app.create_endpoint(&all.url, &["*"]).await;
    let (refunds_id, refunds_secret) = app
        .create_endpoint(&refunds_only.url, &["refund.succeeded"])
        .await;

    let payment_id = app.paid_payment(2500).await;
    let received = all.wait_for("the payment event", |r| !r.is_empty()).await;
    let delivery = &received[0];
    let event = app.get("/v1/events").await.json()["data"][0].clone();
    assert_eq!(event["type"], "payment.succeeded");
    assert_eq!(event["data"]["object"]["id"], payment_id.as_str());
    assert_eq!(delivery.header("webhook-id"), event["id"].as_str().unwrap());
    let by_id = app
        .get(&format!("/v1/events/{}", event["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        delivery.body, by_id.body,
        "the body is the event, byte for byte"
    );
    assert_eq!(delivery.header("content-type"), "application/json");
    assert!(
        delivery.header("user-agent").starts_with("payments-api/"),
        "{}",
        delivery.header("user-agent")
    );
    assert_eq!(signature_matches(&all_secret, delivery), [true]);
    assert_eq!(signature_matches(&refunds_secret, delivery), [false]);

    let refund = app
        .post_refund(&payment_id, "deliver-refund", &json!({"amount": 100}))
        .await;
    assert_eq!(refund.status, 201);
    let got = refunds_only
        .wait_for("the refund event", |r| !r.is_empty())
        .await;
    assert_eq!(got.len(), 1, "the payment event is not for this endpoint");
    assert_eq!(got[0].json()["type"], "refund.succeeded");
    assert_eq!(got[0].json()["data"]["object"], refund.json());
    assert_eq!(signature_matches(&refunds_secret, &got[0]), [true]);
    all.wait_for("both events", |r| r.len() == 2).await;

    let succeeded = app.wait_for_delivery(&all_id, "succeeded").await;
    assert_eq!(succeeded["object"], "webhook_delivery");
    assert_eq!(succeeded["attempts"], 1);
    assert_eq!(succeeded["next_attempt_at"], Value::Null);
    assert_eq!(succeeded["last_attempt"]["status_code"], 200);
    assert_eq!(succeeded["endpoint_id"], all_id.as_str());
    app.wait_for_delivery(&refunds_id, "succeeded").await;
    // Each event once per endpoint: nothing arrives twice.
    assert_holds_for(MS(700), "nothing arrives twice", || async {
        all.received().len() <= 2 && refunds_only.received().len() <= 1
    })
    .await;
    let mut seen = ids(&all.received());
    seen.sort();
    seen.dedup();
    assert_eq!((all.received().len(), seen.len()), (2, 2));
    assert_eq!(refunds_only.received().len(), 1);
}

#[actix_web::test]
async fn failed_attempts_are_retried_on_the_schedule_with_the_same_id_then_the_delivery_fails() {
    let app = app_delivering(|s| s.webhook_retry_schedule = vec![MS(300), MS(600)]).await;
    let receiver = Receiver::always(500).await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;

    let received = receiver.wait_for("three attempts", |r| r.len() == 3).await;
    let failed = app.wait_for_delivery(&endpoint_id, "failed").await;
    assert_eq!(failed["attempts"], 3, "two delays: three attempts");
    assert_eq!(failed["last_attempt"]["status_code"], 500);
    assert_eq!(failed["last_attempt"]["error"], "answered 500");
    assert_eq!(failed["next_attempt_at"], Value::Null);
    let first_id = received[0].header("webhook-id");
    assert!(received.iter().all(|r| r.header("webhook-id") == first_id));
    assert!(received.iter().all(|r| r.body == received[0].body));
    // Each delay (less 20 % jitter) runs from the end of the failed attempt.
    let gap = |a: &Received, b: &Received| b.arrived - a.answered.unwrap();
    assert!(
        gap(&received[0], &received[1]) >= MS(240),
        "{:?}",
        gap(&received[0], &received[1])
    );
    assert!(
        gap(&received[1], &received[2]) >= MS(480),
        "{:?}",
        gap(&received[1], &received[2])
    );
    assert_holds_for(MS(1000), "no attempt after the last", || async {
        receiver.received().len() <= 3
    })
    .await;
    assert_eq!(receiver.received().len(), 3, "no attempt after the last");

    let metrics = app.request("GET", "/metrics", &[], Vec::new()).await.text();
    for series in [
        "webhook_deliveries_total{outcome=\"retrying\"}",
        "webhook_deliveries_total{outcome=\"failed\"}",
        "webhook_delivery_attempt_duration_seconds_count",
        "webhook_delivery_oldest_pending_seconds",
    ] {
        assert!(metrics.contains(series), "{series} missing");
    }
}

/// A retry is attempted when it falls due, not at the worker's next 250 ms pass: with
/// delays of 100 ms (80–120 with jitter) a pass every 250 ms made every gap 250 ms or more.
#[actix_web::test]
async fn a_retry_is_attempted_when_it_falls_due_not_at_the_next_polling_pass() {
    let app = app_delivering(|s| s.webhook_retry_schedule = vec![MS(100); 6]).await;
    let receiver = Receiver::always(500).await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let received = receiver.wait_for("seven attempts", |r| r.len() == 7).await;
    app.wait_for_delivery(&endpoint_id, "failed").await;
    let gaps: Vec<Duration> = received
        .windows(2)
        .map(|pair| pair[1].arrived - pair[0].answered.unwrap())
        .collect();
    assert!(gaps.iter().all(|gap| *gap >= MS(80)), "{gaps:?}");
    assert!(gaps.iter().min().unwrap() < &MS(200), "{gaps:?}");
}

#[actix_web::test]
async fn a_retry_after_on_503_is_honoured_and_a_3xx_is_a_failure() {
    let app = app_delivering(|s| s.webhook_retry_schedule = vec![MS(100), MS(100)]).await;
    let receiver = Receiver::start(|_, before| match before {
        0 => Reply {
            status: 503,
            headers: vec![("Retry-After", "2".to_owned())],
            delay: Duration::ZERO,
        },
        1 => Reply {
            status: 302,
            headers: vec![("Location", "http://127.0.0.1:9/elsewhere".to_owned())],
            delay: Duration::ZERO,
        },
        _ => Reply::status(200),
    })
    .await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let received = receiver.wait_for("three attempts", |r| r.len() == 3).await;
    let waited = received[1].arrived - received[0].answered.unwrap();
    assert!(
        waited >= Duration::from_secs(2),
        "Retry-After: 2 honoured, waited {waited:?}"
    );
    let delivered = app.wait_for_delivery(&endpoint_id, "succeeded").await;
    assert_eq!(delivered["attempts"], 3, "the redirect was not followed");
}

#[actix_web::test]
async fn a_410_disables_the_endpoint_and_enabling_it_resumes_what_is_pending() {
    let app = app_delivering(|s| s.webhook_retry_schedule = vec![MS(1500)]).await;
    let receiver = Receiver::always(410).await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let failed = app.wait_for_delivery(&endpoint_id, "failed").await;
    assert_eq!(failed["attempts"], 1, "410: no retry");
    assert_eq!(app.endpoint_status(&endpoint_id).await, "disabled");
    // Disabled: new events are not queued for it.
    app.paid_payment(1100).await;
    assert_holds_for(
        MS(500),
        "nothing is sent to a disabled endpoint",
        || async { receiver.received().len() <= 1 },
    )
    .await;
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(app.deliveries(&endpoint_id).await.len(), 1);

    // Enabled again; a failure leaves a delivery pending, a disable holds it, an enable
    // resumes it.
    receiver.behave(|_, before| Reply::status(if before == 0 { 500 } else { 200 }));
    let enabled = app
        .endpoint_post(&endpoint_id, "", &json!({"status": "enabled"}))
        .await;
    assert_eq!(enabled.status, 200, "{}", enabled.text());
    assert_eq!(enabled.json()["status"], "enabled");
    app.paid_payment(1200).await;
    receiver
        .wait_for("the failed first attempt", |r| r.len() == 2)
        .await;
    let disabled = app
        .endpoint_post(&endpoint_id, "", &json!({"status": "disabled"}))
        .await;
    assert_eq!(disabled.json()["status"], "disabled");
    assert_holds_for(
        MS(2500),
        "nothing is sent to a disabled endpoint",
        || async { receiver.received().len() <= 2 },
    )
    .await;
    assert_eq!(
        receiver.received().len(),
        2,
        "nothing is sent to a disabled endpoint"
    );
    assert_eq!(
        app.deliveries(&endpoint_id).await[0]["status"],
        "pending",
        "but what is pending stays pending"
    );
    app.endpoint_post(&endpoint_id, "", &json!({"status": "enabled"}))
        .await;
    let received = receiver
        .wait_for("the resumed delivery", |r| r.len() == 3)
        .await;
    assert_eq!(
        received[1].header("webhook-id"),
        received[2].header("webhook-id")
    );
    assert_eq!(received[2].status, 200);
}

#[actix_web::test]
async fn an_endpoint_failing_for_webhook_disable_after_ms_is_disabled() {
    let app = app_delivering(|s| {
        s.webhook_retry_schedule = vec![MS(100); 50];
        s.webhook_disable_after = MS(600);
    })
    .await;
    let receiver = Receiver::always(500).await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.endpoint_status(&endpoint_id).await != "disabled" {
        assert!(Instant::now() < deadline, "never disabled");
        actix_web::rt::time::sleep(MS(50)).await;
    }
    let attempts = receiver.received();
    let span = attempts.last().unwrap().answered.unwrap() - attempts[0].answered.unwrap();
    assert!(span >= MS(600), "disabled after {span:?} of failures");
    assert_holds_for(MS(800), "no attempt once disabled", || async {
        receiver.received().len() <= attempts.len()
    })
    .await;
    assert_eq!(
        receiver.received().len(),
        attempts.len(),
        "no attempt once disabled"
    );
}

#[actix_web::test]
async fn a_hanging_endpoint_does_not_delay_deliveries_to_another() {
    let app = app_delivering(|s| s.webhook_timeout = Duration::from_secs(60)).await;
    let hanging = Receiver::start(|_, _| Reply::status(200).after(Duration::from_secs(120))).await;
    let healthy = Receiver::always(200).await;
    app.create_endpoint(&hanging.url, &["*"]).await;
    app.create_endpoint(&healthy.url, &["*"]).await;
    for i in 0..20 {
        app.paid_payment(100 + i).await;
    }
    // Well inside the hanging endpoint's 60 s timeout: nothing waits for it.
    let started = Instant::now();
    healthy.wait_for("all 20 events", |r| r.len() == 20).await;
    assert!(started.elapsed() < Duration::from_secs(30));
    let held = hanging.received();
    assert!(
        (1..=payments_api::deliveries::slots::MAX_IN_FLIGHT_PER_ENDPOINT).contains(&held.len()),
        "{} attempts in flight to one endpoint",
        held.len()
    );
    assert!(held.iter().all(|r| r.answered.is_none()), "still hanging");
}

/// More hanging endpoints than the shared slots can serve (4 each would be 80 of 64): the
/// healthy endpoint still has its own first slot, so it waits for none of them.
#[actix_web::test]
async fn many_hanging_endpoints_do_not_delay_deliveries_to_another() {
    use payments_api::deliveries::slots::{MAX_EXTRA_IN_FLIGHT, MAX_IN_FLIGHT_PER_ENDPOINT};
    let app = app_delivering(|s| s.webhook_timeout = Duration::from_secs(60)).await;
    let hanging = Receiver::start(|_, _| Reply::status(200).after(Duration::from_secs(120))).await;
    let healthy = Receiver::always(200).await;
    let slow_endpoints = MAX_EXTRA_IN_FLIGHT / (MAX_IN_FLIGHT_PER_ENDPOINT - 1) + 4;
    for i in 0..slow_endpoints {
        app.create_endpoint(&format!("{}/slow/{i}", hanging.url), &["*"])
            .await;
    }
    for i in 0..8 {
        app.paid_payment(100 + i).await;
    }
    // Every hanging endpoint holds what it may before the healthy one is added.
    hanging
        .wait_for("the hanging endpoints' slots", |r| {
            r.len() >= slow_endpoints + MAX_EXTRA_IN_FLIGHT
        })
        .await;
    app.create_endpoint(&healthy.url, &["*"]).await;
    for i in 0..5 {
        app.paid_payment(200 + i).await;
    }
    // Well inside the hanging endpoints' 60 s timeout: nothing waits for them.
    healthy.wait_for("5 events", |r| r.len() == 5).await;
    let held = hanging.received();
    assert_eq!(
        held.len(),
        slow_endpoints + MAX_EXTRA_IN_FLIGHT,
        "in flight"
    );
    assert!(held.iter().all(|r| r.answered.is_none()), "still hanging");
}

#[actix_web::test]
async fn replay_delivers_failed_events_again_with_their_original_id() {
    let app = app_delivering(|s| s.webhook_retry_schedule = Vec::new()).await;
    let receiver = Receiver::always(500).await;
    let since = chrono::Utc::now() - chrono::TimeDelta::minutes(1);
    let (endpoint_id, secret) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    app.wait_for_delivery(&endpoint_id, "failed").await;
    let first = receiver.received()[0].clone();

    receiver.behave(|_, _| Reply::status(200));
    let body = json!({"since": since.to_rfc3339()});
    let key = "replay-1";
    let post = |body: Value| {
        let path = format!("/v1/webhook_endpoints/{endpoint_id}/replay");
        let app = &app;
        async move { app.post_json(&path, &app.api_key, Some(key), &body).await }
    };
    let replayed = post(body.clone()).await;
    assert_eq!(replayed.status, 202, "{}", replayed.text());
    assert_eq!(replayed.json(), json!({"queued": 1}));
    let again = post(body.clone()).await;
    assert_eq!(
        (again.status.as_u16(), again.body.clone()),
        (202, replayed.body.clone())
    );
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    post(json!({"since": since.to_rfc3339(), "status": "all"}))
        .await
        .assert_problem(422, "idempotency_key_reused");

    let received = receiver.wait_for("the replay", |r| r.len() == 2).await;
    assert_eq!(received[1].header("webhook-id"), first.header("webhook-id"));
    assert_eq!(received[1].body, first.body);
    assert_eq!(signature_matches(&secret, &received[1]), [true]);
    app.wait_for_delivery(&endpoint_id, "succeeded").await;

    // Nothing failed any more; `all` sends it once more.
    let since = since.to_rfc3339();
    assert_eq!(app.replay_since(&endpoint_id, &since, None).await, 0);
    assert_eq!(app.replay_since(&endpoint_id, &since, Some("all")).await, 1);
    receiver
        .wait_for("the second replay", |r| r.len() == 3)
        .await;
    let future = (chrono::Utc::now() + chrono::TimeDelta::minutes(1)).to_rfc3339();
    assert_eq!(app.replay_since(&endpoint_id, &future, None).await, 0);
}

/// The replay's limit counts only events that concern the endpoint: a failed delivery
/// behind more than the limit of the merchant's other events is still replayed.
#[actix_web::test]
async fn replay_finds_a_failed_delivery_behind_more_other_events_than_its_limit() {
    use payments_api::events::{self, EventType, NewEvent};
    use payments_api::webhook_endpoints::REPLAY_LIMIT;
    let app = app_delivering(|s| s.webhook_retry_schedule = Vec::new()).await;
    let receiver = Receiver::always(500).await;
    let since = chrono::Utc::now() - chrono::TimeDelta::minutes(1);
    let (endpoint_id, _) = app
        .create_endpoint(&receiver.url, &["payment.failed"])
        .await;
    // More events than a replay looks at, none of them for this endpoint.
    let merchant_id = app.merchant_id.clone();
    app.state
        .db
        .run(move |conn| {
            use diesel::Connection;
            conn.transaction(|conn| {
                let others = usize::try_from(REPLAY_LIMIT).unwrap() + 10;
                for _ in 0..others / 1000 + 1 {
                    let batch: Vec<NewEvent<'_>> = (0..1000)
                        .map(|_| NewEvent {
                            merchant_id: &merchant_id,
                            kind: EventType::PaymentSucceeded,
                            object_id: "pay_other",
                            object: "{}",
                            request: None,
                        })
                        .collect();
                    events::record_all(conn, &batch, &[])?;
                }
                Ok(())
            })
        })
        .await
        .expect("other events recorded");
    let declined = json!({"amount": 500, "currency": "usd", "payment_method": "pm_card_declined"});
    assert_eq!(app.post_payment("declined", &declined).await.status, 201);
    app.wait_for_delivery(&endpoint_id, "failed").await;

    receiver.behave(|_, _| Reply::status(200));
    let since = since.to_rfc3339();
    assert_eq!(app.replay_since(&endpoint_id, &since, None).await, 1);
    assert_eq!(
        app.replay_since(&endpoint_id, &since, Some("all")).await,
        0,
        "the replay is still pending"
    );
    let received = receiver.wait_for("the replay", |r| r.len() == 2).await;
    assert_eq!(
        received[1].header("webhook-id"),
        received[0].header("webhook-id")
    );
}
