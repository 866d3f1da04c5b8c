//! Settings, all from the environment (a `.env` file may supply them too).
//! A bad value stops the start with a message that names the variable.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[error("invalid value for {variable}: {message}")]
pub struct ConfigError {
    pub variable: &'static str,
    pub message: String,
}

impl ConfigError {
    pub fn new(variable: &'static str, message: impl Into<String>) -> Self {
        Self {
            variable,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Everything the service needs to start. `Debug` is deliberately not derived: the
/// bootstrap key and webhook secrets must never reach a log.
#[derive(Clone)]
pub struct Settings {
    pub database_url: String,
    pub database_pool_size: u32,
    pub bind_addr: String,
    pub bootstrap_api_key: Option<String>,
    pub provider_url: Option<String>,
    pub provider_timeout: Duration,
    pub provider_max_attempts: u32,
    /// Latency of the in-process simulator (tests use it to hold a request in flight).
    pub provider_latency: Duration,
    /// `whsec_…` secrets accepted on inbound webhooks (several = rotation); the first one
    /// also signs the in-process simulator's webhooks.
    pub webhook_secrets: Vec<String>,
    /// How long the in-process simulator keeps an async charge pending before its webhook.
    pub provider_async_delay: Duration,
    pub processing_lease: Duration,
    pub recovery_interval: Duration,
    pub idempotency_wait: Duration,
    pub log_format: LogFormat,
    /// HTTP worker threads; `None` = one per core.
    pub workers: Option<usize>,
}

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/payments.db";

impl Settings {
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup`, so tests can check validation without touching
    /// the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let millis =
            |name: &'static str, default: u64, min: u64| -> Result<Duration, ConfigError> {
                match get(name) {
                    None => Ok(Duration::from_millis(default)),
                    Some(v) => match v.trim().parse::<u64>() {
                        Ok(ms) if ms >= min => Ok(Duration::from_millis(ms)),
                        _ => Err(ConfigError::new(
                            name,
                            format!("expected a whole number of milliseconds >= {min}, got {v:?}"),
                        )),
                    },
                }
            };
        let number = |name: &'static str, default: u32, range: std::ops::RangeInclusive<u32>| {
            match get(name) {
                None => Ok(default),
                Some(v) => match v.trim().parse::<u32>() {
                    Ok(n) if range.contains(&n) => Ok(n),
                    _ => Err(ConfigError::new(
                        name,
                        format!(
                            "expected a whole number from {} to {}, got {v:?}",
                            range.start(),
                            range.end()
                        ),
                    )),
                },
            }
        };

        let database_url = get("DATABASE_URL").unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
        crate::db::DatabaseTarget::parse(&database_url)?;

        let bind_addr = get("BIND_ADDR").unwrap_or_else(|| "127.0.0.1:8080".to_owned());
        if bind_addr.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::new(
                "BIND_ADDR",
                format!("expected HOST:PORT with an IP address, got {bind_addr:?}"),
            ));
        }

        let provider_url = get("PROVIDER_URL").map(|u| u.trim_end_matches('/').to_owned());
        if let Some(url) = &provider_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(ConfigError::new(
                "PROVIDER_URL",
                "expected an http:// or https:// URL",
            ));
        }

        let webhook_secrets: Vec<String> = match get("WEBHOOK_SECRETS") {
            None => Vec::new(),
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        };
        if get("WEBHOOK_SECRETS").is_some() && webhook_secrets.is_empty() {
            return Err(ConfigError::new(
                "WEBHOOK_SECRETS",
                "expected one or more comma-separated whsec_… secrets",
            ));
        }
        for (position, secret) in webhook_secrets.iter().enumerate() {
            // The message names the position, never the secret.
            crate::webhooks::WebhookSecret::parse(secret).map_err(|why| {
                ConfigError::new(
                    "WEBHOOK_SECRETS",
                    format!("secret #{}: {why}", position + 1),
                )
            })?;
        }

        let log_format = match get("LOG_FORMAT").as_deref().map(str::trim) {
            None | Some("pretty") => LogFormat::Pretty,
            Some("json") => LogFormat::Json,
            Some(other) => {
                return Err(ConfigError::new(
                    "LOG_FORMAT",
                    format!("expected \"pretty\" or \"json\", got {other:?}"),
                ));
            }
        };

        let bootstrap_api_key = get("BOOTSTRAP_API_KEY");
        if let Some(key) = &bootstrap_api_key
            && (key.len() < 16 || key.bytes().any(|b| !b.is_ascii_graphic()))
        {
            return Err(ConfigError::new(
                "BOOTSTRAP_API_KEY",
                "expected at least 16 visible ASCII characters",
            ));
        }

        Ok(Self {
            database_url,
            database_pool_size: number("DATABASE_POOL_SIZE", 16, 1..=1000)?,
            bind_addr,
            bootstrap_api_key,
            provider_url,
            provider_timeout: millis("PROVIDER_TIMEOUT_MS", 5000, 1)?,
            provider_max_attempts: number("PROVIDER_MAX_ATTEMPTS", 3, 1..=20)?,
            provider_latency: millis("PROVIDER_LATENCY_MS", 0, 0)?,
            webhook_secrets,
            provider_async_delay: millis("PROVIDER_ASYNC_DELAY_MS", 1000, 0)?,
            processing_lease: millis("PROCESSING_LEASE_MS", 30_000, 1)?,
            recovery_interval: millis("RECOVERY_INTERVAL_MS", 5000, 1)?,
            idempotency_wait: millis("IDEMPOTENCY_WAIT_MS", 2000, 0)?,
            log_format,
            workers: match get("WORKERS") {
                None => None,
                Some(_) => Some(number("WORKERS", 1, 1..=256)? as usize),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(s.bind_addr, "127.0.0.1:8080");
        assert_eq!(s.provider_timeout, Duration::from_millis(5000));
        assert_eq!(s.provider_max_attempts, 3);
        assert_eq!(s.processing_lease, Duration::from_millis(30_000));
        assert_eq!(s.idempotency_wait, Duration::from_millis(2000));
        assert_eq!(s.log_format, LogFormat::Pretty);
        assert_eq!(s.provider_async_delay, Duration::from_millis(1000));
        assert!(s.webhook_secrets.is_empty());
    }

    #[test]
    fn webhook_secrets_are_a_comma_separated_list_and_errors_hide_them() {
        let s = settings(&[(
            "WEBHOOK_SECRETS",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        )])
        .unwrap();
        assert_eq!(s.webhook_secrets.len(), 2);
        let err = settings(&[("WEBHOOK_SECRETS", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS")])
            .err()
            .expect("truncated base64 is refused");
        assert!(!err.to_string().contains("MfKQ9r8"), "{err}");
    }

    #[test]
    fn a_bad_value_names_its_variable() {
        for (name, value) in [
            ("DATABASE_URL", "mysql://localhost/x"),
            ("BIND_ADDR", "nowhere"),
            ("PROVIDER_TIMEOUT_MS", "fast"),
            ("PROVIDER_MAX_ATTEMPTS", "0"),
            ("PROCESSING_LEASE_MS", "-5"),
            ("IDEMPOTENCY_WAIT_MS", "2s"),
            ("LOG_FORMAT", "xml"),
            ("PROVIDER_URL", "ftp://x"),
            ("PROVIDER_ASYNC_DELAY_MS", "soon"),
            ("WEBHOOK_SECRETS", "not-a-secret"),
            (
                "WEBHOOK_SECRETS",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,whsec_!!",
            ),
            ("WEBHOOK_SECRETS", "whsec_AAAA"),
            ("WEBHOOK_SECRETS", " , "),
        ] {
            let err = settings(&[(name, value)]).err().expect(name);
            assert_eq!(err.variable, name);
            assert!(err.to_string().contains(name), "{err}");
        }
    }
}
