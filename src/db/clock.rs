//! The database's clock, which every instance of the service keeps as its own
//! ([`crate::domain::now`]): measured at the start and again every [`EVERY`].

use std::time::Duration;

use diesel::prelude::*;

use super::pool::DbConnection;
use crate::domain::Timestamp;

/// How often the difference is measured again (clocks drift, a failover brings another
/// server's clock).
pub const EVERY: Duration = Duration::from_secs(30);

/// Readings per measure: the one with the shortest round trip is taken (the difference is
/// known to within half the round trip, and a reading delayed by a busy host or network is
/// the one to leave out).
const READINGS: usize = 5;

#[derive(QueryableByName)]
struct Clock {
    #[diesel(sql_type = diesel::sql_types::Timestamp)]
    now: Timestamp,
}

/// A measure of the database's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// How far the database's clock is ahead of this host's (negative: behind).
    pub ahead: chrono::Duration,
    /// The round trip of the reading taken: `ahead` is known to within half of it.
    pub round_trip: chrono::Duration,
}

/// How far the database's clock is ahead of this host's: the database's
/// `clock_timestamp()` against the middle of this host's readings before and after the
/// query; of `READINGS` readings, the one with the shortest round trip, however long (a
/// database far away is known less closely, never not at all). `None` on SQLite (its clock
/// is this host's).
pub fn database_ahead(conn: &mut DbConnection) -> QueryResult<Option<Reading>> {
    measure(conn, || chrono::Utc::now().naive_utc())
}

/// [`database_ahead`] with this host's clock given (tests give a wrong one).
fn measure(conn: &mut DbConnection, local: impl Fn() -> Timestamp) -> QueryResult<Option<Reading>> {
    let DbConnection::Postgres(pg) = conn else {
        return Ok(None);
    };
    let mut best: Option<Reading> = None;
    for _ in 0..READINGS {
        let before = local();
        let database = diesel::sql_query(
            "SELECT CAST(clock_timestamp() AT TIME ZONE 'UTC' AS TIMESTAMP) AS now",
        )
        .get_result::<Clock>(pg)?
        .now;
        let after = local();
        let round_trip = after - before;
        let reading = Reading {
            ahead: database - (before + round_trip / 2),
            round_trip,
        };
        if best.is_none_or(|b| reading.round_trip < b.round_trip) {
            best = Some(reading);
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use diesel::{Connection, SqliteConnection};

    use super::*;
    use crate::db::migrate::tests::test_postgres;

    /// A host whose clock runs 5 s behind the database's reads a difference of 5 s, to
    /// within the round trip; one whose clock agrees reads about nothing.
    #[test]
    fn the_difference_to_the_databases_clock_is_read_to_within_the_round_trip() {
        let Some(url) = test_postgres() else {
            return;
        };
        let mut conn = DbConnection::Postgres(diesel::PgConnection::establish(&url).unwrap());
        let behind = |seconds: i64| {
            move || chrono::Utc::now().naive_utc() - chrono::Duration::seconds(seconds)
        };
        for seconds in [5, 0] {
            let reading = measure(&mut conn, behind(seconds))
                .unwrap()
                .expect("a reading");
            let error = (reading.ahead - chrono::Duration::seconds(seconds)).abs();
            assert!(
                error <= reading.round_trip / 2 + chrono::Duration::milliseconds(1),
                "{seconds} s behind: {reading:?}"
            );
        }
    }

    #[test]
    fn sqlite_has_no_other_clock() {
        let sqlite = SqliteConnection::establish(":memory:").unwrap();
        assert_eq!(
            database_ahead(&mut DbConnection::Sqlite(sqlite)).unwrap(),
            None
        );
    }
}
