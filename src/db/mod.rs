//! One database layer for PostgreSQL and SQLite: a diesel `MultiConnection` behind an r2d2
//! pool, the backend chosen from the `DATABASE_URL` scheme.

mod lease;
pub mod merchants;
pub mod payments;
mod prepared;
pub mod refunds;
pub mod schema;
pub mod webhook_events;

use std::path::PathBuf;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::r2d2::{self, ManageConnection, R2D2Connection};
use diesel::result::{ConnectionError, DatabaseErrorKind, Error as DieselError};
use diesel::{Connection, PgConnection, SqliteConnection};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use crate::config::ConfigError;

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
    pub fn parse(url: &str) -> Result<Self, ConfigError> {
        let url = url.trim();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres(with_network_timeouts(url)))
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(ConfigError::new(
                    "DATABASE_URL",
                    "sqlite:// needs a file path",
                ));
            }
            Ok(Self::Sqlite(PathBuf::from(path)))
        } else {
            Err(ConfigError::new(
                "DATABASE_URL",
                "expected postgres://…, postgresql://… or sqlite://PATH",
            ))
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
}

/// A pooled connection that remembers whether it lost its server, so the pool drops it
/// instead of handing it out again. That replaces r2d2's `SELECT 1` on every checkout
/// (one round trip per query saved) while a database restart is still recovered from.
pub struct PooledConnection {
    conn: DbConnection,
    lost: bool,
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

/// Errors after which the connection is of no more use (diesel marks a connection whose
/// libpq status went bad as `ClosedConnection`).
fn connection_lost(e: &DieselError) -> bool {
    matches!(
        e,
        DieselError::DatabaseError(
            DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
            _
        )
    )
}

impl ManageConnection for ConnectionManager {
    type Connection = PooledConnection;
    type Error = r2d2::Error;

    fn connect(&self) -> Result<PooledConnection, r2d2::Error> {
        self.establish()
            .map(|conn| PooledConnection { conn, lost: false })
    }

    fn is_valid(&self, conn: &mut PooledConnection) -> Result<(), r2d2::Error> {
        conn.batch_execute("SELECT 1")
            .map_err(r2d2::Error::QueryError)
    }

    fn has_broken(&self, conn: &mut PooledConnection) -> bool {
        conn.lost
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
            DatabaseTarget::Postgres(url) => PgConnection::establish(url)
                .map(DbConnection::Postgres)
                .map_err(r2d2::Error::ConnectionError),
            DatabaseTarget::Sqlite(path) => {
                let path = path.to_str().ok_or_else(|| {
                    r2d2::Error::ConnectionError(ConnectionError::BadConnection(
                        "the SQLite path is not valid UTF-8".into(),
                    ))
                })?;
                let mut conn =
                    SqliteConnection::establish(path).map_err(r2d2::Error::ConnectionError)?;
                // Without both a busy timeout and WAL, concurrent writers fail with
                // "database is locked" instead of queueing.
                conn.batch_execute(
                    "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; \
                     PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;",
                )
                .map_err(r2d2::Error::QueryError)?;
                Ok(DbConnection::Sqlite(conn))
            }
        }
    }
}

/// How long a request may wait for a pooled connection before it answers 503.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(3);

pub fn build_pool(target: DatabaseTarget, max_size: u32) -> Result<Pool, String> {
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
        // Lost connections are dropped through `has_broken` instead (see PooledConnection).
        .test_on_check_out(false)
        .build(ConnectionManager { target })
        .map_err(|e| format!("cannot connect to the database: {e}"))
}

/// Applies the embedded migrations of the connection's backend. On PostgreSQL an advisory
/// lock makes instances that start together take turns.
pub fn run_migrations(conn: &mut DbConnection) -> Result<(), String> {
    let describe = |e: Box<dyn std::error::Error + Send + Sync>| format!("migration failed: {e}");
    match conn {
        DbConnection::Postgres(c) => {
            const LOCK: &str = "SELECT pg_advisory_lock(72707369)";
            c.batch_execute(LOCK).map_err(|e| e.to_string())?;
            let result = c
                .run_pending_migrations(PG_MIGRATIONS)
                .map(|_| ())
                .map_err(describe);
            c.batch_execute("SELECT pg_advisory_unlock(72707369)")
                .map_err(|e| e.to_string())?;
            result
        }
        DbConnection::Sqlite(c) => c
            .run_pending_migrations(SQLITE_MIGRATIONS)
            .map(|_| ())
            .map_err(describe),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn unknown_schemes_are_refused_naming_the_setting() {
        for url in ["mysql://x", "data/payments.db", "sqlite://", ""] {
            let err = DatabaseTarget::parse(url).unwrap_err();
            assert_eq!(err.variable, "DATABASE_URL", "{url}");
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
            DieselError::DatabaseError(
                DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand,
                info,
            ) => Self::Unavailable(info.message().to_owned()),
            other => Self::Query(other),
        }
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
}

impl Db {
    pub fn new(pool: Pool) -> Self {
        Self { pool }
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
        actix_web::rt::task::spawn_blocking(move || {
            let mut conn = pool
                .get()
                .map_err(|e| DbError::Unavailable(e.to_string()))?;
            let result = f(&mut conn);
            if let Err(e) = &result
                && connection_lost(e)
            {
                conn.lost = true;
            }
            result.map_err(DbError::from)
        })
        .await
        .map_err(|_| DbError::TaskFailed)?
    }
}
