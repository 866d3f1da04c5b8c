//! The schema: the embedded migrations of each backend and how they are applied.

use diesel::connection::SimpleConnection;
use diesel::result::Error as DieselError;
use diesel::{Connection, RunQueryDsl};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use super::pool::DbConnection;

const PG_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");
const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// Applies the embedded migrations of the connection's backend. On PostgreSQL they run in
/// one transaction holding an advisory lock, so instances that start together take turns;
/// a transaction-scoped lock (not a session one) also holds behind a pooler in transaction
/// mode, where the session's next statement may reach another server connection.
pub fn run_migrations(conn: &mut DbConnection) -> Result<(), String> {
    let describe = |e: Box<dyn std::error::Error + Send + Sync>| format!("migration failed: {e}");
    match conn {
        DbConnection::Postgres(c) => c
            .transaction::<_, MigrationError, _>(|c| {
                c.batch_execute("SELECT pg_advisory_xact_lock(72707369)")?;
                c.run_pending_migrations(PG_MIGRATIONS).map_err(describe)?;
                Ok(())
            })
            .map_err(|e| e.0),
        DbConnection::Sqlite(c) => {
            // A migration that rebuilds a table (SQLite cannot alter a CHECK) drops the old
            // one while other tables still reference it: foreign keys are off meanwhile, and
            // checked as a whole afterwards. The pragma is a no-op inside a transaction, so it
            // is set around the migrations, not in them.
            c.batch_execute("PRAGMA foreign_keys = OFF")
                .map_err(|e| e.to_string())?;
            let result = c
                .run_pending_migrations(SQLITE_MIGRATIONS)
                .map(|_| ())
                .map_err(describe);
            let violations: i64 =
                diesel::sql_query("SELECT count(*) AS n FROM pragma_foreign_key_check")
                    .get_result::<ForeignKeyViolations>(c)
                    .map(|row| row.n)
                    .map_err(|e| e.to_string())?;
            c.batch_execute("PRAGMA foreign_keys = ON")
                .map_err(|e| e.to_string())?;
            result?;
            if violations > 0 {
                return Err(format!(
                    "migration left {violations} foreign key violations"
                ));
            }
            Ok(())
        }
    }
}

/// Whether every embedded migration of the connection's backend has been applied, read
/// without writing anything (diesel's own check would make its table of migrations first).
pub fn check_current(conn: &mut DbConnection) -> Result<(), String> {
    use diesel::migration::MigrationSource;
    let expected: Result<Vec<String>, _> = match conn {
        DbConnection::Postgres(_) => MigrationSource::<diesel::pg::Pg>::migrations(&PG_MIGRATIONS)
            .map(|all| all.iter().map(|m| m.name().version().to_string()).collect()),
        DbConnection::Sqlite(_) => {
            MigrationSource::<diesel::sqlite::Sqlite>::migrations(&SQLITE_MIGRATIONS)
                .map(|all| all.iter().map(|m| m.name().version().to_string()).collect())
        }
    };
    let expected = expected.map_err(|e| format!("cannot read the migrations: {e}"))?;
    let not_migrated = "the database holds no payments-api schema, or an older one: run \
                        `payments-api migrate` (or start the service) first";
    let applied: Vec<String> = diesel::sql_query("SELECT version FROM __diesel_schema_migrations")
        .load::<AppliedMigration>(conn)
        .map_err(|_| not_migrated.to_owned())?
        .into_iter()
        .map(|row| row.version)
        .collect();
    if expected.iter().all(|version| applied.contains(version)) {
        Ok(())
    } else {
        Err(not_migrated.to_owned())
    }
}

#[derive(diesel::QueryableByName)]
struct AppliedMigration {
    #[diesel(sql_type = diesel::sql_types::Text)]
    version: String,
}

#[derive(diesel::QueryableByName)]
struct ForeignKeyViolations {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    n: i64,
}

/// Why the migrations failed; diesel's `transaction` also makes one from its own errors
/// (a failed BEGIN or COMMIT).
struct MigrationError(String);

impl From<String> for MigrationError {
    fn from(e: String) -> Self {
        Self(e)
    }
}

impl From<DieselError> for MigrationError {
    fn from(e: DieselError) -> Self {
        Self(format!("migration failed: {e}"))
    }
}

/// Fixtures of the database tests: a migrated PostgreSQL schema of a test's own.
#[cfg(test)]
pub(crate) mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, PgConnection, QueryResult, RunQueryDsl};

    use super::run_migrations;
    use crate::db::pool::DbConnection;

    /// The PostgreSQL of the tests (`TEST_DATABASE_URL`, else the local one), or `None` and
    /// a note when there is none and none was asked for.
    pub(crate) fn test_postgres() -> Option<String> {
        let asked = std::env::var("TEST_DATABASE_URL")
            .ok()
            .filter(|u| !u.is_empty());
        let url = asked
            .clone()
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        match PgConnection::establish(&url) {
            Ok(_) => Some(url),
            Err(e) if asked.is_some() || std::env::var_os("CI").is_some() => {
                panic!("no PostgreSQL at {url}: {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED: no PostgreSQL at {url} ({e})");
                None
            }
        }
    }

    /// A schema of the test's own, dropped at the end.
    pub(crate) struct Schema {
        base_url: String,
        name: String,
    }

    impl Schema {
        pub(crate) fn create(base_url: &str) -> (Self, String) {
            let name = format!("test_db_{}", uuid::Uuid::new_v4().simple());
            let mut admin = PgConnection::establish(base_url).unwrap();
            admin
                .batch_execute(&format!("CREATE SCHEMA {name}"))
                .unwrap();
            let separator = if base_url.contains('?') { '&' } else { '?' };
            let url = format!("{base_url}{separator}options=-csearch_path%3D{name}");
            let schema = Self {
                base_url: base_url.to_owned(),
                name,
            };
            (schema, url)
        }

        /// A migrated schema of the test's own on the tests' PostgreSQL and a connection to
        /// it, or `None` as [`test_postgres`].
        pub(crate) fn migrated() -> Option<(Self, DbConnection)> {
            let (schema, url) = Self::create(&test_postgres()?);
            let mut conn = DbConnection::Postgres(PgConnection::establish(&url).unwrap());
            run_migrations(&mut conn).unwrap();
            Some((schema, conn))
        }
    }

    /// How a transaction has read the `payments` table so far: PostgreSQL reports a
    /// backend's counts only after its transaction, and shows them before in the `_xact_`
    /// view, so a test reads them before and after a statement inside one transaction.
    #[derive(diesel::QueryableByName)]
    pub(crate) struct PaymentsReads {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        pub seq_scans: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        pub index_scans: i64,
        /// Rows fetched through an index.
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        pub index_rows: i64,
    }

    impl PaymentsReads {
        pub(crate) fn now(conn: &mut DbConnection) -> QueryResult<Self> {
            diesel::sql_query(
                "SELECT seq_scan AS seq_scans, coalesce(idx_scan, 0) AS index_scans, \
                 coalesce(idx_tup_fetch, 0) AS index_rows \
                 FROM pg_stat_xact_user_tables WHERE relid = 'payments'::regclass",
            )
            .get_result(conn)
        }
    }

    impl Drop for Schema {
        fn drop(&mut self) {
            if let Ok(mut admin) = PgConnection::establish(&self.base_url) {
                let drop = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name);
                let _ = admin.batch_execute(&drop);
            }
        }
    }
}
