//! The client: one HTTP connection pool, the API key and the retry policy, shared by every
//! call. How a call is sent and retried is in `request.rs`, a mutating call's key in
//! `mutation.rs`, the settings in `builder.rs`.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::HeaderValue;

use crate::builder::ClientBuilder;
use crate::error::Error;
use crate::retry::RetryPolicy;

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
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    pub(crate) base: Url,
    pub(crate) authorization: HeaderValue,
    pub(crate) retry: RetryPolicy,
    pub(crate) timeout: Duration,
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
        ClientBuilder::new(base_url.into(), api_key.into())
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn bad_base_urls_and_keys_are_refused() {
        assert!(Client::new("not a url", "sk").is_err());
        assert!(Client::new("mailto:a@b.c", "sk").is_err());
        assert!(Client::new("http://x", "bad\nkey").is_err());
    }

    #[test]
    fn debug_never_shows_the_api_key() {
        let builder = Client::builder("http://x", "sk_secret_value");
        assert!(!format!("{builder:?}").contains("sk_secret_value"));
        let client = builder.build().expect("client");
        assert!(!format!("{client:?}").contains("sk_secret_value"));
    }
}
