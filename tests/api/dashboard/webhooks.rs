//! The webhooks pages over HTTP: endpoints added, edited, disabled, enabled, deleted,
//! their secret rotated, a test event sent and failed deliveries replayed, each through the
//! API's own operations with the form's `Idempotency-Key`, so a second submit acts once;
//! a secret is shown on the page that answers its making and never again.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Visitor, input_value};
use crate::deliveries::{Receiver, Reply};
use crate::support::{TestApp, TestResponse, assert_holds_for, spawn_app, spawn_app_with, visa};

/// Deliveries to loopback receivers, retried fast: three attempts, 100 and 200 ms apart.
async fn app_delivering() -> TestApp {
    spawn_app_with(|s| {
        s.webhook_allow_private_urls = true;
        s.webhook_retry_schedule = vec![Duration::from_millis(100), Duration::from_millis(200)];
        s.webhook_timeout = Duration::from_secs(5);
    })
    .await
}

async fn signed_in(app: &TestApp) -> Visitor<'_> {
    let mut visitor = Visitor::new(app);
    assert_eq!(visitor.sign_in(&app.api_key).await.status, 303);
    visitor
}

/// The hidden fields (CSRF token, idempotency key) of the form posting to `action`, as the
/// page at `page` draws it now.
async fn drawn(visitor: &Visitor<'_>, page: &str, action: &str) -> (String, String) {
    let html = visitor.get(page).await.text();
    let from = format!("action=\"{action}\"");
    (
        input_value(&html, &from, "csrf_token"),
        input_value(&html, &from, "idempotency_key"),
    )
}

/// Posts `fields` with the form's hidden fields.
async fn send(
    visitor: &Visitor<'_>,
    action: &str,
    (csrf, key): &(String, String),
    fields: &[(&str, &str)],
) -> TestResponse {
    let mut all = vec![
        ("csrf_token", csrf.as_str()),
        ("idempotency_key", key.as_str()),
    ];
    all.extend_from_slice(fields);
    visitor.post(action, &all).await
}

/// The secret a page shows (the text of its `#secret` element), if any.
fn secret_in(html: &str) -> Option<String> {
    let at = html.find("id=\"secret\"")?;
    let text = &html[at + html[at..].find('>')? + 1..];
    Some(text[..text.find('<')?].to_owned())
}

/// The page's text with maud's escapes undone (to find an API detail in it).
fn unescaped(html: &str) -> String {
    html.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

async fn endpoints(app: &TestApp) -> Vec<Value> {
    let listed = app.get("/v1/webhook_endpoints?limit=100").await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    listed.json()["data"].as_array().unwrap().clone()
}

async fn endpoint(app: &TestApp, id: &str) -> TestResponse {
    app.get(&format!("/v1/webhook_endpoints/{id}")).await
}

/// The endpoint's current secret, from the database (the API never shows it again).
async fn stored_secret(app: &TestApp, id: &str) -> String {
    let (merchant, id) = (app.merchant_id.clone(), id.to_owned());
    app.state
        .db
        .run(move |conn| payments_api::db::webhook_endpoints::find(conn, &merchant, &id))
        .await
        .unwrap()
        .expect("the endpoint")
        .secret
}

#[actix_web::test]
async fn an_endpoint_added_from_the_page_shows_its_secret_once_and_is_made_once() {
    let app = app_delivering().await;
    let receiver = Receiver::always(200).await;
    let visitor = signed_in(&app).await;
    let list = visitor.get("/dashboard/webhooks").await;
    assert_eq!(list.status, 200);
    let html = list.text();
    for label in ["URL", "Description", "Events", "Add endpoint"] {
        assert!(html.contains(label), "{label} on the page");
    }
    assert!(
        html.contains("<a href=\"/dashboard/webhooks\">Webhooks</a>"),
        "the navigation names the page"
    );
    assert_eq!(
        input_value(&html, "for=\"new_events\"", "events"),
        "*",
        "every event unless told"
    );
    let guard = drawn(&visitor, "/dashboard/webhooks", "/dashboard/webhooks").await;

    // A forged form (no token, a wrong one): 403, nothing made.
    let fields = [
        ("url", receiver.url.as_str()),
        ("description", "orders <b>service</b>"),
        ("events", "payment.succeeded, refund.succeeded"),
    ];
    let forged = (String::from("forged"), guard.1.clone());
    send(&visitor, "/dashboard/webhooks", &forged, &fields)
        .await
        .assert_html(403, "csrf_failed");
    visitor
        .post("/dashboard/webhooks", &fields)
        .await
        .assert_html(403, "csrf_failed");
    assert!(
        endpoints(&app).await.is_empty(),
        "a forged form makes nothing"
    );

    // The form: the endpoint's page, with its secret in this answer.
    let made = send(&visitor, "/dashboard/webhooks", &guard, &fields).await;
    assert_eq!(made.status, 200, "{}", made.text());
    let html = made.text();
    let secret = secret_in(&html).expect("the secret is shown");
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert!(html.contains("shown this once"));
    assert!(
        html.contains("orders &lt;b&gt;service&lt;/b&gt;"),
        "escaped"
    );
    let listed = endpoints(&app).await;
    assert_eq!(listed.len(), 1);
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(listed[0]["url"], receiver.url.as_str());
    assert_eq!(listed[0]["description"], "orders <b>service</b>");
    assert_eq!(
        listed[0]["enabled_events"],
        json!(["payment.succeeded", "refund.succeeded"])
    );
    assert_eq!(listed[0]["status"], "enabled");
    assert!(listed[0].get("secret").is_none());
    assert_eq!(stored_secret(&app, &id).await, secret, "the real secret");
    assert!(html.contains(&id), "the answer is the endpoint's page");

    // The same form again (a double click, a reload): the same answer, nothing new.
    let again = send(&visitor, "/dashboard/webhooks", &guard, &fields).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(secret_in(&again.text()).as_deref(), Some(secret.as_str()));
    assert!(again.text().contains("This form was sent before"));
    assert_eq!(endpoints(&app).await.len(), 1, "one endpoint");

    // Never again: not on the endpoint's page, not in the list.
    let page = visitor.get(&format!("/dashboard/webhooks/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(!page.text().contains(&secret));
    assert!(secret_in(&page.text()).is_none());
    let list = visitor.get("/dashboard/webhooks").await.text();
    assert!(!list.contains(&secret));
    assert!(list.contains(&format!("href=\"/dashboard/webhooks/{id}\"")));
    assert!(list.contains("payment.succeeded, refund.succeeded"));
}

#[actix_web::test]
async fn a_refused_endpoint_shows_the_api_detail_and_makes_nothing() {
    // Private addresses refused, as in production.
    let app = spawn_app().await;
    let visitor = signed_in(&app).await;
    let private = "http://127.0.0.1:9/hooks";
    let api = app
        .post_json(
            "/v1/webhook_endpoints",
            &app.api_key,
            None,
            &json!({"url": private, "enabled_events": ["*"]}),
        )
        .await;
    assert_eq!(api.status, 400);
    let detail = api.json()["detail"].as_str().unwrap().to_owned();

    let guard = drawn(&visitor, "/dashboard/webhooks", "/dashboard/webhooks").await;
    let refused = send(
        &visitor,
        "/dashboard/webhooks",
        &guard,
        &[("url", private), ("description", "mine"), ("events", "*")],
    )
    .await;
    assert_eq!(refused.status, 400);
    let html = refused.text();
    assert!(unescaped(&html).contains(&detail), "{detail} in {html}");
    assert_eq!(
        input_value(&html, "for=\"new_url\"", "url"),
        private,
        "what was typed stays in the form"
    );

    // Unknown event types: the API's detail too.
    let guard = drawn(&visitor, "/dashboard/webhooks", "/dashboard/webhooks").await;
    let unknown = send(
        &visitor,
        "/dashboard/webhooks",
        &guard,
        &[("url", "http://[::1]/x"), ("events", "payment.exploded")],
    )
    .await;
    assert_eq!(unknown.status, 400);
    assert!(
        unknown.text().contains("payment.exploded"),
        "{}",
        unknown.text()
    );
    assert!(endpoints(&app).await.is_empty());
}

#[actix_web::test]
async fn an_endpoint_is_edited_disabled_enabled_and_deleted_from_its_page() {
    let app = app_delivering().await;
    let (id, _) = app.create_endpoint("http://127.0.0.1:9/old", &["*"]).await;
    let visitor = signed_in(&app).await;
    let page = format!("/dashboard/webhooks/{id}");

    // Edit: URL, description, events.
    let guard = drawn(&visitor, &page, &page).await;
    let edit = [
        ("url", "http://127.0.0.1:9/new"),
        ("description", "billing"),
        ("events", "refund.failed dispute.created"),
    ];
    let saved = send(&visitor, &page, &guard, &edit).await;
    assert_eq!(saved.status, 303, "{}", saved.text());
    assert_eq!(
        saved.header("location"),
        Some(format!("{page}?done=updated").as_str())
    );
    let now = endpoint(&app, &id).await.json();
    assert_eq!(now["url"], "http://127.0.0.1:9/new");
    assert_eq!(now["description"], "billing");
    assert_eq!(
        now["enabled_events"],
        json!(["refund.failed", "dispute.created"])
    );
    let shown = visitor.get(&format!("{page}?done=updated")).await.text();
    assert!(shown.contains("Endpoint saved."));
    assert_eq!(
        input_value(&shown, "for=\"edit_events\"", "events"),
        "refund.failed, dispute.created"
    );
    // The same form again is the same update (its key): still 303, and a form with a
    // refused URL shows the API's detail and changes nothing.
    assert_eq!(send(&visitor, &page, &guard, &edit).await.status, 303);
    let guard = drawn(&visitor, &page, &page).await;
    let bad = send(
        &visitor,
        &page,
        &guard,
        &[("url", "ftp://example.com/x"), ("events", "*")],
    )
    .await;
    assert_eq!(bad.status, 400);
    let api = app
        .endpoint_post(&id, "", &json!({"url": "ftp://example.com/x"}))
        .await;
    assert_eq!(api.status, 400);
    let detail = api.json()["detail"].as_str().unwrap().to_owned();
    assert!(
        unescaped(&bad.text()).contains(&detail),
        "{detail}: {}",
        bad.text()
    );
    assert_eq!(
        endpoint(&app, &id).await.json()["url"],
        "http://127.0.0.1:9/new"
    );

    // Disable, then enable.
    let status = format!("{page}/status");
    let guard = drawn(&visitor, &page, &status).await;
    let off = send(&visitor, &status, &guard, &[("status", "disabled")]).await;
    assert_eq!(off.status, 303);
    assert_eq!(app.endpoint_status(&id).await, "disabled");
    let shown = visitor.get(&format!("{page}?done=disabled")).await.text();
    assert!(shown.contains(">Enable</button>") && shown.contains("Endpoint disabled"));
    let guard = drawn(&visitor, &page, &status).await;
    let on = send(&visitor, &status, &guard, &[("status", "enabled")]).await;
    assert_eq!(on.status, 303);
    assert_eq!(app.endpoint_status(&id).await, "enabled");
    assert!(
        visitor
            .get(&page)
            .await
            .text()
            .contains(">Disable</button>")
    );

    // Delete: not without the confirmation; then once.
    let delete = format!("{page}/delete");
    let guard = drawn(&visitor, &page, &delete).await;
    let unconfirmed = send(&visitor, &delete, &guard, &[]).await;
    assert_eq!(unconfirmed.status, 400);
    assert!(unconfirmed.text().contains("Yes, delete this endpoint"));
    assert_eq!(endpoint(&app, &id).await.status, 200, "not deleted");
    let guard = drawn(&visitor, &page, &delete).await;
    let forged = (String::from("forged"), guard.1.clone());
    send(&visitor, &delete, &forged, &[("confirm", "yes")])
        .await
        .assert_html(403, "csrf_failed");
    assert_eq!(endpoint(&app, &id).await.status, 200, "not deleted");
    let deleted = send(&visitor, &delete, &guard, &[("confirm", "yes")]).await;
    assert_eq!(deleted.status, 303);
    assert_eq!(
        deleted.header("location"),
        Some("/dashboard/webhooks?done=deleted")
    );
    assert_eq!(endpoint(&app, &id).await.status, 404);
    assert!(endpoints(&app).await.is_empty());
    assert!(
        visitor
            .get("/dashboard/webhooks?done=deleted")
            .await
            .text()
            .contains("Endpoint deleted.")
    );
    // The same form again (a double click, a re-post) is the first one's replay: the same
    // result. Another form finds nothing to delete and says so.
    let twice = send(&visitor, &delete, &guard, &[("confirm", "yes")]).await;
    assert_eq!(twice.status, 303, "{}", twice.text());
    assert_eq!(
        twice.header("location"),
        Some("/dashboard/webhooks?done=deleted")
    );
    let another = (guard.0.clone(), String::from("another-delete-form"));
    let gone = send(&visitor, &delete, &another, &[("confirm", "yes")]).await;
    assert_eq!(gone.status, 404);
    assert!(gone.text().contains("deleted already"));
    assert_eq!(visitor.get(&page).await.status, 404);
}

#[actix_web::test]
async fn a_rotated_secret_is_shown_once() {
    let app = app_delivering().await;
    let (id, first) = app.create_endpoint("http://127.0.0.1:9/x", &["*"]).await;
    let visitor = signed_in(&app).await;
    let page = format!("/dashboard/webhooks/{id}");
    let rotate = format!("{page}/rotate");
    let guard = drawn(&visitor, &page, &rotate).await;
    let rotated = send(
        &visitor,
        &rotate,
        &guard,
        &[("expire_current_in_s", "3600")],
    )
    .await;
    assert_eq!(rotated.status, 200, "{}", rotated.text());
    let html = rotated.text();
    let secret = secret_in(&html).expect("the new secret is shown");
    assert_ne!(secret, first);
    assert_eq!(stored_secret(&app, &id).await, secret);
    assert!(html.contains("Secret rotated.") && html.contains("still signs until"));

    // Sent again: the same answer, no second rotation.
    let again = send(
        &visitor,
        &rotate,
        &guard,
        &[("expire_current_in_s", "3600")],
    )
    .await;
    assert_eq!(again.status, 200);
    assert_eq!(secret_in(&again.text()).as_deref(), Some(secret.as_str()));
    assert_eq!(stored_secret(&app, &id).await, secret, "rotated once");

    let fresh = visitor.get(&page).await.text();
    assert!(!fresh.contains(&secret) && !fresh.contains(&first));
    let out_of_range = drawn(&visitor, &page, &rotate).await;
    let refused = send(
        &visitor,
        &rotate,
        &out_of_range,
        &[("expire_current_in_s", "999999999")],
    )
    .await;
    assert_eq!(refused.status, 400);
    assert!(refused.text().contains("must be from 0 to 604800"));
    assert_eq!(stored_secret(&app, &id).await, secret);
}

#[actix_web::test]
async fn a_test_event_from_the_page_shows_how_it_went() {
    let app = app_delivering().await;
    let receiver = Receiver::always(200).await;
    let (id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    let visitor = signed_in(&app).await;
    let page = format!("/dashboard/webhooks/{id}");
    let test = format!("{page}/test");
    let guard = drawn(&visitor, &page, &test).await;
    let sent = send(&visitor, &test, &guard, &[]).await;
    assert_eq!(sent.status, 200, "{}", sent.text());
    let html = sent.text();
    assert!(
        html.contains("<dt>Delivered</dt><dd>yes</dd>")
            && html.contains("<dt>Status code</dt><dd>200</dd>"),
        "{html}"
    );
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].json()["type"], "webhook_endpoint.test");

    // The same form again: its first answer, no second request.
    let again = send(&visitor, &test, &guard, &[]).await;
    assert_eq!(again.status, 200);
    assert!(again.text().contains("<dd>yes</dd>"));
    assert_eq!(receiver.received().len(), 1, "one test sent");

    // A receiver that fails: not delivered, its status code.
    receiver.behave(|_, _| Reply::status(503));
    let guard = drawn(&visitor, &page, &test).await;
    let failed = send(&visitor, &test, &guard, &[]).await.text();
    assert!(
        failed.contains("<dt>Delivered</dt><dd>no</dd>")
            && failed.contains("<dt>Status code</dt><dd>503</dd>"),
        "{failed}"
    );
}

#[actix_web::test]
async fn a_failed_delivery_replayed_from_the_page_is_delivered_again() {
    let app = app_delivering().await;
    // Every attempt fails until the test says otherwise.
    let receiver = Receiver::always(500).await;
    let (id, _) = app
        .create_endpoint(&receiver.url, &["payment.succeeded"])
        .await;
    let payment = app.post_payment("dash-replay", &visa(1200)).await;
    assert_eq!(payment.status, 201, "{}", payment.text());
    app.wait_for_delivery(&id, "failed").await;
    let attempts = receiver.received().len();
    assert_eq!(attempts, 3, "three attempts, all failed");

    let visitor = signed_in(&app).await;
    let page = format!("/dashboard/webhooks/{id}");
    let failed = visitor.get(&format!("{page}?status=failed")).await.text();
    assert!(
        failed.contains("payment.succeeded") && failed.contains("HTTP 500"),
        "{failed}"
    );
    assert!(failed.contains("<td>3</td>"), "three attempts shown");
    let succeeded = visitor
        .get(&format!("{page}?status=succeeded"))
        .await
        .text();
    assert!(succeeded.contains("No deliveries."), "the filter holds");

    receiver.behave(|_, _| Reply::status(200));
    let replay = format!("{page}/replay");
    let guard = drawn(&visitor, &page, &replay).await;
    let since = input_value(
        &visitor.get(&page).await.text(),
        "for=\"replay_since\"",
        "since",
    );
    let queued = send(&visitor, &replay, &guard, &[("since", &since)]).await;
    assert_eq!(queued.status, 200, "{}", queued.text());
    assert!(
        queued.text().contains("Queued 1 failed delivery"),
        "{}",
        queued.text()
    );
    let received = receiver
        .wait_for("the replayed delivery", |r| r.len() > attempts)
        .await;
    assert_eq!(received[attempts].status, 200);
    assert_eq!(
        received[attempts].header("webhook-id"),
        received[0].header("webhook-id"),
        "the original webhook-id"
    );
    app.wait_for_delivery(&id, "succeeded").await;

    // The same form again: its first answer (queued 1), nothing queued twice.
    let again = send(&visitor, &replay, &guard, &[("since", &since)]).await;
    assert!(again.text().contains("Queued 1 failed delivery"));
    assert!(again.text().contains("This form was sent before"));
    assert_holds_for(Duration::from_millis(700), "no second replay", || async {
        receiver.received().len() == attempts + 1
    })
    .await;
    let shown = visitor
        .get(&format!("{page}?status=succeeded"))
        .await
        .text();
    assert!(shown.contains("HTTP 200"), "{shown}");
}
