//! Payout rows, and the lock that keeps payouts within the available balance.

use diesel::prelude::*;

use super::DbConnection;
use super::schema::payouts;
use crate::domain::{PayoutStatus, Timestamp};

super::lease::lease_protocol!(
    payouts,
    PayoutRow,
    PayoutStatus::Pending.as_str(),
    provider_payout_id
);

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = payouts)]
pub struct PayoutRow {
    pub id: String,
    pub merchant_id: String,
    pub idempotency_key: String,
    pub request_fingerprint: String,
    pub amount: i64,
    pub currency: String,
    pub destination: String,
    pub description: Option<String>,
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub status: PayoutStatus,
    pub provider_payout_id: Option<String>,
    pub failure_code: Option<String>,
    pub response_status: Option<i32>,
    pub response_body: Option<String>,
    pub lease_token: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub provider_attempts: i32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The claim: the insert whose unique (merchant_id, idempotency_key) decides the winner.
pub fn insert(conn: &mut DbConnection, row: &PayoutRow) -> QueryResult<()> {
    diesel::insert_into(payouts::table)
        .values(row.clone())
        .execute(conn)
        .map(|_| ())
}

/// Serialises, until the end of the caller's transaction, everything that decides whether
/// a payout of `merchant_id` in `currency` fits the available balance, on every instance
/// (on SQLite the claim insert that came first holds the write lock already).
pub fn lock_balance(conn: &mut DbConnection, merchant_id: &str, currency: &str) -> QueryResult<()> {
    super::lock_until_commit(conn, &format!("balance:{merchant_id}:{currency}"))
}

/// Turns a fresh claim into a stored refusal: its answer is final and replayed.
pub fn reject(
    conn: &mut DbConnection,
    id: &str,
    response_status: i32,
    response_body: &str,
) -> QueryResult<()> {
    diesel::update(
        payouts::table
            .filter(payouts::id.eq(id))
            .filter(super::lease::still!(
                payouts::status,
                PayoutStatus::Pending.as_str()
            )),
    )
    .set((
        payouts::status.eq(PayoutStatus::Rejected.as_str()),
        payouts::response_status.eq(response_status),
        payouts::response_body.eq(response_body),
        payouts::lease_token.eq(None::<String>),
        payouts::lease_expires_at.eq(None::<Timestamp>),
    ))
    .execute(conn)
    .map(|_| ())
}

pub fn find_by_idempotency_key(
    conn: &mut DbConnection,
    merchant_id: &str,
    key: &str,
) -> QueryResult<Option<PayoutRow>> {
    payouts::table
        .filter(payouts::merchant_id.eq(super::unplanned(merchant_id)))
        .filter(payouts::idempotency_key.eq(key))
        .select(PayoutRow::as_select())
        .first(conn)
        .optional()
}

/// A payout of the merchant (not a stored refusal).
pub fn find_for_merchant(
    conn: &mut DbConnection,
    merchant_id: &str,
    id: &str,
) -> QueryResult<Option<PayoutRow>> {
    payouts::table
        .filter(payouts::id.eq(id))
        .filter(payouts::merchant_id.eq(merchant_id))
        .filter(payouts::status.ne(PayoutStatus::Rejected.as_str()))
        .select(PayoutRow::as_select())
        .first(conn)
        .optional()
}

/// Writes the final state and the response every retry will replay, guarded by the payout
/// still being pending.
pub fn finish(conn: &mut DbConnection, row: &PayoutRow) -> QueryResult<bool> {
    diesel::update(
        payouts::table
            .filter(payouts::id.eq(&row.id))
            .filter(super::lease::still!(
                payouts::status,
                PayoutStatus::Pending.as_str()
            )),
    )
    .set((
        payouts::status.eq(row.status.as_str()),
        payouts::provider_payout_id.eq(&row.provider_payout_id),
        payouts::failure_code.eq(&row.failure_code),
        payouts::response_status.eq(row.response_status),
        payouts::response_body.eq(&row.response_body),
        payouts::lease_token.eq(None::<String>),
        payouts::lease_expires_at.eq(None::<Timestamp>),
        payouts::updated_at.eq(row.updated_at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// The merchant's payouts, newest first, `limit + 1` rows. `None` if `starting_after`
/// names no payout of the merchant.
pub fn list(
    conn: &mut DbConnection,
    merchant_id: &str,
    limit: i64,
    starting_after: Option<&str>,
    status: Option<PayoutStatus>,
) -> QueryResult<Option<Vec<PayoutRow>>> {
    if let Some(cursor) = starting_after
        && find_for_merchant(conn, merchant_id, cursor)?.is_none()
    {
        return Ok(None);
    }
    let mut query = payouts::table
        .filter(payouts::merchant_id.eq(merchant_id))
        .filter(payouts::status.ne(PayoutStatus::Rejected.as_str()))
        .select(PayoutRow::as_select())
        .order(payouts::id.desc())
        .limit(limit + 1)
        .into_boxed();
    if let Some(cursor) = starting_after {
        query = query.filter(payouts::id.lt(cursor));
    }
    if let Some(status) = status {
        query = query.filter(payouts::status.eq(status.as_str()));
    }
    query.load(conn).map(Some)
}
