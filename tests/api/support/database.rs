//! A database of a test's own: a fresh SQLite file, or with `TEST_DATABASE_URL` a fresh
//! schema in that PostgreSQL database (behind a pooler, `TEST_DATABASE_POOLER=1`, a role of
//! the test's own whose search_path is that schema). And the one way a test that needs
//! PostgreSQL skips on SQLite, saying why.

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use payments_api::db::pool::DatabaseTarget;

/// A database of a test's own: a fresh SQLite file, or a fresh PostgreSQL schema.
pub enum TestDatabase {
    Sqlite(std::path::PathBuf),
    Postgres { base_url: String, schema: String },
}

impl TestDatabase {
    /// The database and its URL.
    pub fn create() -> (Self, String) {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        match test_database_url() {
            Some(base_url) => {
                assert!(
                    matches!(
                        DatabaseTarget::parse(&base_url),
                        Ok(DatabaseTarget::Postgres(_))
                    ),
                    "TEST_DATABASE_URL must be a postgres:// URL"
                );
                let schema = format!("test_{unique}");
                let mut conn = PgConnection::establish(&base_url)
                    .unwrap_or_else(|e| panic!("cannot reach TEST_DATABASE_URL: {e}"));
                if behind_pooler() {
                    // A pooler forwards no `options`: the schema is instead the search_path
                    // of a role of the test's own, which every server session of it gets.
                    conn.batch_execute(&format!(
                        "CREATE ROLE {schema} LOGIN; \
                         CREATE SCHEMA {schema} AUTHORIZATION {schema}; \
                         ALTER ROLE {schema} SET search_path = {schema}"
                    ))
                    .expect("create role and schema");
                    let url = with_user(&base_url, &schema);
                    return (Self::Postgres { base_url, schema }, url);
                }
                conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
                    .expect("create schema");
                let separator = if base_url.contains('?') { '&' } else { '?' };
                let url = format!("{base_url}{separator}options=-csearch_path%3D{schema}");
                (Self::Postgres { base_url, schema }, url)
            }
            None => {
                let dir = std::env::temp_dir().join("payments-api-tests");
                std::fs::create_dir_all(&dir).expect("temp dir");
                let path = dir.join(format!("{unique}.db"));
                let url = format!("sqlite://{}", path.display());
                (Self::Sqlite(path), url)
            }
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match self {
            Self::Sqlite(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Self::Postgres { base_url, schema } => {
                if let Ok(mut conn) = PgConnection::establish(base_url) {
                    let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
                    if behind_pooler() {
                        // The pooler keeps idle server sessions a while: end them now, so
                        // the shared server's connection slots are not used up.
                        let _ = conn.batch_execute(&format!(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                             WHERE usename = '{schema}'; DROP ROLE IF EXISTS {schema}"
                        ));
                    }
                }
            }
        }
    }
}

/// `TEST_DATABASE_URL` when it is set and not empty: the tests run on PostgreSQL.
pub fn test_database_url() -> Option<String> {
    std::env::var("TEST_DATABASE_URL")
        .ok()
        .filter(|v| !v.is_empty())
}

/// `TEST_DATABASE_POOLER=1`: `TEST_DATABASE_URL` is a pooler in transaction mode
/// (`scripts/test-pgbouncer.sh`), which cannot pass `options=-csearch_path…` on.
pub fn behind_pooler() -> bool {
    std::env::var("TEST_DATABASE_POOLER").is_ok_and(|v| v == "1")
}

/// The one way a test skips: it prints `SKIPPED <test>: <reason>` on stderr (shown with
/// `--nocapture`) and the caller returns. A test that skips still passes, so skip only for
/// a database the run does not have, never for a failure.
pub fn skip(reason: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("test");
    eprintln!("SKIPPED {test}: {reason}");
}

/// For a test that means something on PostgreSQL only: `true` when the run is on
/// PostgreSQL; otherwise it says why the test is skipped ([`skip`]) and is `false`.
pub fn on_postgres_or_skip(reason: &str) -> bool {
    if test_database_url().is_some() {
        return true;
    }
    skip(&format!("PostgreSQL only (TEST_DATABASE_URL): {reason}"));
    false
}

/// `url` with `user` as its user and no password (the test pooler trusts loopback).
fn with_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let host = rest[..authority_end].rfind('@').map_or(0, |at| at + 1);
    format!("{scheme}://{user}@{}", &rest[host..])
}
