//! The provider over HTTP (`PROVIDER_URL`): every attempt has its own timeout, and
//! connection errors, timeouts and 5xx are retried with exponential backoff and full
//! jitter — always with the same idempotency key, so retrying can never charge twice.
//! A 4xx, any 4xx (408 and 429 too, docs/provider.md), is the provider's final refusal of the
//! operation: nothing moved.

use std::time::Duration;

use futures_util::future::LocalBoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::tls::ClientTls;

use super::attempts::{Attempt, attempts, no_answer_within};
use super::protocol::{
    CaptureRequest, Charge, ChargeRequest, ChargeUpdate, DisputeStepRequest, PaymentProvider,
    PayoutRequest, ProviderDispute, ProviderError, ProviderPayout, ProviderRefund, RefundRequest,
    SettlementPage, SettlementQuery,
};
use crate::domain::format_timestamp;

pub struct HttpProvider {
    base_url: String,
    timeout: Duration,
    max_attempts: u32,
    tls: ClientTls,
}

thread_local! {
    // awc's client is per thread (actix workers are single-threaded); one per thread (and
    // TLS configuration: one per provider) keeps its connection pool warm across requests.
    static CLIENTS: std::cell::RefCell<Vec<(ClientTls, awc::Client)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// This thread's client for providers verified with `tls`. No limit on connections: a
/// payment in flight holds one while the provider answers, so any limit below the payments
/// in flight queues them behind a slow provider (with 256 per worker, a provider answering
/// in 200 ms capped the service at 2 441 payments/s with 1 000 clients). What bounds them
/// is the requests the server accepts.
fn client(tls: &ClientTls) -> awc::Client {
    CLIENTS.with_borrow_mut(|clients| {
        if let Some((_, client)) = clients.iter().find(|(t, _)| std::sync::Arc::ptr_eq(t, tls)) {
            return client.clone();
        }
        // A 3xx is an answer of unknown meaning, never a place to send the charge again
        // (or a GET whose body would be taken for its outcome).
        let client = awc::Client::builder()
            .disable_redirects()
            .disable_timeout()
            .connector(awc::Connector::new().rustls_0_23(tls.clone()).limit(0))
            .finish();
        clients.push((tls.clone(), client.clone()));
        client
    })
}

/// Sends one attempt of a request to a URL.
type Send<'a> = dyn Fn(&awc::Client, &str) -> awc::SendClientRequest + 'a;

impl HttpProvider {
    /// The provider at `base_url`; an `https` one is verified with `tls`.
    pub fn new(base_url: String, timeout: Duration, max_attempts: u32, tls: ClientTls) -> Self {
        Self {
            base_url,
            timeout,
            max_attempts: max_attempts.max(1),
            tls,
        }
    }

    async fn attempt<T: DeserializeOwned>(&self, path: &str, send: &Send<'_>) -> Attempt<T> {
        let url = format!("{}{path}", self.base_url);
        let client = client(&self.tls);
        let exchange = async {
            let mut response = send(&client, &url)
                .await
                .map_err(|e| Attempt::Retry(format!("request failed: {e}")))?;
            let status = response.status();
            let bytes = response
                .body()
                .limit(1024 * 1024)
                .await
                .map_err(|e| Attempt::Retry(format!("response body lost: {e}")))?;
            if status.is_server_error() {
                return Err(Attempt::Retry(format!("provider answered {status}")));
            }
            if status.is_client_error() {
                // The status alone: the refusal is shown to merchants (`failure_message`,
                // a 409's `detail`) and stored for ever, and the provider's body is its own.
                tracing::warn!(path, %status, "provider refused");
                return Err(Attempt::Refused(format!("provider answered {status}")));
            }
            if !status.is_success() {
                return Err(Attempt::GiveUp(format!("provider answered {status}")));
            }
            // Retried like a broken connection, which it may be: a body cut short by a
            // closed connection can reach here without an error.
            serde_json::from_slice::<T>(&bytes)
                .map_err(|e| Attempt::Retry(format!("provider answer not understood: {e}")))
        };
        match actix_web::rt::time::timeout(self.timeout, exchange).await {
            Ok(Ok(value)) => Attempt::Done(value),
            Ok(Err(attempt)) => attempt,
            Err(_) => Attempt::Retry(no_answer_within(self.timeout)),
        }
    }

    /// One money-moving call, attempted up to `max_attempts` times with the same
    /// idempotency key.
    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        idempotency_key: &str,
        body: &B,
    ) -> Result<T, ProviderError> {
        let send = |client: &awc::Client, url: &str| {
            client
                .post(url)
                .insert_header(("Idempotency-Key", idempotency_key))
                .send_json(body)
        };
        attempts(path, self.max_attempts, || self.attempt(path, &send)).await
    }

    /// A read (`GET`), attempted like a call.
    async fn read<T: DeserializeOwned>(&self, path: &str) -> Result<T, ProviderError> {
        let send = |client: &awc::Client, url: &str| client.get(url).send();
        attempts(path, self.max_attempts, || self.attempt(path, &send)).await
    }
}

/// Everything but RFC 3986's unreserved characters is percent-encoded in a path segment.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `/v1/{collection}/{id}/{action}` (a charge's capture, a dispute's evidence), the id as
/// one path segment whatever the provider made it of (a `/`, `?` or space in it would
/// otherwise change the path, or fail the call).
fn object_path(collection: &str, id: &str, action: &str) -> String {
    let id = percent_encoding::utf8_percent_encode(id, SEGMENT);
    format!("/v1/{collection}/{id}/{action}")
}

impl PaymentProvider for HttpProvider {
    fn create_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a ChargeRequest,
    ) -> LocalBoxFuture<'a, Result<Charge, ProviderError>> {
        Box::pin(self.call("/v1/charges", idempotency_key, request))
    }

    fn create_refund<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a RefundRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderRefund, ProviderError>> {
        Box::pin(self.call("/v1/refunds", idempotency_key, request))
    }

    fn create_payout<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a PayoutRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderPayout, ProviderError>> {
        Box::pin(self.call("/v1/payouts", idempotency_key, request))
    }

    fn capture_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        charge_id: &'a str,
        request: &'a CaptureRequest,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        Box::pin(async move {
            let path = object_path("charges", charge_id, "capture");
            self.call(&path, idempotency_key, request).await
        })
    }

    fn cancel_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        charge_id: &'a str,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        Box::pin(async move {
            let path = object_path("charges", charge_id, "cancel");
            let empty = serde_json::json!({});
            self.call(&path, idempotency_key, &empty).await
        })
    }

    fn dispute_step<'a>(
        &'a self,
        idempotency_key: &'a str,
        dispute_id: &'a str,
        step: &'a DisputeStepRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderDispute, ProviderError>> {
        Box::pin(async move {
            let (action, body) = match step {
                DisputeStepRequest::Evidence { text } => {
                    ("evidence", serde_json::json!({"evidence": {"text": text}}))
                }
                DisputeStepRequest::Close => ("close", serde_json::json!({})),
            };
            let path = object_path("disputes", dispute_id, action);
            self.call(&path, idempotency_key, &body).await
        })
    }

    fn settlements<'a>(
        &'a self,
        query: &'a SettlementQuery,
    ) -> LocalBoxFuture<'a, Result<SettlementPage, ProviderError>> {
        Box::pin(async move {
            let at = |t| {
                percent_encoding::utf8_percent_encode(&format_timestamp(t), SEGMENT).to_string()
            };
            let mut path = format!(
                "/v1/settlements?created_gte={}&created_lt={}&limit={}",
                at(query.created_gte),
                at(query.created_lt),
                query.limit
            );
            if let Some(after) = &query.starting_after {
                path.push_str("&starting_after=");
                path.extend(percent_encoding::utf8_percent_encode(after, SEGMENT));
            }
            self.read(&path).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::object_path;

    #[test]
    fn a_charge_id_is_one_path_segment() {
        assert_eq!(
            object_path("charges", "ch_0a-1.b~", "capture"),
            "/v1/charges/ch_0a-1.b~/capture"
        );
        assert_eq!(
            object_path("charges", "ch_a b/c?d#é", "cancel"),
            "/v1/charges/ch_a%20b%2Fc%3Fd%23%C3%A9/cancel"
        );
    }
}
