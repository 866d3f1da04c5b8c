//! The database's clock, which every instance of the service keeps as its own
//! ([`crate::domain::now`]): measured at the start and again every [`EVERY`].

use std::time::Duration;

use diesel::prelude::*;

use super::pool::DbConnection;
use crate::domain::Timestamp;

/// How often the difference is measured again (clocks drift, a failover brings another
/// server's clock).
pub const EVERY: Duration = Duration::from_secs(30);

/// A round trip longer than this tells the difference too loosely (it is measured to half
/// the round trip): such a reading is not taken.
const LONGEST_ROUND_TRIP: chrono::Duration = chrono::Duration::milliseconds(20);

#[derive(QueryableByName)]
struct Clock {
    #[diesel(sql_type = diesel::sql_types::Timestamp)]
    now: Timestamp,
}

/// How far the database's clock is ahead of this host's (negative: behind): the database's
/// `clock_timestamp()` against the middle of this host's readings before and after the
/// query. `None` on SQLite (its clock is this host's) and when the round trip took too long
/// to tell.
pub fn database_ahead(conn: &mut DbConnection) -> QueryResult<Option<chrono::Duration>> {
    measure(conn, || chrono::Utc::now().naive_utc())
}

/// [`database_ahead`] with this host's clock given (tests give a wrong one).
fn measure(
    conn: &mut DbConnection,
    local: impl Fn() -> Timestamp,
) -> QueryResult<Option<chrono::Duration>> {
    let DbConnection::Postgres(pg) = conn else {
        return Ok(None);
    };
    let before = local();
    let database =
        diesel::sql_query("SELECT CAST(clock_timestamp() AT TIME ZONE 'UTC' AS TIMESTAMP) AS now")
            .get_result::<Clock>(pg)?
            .now;
    let after = local();
    let round_trip = after - before;
    if round_trip > LONGEST_ROUND_TRIP {
        return Ok(None);
    }
    Ok(Some(database - (before + round_trip / 2)))
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
        let read = |conn: &mut DbConnection, seconds| {
            // A reading on a busy machine may take too long to count: try a few times.
            (0..20)
                .find_map(|_| measure(conn, behind(seconds)).unwrap())
                .expect("a reading within the round trip")
        };
        let five = read(&mut conn, 5);
        assert!(
            (five - chrono::Duration::seconds(5)).abs() < chrono::Duration::milliseconds(50),
            "{five}"
        );
        let none = read(&mut conn, 0);
        assert!(none.abs() < chrono::Duration::milliseconds(50), "{none}");
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
