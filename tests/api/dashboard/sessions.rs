//! Sessions over plain HTTP: signed in by a key and out by a button, server-side and
//! known to every instance, ended by revocation or idleness; sign-in refused from another
//! site and rate-limited like the API.

use futures_util::future::join_all;

use super::{Visitor, input_value};
use crate::support::{spawn_app, spawn_app_with};

#[actix_web::test]
async fn a_key_signs_in_a_server_side_session_that_sign_out_ends() {
    let app = spawn_app().await;
    let mut visitor = Visitor::new(&app);
    let form = visitor.get("/dashboard").await;
    assert_eq!(form.status, 200);
    let policy = form
        .header("content-security-policy")
        .unwrap_or_default()
        .to_owned();
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    assert!(form.text().contains("API key") && form.text().contains("Sign in"));

    // A wrong key: nothing signed in, the key not shown again.
    let wrong = "sk_test_wrong_key_do_not_echo_0001";
    let refused = visitor.sign_in(wrong).await;
    assert_eq!(refused.status, 401);
    assert!(refused.header("set-cookie").is_none());
    assert!(!refused.text().contains(wrong));
    assert!(visitor.cookie.is_none());

    let signed_in = visitor.sign_in(&app.api_key).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.text());
    assert_eq!(signed_in.header("location"), Some("/dashboard"));
    let cookie = signed_in.header("set-cookie").unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(&app.api_key),
        "the key is never the cookie"
    );
    let overview = visitor.get("/dashboard").await;
    assert_eq!(overview.status, 200);
    assert!(overview.text().contains("Overview") && overview.text().contains("Payments"));
    assert!(
        !overview.text().contains(&app.api_key),
        "the key is never in a page"
    );
    assert!(
        overview.text().contains("<svg"),
        "the chart is drawn on the server"
    );

    // Signing out needs the session's CSRF token; then the session is gone.
    visitor
        .post("/dashboard/sign-out", &[])
        .await
        .assert_html(403, "csrf_failed");
    assert_eq!(visitor.get("/dashboard/payments").await.status, 200);
    let token = input_value(&overview.text(), "sign-out", "csrf_token");
    let out = visitor
        .post("/dashboard/sign-out", &[("csrf_token", &token)])
        .await;
    assert_eq!(out.status, 303);
    let after = visitor.get("/dashboard/payments").await;
    assert_eq!(after.status, 303, "signed out: back to the sign-in form");
    assert_eq!(after.header("location"), Some("/dashboard"));
}

/// Login CSRF: a page of another site posting the sign-in form (a browser says so in
/// `Sec-Fetch-Site`) signs nothing in, even with a valid key; the dashboard's own page does.
#[actix_web::test]
async fn a_sign_in_posted_from_another_site_opens_no_session() {
    let app = spawn_app().await;
    let mut visitor = Visitor::new(&app);
    for site in ["cross-site", "same-site"] {
        let refused = visitor
            .sign_in_with(&app.api_key, &[("Sec-Fetch-Site", site)])
            .await;
        refused.assert_html(403, "csrf_failed");
        assert!(refused.header("set-cookie").is_none(), "{site}");
        assert!(visitor.cookie.is_none(), "{site}");
    }
    assert_eq!(sessions(&app).await, 0, "no session was opened");
    for site in ["same-origin", "none"] {
        let mut visitor = Visitor::new(&app);
        let signed_in = visitor
            .sign_in_with(&app.api_key, &[("Sec-Fetch-Site", site)])
            .await;
        assert_eq!(signed_in.status, 303, "{site}: {}", signed_in.text());
        assert_eq!(visitor.get("/dashboard/payments").await.status, 200);
    }
    assert_eq!(sessions(&app).await, 2);
}

/// Behind a proxy that ends TLS, the cookie is `Secure` when the proxy says the request came
/// over https, however it spells the scheme; over plain http it is not (it could not be sent
/// back).
#[actix_web::test]
async fn the_session_cookie_is_secure_when_the_request_came_over_https() {
    let app = spawn_app().await;
    for (header, value, secure) in [
        ("X-Forwarded-Proto", "https", true),
        ("X-Forwarded-Proto", "HTTPS", true),
        ("Forwarded", "proto=https", true),
        ("X-Forwarded-Proto", "http", false),
    ] {
        let mut visitor = Visitor::new(&app);
        let signed_in = visitor.sign_in_with(&app.api_key, &[(header, value)]).await;
        assert_eq!(signed_in.status, 303, "{}", signed_in.text());
        let cookie = signed_in
            .header("set-cookie")
            .unwrap_or_default()
            .to_owned();
        assert_eq!(
            cookie.contains("; Secure"),
            secure,
            "{header}: {value}: {cookie}"
        );
    }
}

/// How many dashboard sessions `app` holds.
async fn sessions(app: &crate::support::TestApp) -> i64 {
    use diesel::prelude::*;
    use payments_api::db::schema::dashboard_sessions;
    app.state
        .db
        .run(|conn| dashboard_sessions::table.count().get_result(conn))
        .await
        .expect("counted")
}

/// The expiry of the one dashboard session of `app`.
async fn session_expiry(app: &crate::support::TestApp) -> payments_api::domain::Timestamp {
    use diesel::prelude::*;
    use payments_api::db::schema::dashboard_sessions;
    app.state
        .db
        .run(|conn| {
            dashboard_sessions::table
                .select(dashboard_sessions::expires_at)
                .first(conn)
        })
        .await
        .expect("one session")
}

/// The session ends a TTL after its last request, not after the last time its expiry was
/// written: every request moves the expiry to its own time plus the TTL.
#[actix_web::test]
async fn each_request_slides_the_session_from_its_own_time() {
    use std::time::Duration;
    let app = spawn_app().await;
    let mut visitor = Visitor::new(&app);
    assert_eq!(visitor.sign_in(&app.api_key).await.status, 303);
    let mut expiry = session_expiry(&app).await;
    for page in ["/dashboard", "/dashboard/payments", "/dashboard/events"] {
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(visitor.get(page).await.status, 200, "{page}");
        let moved = session_expiry(&app).await;
        assert!(
            moved >= expiry + chrono::Duration::milliseconds(50),
            "{page}: the expiry stayed at {expiry}, not 12 h after the request ({moved})"
        );
        expiry = moved;
    }
}

#[actix_web::test]
async fn a_session_in_use_outlives_its_ttl_and_an_idle_one_ends() {
    use std::time::Duration;
    let app = spawn_app_with(|s| s.dashboard_session_ttl = Duration::from_secs(3)).await;
    let mut visitor = Visitor::new(&app);
    assert_eq!(visitor.sign_in(&app.api_key).await.status, 303);
    let signed_in = session_expiry(&app).await;
    // Used every half second for longer than its TTL: still signed in, its expiry moved on.
    for _ in 0..9 {
        actix_web::rt::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(visitor.get("/dashboard/payments").await.status, 200);
    }
    assert!(session_expiry(&app).await >= signed_in + chrono::Duration::seconds(4));
    // Left alone for longer than its TTL: signed out.
    actix_web::rt::time::sleep(Duration::from_millis(3500)).await;
    let after = visitor.get("/dashboard/payments").await;
    assert_eq!(after.status, 303, "an idle session ends");
    assert_eq!(after.header("location"), Some("/dashboard"));
}

#[actix_web::test]
async fn revoking_the_key_ends_its_sessions() {
    use diesel::prelude::*;
    use payments_api::db::merchants::{hash_api_key, revoke_api_key};
    use payments_api::db::schema::api_keys;
    let app = spawn_app().await;
    let key = app.create_merchant("revocable").await;
    let mut visitor = Visitor::new(&app);
    assert_eq!(visitor.sign_in(&key).await.status, 303);
    assert_eq!(visitor.get("/dashboard/payments").await.status, 200);
    let hash = hash_api_key(&key);
    app.state
        .db
        .run(move |conn| {
            let id: String = api_keys::table
                .filter(api_keys::key_hash.eq(&hash))
                .select(api_keys::id)
                .first(conn)?;
            revoke_api_key(conn, &id)
                .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
        })
        .await
        .unwrap();
    assert_eq!(visitor.get("/dashboard/payments").await.status, 303);
}

#[actix_web::test]
async fn wrong_keys_are_rate_limited_like_the_api() {
    let app = crate::support::spawn_app_with(|s| s.rate_limit_per_second = Some(3)).await;
    let visitor = Visitor::new(&app);
    let wrong = [("api_key", "sk_test_guess_000000000000000000")];
    let started = std::time::Instant::now();
    let answers = join_all((0..12).map(|_| visitor.post("/dashboard/sign-in", &wrong))).await;
    // Three wrong keys pass per second of the clock: a burst that straddles a second's end
    // meets two such windows, more on a slow machine (CI once took 6 of 12 across two).
    let windows = started.elapsed().as_secs() as usize + 2;
    let limited = answers.iter().filter(|a| a.status == 429).count();
    let passed = answers.len() - limited;
    assert!(
        limited >= 1 && passed <= 3 * windows,
        "{passed} of 12 passed in {windows} windows of a second"
    );
    assert!(answers.iter().all(|a| a.status == 401 || a.status == 429));
    let one = answers.iter().find(|a| a.status == 429).unwrap();
    assert_eq!(one.header("retry-after"), Some("1"));
    assert!(!one.text().contains("sk_test_guess"));
    // A second later, the right key signs in.
    actix_web::rt::time::sleep(std::time::Duration::from_millis(1100)).await;
    let mut visitor = visitor;
    assert_eq!(visitor.sign_in(&app.api_key).await.status, 303);
}

/// Every answer under /dashboard is the dashboard's, with its headers: a page asked with
/// HEAD (as every GET route of ours answers it), and an address that is no page.
#[actix_web::test]
async fn heads_and_unknown_addresses_get_the_dashboards_answers() {
    let app = spawn_app().await;
    let mut visitor = Visitor::new(&app);
    assert_eq!(visitor.sign_in(&app.api_key).await.status, 303);
    let secured = |response: &crate::support::TestResponse| {
        let policy = response
            .header("content-security-policy")
            .unwrap_or_default();
        policy.contains("frame-ancestors 'none'") && !policy.contains("unsafe-inline")
    };
    for path in [
        "/dashboard",
        "/dashboard/payments",
        "/dashboard/assets/app.css",
    ] {
        let head = visitor.send("HEAD", path, None, &[]).await;
        assert_eq!(head.status, 200, "HEAD {path}");
        assert!(head.body.is_empty(), "HEAD {path}: no body");
        let get = visitor.get(path).await;
        assert_eq!(
            head.header("content-type"),
            get.header("content-type"),
            "HEAD {path}"
        );
        if path != "/dashboard/assets/app.css" {
            assert!(secured(&head), "HEAD {path}");
        }
    }
    for (method, path) in [
        ("GET", "/dashboard/nothing"),
        ("GET", "/dashboard/payments/pay_x/nothing"),
        ("DELETE", "/dashboard/payments"),
    ] {
        let response = visitor.send(method, path, None, &[]).await;
        assert_eq!(response.status, 404, "{method} {path}");
        assert!(
            response
                .header("content-type")
                .is_some_and(|t| t.starts_with("text/html")),
            "{method} {path}"
        );
        assert!(secured(&response), "{method} {path}");
        assert!(
            response.text().contains("no such page"),
            "{}",
            response.text()
        );
    }
}
