//! Logging: `RUST_LOG` filters, `LOG_FORMAT=json` gives one JSON object per line.
//! Logs go to stdout.

use std::io::IsTerminal;

use tracing::Dispatch;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogFormat;

/// `filter` is `RUST_LOG`, checked with the other settings.
pub fn init(format: LogFormat, filter: &str) {
    let dispatch = subscriber(
        format,
        filter,
        std::io::stdout().is_terminal(),
        std::io::stdout,
    );
    // A second init (tests) is harmless: the first subscriber stays.
    let _ = dispatch.try_init();
}

/// The subscriber that writes the logs to `writer`. Colour codes only when `is_terminal`:
/// in a file, a pipe or a log collector they would be noise around every level and field.
fn subscriber<W>(format: LogFormat, filter: &str, is_terminal: bool, writer: W) -> Dispatch
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_timer(SharedClock)
        .with_env_filter(filter)
        .with_ansi(is_terminal)
        .with_writer(writer);
    match format {
        LogFormat::Json => Dispatch::new(builder.json().flatten_event(true).finish()),
        LogFormat::Pretty => Dispatch::new(builder.finish()),
    }
}

/// Log lines are timed by the clock every instance shares ([`crate::domain::now`]), as the
/// rows they speak of are: lines of two hosts whose clocks differ interleave as they
/// happened, and a line's time matches the `created_at` it logs.
struct SharedClock;

impl FormatTime for SharedClock {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        crate::domain::write_timestamp(crate::domain::now(), w)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A log destination the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn log_one_line(format: LogFormat, is_terminal: bool) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let dispatch = subscriber(format, "info", is_terminal, move || writer.clone());
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::warn!(merchant = "mer_1", "payments-api listening");
        });
        let bytes = captured.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn logs_that_do_not_go_to_a_terminal_carry_no_colour_codes() {
        for format in [LogFormat::Pretty, LogFormat::Json] {
            let line = log_one_line(format, false);
            assert!(line.contains("payments-api listening"), "{line:?}");
            assert!(!line.contains('\u{1b}'), "{line:?}");
        }
    }

    #[test]
    fn a_terminal_gets_colours() {
        let line = log_one_line(LogFormat::Pretty, true);
        assert!(line.contains('\u{1b}'), "{line:?}");
    }
}
