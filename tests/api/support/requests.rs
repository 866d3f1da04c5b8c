//! Requests to a [`TestApp`] and what they answer, and the rows behind them.

use std::time::Duration;

use awc::http::StatusCode;
use payments_api::db::{merchants, payments as payment_rows, refunds as refund_rows};
use payments_api::domain::new_api_key;
use payments_api::provider::ProviderRefund;
use serde_json::Value;

use super::app::{TestApp, visa};
use super::wait::wait_for;

pub struct TestResponse {
    pub status: StatusCode,
    pub headers: awc::http::header::HeaderMap,
    pub body: Vec<u8>,
}

impl TestResponse {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts a problem+json answer with this status and code.
    /// A dashboard page with this status that says `text`.
    pub fn assert_html(&self, status: u16, text: &str) {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text());
        assert!(
            self.header("content-type")
                .is_some_and(|t| t.starts_with("text/html")),
            "{:?}",
            self.header("content-type")
        );
        assert!(self.text().contains(text), "{text} not in: {}", self.text());
    }

    pub fn assert_problem(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text());
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let problem = self.json();
        assert_eq!(problem["code"], code, "{problem}");
        assert_eq!(problem["status"], status);
        assert!(problem["title"].is_string() && problem["type"].is_string());
        problem
    }
}

impl TestApp {
    /// A second merchant with its own API key.
    pub async fn create_merchant(&self, name: &str) -> String {
        let name = name.to_owned();
        let key = new_api_key();
        let k = key.clone();
        self.state
            .db
            .run(move |conn| {
                let merchant = merchants::ensure_merchant(conn, &name)
                    .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))?;
                merchants::ensure_api_key(conn, &merchant, &k)
                    .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
            })
            .await
            .expect("merchant created");
        key
    }

    /// POST with the default key, JSON content type and the given idempotency key.
    pub async fn post_payment(&self, idempotency_key: &str, body: &Value) -> TestResponse {
        self.post_json("/v1/payments", &self.api_key, Some(idempotency_key), body)
            .await
    }

    pub async fn post_json(
        &self,
        path: &str,
        api_key: &str,
        idempotency_key: Option<&str>,
        body: &Value,
    ) -> TestResponse {
        let mut headers = vec![
            ("Authorization", format!("Bearer {api_key}")),
            ("Content-Type", "application/json".to_owned()),
        ];
        if let Some(key) = idempotency_key {
            headers.push(("Idempotency-Key", key.to_owned()));
        }
        self.request("POST", path, &headers, body.to_string().into_bytes())
            .await
    }

    pub async fn get(&self, path: &str) -> TestResponse {
        self.get_as(path, &self.api_key).await
    }

    /// The events of type `kind` about the object `object_id`, from the first page of
    /// `GET /v1/events` (newest first, 100).
    pub async fn events_about(&self, kind: &str, object_id: &str) -> Vec<serde_json::Value> {
        let response = self.get(&format!("/v1/events?type={kind}&limit=100")).await;
        assert_eq!(response.status, 200, "{}", response.text());
        let events = response.json();
        events["data"]
            .as_array()
            .map(|all| {
                all.iter()
                    .filter(|e| e["data"]["object"]["id"] == object_id)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    pub async fn get_as(&self, path: &str, api_key: &str) -> TestResponse {
        let auth = format!("Bearer {api_key}");
        self.request("GET", path, &[("Authorization", auth)], Vec::new())
            .await
    }

    /// Any request, headers as given (a name may repeat).
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> TestResponse {
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.address));
        for (name, value) in headers {
            request = request.append_header((*name, value.as_str()));
        }
        let mut response = request
            .send_body(body)
            .await
            .expect("the request completes");
        let body = response
            .body()
            .limit(10 * 1024 * 1024)
            .await
            .expect("the body arrives")
            .to_vec();
        TestResponse {
            status: response.status(),
            headers: response.headers().clone(),
            body,
        }
    }

    /// Polls the payment until it is no longer `processing`, for at most `within`.
    pub async fn wait_until_final(&self, id: &str, within: Duration) -> Value {
        let path = format!("/v1/payments/{id}");
        wait_for(
            within,
            &format!("payment {id} is no longer processing"),
            || async {
                let payment = self.get(&path).await.json();
                (payment["status"] != "processing").then_some(payment)
            },
        )
        .await
    }

    /// Charges the provider made (one per idempotency key).
    pub fn charges(&self) -> usize {
        self.simulator.charges().len()
    }

    /// POST a refund of `payment_id` with the default key and this idempotency key.
    pub async fn post_refund(
        &self,
        payment_id: &str,
        idempotency_key: &str,
        body: &Value,
    ) -> TestResponse {
        let path = format!("/v1/payments/{payment_id}/refunds");
        self.post_json(&path, &self.api_key, Some(idempotency_key), body)
            .await
    }

    /// A succeeded payment of `amount` (minor units) of the default merchant: its id.
    pub async fn paid_payment(&self, amount: i64) -> String {
        let key = format!("paid-{}", uuid::Uuid::new_v4().simple());
        let response = self.post_payment(&key, &visa(amount)).await;
        assert_eq!(response.status, 201, "{}", response.text());
        let payment = response.json();
        assert_eq!(payment["status"], "succeeded");
        payment["id"].as_str().unwrap().to_owned()
    }

    /// Refunds the provider made (one per idempotency key).
    pub fn provider_refunds(&self) -> Vec<ProviderRefund> {
        self.simulator.refunds()
    }

    /// `(amount_reserved, amount_refunded)` of a payment, as stored.
    pub async fn refund_totals(&self, payment_id: &str) -> (i64, i64) {
        let (merchant_id, payment_id) = (self.merchant_id.clone(), payment_id.to_owned());
        let payment = self
            .state
            .db
            .run(move |conn| refund_rows::find_payment(conn, &merchant_id, &payment_id))
            .await
            .expect("read payment")
            .expect("payment exists");
        (payment.amount_reserved, payment.amount_refunded)
    }

    /// Refund rows of a payment with this status (`rejected` = stored refusals).
    pub async fn refund_rows(&self, payment_id: &str, status: &'static str) -> i64 {
        let payment_id = payment_id.to_owned();
        self.state
            .db
            .run(move |conn| refund_rows::count_by_status(conn, &payment_id, status))
            .await
            .expect("count refunds")
    }

    /// Payment rows of the default merchant.
    pub async fn payment_rows(&self) -> i64 {
        let merchant_id = self.merchant_id.clone();
        self.state
            .db
            .run(move |conn| payment_rows::count_for_merchant(conn, &merchant_id))
            .await
            .expect("count payments")
    }
}
