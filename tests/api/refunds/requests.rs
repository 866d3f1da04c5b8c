//! Refund requests: full and partial, over-refunds, what cannot be refunded, replays,
//! reused keys and validation.

use super::*;

#[actix_web::test]
async fn a_refund_without_amount_refunds_everything_once() {
    let app = spawn_app().await;
    let payment_id = app.paid_payment(2000).await;
    let paid = app.get(&format!("/v1/payments/{payment_id}")).await.json();

    let response = app.post_refund(&payment_id, "refund-all", &json!({})).await;
    assert_eq!(response.status, 201, "{}", response.text());
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert!(response.header("idempotent-replayed").is_none());
    let refund = response.json();
    let id = refund["id"].as_str().unwrap();
    assert!(id.starts_with("re_") && id.len() == 3 + 32, "{id}");
    assert_eq!(refund["object"], "refund");
    assert_eq!(refund["payment_id"], payment_id.as_str());
    assert_eq!(refund["amount"], 2000);
    assert_eq!(refund["currency"], "usd");
    assert_eq!(refund["status"], "succeeded");
    assert_eq!(refund["reason"], serde_json::Value::Null);
    assert_eq!(refund["failure_code"], serde_json::Value::Null);
    assert!(refund["created_at"].as_str().unwrap().ends_with('Z'));

    // The provider was asked once, with our refund id as the reference, for its charge.
    let ledger = app.provider_refunds();
    assert_eq!(ledger.len(), 1);
    let payment = app.get(&format!("/v1/payments/{payment_id}")).await.json();
    assert_eq!(ledger[0].reference, id);
    assert_eq!(ledger[0].amount, 2000);
    assert_eq!(
        ledger[0].charge,
        payment["provider_charge_id"].as_str().unwrap()
    );
    assert_eq!(refund["provider_refund_id"], ledger[0].id.as_str());
    assert_eq!(payment["amount_refunded"], 2000);
    assert!(
        payment["updated_at"].as_str() > paid["updated_at"].as_str(),
        "the payment changed: {payment}"
    );
    assert_eq!(app.refund_totals(&payment_id).await, (2000, 2000));

    // Nothing is left: a new refund is refused and the provider is not called.
    app.post_refund(&payment_id, "refund-more", &json!({}))
        .await
        .assert_problem(409, "payment_not_refundable");
    assert_eq!(app.simulator.refund_calls(), 1);
}

/// Every field of a refund is optional, so no body at all is a refund of all that is left
/// (as for captures and cancels); a body must still be JSON.
#[actix_web::test]
async fn a_refund_with_no_body_refunds_everything() {
    let app = spawn_app().await;
    let payment_id = app.paid_payment(1200).await;
    let path = format!("/v1/payments/{payment_id}/refunds");
    let auth = format!("Bearer {}", app.api_key);
    let headers = |key: &str| {
        vec![
            ("Authorization", auth.clone()),
            ("Idempotency-Key", key.to_owned()),
        ]
    };
    app.request("POST", &path, &headers("as-text"), b"amount=5".to_vec())
        .await
        .assert_problem(415, "unsupported_media_type");
    let response = app
        .request("POST", &path, &headers("no-body"), Vec::new())
        .await;
    assert_eq!(response.status, 201, "{}", response.text());
    assert_eq!(response.json()["amount"], 1200);
    assert_eq!(app.refund_totals(&payment_id).await, (1200, 1200));
}

#[actix_web::test]
async fn partial_refunds_until_nothing_is_left() {
    let app = spawn_app().await;
    let payment_id = app.paid_payment(1000).await;

    let first = app
        .post_refund(
            &payment_id,
            "p1",
            &json!({"amount": 300, "reason": "duplicate"}),
        )
        .await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.json()["reason"], "duplicate");
    assert_eq!(app.refund_totals(&payment_id).await, (300, 300));

    // No amount: what is left.
    let second = app.post_refund(&payment_id, "p2", &json!({})).await;
    assert_eq!(second.status, 201, "{}", second.text());
    assert_eq!(second.json()["amount"], 700);
    assert_eq!(app.refund_totals(&payment_id).await, (1000, 1000));

    for (key, body) in [("p3", json!({"amount": 1})), ("p4", json!({}))] {
        let refused = app.post_refund(&payment_id, key, &body).await;
        let problem = refused.assert_problem(409, "payment_not_refundable");
        assert!(problem.get("param").is_none());
    }
    assert_eq!(app.provider_refunds().len(), 2);
    let payment = app.get(&format!("/v1/payments/{payment_id}")).await.json();
    assert_eq!(payment["amount_refunded"], 1000);

    // The list: refunds only (not the refused requests), newest first, paginated.
    let list = app
        .get(&format!("/v1/payments/{payment_id}/refunds"))
        .await
        .json();
    assert_eq!(list["object"], "list");
    assert_eq!(list["has_more"], false);
    let data = list["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    assert_eq!(data[0]["id"], second.json()["id"]);
    assert_eq!(data[1]["id"], first.json()["id"]);
    let page = app
        .get(&format!("/v1/payments/{payment_id}/refunds?limit=1"))
        .await
        .json();
    assert_eq!(page["has_more"], true);
    assert_eq!(page["data"][0]["id"], second.json()["id"]);
    let cursor = page["data"][0]["id"].as_str().unwrap();
    let rest = app
        .get(&format!(
            "/v1/payments/{payment_id}/refunds?limit=1&starting_after={cursor}"
        ))
        .await
        .json();
    assert_eq!(rest["has_more"], false);
    assert_eq!(rest["data"][0]["id"], first.json()["id"]);
    app.get(&format!("/v1/payments/{payment_id}/refunds?limit=0"))
        .await
        .assert_problem(400, "invalid_request");
}

#[actix_web::test]
async fn an_over_refund_is_422_and_its_answer_is_replayed() {
    let app = spawn_app().await;
    let payment_id = app.paid_payment(1000).await;
    assert_eq!(
        app.post_refund(&payment_id, "o1", &json!({"amount": 600}))
            .await
            .status,
        201
    );

    let over = app
        .post_refund(&payment_id, "o2", &json!({"amount": 500}))
        .await;
    over.assert_problem(422, "amount_exceeds_refundable");
    assert_eq!(app.refund_totals(&payment_id).await, (600, 600));

    // The refusal is the key's final answer: the same request replays it byte for byte,
    // even once the amount would fit again.
    let replay = app
        .post_refund(&payment_id, "o2", &json!({"amount": 500}))
        .await;
    replay.assert_problem(422, "amount_exceeds_refundable");
    assert_eq!(replay.body, over.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(app.refund_rows(&payment_id, "rejected").await, 1);

    let rest = app
        .post_refund(&payment_id, "o3", &json!({"amount": 400}))
        .await;
    assert_eq!(rest.status, 201);
    assert_eq!(app.provider_refunds().len(), 2);
    assert_eq!(app.simulator.refund_calls(), 2);
    assert_eq!(app.refund_totals(&payment_id).await, (1000, 1000));
}

#[actix_web::test]
async fn a_declined_payment_cannot_be_refunded() {
    let app = spawn_app().await;
    let declined = app
        .post_payment(
            "declined",
            &json!({"amount": 500, "currency": "usd", "payment_method": "pm_card_declined"}),
        )
        .await;
    assert_eq!(declined.status, 201);
    let payment_id = declined.json()["id"].as_str().unwrap().to_owned();

    for body in [json!({}), json!({"amount": 100})] {
        let key = format!("refund-declined-{}", body["amount"]);
        app.post_refund(&payment_id, &key, &body)
            .await
            .assert_problem(409, "payment_not_refundable");
    }
    // Still processing (pending at the provider) is not refundable either.
    let processing = app
        .post_payment(
            "async",
            &json!({"amount": 500, "currency": "usd", "payment_method": "pm_card_async"}),
        )
        .await;
    assert_eq!(processing.status, 202);
    let processing_id = processing.json()["id"].as_str().unwrap().to_owned();
    app.post_refund(&processing_id, "refund-processing", &json!({}))
        .await
        .assert_problem(409, "payment_not_refundable");
    assert_eq!(app.simulator.refund_calls(), 0);
    assert_eq!(app.refund_totals(&payment_id).await, (0, 0));
    let list = app
        .get(&format!("/v1/payments/{payment_id}/refunds"))
        .await
        .json();
    assert_eq!(list["data"].as_array().unwrap().len(), 0);
}

#[actix_web::test]
async fn an_unknown_or_foreign_payment_is_404_and_nothing_is_stored() {
    let app = spawn_app().await;
    let other_key = app.create_merchant("other").await;
    let foreign = app
        .post_json(
            "/v1/payments",
            &other_key,
            Some("theirs"),
            &json!({"amount": 900, "currency": "usd", "payment_method": "pm_card_visa"}),
        )
        .await;
    assert_eq!(foreign.status, 201);
    let foreign_id = foreign.json()["id"].as_str().unwrap().to_owned();

    for payment_id in [
        "pay_0190a0b0c0d07000800000000000000f",
        "nonsense",
        foreign_id.as_str(),
    ] {
        app.post_refund(payment_id, "k404", &json!({"amount": 100}))
            .await
            .assert_problem(404, "not_found");
        app.get(&format!("/v1/payments/{payment_id}/refunds"))
            .await
            .assert_problem(404, "not_found");
    }
    assert_eq!(app.refund_rows(&foreign_id, "rejected").await, 0);
    assert_eq!(app.simulator.refund_calls(), 0);

    // A 404 is not remembered: the key is still free for a real refund.
    let mine = app.paid_payment(100).await;
    let ok = app
        .post_refund(&mine, "k404", &json!({"amount": 100}))
        .await;
    assert_eq!(ok.status, 201, "{}", ok.text());
    // And the owner can refund their payment.
    let theirs = app
        .post_json(
            &format!("/v1/payments/{foreign_id}/refunds"),
            &other_key,
            Some("k404"),
            &json!({}),
        )
        .await;
    assert_eq!(theirs.status, 201, "{}", theirs.text());
    assert_eq!(theirs.json()["amount"], 900);
}

#[actix_web::test]
async fn a_retried_refund_replays_byte_for_byte_and_refunds_once() {
    let app = spawn_app().await;
    let payment_id = app.paid_payment(1500).await;
    let first = app
        .post_refund(
            &payment_id,
            "retry-me",
            &json!({"amount": 500, "reason": "requested_by_customer"}),
        )
        .await;
    assert_eq!(first.status, 201);

    // The same request written differently is the same request.
    let body = br#"{ "reason" : "requested_by_customer",   "amount": 500 }"#.to_vec();
    let replay = app
        .request(
            "POST",
            &format!("/v1/payments/{payment_id}/refunds"),
            &[
                ("Authorization", format!("Bearer {}", app.api_key)),
                ("Content-Type", "application/json".to_owned()),
                ("Idempotency-Key", "\"retry-me\"".to_owned()),
            ],
            body,
        )
        .await;
    assert_eq!(replay.status, 201);
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));

    assert_eq!(app.simulator.refund_calls(), 1);
    assert_eq!(app.provider_refunds().len(), 1);
    assert_eq!(app.refund_rows(&payment_id, "succeeded").await, 1);
    assert_eq!(app.refund_totals(&payment_id).await, (500, 500));
}

#[actix_web::test]
async fn a_key_reused_with_a_different_request_is_refused_and_runs_nothing() {
    let app = spawn_app().await;
    let payment_id = app.paid_payment(1000).await;
    let other_payment = app.paid_payment(1000).await;
    assert_eq!(
        app.post_refund(&payment_id, "reuse", &json!({"amount": 100}))
            .await
            .status,
        201
    );

    for (payment, body) in [
        (&payment_id, json!({"amount": 200})),
        (&payment_id, json!({})),
        (&payment_id, json!({"amount": 100, "reason": "fraudulent"})),
        (&other_payment, json!({"amount": 100})),
    ] {
        app.post_refund(payment, "reuse", &body)
            .await
            .assert_problem(422, "idempotency_key_reused");
    }
    assert_eq!(app.simulator.refund_calls(), 1);
    assert_eq!(app.refund_totals(&payment_id).await, (100, 100));
    assert_eq!(app.refund_totals(&other_payment).await, (0, 0));
}

#[actix_web::test]
async fn refund_bodies_are_validated_before_anything_is_stored() {
    let app = spawn_app().await;
    let payment_id = app.paid_payment(1000).await;
    for (body, param) in [
        (json!({"amount": 100, "currency": "usd"}), "currency"),
        (json!({"amount": 0}), "amount"),
        (json!({"amount": "100"}), "amount"),
        (json!({"reason": "changed_my_mind"}), "reason"),
    ] {
        let problem = app
            .post_refund(&payment_id, "v", &body)
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], param, "{body}");
    }
    app.post_json(
        &format!("/v1/payments/{payment_id}/refunds"),
        &app.api_key,
        None,
        &json!({}),
    )
    .await
    .assert_problem(400, "idempotency_key_missing");
    // Nothing was remembered: the key still works.
    let ok = app
        .post_refund(&payment_id, "v", &json!({"amount": 100}))
        .await;
    assert_eq!(ok.status, 201);
}
