//! The settings of a [`Client`], checked once when it is built.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::HeaderValue;

use crate::client::{Client, Inner};
use crate::error::Error;
use crate::retry::RetryPolicy;
use crate::tls::{self, ExtraRoots};

/// Settings of a [`Client`]; [`Client::builder`] makes one.
///
/// `https://` base URLs are verified against Mozilla's roots, built into the crate; a
/// service behind a private CA needs [`ClientBuilder::add_ca_pem`] or
/// [`ClientBuilder::add_ca_file`].
#[derive(Clone)]
#[must_use]
pub struct ClientBuilder {
    base_url: String,
    api_key: String,
    retry: RetryPolicy,
    timeout: Duration,
    connect_timeout: Duration,
    extra_roots: Vec<ExtraRoots>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the API key.
        f.debug_struct("ClientBuilder")
            .field("base_url", &self.base_url)
            .field("retry", &self.retry)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("extra_roots", &self.extra_roots)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    pub(crate) fn new(base_url: String, api_key: String) -> Self {
        Self {
            base_url,
            api_key,
            retry: RetryPolicy::default(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            extra_roots: Vec::new(),
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

    /// Trusts the CA certificates in `pem` (one or more `-----BEGIN CERTIFICATE-----`
    /// blocks) for `https://`, besides Mozilla's roots: for a service whose certificate a
    /// private CA signed. Give the CA, not the server's own certificate: TLS does not take a
    /// self-signed server certificate as its own root. [`build`](Self::build) fails if the
    /// PEM holds no usable certificate.
    ///
    /// ```no_run
    /// let client = payments_client::Client::builder("https://payments.internal", "sk_live_…")
    ///     .add_ca_pem(std::fs::read("/etc/payments/ca.pem")?)
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.extra_roots.push(ExtraRoots::Pem(pem.into()));
        self
    }

    /// Like [`add_ca_pem`](Self::add_ca_pem), with the PEM read from `path` when the client is
    /// built (a missing file fails [`build`](Self::build)).
    pub fn add_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.extra_roots.push(ExtraRoots::File(path.into()));
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
            // Our own rustls configuration, so reqwest never looks for a process-wide crypto
            // provider. It only recognises a `rustls::ClientConfig` of its own rustls version:
            // should the two drift apart, `build()` fails (and so does the https test).
            .tls_backend_preconfigured(tls::client_config(&self.extra_roots)?)
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
