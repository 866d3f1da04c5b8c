use chrono::{NaiveDateTime, SecondsFormat, SubsecRound, Utc};

/// Stored as `TIMESTAMP` (no zone) in both databases; always UTC.
pub type Timestamp = NaiveDateTime;

/// Now, cut to the microseconds both databases keep, so what is stored reads back equal.
pub fn now() -> Timestamp {
    Utc::now().naive_utc().trunc_subsecs(6)
}

/// RFC 3339 in UTC with a `Z`, as the API answers.
pub fn format_timestamp(t: Timestamp) -> String {
    t.and_utc().to_rfc3339_opts(SecondsFormat::Micros, true)
}
