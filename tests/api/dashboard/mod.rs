//! The dashboard (CONTRACT §15) over HTTP: sessions, CSRF, escaping, and actions that act
//! once whatever the hands do. `browser.rs` drives it in a real Chromium.

mod browser;
mod browser_keyboard;
mod browser_keys;
mod browser_webhooks;
mod forms;
mod keys;
mod reading;
mod sessions;
mod webhooks;

use awc::http::header;
use serde_json::{Value, json};

use crate::support::{TestApp, TestResponse};

/// A browser's side of the dashboard: its session cookie, no redirects followed.
pub(crate) struct Visitor<'a> {
    app: &'a TestApp,
    client: awc::Client,
    cookie: Option<String>,
}

impl<'a> Visitor<'a> {
    pub(crate) fn new(app: &'a TestApp) -> Self {
        Self {
            app,
            client: crate::support::app::http_client(crate::support::app::Redirects::Show),
            cookie: None,
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        form: Option<&[(&str, &str)]>,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.app.address));
        for &(name, value) in headers {
            request = request.insert_header((name, value));
        }
        if let Some(cookie) = &self.cookie {
            request = request.insert_header((header::COOKIE, cookie.as_str()));
        }
        let mut response = match form {
            Some(fields) => request.send_form(&fields).await,
            None => request.send().await,
        }
        .expect("answered");
        let body = response.body().limit(4 << 20).await.expect("body").to_vec();
        TestResponse {
            status: response.status(),
            headers: response.headers().clone(),
            body,
        }
    }

    pub(crate) async fn get(&self, path: &str) -> TestResponse {
        self.send("GET", path, None, &[]).await
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> TestResponse {
        self.send("POST", path, Some(form), &[]).await
    }

    /// Signs in with `key`: the session cookie kept.
    pub(crate) async fn sign_in(&mut self, key: &str) -> TestResponse {
        self.sign_in_with(key, &[]).await
    }

    /// Signs in with `key`, the request carrying `headers` (a browser's own).
    pub(crate) async fn sign_in_with(
        &mut self,
        key: &str,
        headers: &[(&str, &str)],
    ) -> TestResponse {
        let response = self
            .send(
                "POST",
                "/dashboard/sign-in",
                Some(&[("api_key", key)]),
                headers,
            )
            .await;
        if let Some(set) = response.header("set-cookie") {
            self.cookie = set.split(';').next().map(str::to_owned);
        }
        response
    }
}

/// The value of the first `<input name="{name}" … value="…">` in `html` after `from`.
fn input_value(html: &str, from: &str, name: &str) -> String {
    let start = html
        .find(from)
        .unwrap_or_else(|| panic!("{from} not in the page"));
    let rest = &html[start..];
    let at = rest
        .find(&format!("name=\"{name}\""))
        .unwrap_or_else(|| panic!("no {name} after {from}"));
    let tag_start = rest[..at].rfind('<').expect("a tag");
    let tag_end = at + rest[at..].find('>').expect("tag end");
    let tag = &rest[tag_start..tag_end];
    let value = tag.split("value=\"").nth(1).expect("a value");
    value[..value.find('"').expect("quoted")].to_owned()
}

impl TestApp {
    async fn payment_with(&self, key: &str, body: &Value) -> String {
        let response = self.post_payment(key, body).await;
        assert!(response.status.is_success(), "{}", response.text());
        response.json()["id"].as_str().unwrap().to_owned()
    }
}

fn manual(amount: i64) -> Value {
    json!({"amount": amount, "currency": "usd", "payment_method": "pm_card_visa",
        "capture_method": "manual"})
}
