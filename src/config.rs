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
    /// How often one instance reconciles with the provider's settlement report
    /// (`RECONCILE_INTERVAL_MS`); `None` (0): only by the `reconcile` command.
    pub reconcile_interval: Option<Duration>,
    /// How long a dashboard session lives without a request (`DASHBOARD_SESSION_TTL_MS`).
    pub dashboard_session_ttl: Duration,
    pub idempotency_wait: Duration,
    pub log_format: LogFormat,
    /// `RUST_LOG`: which logs are written (`info` when unset).
    pub log_filter: String,
    /// HTTP worker threads; `None` = one per core.
    pub workers: Option<usize>,
    /// The connections the instance holds at once (`MAX_CONNECTIONS`; see
    /// [`crate::connections`]).
    pub max_connections: usize,
    /// How long a `requires_capture` payment stays capturable before the service cancels it.
    pub authorization_expiry: Duration,
    /// How long events and their deliveries are kept.
    pub event_retention: chrono::TimeDelta,
    /// Delays between delivery attempts to merchant endpoints: N delays, N + 1 attempts.
    pub webhook_retry_schedule: Vec<Duration>,
    /// How long one delivery attempt may take.
    pub webhook_timeout: Duration,
    /// An endpoint whose attempts have all failed for this long is disabled.
    pub webhook_disable_after: Duration,
    /// Lets merchant endpoints point at loopback/private addresses (development, tests).
    pub webhook_allow_private_urls: bool,
    /// API requests per second per merchant, per instance; `None` = no limit.
    pub rate_limit_per_second: Option<u32>,
    /// `false` behind a pooler in transaction mode that cannot keep named statements.
    pub database_prepared_statements: bool,
    /// `TLS_CA_FILE`: PEM root certificates trusted for `https` besides the built-in ones.
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// The fees and the pending period of the ledger (`FEE_PERCENT_BPS`, `FEE_FIXED`,
    /// `DISPUTE_FEE`, `BALANCE_PENDING_MS`).
    pub ledger: crate::domain::LedgerPolicy,
}

/// `WEBHOOK_RETRY_SCHEDULE`'s default: 8 attempts over about 32 hours.
pub const DEFAULT_WEBHOOK_RETRY_SCHEDULE: &str = "5s,5m,30m,2h,5h,10h,10h";

/// Parses a comma-separated list of durations, each a whole number with a unit
/// (`ms`, `s`, `m`, `h`, `d`): `5s,5m,30m`.
pub fn parse_schedule(text: &str) -> Result<Vec<Duration>, String> {
    text.split(',')
        .map(str::trim)
        .map(|item| {
            let split = item
                .find(|c: char| !c.is_ascii_digit())
                .ok_or_else(|| format!("{item:?} has no unit (ms, s, m, h or d)"))?;
            let (number, unit) = item.split_at(split);
            let n: u64 = number
                .parse()
                .map_err(|_| format!("{item:?} does not start with a whole number"))?;
            let millis = match unit {
                "ms" => Some(n),
                "s" => n.checked_mul(1000),
                "m" => n.checked_mul(60_000),
                "h" => n.checked_mul(3_600_000),
                "d" => n.checked_mul(86_400_000),
                _ => return Err(format!("{item:?}: unknown unit (ms, s, m, h or d)")),
            };
            millis
                .filter(|ms| *ms <= MAX_MILLIS)
                .map(Duration::from_millis)
                .ok_or_else(|| format!("{item:?} is longer than 100 years"))
        })
        .collect()
}

/// `MAX_CONNECTIONS` when unset: held at once with a request in flight each, about 38 KiB
/// apiece (docs/benchmark.md), they keep the instance near 150 MiB; at 200 ms a request
/// they still carry over 15 000 requests a second, more than two cores serve.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 3072;

pub const DEFAULT_DATABASE_URL: &str = "sqlite://data/payments.db";

/// The longest duration a setting may give: 100 years. Anything longer is a mistake, and
/// added to a timestamp it would overflow.
const MAX_MILLIS: u64 = 100 * 365 * 24 * 3600 * 1000;

/// An absolute `http`/`https` URL with a host and a port from 1 to 65535 (the rules of a
/// webhook endpoint's URL), and no query: a path is allowed, the provider's API may live
/// under one.
fn is_base_url(url: &str) -> bool {
    crate::domain::EndpointUrl::parse(url).is_ok() && !url.contains(['?', '#'])
}

/// Reads a `.env` file into the environment, if there is one (the environment's own values
/// win). One that cannot be read (a line that is no `NAME=value`) is a bad setting, not a
/// file silently half-used.
pub fn load_dotenv() -> Result<(), String> {
    match dotenvy::dotenv() {
        Ok(_) => Ok(()),
        Err(e) if e.not_found() => Ok(()),
        Err(e) => Err(format!("cannot read .env: {e}")),
    }
}

/// A setting from the process environment, `None` when unset. A value that is not UTF-8 is
/// a bad value, named as the others are, not an unset one (which would start the program on
/// the default in its place). The service's settings and `provider-sim`'s read it.
pub fn env_var(name: &'static str) -> Result<Option<String>, ConfigError> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::new(
            name,
            "expected UTF-8 text, got other bytes",
        )),
    }
}

impl Settings {
    /// The settings from the process environment, each read by [`env_var`] (so a value
    /// that is not UTF-8 stops the start, named).
    pub fn from_env() -> Result<Self, ConfigError> {
        // The first bad value is the error, whatever the lookup made of the rest.
        let bad = std::cell::Cell::new(None);
        let settings = Self::from_lookup(|name| {
            env_var(name).unwrap_or_else(|e| {
                let first = bad.take().unwrap_or(e);
                bad.set(Some(first));
                None
            })
        });
        bad.into_inner().map_or(settings, Err)
    }

    /// Reads settings through `lookup`, so tests can check validation without touching
    /// the process environment.
    pub fn from_lookup(
        lookup: impl Fn(&'static str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let get = |name: &'static str| lookup(name).filter(|v| !v.trim().is_empty());
        let millis =
            |name: &'static str, default: u64, min: u64| -> Result<Duration, ConfigError> {
                match get(name) {
                    None => Ok(Duration::from_millis(default)),
                    Some(v) => match v.trim().parse::<u64>() {
                        Ok(ms) if (min..=MAX_MILLIS).contains(&ms) => Ok(Duration::from_millis(ms)),
                        _ => Err(ConfigError::new(
                            name,
                            format!(
                                "expected a whole number of milliseconds from {min} to \
                                 {MAX_MILLIS} (100 years), got {v:?}"
                            ),
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
        crate::db::pool::DatabaseTarget::parse(&database_url)
            .map_err(|why| ConfigError::new("DATABASE_URL", why))?;

        let bind_addr = get("BIND_ADDR").unwrap_or_else(|| "127.0.0.1:8080".to_owned());
        if bind_addr.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::new(
                "BIND_ADDR",
                format!("expected HOST:PORT with an IP address, got {bind_addr:?}"),
            ));
        }

        let provider_url = get("PROVIDER_URL").map(|u| u.trim().trim_end_matches('/').to_owned());
        if let Some(url) = &provider_url
            && !is_base_url(url)
        {
            return Err(ConfigError::new(
                "PROVIDER_URL",
                "expected an http:// or https:// URL with a host (and a port from 1 to 65535)",
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
            crate::signing::WebhookSecret::parse(secret).map_err(|why| {
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

        let log_filter = get("RUST_LOG")
            .map(|filter| filter.trim().to_owned())
            .filter(|filter| !filter.is_empty())
            .unwrap_or_else(|| "info".to_owned());
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log_filter) {
            return Err(ConfigError::new(
                "RUST_LOG",
                format!("expected a log filter such as \"info\" or \"payments_api=debug\": {e}"),
            ));
        }

        let bootstrap_api_key = get("BOOTSTRAP_API_KEY");
        if let Some(key) = &bootstrap_api_key
            && (key.len() < 16 || key.bytes().any(|b| !b.is_ascii_graphic()))
        {
            return Err(ConfigError::new(
                "BOOTSTRAP_API_KEY",
                "expected at least 16 visible ASCII characters",
            ));
        }

        let flag = |name: &'static str, default: bool| match get(name).as_deref().map(str::trim) {
            None => Ok(default),
            Some("true" | "on" | "1") => Ok(true),
            Some("false" | "off" | "0") => Ok(false),
            Some(other) => Err(ConfigError::new(
                name,
                format!("expected true/false (or on/off, 1/0), got {other:?}"),
            )),
        };
        let webhook_retry_schedule = parse_schedule(
            get("WEBHOOK_RETRY_SCHEDULE")
                .as_deref()
                .unwrap_or(DEFAULT_WEBHOOK_RETRY_SCHEDULE),
        )
        .map_err(|why| ConfigError::new("WEBHOOK_RETRY_SCHEDULE", why))?;
        let rate_limit = number("RATE_LIMIT_PER_SECOND", 0, 0..=1_000_000)?;

        Ok(Self {
            tls_ca_file: get("TLS_CA_FILE").map(|path| path.trim().into()),
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
            reconcile_interval: Some(millis("RECONCILE_INTERVAL_MS", 3_600_000, 0)?)
                .filter(|every| !every.is_zero()),
            dashboard_session_ttl: millis("DASHBOARD_SESSION_TTL_MS", 43_200_000, 1000)?,
            idempotency_wait: millis("IDEMPOTENCY_WAIT_MS", 2000, 0)?,
            log_format,
            log_filter,
            workers: match get("WORKERS") {
                None => None,
                Some(_) => Some(number("WORKERS", 1, 1..=256)? as usize),
            },
            max_connections: number("MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS, 1..=1_000_000)?
                as usize,
            authorization_expiry: millis("AUTHORIZATION_EXPIRY_MS", 604_800_000, 1)?,
            event_retention: chrono::TimeDelta::days(i64::from(number(
                "EVENT_RETENTION_DAYS",
                30,
                1..=36_500,
            )?)),
            webhook_retry_schedule,
            webhook_timeout: millis("WEBHOOK_TIMEOUT_MS", 10_000, 1)?,
            webhook_disable_after: millis("WEBHOOK_DISABLE_AFTER_MS", 432_000_000, 1)?,
            webhook_allow_private_urls: flag("WEBHOOK_ALLOW_PRIVATE_URLS", false)?,
            rate_limit_per_second: (rate_limit > 0).then_some(rate_limit),
            database_prepared_statements: flag("DATABASE_PREPARED_STATEMENTS", true)?,
            ledger: crate::domain::LedgerPolicy {
                fee_percent_bps: i64::from(number("FEE_PERCENT_BPS", 290, 0..=10_000)?),
                fee_fixed: i64::from(number("FEE_FIXED", 30, 0..=100_000_000)?),
                dispute_fee: i64::from(number("DISPUTE_FEE", 1500, 0..=100_000_000)?),
                pending: millis("BALANCE_PENDING_MS", 172_800_000, 0)?,
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
        assert_eq!(s.authorization_expiry, Duration::from_millis(604_800_000));
        assert_eq!(s.event_retention, chrono::TimeDelta::days(30));
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(
            s.webhook_retry_schedule,
            [
                Duration::from_secs(5),
                minutes(5),
                minutes(30),
                minutes(120),
                minutes(300),
                minutes(600),
                minutes(600)
            ]
        );
        assert_eq!(s.webhook_timeout, Duration::from_millis(10_000));
        assert_eq!(s.webhook_disable_after, Duration::from_millis(432_000_000));
        assert!(!s.webhook_allow_private_urls);
        assert_eq!(s.rate_limit_per_second, None);
        assert!(s.database_prepared_statements);
    }

    #[test]
    fn new_settings_parse_their_forms() {
        let s = settings(&[
            ("WEBHOOK_RETRY_SCHEDULE", "100ms, 1s,2m"),
            ("WEBHOOK_ALLOW_PRIVATE_URLS", "true"),
            ("RATE_LIMIT_PER_SECOND", "25"),
            ("DATABASE_PREPARED_STATEMENTS", "off"),
            ("EVENT_RETENTION_DAYS", "7"),
        ])
        .unwrap();
        assert_eq!(
            s.webhook_retry_schedule,
            [
                Duration::from_millis(100),
                Duration::from_secs(1),
                Duration::from_secs(120)
            ]
        );
        assert!(s.webhook_allow_private_urls);
        assert_eq!(s.rate_limit_per_second, Some(25));
        assert!(!s.database_prepared_statements);
        assert_eq!(s.event_retention, chrono::TimeDelta::days(7));
        let unlimited = settings(&[("RATE_LIMIT_PER_SECOND", "0")]).unwrap();
        assert_eq!(unlimited.rate_limit_per_second, None);
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
            ("RUST_LOG", "[[["),
            ("PROVIDER_URL", "ftp://x"),
            ("PROVIDER_URL", "http://127.0.0.1:99999"),
            ("PROVIDER_URL", "http://127.0.0.1:0"),
            ("PROVIDER_URL", "http://exa mple"),
            ("PROVIDER_URL", "http://"),
            ("PROVIDER_URL", "http://user@host"),
            ("PROCESSING_LEASE_MS", "10000000000000000"),
            ("WEBHOOK_TIMEOUT_MS", "18446744073709551615"),
            ("WEBHOOK_DISABLE_AFTER_MS", "3153600000001"),
            ("WEBHOOK_RETRY_SCHEDULE", "5s,876001h"),
            ("WEBHOOK_RETRY_SCHEDULE", "3153600000001ms"),
            ("PROVIDER_ASYNC_DELAY_MS", "soon"),
            ("WEBHOOK_SECRETS", "not-a-secret"),
            (
                "WEBHOOK_SECRETS",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw,whsec_!!",
            ),
            ("WEBHOOK_SECRETS", "whsec_AAAA"),
            ("WEBHOOK_SECRETS", " , "),
            ("AUTHORIZATION_EXPIRY_MS", "week"),
            ("EVENT_RETENTION_DAYS", "0"),
            ("WEBHOOK_RETRY_SCHEDULE", "5s,soon"),
            ("WEBHOOK_RETRY_SCHEDULE", "5"),
            ("WEBHOOK_RETRY_SCHEDULE", "5x"),
            ("WEBHOOK_TIMEOUT_MS", "0"),
            ("WEBHOOK_DISABLE_AFTER_MS", "x"),
            ("WEBHOOK_ALLOW_PRIVATE_URLS", "maybe"),
            ("RATE_LIMIT_PER_SECOND", "-1"),
            ("DATABASE_PREPARED_STATEMENTS", "sometimes"),
        ] {
            let err = settings(&[(name, value)])
                .err()
                .unwrap_or_else(|| panic!("{name}={value}"));
            assert_eq!(err.variable, name);
            assert!(err.to_string().contains(name), "{err}");
        }
    }
}
