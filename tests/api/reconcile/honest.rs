//! An honest run: money moved every way through `provider-sim` over HTTP, with its faults on
//! (refused and dropped calls), finished by retries, webhooks and recovery; then the books
//! agree: `payments-api reconcile` finds nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use payments_api::provider::sim::server::{self as sim_server, Faults};
use payments_api::provider::sim::{RetryPolicy, Simulator, WebhookDelivery};
use payments_api::signing::WebhookSecret;
use serde_json::{Value, json};

use crate::support::{TEST_WEBHOOK_SECRET, TestApp, spawn_app_with_provider_url, wait_for};

/// Moves money of every kind, each request retried with its key until it is final.
async fn settle(app: &TestApp, path: &str, key: &str, body: &Value) -> Value {
    wait_for(Duration::from_secs(30), &format!("{key} final"), || async {
        let response = app.post_json(path, &app.api_key, Some(key), body).await;
        match response.status.as_u16() {
            200 | 201 => Some(response.json()),
            // Unknown outcome, or the first request still owns the key: ask again.
            202 | 409 if response.json()["code"] != "dispute_not_editable" => None,
            other => panic!("{key}: {other} {}", response.text()),
        }
    })
    .await
}

#[actix_web::test]
async fn after_faults_and_recovery_the_books_agree() {
    // The provider first (its address is the service's PROVIDER_URL), its webhooks to the
    // service once the service is up.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind provider");
    let provider_url = format!("http://{}", listener.local_addr().unwrap());
    let app = spawn_app_with_provider_url(&provider_url, |s| {
        s.provider_timeout = Duration::from_millis(300);
        s.provider_max_attempts = 2;
        s.processing_lease = Duration::from_millis(600);
        s.recovery_interval = Duration::from_millis(100);
        s.ledger.pending = Duration::ZERO;
        s.ledger.fee_percent_bps = 0;
        s.ledger.fee_fixed = 0;
        s.ledger.dispute_fee = 0;
        s.reconcile_interval = None;
    })
    .await;
    let simulator = Arc::new(Simulator::new());
    let faults = Arc::new(Faults::default());
    let delivery = WebhookDelivery::new(
        format!("{}/v1/webhooks/provider", app.address),
        WebhookSecret::parse(TEST_WEBHOOK_SECRET).unwrap(),
        RetryPolicy {
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_millis(200),
            ..RetryPolicy::default()
        },
    );
    let server = sim_server::serve(
        listener,
        simulator.clone(),
        faults.clone(),
        Some((delivery, Duration::from_millis(100))),
    )
    .unwrap();
    actix_web::rt::spawn(server);
    faults
        .fail_rate_ppm
        .store(Faults::rate_to_ppm(0.15), Ordering::SeqCst);
    faults
        .drop_rate_ppm
        .store(Faults::rate_to_ppm(0.10), Ordering::SeqCst);

    // Payments of every kind, at once.
    let methods = [
        "pm_card_visa",
        "pm_card_async",
        "pm_card_declined",
        "pm_card_dispute",
        "pm_card_dispute",
        "pm_card_visa",
    ];
    let payments: Vec<Value> = join_all(methods.iter().enumerate().map(|(n, method)| {
        let body =
            json!({"amount": 1000 + n as i64 * 100, "currency": "usd", "payment_method": method});
        let key = format!("honest-pay-{n}");
        let app = &app;
        async move { settle(app, "/v1/payments", &key, &body).await }
    }))
    .await;
    let manual = json!({"amount": 4000, "currency": "usd", "payment_method": "pm_card_visa",
        "capture_method": "manual"});
    let held = settle(&app, "/v1/payments", "honest-held", &manual).await;
    let held_id = held["id"].as_str().unwrap();
    let mut payments = payments;
    payments.push(
        settle(
            &app,
            &format!("/v1/payments/{held_id}/capture"),
            "honest-capture",
            &json!({"amount": 3000}),
        )
        .await,
    );

    // Refunds (partial and whole) of the plain cards, and payouts from what is available.
    let paid: Vec<&str> = payments
        .iter()
        .filter(|p| p["status"] == "succeeded" && p["payment_method"] != "pm_card_dispute")
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert!(paid.len() >= 3, "{payments:?}");
    for (n, id) in paid.iter().enumerate() {
        let body = if n == 0 {
            json!({"amount": 300})
        } else {
            json!({})
        };
        let path = format!("/v1/payments/{id}/refunds");
        settle(&app, &path, &format!("honest-refund-{n}"), &body).await;
    }
    for (n, destination) in ["ba_test_instant", "ba_test_async", "ba_test_closed"]
        .iter()
        .enumerate()
    {
        let body = json!({"amount": 200, "currency": "usd", "destination": destination});
        settle(&app, "/v1/payouts", &format!("honest-payout-{n}"), &body).await;
    }

    // The disputes the simulator opens: one answered with winning evidence, one accepted.
    let disputed: Vec<&str> = payments
        .iter()
        .filter(|p| p["payment_method"] == "pm_card_dispute")
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    let mut dispute_ids = Vec::new();
    for id in &disputed {
        let dispute = wait_for(Duration::from_secs(30), "the dispute opens", || async {
            let list = app
                .get(&format!("/v1/disputes?payment_id={id}"))
                .await
                .json();
            list["data"].as_array().and_then(|d| d.first().cloned())
        })
        .await;
        dispute_ids.push(dispute["id"].as_str().unwrap().to_owned());
    }
    let win = json!({"evidence": {"text": "winning_evidence"}, "submit": true});
    settle(
        &app,
        &format!("/v1/disputes/{}", dispute_ids[0]),
        "honest-evidence",
        &win,
    )
    .await;
    settle(
        &app,
        &format!("/v1/disputes/{}/close", dispute_ids[1]),
        "honest-close",
        &json!({}),
    )
    .await;

    // Faults off; everything finishes (webhooks, recovery), then the books must agree.
    faults.fail_rate_ppm.store(0, Ordering::SeqCst);
    faults.drop_rate_ppm.store(0, Ordering::SeqCst);
    let unfinished = || async {
        use diesel::dsl::count_star;
        use diesel::prelude::*;
        use payments_api::db::schema::{disputes, payments, payouts, refunds};
        app.state
            .db
            .run(|conn| {
                let p: i64 = payments::table
                    .filter(payments::status.eq("processing"))
                    .select(count_star())
                    .first(conn)?;
                let r: i64 = refunds::table
                    .filter(refunds::status.eq("pending"))
                    .select(count_star())
                    .first(conn)?;
                let o: i64 = payouts::table
                    .filter(payouts::status.eq("pending"))
                    .select(count_star())
                    .first(conn)?;
                let d: i64 = disputes::table
                    .filter(disputes::status.eq_any(["needs_response", "under_review"]))
                    .select(count_star())
                    .first(conn)?;
                Ok(p + r + o + d)
            })
            .await
            .unwrap()
    };
    wait_for(Duration::from_secs(60), "every object final", || async {
        (unfinished().await == 0).then_some(())
    })
    .await;

    let (code, out) =
        super::reconcile_command(&app.state.settings.database_url, &provider_url).await;
    let movements = simulator.settlements.len();
    assert!(movements >= 12, "{movements} movements");
    assert_eq!(
        out.trim(),
        format!("reconciled: {movements} matched, 0 discrepancies")
    );
    assert_eq!(code, 0);
}
