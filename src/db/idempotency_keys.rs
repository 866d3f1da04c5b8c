//! `Idempotency-Key` records of the requests that move no money (`/v1/webhook_endpoints…`),
//! the rows of the idempotent-operation mechanism's database-only mode: the unique
//! (merchant, scope, key) decides which request runs; the stored answer is what every retry
//! replays.

use diesel::prelude::*;

use super::pool::DbConnection;
use super::schema::idempotency_keys;
use crate::domain::Timestamp;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = idempotency_keys)]
pub struct KeyRow {
    pub merchant_id: String,
    /// The operation (route template) the key was used on.
    pub scope: String,
    pub idempotency_key: String,
    pub request_fingerprint: String,
    pub response_status: Option<i32>,
    pub response_body: Option<String>,
    pub lease_token: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub created_at: Timestamp,
}

/// The claim. A key already taken comes back as a unique violation (on PostgreSQL after
/// the transaction that took it has ended).
pub fn insert(conn: &mut DbConnection, row: &KeyRow) -> QueryResult<()> {
    diesel::insert_into(idempotency_keys::table)
        .values(row)
        .execute(conn)
        .map(|_| ())
}

pub fn find(
    conn: &mut DbConnection,
    merchant_id: &str,
    scope: &str,
    key: &str,
) -> QueryResult<Option<KeyRow>> {
    idempotency_keys::table
        .find((merchant_id, scope, key))
        .select(KeyRow::as_select())
        .first(conn)
        .optional()
}

/// Stores the final answer; only the holder of the lease (`token`) can. Returns whether it did.
pub fn store_answer(
    conn: &mut DbConnection,
    row: &KeyRow,
    token: &str,
    status: i32,
    body: &str,
) -> QueryResult<bool> {
    diesel::update(
        idempotency_keys::table
            .find((&row.merchant_id, &row.scope, &row.idempotency_key))
            .filter(idempotency_keys::response_body.is_null())
            .filter(idempotency_keys::lease_token.eq(token)),
    )
    .set((
        idempotency_keys::response_status.eq(status),
        idempotency_keys::response_body.eq(body),
        idempotency_keys::lease_token.eq(None::<String>),
        idempotency_keys::lease_expires_at.eq(None::<Timestamp>),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// Takes over a record without an answer whose lease ran out (its request died).
pub fn take_over(
    conn: &mut DbConnection,
    row: &KeyRow,
    token: &str,
    now: Timestamp,
    lease_until: Timestamp,
) -> QueryResult<bool> {
    diesel::update(
        idempotency_keys::table
            .find((&row.merchant_id, &row.scope, &row.idempotency_key))
            .filter(idempotency_keys::response_body.is_null())
            .filter(
                idempotency_keys::lease_expires_at
                    .is_null()
                    .or(idempotency_keys::lease_expires_at.le(now)),
            ),
    )
    .set((
        idempotency_keys::lease_token.eq(token),
        idempotency_keys::lease_expires_at.eq(lease_until),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// Gives up the lease `token` holds on a record without an answer, so that a retry can
/// take it over at once. Returns whether the lease was still `token`'s.
pub fn give_up(conn: &mut DbConnection, row: &KeyRow, token: &str) -> QueryResult<bool> {
    diesel::update(
        idempotency_keys::table
            .find((&row.merchant_id, &row.scope, &row.idempotency_key))
            .filter(idempotency_keys::response_body.is_null())
            .filter(idempotency_keys::lease_token.eq(token)),
    )
    .set((
        idempotency_keys::lease_token.eq(None::<String>),
        idempotency_keys::lease_expires_at.eq(None::<Timestamp>),
    ))
    .execute(conn)
    .map(|n| n == 1)
}
