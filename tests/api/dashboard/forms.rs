//! CSRF, escaping and once-only actions, over plain HTTP.

use futures_util::future::join_all;
use serde_json::json;

use super::{Visitor, input_value, manual};
use crate::support::{spawn_app, visa};

#[actix_web::test]
async fn a_refund_form_sent_many_times_refunds_once_and_a_forged_one_nothing() {
    let app = spawn_app().await;
    let payment = app.payment_with("dash-pay", &visa(2000)).await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;
    let page = visitor.get(&format!("/dashboard/payments/{payment}")).await;
    assert_eq!(page.status, 200);
    let html = page.text();
    let csrf = input_value(&html, "/refund", "csrf_token");
    let key = input_value(&html, "/refund", "idempotency_key");
    let action = format!("/dashboard/payments/{payment}/refund");

    // Forged: no token, a wrong one: 403, nothing done.
    visitor
        .post(&action, &[("idempotency_key", &key), ("amount", "5.00")])
        .await
        .assert_html(403, "csrf_failed");
    visitor
        .post(
            &action,
            &[
                ("csrf_token", "forged"),
                ("idempotency_key", &key),
                ("amount", "5.00"),
            ],
        )
        .await
        .assert_html(403, "csrf_failed");
    assert!(app.provider_refunds().is_empty());

    // A double click (many at once), then the same form again after a reload.
    let fields = [
        ("csrf_token", csrf.as_str()),
        ("idempotency_key", key.as_str()),
        ("amount", "5.00"),
    ];
    let answers = join_all((0..5).map(|_| visitor.post(&action, &fields))).await;
    for answer in &answers {
        assert_eq!(answer.status, 303, "{}", answer.text());
    }
    let again = visitor.post(&action, &fields).await;
    assert_eq!(again.status, 303);
    let refunds = app.provider_refunds();
    assert_eq!(refunds.len(), 1, "one refund at the provider");
    assert_eq!(refunds[0].amount, 500);
    assert_eq!(app.simulator.refund_calls(), 1, "one provider call");
    let shown = visitor
        .get(&format!("/dashboard/payments/{payment}?done=refund"))
        .await
        .text();
    assert!(
        shown.contains("Refund requested.") && shown.contains("5.00 USD"),
        "{shown}"
    );

    // A refusal shows the problem's detail; bad input too; nothing moves.
    let html = visitor
        .get(&format!("/dashboard/payments/{payment}"))
        .await
        .text();
    let fresh = input_value(&html, "/refund", "idempotency_key");
    let too_much = visitor
        .post(
            &action,
            &[
                ("csrf_token", &csrf),
                ("idempotency_key", &fresh),
                ("amount", "99.00"),
            ],
        )
        .await;
    assert_eq!(too_much.status, 422);
    assert!(
        too_much.text().contains("exceeds the 1500 left to refund"),
        "{}",
        too_much.text()
    );
    let html = visitor
        .get(&format!("/dashboard/payments/{payment}"))
        .await
        .text();
    let other = input_value(&html, "/refund", "idempotency_key");
    let bad = visitor
        .post(
            &action,
            &[
                ("csrf_token", &csrf),
                ("idempotency_key", &other),
                ("amount", "1.234"),
            ],
        )
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("at most 2 decimals"));
    assert_eq!(app.provider_refunds().len(), 1);
}

#[actix_web::test]
async fn an_authorization_is_captured_or_canceled_from_its_page() {
    let app = spawn_app().await;
    let held = app.payment_with("dash-held", &manual(3000)).await;
    let released = app.payment_with("dash-released", &manual(1000)).await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;
    let html = visitor
        .get(&format!("/dashboard/payments/{held}"))
        .await
        .text();
    let fields = |from: &str| {
        (
            input_value(&html, from, "csrf_token"),
            input_value(&html, from, "idempotency_key"),
        )
    };
    let (csrf, key) = fields("/capture");
    let captured = visitor
        .post(
            &format!("/dashboard/payments/{held}/capture"),
            &[
                ("csrf_token", &csrf),
                ("idempotency_key", &key),
                ("amount", "20"),
            ],
        )
        .await;
    assert_eq!(captured.status, 303, "{}", captured.text());
    let now = app.get(&format!("/v1/payments/{held}")).await.json();
    assert_eq!(
        (now["status"].as_str(), now["amount_captured"].as_i64()),
        (Some("succeeded"), Some(2000))
    );
    // Its event names the request that made it, as an API request's does.
    let made_by = |response: &crate::support::TestResponse, key: &str| json!({"id": response.header("x-request-id").expect("x-request-id"), "idempotency_key": key});
    let events = app.events_about("payment.succeeded", &held).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["request"], made_by(&captured, &key));

    let html = visitor
        .get(&format!("/dashboard/payments/{released}"))
        .await
        .text();
    let csrf = input_value(&html, "/cancel", "csrf_token");
    let key = input_value(&html, "/cancel", "idempotency_key");
    let canceled = visitor
        .post(
            &format!("/dashboard/payments/{released}/cancel"),
            &[("csrf_token", &csrf), ("idempotency_key", &key)],
        )
        .await;
    assert_eq!(canceled.status, 303);
    assert_eq!(
        app.get(&format!("/v1/payments/{released}")).await.json()["status"],
        "canceled"
    );
    let events = app.events_about("payment.canceled", &released).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["request"], made_by(&canceled, &key));
    assert_eq!(app.simulator.captures().len(), 1);
    assert_eq!(app.simulator.cancels().len(), 1);
}

/// Input no page can take is refused with the dashboard's own page (its security headers,
/// the reason), never a 5xx: a NUL anywhere in the address (PostgreSQL holds no NUL in text:
/// a search for one was a 503), a form or query that does not parse.
#[actix_web::test]
async fn input_no_page_can_take_is_refused_with_a_page_and_changes_nothing() {
    let app = spawn_app().await;
    let paid = app.payment_with("dash-bad-input", &visa(1000)).await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;
    let html = visitor
        .get(&format!("/dashboard/payments/{paid}"))
        .await
        .text();
    let csrf = input_value(&html, "/refund", "csrf_token");
    let key = input_value(&html, "/refund", "idempotency_key");
    let refund = format!("/dashboard/payments/{paid}/refund");
    let answers = [
        visitor.get("/dashboard/payments?q=%00").await,
        visitor.get("/dashboard/payments?customer=a%00").await,
        visitor
            .get("/dashboard/events?starting_after=evt_%00")
            .await,
        visitor.get(&format!("/dashboard/payments/{paid}%00")).await,
        visitor
            .post(
                &format!("/dashboard/payments/{paid}%00/refund"),
                &[("csrf_token", &csrf), ("idempotency_key", &key)],
            )
            .await,
        visitor.get("/dashboard/payments?status=a&status=b").await,
        visitor
            .post(
                &refund,
                &[
                    ("csrf_token", &csrf),
                    ("csrf_token", &csrf),
                    ("idempotency_key", &key),
                ],
            )
            .await,
    ];
    // A form sent compressed would be read as if it were not: 415, as the API answers.
    let compressed = visitor
        .send(
            "POST",
            &refund,
            Some(&[("csrf_token", &csrf), ("idempotency_key", &key)]),
            &[("Content-Encoding", "gzip")],
        )
        .await;
    assert_eq!(compressed.status, 415, "{}", compressed.text());
    assert!(compressed.text().contains("nothing was done"));
    for answer in &answers {
        assert_eq!(answer.status, 400, "{}", answer.text());
        assert_eq!(
            answer.header("content-type"),
            Some("text/html; charset=utf-8")
        );
        assert!(answer.header("content-security-policy").is_some());
        assert!(
            answer.text().contains("nothing was done"),
            "{}",
            answer.text()
        );
    }
    assert!(app.simulator.refunds().is_empty());
}

#[actix_web::test]
async fn every_value_is_shown_as_text_never_run() {
    let app = spawn_app().await;
    let script = "<script>alert('xss')</script>";
    let image = "<img src=x onerror=alert(1)>";
    let payment = app
        .payment_with(
            "dash-xss",
            &json!({"amount": 700, "currency": "usd", "payment_method": "pm_card_visa",
                "description": script, "customer_id": image, "metadata": {"note": image}}),
        )
        .await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;
    for path in [
        format!("/dashboard/payments/{payment}"),
        "/dashboard/payments".to_owned(),
    ] {
        let html = visitor.get(&path).await.text();
        assert!(
            !html.contains("<script>") && !html.contains("<img"),
            "{path}: {html}"
        );
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{path}"
        );
    }
    let html = visitor
        .get(&format!("/dashboard/payments/{payment}"))
        .await
        .text();
    assert!(html.contains("&lt;script&gt;alert('xss')&lt;/script&gt;"));
    // A search finds by id and by idempotency key, and answers 404 for neither.
    let by_key = visitor.get("/dashboard/payments?q=dash-xss").await;
    assert_eq!(
        by_key.header("location"),
        Some(format!("/dashboard/payments/{payment}").as_str())
    );
    assert_eq!(
        visitor
            .get("/dashboard/payments?q=nothing-like-it")
            .await
            .status,
        404
    );
}

#[actix_web::test]
async fn disputes_are_answered_and_money_paid_out_from_the_dashboard_once() {
    use std::time::Duration;
    let app = crate::support::spawn_app_with(|s| {
        s.provider_async_delay = Duration::from_millis(100);
        s.ledger.pending = Duration::ZERO;
        s.ledger.fee_percent_bps = 0;
        s.ledger.fee_fixed = 0;
        s.ledger.dispute_fee = 0;
    })
    .await;
    let disputed = |key: &'static str| {
        let app = &app;
        async move {
            let body =
                json!({"amount": 1000, "currency": "usd", "payment_method": "pm_card_dispute"});
            app.payment_with(key, &body).await
        }
    };
    let (won, lost) = (disputed("dash-dp-1").await, disputed("dash-dp-2").await);
    app.payment_with("dash-funds", &visa(4000)).await;
    let dispute_of = |payment: String| {
        let app = &app;
        async move {
            crate::support::wait_for(Duration::from_secs(15), "the dispute opens", || async {
                let list = app
                    .get(&format!("/v1/disputes?payment_id={payment}"))
                    .await
                    .json();
                list["data"][0]["id"].as_str().map(str::to_owned)
            })
            .await
        }
    };
    let (first, second) = (dispute_of(won).await, dispute_of(lost).await);
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;
    let overview = visitor.get("/dashboard").await.text();
    assert!(
        overview.contains("Open disputes")
            && overview.contains(&first)
            && overview.contains(&second),
        "{overview}"
    );
    let page = visitor.get("/dashboard/disputes").await;
    assert_eq!(page.status, 200);
    let html = page.text();
    assert!(html.contains(&first) && html.contains(&second) && html.contains("Submit evidence"));

    // Evidence submitted twice with one form: one step at the provider. Long evidence in
    // letters of two bytes (six once URL-encoded: 108 KB of form) is taken as the API takes it.
    let evidence = format!("/dashboard/disputes/{first}/evidence");
    let csrf = input_value(&html, &evidence, "csrf_token");
    let key = input_value(&html, &evidence, "idempotency_key");
    let text = format!("winning_evidence: signed for {}", "é".repeat(18_000));
    let fields = [
        ("csrf_token", csrf.as_str()),
        ("idempotency_key", key.as_str()),
        ("text", text.as_str()),
    ];
    for answer in join_all((0..3).map(|_| visitor.post(&evidence, &fields))).await {
        assert_eq!(answer.status, 303, "{}", answer.text());
    }
    let accept = format!("/dashboard/disputes/{second}/accept");
    let csrf2 = input_value(&html, &accept, "csrf_token");
    let key2 = input_value(&html, &accept, "idempotency_key");
    assert_eq!(
        visitor
            .post(
                &accept,
                &[("csrf_token", &csrf2), ("idempotency_key", &key2)]
            )
            .await
            .status,
        303
    );
    assert_eq!(app.simulator.disputes.calls(), 2);
    assert_eq!(
        app.get(&format!("/v1/disputes/{first}")).await.json()["status"],
        "under_review"
    );
    assert_eq!(
        app.get(&format!("/v1/disputes/{second}")).await.json()["status"],
        "lost"
    );
    // Forged: nothing done.
    visitor
        .post(&accept, &[("idempotency_key", "another")])
        .await
        .assert_html(403, "csrf_failed");

    // The balance, and a payout made once from a form sent twice; too much is refused.
    let page = visitor.get("/dashboard/balance").await;
    assert_eq!(page.status, 200);
    let html = page.text();
    assert!(
        html.contains("Available") && html.contains("40.00 USD"),
        "{html}"
    );
    let csrf = input_value(&html, "/payout", "csrf_token");
    let key = input_value(&html, "/payout", "idempotency_key");
    let fields = [
        ("csrf_token", csrf.as_str()),
        ("idempotency_key", key.as_str()),
        ("amount", "5.00"),
        ("currency", "usd"),
        ("destination", "ba_test_instant"),
    ];
    for _ in 0..2 {
        let sent = visitor.post("/dashboard/balance/payout", &fields).await;
        assert_eq!(sent.status, 303);
        assert_eq!(
            sent.header("location"),
            Some("/dashboard/balance?done=payout_paid")
        );
    }
    assert_eq!(app.simulator.payouts.all().len(), 1);
    let html = visitor
        .get("/dashboard/balance?done=payout_paid")
        .await
        .text();
    assert!(html.contains("Payout paid.") && html.contains("paid"));
    // One that fails at once says so.
    let declined_key = input_value(&html, "/payout", "idempotency_key");
    let declined = visitor
        .post(
            "/dashboard/balance/payout",
            &[
                ("csrf_token", csrf.as_str()),
                ("idempotency_key", declined_key.as_str()),
                ("amount", "1.00"),
                ("currency", "usd"),
                ("destination", "ba_test_declined"),
            ],
        )
        .await;
    assert_eq!(
        declined.header("location"),
        Some("/dashboard/balance?done=payout_failed")
    );
    let html = visitor
        .get("/dashboard/balance?done=payout_failed")
        .await
        .text();
    assert!(html.contains("Payout failed"), "{html}");
    let fresh = input_value(&html, "/payout", "idempotency_key");
    let too_much = visitor
        .post(
            "/dashboard/balance/payout",
            &[
                ("csrf_token", csrf.as_str()),
                ("idempotency_key", fresh.as_str()),
                ("amount", "9999.00"),
                ("currency", "usd"),
            ],
        )
        .await;
    assert_eq!(too_much.status, 422);
    assert!(
        too_much.text().contains("more than the"),
        "{}",
        too_much.text()
    );
    assert_eq!(
        app.simulator.payouts.all().len(),
        2,
        "the paid one and the declined one; the refused one never reached the provider"
    );
}

#[actix_web::test]
async fn the_events_page_shows_each_events_json_as_text_by_type() {
    let app = spawn_app().await;
    app.payment_with(
        "dash-ev-1",
        &json!({"amount": 500, "currency": "usd",
        "payment_method": "pm_card_visa", "description": "<b>bold</b>"}),
    )
    .await;
    app.payment_with(
        "dash-ev-2",
        &json!({"amount": 500, "currency": "usd",
        "payment_method": "pm_card_declined"}),
    )
    .await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;
    let all = visitor.get("/dashboard/events").await.text();
    assert!(all.contains("payment.succeeded") && all.contains("payment.failed"));
    assert!(
        all.contains("&lt;b&gt;bold&lt;/b&gt;") && !all.contains("<b>bold"),
        "escaped JSON"
    );
    let failed = visitor
        .get("/dashboard/events?type=payment.failed")
        .await
        .text();
    let listed = |html: &str, kind: &str| html.matches(&format!("<summary>{kind} ")).count();
    assert_eq!(
        (
            listed(&all, "payment.succeeded"),
            listed(&all, "payment.failed")
        ),
        (1, 1)
    );
    assert_eq!(
        (
            listed(&failed, "payment.succeeded"),
            listed(&failed, "payment.failed")
        ),
        (0, 1)
    );
}
