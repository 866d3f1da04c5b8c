//! Merchants' webhook endpoints: where events are delivered, with which secrets, and
//! whether the endpoint is healthy enough to keep delivering to.

use diesel::prelude::*;

use super::pool::DbConnection;
use super::schema::webhook_endpoints;
use crate::domain::{EndpointStatus, Timestamp};

const ENABLED: EndpointStatus = EndpointStatus::Enabled;

#[derive(Debug, Clone, Queryable, Selectable, Insertable, AsChangeset)]
#[diesel(table_name = webhook_endpoints, treat_none_as_null = true)]
pub struct EndpointRow {
    pub id: String,
    pub merchant_id: String,
    pub url: String,
    /// JSON array of event types, or `["*"]`.
    pub enabled_events: String,
    pub description: Option<String>,
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub status: EndpointStatus,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<Timestamp>,
    pub failing_since: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

pub fn insert(conn: &mut DbConnection, row: &EndpointRow) -> QueryResult<()> {
    diesel::insert_into(webhook_endpoints::table)
        .values(row.clone())
        .execute(conn)
        .map(|_| ())
}

pub fn find(
    conn: &mut DbConnection,
    merchant_id: &str,
    id: &str,
) -> QueryResult<Option<EndpointRow>> {
    webhook_endpoints::table
        .filter(webhook_endpoints::id.eq(id))
        .filter(webhook_endpoints::merchant_id.eq(merchant_id))
        .select(EndpointRow::as_select())
        .first(conn)
        .optional()
}

/// The first write of a transaction that changes an endpoint, so that on SQLite it holds
/// the write lock before it reads. Returns whether the merchant has this endpoint.
pub fn lock(conn: &mut DbConnection, merchant_id: &str, id: &str) -> QueryResult<bool> {
    diesel::update(
        webhook_endpoints::table
            .filter(webhook_endpoints::id.eq(id))
            .filter(webhook_endpoints::merchant_id.eq(merchant_id)),
    )
    .set(webhook_endpoints::updated_at.eq(webhook_endpoints::updated_at))
    .execute(conn)
    .map(|n| n == 1)
}

/// Newest first, `limit + 1` rows so the caller can tell `has_more`; `None` if
/// `starting_after` names no endpoint of this merchant.
pub fn list(
    conn: &mut DbConnection,
    merchant_id: &str,
    starting_after: Option<&str>,
    limit: i64,
) -> QueryResult<Option<Vec<EndpointRow>>> {
    if let Some(cursor) = starting_after
        && find(conn, merchant_id, cursor)?.is_none()
    {
        return Ok(None);
    }
    let mut query = webhook_endpoints::table
        .filter(webhook_endpoints::merchant_id.eq(merchant_id))
        .select(EndpointRow::as_select())
        .order(webhook_endpoints::id.desc())
        .limit(limit + 1)
        .into_boxed();
    if let Some(cursor) = starting_after {
        query = query.filter(webhook_endpoints::id.lt(cursor.to_owned()));
    }
    query.load(conn).map(Some)
}

/// Writes every column of `row` (the caller read it in the same transaction). Returns
/// whether the endpoint still existed.
pub fn update(conn: &mut DbConnection, row: &EndpointRow) -> QueryResult<bool> {
    diesel::update(
        webhook_endpoints::table
            .filter(webhook_endpoints::id.eq(&row.id))
            .filter(webhook_endpoints::merchant_id.eq(&row.merchant_id)),
    )
    .set(row.clone())
    .execute(conn)
    .map(|n| n == 1)
}

/// Removes the endpoint and (ON DELETE CASCADE) its deliveries.
pub fn delete(conn: &mut DbConnection, merchant_id: &str, id: &str) -> QueryResult<bool> {
    diesel::delete(
        webhook_endpoints::table
            .filter(webhook_endpoints::id.eq(id))
            .filter(webhook_endpoints::merchant_id.eq(merchant_id)),
    )
    .execute(conn)
    .map(|n| n == 1)
}

/// `(merchant_id, id, enabled_events)` of these merchants' enabled endpoints, in one query:
/// who gets the new events of a batch. The query itself, so that a statement can send it
/// with other work (the events' insert of a group-commit batch, `db/events.rs`).
#[diesel::dsl::auto_type(no_type_alias)]
pub fn enabled_for_merchants<'a>(merchant_ids: &'a [&'a str]) -> _ {
    let enabled: &'static str = ENABLED.as_str();
    webhook_endpoints::table
        .filter(webhook_endpoints::merchant_id.eq_any(merchant_ids))
        .filter(webhook_endpoints::status.eq(enabled))
        .select((
            webhook_endpoints::merchant_id,
            webhook_endpoints::id,
            webhook_endpoints::enabled_events,
        ))
        .order(webhook_endpoints::id)
}

/// A 2xx: the endpoint is healthy again, its run of failures is over.
pub fn record_success(conn: &mut DbConnection, id: &str) -> QueryResult<()> {
    diesel::update(
        webhook_endpoints::table
            .filter(webhook_endpoints::id.eq(id))
            .filter(webhook_endpoints::failing_since.is_not_null()),
    )
    .set(webhook_endpoints::failing_since.eq(None::<Timestamp>))
    .execute(conn)
    .map(|_| ())
}

/// A failed attempt ending at `at`: starts the run of failures if none is running, and
/// disables the endpoint once the run has lasted `disable_after`. Returns whether this call
/// disabled it.
pub fn record_failure(
    conn: &mut DbConnection,
    id: &str,
    at: Timestamp,
    disable_after: chrono::TimeDelta,
) -> QueryResult<bool> {
    diesel::update(
        webhook_endpoints::table
            .filter(webhook_endpoints::id.eq(id))
            .filter(webhook_endpoints::failing_since.is_null()),
    )
    .set(webhook_endpoints::failing_since.eq(at))
    .execute(conn)?;
    diesel::update(
        webhook_endpoints::table
            .filter(webhook_endpoints::id.eq(id))
            .filter(webhook_endpoints::status.eq(ENABLED.as_str()))
            .filter(webhook_endpoints::failing_since.le(at - disable_after)),
    )
    .set((
        webhook_endpoints::status.eq(ENABLED.move_to(EndpointStatus::Disabled)?.as_str()),
        webhook_endpoints::updated_at.eq(at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// The receiver answered 410 Gone: disabled at once. Returns whether this call did it.
pub fn disable(conn: &mut DbConnection, id: &str, at: Timestamp) -> QueryResult<bool> {
    diesel::update(
        webhook_endpoints::table
            .filter(webhook_endpoints::id.eq(id))
            .filter(webhook_endpoints::status.eq(ENABLED.as_str())),
    )
    .set((
        webhook_endpoints::status.eq(ENABLED.move_to(EndpointStatus::Disabled)?.as_str()),
        webhook_endpoints::updated_at.eq(at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}
