//! Bad input: a clear problem+json answer, and nothing stored or charged.

use crate::support::{spawn_app, spawn_app_with};

#[actix_web::test]
async fn bad_requests_get_their_status_and_code_and_change_nothing() {
    let app = spawn_app().await;
    let auth = format!("Bearer {}", app.api_key);
    let json_ct = ("Content-Type", "application/json".to_owned());
    let good = br#"{"amount":100,"currency":"usd","payment_method":"pm_card_visa"}"#.to_vec();
    let with = |extra: &[(&'static str, String)]| {
        let mut h = vec![("Authorization", auth.clone())];
        h.extend_from_slice(extra);
        h
    };
    let key = |k: &str| ("Idempotency-Key", k.to_owned());

    type Case = (
        &'static str,
        Vec<(&'static str, String)>,
        Vec<u8>,
        u16,
        &'static str,
        Option<&'static str>,
    );
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        ("no api key", vec![json_ct.clone(), key("k1")], good.clone(), 401, "unauthorized", None),
        ("wrong api key", vec![("Authorization", "Bearer sk_test_nope".into()), json_ct.clone(), key("k1")], good.clone(), 401, "unauthorized", None),
        ("not bearer", vec![("Authorization", format!("Basic {}", app.api_key)), json_ct.clone(), key("k1")], good.clone(), 401, "unauthorized", None),
        ("two api keys", with(&[("Authorization", "Bearer sk_test_nope".into()), json_ct.clone(), key("k1")]), good.clone(), 401, "unauthorized", None),
        ("no key", with(std::slice::from_ref(&json_ct)), good.clone(), 400, "idempotency_key_missing", None),
        ("empty key", with(&[json_ct.clone(), key("")]), good.clone(), 400, "idempotency_key_invalid", None),
        ("long key", with(&[json_ct.clone(), key(&"k".repeat(256))]), good.clone(), 400, "idempotency_key_invalid", None),
        ("repeated key", with(&[json_ct.clone(), key("a"), key("b")]), good.clone(), 400, "idempotency_key_invalid", None),
        ("text body", with(&[("Content-Type", "text/plain".into()), key("k1")]), good.clone(), 415, "unsupported_media_type", None),
        ("no content type", with(&[key("k1")]), good.clone(), 415, "unsupported_media_type", None),
        ("two content types", with(&[json_ct.clone(), ("Content-Type", "text/plain".into()), key("k1")]), good.clone(), 415, "unsupported_media_type", None),
        ("compressed", with(&[json_ct.clone(), ("Content-Encoding", "gzip".into()), key("k1")]), good.clone(), 415, "unsupported_media_type", None),
        ("too large", with(&[json_ct.clone(), key("k1")]), vec![b' '; 64 * 1024 + 1], 413, "payload_too_large", None),
        ("not json", with(&[json_ct.clone(), key("k1")]), b"amount=100".to_vec(), 400, "invalid_request", None),
        ("empty body", with(&[json_ct.clone(), key("k1")]), Vec::new(), 400, "invalid_request", None),
        ("array", with(&[json_ct.clone(), key("k1")]), b"[1,2]".to_vec(), 400, "invalid_request", None),
        ("unknown field", with(&[json_ct.clone(), key("k1")]), br#"{"amount":100,"currency":"usd","payment_method":"pm_card_visa","capture":true}"#.to_vec(), 400, "invalid_request", Some("capture")),
        ("string amount", with(&[json_ct.clone(), key("k1")]), br#"{"amount":"100","currency":"usd","payment_method":"pm_card_visa"}"#.to_vec(), 400, "invalid_request", Some("amount")),
        ("float amount", with(&[json_ct.clone(), key("k1")]), br#"{"amount":1.5,"currency":"usd","payment_method":"pm_card_visa"}"#.to_vec(), 400, "invalid_request", Some("amount")),
        ("zero amount", with(&[json_ct.clone(), key("k1")]), br#"{"amount":0,"currency":"usd","payment_method":"pm_card_visa"}"#.to_vec(), 400, "invalid_request", Some("amount")),
        ("huge amount", with(&[json_ct.clone(), key("k1")]), br#"{"amount":100000000,"currency":"usd","payment_method":"pm_card_visa"}"#.to_vec(), 400, "invalid_request", Some("amount")),
        ("overflowing amount", with(&[json_ct.clone(), key("k1")]), br#"{"amount":184467440737095516150,"currency":"usd","payment_method":"pm_card_visa"}"#.to_vec(), 400, "invalid_request", Some("amount")),
        ("bad currency", with(&[json_ct.clone(), key("k1")]), br#"{"amount":100,"currency":"usx","payment_method":"pm_card_visa"}"#.to_vec(), 400, "invalid_request", Some("currency")),
        ("missing method", with(&[json_ct.clone(), key("k1")]), br#"{"amount":100,"currency":"usd"}"#.to_vec(), 400, "invalid_request", Some("payment_method")),
        ("metadata value", with(&[json_ct.clone(), key("k1")]), br#"{"amount":100,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":{"b":1}}}"#.to_vec(), 400, "invalid_request", Some("metadata")),
        ("deep nesting", with(&[json_ct.clone(), key("k1")]), format!("{}{}", "[".repeat(5000), "]".repeat(5000)).into_bytes(), 400, "invalid_request", None),
        ("amount beyond f64", with(&[json_ct.clone(), key("k1")]), br#"{"currency":"usd","payment_method":"pm_card_visa",
            "amount": 1e400}"#.to_vec(), 400, "invalid_request", Some("amount")),
        ("deep metadata", with(&[json_ct.clone(), key("k1")]), format!(r#"{{"amount":1,"currency":"usd","metadata":{{"a":{}1{}}}}}"#, "[".repeat(200), "]".repeat(200)).into_bytes(), 400, "invalid_request", Some("metadata")),
        ("bad utf-8", with(&[json_ct.clone(), key("k1")]), b"{\"amount\":\xff}".to_vec(), 400, "invalid_request", None),
        ("amount given twice", with(&[json_ct.clone(), key("k1")]), br#"{"amount":100,"currency":"usd","payment_method":"pm_card_visa","amount":200}"#.to_vec(), 400, "invalid_request", Some("amount")),
    ];

    for (name, headers, body, status, code, param) in cases {
        let response = app.request("POST", "/v1/payments", &headers, body).await;
        let problem = response.assert_problem(status, code);
        assert_eq!(problem["param"].as_str(), param, "{name}: {problem}");
        assert!(response.header("x-request-id").is_some(), "{name}");
    }
    assert_eq!(app.payment_rows().await, 0, "nothing was stored");
    assert_eq!(
        app.simulator.charge_calls(),
        0,
        "nothing reached the provider"
    );

    // A wrong method on a known path is no route either (CONTRACT §2: 404).
    for method in ["DELETE", "PUT", "PATCH"] {
        app.request(method, "/v1/payments", &with(&[]), Vec::new())
            .await
            .assert_problem(404, "not_found");
    }
    // HEAD is GET without the body.
    let head = app.request("HEAD", "/health/live", &[], Vec::new()).await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    app.request("GET", "/v2/anything", &[], Vec::new())
        .await
        .assert_problem(404, "not_found");
    app.request("GET", "/v1/payments", &[], Vec::new())
        .await
        .assert_problem(401, "unauthorized");
}

/// A POST takes what it asks for in its body: a query parameter is refused, not ignored as
/// if it had been honoured (`?amount=5` on a capture would look like a partial capture).
#[actix_web::test]
async fn a_query_parameter_on_a_post_is_refused_and_changes_nothing() {
    let app = spawn_app().await;
    let headers = [
        ("Authorization", format!("Bearer {}", app.api_key)),
        ("Content-Type", "application/json".to_owned()),
        ("Idempotency-Key", "with-query".to_owned()),
    ];
    let good = br#"{"amount":100,"currency":"usd","payment_method":"pm_card_visa"}"#.to_vec();
    let payment_id = app.paid_payment(1000).await;
    for path in [
        "/v1/payments?amount=5".to_owned(),
        format!("/v1/payments/{payment_id}/refunds?amount=5"),
        format!("/v1/payments/{payment_id}/capture?amount=5"),
        "/v1/payouts?amount=5".to_owned(),
    ] {
        let body = if path.starts_with("/v1/payments?") {
            good.clone()
        } else {
            b"{}".to_vec()
        };
        let problem = app
            .request("POST", &path, &headers, body)
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], "amount", "{path}: {problem}");
    }
    assert_eq!(app.payment_rows().await, 1, "only the payment made before");
    assert_eq!(app.simulator.charge_calls(), 1);
    assert_eq!(app.simulator.refund_calls(), 0);
}

/// The same for the requests without a body: a read or a delete of one object, or the
/// balance, takes no query parameter (`?expand=x` would look honoured), and an optional
/// POST sent without a body is held to it too. A list's filter longer than its field can
/// hold is a mistake, not an empty page.
#[actix_web::test]
async fn a_query_parameter_on_a_read_or_a_delete_is_refused_and_changes_nothing() {
    let app = spawn_app_with(|s| s.webhook_allow_private_urls = true).await;
    let payment_id = app.paid_payment(1000).await;
    let (endpoint_id, _) = app.create_endpoint("http://127.0.0.1:9/hook", &["*"]).await;
    let listed = |path: &'static str| {
        let app = &app;
        async move {
            app.get(path).await.json()["data"][0]["id"]
                .as_str()
                .map(str::to_owned)
        }
    };
    let event_id = listed("/v1/events").await.expect("an event");
    let transaction_id = listed("/v1/balance_transactions")
        .await
        .expect("a balance transaction");
    let auth = [("Authorization", format!("Bearer {}", app.api_key))];
    for (method, path) in [
        ("GET", format!("/v1/payments/{payment_id}?expand=x")),
        ("GET", "/v1/balance?expand=x".to_owned()),
        (
            "GET",
            format!("/v1/balance_transactions/{transaction_id}?expand=x"),
        ),
        ("GET", format!("/v1/events/{event_id}?expand=x")),
        (
            "GET",
            format!("/v1/webhook_endpoints/{endpoint_id}?expand=x"),
        ),
        (
            "DELETE",
            format!("/v1/webhook_endpoints/{endpoint_id}?expand=x"),
        ),
        (
            "POST",
            format!("/v1/webhook_endpoints/{endpoint_id}/test?expand=x"),
        ),
        (
            "GET",
            "/v1/payouts/po_0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4?expand=x".to_owned(),
        ),
        (
            "GET",
            "/v1/disputes/dp_0190a1b2c3d4e5f6a7b8c9d0e1f2a3b4?expand=x".to_owned(),
        ),
    ] {
        let problem = app
            .request(method, &path, &auth, Vec::new())
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], "expand", "{method} {path}: {problem}");
    }
    // Without a key, 401 comes first, whatever the query.
    app.request(
        "GET",
        &format!("/v1/payments/{payment_id}?expand=x"),
        &[],
        Vec::new(),
    )
    .await
    .assert_problem(401, "unauthorized");
    // The endpoint is still there.
    assert_eq!(
        app.get(&format!("/v1/webhook_endpoints/{endpoint_id}"))
            .await
            .status,
        200
    );

    let long = "c".repeat(256);
    let problem = app
        .get(&format!("/v1/payments?customer_id={long}"))
        .await
        .assert_problem(400, "invalid_request");
    assert_eq!(problem["param"], "customer_id");
    let fits = app
        .get(&format!("/v1/payments?customer_id={}", &long[..255]))
        .await;
    assert_eq!(fits.status, 200, "{}", fits.text());
    assert_eq!(app.simulator.charge_calls(), 1);
}
