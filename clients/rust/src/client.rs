//! The client: one HTTP connection pool, the API key, the retry policy, and the one loop
//! every call goes through.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::stream::{self, BoxStream};
use futures_util::{StreamExt, TryStreamExt};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, USER_AGENT};
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorKind, Problem};
use crate::list::{HasId, ListParams, Page};
use crate::retry::{RetryPolicy, parse_retry_after};

const IDEMPOTENCY_KEY: &str = "idempotency-key";
const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
const REQUEST_ID: &str = "x-request-id";

/// A client of `payments-api`. Cheap to clone (one shared connection pool); `Send + Sync`,
/// so it can be shared by every task of a tokio runtime.
///
/// ```no_run
/// # async fn run() -> Result<(), payments_client::Error> {
/// use std::time::Duration;
/// use payments_client::{Client, RetryPolicy};
///
/// let client = Client::builder("http://127.0.0.1:8080", "sk_test_…")
///     .retry_policy(RetryPolicy::default().max_attempts(5))
///     .timeout(Duration::from_secs(20))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    base: Url,
    authorization: HeaderValue,
    retry: RetryPolicy,
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the API key.
        f.debug_struct("Client")
            .field("base_url", &self.inner.base.as_str())
            .field("retry", &self.inner.retry)
            .field("timeout", &self.inner.timeout)
            .finish_non_exhaustive()
    }
}

/// Settings of a [`Client`]; [`Client::builder`] makes one.
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    base_url: String,
    api_key: String,
    retry: RetryPolicy,
    timeout: Duration,
    connect_timeout: Duration,
}

impl ClientBuilder {
    /// How calls are retried (default: [`RetryPolicy::default`]).
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How long one attempt may take, from connecting to the end of the answer (default
    /// 30 s: longer than the server's own wait for a running key plus its provider calls).
    /// An attempt that times out is retried with the same key.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long connecting may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        let base = Url::parse(&self.base_url)
            .map_err(|e| Error::invalid(format!("base URL {:?}: {e}", self.base_url)))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(Error::invalid(format!(
                "base URL {:?} must be http:// or https://",
                self.base_url
            )));
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", self.api_key))
            .map_err(|_| Error::invalid("the API key holds characters a header cannot carry"))?;
        authorization.set_sensitive(true);
        let http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            // A redirected POST would become a GET; the API never redirects.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Error::invalid(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base,
                authorization,
                retry: self.retry,
                timeout: self.timeout,
            }),
        })
    }
}

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
struct Call {
    method: Method,
    url: Url,
    body: Option<Vec<u8>>,
    idempotency_key: Option<String>,
}

/// An answer as it came off the wire.
struct Answer {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn retry_after(&self) -> Option<Duration> {
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

    fn decode<T: DeserializeOwned>(self, call: &Call, attempts: u32) -> Result<Response<T>, Error> {
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
    /// A client with the default retry policy and timeouts.
    ///
    /// ```no_run
    /// let client = payments_client::Client::new("http://127.0.0.1:8080", "sk_test_…")?;
    /// # Ok::<(), payments_client::Error>(())
    /// ```
    pub fn new(base_url: impl Into<String>, api_key: impl Into<String>) -> Result<Self, Error> {
        Self::builder(base_url, api_key).build()
    }

    pub fn builder(base_url: impl Into<String>, api_key: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.into(),
            api_key: api_key.into(),
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        }
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        self.inner.retry
    }

    /// `base/v1/<segments…>`, each segment percent-encoded (ids are opaque strings).
    pub(crate) fn url(&self, segments: &[&str]) -> Result<Url, Error> {
        let mut url = self.inner.base.clone();
        url.path_segments_mut()
            .map_err(|()| Error::invalid("the base URL cannot take a path"))?
            .pop_if_empty()
            .push("v1")
            .extend(segments);
        Ok(url)
    }

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

    /// `base/v1/<segments…>?limit=&<filters>`: a list without its cursor.
    fn list_url(&self, segments: &[&str], params: &impl ListParams) -> Result<Url, Error> {
        let mut url = self.url(segments)?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(limit) = params.limit() {
                query.append_pair("limit", &limit.to_string());
            }
            for (name, value) in params.filters() {
                query.append_pair(name, &value);
            }
        }
        Ok(url)
    }

    /// One page of a list.
    pub(crate) async fn list<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        params: &impl ListParams,
    ) -> Result<Page<T>, Error> {
        let url = self.list_url(segments, params).map(|mut url| {
            if let Some(after) = params.starting_after() {
                url.query_pairs_mut().append_pair("starting_after", after);
            }
            url
        });
        self.get(url).await
    }

    /// Every item of a list from `starting_after` on, page after page.
    pub(crate) fn list_all<T>(
        &self,
        segments: &[&str],
        params: &impl ListParams,
    ) -> BoxStream<'static, Result<T, Error>>
    where
        T: DeserializeOwned + HasId + Send + 'static,
    {
        let url = self.list_url(segments, params);
        self.paginate(
            url,
            "starting_after",
            params.starting_after().map(str::to_owned),
        )
    }

    /// Every item of a list, page after page: `cursor` names the query parameter that
    /// continues after the last item of the page before (`starting_after`, or `after` for
    /// the event feed), `start` its first value.
    pub(crate) fn paginate<T>(
        &self,
        url: Result<Url, Error>,
        cursor: &'static str,
        start: Option<String>,
    ) -> BoxStream<'static, Result<T, Error>>
    where
        T: DeserializeOwned + HasId + Send + 'static,
    {
        let url = match url {
            Ok(url) => url,
            Err(e) => return stream::once(async { Err(e) }).boxed(),
        };
        let client = self.clone();
        // `None` once the last page was read.
        let state = Some(start);
        stream::try_unfold(state, move |state| {
            let (client, mut url) = (client.clone(), url.clone());
            async move {
                let Some(after) = state else {
                    return Ok::<_, Error>(None);
                };
                if let Some(after) = &after {
                    url.query_pairs_mut().append_pair(cursor, after);
                }
                let page: Page<T> = client.get(Ok(url)).await?;
                let next = match page.data.last() {
                    Some(last) if page.has_more => Some(Some(last.id().to_owned())),
                    _ => None,
                };
                Ok(Some((page.data, next)))
            }
        })
        .map_ok(|items| stream::iter(items.into_iter().map(Ok)))
        .try_flatten()
        .boxed()
    }

    /// Sends `call` until it gets an answer that is not worth retrying, the policy's
    /// attempts are spent, or waiting for the next attempt would pass `deadline`.
    /// `attempts` counts requests sent, across calls of one operation.
    async fn execute(
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
                Err(e) => (Error::transport(e), None),
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

/// A mutating call, ready to send: `.await` it for the object, or [`Mutation::send`] for the
/// object with the answer's status and headers.
///
/// It gets a new UUIDv4 `Idempotency-Key` unless [`Mutation::idempotency_key`] gives one,
/// and every retry of the call sends that same key and the same bytes, so the server runs
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

/// Objects whose operations can end unknown (202): payments (create, capture, cancel) and
/// refunds. Sealed.
pub trait Awaitable: private::Sealed {}
impl Awaitable for crate::Payment {}
impl Awaitable for crate::Refund {}
mod private {
    pub trait Sealed {}
    impl Sealed for crate::Payment {}
    impl Sealed for crate::Refund {}
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

    #[test]
    fn urls_keep_a_base_path_and_encode_ids() {
        let client = Client::new("http://example.test/api/", "sk").expect("client");
        let url = client.url(&["payments", "pay_1/../x"]).expect("url");
        assert_eq!(
            url.as_str(),
            "http://example.test/api/v1/payments/pay_1%2F..%2Fx"
        );
        let client = Client::new("http://example.test", "sk").expect("client");
        let url = client.url(&["payments"]).expect("url");
        assert_eq!(url.as_str(), "http://example.test/v1/payments");
    }

    #[test]
    fn list_urls_carry_the_page_size_and_filters() {
        let client = Client::new("http://example.test", "sk").expect("client");
        let params = crate::ListPayments {
            limit: Some(5),
            starting_after: Some("pay_9".into()),
            status: Some(crate::PaymentStatus::Succeeded),
            customer_id: Some("cus 1&2".into()),
        };
        let url = client.list_url(&["payments"], &params).expect("url");
        assert_eq!(
            url.as_str(),
            "http://example.test/v1/payments?limit=5&status=succeeded&customer_id=cus+1%262"
        );
    }

    #[test]
    fn bad_base_urls_and_keys_are_refused() {
        assert!(Client::new("not a url", "sk").is_err());
        assert!(Client::new("mailto:a@b.c", "sk").is_err());
        assert!(Client::new("http://x", "bad\nkey").is_err());
    }

    #[test]
    fn debug_never_shows_the_api_key() {
        let client = Client::new("http://x", "sk_secret_value").expect("client");
        assert!(!format!("{client:?}").contains("sk_secret_value"));
    }
}
