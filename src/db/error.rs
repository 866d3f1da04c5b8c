//! What a database call can fail with, and how diesel's errors map onto it.

use diesel::result::{DatabaseErrorKind, Error as DieselError};

use super::pool::connection_lost;

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
