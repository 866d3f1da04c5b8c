//! Disputes (CONTRACT §13): opened and moved by the provider's webhooks, answered by the
//! merchant with evidence or a close, each step once; the money they move in the ledger.

mod provider_events;
mod steps;

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestApp, TestResponse, wait_for};
use crate::webhooks::{signed_headers, test_secret, unix_now};

/// The test card the simulator disputes once its money is captured.
const DISPUTED_CARD: &str = "pm_card_dispute";

/// The policy's dispute fee (the default `DISPUTE_FEE`).
const DISPUTE_FEE: i64 = 1500;

fn event_id() -> String {
    format!("evt_{}", uuid::Uuid::new_v4().simple())
}

impl TestApp {
    /// A payment with the disputed card, succeeded: its dispute comes after the delay.
    async fn disputed_payment(&self, key: &str, amount: i64) -> Value {
        let body = json!({"amount": amount, "currency": "usd", "payment_method": DISPUTED_CARD});
        let response = self.post_payment(key, &body).await;
        assert_eq!(response.status, 201, "{}", response.text());
        assert_eq!(response.json()["status"], "succeeded");
        response.json()
    }

    /// The disputes of a payment, newest first.
    async fn disputes_of(&self, payment_id: &str) -> Vec<Value> {
        let response = self
            .get(&format!("/v1/disputes?payment_id={payment_id}"))
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()["data"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits for the payment's one dispute to be in `status`.
    async fn dispute_when(&self, payment_id: &str, status: &str) -> Value {
        wait_for(
            Duration::from_secs(15),
            &format!("a {status} dispute of {payment_id}"),
            || async {
                let disputes = self.disputes_of(payment_id).await;
                disputes.into_iter().find(|d| d["status"] == status)
            },
        )
        .await
    }

    async fn post_dispute(&self, path: &str, key: &str, body: &Value) -> TestResponse {
        self.post_json(path, &self.api_key, Some(key), body).await
    }

    /// The transactions of `source`, as (type, amount, fee).
    async fn movements(&self, source: &str) -> Vec<(String, i64, i64)> {
        let response = self
            .get(&format!(
                "/v1/balance_transactions?source={source}&limit=100"
            ))
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
        let mut moves: Vec<(String, i64, i64)> = response.json()["data"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|t| {
                (
                    t["type"].as_str().unwrap_or_default().to_owned(),
                    t["amount"].as_i64().unwrap_or_default(),
                    t["fee"].as_i64().unwrap_or_default(),
                )
            })
            .collect();
        moves.sort();
        moves
    }

    async fn payment_json(&self, id: &str) -> Value {
        let response = self.get(&format!("/v1/payments/{id}")).await;
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()
    }

    /// Posts a provider event signed with the test secret, under a new webhook id.
    pub(crate) async fn provider_event(&self, kind: &str, data: Value) -> TestResponse {
        self.provider_event_with_id(&event_id(), kind, data).await
    }

    async fn provider_event_with_id(&self, id: &str, kind: &str, data: Value) -> TestResponse {
        let body = json!({"type": kind, "timestamp": "2026-11-28T06:00:00Z", "data": data})
            .to_string()
            .into_bytes();
        let headers = signed_headers(&test_secret(), id, unix_now(), &body);
        let response = self
            .request("POST", "/v1/webhooks/provider", &headers, body)
            .await;
        assert_eq!(response.status, 200, "{kind}: {}", response.text());
        response
    }
}

/// `charge.dispute.created` data for `payment` (as the API shows it).
pub(crate) fn opening(provider_dispute_id: &str, payment: &Value, amount: i64) -> Value {
    json!({
        "dispute_id": provider_dispute_id,
        "charge_id": payment["provider_charge_id"],
        "reference": payment["id"],
        "amount": amount,
        "currency": payment["currency"],
        "reason": "fraudulent",
        "evidence_due_by": "2026-12-05T00:00:00Z",
    })
}
