//! Events and the order of the feed.
//!
//! An emitter inserts its event with `seq` NULL, in the transaction of its change, and never
//! waits for other emitters. [`sequence_pending`] numbers committed events afterwards: one
//! pass at a time (the `event_sequence` row is its lock), each pass numbering above every
//! number before it. So once a reader sees number N, every event it has not seen yet gets a
//! number above N: a reader that continues after the last number it got skips nothing.

use diesel::prelude::*;

use super::ledger::{EntryRow, TransactionRow};
use super::pool::DbConnection;
use super::schema::{event_sequence, events};
use super::webhook_endpoints;
use crate::domain::Timestamp;

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = events)]
pub struct EventRow {
    pub id: String,
    pub merchant_id: String,
    /// Position in the feed; NULL until a sequencing pass numbers it.
    pub seq: Option<i64>,
    pub event_type: String,
    /// The payment or refund the event is about.
    pub object_id: String,
    /// The event object as served and delivered, byte for byte.
    pub body: String,
    pub created_at: Timestamp,
}

/// A new event: no `seq` yet. Every value is given (no `Option`), so diesel keeps the
/// INSERT as a prepared statement on PostgreSQL: it runs with every payment.
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = events)]
pub struct NewEventRow<'a> {
    pub id: &'a str,
    pub merchant_id: &'a str,
    pub event_type: &'a str,
    pub object_id: &'a str,
    pub body: &'a str,
    pub created_at: Timestamp,
}

super::insert::unnest_insert! {
    /// The events of a group-commit batch, in one prepared statement.
    InsertEvents<'a> for NewEventRow<'a> => "events" {
        id: diesel::sql_types::Text = |r| -> &'a str { r.id },
        merchant_id: diesel::sql_types::Text = |r| -> &'a str { r.merchant_id },
        event_type: diesel::sql_types::Text = |r| -> &'a str { r.event_type },
        object_id: diesel::sql_types::Text = |r| -> &'a str { r.object_id },
        body: diesel::sql_types::Text = |r| -> &'a str { r.body },
        created_at: diesel::sql_types::Timestamp = |r| -> Timestamp { r.created_at },
    }
}

/// Inserts `rows` with the ledger's rows of the same changes (`transactions` and their
/// `entries`, maybe none), and reads the enabled endpoints of `merchants` (see
/// [`webhook_endpoints::enabled_for_merchants`]). One statement on PostgreSQL, prepared
/// once per connection: a group-commit batch of finishes pays one round trip for what were
/// three (each is a wake-up of both processes on a busy machine; docs/benchmark.md). One
/// statement per write on SQLite.
pub fn insert_and_find_endpoints(
    conn: &mut DbConnection,
    rows: &[NewEventRow<'_>],
    (transactions, entries): (&[TransactionRow], &[EntryRow]),
    merchants: &[&str],
) -> QueryResult<Vec<(String, String, String)>> {
    use super::insert::Together;
    use super::ledger::{InsertEntries, InsertTransactions};
    let endpoints = webhook_endpoints::enabled_for_merchants(merchants);
    match conn {
        // No transactions (declines) insert no rows from empty arrays: one statement text.
        DbConnection::Postgres(pg) => Together {
            writes: (
                InsertEvents::new(rows),
                InsertTransactions::new(transactions),
                InsertEntries::new(entries),
            ),
            last: endpoints,
        }
        .load(pg),
        conn => {
            super::insert_rows!(&mut *conn, events::table, rows, InsertEvents)?;
            super::ledger::insert(conn, transactions, entries)?;
            endpoints.load(conn)
        }
    }
}

pub fn find(conn: &mut DbConnection, merchant_id: &str, id: &str) -> QueryResult<Option<EventRow>> {
    events::table
        .filter(events::id.eq(id))
        .filter(events::merchant_id.eq(merchant_id))
        .select(EventRow::as_select())
        .first(conn)
        .optional()
}

/// Newest first by id (ids are time-ordered), `limit + 1` rows so the caller can tell
/// `has_more`. Unnumbered events are included: this list promises no gap-free order.
/// `None` if `starting_after` names no event of this merchant.
pub fn list_newest_first(
    conn: &mut DbConnection,
    merchant_id: &str,
    event_type: Option<&str>,
    starting_after: Option<&str>,
    limit: i64,
) -> QueryResult<Option<Vec<EventRow>>> {
    if let Some(cursor) = starting_after
        && find(conn, merchant_id, cursor)?.is_none()
    {
        return Ok(None);
    }
    let mut query = events::table
        .filter(events::merchant_id.eq(merchant_id))
        .select(EventRow::as_select())
        .order(events::id.desc())
        .limit(limit + 1)
        .into_boxed();
    if let Some(kind) = event_type {
        query = query.filter(events::event_type.eq(kind.to_owned()));
    }
    if let Some(cursor) = starting_after {
        query = query.filter(events::id.lt(cursor.to_owned()));
    }
    query.load(conn).map(Some)
}

/// The feed: numbered events after `after_seq`, in number order, `limit + 1` rows.
pub fn feed(
    conn: &mut DbConnection,
    merchant_id: &str,
    event_type: Option<&str>,
    after_seq: i64,
    limit: i64,
) -> QueryResult<Vec<EventRow>> {
    let mut query = events::table
        .filter(events::merchant_id.eq(merchant_id))
        .filter(events::seq.gt(after_seq))
        .select(EventRow::as_select())
        .order(events::seq.asc())
        .limit(limit + 1)
        .into_boxed();
    if let Some(kind) = event_type {
        query = query.filter(events::event_type.eq(kind.to_owned()));
    }
    query.load(conn)
}

/// `Some(seq)` of the merchant's event `id` (`Some(None)`: not numbered yet), `None` if the
/// merchant has no such event.
pub fn seq_of(
    conn: &mut DbConnection,
    merchant_id: &str,
    id: &str,
) -> QueryResult<Option<Option<i64>>> {
    events::table
        .filter(events::id.eq(id))
        .filter(events::merchant_id.eq(merchant_id))
        .select(events::seq)
        .first(conn)
        .optional()
}

/// Whether any committed event still waits for its number (a partial index answers it).
pub fn has_unsequenced(conn: &mut DbConnection) -> QueryResult<bool> {
    events::table
        .filter(events::seq.is_null())
        .select(events::id)
        .first::<String>(conn)
        .optional()
        .map(|found| found.is_some())
}

/// One sequencing pass, in its own transaction: numbers up to `batch` committed events that
/// have no number yet (oldest id first) above every number given so far. Returns how many.
///
/// The first statement locks the counter row until commit, so passes (of every instance)
/// run one after another, and each one's reads start after the previous one committed:
/// numbers are only ever handed out above what any reader may already have seen.
pub fn sequence_pending(conn: &mut DbConnection, batch: i64) -> QueryResult<usize> {
    conn.transaction(|conn| {
        // A write first: on SQLite it takes the write lock before any read.
        diesel::update(event_sequence::table.filter(event_sequence::id.eq(1)))
            .set(event_sequence::n.eq(event_sequence::n))
            .execute(conn)?;
        let base: i64 = event_sequence::table
            .filter(event_sequence::id.eq(1))
            .select(event_sequence::n)
            .first(conn)?;
        // Integers we computed, not input: written into the text so one statement text
        // serves both backends (their placeholders differ).
        let numbered = diesel::sql_query(format!(
            "UPDATE events SET seq = numbered.seq \
             FROM (SELECT id, {base} + ROW_NUMBER() OVER (ORDER BY id) AS seq \
                   FROM (SELECT id FROM events WHERE seq IS NULL ORDER BY id LIMIT {batch}) AS pending \
                  ) AS numbered \
             WHERE events.id = numbered.id"
        ))
        .execute(conn)?;
        if numbered > 0 {
            let added = i64::try_from(numbered).unwrap_or(i64::MAX);
            diesel::update(event_sequence::table.filter(event_sequence::id.eq(1)))
                .set(event_sequence::n.eq(event_sequence::n + added))
                .execute(conn)?;
        }
        Ok(numbered)
    })
}

/// Deletes up to `batch` events created before `cutoff`, oldest first (their deliveries go
/// with them: ON DELETE CASCADE). Returns how many. An event's id is made with it and is
/// time-ordered: the events before `cutoff` are a range of the primary key.
pub fn delete_created_before(
    conn: &mut DbConnection,
    cutoff: Timestamp,
    batch: i64,
) -> QueryResult<usize> {
    let ids: Vec<String> = events::table
        .filter(events::id.lt(crate::domain::EventId::first_at(cutoff)))
        .order(events::id.asc())
        .select(events::id)
        .limit(batch)
        .load(conn)?;
    if ids.is_empty() {
        return Ok(0);
    }
    diesel::delete(events::table.filter(events::id.eq_any(&ids))).execute(conn)
}

/// Events about these payments, refunds or disputes, oldest first (a payment's timeline,
/// tests).
pub fn for_objects(conn: &mut DbConnection, object_ids: &[&str]) -> QueryResult<Vec<EventRow>> {
    events::table
        .filter(events::object_id.eq_any(object_ids))
        .select(EventRow::as_select())
        .order(events::id.asc())
        .load(conn)
}

/// Every event of a merchant, by id (tests and diagnostics).
pub fn all_for_merchant(conn: &mut DbConnection, merchant_id: &str) -> QueryResult<Vec<EventRow>> {
    events::table
        .filter(events::merchant_id.eq(merchant_id))
        .select(EventRow::as_select())
        .order(events::id.asc())
        .load(conn)
}
