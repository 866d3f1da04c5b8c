use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{NaiveDateTime, SecondsFormat, SubsecRound, Utc};

/// Stored as `TIMESTAMP` (no zone) in both databases; always UTC.
pub type Timestamp = NaiveDateTime;

/// How far the database's clock is ahead of this host's, in microseconds (negative:
/// behind); 0 until measured, and on SQLite (one host, one clock).
static DATABASE_AHEAD_MICROS: AtomicI64 = AtomicI64::new(0);

/// Now by the database's clock, cut to the microseconds both databases keep, so what is
/// stored reads back equal.
///
/// Instances of the service compare times that other instances wrote: a lease's expiry, a
/// charge's `available_on`, an authorization's age, a session's expiry, a delivery's next
/// attempt, a secret's end. Read off each host's own clock, two hosts a second apart
/// disagreed on all of them by that second (a payout of money still pending elsewhere, an
/// authorization canceled early, a retry sent early). So every instance keeps the one clock
/// they share, the database's: this host's clock plus the difference last measured
/// ([`follow_database_clock`]).
pub fn now() -> Timestamp {
    let ahead = chrono::Duration::microseconds(DATABASE_AHEAD_MICROS.load(Ordering::Relaxed));
    (Utc::now().naive_utc() + ahead).trunc_subsecs(6)
}

/// Takes `ahead` (the database's clock less this host's) as the difference [`now`] adds.
/// A change under a millisecond is measuring noise and is not taken (each change moves
/// `now` by its size, back or forth). Returns whether it was taken.
pub fn follow_database_clock(ahead: chrono::Duration) -> bool {
    let micros = ahead.num_microseconds().unwrap_or(0);
    let current = DATABASE_AHEAD_MICROS.load(Ordering::Relaxed);
    if (micros - current).abs() < 1_000 {
        return false;
    }
    DATABASE_AHEAD_MICROS.store(micros, Ordering::Relaxed);
    true
}

/// RFC 3339 in UTC with microseconds and a `Z`, as the API answers
/// (`2026-11-30T10:26:56.123456Z`).
pub fn format_timestamp(t: Timestamp) -> String {
    let mut text = String::with_capacity(TIMESTAMP_LEN);
    // Writing to a String cannot fail.
    let _ = write_timestamp(t, &mut text);
    text
}

/// [`format_timestamp`] into `w`, without an allocation (a log line's time).
pub fn write_timestamp(t: Timestamp, w: &mut impl std::fmt::Write) -> std::fmt::Result {
    let mut text = [0u8; TIMESTAMP_LEN];
    match rfc3339_micros(t, &mut text) {
        Some(text) => w.write_str(text),
        None => w.write_str(&t.and_utc().to_rfc3339_opts(SecondsFormat::Micros, true)),
    }
}

/// The length of [`format_timestamp`]'s text in the years 0 to 9999.
const TIMESTAMP_LEN: usize = 27;

/// `t` in the fixed layout of [`format_timestamp`], digit by digit: every answer holds a
/// few and every log line one, and chrono's general formatter (an allocation, a format
/// item per field) cost ten times as much. `None` where the layout does not fit (a year
/// outside 0 to 9999, a leap second), which chrono then writes.
fn rfc3339_micros(t: Timestamp, out: &mut [u8; TIMESTAMP_LEN]) -> Option<&str> {
    use chrono::{Datelike, Timelike};
    let year = u32::try_from(t.year()).ok().filter(|year| *year <= 9999)?;
    let nanos = Some(t.nanosecond()).filter(|n| *n < 1_000_000_000)?;
    *out = *b"0000-00-00T00:00:00.000000Z";
    let fields = [
        (year, 0..4),
        (t.month(), 5..7),
        (t.day(), 8..10),
        (t.hour(), 11..13),
        (t.minute(), 14..16),
        (t.second(), 17..19),
        (nanos / 1_000, 20..26),
    ];
    for (mut value, digits) in fields {
        for digit in out[digits].iter_mut().rev() {
            // `value % 10` is a digit: the cast cannot truncate.
            *digit = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
    std::str::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn chrono_text(t: Timestamp) -> String {
        t.and_utc().to_rfc3339_opts(SecondsFormat::Micros, true)
    }

    #[test]
    fn edges_read_as_chrono_writes_them() {
        let at = |text: &str| {
            chrono::DateTime::parse_from_rfc3339(text)
                .expect("a time")
                .naive_utc()
        };
        for text in [
            "2026-11-30T10:26:56.123456Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "1970-01-01T00:00:00.000001Z",
            "2024-02-29T12:00:00.5Z",
        ] {
            let t = at(text);
            assert_eq!(format_timestamp(t), chrono_text(t), "{text}");
        }
        // Outside the fixed layout: chrono's own text.
        let day = |y, m, d| chrono::NaiveDate::from_ymd_opt(y, m, d).expect("a day");
        for t in [
            day(10_000, 1, 1).and_hms_opt(0, 0, 0),
            day(-1, 1, 1).and_hms_opt(0, 0, 0),
            day(2016, 12, 31).and_hms_nano_opt(23, 59, 59, 1_500_000_000),
        ] {
            let t = t.expect("a time");
            assert_eq!(format_timestamp(t), chrono_text(t), "{t:?}");
        }
        assert_eq!(
            format_timestamp(at("2026-11-30T10:26:56.123456Z")),
            "2026-11-30T10:26:56.123456Z"
        );
    }

    proptest! {
        #[test]
        fn any_time_reads_as_chrono_writes_it(
            seconds in -62_167_219_200i64..253_402_300_800,
            nanos in 0u32..1_000_000_000,
        ) {
            let t = chrono::DateTime::from_timestamp(seconds, nanos)
                .expect("in range")
                .naive_utc();
            prop_assert_eq!(format_timestamp(t), chrono_text(t));
        }
    }
}
