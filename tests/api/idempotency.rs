use std::collections::HashSet;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;

use crate::support::{spawn_app, spawn_app_with, visa, wait_until};

#[actix_web::test]
async fn a_hundred_concurrent_identical_requests_charge_once_and_answer_alike() {
    // The provider is slow enough that the duplicates arrive while the first is running.
    let app = spawn_app_with(|s| s.provider_latency = Duration::from_millis(300)).await;
    let body = visa(4200);
    let responses = join_all((0..100).map(|_| app.post_payment("storm", &body))).await;

    assert_eq!(app.charges(), 1, "exactly one charge at the provider");
    assert_eq!(
        app.simulator.charge_calls(),
        1,
        "only the winner calls the provider"
    );
    assert_eq!(app.payment_rows().await, 1);
    let statuses: HashSet<u16> = responses.iter().map(|r| r.status.as_u16()).collect();
    assert_eq!(statuses, HashSet::from([201]));
    let bodies: HashSet<&[u8]> = responses.iter().map(|r| r.body.as_slice()).collect();
    assert_eq!(
        bodies.len(),
        1,
        "every request learns the same outcome, byte for byte"
    );
    let originals = responses
        .iter()
        .filter(|r| r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(originals, 1, "one answer is the original, 99 are replays");
}

#[actix_web::test]
async fn a_hundred_concurrent_requests_with_distinct_keys_charge_a_hundred_times() {
    let app = spawn_app_with(|s| s.provider_latency = Duration::from_millis(50)).await;
    let keys: Vec<String> = (0..100).map(|i| format!("distinct-{i}")).collect();
    let body = visa(100);
    let responses = join_all(keys.iter().map(|k| app.post_payment(k, &body))).await;
    assert!(responses.iter().all(|r| r.status == 201));
    let ids: HashSet<String> = responses
        .iter()
        .map(|r| r.json()["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 100);
    assert_eq!(app.charges(), 100);
    assert_eq!(app.payment_rows().await, 100);
}

#[actix_web::test]
async fn the_same_key_with_a_different_request_is_refused_and_runs_nothing() {
    let app = spawn_app().await;
    let first = app.post_payment("reuse", &visa(1000)).await;
    assert_eq!(first.status, 201);

    let different = app.post_payment("reuse", &visa(1001)).await;
    different.assert_problem(422, "idempotency_key_reused");
    let other_card = json!({"amount": 1000, "currency": "usd", "payment_method": "pm_card_amex"});
    app.post_payment("reuse", &other_card)
        .await
        .assert_problem(422, "idempotency_key_reused");
    assert_eq!(app.charges(), 1);
    assert_eq!(app.simulator.charge_calls(), 1);
    assert_eq!(app.payment_rows().await, 1);

    // The same request written differently is the same request.
    let reordered = json!({"payment_method": "pm_card_visa", "currency": "USD", "amount": 1000});
    let replay = app.post_payment("reuse", &reordered).await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.body, first.body);
}

#[actix_web::test]
async fn a_retry_while_the_first_runs_gets_409_then_the_replay_once_finished() {
    let app = spawn_app_with(|s| {
        s.provider_latency = Duration::from_millis(1500);
        s.idempotency_wait = Duration::from_millis(100);
    })
    .await;
    let body = visa(700);
    let (first, retry) = tokio::join!(app.post_payment("slow", &body), async {
        wait_until(
            Duration::from_secs(10),
            "the first request has claimed the key",
            || async { app.payment_rows().await == 1 },
        )
        .await;
        app.post_payment("slow", &body).await
    });
    let problem = retry.assert_problem(409, "idempotency_key_in_use");
    assert!(problem["detail"].is_string());
    let retry_after: u64 = retry
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!(retry_after >= 1);

    assert_eq!(first.status, 201);
    let later = app.post_payment("slow", &body).await;
    assert_eq!(later.status, 201);
    assert_eq!(later.header("idempotent-replayed"), Some("true"));
    assert_eq!(later.body, first.body);
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn a_retry_that_waits_gets_the_outcome_without_a_second_charge() {
    let app = spawn_app_with(|s| {
        s.provider_latency = Duration::from_millis(500);
        s.idempotency_wait = Duration::from_secs(5);
    })
    .await;
    let body = visa(800);
    let (first, retry) = tokio::join!(app.post_payment("wait", &body), async {
        wait_until(
            Duration::from_secs(10),
            "the first request has claimed the key",
            || async { app.payment_rows().await == 1 },
        )
        .await;
        app.post_payment("wait", &body).await
    });
    assert_eq!(first.status, 201);
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, first.body);
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn a_validation_failure_is_not_remembered() {
    let app = spawn_app().await;
    let bad = json!({"amount": -5, "currency": "usd", "payment_method": "pm_card_visa"});
    app.post_payment("fix-me", &bad)
        .await
        .assert_problem(400, "invalid_request");
    assert_eq!(app.payment_rows().await, 0);
    let good = app.post_payment("fix-me", &visa(500)).await;
    assert_eq!(good.status, 201, "{}", good.text());
    assert!(good.header("idempotent-replayed").is_none());
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn quoted_and_bare_keys_are_the_same_key() {
    let app = spawn_app().await;
    let bare = app.post_payment("abc-123", &visa(300)).await;
    let quoted = app.post_payment("\"abc-123\"", &visa(300)).await;
    assert_eq!(quoted.status, 201);
    assert_eq!(quoted.header("idempotent-replayed"), Some("true"));
    assert_eq!(quoted.body, bare.body);
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn keys_are_scoped_per_merchant() {
    let app = spawn_app().await;
    let other_key = app.create_merchant("acme").await;
    let mine = app.post_payment("shared-key", &visa(100)).await;
    let theirs = app
        .post_json("/v1/payments", &other_key, Some("shared-key"), &visa(100))
        .await;
    assert_eq!(mine.status, 201);
    assert_eq!(theirs.status, 201);
    assert!(theirs.header("idempotent-replayed").is_none());
    assert_ne!(mine.json()["id"], theirs.json()["id"]);
    assert_eq!(app.charges(), 2);
    // And a different body under the same key is fine for the other merchant.
    let theirs_again = app
        .post_json("/v1/payments", &other_key, Some("shared-key"), &visa(100))
        .await;
    assert_eq!(theirs_again.body, theirs.body);
}

#[actix_web::test]
async fn a_different_request_under_a_running_key_is_refused_at_once() {
    let app = spawn_app_with(|s| s.provider_latency = Duration::from_millis(1000)).await;
    let (body, different) = (visa(900), visa(901));
    let (first, other) = tokio::join!(app.post_payment("busy", &body), async {
        wait_until(
            Duration::from_secs(10),
            "the first request has claimed the key",
            || async { app.payment_rows().await == 1 },
        )
        .await;
        let started = std::time::Instant::now();
        let response = app.post_payment("busy", &different).await;
        (response, started.elapsed())
    });
    let (other, took) = other;
    other.assert_problem(422, "idempotency_key_reused");
    assert!(
        took < Duration::from_millis(700),
        "not made to wait for the first: {took:?}"
    );
    assert_eq!(first.status, 201);
    assert_eq!(app.charges(), 1);
    assert_eq!(app.simulator.charge_calls(), 1);
}

/// A retry usually repeats its request byte for byte: its answer is found from those bytes,
/// before its body is parsed. A retry equal only in meaning (keys in another order, spaces,
/// the currency's case) goes the whole way and is replayed by its fingerprint. Both are
/// the first answer, and there is one charge.
#[actix_web::test]
async fn a_retry_sent_byte_for_byte_and_one_equal_in_meaning_both_replay() {
    use actix_web::http::Uri;
    use actix_web::web::Bytes;
    use payments_api::idempotency::Sent;

    let app = spawn_app().await;
    let sent: &'static [u8] =
        br#"{"amount":1500,"currency":"usd","payment_method":"pm_card_visa"}"#;
    let reordered: &'static [u8] =
        br#"{ "payment_method": "pm_card_visa", "currency": "USD", "amount": 1500 }"#;
    let headers = [
        ("Authorization", format!("Bearer {}", app.api_key)),
        ("Content-Type", "application/json".to_owned()),
        ("Idempotency-Key", "as-sent".to_owned()),
    ];
    let post = |body: &[u8]| app.request("POST", "/v1/payments", &headers, body.to_vec());
    let first = post(sent).await;
    assert_eq!(first.status, 201, "{}", first.text());

    // The instance keeps the request's exact bytes with its final answer.
    let target = Uri::from_static("/v1/payments");
    let as_sent = |body: &'static [u8]| Sent::new(&target, Bytes::from_static(body));
    let answers = &app.state.final_answers;
    let merchant = &app.merchant_id;
    let known =
        |body| answers.answer_sent("payment", "payment", merchant, "as-sent", &as_sent(body));
    assert!(known(sent).is_some(), "the first request's bytes are kept");
    assert!(known(reordered).is_none(), "other bytes are not");

    for body in [sent, reordered, sent] {
        let again = post(body).await;
        assert_eq!(again.status, 201, "{}", again.text());
        assert_eq!(again.body, first.body, "the first answer, byte for byte");
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
    }
    assert_eq!(app.simulator.charge_calls(), 1);
    assert_eq!(app.payment_rows().await, 1);
}

/// A request whose body differs from the one leading its key in this instance is not judged
/// by it: that leader may lose the key to this very body from another instance. For each
/// key, A (body X) on one instance holds the key while a slow provider answers; then C
/// (body X′) and D (body X) reach the other instance at once. C is refused; D learns A's
/// outcome, whichever of C and D led there (D was refused whenever C led).
#[actix_web::test]
async fn a_duplicate_is_never_refused_for_the_body_of_another_request_leading_here() {
    use crate::support::{spawn_cluster, spawn_provider};
    use futures_util::future::join;
    let provider = spawn_provider().await;
    provider
        .faults
        .latency_ms
        .store(400, std::sync::atomic::Ordering::Relaxed);
    let (apps, _database) = spawn_cluster(2, &provider, |_| {}).await;
    let keys: Vec<String> = (0..12).map(|i| format!("apart-{i}")).collect();
    let (body, other) = (visa(1000), visa(1001));
    let firsts = join_all(keys.iter().map(|key| apps[0].post_payment(key, &body)));
    let raced = async {
        // The firsts' claims are in by now; their provider calls are not answered yet.
        actix_web::rt::time::sleep(Duration::from_millis(150)).await;
        join_all(keys.iter().map(|key| {
            join(
                apps[1].post_payment(key, &other),
                apps[1].post_payment(key, &body),
            )
        }))
        .await
    };
    let (firsts, raced) = join(firsts, raced).await;
    for (first, (other_body, same_body)) in firsts.iter().zip(&raced) {
        assert_eq!(first.status, 201, "{}", first.text());
        assert_eq!(other_body.status, 422, "{}", other_body.text());
        assert_eq!(
            other_body.json()["code"],
            "idempotency_key_reused",
            "{}",
            other_body.text()
        );
        assert_eq!(same_body.status, 201, "{}", same_body.text());
        assert_eq!(
            same_body.body, first.body,
            "the same outcome, byte for byte"
        );
    }
    assert_eq!(provider.simulator.charges().len(), keys.len());
}

#[actix_web::test]
async fn a_client_that_resets_right_after_its_post_leaves_no_claim_without_a_driver() {
    // Found from outside: a client that sent its POST and reset the connection a moment
    // later could drop the request between the claim's commit and the provider call; the
    // claim then stood, driven by nobody, until its lease ran out, and every retry meanwhile
    // was answered 409. The lease here is far longer than the test.
    let app = spawn_app_with(|s| {
        s.idempotency_wait = Duration::from_secs(2);
        s.processing_lease = Duration::from_secs(120);
    })
    .await;
    let address = app.address.trim_start_matches("http://").to_owned();
    let mut sent = Vec::new();
    for i in 0..60 {
        use std::io::Write;
        let (key, body) = (format!("reset-{i}"), visa(1000 + i));
        let text = body.to_string();
        let request = format!(
            "POST /v1/payments HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {}\r\n\
             Idempotency-Key: {key}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{text}",
            app.api_key,
            text.len()
        );
        let mut stream = std::net::TcpStream::connect(&address).expect("connects");
        stream.write_all(request.as_bytes()).expect("sent");
        // From at once to a few milliseconds: the claim's commit falls somewhere in there.
        actix_web::rt::time::sleep(Duration::from_micros(500 * (i as u64 % 8))).await;
        // A linger of zero makes the close a reset, as a killed client's would be.
        socket2::SockRef::from(&stream)
            .set_linger(Some(Duration::ZERO))
            .expect("linger");
        drop(stream);
        sent.push((key, body));
    }
    let retries = join_all(sent.iter().map(|(key, body)| app.post_payment(key, body))).await;
    for (response, (key, _)) in retries.iter().zip(&sent) {
        assert_eq!(response.status, 201, "{key}: {}", response.text());
        assert_eq!(response.json()["status"], "succeeded", "{key}");
    }
    assert_eq!(app.payment_rows().await, 60);
    assert_eq!(app.charges(), 60, "one charge per key");
}
