//! Webhook endpoints as an API: lists and cursors, management per merchant, keys that replay,
//! and destinations that are not public.

use super::*;

/// A list's `starting_after` must name one of the caller's own objects: another merchant's,
/// or one that does not exist, is a 404 (CONTRACT §2), as the feed's `after` is.
#[actix_web::test]
async fn a_cursor_naming_nothing_of_yours_is_404_on_every_list() {
    let app = app_delivering(|_| {}).await;
    let receiver = Receiver::always(200).await;
    let theirs_key = app.create_merchant("other").await;
    let id_of = |response: TestResponse| {
        assert!(response.status.is_success(), "{}", response.text());
        response.json()["id"].as_str().unwrap().to_owned()
    };
    let first_id = |response: TestResponse| {
        response.json()["data"][0]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let endpoint_body = json!({"url": receiver.url, "enabled_events": ["*"]});

    // One object of each kind for each merchant (their endpoints first, so that each
    // has a delivery).
    let (ours_endpoint, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    let theirs_endpoint = id_of(
        app.post_json("/v1/webhook_endpoints", &theirs_key, None, &endpoint_body)
            .await,
    );
    let ours_payment = app.paid_payment(500).await;
    let ours_refund = id_of(
        app.post_refund(&ours_payment, "r", &json!({"amount": 100}))
            .await,
    );
    let theirs_payment = id_of(
        app.post_json("/v1/payments", &theirs_key, Some("p"), &visa(700))
            .await,
    );
    let theirs_refund = id_of(
        app.post_json(
            &format!("/v1/payments/{theirs_payment}/refunds"),
            &theirs_key,
            Some("r"),
            &json!({"amount": 100}),
        )
        .await,
    );
    receiver.wait_for("4 events", |r| r.len() >= 4).await;
    let ours_deliveries = format!("/v1/webhook_endpoints/{ours_endpoint}/deliveries");
    let theirs_deliveries = format!("/v1/webhook_endpoints/{theirs_endpoint}/deliveries");
    let lists = [
        (
            "/v1/payments".to_owned(),
            ours_payment.clone(),
            theirs_payment,
        ),
        (
            format!("/v1/payments/{ours_payment}/refunds"),
            ours_refund,
            theirs_refund,
        ),
        (
            "/v1/events".to_owned(),
            first_id(app.get("/v1/events").await),
            first_id(app.get_as("/v1/events", &theirs_key).await),
        ),
        (
            "/v1/webhook_endpoints".to_owned(),
            ours_endpoint,
            theirs_endpoint,
        ),
        (
            ours_deliveries.clone(),
            first_id(app.get(&ours_deliveries).await),
            first_id(app.get_as(&theirs_deliveries, &theirs_key).await),
        ),
    ];
    for (list, ours, theirs) in lists {
        // A well-formed id of the same kind that names nothing.
        let made_up = format!(
            "{}{}",
            &ours[..ours.len() - 1],
            if ours.ends_with('0') { '1' } else { '0' }
        );
        let page = app.get(&format!("{list}?starting_after={ours}")).await;
        assert_eq!(page.status, 200, "{list} after ours: {}", page.text());
        for cursor in [theirs, made_up] {
            app.get(&format!("{list}?starting_after={cursor}"))
                .await
                .assert_problem(404, "not_found");
        }
    }
}

#[actix_web::test]
async fn webhook_endpoints_are_managed_per_merchant_and_keys_replay_their_answer() {
    let app = app_delivering(|_| {}).await;
    let body = json!({
        "url": "https://hooks.example/payments",
        "enabled_events": ["refund.failed", "payment.succeeded"],
        "description": "orders"
    });
    // A storm of identical creates with one key: one endpoint, one answer.
    let responses = join_all(
        (0..20).map(|_| app.post_json("/v1/webhook_endpoints", &app.api_key, Some("we-1"), &body)),
    )
    .await;
    assert!(
        responses.iter().all(|r| r.status == 201),
        "{}",
        responses[0].text()
    );
    assert!(responses.iter().all(|r| r.body == responses[0].body));
    let replays = responses
        .iter()
        .filter(|r| r.header("idempotent-replayed") == Some("true"))
        .count();
    assert_eq!(replays, 19);
    let created = responses[0].json();
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("we_"));
    assert_eq!(created["object"], "webhook_endpoint");
    assert_eq!(created["url"], "https://hooks.example/payments");
    assert_eq!(
        created["enabled_events"],
        json!(["refund.failed", "payment.succeeded"])
    );
    assert_eq!(created["description"], "orders");
    assert_eq!(created["status"], "enabled");
    assert!(created["secret"].as_str().unwrap().starts_with("whsec_"));
    app.post_json(
        "/v1/webhook_endpoints",
        &app.api_key,
        Some("we-1"),
        &json!({"url": "https://x.example/", "enabled_events": ["*"]}),
    )
    .await
    .assert_problem(422, "idempotency_key_reused");

    let list = app.get("/v1/webhook_endpoints").await.json();
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(!list["data"][0].as_object().unwrap().contains_key("secret"));

    let updated = app
        .endpoint_post(
            &id,
            "",
            &json!({"enabled_events": ["*"], "description": ""}),
        )
        .await;
    assert_eq!(updated.status, 200, "{}", updated.text());
    let updated = updated.json();
    assert_eq!(updated["enabled_events"], json!(["*"]));
    assert_eq!(updated["description"], Value::Null);
    assert_eq!(updated["url"], created["url"]);
    assert!(!updated.as_object().unwrap().contains_key("secret"));

    let other = app.create_merchant("other-endpoints").await;
    app.get_as(&format!("/v1/webhook_endpoints/{id}"), &other)
        .await
        .assert_problem(404, "not_found");
    app.post_json(
        &format!("/v1/webhook_endpoints/{id}"),
        &other,
        None,
        &json!({}),
    )
    .await
    .assert_problem(404, "not_found");
    app.get_as(&format!("/v1/webhook_endpoints/{id}/deliveries"), &other)
        .await
        .assert_problem(404, "not_found");
    let delete_as = |key: String| {
        let path = format!("/v1/webhook_endpoints/{id}");
        let app = &app;
        async move {
            app.request(
                "DELETE",
                &path,
                &[("Authorization", format!("Bearer {key}"))],
                Vec::new(),
            )
            .await
        }
    };
    delete_as(other.clone())
        .await
        .assert_problem(404, "not_found");
    assert_eq!(
        app.get_as("/v1/webhook_endpoints", &other).await.json()["data"],
        json!([])
    );

    for (body, param) in [
        (json!({"url": "https://x.example/"}), "enabled_events"),
        (
            json!({"url": "https://x.example/", "enabled_events": ["payment.exploded"]}),
            "enabled_events",
        ),
        (
            json!({"url": "gopher://x.example/", "enabled_events": ["*"]}),
            "url",
        ),
        (
            json!({"url": "https://u:p@x.example/", "enabled_events": ["*"]}),
            "url",
        ),
        (
            json!({"url": "https://x.example/", "enabled_events": ["*"], "status": "enabled"}),
            "status",
        ),
    ] {
        let problem = app
            .post_json("/v1/webhook_endpoints", &app.api_key, None, &body)
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], param, "{body}");
    }
    app.get("/v1/webhook_endpoints/we_nope")
        .await
        .assert_problem(404, "not_found");
    app.get(&format!(
        "/v1/webhook_endpoints/{id}/deliveries?status=lost"
    ))
    .await
    .assert_problem(400, "invalid_request");

    let deleted = delete_as(app.api_key.clone()).await;
    assert_eq!(deleted.status, 200);
    assert_eq!(
        deleted.json(),
        json!({"id": id, "object": "webhook_endpoint", "deleted": true})
    );
    delete_as(app.api_key.clone())
        .await
        .assert_problem(404, "not_found");
    app.get(&format!("/v1/webhook_endpoints/{id}"))
        .await
        .assert_problem(404, "not_found");
}

#[actix_web::test]
async fn non_public_destinations_are_refused_in_any_spelling() {
    let app = spawn_app().await; // WEBHOOK_ALLOW_PRIVATE_URLS is false by default
    for url in [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://10.0.0.8/",
        "http://192.168.0.1/",
        "http://172.20.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0/",
        "http://[::]/",
        "http://224.0.0.251/",
        "http://[fe80::1]/",
        "http://[fd00::1]/",
        "http://100.100.100.100/",
    ] {
        let problem = app
            .post_json(
                "/v1/webhook_endpoints",
                &app.api_key,
                None,
                &json!({"url": url, "enabled_events": ["*"]}),
            )
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], "url", "{url}");
    }
    let long = format!("https://93.184.215.14/{}", "a".repeat(2048));
    let problem = app
        .post_json(
            "/v1/webhook_endpoints",
            &app.api_key,
            None,
            &json!({"url": long, "enabled_events": ["*"]}),
        )
        .await
        .assert_problem(400, "invalid_request");
    assert_eq!(problem["param"], "url");

    let created = app
        .post_json(
            "/v1/webhook_endpoints",
            &app.api_key,
            None,
            &json!({"url": "https://93.184.215.14/hook", "enabled_events": ["*"]}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let problem = app
        .endpoint_post(&id, "", &json!({"url": "http://[::ffff:7f00:1]/"}))
        .await
        .assert_problem(400, "invalid_request");
    assert_eq!(problem["param"], "url");
    assert_eq!(endpoint_url(&app, &id).await, "https://93.184.215.14/hook");
}

async fn endpoint_url(app: &TestApp, id: &str) -> String {
    let endpoint = app.get(&format!("/v1/webhook_endpoints/{id}")).await.json();
    endpoint["url"].as_str().unwrap().to_owned()
}
