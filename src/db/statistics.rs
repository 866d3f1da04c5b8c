//! Planner statistics kept fresh where the server keeps none.
//!
//! PostgreSQL plans some statements once per connection and keeps the plan until the
//! statistics of a table it reads change: the checks of foreign keys above all (a refund's
//! payment, a delivery's event). A connection that first checked while the parent table was
//! nearly empty keeps a sequential scan of it, and if nothing ever analyzes the table again
//! every later check reads the whole, growing table. `autovacuum` analyzes tables as they
//! change; where it is off (as on the machines these tests run on), the service does it
//! itself: every ten seconds, one instance at a time, the tables changed by more than
//! autovacuum's own threshold (50 rows and 10 % of the table) since their last analysis.
//! `ANALYZE` changes the statistics, and every kept plan that reads the table is made again.
//! SQLite plans each statement when it is prepared from the schema alone: nothing to do.

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::Text;

use super::pool::DbConnection;

/// How often the tables' changes are looked at.
pub const EVERY: Duration = Duration::from_secs(10);

/// The advisory lock that makes one instance at a time analyze a schema: this class (any
/// constant: ours) and the schema's name.
const LOCK: i32 = 0x7061_7973;

#[derive(QueryableByName)]
struct Named {
    #[diesel(sql_type = Text)]
    name: String,
}

/// Whether the server's `autovacuum` is off (then [`analyze_stale`] is this service's to
/// run). Always false on SQLite.
pub fn autovacuum_off(conn: &mut DbConnection) -> QueryResult<bool> {
    if !matches!(conn, DbConnection::Postgres(_)) {
        return Ok(false);
    }
    let setting = diesel::sql_query("SELECT current_setting('autovacuum') AS name")
        .get_result::<Named>(conn)?;
    Ok(setting.name == "off")
}

/// The tables of this schema changed by more than autovacuum's analyze threshold since they
/// were last analyzed, by name. Empty on SQLite.
pub fn stale_tables(conn: &mut DbConnection) -> QueryResult<Vec<String>> {
    if !matches!(conn, DbConnection::Postgres(_)) {
        return Ok(Vec::new());
    }
    let stale = diesel::sql_query(
        "SELECT s.relname::text AS name FROM pg_stat_user_tables s \
         JOIN pg_class c ON c.oid = s.relid \
         WHERE s.schemaname = current_schema() \
           AND s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0) \
         ORDER BY s.relname",
    )
    .load::<Named>(conn)?;
    Ok(stale.into_iter().map(|t| t.name).collect())
}

/// Analyzes the stale tables, unless another instance is doing so; returns the tables
/// analyzed. One transaction: the advisory lock ends with it (also behind a pooler), and
/// `ANALYZE` takes no lock that stops reads or writes.
pub fn analyze_stale(conn: &mut DbConnection) -> QueryResult<Vec<String>> {
    if !matches!(conn, DbConnection::Postgres(_)) {
        return Ok(Vec::new());
    }
    conn.transaction(|conn| {
        let ours = diesel::sql_query(format!(
            "SELECT CAST(pg_try_advisory_xact_lock({LOCK}, hashtext(current_schema())) AS TEXT) \
             AS name"
        ))
        .get_result::<Named>(conn)?;
        if ours.name != "true" {
            return Ok(Vec::new());
        }
        let stale = stale_tables(conn)?;
        for table in &stale {
            conn.batch_execute(&format!("ANALYZE \"{}\"", table.replace('"', "\"\"")))?;
        }
        Ok(stale)
    })
}

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;
    use diesel::sql_types::BigInt;

    use super::{analyze_stale, stale_tables};
    use crate::db::DbConnection;
    use crate::db::migrate::tests::Schema;

    #[derive(QueryableByName)]
    struct Scans {
        #[diesel(sql_type = BigInt)]
        seq: i64,
    }

    /// Whether running the kept statement scanned `merchants` sequentially (counted inside one
    /// transaction: PostgreSQL reports a backend's counts there before its commit).
    fn kept_plan_scans(conn: &mut DbConnection) -> bool {
        conn.transaction(|conn| {
            let count = |conn: &mut DbConnection| {
                diesel::sql_query(
                    "SELECT seq_scan AS seq FROM pg_stat_xact_user_tables \
                     WHERE relid = 'merchants'::regclass",
                )
                .get_result::<Scans>(conn)
                .map(|s| s.seq)
            };
            let before = count(conn)?;
            conn.batch_execute("EXECUTE kept('mer_x')")?;
            Ok::<_, diesel::result::Error>(count(conn)? > before)
        })
        .unwrap()
    }

    /// The pathology and its cure: a connection keeps the plan it made while a table was
    /// empty (a sequential scan, as a foreign key's check keeps it) however large the table
    /// grows, until the table is analyzed; the tables changed enough are found and analyzed,
    /// and the kept plan is made again (an index scan).
    #[test]
    fn a_plan_kept_from_an_empty_table_is_made_again_once_its_table_is_analyzed() {
        let Some((_schema, mut conn)) = Schema::migrated() else {
            return;
        };
        conn.batch_execute(
            "ANALYZE merchants; SET plan_cache_mode = force_generic_plan; \
             PREPARE kept(text) AS SELECT 1 FROM merchants WHERE id = $1",
        )
        .unwrap();
        assert!(kept_plan_scans(&mut conn), "an empty table is scanned");
        conn.batch_execute(
            "INSERT INTO merchants (id, name, created_at) \
             SELECT 'mer_' || n, 'm' || n, now() FROM generate_series(1, 20000) n",
        )
        .unwrap();
        // Here, where autovacuum is off, the kept plan still scans all 20 000 rows. Not asserted:
        // when many sessions change the catalog at once (the suite migrating its schemas in
        // parallel), PostgreSQL may reset every backend's caches, and with them this plan.
        // What is asserted is the cure: the table is found stale, analyzed, and then the plan
        // reads the index.
        // The server's statistics arrive a moment after the commit that made the changes.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !stale_tables(&mut conn)
            .unwrap()
            .contains(&"merchants".to_owned())
        {
            assert!(
                std::time::Instant::now() < deadline,
                "merchants never stale"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert!(
            analyze_stale(&mut conn)
                .unwrap()
                .contains(&"merchants".to_owned())
        );
        assert!(
            !kept_plan_scans(&mut conn),
            "analyzed: the plan was made again"
        );
        assert!(
            !stale_tables(&mut conn)
                .unwrap()
                .contains(&"merchants".to_owned())
        );
    }
}
