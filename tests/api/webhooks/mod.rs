//! Inbound provider webhooks: signed by the test code itself with the server's secret.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use futures_util::future::join_all;
use payments_api::db::webhook_events::{self, WebhookEventRow};
use payments_api::domain::now;
use payments_api::inbound::{self, SignedHeaders, WebhookSecret, sign};
use payments_api::provider::sim::webhooks as webhook_delivery;
use payments_api::provider::sim::{RetryPolicy, WebhookDelivery};
use payments_api::provider::{Charge, ProviderStatus};
use payments_api::signing as signature;
use serde_json::{Value, json};

use crate::support::{
    ScriptedProvider, TEST_WEBHOOK_SECRET, TestApp, TestResponse, provider_answer, spawn_app,
    spawn_app_with, spawn_app_with_provider, spawn_app_with_provider_url, spawn_provider,
};

mod effects;
mod refunds_and_captures;
mod signatures;
mod simulator;

const PATH: &str = "/v1/webhooks/provider";

pub(crate) fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub(crate) fn test_secret() -> WebhookSecret {
    WebhookSecret::parse(TEST_WEBHOOK_SECRET).unwrap()
}

fn event_id() -> String {
    format!("evt_{}", uuid::Uuid::new_v4().simple())
}

/// The headers a provider sends for this body, signed with `secret` at `timestamp`.
pub(crate) fn signed_headers(
    secret: &WebhookSecret,
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "application/json".to_owned()),
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", sign(secret, id, timestamp, body)),
    ]
}

pub(crate) fn charge_event(kind: &str, payment: &Value) -> Vec<u8> {
    let failed = kind == "charge.failed";
    json!({
        "type": kind,
        "timestamp": "2026-11-22T06:00:00Z",
        "data": {
            "charge_id": payment["provider_charge_id"],
            "reference": payment["id"],
            "amount": payment["amount"],
            "currency": payment["currency"],
            "failure_code": if failed { json!("card_declined") } else { Value::Null },
            "failure_message": if failed { json!("Your card was declined.") } else { Value::Null },
        }
    })
    .to_string()
    .into_bytes()
}

impl TestApp {
    /// A payment left `processing` at the provider: the simulator's own webhook is an hour away.
    async fn processing_payment(&self, key: &str) -> Value {
        let body = json!({"amount": 2000, "currency": "usd", "payment_method": "pm_card_async"});
        let response = self.post_payment(key, &body).await;
        assert_eq!(response.status, 202, "{}", response.text());
        let payment = response.json();
        assert_eq!(payment["status"], "processing");
        assert!(payment["provider_charge_id"].is_string(), "{payment}");
        payment
    }

    async fn post_webhook(&self, id: &str, body: &[u8]) -> TestResponse {
        let headers = signed_headers(&test_secret(), id, unix_now(), body);
        self.request("POST", PATH, &headers, body.to_vec()).await
    }

    async fn webhook_events(&self) -> i64 {
        self.state
            .db
            .run(webhook_events::count)
            .await
            .expect("count events")
    }

    async fn payment(&self, id: &Value) -> Value {
        let response = self
            .get(&format!("/v1/payments/{}", id.as_str().unwrap()))
            .await;
        assert_eq!(response.status, 200);
        response.json()
    }
}

async fn spawn_app_with_slow_webhooks() -> TestApp {
    spawn_app_with(|s| s.provider_async_delay = Duration::from_secs(3600)).await
}

fn assert_receipt(response: &TestResponse, duplicate: bool) {
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(
        response.text(),
        format!(r#"{{"received":true,"duplicate":{duplicate}}}"#)
    );
}
