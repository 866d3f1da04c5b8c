//! The API keys page (CONTRACT §15, §11): a key created from the page works, is shown once
//! and is stored nowhere in plain text; the form acts once however often it is sent; a
//! forged form does nothing; revoking refuses the key and ends its dashboard sessions
//! (this session's own included); another merchant's key cannot be revoked.

use std::time::{Duration, Instant};

use diesel::prelude::*;
use futures_util::future::join_all;
use payments_api::db::merchants::hash_api_key;
use payments_api::db::schema::{api_keys, dashboard_sessions, idempotency_keys};

use super::{Visitor, input_value};
use crate::support::{TestApp, TestResponse, spawn_app, wait_until};

const PAGE: &str = "/dashboard/api-keys";
/// Where the create form starts in the page.
const CREATE_FORM: &str = "action=\"/dashboard/api-keys\"";

/// A stored key, as the test reads it: id, merchant, hash, label, last 4, revoked.
type KeyRow = (
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<chrono::NaiveDateTime>,
);

async fn key_rows(app: &TestApp) -> Vec<KeyRow> {
    app.state
        .db
        .run(|conn| {
            api_keys::table
                .select((
                    api_keys::id,
                    api_keys::merchant_id,
                    api_keys::key_hash,
                    api_keys::label,
                    api_keys::last4,
                    api_keys::revoked_at,
                ))
                .order(api_keys::created_at)
                .load(conn)
        })
        .await
        .expect("keys read")
}

/// The row of the key `key`.
async fn row_of(app: &TestApp, key: &str) -> KeyRow {
    let hash = hash_api_key(key);
    key_rows(app)
        .await
        .into_iter()
        .find(|row| row.2 == hash)
        .expect("the key is stored")
}

/// The keys of `merchant_id`.
async fn keys_of(app: &TestApp, merchant_id: &str) -> Vec<KeyRow> {
    key_rows(app)
        .await
        .into_iter()
        .filter(|row| row.1 == merchant_id)
        .collect()
}

/// Every text the database holds about keys and the operations run on them: the key
/// table, the idempotency records (their stored answers) and the dashboard's sessions.
async fn stored_texts(app: &TestApp) -> Vec<String> {
    let (records, sessions) = app
        .state
        .db
        .run(|conn| {
            let records: Vec<(String, String, String, Option<String>)> = idempotency_keys::table
                .select((
                    idempotency_keys::scope,
                    idempotency_keys::idempotency_key,
                    idempotency_keys::request_fingerprint,
                    idempotency_keys::response_body,
                ))
                .load(conn)?;
            let sessions: Vec<(String, String, String)> = dashboard_sessions::table
                .select((
                    dashboard_sessions::token_hash,
                    dashboard_sessions::api_key_hash,
                    dashboard_sessions::csrf_token,
                ))
                .load(conn)?;
            Ok((records, sessions))
        })
        .await
        .expect("rows read");
    let mut texts = Vec::new();
    for (id, merchant, hash, label, last4, _) in key_rows(app).await {
        texts.extend([
            id,
            merchant,
            hash,
            label.unwrap_or_default(),
            last4.unwrap_or_default(),
        ]);
    }
    for (scope, key, fingerprint, body) in records {
        texts.extend([scope, key, fingerprint, body.unwrap_or_default()]);
    }
    for (token_hash, key_hash, csrf) in sessions {
        texts.extend([token_hash, key_hash, csrf]);
    }
    texts
}

/// The key a create answer shows (`<code id="new-key">…</code>`), if it shows one.
fn shown_key(html: &str) -> Option<String> {
    let start = html.find("id=\"new-key\">")? + "id=\"new-key\">".len();
    let end = start + html[start..].find('<')?;
    Some(html[start..end].to_owned())
}

/// Sends the create form of `page` with `label`.
async fn create_from(visitor: &Visitor<'_>, page: &str, label: &str) -> TestResponse {
    let csrf = input_value(page, CREATE_FORM, "csrf_token");
    let key = input_value(page, CREATE_FORM, "idempotency_key");
    visitor
        .post(
            PAGE,
            &[
                ("csrf_token", &csrf),
                ("idempotency_key", &key),
                ("label", label),
            ],
        )
        .await
}

/// The revoke form of `key_id` on `page`: its action and fields.
fn revoke_form(page: &str, key_id: &str) -> (String, String, String) {
    let action = format!("/dashboard/api-keys/{key_id}/revoke");
    let from = format!("action=\"{action}\"");
    let csrf = input_value(page, &from, "csrf_token");
    let key = input_value(page, &from, "idempotency_key");
    (action, csrf, key)
}

/// Revokes `key_id` from a freshly drawn page.
async fn revoke_from_page(visitor: &Visitor<'_>, key_id: &str) -> TestResponse {
    let page = visitor.get(PAGE).await;
    assert_eq!(page.status, 200);
    let (action, csrf, key) = revoke_form(&page.text(), key_id);
    visitor
        .post(&action, &[("csrf_token", &csrf), ("idempotency_key", &key)])
        .await
}

/// A key made on the page for the visitor's merchant: the key and its id.
async fn create_key(visitor: &Visitor<'_>, label: &str) -> (String, String) {
    let page = visitor.get(PAGE).await.text();
    let answer = create_from(visitor, &page, label).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let key = shown_key(&answer.text()).expect("the new key is shown");
    let hash = hash_api_key(&key);
    let id = key_rows(visitor.app)
        .await
        .into_iter()
        .find(|row| row.2 == hash)
        .expect("stored")
        .0;
    (key, id)
}

/// Polls `GET /v1/balance` with `key` until 401; fails if it takes 5 s.
async fn refused_within_5_s(app: &TestApp, key: &str) {
    let started = Instant::now();
    loop {
        let response = app.get_as("/v1/balance", key).await;
        if response.status == 401 {
            return;
        }
        assert_eq!(response.status, 200, "{}", response.text());
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "a revoked key still works after 5 s"
        );
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_web::test]
async fn a_key_created_on_the_page_works_and_is_shown_once_and_stored_only_as_its_hash() {
    let app = spawn_app().await;
    let session_key = app.create_merchant("keys-shop").await;
    let merchant = row_of(&app, &session_key).await.1;
    let mut visitor = Visitor::new(&app);
    assert_eq!(visitor.sign_in(&session_key).await.status, 303);

    let page = visitor.get(PAGE).await;
    assert_eq!(page.status, 200);
    let html = page.text();
    assert!(
        html.contains("href=\"/dashboard/api-keys\""),
        "the nav link"
    );
    assert!(
        html.contains("<label for=\"key_label\">Label</label>"),
        "{html}"
    );
    assert!(html.contains("Create API key"));
    assert!(
        !html.contains(&session_key),
        "the list never shows a key, not even this session's"
    );
    assert!(
        html.contains(&session_key[session_key.len() - 4..]),
        "last 4"
    );
    assert!(html.contains("this session&#39;s key") || html.contains("this session's key"));

    let answer = create_from(&visitor, &html, "checkout servers <2026>").await;
    assert_eq!(answer.status, 200, "shown directly, not redirected");
    assert!(answer.header("location").is_none());
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    let shown = answer.text();
    let key = shown_key(&shown).expect("the new key is on the answer page");
    assert!(key.starts_with("sk_test_") && key.len() > 40, "{key}");
    assert_eq!(shown.matches(key.as_str()).count(), 1, "shown once");
    assert!(
        shown.contains("checkout servers &lt;2026&gt;"),
        "the label, escaped"
    );

    // The key works against the API, as a key of this merchant.
    let balance = app.get_as("/v1/balance", &key).await;
    assert_eq!(balance.status, 200, "{}", balance.text());
    let row = row_of(&app, &key).await;
    assert_eq!(row.1, merchant);
    assert_eq!(row.3.as_deref(), Some("checkout servers <2026>"));
    assert_eq!(row.4.as_deref(), Some(&key[key.len() - 4..]));
    assert!(row.5.is_none());
    assert!(shown.contains(&row.0), "the answer names the new key's id");

    // Later pages list it (id, label, last 4) and never show it.
    let later = visitor.get(PAGE).await.text();
    assert!(later.contains(&row.0) && later.contains("checkout servers &lt;2026&gt;"));
    assert!(!later.contains(&key), "the key is shown once only");
    assert!(shown_key(&later).is_none());
    assert!(!visitor.get("/dashboard").await.text().contains(&key));

    // Nothing the database holds is the key or contains it: only its hash.
    let texts = stored_texts(&app).await;
    assert!(texts.contains(&hash_api_key(&key)), "its hash is stored");
    for text in &texts {
        assert!(
            !text.contains(&key),
            "the key is stored in plain text: {text}"
        );
        assert!(
            !text.contains(&key[8..]),
            "a part of the key is stored: {text}"
        );
    }
    // The operation's stored answer is the key's id.
    let record = app
        .state
        .db
        .run(|conn| {
            idempotency_keys::table
                .filter(idempotency_keys::scope.eq("dashboard: create API key"))
                .select(idempotency_keys::response_body)
                .first::<Option<String>>(conn)
        })
        .await
        .expect("the create's idempotency record");
    let body: serde_json::Value = serde_json::from_str(&record.unwrap_or_default()).unwrap();
    assert_eq!(body, serde_json::json!({"id": row.0}));
}

#[actix_web::test]
async fn the_create_form_sent_at_once_and_again_creates_one_key() {
    let app = spawn_app().await;
    let session_key = app.create_merchant("double-click").await;
    let merchant = row_of(&app, &session_key).await.1;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&session_key).await;
    let page = visitor.get(PAGE).await.text();

    // A double click (several at once), then the same form again (a reload).
    let answers = join_all((0..4).map(|_| create_from(&visitor, &page, "web"))).await;
    let again = create_from(&visitor, &page, "web").await;
    let mut shown = Vec::new();
    for answer in answers.iter().chain([&again]) {
        assert_eq!(answer.status, 200, "{}", answer.text());
        shown.extend(shown_key(&answer.text()));
    }
    assert_eq!(shown.len(), 1, "one answer shows the key: {shown:?}");
    let keys = keys_of(&app, &merchant).await;
    assert_eq!(keys.len(), 2, "the session's key and one new one: {keys:?}");
    let created = keys
        .iter()
        .find(|row| row.2 == hash_api_key(&shown[0]))
        .expect("the shown key is the stored one");
    for answer in answers.iter().chain([&again]) {
        let text = answer.text();
        if shown_key(&text).is_none() {
            assert!(
                text.contains("created by your earlier submit") && text.contains(&created.0),
                "a repeated submit names the key it created: {text}"
            );
        }
    }
    assert!(!again.text().contains(&shown[0]), "never shown twice");

    // The same form with another label is another request: refused, nothing created.
    let changed = create_from(&visitor, &page, "something else").await;
    assert_eq!(changed.status, 422, "{}", changed.text());
    assert_eq!(keys_of(&app, &merchant).await.len(), 2);

    // A new page's form creates a new key.
    create_key(&visitor, "second").await;
    assert_eq!(keys_of(&app, &merchant).await.len(), 3);
}

#[actix_web::test]
async fn forged_key_forms_are_refused_and_change_nothing() {
    let app = spawn_app().await;
    let session_key = app.create_merchant("forged").await;
    let merchant = row_of(&app, &session_key).await.1;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&session_key).await;
    let page = visitor.get(PAGE).await.text();
    let key = input_value(&page, CREATE_FORM, "idempotency_key");
    let own = row_of(&app, &session_key).await.0;

    for csrf in [None, Some("forged")] {
        let mut fields = vec![("idempotency_key", key.as_str()), ("label", "x")];
        fields.extend(csrf.map(|c| ("csrf_token", c)));
        let answer = visitor.post(PAGE, &fields).await;
        answer.assert_html(403, "csrf_failed");
        assert!(shown_key(&answer.text()).is_none());
        let fields: Vec<_> = fields.into_iter().filter(|f| f.0 != "label").collect();
        visitor
            .post(&format!("/dashboard/api-keys/{own}/revoke"), &fields)
            .await
            .assert_html(403, "csrf_failed");
    }
    let keys = keys_of(&app, &merchant).await;
    assert_eq!(keys.len(), 1, "nothing created: {keys:?}");
    assert!(keys[0].5.is_none(), "nothing revoked");
    assert_eq!(app.get_as("/v1/balance", &session_key).await.status, 200);

    // Not signed in: the way to sign in, nothing done.
    let stranger = Visitor::new(&app);
    let answer = stranger.post(PAGE, &[("label", "x")]).await;
    assert_eq!(answer.status, 303);
    assert_eq!(answer.header("location"), Some("/dashboard"));
    assert_eq!(stranger.get(PAGE).await.status, 303);
    assert_eq!(keys_of(&app, &merchant).await.len(), 1);
}

#[actix_web::test]
async fn revoking_from_the_page_refuses_the_key_and_ends_its_sessions() {
    let app = spawn_app().await;
    let session_key = app.create_merchant("rotating").await;
    let mut admin = Visitor::new(&app);
    admin.sign_in(&session_key).await;
    let (key, key_id) = create_key(&admin, "old servers").await;
    assert_eq!(app.get_as("/v1/balance", &key).await.status, 200);
    // Someone else signed in with the key that is about to be revoked.
    let mut other = Visitor::new(&app);
    assert_eq!(other.sign_in(&key).await.status, 303);
    assert_eq!(other.get("/dashboard/payments").await.status, 200);

    let page = admin.get(PAGE).await.text();
    let (action, csrf, form_key) = revoke_form(&page, &key_id);
    let fields = [
        ("csrf_token", csrf.as_str()),
        ("idempotency_key", form_key.as_str()),
    ];
    // Clicked twice at once, then sent again: revoked once, the same answer each time.
    let answers = join_all((0..2).map(|_| admin.post(&action, &fields))).await;
    for answer in &answers {
        assert_eq!(answer.status, 303, "{}", answer.text());
        assert_eq!(
            answer.header("location"),
            Some("/dashboard/api-keys?done=revoked")
        );
    }
    let revoked_at = row_of(&app, &key).await.5.expect("revoked");
    let again = admin.post(&action, &fields).await;
    assert_eq!(
        again.header("location"),
        Some("/dashboard/api-keys?done=revoked")
    );
    assert_eq!(
        row_of(&app, &key).await.5,
        Some(revoked_at),
        "the first revocation time stays"
    );

    // The key is refused by the API within 5 s; its dashboard session ends within 5 s.
    refused_within_5_s(&app, &key).await;
    wait_until(
        Duration::from_secs(5),
        "the revoked key's dashboard session ends",
        || async {
            let answer = other.get("/dashboard/payments").await;
            answer.status == 303 && answer.header("location") == Some("/dashboard")
        },
    )
    .await;
    assert!(
        other
            .get("/dashboard")
            .await
            .text()
            .contains("id=\"api_key\"")
    );

    // The revoking session goes on; the page says so and shows the key revoked, no button.
    let shown = admin.get("/dashboard/api-keys?done=revoked").await;
    assert_eq!(shown.status, 200);
    let text = shown.text();
    assert!(text.contains("API key revoked."), "{text}");
    assert!(!text.contains(&format!("/dashboard/api-keys/{key_id}/revoke")));
    assert!(text.contains("revoked"));
    assert_eq!(app.get_as("/v1/balance", &session_key).await.status, 200);

    // A form drawn before the revocation, sent now: nothing changes.
    let stale = admin
        .post(
            &action,
            &[
                ("csrf_token", csrf.as_str()),
                ("idempotency_key", "a-new-key-for-a-stale-form"),
            ],
        )
        .await;
    assert_eq!(
        stale.header("location"),
        Some("/dashboard/api-keys?done=already-revoked")
    );
    assert_eq!(row_of(&app, &key).await.5, Some(revoked_at));
}

#[actix_web::test]
async fn revoking_the_sessions_own_key_ends_the_session() {
    let app = spawn_app().await;
    let session_key = app.create_merchant("self-revoking").await;
    let own = row_of(&app, &session_key).await.0;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&session_key).await;
    let page = visitor.get(PAGE).await.text();
    assert!(
        page.contains("Revoke and sign out"),
        "the own key is marked"
    );
    assert!(page.contains("revoking it ends this session"));

    let answer = revoke_from_page(&visitor, &own).await;
    assert_eq!(answer.status, 303, "{}", answer.text());
    let next = visitor
        .get(answer.header("location").expect("a next page"))
        .await;
    assert_eq!(next.status, 303, "the session ended with its key");
    assert_eq!(next.header("location"), Some("/dashboard"));
    let sign_in = visitor.get("/dashboard").await;
    assert!(
        sign_in.text().contains("id=\"api_key\""),
        "the sign-in form"
    );
    assert!(row_of(&app, &session_key).await.5.is_some());
    refused_within_5_s(&app, &session_key).await;
    // Signing in with it again is refused.
    assert_eq!(visitor.sign_in(&session_key).await.status, 401);
}

#[actix_web::test]
async fn another_merchants_key_cannot_be_revoked() {
    let app = spawn_app().await;
    let mine = app.create_merchant("mine").await;
    let theirs = app.create_merchant("theirs").await;
    let their_id = row_of(&app, &theirs).await.0;
    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&mine).await;
    let page = visitor.get(PAGE).await.text();
    assert!(
        !page.contains(&their_id),
        "only the merchant's own keys are listed"
    );

    // A revoke form of this session, pointed at the other merchant's key id.
    let csrf = input_value(&page, CREATE_FORM, "csrf_token");
    let form_key = input_value(&page, CREATE_FORM, "idempotency_key");
    let fields = [
        ("csrf_token", csrf.as_str()),
        ("idempotency_key", form_key.as_str()),
    ];
    let refused = visitor
        .post(&format!("/dashboard/api-keys/{their_id}/revoke"), &fields)
        .await;
    refused.assert_html(404, "no such API key");
    for bad in ["key_nothing", "sk_test_not_an_id", "%3Cscript%3E"] {
        visitor
            .post(&format!("/dashboard/api-keys/{bad}/revoke"), &fields)
            .await
            .assert_html(404, "no such API key");
    }
    assert!(row_of(&app, &theirs).await.5.is_none(), "still active");
    assert_eq!(app.get_as("/v1/balance", &theirs).await.status, 200);

    // The refusal was not stored: the same form still revokes one of this merchant's keys.
    let (key, key_id) = create_key(&visitor, "spare").await;
    let revoked = visitor
        .post(&format!("/dashboard/api-keys/{key_id}/revoke"), &fields)
        .await;
    assert_eq!(revoked.status, 303, "{}", revoked.text());
    refused_within_5_s(&app, &key).await;
}
