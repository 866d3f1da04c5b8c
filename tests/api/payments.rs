use std::sync::atomic::Ordering;

use futures_util::future::join_all;
use serde_json::json;

use crate::support::{
    ScriptedProvider, provider_answer, spawn_app, spawn_app_with_provider,
    spawn_app_with_provider_url, spawn_provider, visa,
};

#[actix_web::test]
async fn a_payment_with_a_good_card_succeeds_and_is_charged_once() {
    let app = spawn_app().await;
    let body = json!({
        "amount": 2000, "currency": "USD", "payment_method": "pm_card_visa",
        "customer_id": "cus_1", "description": "order 1", "metadata": {"order": "1"}
    });
    let response = app.post_payment("order-1", &body).await;
    assert_eq!(response.status, 201, "{}", response.text());
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert!(response.header("idempotent-replayed").is_none());
    let payment = response.json();
    assert!(payment["id"].as_str().unwrap().starts_with("pay_"));
    assert_eq!(payment["object"], "payment");
    assert_eq!(payment["status"], "succeeded");
    assert_eq!(payment["amount"], 2000);
    assert_eq!(payment["currency"], "usd");
    assert_eq!(payment["customer_id"], "cus_1");
    assert_eq!(payment["metadata"], json!({"order": "1"}));
    assert_eq!(payment["amount_refunded"], 0);
    assert!(payment["failure_code"].is_null());
    assert!(payment["created_at"].as_str().unwrap().ends_with('Z'));

    let charges = app.simulator.charges();
    assert_eq!(charges.len(), 1);
    assert_eq!(payment["provider_charge_id"], charges[0].id.as_str());
    assert_eq!(charges[0].reference, payment["id"].as_str().unwrap());
    assert_eq!(charges[0].amount, 2000);

    let fetched = app
        .get(&format!("/v1/payments/{}", payment["id"].as_str().unwrap()))
        .await;
    assert_eq!(fetched.status, 200);
    assert_eq!(fetched.json(), payment);
}

#[actix_web::test]
async fn a_decline_is_a_created_failed_payment_replayed_and_charged_once() {
    let app = spawn_app().await;
    let body = json!({"amount": 500, "currency": "eur", "payment_method": "pm_card_declined"});
    let first = app.post_payment("decline-1", &body).await;
    assert_eq!(first.status, 201);
    let payment = first.json();
    assert_eq!(payment["status"], "failed");
    assert_eq!(payment["failure_code"], "card_declined");
    assert!(payment["failure_message"].is_string());

    let retry = app.post_payment("decline-1", &body).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, first.body, "a replay is byte-identical");
    assert_eq!(app.charges(), 1);
    assert_eq!(
        app.simulator.charge_calls(),
        1,
        "a replay never reaches the provider"
    );
    assert_eq!(app.payment_rows().await, 1);
}

#[actix_web::test]
async fn test_cards_give_the_contract_outcomes() {
    let app = spawn_app().await;
    for (method, status, code) in [
        ("pm_card_mastercard", "succeeded", None),
        ("pm_card_amex", "succeeded", None),
        (
            "pm_card_insufficient_funds",
            "failed",
            Some("insufficient_funds"),
        ),
        ("pm_card_unknown", "failed", Some("invalid_payment_method")),
    ] {
        let body = json!({"amount": 100, "currency": "usd", "payment_method": method});
        let response = app.post_payment(method, &body).await;
        assert_eq!(response.status, 201, "{method}");
        let payment = response.json();
        assert_eq!(payment["status"], status, "{method}");
        assert_eq!(payment["failure_code"].as_str(), code, "{method}");
    }
    assert_eq!(app.charges(), 4);
}

#[actix_web::test]
async fn another_merchants_payment_is_not_found() {
    let app = spawn_app().await;
    let other_key = app.create_merchant("other").await;
    let payment = app.post_payment("mine", &visa(100)).await.json();
    let path = format!("/v1/payments/{}", payment["id"].as_str().unwrap());
    app.get_as(&path, &other_key)
        .await
        .assert_problem(404, "not_found");
    let listed = app.get_as("/v1/payments", &other_key).await.json();
    assert_eq!(listed["data"], json!([]));
    app.get("/v1/payments/pay_nope")
        .await
        .assert_problem(404, "not_found");
}

#[actix_web::test]
async fn the_list_is_newest_first_with_cursor_and_filters() {
    let app = spawn_app().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let method = if i % 2 == 0 {
            "pm_card_visa"
        } else {
            "pm_card_declined"
        };
        let body = json!({"amount": 100 + i, "currency": "usd", "payment_method": method,
                          "customer_id": format!("cus_{}", i % 2)});
        let response = app.post_payment(&format!("list-{i}"), &body).await;
        ids.push(response.json()["id"].as_str().unwrap().to_owned());
    }
    ids.reverse();
    let ids_of = |list: &serde_json::Value| -> Vec<String> {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["id"].as_str().unwrap().to_owned())
            .collect()
    };

    let all = app.get("/v1/payments").await.json();
    assert_eq!(all["object"], "list");
    assert_eq!(ids_of(&all), ids);
    assert_eq!(all["has_more"], false);

    let page1 = app.get("/v1/payments?limit=2").await.json();
    assert_eq!(ids_of(&page1), ids[..2]);
    assert_eq!(page1["has_more"], true);
    let page2 = app
        .get(&format!("/v1/payments?limit=2&starting_after={}", ids[1]))
        .await
        .json();
    assert_eq!(ids_of(&page2), ids[2..4]);
    let page3 = app
        .get(&format!("/v1/payments?limit=2&starting_after={}", ids[3]))
        .await
        .json();
    assert_eq!(ids_of(&page3), ids[4..]);
    assert_eq!(page3["has_more"], false);

    let failed = app.get("/v1/payments?status=failed").await.json();
    assert_eq!(failed["data"].as_array().unwrap().len(), 2);
    let customer = app.get("/v1/payments?customer_id=cus_0").await.json();
    assert_eq!(customer["data"].as_array().unwrap().len(), 3);

    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=ten", "limit"),
        ("status=done", "status"),
        ("starting_after=xyz", "starting_after"),
        ("colour=red", "colour"),
    ] {
        let problem = app
            .get(&format!("/v1/payments?{query}"))
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], param, "{query}");
    }
}

#[actix_web::test]
async fn every_response_carries_a_request_id() {
    let app = spawn_app().await;
    let generated = app.get("/v1/payments").await;
    assert!(
        generated
            .header("x-request-id")
            .is_some_and(|v| !v.is_empty())
    );
    let echoed = app
        .request(
            "GET",
            "/health/live",
            &[("X-Request-Id", "req-abc-123".to_owned())],
            Vec::new(),
        )
        .await;
    assert_eq!(echoed.status, 200);
    assert_eq!(echoed.header("x-request-id"), Some("req-abc-123"));
    let missing = app.request("GET", "/no/such/route", &[], Vec::new()).await;
    missing.assert_problem(404, "not_found");
    assert!(missing.header("x-request-id").is_some());

    // A made id is a UUIDv7 in its usual text; a caller's id is kept when it is a token of
    // at most 200 visible characters, and replaced by a made one otherwise.
    let made = |id: Option<&str>| {
        let id = id.expect("x-request-id");
        let uuid = uuid::Uuid::try_parse(id).expect("a made request id is a UUID");
        assert_eq!(uuid.get_version_num(), 7, "{id}");
        assert_eq!(id, uuid.hyphenated().to_string(), "{id}");
    };
    made(generated.header("x-request-id"));
    let longest = "r".repeat(200);
    for (sent, kept) in [
        (longest.as_str(), true),
        (&*"r".repeat(201), false),
        ("has a space", false),
    ] {
        let answer = app
            .request(
                "GET",
                "/health/live",
                &[("X-Request-Id", sent.to_owned())],
                Vec::new(),
            )
            .await;
        if kept {
            assert_eq!(answer.header("x-request-id"), Some(sent));
        } else {
            made(answer.header("x-request-id"));
        }
    }
}

/// A slow provider over HTTP is asked for every payment in flight at once: no limit on the
/// service's connections to it queues payments behind the ones it is answering (there was
/// one: 256 per worker, so 2 workers asked at most 512 at a time).
#[actix_web::test]
async fn a_slow_provider_over_http_is_called_for_every_payment_in_flight_at_once() {
    const PAYMENTS: usize = 600;
    let provider = spawn_provider().await;
    // Long enough that every payment has claimed its row and called before the first answer.
    provider.faults.latency_ms.store(4_000, Ordering::SeqCst);
    let app = spawn_app_with_provider(&provider, |_| {}).await;
    let requests: Vec<_> = (0..PAYMENTS)
        .map(|i| (format!("slow-{i}"), visa(100 + i as i64)))
        .collect();
    let answers = join_all(
        requests
            .iter()
            .map(|(key, body)| app.post_payment(key, body)),
    )
    .await;
    for answer in &answers {
        assert_eq!(answer.status, 201, "{}", answer.text());
    }
    // All 600 when every claim is made within the provider's 4 s; more than the old cap
    // however slowly the claims go.
    let most = provider.faults.most_in_flight.load(Ordering::SeqCst);
    assert!(
        most > 512,
        "the provider answered at most {most} charge calls at once"
    );
    assert_eq!(app.charges(), PAYMENTS, "one charge per payment");
}

/// Under load a thousand requests wait on the provider at once, each holding its future
/// for the whole wait, and a future is as large as its largest stage. The payment's row
/// (half a kilobyte) goes on the heap once: stages that took it by value kept a copy each,
/// and a new payment's future was over 5 KiB.
#[actix_web::test]
async fn a_new_payment_future_keeps_no_copy_of_its_row() {
    use payments_api::db::payments::PaymentRow;
    use payments_api::domain::IdempotencyKey;
    use payments_api::idempotency::Sent;
    use payments_api::payments::{create_payment, request::NewPayment};

    let app = spawn_app().await;
    let merchant = app
        .state
        .db
        .run(|conn| payments_api::db::merchants::find_by_name(conn, "default"))
        .await
        .expect("merchants read")
        .expect("the default merchant");
    let body = br#"{"amount": 100, "currency": "usd", "payment_method": "pm_card_visa"}"#;
    let request = NewPayment::parse(body).expect("a valid payment");
    let target = actix_web::http::Uri::from_static("/v1/payments");
    let sent = Sent::new(&target, actix_web::web::Bytes::from_static(body));
    let key = IdempotencyKey::parse(b"future-size").expect("a valid key");
    // Built, never polled: nothing is claimed or charged.
    let future = create_payment(&app.state, &merchant, key, request, None, Some(sent));
    let (size, row) = (
        std::mem::size_of_val(&future),
        std::mem::size_of::<PaymentRow>(),
    );
    drop(future);
    println!("a new payment's future: {size} bytes; a payment row: {row} bytes");
    assert!(
        size <= 2 * row,
        "{size} bytes: the future holds rows ({row} bytes each)"
    );
    assert!(app.simulator.charges().is_empty());
}

/// Text from the provider that no database column can hold (PostgreSQL refuses U+0000 in
/// text) is recorded with U+FFFD in its place: the provider has moved the money, so its
/// answer is kept, not refused with a 500 on every retry.
#[actix_web::test]
async fn a_provider_answer_with_text_no_column_holds_is_recorded_all_the_same() {
    let provider = ScriptedProvider::start(vec![provider_answer(
        r#"{"id": "ch_\u0000x", "status": "failed", "failure_code": "card_declined",
            "failure_message": "declined\u0000"}"#,
    )]);
    let app = spawn_app_with_provider_url(&provider.url, |_| {}).await;
    let first = app.post_payment("nul-1", &visa(1000)).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let payment = first.json();
    assert_eq!(payment["status"], "failed");
    assert_eq!(payment["failure_code"], "card_declined");
    assert_eq!(payment["failure_message"], "declined\u{fffd}");
    assert_eq!(payment["provider_charge_id"], "ch_\u{fffd}x");
    let again = app.post_payment("nul-1", &visa(1000)).await;
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    let calls = provider.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].idempotency_key, payment["id"].as_str().unwrap());
}

/// A 3xx from the provider is an answer of unknown meaning: the payment stays unknown
/// (202), and the redirect is never followed (a GET's body taken for the charge's outcome,
/// or the charge sent again somewhere else).
#[actix_web::test]
async fn a_provider_redirect_is_not_followed_and_leaves_the_outcome_unknown() {
    let provider = ScriptedProvider::start(vec![
        b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\
          Connection: close\r\n\r\n"
            .to_vec(),
        provider_answer(r#"{"id": "ch_from_redirect", "status": "succeeded"}"#),
    ]);
    let app = spawn_app_with_provider_url(&provider.url, |_| {}).await;
    let response = app.post_payment("redirect-1", &visa(1000)).await;
    assert_eq!(response.status, 202, "{}", response.text());
    assert_eq!(response.json()["status"], "processing");
    let calls = provider.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].path, "/v1/charges");
}

/// A provider answer cut short (the connection closed mid-body) is a broken connection:
/// asked again within the request, with the same key, rather than left for later.
#[actix_web::test]
async fn a_provider_answer_cut_short_is_asked_again_with_the_same_key() {
    let cut_short = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\
                      Content-Length: 200\r\nConnection: close\r\n\r\n{\"id\": \"ch_1\", \"sta"
        .to_vec();
    let provider = ScriptedProvider::start(vec![
        cut_short,
        provider_answer(r#"{"id": "ch_1", "status": "succeeded"}"#),
    ]);
    let app = spawn_app_with_provider_url(&provider.url, |_| {}).await;
    let response = app.post_payment("cut-1", &visa(1000)).await;
    assert_eq!(response.status, 201, "{}", response.text());
    let payment = response.json();
    assert_eq!(payment["status"], "succeeded");
    assert_eq!(payment["provider_charge_id"], "ch_1");
    let calls = provider.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].body, calls[1].body, "the same request again");
    assert!(
        calls.iter().all(
            |c| c.idempotency_key == payment["id"].as_str().unwrap() && c.path == "/v1/charges"
        ),
        "{calls:?}"
    );
}
