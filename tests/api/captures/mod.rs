//! Authorize now, capture later (§10): every capture and cancel follows the §3 rules, and a
//! payment is captured or canceled at most once, whatever races it.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::support::{
    ScriptedProvider, ServiceProcess, TestApp, TestDatabase, TestResponse, assert_holds_for,
    provider_answer, spawn_app, spawn_app_with, spawn_app_with_provider,
    spawn_app_with_provider_url, spawn_provider, test_client, wait_for,
};

mod capture_and_cancel;
mod expiry;
mod lost_answers;

fn manual(amount: i64) -> Value {
    json!({"amount": amount, "currency": "usd", "payment_method": "pm_card_visa",
           "capture_method": "manual"})
}

impl TestApp {
    /// An authorized manual payment of `amount`: its id.
    async fn authorized_payment(&self, amount: i64) -> String {
        let key = format!("auth-{}", uuid::Uuid::new_v4().simple());
        let response = self.post_payment(&key, &manual(amount)).await;
        assert_eq!(response.status, 201, "{}", response.text());
        let payment = response.json();
        assert_eq!(payment["status"], "requires_capture", "{payment}");
        assert_eq!(payment["amount_capturable"], amount);
        assert_eq!(payment["amount_captured"], 0);
        assert_eq!(payment["capture_method"], "manual");
        payment["id"].as_str().unwrap().to_owned()
    }

    pub(crate) async fn capture(&self, payment_id: &str, key: &str, body: &Value) -> TestResponse {
        let path = format!("/v1/payments/{payment_id}/capture");
        self.post_json(&path, &self.api_key, Some(key), body).await
    }

    async fn cancel(&self, payment_id: &str, key: &str, body: &Value) -> TestResponse {
        let path = format!("/v1/payments/{payment_id}/cancel");
        self.post_json(&path, &self.api_key, Some(key), body).await
    }

    async fn payment_now(&self, payment_id: &str) -> Value {
        self.get(&format!("/v1/payments/{payment_id}")).await.json()
    }

    /// Rows in `payment_operations` (captures and cancels, refusals included).
    async fn operation_rows(&self) -> i64 {
        use diesel::prelude::*;
        use payments_api::db::schema::payment_operations;
        self.state
            .db
            .run(|conn| payment_operations::table.count().get_result(conn))
            .await
            .expect("count operations")
    }
}
