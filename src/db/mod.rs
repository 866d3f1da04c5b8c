//! One database layer for PostgreSQL and SQLite: a diesel `MultiConnection` behind an r2d2
//! pool, the backend chosen from the `DATABASE_URL` scheme.

pub mod captures;
pub mod deliveries;
pub mod events;
pub mod group_commit;
pub mod idempotency_keys;
mod insert;
mod lease;
pub mod ledger;
pub mod merchants;
pub mod payments;
pub mod payouts;
mod prepared;
pub mod refunds;
pub mod schema;
pub mod webhook_endpoints;
pub mod webhook_events;

pub(crate) use insert::insert_rows;
pub use lease::{Leased, Recoverable};

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use diesel::connection::CacheSize;
use diesel::connection::SimpleConnection;
use diesel::r2d2::{self, ManageConnection, R2D2Connection};
use diesel::result::{ConnectionError, DatabaseErrorKind, Error as DieselError};
use diesel::{Connection, PgConnection, RunQueryDsl, SqliteConnection};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

#[derive(diesel::MultiConnection)]
pub enum DbConnection {
    Postgres(PgConnection),
    Sqlite(SqliteConnection),
}

pub type Pool = r2d2::Pool<ConnectionManager>;

const PG_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");
const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// Where the data lives, parsed from `DATABASE_URL`. Anything but the known schemes is
/// refused, so a typo never silently becomes a new SQLite file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    Postgres(String),
    Sqlite(PathBuf),
}

impl DatabaseTarget {
    /// The error says what is wrong with the URL (the caller names the setting).
    pub fn parse(url: &str) -> Result<Self, &'static str> {
        let url = url.trim();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres(with_network_timeouts(url)))
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err("sqlite:// needs a file path");
            }
            Ok(Self::Sqlite(PathBuf::from(path)))
        } else {
            Err("expected postgres://…, postgresql://… or sqlite://PATH")
        }
    }
}

/// libpq parameters that keep a silent database (packets dropped, not refused) from holding
/// a request: a bounded connect, unacknowledged data given up after 5 s, and keepalives on
/// idle connections. Any of them set in `DATABASE_URL` wins.
const PG_NETWORK_DEFAULTS: [(&str, &str); 5] = [
    ("connect_timeout", "3"),
    ("tcp_user_timeout", "5000"),
    ("keepalives_idle", "10"),
    ("keepalives_interval", "5"),
    ("keepalives_count", "3"),
];

fn with_network_timeouts(url: &str) -> String {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    let given: Vec<&str> = query
        .split('&')
        .filter_map(|pair| pair.split('=').next())
        .collect();
    let mut out = url.to_owned();
    for (name, value) in PG_NETWORK_DEFAULTS {
        if !given.contains(&name) {
            out.push(if out.contains('?') { '&' } else { '?' });
            out.push_str(name);
            out.push('=');
            out.push_str(value);
        }
    }
    out
}

/// Connects to the backend the URL names, so a connection failure reaches the log with
/// its real cause (the derive's own `establish` only says the URL was not understood).
#[derive(Debug)]
pub struct ConnectionManager {
    target: DatabaseTarget,
    /// `false` behind a pooler in transaction mode (`DATABASE_PREPARED_STATEMENTS=off`).
    prepared_statements: bool,
    /// Bumped when a connection finds its server gone (see [`PooledConnection::lose`]).
    generation: Arc<AtomicU64>,
}

/// A pooled connection stamped with the pool's generation when it was opened.
///
/// When one connection finds its server gone (killed, failed over, restarted), every
/// connection opened before it is presumed to lead to the same dead server: the pool's
/// generation moves past theirs and they are all dropped, at check-out and at return,
/// without a round trip. Otherwise each would fail one more request (or, with a server that
/// vanished without a reset, hold it until `tcp_user_timeout`) before being noticed. This
/// also replaces r2d2's `SELECT 1` on every checkout (one round trip per query saved).
pub struct PooledConnection {
    conn: DbConnection,
    generation: u64,
    pool_generation: Arc<AtomicU64>,
}

impl PooledConnection {
    /// This connection lost its server: it and every older one are of no more use.
    fn lose(&self) {
        self.pool_generation
            .fetch_max(self.generation + 1, Ordering::SeqCst);
    }

    fn is_stale(&self) -> bool {
        self.generation < self.pool_generation.load(Ordering::SeqCst)
    }
}

impl std::ops::Deref for PooledConnection {
    type Target = DbConnection;
    fn deref(&self) -> &DbConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for PooledConnection {
    fn deref_mut(&mut self) -> &mut DbConnection {
        &mut self.conn
    }
}

/// Errors after which the connection is of no more use. diesel marks a connection whose
/// libpq status went bad as `ClosedConnection`: that is what a killed or shut-down server
/// gives ("server closed the connection unexpectedly", or `57P01` "terminating connection
/// due to administrator command"). A read-only refusal on a session opened read-write means
/// the server has become a standby since: the primary is elsewhere now.
fn connection_lost(e: &DieselError) -> bool {
    match e {
        DieselError::DatabaseError(
            DatabaseErrorKind::ClosedConnection
            | DatabaseErrorKind::UnableToSendCommand
            | DatabaseErrorKind::ReadOnlyTransaction,
            _,
        ) => true,
        // A COMMIT that met a dead connection, and the rollback after it too: whether it
        // committed is unknown, like any write whose answer was lost.
        DieselError::RollbackErrorOnCommit { commit_error, .. } => connection_lost(commit_error),
        _ => false,
    }
}

impl ManageConnection for ConnectionManager {
    type Connection = PooledConnection;
    type Error = r2d2::Error;

    fn connect(&self) -> Result<PooledConnection, r2d2::Error> {
        // Read before connecting: a loss noticed meanwhile may concern this server too.
        let generation = self.generation.load(Ordering::SeqCst);
        self.establish().map(|conn| PooledConnection {
            conn,
            generation,
            pool_generation: self.generation.clone(),
        })
    }

    /// Only the generation: no query, so checking out costs no round trip.
    fn is_valid(&self, conn: &mut PooledConnection) -> Result<(), r2d2::Error> {
        if conn.is_stale() {
            return Err(r2d2::Error::ConnectionError(
                ConnectionError::BadConnection(
                    "opened before a connection to the database was lost; dropped".into(),
                ),
            ));
        }
        Ok(())
    }

    fn has_broken(&self, conn: &mut PooledConnection) -> bool {
        conn.is_stale()
            || std::thread::panicking()
            || match &mut conn.conn {
                DbConnection::Postgres(c) => c.is_broken(),
                DbConnection::Sqlite(c) => c.is_broken(),
            }
    }
}

impl ConnectionManager {
    fn establish(&self) -> Result<DbConnection, r2d2::Error> {
        match &self.target {
            DatabaseTarget::Postgres(url) => {
                let mut conn =
                    PgConnection::establish(url).map_err(r2d2::Error::ConnectionError)?;
                if !self.prepared_statements {
                    // Every statement then goes out as libpq's unnamed statement (parse,
                    // bind and execute in one round trip), which a pooler in transaction
                    // mode can hand to any server: named ones live on one server session
                    // and are missing ("prepared statement __diesel_stmt_0 does not exist")
                    // or doubled on the next. This covers `prepared.rs` as well: its
                    // fragments are cached through the same statement cache.
                    conn.set_prepared_statement_cache_size(CacheSize::Disabled);
                }
                Ok(DbConnection::Postgres(conn))
            }
            DatabaseTarget::Sqlite(path) => {
                let path = path.to_str().ok_or_else(|| {
                    r2d2::Error::ConnectionError(ConnectionError::BadConnection(
                        "the SQLite path is not valid UTF-8".into(),
                    ))
                })?;
                let mut conn =
                    SqliteConnection::establish(path).map_err(r2d2::Error::ConnectionError)?;
                // Without both a busy timeout and WAL, concurrent writers fail with
                // "database is locked" instead of queueing. 4 s: a write that waits out
                // another process's lock still answers (503) within the contract's 5 s.
                conn.batch_execute(
                    "PRAGMA busy_timeout = 4000; PRAGMA journal_mode = WAL; \
                     PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
                )
                .map_err(r2d2::Error::QueryError)?;
                Ok(DbConnection::Sqlite(conn))
            }
        }
    }
}

/// r2d2's own errors (a failed connect, a connection dropped as stale) as warnings of ours:
/// during an outage or a failover they are expected, and each request that meets one
/// answers 503 and logs it too.
#[derive(Debug)]
struct PoolErrorLog;

impl r2d2::HandleError<r2d2::Error> for PoolErrorLog {
    fn handle_error(&self, error: r2d2::Error) {
        tracing::warn!(cause = %error, "database connection");
    }
}

/// Lists are read newest first, `limit + 1` rows: the one past the page says whether more
/// follow. Returns the page and `has_more`.
pub fn page<T>(mut rows: Vec<T>, limit: i64) -> (Vec<T>, bool) {
    let limit = usize::try_from(limit).unwrap_or(0);
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    (rows, has_more)
}

/// How long a request may wait for a pooled connection before it answers 503.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(3);

/// A text value the query planner is not shown: `(SELECT $1)` instead of `$1`.
///
/// For the idempotency-key lookups' merchant. PostgreSQL plans a statement's first five runs
/// with its parameters' values, and a merchant its statistics have not seen yet (new since
/// the last ANALYZE, or too small then to be counted) looks like a handful of rows: a scan of
/// that merchant's rows by `(merchant_id, id)`, filtered by key, then costs the same as the
/// unique `(merchant_id, idempotency_key)` index, and it was chosen — 0.6 s per replay once
/// the merchant had 190 000 payments. Behind a subquery the value is unknown when planning,
/// so the estimate is an average merchant's and the unique index wins whatever the
/// statistics say; the index is still used with the value (docs/benchmark.md, sixth sitting).
pub(crate) fn unplanned(
    value: &str,
) -> diesel::expression::SqlLiteral<
    diesel::sql_types::Text,
    diesel::expression::UncheckedBind<
        diesel::expression::SqlLiteral<diesel::sql_types::Text>,
        diesel::dsl::AsExprOf<&str, diesel::sql_types::Text>,
    >,
> {
    diesel::dsl::sql::<diesel::sql_types::Text>("(SELECT ")
        .bind::<diesel::sql_types::Text, _>(value)
        .sql(")")
}

/// The pool. `prepared_statements: false` (`DATABASE_PREPARED_STATEMENTS=off`) keeps diesel
/// from naming statements on PostgreSQL, for a pooler in transaction mode.
pub fn build_pool(
    target: DatabaseTarget,
    max_size: u32,
    prepared_statements: bool,
) -> Result<Pool, String> {
    if let DatabaseTarget::Sqlite(path) = &target
        && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create directory {}: {e}", dir.display()))?;
    }
    r2d2::Pool::builder()
        .max_size(max_size)
        .min_idle(Some(1))
        .connection_timeout(CHECKOUT_TIMEOUT)
        // A check of the generation only (see PooledConnection), no query.
        .test_on_check_out(true)
        .error_handler(Box::new(PoolErrorLog))
        .build(ConnectionManager {
            target,
            prepared_statements,
            generation: Arc::default(),
        })
        .map_err(|e| format!("cannot connect to the database: {e}"))
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::QueryResult;

    #[test]
    fn postgres_urls_get_network_timeouts_unless_given() {
        let DatabaseTarget::Postgres(url) =
            DatabaseTarget::parse("postgres://u@h:5432/db").unwrap()
        else {
            panic!("not postgres")
        };
        assert_eq!(
            url,
            "postgres://u@h:5432/db?connect_timeout=3&tcp_user_timeout=5000\
             &keepalives_idle=10&keepalives_interval=5&keepalives_count=3"
        );
        let DatabaseTarget::Postgres(url) =
            DatabaseTarget::parse("postgresql://h/db?sslmode=require&connect_timeout=10").unwrap()
        else {
            panic!("not postgres")
        };
        assert!(url.starts_with(
            "postgresql://h/db?sslmode=require&connect_timeout=10&tcp_user_timeout=5000"
        ));
        assert_eq!(url.matches("connect_timeout").count(), 1, "{url}");
    }

    /// The PostgreSQL of the tests (`TEST_DATABASE_URL`, else the local one), or `None` and
    /// a note when there is none and none was asked for.
    fn test_postgres() -> Option<String> {
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
    pub(super) struct Schema {
        base_url: String,
        name: String,
    }

    impl Schema {
        fn create(base_url: &str) -> (Self, String) {
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
        pub(super) fn migrated() -> Option<(Self, DbConnection)> {
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
    pub(super) struct PaymentsReads {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        pub seq_scans: i64,
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        pub index_scans: i64,
        /// Rows fetched through an index.
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        pub index_rows: i64,
    }

    impl PaymentsReads {
        pub(super) fn now(conn: &mut DbConnection) -> QueryResult<Self> {
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

    fn backend_pid(conn: &mut DbConnection) -> QueryResult<i32> {
        let DbConnection::Postgres(pg) = conn else {
            panic!("not PostgreSQL")
        };
        diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>(
            "pg_backend_pid()",
        ))
        .get_result(pg)
    }

    fn postgres_pool(url: &str, size: u32, prepared_statements: bool) -> Pool {
        build_pool(
            DatabaseTarget::parse(url).unwrap(),
            size,
            prepared_statements,
        )
        .unwrap()
    }

    fn postgres_db(url: &str, size: u32) -> Db {
        Db::new(
            postgres_pool(url, size, true),
            &DatabaseTarget::parse(url).unwrap(),
        )
    }

    /// What a primary that died does to a pool: every connection it holds leads nowhere.
    /// The first request to find out answers 503; none after it may meet another of them.
    #[actix_web::test]
    async fn one_lost_connection_drops_every_connection_opened_before_it() {
        let Some(url) = test_postgres() else { return };
        let db = postgres_db(&url, 4);
        let pids: Vec<i32> = {
            let mut held: Vec<_> = (0..4).map(|_| db.pool().get().unwrap()).collect();
            held.iter_mut().map(|c| backend_pid(c).unwrap()).collect()
        };
        assert_eq!(db.pool().state().idle_connections, 4);

        let mut admin = PgConnection::establish(&url).unwrap();
        let list = pids
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        admin
            .batch_execute(&format!(
                "SELECT pg_terminate_backend(pid) FROM unnest(ARRAY[{list}]) AS pid"
            ))
            .unwrap();
        let gone = diesel::dsl::sql::<diesel::sql_types::BigInt>(&format!(
            "(SELECT count(*) FROM pg_stat_activity WHERE pid IN ({list}))"
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while diesel::select(gone.clone())
            .get_result::<i64>(&mut admin)
            .unwrap()
            > 0
        {
            assert!(std::time::Instant::now() < deadline, "backends still alive");
            std::thread::sleep(Duration::from_millis(20));
        }

        let first = db.run(|c| c.batch_execute("SELECT 1")).await;
        assert!(
            matches!(first, Err(DbError::Unavailable(_))),
            "the first query meets a dead connection: {first:?}"
        );
        for i in 0..8 {
            let pid = db.run(backend_pid).await;
            let pid = pid.unwrap_or_else(|e| panic!("query {i} after the loss failed: {e}"));
            assert!(!pids.contains(&pid), "query {i} ran on an old connection");
        }
    }

    /// A server that turned standby under an open connection refuses writes as read-only:
    /// the primary is elsewhere, so that is a 503 and a new connection, not a 500.
    #[actix_web::test]
    async fn a_read_only_refusal_is_unavailable_and_drops_the_connection() {
        let Some(base_url) = test_postgres() else {
            return;
        };
        let (_schema, url) = Schema::create(&base_url);
        let db = postgres_db(&url, 1);
        let before = db.run(backend_pid).await.unwrap();
        db.run(|c| c.batch_execute("SET default_transaction_read_only = on"))
            .await
            .unwrap();
        let refused = db
            .run(|c| c.batch_execute("CREATE TABLE read_only_probe (i int)"))
            .await;
        assert!(
            matches!(refused, Err(DbError::Unavailable(_))),
            "{refused:?}"
        );
        let after = db.run(backend_pid).await.unwrap();
        assert_ne!(before, after, "the read-only connection was used again");
    }

    #[test]
    fn unknown_schemes_are_refused() {
        for url in ["mysql://x", "data/payments.db", "sqlite://", ""] {
            assert!(DatabaseTarget::parse(url).is_err(), "{url}");
        }
        assert_eq!(
            DatabaseTarget::parse("sqlite://data/p.db").unwrap(),
            DatabaseTarget::Sqlite(PathBuf::from("data/p.db"))
        );
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("unique violation: {0}")]
    UniqueViolation(String),
    #[error("query failed: {0}")]
    Query(DieselError),
    #[error("database task failed")]
    TaskFailed,
}

impl From<DieselError> for DbError {
    fn from(e: DieselError) -> Self {
        match e {
            DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) => {
                Self::UniqueViolation(info.message().to_owned())
            }
            lost if connection_lost(&lost) || sqlite_unwritable(&lost) => {
                Self::Unavailable(lost.to_string())
            }
            other => Self::Query(other),
        }
    }
}

/// SQLite's equivalent of a server that cannot be reached: the file is locked by another
/// process past the busy timeout, the disk is full, or the file cannot be read or written.
/// The connection itself stays usable once that passes. diesel gives SQLite's errors only
/// by their text, which is SQLite's own fixed wording for each code.
fn sqlite_unwritable(e: &DieselError) -> bool {
    const UNAVAILABLE: [&str; 5] = [
        "database is locked",                   // SQLITE_BUSY
        "database or disk is full",             // SQLITE_FULL
        "disk I/O error",                       // SQLITE_IOERR
        "attempt to write a readonly database", // SQLITE_READONLY
        "unable to open database file",         // SQLITE_CANTOPEN
    ];
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::Unknown, info) => {
            UNAVAILABLE.contains(&info.message())
        }
        DieselError::RollbackErrorOnCommit { commit_error, .. } => sqlite_unwritable(commit_error),
        _ => false,
    }
}

impl From<DbError> for crate::error::ApiError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::Unavailable(cause) => {
                tracing::warn!(%cause, "database unavailable");
                Self::ServiceUnavailable
            }
            other => Self::internal(other),
        }
    }
}

/// The pool, and the one way to use it from async code: on the blocking thread pool, so a
/// slow query never stalls an HTTP worker.
#[derive(Clone)]
pub struct Db {
    pool: Pool,
    /// How long a caller waits for [`Db::run`]: none on SQLite (a local file, whose waits
    /// are bounded by its busy timeout), [`SERVER_DEADLINE`] on PostgreSQL.
    deadline: Option<Duration>,
    postgres: bool,
}

/// How long a caller waits for a PostgreSQL server (a pooled connection, then its
/// statements) before answering 503 (docs/api.md: within 5 s, never a hang). The network
/// settings of [`PG_NETWORK_DEFAULTS`] end a connection whose packets go unanswered, but not
/// one to a server (or a pooler) that accepts them and never answers; that connection's
/// thread waits on, the request does not. What it was writing may still commit: the caller
/// has answered 503, as for a connection lost after COMMIT, and a retry finds the row.
pub const SERVER_DEADLINE: Duration = Duration::from_secs(4);

impl Db {
    /// The database of `target`: PostgreSQL calls give up after [`SERVER_DEADLINE`].
    pub fn new(pool: Pool, target: &DatabaseTarget) -> Self {
        let postgres = matches!(target, DatabaseTarget::Postgres(_));
        let deadline = postgres.then_some(SERVER_DEADLINE);
        Self {
            pool,
            deadline,
            postgres,
        }
    }

    /// PostgreSQL (a server, shared by instances), or SQLite (a local file).
    pub fn is_postgres(&self) -> bool {
        self.postgres
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub async fn run<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut DbConnection) -> Result<T, DieselError> + Send + 'static,
        T: Send + 'static,
    {
        let pool = self.pool.clone();
        let task = actix_web::rt::task::spawn_blocking(move || {
            let mut conn = pool
                .get()
                .map_err(|e| DbError::Unavailable(e.to_string()))?;
            let result = f(&mut conn);
            if let Err(e) = &result
                && connection_lost(e)
            {
                conn.lose();
            }
            result.map_err(DbError::from)
        });
        // Given up, the task runs on on its thread, with its connection.
        self.within_deadline(task).await
    }

    /// Waits for `answer` from the database for at most the deadline, if there is one: past
    /// it, the database counts as unavailable (503). What was sent may still apply, as after
    /// a connection lost after COMMIT.
    pub async fn within_deadline<T, E>(
        &self,
        answer: impl Future<Output = Result<Result<T, DbError>, E>>,
    ) -> Result<T, DbError> {
        let answered = match self.deadline {
            None => answer.await,
            Some(deadline) => actix_web::rt::time::timeout(deadline, answer)
                .await
                .map_err(|_| {
                    DbError::Unavailable(format!("no answer within {} ms", deadline.as_millis()))
                })?,
        };
        answered.map_err(|_| DbError::TaskFailed)?
    }
}
