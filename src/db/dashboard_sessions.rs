//! Dashboard sessions: one row per signed-in browser, found by the hash of its cookie's
//! token, valid while its API key is not revoked and its expiry (which slides with use) has
//! not passed.

use diesel::prelude::*;

use super::merchants::Merchant;
use super::pool::DbConnection;
use super::schema::{api_keys, dashboard_sessions, merchants};
use crate::domain::Timestamp;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = dashboard_sessions)]
pub struct SessionRow {
    pub token_hash: String,
    pub api_key_hash: String,
    pub merchant_id: String,
    pub csrf_token: String,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
}

pub fn insert(conn: &mut DbConnection, row: &SessionRow) -> QueryResult<()> {
    diesel::insert_into(dashboard_sessions::table)
        .values(row.clone())
        .execute(conn)
        .map(|_| ())
}

/// The live session of this token hash at `now`, with its merchant; its expiry slides to
/// `now + ttl`, written on every request: a session ends exactly `ttl` after its last
/// request, as promised (sparing the write until a tenth of the TTL had passed ended
/// sessions up to that tenth early). `None`: no such session, it expired, or its key was
/// revoked.
pub fn touch(
    conn: &mut DbConnection,
    token_hash: &str,
    now: Timestamp,
    ttl: chrono::Duration,
) -> QueryResult<Option<(SessionRow, Merchant)>> {
    let found: Option<(SessionRow, Merchant)> = dashboard_sessions::table
        .inner_join(api_keys::table.on(api_keys::key_hash.eq(dashboard_sessions::api_key_hash)))
        .inner_join(merchants::table.on(merchants::id.eq(dashboard_sessions::merchant_id)))
        .filter(dashboard_sessions::token_hash.eq(token_hash))
        .filter(dashboard_sessions::expires_at.gt(now))
        .filter(api_keys::revoked_at.is_null())
        .select((SessionRow::as_select(), Merchant::as_select()))
        .first(conn)
        .optional()?;
    let expires_at = now + ttl;
    if let Some((row, _)) = &found
        && row.expires_at < expires_at
    {
        diesel::update(
            dashboard_sessions::table.filter(dashboard_sessions::token_hash.eq(token_hash)),
        )
        .set(dashboard_sessions::expires_at.eq(expires_at))
        .execute(conn)?;
    }
    Ok(found)
}

/// Signs out: the session is gone on every instance at once.
pub fn delete(conn: &mut DbConnection, token_hash: &str) -> QueryResult<()> {
    diesel::delete(dashboard_sessions::table.filter(dashboard_sessions::token_hash.eq(token_hash)))
        .execute(conn)
        .map(|_| ())
}

/// Drops sessions that expired before `now` (they are refused anyway; this keeps the table
/// small).
pub fn delete_expired(conn: &mut DbConnection, now: Timestamp) -> QueryResult<usize> {
    diesel::delete(dashboard_sessions::table.filter(dashboard_sessions::expires_at.le(now)))
        .execute(conn)
}
