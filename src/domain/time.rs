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

/// RFC 3339 in UTC with a `Z`, as the API answers.
pub fn format_timestamp(t: Timestamp) -> String {
    t.and_utc().to_rfc3339_opts(SecondsFormat::Micros, true)
}
