//! How one call goes over the wire: the request sent on every attempt, the answer as it
//! came back, and the loop that retries it within the policy.

use std::time::{Duration, Instant, SystemTime};

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, USER_AGENT};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Problem};
use crate::retry::parse_retry_after;
use crate::tls;

const IDEMPOTENCY_KEY: &str = "idempotency-key";
const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
const REQUEST_ID: &str = "x-request-id";
/// A successful answer with what its headers said.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Response<T> {
    pub data: T,
    /// 200, 201, or 202 when the outcome is not known yet.
    pub status: u16,
    /// `X-Request-Id` of the answer.
    pub request_id: Option<String>,
    /// The key the call was sent with (mutating calls only; every attempt used it).
    pub idempotency_key: Option<String>,
    /// `Idempotent-Replayed: true`: the server answered from an earlier request's outcome.
    pub replayed: bool,
    /// Requests sent for this call.
    pub attempts: u32,
}

/// One HTTP request of a call, as sent on every attempt: same URL, same bytes, same key.
pub(crate) struct Call {
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) idempotency_key: Option<String>,
}

/// An answer as it came off the wire.
pub(crate) struct Answer {
    pub(crate) status: u16,
    headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub(crate) fn retry_after(&self) -> Option<Duration> {
        self.header("retry-after")
            .and_then(|v| parse_retry_after(v, SystemTime::now()))
    }

    fn problem(&self) -> Problem {
        Problem::from_answer(
            self.status,
            &self.body,
            self.header(REQUEST_ID).map(str::to_owned),
            self.retry_after(),
        )
    }

    pub(crate) fn decode<T: DeserializeOwned>(
        self,
        call: &Call,
        attempts: u32,
    ) -> Result<Response<T>, Error> {
        let key = call.idempotency_key.as_deref();
        let data = serde_json::from_slice(&self.body).map_err(|source| {
            Error::new(ErrorKind::Decode {
                status: self.status,
                source,
            })
            .with_call(key, attempts)
        })?;
        Ok(Response {
            data,
            status: self.status,
            request_id: self.header(REQUEST_ID).map(str::to_owned),
            idempotency_key: key.map(str::to_owned),
            replayed: self
                .header(IDEMPOTENT_REPLAYED)
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
            attempts,
        })
    }
}

impl Client {
    /// A read (or a `DELETE`), retried like every call; no idempotency key.
    pub(crate) async fn fetch<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Result<Url, Error>,
    ) -> Result<T, Error> {
        let call = Call {
            method,
            url: url?,
            body: None,
            idempotency_key: None,
        };
        let deadline = Instant::now() + self.inner.retry.get_max_elapsed();
        let mut attempts = 0;
        let answer = self.execute(&call, deadline, &mut attempts).await?;
        answer.decode(&call, attempts).map(|r| r.data)
    }

    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        url: Result<Url, Error>,
    ) -> Result<T, Error> {
        self.fetch(Method::GET, url).await
    }

    /// Sends `call` until it gets an answer that is not worth retrying, the policy's
    /// attempts are spent, or waiting for the next attempt would pass `deadline`.
    /// `attempts` counts requests sent, across calls of one operation.
    pub(crate) async fn execute(
        &self,
        call: &Call,
        deadline: Instant,
        attempts: &mut u32,
    ) -> Result<Answer, Error> {
        let policy = self.inner.retry;
        let mut retries = 0;
        loop {
            *attempts += 1;
            let remaining = deadline.saturating_duration_since(Instant::now());
            let timeout = self
                .inner
                .timeout
                .min(remaining)
                .max(Duration::from_millis(1));
            let (error, retry_after) = match self.attempt(call, timeout).await {
                Ok(answer) if answer.status < 400 => return Ok(answer),
                Ok(answer) => {
                    let problem = answer.problem();
                    let retry_after = problem.retry_after;
                    let retryable = problem.is_retryable();
                    let error = Error::new(ErrorKind::Api(problem));
                    if !retryable {
                        return Err(error.with_call(call.idempotency_key.as_deref(), *attempts));
                    }
                    (error, retry_after)
                }
                Err(e) => match tls::refused_certificate(&e) {
                    Some(reason) => {
                        let reason = reason.to_string();
                        let error = Error::new(ErrorKind::Tls {
                            reason,
                            source: Box::new(e),
                        });
                        return Err(error.with_call(call.idempotency_key.as_deref(), *attempts));
                    }
                    None => (Error::transport(e), None),
                },
            };
            let error = error.with_call(call.idempotency_key.as_deref(), *attempts);
            retries += 1;
            if retries >= policy.get_max_attempts() {
                return Err(error);
            }
            let delay = policy.delay(retries, retry_after);
            // Never sooner than `Retry-After`: rather give up when it reaches past the end.
            if Instant::now() + delay >= deadline {
                return Err(error);
            }
            tokio::time::sleep(delay).await;
        }
    }

    async fn attempt(&self, call: &Call, timeout: Duration) -> Result<Answer, reqwest::Error> {
        let mut request = self
            .inner
            .http
            .request(call.method.clone(), call.url.clone())
            .timeout(timeout)
            .header(AUTHORIZATION, self.inner.authorization.clone())
            .header(
                USER_AGENT,
                concat!("payments-client/", env!("CARGO_PKG_VERSION")),
            );
        if let Some(key) = &call.idempotency_key {
            request = request.header(IDEMPOTENCY_KEY, key);
        }
        if let Some(body) = &call.body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await?.to_vec();
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}
