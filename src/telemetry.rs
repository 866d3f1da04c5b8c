//! Logging: `RUST_LOG` filters, `LOG_FORMAT=json` gives one JSON object per line.

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// `filter` is `RUST_LOG`, checked with the other settings.
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    // A second init (tests) is harmless: the first subscriber stays.
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}
