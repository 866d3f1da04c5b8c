//! What the pages read: the payments by day, a payment's deliveries in its timeline.

use std::time::Duration;

use super::Visitor;
use crate::deliveries::Receiver;
use crate::support::{spawn_app, spawn_app_with, wait_until};

fn day(offset: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::days(offset))
        .format("%Y-%m-%d")
        .to_string()
}

/// 26 paid payments, one more than a dashboard page, oldest first, and a visitor signed in.
async fn a_page_and_one_more(app: &crate::support::TestApp) -> (Vec<String>, Visitor<'_>) {
    let mut ids = Vec::new();
    for _ in 0..26 {
        ids.push(app.paid_payment(1000).await);
    }
    let mut visitor = Visitor::new(app);
    visitor.sign_in(&app.api_key).await;
    (ids, visitor)
}

#[actix_web::test]
async fn payments_are_filtered_by_day_and_the_days_follow_the_pages() {
    let app = spawn_app().await;
    // One more than a page, so the filter has to ride along to the next one.
    let (ids, visitor) = a_page_and_one_more(&app).await;
    let (yesterday, today, tomorrow) = (day(-1), day(0), day(1));

    let first = visitor
        .get(&format!("/dashboard/payments?from={today}&to={today}"))
        .await;
    assert_eq!(first.status, 200);
    let html = first.text();
    assert!(html.contains(&ids[25]), "the newest is on the first page");
    assert!(!html.contains(&ids[0]), "the oldest is on the next");
    let next = format!("starting_after={}&amp;from={today}&amp;to={today}", ids[1]);
    assert!(html.contains(&next), "the next page keeps the days: {html}");
    let second = visitor
        .get(&format!(
            "/dashboard/payments?starting_after={}&from={today}&to={today}",
            ids[1]
        ))
        .await;
    assert!(second.text().contains(&ids[0]));

    for outside in [
        format!("to={yesterday}"),
        format!("from={tomorrow}"),
        format!("from={yesterday}&to={yesterday}"),
    ] {
        let page = visitor.get(&format!("/dashboard/payments?{outside}")).await;
        assert_eq!(page.status, 200);
        assert!(
            ids.iter().all(|id| !page.text().contains(id.as_str())),
            "{outside} shows none of today's payments"
        );
        assert!(page.text().contains("No payments."));
    }

    let bad = visitor
        .get("/dashboard/payments?from=28.11.2026&to=%3Cscript%3E")
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.text().contains("YYYY-MM-DD"));
    assert!(!bad.text().contains("<script>"));
}

#[actix_web::test]
async fn a_payments_timeline_shows_where_its_events_were_delivered() {
    let app = spawn_app_with(|s| {
        s.webhook_allow_private_urls = true;
        s.webhook_retry_schedule = vec![Duration::from_millis(100)];
    })
    .await;
    let ok = Receiver::always(200).await;
    let down = Receiver::always(500).await;
    let (ok_endpoint, _) = app.create_endpoint(&ok.url, &["*"]).await;
    let (down_endpoint, _) = app.create_endpoint(&down.url, &["*"]).await;
    let payment = app.paid_payment(1500).await;
    ok.wait_for("the delivery", |r| !r.is_empty()).await;
    down.wait_for("both attempts", |r| r.len() >= 2).await;

    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;
    let path = format!("/dashboard/payments/{payment}");
    // The failed delivery is recorded after its last attempt's answer.
    wait_until(Duration::from_secs(15), "the timeline shows both deliveries", || async {
        let html = visitor.get(&path).await.text();
        html.contains(&format!(
            "of payment.succeeded to endpoint {ok_endpoint}: succeeded after 1 attempt, last answer HTTP 200"
        )) && html.contains(&format!(
            "of payment.succeeded to endpoint {down_endpoint}: failed after 2 attempts, last answer HTTP 500"
        ))
    })
    .await;

    // A refund: its event, that event's deliveries and its balance transaction join the
    // payment's own, each once.
    let refund = app
        .post_refund(
            &payment,
            "timeline-refund",
            &serde_json::json!({"amount": 500}),
        )
        .await;
    assert!(refund.status.is_success(), "{}", refund.text());
    let refund_id = refund.json()["id"].as_str().unwrap().to_owned();
    ok.wait_for("the refund's delivery", |r| r.len() >= 2).await;
    wait_until(
        Duration::from_secs(15),
        "the timeline shows the refund's",
        || async {
            let html = visitor.get(&path).await.text();
            html.contains(&format!("Refund {refund_id} of"))
                && html.contains(&format!(
                    "of refund.succeeded to endpoint {ok_endpoint}: succeeded after 1 attempt"
                ))
        },
    )
    .await;
    let html = visitor.get(&path).await.text();
    assert_eq!(
        html.matches(": payment.succeeded</li>").count(),
        1,
        "{html}"
    );
    assert_eq!(html.matches(": refund.succeeded</li>").count(), 1, "{html}");
    assert_eq!(
        html.matches("of payment.succeeded to endpoint").count(),
        2,
        "{html}"
    );
    assert_eq!(
        html.matches("of refund.succeeded to endpoint").count(),
        2,
        "{html}"
    );
    assert_eq!(html.matches("Balance transaction ").count(), 2, "{html}");
}

/// The overview counts each of the last 30 days (UTC) from one query: a day's payments, all
/// and succeeded, in its bar's title and in the totals; a payment older than 30 days is in
/// neither.
#[actix_web::test]
async fn the_overview_counts_the_payments_of_each_of_the_last_30_days() {
    use diesel::prelude::*;
    use payments_api::db::schema::payments;
    use payments_api::domain::PaymentId;
    let app = spawn_app().await;
    let declined = serde_json::json!({
        "amount": 500, "currency": "usd", "payment_method": "pm_card_declined"
    });
    let mut failed = Vec::new();
    for n in 0..4 {
        let response = app.post_payment(&format!("overview-{n}"), &declined).await;
        assert_eq!(response.status, 201, "{}", response.text());
        failed.push(response.json()["id"].as_str().unwrap().to_owned());
    }
    for _ in 0..2 {
        app.paid_payment(1000).await;
    }
    // Three failed payments moved back in time: two to three days ago, one to 40 days ago.
    for (id, days_back, n) in [(&failed[0], 3, 1), (&failed[1], 3, 2), (&failed[2], 40, 3)] {
        let at = (chrono::Utc::now() - chrono::Duration::days(days_back)).naive_utc();
        let moved = format!("{}{n:020x}", PaymentId::first_at(at));
        let id = id.clone();
        app.state
            .db
            .run(move |conn| {
                diesel::update(payments::table.filter(payments::id.eq(id)))
                    .set((payments::id.eq(moved), payments::created_at.eq(at)))
                    .execute(conn)
            })
            .await
            .unwrap();
    }

    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;
    let overview = visitor.get("/dashboard").await;
    assert_eq!(overview.status, 200);
    let html = overview.text();
    let stat = |name: &str, value: &str| format!("{name}<strong>{value}</strong>");
    assert!(html.contains(&stat("Payments, 30 days", "5")), "{html}");
    assert!(html.contains(&stat("Succeeded", "2")), "{html}");
    assert!(html.contains(&stat("Success rate", "40.0 %")), "{html}");
    for (offset, counts) in [
        (0, "3 payments, 2 succeeded"),
        (-3, "2 payments, 0 succeeded"),
    ] {
        let title = format!("<title>{}: {counts}</title>", day(offset));
        assert!(html.contains(&title), "{title} in {html}");
    }
    assert!(html.contains(&format!("<title>{}: 0 payments", day(-1))));
    assert!(
        !html.contains(&day(-40)),
        "a day beyond the 30 is not drawn"
    );
}

#[actix_web::test]
async fn a_filter_that_names_nothing_is_refused_rather_than_ignored() {
    let app = spawn_app_with(|s| s.webhook_allow_private_urls = true).await;
    let ok = Receiver::always(200).await;
    let (endpoint, _) = app.create_endpoint(&ok.url, &["*"]).await;
    let payment = app.paid_payment(1000).await;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;

    for (known, unknown) in [
        (
            "/dashboard/payments?status=succeeded",
            "/dashboard/payments?status=bogus",
        ),
        (
            "/dashboard/events?type=payment.succeeded",
            "/dashboard/events?type=payment.bogus",
        ),
    ] {
        let shown = visitor.get(known).await;
        assert_eq!(shown.status, 200, "{known}");
        assert!(shown.text().contains(&payment), "{known} shows the payment");
        let refused = visitor.get(unknown).await;
        assert_eq!(refused.status, 400, "{unknown}");
        assert!(
            refused.text().contains("bogus"),
            "{unknown} names the value"
        );
        assert!(
            !refused.text().contains(&payment),
            "{unknown} lists nothing, as if unfiltered"
        );
    }
    // An empty value is the form's "any".
    assert_eq!(visitor.get("/dashboard/payments?status=").await.status, 200);
    assert_eq!(visitor.get("/dashboard/events?type=").await.status, 200);

    let page = format!("/dashboard/webhooks/{endpoint}");
    assert_eq!(
        visitor.get(&format!("{page}?status=failed")).await.status,
        200
    );
    assert_eq!(visitor.get(&format!("{page}?status=")).await.status, 200);
    let refused = visitor.get(&format!("{page}?status=lost")).await;
    assert_eq!(refused.status, 400);
    assert!(refused.text().contains("lost"));
}

#[actix_web::test]
async fn a_status_or_type_filter_is_kept_as_selected_and_rides_along_to_the_next_page() {
    let app = spawn_app().await;
    // One more than a page of each: 26 payments succeeded, each with its event.
    let (ids, visitor) = a_page_and_one_more(&app).await;

    let payments = visitor
        .get("/dashboard/payments?status=succeeded")
        .await
        .text();
    assert!(
        payments.contains(r#"<option value="succeeded" selected>"#),
        "the status is selected: {payments}"
    );
    assert!(
        payments.contains(&format!("starting_after={}&amp;status=succeeded", ids[1])),
        "the next page keeps the status: {payments}"
    );

    let events = visitor
        .get("/dashboard/events?type=payment.succeeded")
        .await
        .text();
    assert!(
        events.contains(r#"<option value="payment.succeeded" selected>"#),
        "the type is selected: {events}"
    );
    assert!(
        events.contains("&amp;type=payment.succeeded\">Next page"),
        "the next page keeps the type: {events}"
    );
    // Without a filter, no option but "any" is selected and the link carries none.
    let all = visitor.get("/dashboard/events").await.text();
    assert!(!all.contains(" selected>payment."), "{all}");
    assert!(all.contains("&amp;type=\">Next page"), "{all}");
}
