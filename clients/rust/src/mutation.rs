//! A mutating call: its idempotency key, the same on every retry, and the waiting out of a
//! 202.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::{Duration, Instant};

use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::client::Client;
use crate::error::{Error, ErrorKind};
use crate::request::{Call, Response};

impl Client {
    /// A mutating call: `POST` of `body` with an idempotency key.
    pub(crate) fn mutation<T>(
        &self,
        url: Result<Url, Error>,
        body: &impl Serialize,
    ) -> Mutation<T> {
        let body = url.and_then(|url| {
            serde_json::to_vec(body)
                .map(|bytes| (url, bytes))
                .map_err(|e| Error::invalid(format!("the body does not serialise: {e}")))
        });
        Mutation {
            client: self.clone(),
            request: body,
            idempotency_key: None,
            wait: None,
            marker: PhantomData,
        }
    }
}

/// A mutating call, ready to send: `.await` it for the object, or [`Mutation::send`] for the
/// object with the answer's status and headers.
///
/// It gets a new UUIDv4 `Idempotency-Key` unless [`Mutation::idempotency_key`] gives one,
/// it at most once. Pass your own key (e.g. your order id) when the call must survive a
/// restart of *your* process: sending it again later with that key learns the outcome.
#[must_use = "a call does nothing until it is awaited"]
pub struct Mutation<T> {
    client: Client,
    request: Result<(Url, Vec<u8>), Error>,
    idempotency_key: Option<String>,
    wait: Option<Duration>,
    marker: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Mutation<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mutation")
            .field(
                "url",
                &self.request.as_ref().map(|(url, _)| url.as_str()).ok(),
            )
            .field("idempotency_key", &self.idempotency_key)
            .field("wait", &self.wait)
            .finish()
    }
}

/// Objects whose operations can end unknown (202): payments (create, capture, cancel),
/// refunds, payouts and disputes (evidence submitted, close). Sealed.
pub trait Awaitable: private::Sealed {}
impl Awaitable for crate::Payment {}
impl Awaitable for crate::Refund {}
impl Awaitable for crate::Payout {}
impl Awaitable for crate::Dispute {}
mod private {
    pub trait Sealed {}
    impl Sealed for crate::Payment {}
    impl Sealed for crate::Refund {}
    impl Sealed for crate::Payout {}
    impl Sealed for crate::Dispute {}
}

impl<T> Mutation<T> {
    /// Sends the call with this `Idempotency-Key` (1–255 visible ASCII characters)
    /// instead of a new random one.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }
}

impl<T: Awaitable> Mutation<T> {
    /// When the server answers 202 (the provider's outcome is not known yet), keep
    /// sending the same call with the same key, with backoff, until the answer is final or
    /// `within` has passed (then [`ErrorKind::StillPending`]). `within` is also the call's
    /// whole retry budget, instead of the policy's `max_elapsed`. A retry never charges
    /// twice; it lets the server take the work over and ask the provider again.
    pub fn wait_until_final(mut self, within: Duration) -> Self {
        self.wait = Some(within);
        self
    }
}

impl<T: DeserializeOwned> Mutation<T> {
    /// Sends the call (with its retries) and returns the object with what the answer's
    /// headers said.
    pub async fn send(self) -> Result<Response<T>, Error> {
        let key = match self.idempotency_key {
            Some(key) => check_idempotency_key(key)?,
            None => uuid::Uuid::new_v4().to_string(),
        };
        let (url, body) = self.request.map_err(|e| {
            let kind = e.into_kind();
            Error::new(kind).with_call(Some(&key), 0)
        })?;
        let call = Call {
            method: Method::POST,
            url,
            body: Some(body),
            idempotency_key: Some(key),
        };
        let client = self.client;
        let policy = client.inner.retry;
        let deadline = Instant::now() + self.wait.unwrap_or(policy.get_max_elapsed());
        let mut attempts = 0;
        let mut polls = 0;
        // The body of the last 202: once one came, the outcome is known to be pending, and
        // running out of time or attempts after it means just that.
        let mut pending: Option<Vec<u8>> = None;
        let still_pending = |body: &[u8], attempts| {
            let last = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
            Error::new(ErrorKind::StillPending { last })
                .with_call(call.idempotency_key.as_deref(), attempts)
        };
        loop {
            let answer = match client.execute(&call, deadline, &mut attempts).await {
                Ok(answer) => answer,
                Err(e) => {
                    return Err(match &pending {
                        Some(body) if e.is_outcome_unknown() => still_pending(body, attempts),
                        _ => e,
                    });
                }
            };
            if answer.status != 202 || self.wait.is_none() {
                return answer.decode(&call, attempts);
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            let asked = answer.retry_after();
            // Never sooner than `Retry-After`: rather stop when it reaches past the end.
            if remaining.is_zero() || asked.is_some_and(|asked| asked >= remaining) {
                return Err(still_pending(&answer.body, attempts));
            }
            pending = Some(answer.body);
            polls += 1;
            tokio::time::sleep(policy.delay(polls, asked).min(remaining)).await;
        }
    }
}

impl<T: DeserializeOwned + Send + 'static> IntoFuture for Mutation<T> {
    type Output = Result<T, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<T, Error>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.send().await.map(|r| r.data) })
    }
}

/// 1–255 characters of visible ASCII (docs/api.md). Leading or trailing spaces are refused
/// too: HTTP drops them, so the server would see another key than the caller's.
fn check_idempotency_key(key: String) -> Result<String, Error> {
    let visible = key.bytes().all(|b| (0x20..=0x7e).contains(&b));
    if key.is_empty() || key.len() > 255 || !visible || key.trim() != key {
        return Err(Error::invalid(
            "an Idempotency-Key is 1–255 visible ASCII characters, without spaces at either end",
        ));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_checked_before_sending() {
        assert!(check_idempotency_key("order-1001".into()).is_ok());
        assert!(check_idempotency_key("a b".into()).is_ok());
        assert!(check_idempotency_key("x".repeat(255)).is_ok());
        for bad in ["", " a", "a ", "caf\u{e9}", "tab\there"] {
            assert!(check_idempotency_key(bad.into()).is_err(), "{bad:?}");
        }
        assert!(check_idempotency_key("x".repeat(256)).is_err());
    }
}
