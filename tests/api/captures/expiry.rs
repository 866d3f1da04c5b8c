//! Authorizations nobody captures: canceled as expired, and not captured past their expiry.

use super::*;

#[actix_web::test]
async fn an_authorization_nobody_captures_is_canceled_as_expired() {
    let app = spawn_app_with(|s| {
        s.authorization_expiry = Duration::from_millis(300);
        s.recovery_interval = Duration::from_millis(100);
    })
    .await;
    let id = app.authorized_payment(800).await;
    let payment = wait_for(
        Duration::from_secs(10),
        "the authorization expires",
        || async {
            let payment = app.payment_now(&id).await;
            (payment["status"] != "requires_capture").then_some(payment)
        },
    )
    .await;
    assert_eq!(payment["status"], "canceled");
    assert_eq!(payment["cancellation_reason"], "expired");
    assert_eq!(payment["amount_capturable"], 0);
    // Give further expiry passes the chance to (wrongly) act again.
    assert_holds_for(
        Duration::from_millis(400),
        "one cancel at the provider, whatever further expiry passes do",
        || async { app.simulator.cancels().len() <= 1 && app.simulator.cancel_calls() <= 1 },
    )
    .await;
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
