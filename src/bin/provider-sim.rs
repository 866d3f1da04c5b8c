//! `provider-sim`: the simulated payment provider as its own HTTP server.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use clap::Parser;
use payments_api::config::LogFormat;
use payments_api::provider::sim::server::{self, Faults};
use payments_api::provider::sim::{RetryPolicy, Simulator, WebhookDelivery};
use payments_api::signing::WebhookSecret;
use payments_api::telemetry;

/// A setting's value (none: unset or blank). One that is not UTF-8 is a bad value, which
/// stops the start like the others, rather than an unset one.
fn setting(name: &'static str) -> Option<String> {
    match payments_api::config::env_var(name) {
        Ok(value) => value.filter(|v| !v.trim().is_empty()),
        Err(bad) => {
            eprintln!("provider-sim: {bad}");
            std::process::exit(2)
        }
    }
}

fn rate(name: &'static str) -> Result<u32, String> {
    match setting(name) {
        None => Ok(0),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => Ok(Faults::rate_to_ppm(r)),
            _ => Err(format!(
                "invalid value for {name}: expected a number from 0 to 1, got {v:?}"
            )),
        },
    }
}

fn millis(name: &'static str) -> Result<u64, String> {
    match setting(name) {
        None => Ok(0),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("invalid value for {name}: expected milliseconds, got {v:?}")),
    }
}

/// The simulated payment provider over HTTP (docs/provider.md): charges, captures, cancels and
/// refunds, once per idempotency key, with a ledger at GET /v1/charges and GET /v1/refunds.
///
/// Settings, from the environment: PROVIDER_SIM_BIND (default 127.0.0.1:9090), WEBHOOK_URL
/// and WEBHOOK_SECRET (where and how its webhooks are signed and sent; both or neither),
/// PROVIDER_LATENCY_MS, PROVIDER_ASYNC_DELAY_MS (default 1000), PROVIDER_FAIL_RATE (answer
/// 500 without charging, 0 to 1), PROVIDER_DROP_RATE (charge, then never answer, 0 to 1),
/// RUST_LOG, LOG_FORMAT (pretty or json).
#[derive(Parser)]
#[command(name = "provider-sim", version)]
struct Cli {}

fn main() -> ExitCode {
    // Usage errors exit 2, `--help` and `--version` 0, before any setting is read.
    Cli::parse();
    if let Err(e) = payments_api::config::load_dotenv() {
        eprintln!("provider-sim: {e}");
        return ExitCode::from(2);
    }
    let format = match setting("LOG_FORMAT").as_deref().map(str::trim) {
        None | Some("pretty") => LogFormat::Pretty,
        Some("json") => LogFormat::Json,
        Some(other) => {
            eprintln!(
                "provider-sim: invalid value for LOG_FORMAT: expected \"pretty\" or \"json\", got {other:?}"
            );
            return ExitCode::from(2);
        }
    };
    let filter = setting("RUST_LOG").unwrap_or_else(|| "info".to_owned());
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(filter.trim()) {
        eprintln!("provider-sim: invalid value for RUST_LOG: {e}");
        return ExitCode::from(2);
    }
    telemetry::init(format, filter.trim());
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("provider-sim: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), String> {
    let bind = setting("PROVIDER_SIM_BIND").unwrap_or_else(|| "127.0.0.1:9090".to_owned());
    let faults = Arc::new(Faults::default());
    faults
        .latency_ms
        .store(millis("PROVIDER_LATENCY_MS")?, Ordering::Relaxed);
    faults
        .fail_rate_ppm
        .store(rate("PROVIDER_FAIL_RATE")?, Ordering::Relaxed);
    faults
        .drop_rate_ppm
        .store(rate("PROVIDER_DROP_RATE")?, Ordering::Relaxed);
    let async_delay = match setting("PROVIDER_ASYNC_DELAY_MS") {
        None => std::time::Duration::from_millis(1000),
        Some(_) => std::time::Duration::from_millis(millis("PROVIDER_ASYNC_DELAY_MS")?),
    };
    let webhooks = match (setting("WEBHOOK_URL"), setting("WEBHOOK_SECRET")) {
        (Some(url), Some(secret)) => {
            let url = url.trim().to_owned();
            if payments_api::domain::EndpointUrl::parse(&url).is_err() {
                return Err(format!(
                    "invalid value for WEBHOOK_URL: expected an http:// or https:// URL with a \
                     host, got {url:?}"
                ));
            }
            let secret = WebhookSecret::parse(secret.trim())
                .map_err(|e| format!("invalid value for WEBHOOK_SECRET: {e}"))?;
            Some((
                WebhookDelivery::new(url, secret, RetryPolicy::default()),
                async_delay,
            ))
        }
        (None, None) => {
            tracing::warn!("WEBHOOK_URL/WEBHOOK_SECRET unset: async charges stay pending");
            None
        }
        _ => return Err("WEBHOOK_URL and WEBHOOK_SECRET go together: set both or neither".into()),
    };
    let listener = payments_api::startup::listen(&bind)
        .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    actix_web::rt::System::new().block_on(async move {
        let server = server::serve(listener, Arc::new(Simulator::new()), faults, webhooks)
            .map_err(|e| e.to_string())?;
        tracing::info!(%bind, "provider-sim listening");
        server.await.map_err(|e| e.to_string())
    })
}
