//! Reconciliation: our records against the provider's settlement report (its book of every
//! movement of money). Reads both sides in pages, in bounded memory whatever the window
//! holds, and never moves money.
//!
//! ```text
//! 1. provider movements of [from − LOOKBACK, to + LOOKAHEAD), page by page (≤ 1000):
//!      look up our objects of the page's references (one query per kind)
//!      judge each: matched | amount/currency mismatch | missing_here | not final yet (skipped)
//!      a second movement for one operation of ours: duplicate_at_provider
//!      what matched (or mismatched) one of our moves is marked seen for this run (a table)
//! 2. our money moves that became final in [from, to) and no movement was seen for
//!      (anti-join, keyset pages): missing_at_provider
//! 3. each discrepancy stored once (by fingerprint); those of [from, to) not found again
//!      are resolved; the run's marks are dropped
//! ```
//!
//! The lookback lets a movement the provider made just before `from` match our move that
//! became final just after it (the provider moves money first, we record it after); the
//! lookahead, a movement just after `to` by the provider's clock match our move just before
//! it by ours; only movements inside the window are judged.

mod judge;
pub mod run;

use crate::domain::Timestamp;

pub use run::{
    Found, ReconcileError, Report, reconcile, run_scheduled, spawn_metrics, spawn_scheduled,
};

/// A discrepancy kind, as stored and printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DiscrepancyKind {
    /// The provider moved money for a reference we have no money move for.
    MissingHere,
    /// We have a money move the provider's report lacks.
    MissingAtProvider,
    AmountMismatch,
    CurrencyMismatch,
    /// Two movements for one operation of ours: a double charge.
    DuplicateAtProvider,
}

impl DiscrepancyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MissingHere => "missing_here",
            Self::MissingAtProvider => "missing_at_provider",
            Self::AmountMismatch => "amount_mismatch",
            Self::CurrencyMismatch => "currency_mismatch",
            Self::DuplicateAtProvider => "duplicate_at_provider",
        }
    }
}

/// Money as the report prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Money {
    pub amount: i64,
    pub currency: String,
}

/// One discrepancy found by a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discrepancy {
    pub kind: DiscrepancyKind,
    /// `charge`, `capture`, `refund`, `payout`, `dispute`, `dispute_reversal`.
    pub movement_type: &'static str,
    pub reference: String,
    pub provider_movement_id: Option<String>,
    /// Which of the reference's moves it is, when it may have several (a payment's
    /// disputes): part of what the discrepancy is, not of what is printed.
    pub dispute: Option<String>,
    pub expected: Option<Money>,
    pub found: Option<Money>,
    pub occurred_at: Timestamp,
}

impl Discrepancy {
    /// What makes two findings the same discrepancy: its parts as text, or their SHA-256
    /// when that is longer than 255 bytes (the report's references and movement ids are the
    /// provider's, of any length, and the fingerprint is a unique key, which PostgreSQL caps
    /// at about 2 700 bytes per entry). Fingerprints stored before were all short, so each
    /// still names its discrepancy.
    pub fn fingerprint(&self) -> String {
        let parts = self.parts();
        if parts.len() > MAX_FINGERPRINT {
            format!("sha256:{}", crate::domain::sha256_hex(parts.as_bytes()))
        } else {
            parts
        }
    }

    fn parts(&self) -> String {
        let mut fingerprint = format!(
            "{}:{}:{}:{}",
            self.kind.as_str(),
            self.movement_type,
            self.reference,
            self.provider_movement_id.as_deref().unwrap_or("-")
        );
        if let Some(dispute) = &self.dispute {
            fingerprint.push(':');
            fingerprint.push_str(dispute);
        }
        fingerprint
    }
}

/// The longest fingerprint kept as written.
const MAX_FINGERPRINT: usize = 255;

/// The window a run covers: `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: Timestamp,
    pub to: Timestamp,
}

impl Window {
    /// A window given to the command: `from` before `to`, and the report read around it (an
    /// hour before, five minutes after) within the years RFC 3339 can write, 0001 to 9999.
    pub fn new(from: Timestamp, to: Timestamp) -> Result<Self, String> {
        use chrono::Datelike;
        if from >= to {
            return Err("--from must be before --to".to_owned());
        }
        let writable = |t: Option<Timestamp>| t.is_some_and(|t| (1..=9999).contains(&t.year()));
        if !writable(from.checked_sub_signed(run::LOOKBACK))
            || !writable(to.checked_add_signed(run::LOOKAHEAD))
        {
            return Err(
                "--from may be no earlier than 0001-01-01T01:00:00Z and --to must be before \
                 9999-12-31T23:55:00Z (the report is read from an hour before the window to \
                 five minutes after it, in RFC 3339 times)"
                    .to_owned(),
            );
        }
        Ok(Self { from, to })
    }

    /// The default: the 24 hours that ended 10 minutes before `now`.
    pub fn ending_before(now: Timestamp) -> Self {
        let to = now - chrono::Duration::minutes(10);
        Self {
            from: to - chrono::Duration::hours(24),
            to,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Window;

    #[test]
    fn a_window_is_one_whose_report_rfc_3339_can_ask_for() {
        let at = |t: &str| {
            chrono::DateTime::parse_from_rfc3339(t)
                .expect("a time")
                .naive_utc()
        };
        assert!(Window::new(at("2026-11-30T00:00:00Z"), at("2026-11-30T01:00:00Z")).is_ok());
        assert!(Window::new(at("0001-01-01T01:00:00Z"), at("9999-12-31T23:54:59Z")).is_ok());
        for (from, to) in [
            ("2026-11-30T01:00:00Z", "2026-11-30T01:00:00Z"),
            ("2026-11-30T02:00:00Z", "2026-11-30T01:00:00Z"),
            ("0001-01-01T00:59:59Z", "2026-11-30T01:00:00Z"),
            ("0000-01-01T00:00:00Z", "2026-11-30T01:00:00Z"),
            ("2026-11-30T00:00:00Z", "9999-12-31T23:55:00Z"),
        ] {
            assert!(Window::new(at(from), at(to)).is_err(), "{from} {to}");
        }
    }
}
