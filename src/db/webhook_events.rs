//! Inbound webhook events, recorded once by `webhook-id` in the transaction that applies
//! them.

use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};

use super::pool::DbConnection;
use super::schema::webhook_events;
use crate::domain::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = webhook_events)]
pub struct WebhookEventRow {
    pub id: String,
    pub body_sha256: String,
    pub event_type: String,
    pub received_at: Timestamp,
}

/// What recording an event came to.
#[derive(Debug)]
pub enum Recorded<T> {
    /// First delivery: the event row and the effect were committed together.
    Applied(T),
    /// The id was already recorded (by an earlier delivery, or a concurrent one that
    /// committed first); nothing was applied. Holds the stored row.
    AlreadyRecorded(WebhookEventRow),
}

enum Abort {
    IdTaken,
    Failed(DieselError),
}

impl From<DieselError> for Abort {
    fn from(e: DieselError) -> Self {
        Self::Failed(e)
    }
}

/// Inserts the event row, then runs `apply`, in one transaction: either both commit or
/// neither does, so an event can never be recorded without its effect or applied twice.
///
/// The insert comes first on purpose. On SQLite a transaction that reads before it writes
/// fails with "database is locked" under contention; on PostgreSQL a concurrent insert of
/// the same id waits for the first transaction and then fails with a unique violation,
/// which aborts only this (then rolled back) transaction. The existing row is read after
/// the rollback, outside any transaction.
pub fn record_and_apply<T>(
    conn: &mut DbConnection,
    event: &WebhookEventRow,
    apply: impl FnOnce(&mut DbConnection) -> QueryResult<T>,
) -> QueryResult<Recorded<T>> {
    let attempt = conn.transaction::<T, Abort, _>(|conn| {
        diesel::insert_into(webhook_events::table)
            .values(event)
            .execute(conn)
            .map_err(|e| match e {
                DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _) => Abort::IdTaken,
                other => Abort::Failed(other),
            })?;
        Ok(apply(conn)?)
    });
    match attempt {
        Ok(applied) => Ok(Recorded::Applied(applied)),
        Err(Abort::Failed(e)) => Err(e),
        // The winner has committed (a unique violation is only reported once it has), so
        // its row is there to compare with.
        Err(Abort::IdTaken) => find(conn, &event.id)?
            .map(Recorded::AlreadyRecorded)
            .ok_or(DieselError::NotFound),
    }
}

pub fn find(conn: &mut DbConnection, id: &str) -> QueryResult<Option<WebhookEventRow>> {
    webhook_events::table
        .filter(webhook_events::id.eq(id))
        .select(WebhookEventRow::as_select())
        .first(conn)
        .optional()
}

/// Deletes up to `batch` events received before `cutoff`, oldest first; returns how many.
/// Small batches keep each statement short, so pruning never blocks inbound webhooks long.
pub fn delete_received_before(
    conn: &mut DbConnection,
    cutoff: Timestamp,
    batch: i64,
) -> QueryResult<usize> {
    let ids: Vec<String> = webhook_events::table
        .filter(webhook_events::received_at.lt(cutoff))
        .order(webhook_events::received_at.asc())
        .select(webhook_events::id)
        .limit(batch)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    diesel::delete(
        webhook_events::table
            .filter(webhook_events::id.eq_any(&ids))
            .filter(webhook_events::received_at.lt(cutoff)),
    )
    .execute(conn)
}

pub fn count(conn: &mut DbConnection) -> QueryResult<i64> {
    webhook_events::table.count().get_result(conn)
}
