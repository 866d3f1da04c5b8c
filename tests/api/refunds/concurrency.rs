//! Concurrent refunds never exceed the payment; separate key scopes; a retry while the
//! refund runs.

use super::*;

/// 20 refunds of 10% each with distinct keys and 20 identical requests of another 10%,
/// all at once against the real server: exactly 10 of the 21 distinct requests can fit.
async fn refund_storm(app: &TestApp) {
    let payment_id = app.paid_payment(1000).await;
    let tenth = json!({"amount": 100});
    let keys: Vec<String> = (0..20).map(|i| format!("storm-{i}")).collect();
    let distinct = keys
        .iter()
        .map(|k| app.post_refund(&payment_id, k, &tenth))
        .collect::<Vec<_>>();
    let identical = (0..20)
        .map(|_| app.post_refund(&payment_id, "storm-same", &tenth))
        .collect::<Vec<_>>();
    let (distinct, identical) = join(join_all(distinct), join_all(identical)).await;

    for r in distinct.iter().chain(identical.iter()) {
        assert!(
            r.status == 201 || r.status == 409,
            "unexpected {}: {}",
            r.status,
            r.text()
        );
        if r.status == 409 {
            r.assert_problem(409, "payment_not_refundable");
        }
    }
    // The identical requests are one request: one answer, byte for byte.
    let bodies: HashSet<&[u8]> = identical.iter().map(|r| r.body.as_slice()).collect();
    assert_eq!(bodies.len(), 1, "identical requests answered differently");
    let originals = identical
        .iter()
        .filter(|r| r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(originals, 1, "one original answer, 19 replays");

    let succeeded = distinct.iter().filter(|r| r.status == 201).count()
        + usize::from(identical[0].status == 201);
    assert_eq!(succeeded, 10, "exactly ten refunds of 10% fit");

    // The invariant, from every side: database, API and the provider's ledger agree.
    assert_eq!(app.refund_rows(&payment_id, "succeeded").await, 10);
    assert_eq!(app.refund_rows(&payment_id, "pending").await, 0);
    assert_eq!(app.refund_rows(&payment_id, "rejected").await, 11);
    assert_eq!(app.refund_totals(&payment_id).await, (1000, 1000));
    let ledger = app.provider_refunds();
    assert_eq!(ledger.len(), 10);
    assert_eq!(ledger.iter().map(|r| r.amount).sum::<i64>(), 1000);
    let payment = app.get(&format!("/v1/payments/{payment_id}")).await.json();
    assert_eq!(payment["amount_refunded"], 1000);
    let list = app
        .get(&format!("/v1/payments/{payment_id}/refunds?limit=100"))
        .await
        .json();
    let listed = list["data"].as_array().unwrap();
    assert_eq!(listed.len(), 10);
    let refund_ids: HashSet<&str> = listed.iter().map(|r| r["id"].as_str().unwrap()).collect();
    let ledger_refs: HashSet<&str> = ledger.iter().map(|r| r.reference.as_str()).collect();
    assert_eq!(refund_ids, ledger_refs);
}

#[actix_web::test]
async fn concurrent_refunds_never_exceed_the_payment() {
    // The provider is slow enough that all requests overlap.
    let app = spawn_app_with(|s| s.provider_latency = Duration::from_millis(100)).await;
    refund_storm(&app).await;
}

#[actix_web::test]
async fn concurrent_refunds_never_exceed_the_payment_with_an_instant_provider() {
    let app = spawn_app().await;
    refund_storm(&app).await;
}

#[actix_web::test]
async fn concurrent_refunds_of_what_is_left_refund_it_once() {
    // Without an amount each request asks for "all that is left" as it finds it: one wins.
    let app = spawn_app_with(|s| s.provider_latency = Duration::from_millis(50)).await;
    let payment_id = app.paid_payment(1000).await;
    app.post_refund(&payment_id, "first-part", &json!({"amount": 250}))
        .await;
    let keys: Vec<String> = (0..20).map(|i| format!("rest-{i}")).collect();
    let everything = json!({});
    let responses = join_all(
        keys.iter()
            .map(|k| app.post_refund(&payment_id, k, &everything)),
    )
    .await;
    let won: Vec<_> = responses.iter().filter(|r| r.status == 201).collect();
    assert_eq!(won.len(), 1, "exactly one refund of the rest");
    assert_eq!(won[0].json()["amount"], 750);
    for r in responses.iter().filter(|r| r.status != 201) {
        r.assert_problem(409, "payment_not_refundable");
    }
    assert_eq!(app.refund_totals(&payment_id).await, (1000, 1000));
    assert_eq!(app.provider_refunds().len(), 2);
}

#[actix_web::test]
async fn payment_and_refund_keys_are_separate_scopes() {
    let app = spawn_app().await;
    let first = app
        .post_payment("shared-key", &crate::support::visa(800))
        .await;
    assert_eq!(first.status, 201);
    let payment_id = first.json()["id"].as_str().unwrap().to_owned();
    let refund = app
        .post_refund(&payment_id, "shared-key", &json!({"amount": 300}))
        .await;
    assert_eq!(refund.status, 201, "{}", refund.text());
    assert!(refund.header("idempotent-replayed").is_none());
    assert_eq!(app.refund_totals(&payment_id).await, (300, 300));
}

#[actix_web::test]
async fn a_retry_while_the_refund_runs_gets_409_then_the_replay() {
    let app = spawn_app_with(|s| {
        s.provider_latency = Duration::from_millis(1000);
        s.idempotency_wait = Duration::from_millis(100);
    })
    .await;
    let payment_id = app.paid_payment(900).await;
    let body = json!({"amount": 300});
    let (first, retry) = join(app.post_refund(&payment_id, "slow", &body), async {
        wait_until(
            Duration::from_secs(10),
            "the first refund has reserved its amount",
            || async { app.refund_totals(&payment_id).await.0 > 0 },
        )
        .await;
        app.post_refund(&payment_id, "slow", &body).await
    })
    .await;
    retry.assert_problem(409, "idempotency_key_in_use");
    assert!(retry.header("retry-after").is_some());
    assert_eq!(first.status, 201, "{}", first.text());

    let later = app.post_refund(&payment_id, "slow", &body).await;
    assert_eq!(later.status, 201);
    assert_eq!(later.header("idempotent-replayed"), Some("true"));
    assert_eq!(later.body, first.body);
    assert_eq!(app.simulator.refund_calls(), 1);
    assert_eq!(app.refund_totals(&payment_id).await, (300, 300));
}
