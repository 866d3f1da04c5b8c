//! The retry rules, against a scripted stub: what is retried, with which key, how long the
//! client waits, and what is not retried.

use std::time::{Duration, Instant};

use payments_client::{Client, CreatePayment, ErrorCode, ErrorKind, PaymentStatus, RetryPolicy};

use super::stub::{Reply, Stub, payment, problem};

/// Backoff so small that any wait of a second or more can only come from `Retry-After`.
fn quick_client(url: &str, policy: RetryPolicy) -> Client {
    Client::builder(url, "sk_test_stub")
        .retry_policy(
            policy
                .initial_delay(Duration::from_millis(1))
                .max_delay(Duration::from_millis(5)),
        )
        .timeout(Duration::from_millis(500))
        .build()
        .expect("client")
}

fn visa() -> CreatePayment {
    CreatePayment::new(2000, "usd", "pm_card_visa")
}

#[tokio::test]
async fn retry_after_is_waited_out_on_429_409_in_use_and_503() {
    let stub = Stub::start(vec![
        problem(429, "rate_limited", Some(1)),
        problem(409, "idempotency_key_in_use", Some(1)),
        problem(503, "service_unavailable", Some(1)),
        payment(201, "succeeded"),
    ])
    .await;
    let client = quick_client(&stub.url, RetryPolicy::default());

    let started = Instant::now();
    let response = client
        .create_payment(&visa())
        .send()
        .await
        .expect("a payment");
    let elapsed = started.elapsed();

    assert_eq!(response.data.status, PaymentStatus::Succeeded);
    assert_eq!(response.attempts, 4);
    let seen = stub.seen();
    assert_eq!(seen.len(), 4);
    for pair in seen.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= Duration::from_secs(1),
            "retried after {gap:?}, before Retry-After: 1"
        );
    }
    assert!(elapsed >= Duration::from_secs(3), "{elapsed:?}");
    // One key, on every attempt, and the same bytes.
    let keys = stub.keys();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(keys[0], response.idempotency_key);
    assert!(
        seen.iter()
            .all(|s| s.body == seen[0].body && s.path == "/v1/payments")
    );
}

#[tokio::test]
async fn an_http_date_retry_after_is_honoured_too() {
    let at = chrono::Utc::now() + chrono::Duration::seconds(2);
    let date = at.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
    let Reply::Answer {
        status,
        mut headers,
        body,
    } = problem(503, "service_unavailable", None)
    else {
        unreachable!()
    };
    headers.push(("retry-after", date));
    let stub = Stub::start(vec![
        Reply::Answer {
            status,
            headers,
            body,
        },
        payment(201, "succeeded"),
    ])
    .await;
    let client = quick_client(&stub.url, RetryPolicy::default());
    client.create_payment(&visa()).await.expect("a payment");
    let seen = stub.seen();
    // The date has whole seconds: at least one full second must have passed.
    assert!(seen[1].at - seen[0].at >= Duration::from_secs(1));
}

#[tokio::test]
async fn a_retry_after_beyond_the_budget_ends_the_call_instead_of_retrying_early() {
    let stub = Stub::start(vec![
        problem(503, "service_unavailable", Some(30)),
        payment(201, "succeeded"),
    ])
    .await;
    let client = quick_client(
        &stub.url,
        RetryPolicy::default().max_elapsed(Duration::from_secs(3)),
    );
    let started = Instant::now();
    let error = client.create_payment(&visa()).await.expect_err("gives up");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(stub.seen().len(), 1);
    assert_eq!(error.code(), Some(&ErrorCode::ServiceUnavailable));
    assert_eq!(
        error.problem().and_then(|p| p.retry_after),
        Some(Duration::from_secs(30))
    );
    assert!(error.is_outcome_unknown());
    assert_eq!(error.idempotency_key(), stub.keys()[0].as_deref());
}

#[tokio::test]
async fn other_4xx_are_answers_and_are_not_retried() {
    for (status, code) in [
        (400, "invalid_request"),
        (401, "unauthorized"),
        (404, "not_found"),
        (409, "payment_not_refundable"),
        (422, "idempotency_key_reused"),
    ] {
        let stub = Stub::start(vec![
            problem(status, code, Some(0)),
            payment(201, "succeeded"),
        ])
        .await;
        let client = quick_client(&stub.url, RetryPolicy::default());
        let error = client.create_payment(&visa()).await.expect_err("refused");
        assert_eq!(stub.seen().len(), 1, "{status} {code} was retried");
        let problem = error.problem().expect("a problem");
        assert_eq!((problem.status, problem.code.as_str()), (status, code));
        assert_eq!(
            problem.request_id.as_deref(),
            Some(format!("req-{status}-{code}").as_str())
        );
        assert_eq!(error.attempts(), 1);
        assert!(!error.is_outcome_unknown());
    }
}

#[tokio::test]
async fn server_errors_and_lost_answers_are_retried_with_the_same_key() {
    let stub = Stub::start(vec![
        problem(500, "internal_error", None),
        Reply::Answer {
            status: 502,
            headers: vec![("content-type", "text/html".to_owned())],
            body: "<html>bad gateway</html>".to_owned(),
        },
        Reply::Hangup,
        Reply::Hang(Duration::from_secs(2)), // past the client's 500 ms timeout
        problem(504, "gateway_timeout", None),
        payment(201, "succeeded"),
    ])
    .await;
    let client = quick_client(&stub.url, RetryPolicy::default().max_attempts(6));
    let response = client
        .create_payment(&visa())
        .idempotency_key("order-1001")
        .send()
        .await
        .expect("a payment");
    assert_eq!(response.attempts, 6);
    assert_eq!(stub.keys(), vec![Some("order-1001".to_owned())]);
    assert_eq!(response.idempotency_key.as_deref(), Some("order-1001"));
}

#[tokio::test]
async fn the_attempts_are_bounded() {
    let stub = Stub::start(vec![problem(500, "internal_error", None)]).await;
    let client = quick_client(&stub.url, RetryPolicy::default().max_attempts(3));
    let error = client.create_payment(&visa()).await.expect_err("gives up");
    assert_eq!(stub.seen().len(), 3);
    assert_eq!(error.attempts(), 3);
    assert!(error.is_outcome_unknown());

    let stub = Stub::start(vec![Reply::Hangup]).await;
    let client = quick_client(&stub.url, RetryPolicy::never());
    let error = client.create_payment(&visa()).await.expect_err("no answer");
    assert!(matches!(error.kind(), ErrorKind::Transport(_)), "{error:?}");
    assert_eq!(stub.seen().len(), 1);
    assert!(error.idempotency_key().is_some());
}

#[tokio::test]
async fn reads_are_retried_too_and_carry_no_key() {
    let stub = Stub::start(vec![
        Reply::Hangup,
        problem(503, "service_unavailable", Some(0)),
        payment(200, "succeeded"),
    ])
    .await;
    let client = quick_client(&stub.url, RetryPolicy::default());
    let payment = client.get_payment("pay_1").await.expect("the payment");
    assert_eq!(payment.id, "pay_1");
    let seen = stub.seen();
    assert_eq!(seen.len(), 3);
    assert!(
        seen.iter()
            .all(|s| s.method == "GET" && s.path == "/v1/payments/pay_1")
    );
    assert_eq!(stub.keys(), vec![None]);
}

#[tokio::test]
async fn every_call_gets_its_own_new_key() {
    let stub = Stub::start(vec![payment(201, "succeeded")]).await;
    let client = quick_client(&stub.url, RetryPolicy::default());
    client.create_payment(&visa()).await.expect("first");
    client.create_payment(&visa()).await.expect("second");
    let keys = stub.keys();
    assert_eq!(keys.len(), 2);
    for key in keys {
        let key = key.expect("a key");
        let parsed = uuid::Uuid::parse_str(&key).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 4);
    }
}

#[tokio::test]
async fn an_invalid_key_is_refused_before_anything_is_sent() {
    let stub = Stub::start(vec![payment(201, "succeeded")]).await;
    let client = quick_client(&stub.url, RetryPolicy::default());
    let error = client
        .create_payment(&visa())
        .idempotency_key("")
        .await
        .expect_err("refused");
    assert!(matches!(error.kind(), ErrorKind::InvalidInput(_)));
    assert_eq!(error.attempts(), 0);
    assert!(stub.seen().is_empty());
}

#[tokio::test]
async fn a_202_is_awaited_with_the_same_key_until_final() {
    let stub = Stub::start(vec![
        payment(202, "processing"),
        payment(202, "processing"),
        payment(201, "succeeded"),
    ])
    .await;
    let client = quick_client(&stub.url, RetryPolicy::default());
    let response = client
        .create_payment(&visa())
        .wait_until_final(Duration::from_secs(10))
        .send()
        .await
        .expect("final");
    assert_eq!(response.status, 201);
    assert_eq!(response.data.status, PaymentStatus::Succeeded);
    assert_eq!(stub.seen().len(), 3);
    assert_eq!(stub.keys().len(), 1);

    // Without waiting, the 202 is the answer.
    let stub = Stub::start(vec![payment(202, "processing"), payment(201, "succeeded")]).await;
    let client = quick_client(&stub.url, RetryPolicy::default());
    let response = client
        .create_payment(&visa())
        .send()
        .await
        .expect("an answer");
    assert_eq!(
        (response.status, response.data.status),
        (202, PaymentStatus::Processing)
    );
    assert_eq!(stub.seen().len(), 1);
}

#[tokio::test]
async fn waiting_for_a_202_ends_at_the_deadline_with_the_key() {
    let stub = Stub::start(vec![payment(202, "processing")]).await;
    let client = quick_client(&stub.url, RetryPolicy::default());
    let started = Instant::now();
    let error = client
        .create_payment(&visa())
        .wait_until_final(Duration::from_millis(600))
        .await
        .expect_err("still pending");
    assert!(started.elapsed() < Duration::from_secs(3));
    let ErrorKind::StillPending { last } = error.kind() else {
        panic!("{error:?}")
    };
    assert_eq!(last["status"], "processing");
    assert!(stub.seen().len() >= 2);
    assert_eq!(stub.keys().len(), 1);
    assert_eq!(error.idempotency_key(), stub.keys()[0].as_deref());
    assert!(error.is_outcome_unknown());
}

#[tokio::test]
async fn no_answer_after_a_202_is_still_pending_not_a_network_error() {
    let stub = Stub::start(vec![
        payment(202, "processing"),
        Reply::Hang(Duration::from_secs(5)),
    ])
    .await;
    let client = quick_client(&stub.url, RetryPolicy::default());
    let error = client
        .create_payment(&visa())
        .wait_until_final(Duration::from_millis(1500))
        .await
        .expect_err("still pending");
    assert!(
        matches!(error.kind(), ErrorKind::StillPending { .. }),
        "{error:?}"
    );
    assert!(error.attempts() >= 2);
    assert_eq!(stub.keys().len(), 1);
}
