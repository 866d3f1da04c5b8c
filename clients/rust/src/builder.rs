//! The settings of a [`Client`], checked once when it is built.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::HeaderValue;

use crate::client::{Client, Inner};
use crate::error::Error;
use crate::retry::RetryPolicy;

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
    pub(crate) fn new(base_url: String, api_key: String) -> Self {
        Self {
            base_url,
            api_key,
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        }
    }

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
