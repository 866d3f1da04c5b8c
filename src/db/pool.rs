//! The connection pool: where the data lives (`DATABASE_URL`), how a connection is opened
//! on each backend, and how connections to a server that went away are all dropped at once.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use diesel::connection::CacheSize;
use diesel::connection::SimpleConnection;
use diesel::r2d2::{self, ManageConnection, R2D2Connection};
use diesel::result::{ConnectionError, DatabaseErrorKind, Error as DieselError};
use diesel::{Connection, PgConnection, SqliteConnection};

#[derive(diesel::MultiConnection)]
pub enum DbConnection {
    Postgres(PgConnection),
    Sqlite(SqliteConnection),
}

pub type Pool = r2d2::Pool<ConnectionManager>;

/// Where the data lives, parsed from `DATABASE_URL`. Anything but the known schemes is
/// refused, so a typo never silently becomes a new SQLite file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseTarget {
    Postgres(String),
    Sqlite(PathBuf),
}

impl DatabaseTarget {
    /// The error says what is wrong with the URL (the caller names the setting), never
    /// quoting it: it may hold a password.
    pub fn parse(url: &str) -> Result<Self, String> {
        let url = url.trim();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            super::conninfo::check(url)?;
            Ok(Self::Postgres(with_network_timeouts(url)))
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err("sqlite:// needs a file path".to_owned());
            }
            // A query string (`?mode=ro`) would silently become part of the file's name.
            if path.contains('?') {
                return Err("sqlite://PATH takes no query string (`?`)".to_owned());
            }
            Ok(Self::Sqlite(PathBuf::from(path)))
        } else {
            Err("expected postgres://…, postgresql://… or sqlite://PATH".to_owned())
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
    pub(super) fn lose(&self) {
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
pub(super) fn connection_lost(e: &DieselError) -> bool {
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

/// How long a request may wait for a pooled connection before it answers 503.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(3);

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
    fn unknown_schemes_are_refused() {
        for url in [
            "mysql://x",
            "data/payments.db",
            "sqlite://",
            "sqlite://p.db?mode=ro",
            "",
        ] {
            assert!(DatabaseTarget::parse(url).is_err(), "{url}");
        }
        assert_eq!(
            DatabaseTarget::parse("sqlite://data/p.db").unwrap(),
            DatabaseTarget::Sqlite(PathBuf::from("data/p.db"))
        );
    }
}
