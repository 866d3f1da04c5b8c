//! Refund rows and the money they hold on their payment.
//!
//! Two numbers on the payment keep refunds honest: `amount_reserved` is the sum of refunds
//! that have not failed (pending or succeeded) and `amount_refunded` the sum of succeeded
//! ones. Every update that moves them is guarded in SQL by the state it expects, so no
//! interleaving of requests, webhooks and workers can reserve more than was paid or count
//! a refund twice.

use diesel::prelude::*;

use super::pool::DbConnection;
use super::schema::{payments, refunds};
use crate::domain::{PaymentStatus, RefundStatus, Timestamp};

super::lease::lease_protocol!(
    refunds,
    RefundRow,
    RefundStatus::Pending.as_str(),
    provider_refund_id
);

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = refunds)]
pub struct RefundRow {
    pub id: String,
    pub merchant_id: String,
    pub payment_id: String,
    pub idempotency_key: String,
    pub request_fingerprint: String,
    pub amount: i64,
    pub currency: String,
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub status: RefundStatus,
    pub reason: Option<String>,
    pub provider_refund_id: Option<String>,
    pub failure_code: Option<String>,
    pub response_status: Option<i32>,
    pub response_body: Option<String>,
    pub lease_token: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub provider_attempts: i32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// What a refund needs to know about its payment.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payments)]
pub struct RefundablePayment {
    pub id: String,
    #[diesel(deserialize_as = String)]
    pub status: PaymentStatus,
    pub amount: i64,
    pub amount_reserved: i64,
    pub amount_refunded: i64,
    pub amount_captured: i64,
    pub currency: String,
    pub provider_charge_id: Option<String>,
    pub amount_disputed: i64,
    pub disputes_open: i32,
}

impl RefundablePayment {
    /// What is left to refund: what was captured minus what refunds that have not failed
    /// hold and what open or lost disputes took back.
    pub fn refundable(&self) -> i64 {
        (self.amount_captured - self.amount_reserved - self.amount_disputed).max(0)
    }
}

pub fn find_payment(
    conn: &mut DbConnection,
    merchant_id: &str,
    payment_id: &str,
) -> QueryResult<Option<RefundablePayment>> {
    payments::table
        .filter(payments::id.eq(payment_id))
        .filter(payments::merchant_id.eq(merchant_id))
        .select(RefundablePayment::as_select())
        .first(conn)
        .optional()
}

/// The claim: the insert whose unique (merchant_id, idempotency_key) decides the winner.
/// A lost race comes back as `UniqueViolation`.
pub fn insert(conn: &mut DbConnection, row: &RefundRow) -> QueryResult<()> {
    diesel::insert_into(refunds::table)
        .values(row.clone())
        .execute(conn)
        .map(|_| ())
}

/// Holds `amount` of the payment for a refund. The guard is the invariant itself: it
/// matches only while the payment has succeeded, no dispute of it is open, and at least
/// `amount` of what it captured is left (less what disputes took back), so of any number
/// of concurrent reservations only those that fit succeed. Returns whether it did.
pub fn reserve(conn: &mut DbConnection, payment_id: &str, amount: i64) -> QueryResult<bool> {
    diesel::update(
        payments::table
            .filter(payments::id.eq(payment_id))
            .filter(payments::status.eq(PaymentStatus::Succeeded.as_str()))
            .filter(payments::disputes_open.eq(0))
            .filter(
                (payments::amount_captured - payments::amount_reserved - payments::amount_disputed)
                    .ge(amount),
            ),
    )
    .set(payments::amount_reserved.eq(payments::amount_reserved + amount))
    .execute(conn)
    .map(|n| n == 1)
}

/// Gives back what a failed refund held. Callers guard it by the refund's own
/// `pending → failed` move, so it happens once per refund; the column's CHECK keeps it
/// from going below zero regardless.
pub fn release_reservation(
    conn: &mut DbConnection,
    payment_id: &str,
    amount: i64,
) -> QueryResult<()> {
    diesel::update(payments::table.filter(payments::id.eq(payment_id)))
        .set(payments::amount_reserved.eq(payments::amount_reserved - amount))
        .execute(conn)
        .map(|_| ())
}

/// Counts a succeeded refund into the payment's `amount_refunded`. Callers guard it by
/// the refund's own `pending → succeeded` move, so it happens once per refund.
pub fn add_refunded(
    conn: &mut DbConnection,
    payment_id: &str,
    amount: i64,
    at: Timestamp,
) -> QueryResult<()> {
    diesel::update(payments::table.filter(payments::id.eq(payment_id)))
        .set((
            payments::amount_refunded.eq(payments::amount_refunded + amount),
            payments::updated_at.eq(at),
        ))
        .execute(conn)
        .map(|_| ())
}

/// Sets the amount a claim resolved to (the request may have left it to "what is left").
pub fn set_amount(conn: &mut DbConnection, id: &str, amount: i64) -> QueryResult<()> {
    diesel::update(refunds::table.filter(refunds::id.eq(id)))
        .set(refunds::amount.eq(amount))
        .execute(conn)
        .map(|_| ())
}

/// Turns a fresh claim into a stored refusal: its answer is final and replayed.
pub fn reject(
    conn: &mut DbConnection,
    id: &str,
    amount: i64,
    response_status: i32,
    response_body: &str,
) -> QueryResult<()> {
    diesel::update(
        refunds::table
            .filter(refunds::id.eq(id))
            .filter(super::lease::still!(
                refunds::status,
                RefundStatus::Pending.as_str()
            )),
    )
    .set((
        refunds::amount.eq(amount),
        refunds::status.eq(RefundStatus::Rejected.as_str()),
        refunds::response_status.eq(response_status),
        refunds::response_body.eq(response_body),
        refunds::lease_token.eq(None::<String>),
        refunds::lease_expires_at.eq(None::<Timestamp>),
    ))
    .execute(conn)
    .map(|_| ())
}

pub fn find_by_idempotency_key(
    conn: &mut DbConnection,
    merchant_id: &str,
    key: &str,
) -> QueryResult<Option<RefundRow>> {
    refunds::table
        .filter(refunds::merchant_id.eq(super::unplanned(merchant_id)))
        .filter(refunds::idempotency_key.eq(key))
        .select(RefundRow::as_select())
        .first(conn)
        .optional()
}

/// Writes the final state and the response every retry will replay.
pub fn finish(conn: &mut DbConnection, row: &RefundRow) -> QueryResult<bool> {
    diesel::update(
        refunds::table
            .filter(refunds::id.eq(&row.id))
            .filter(super::lease::still!(
                refunds::status,
                RefundStatus::Pending.as_str()
            )),
    )
    .set((
        refunds::status.eq(row.status.as_str()),
        refunds::provider_refund_id.eq(&row.provider_refund_id),
        refunds::failure_code.eq(&row.failure_code),
        refunds::response_status.eq(row.response_status),
        refunds::response_body.eq(&row.response_body),
        refunds::lease_token.eq(None::<String>),
        refunds::lease_expires_at.eq(None::<Timestamp>),
        refunds::updated_at.eq(row.updated_at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// A payment's refunds, newest first (ids are time-ordered), `limit + 1` rows so the
/// caller can tell `has_more`. Rejected requests are not refunds and are left out. `None`
/// if `starting_after` names no refund of this payment.
pub fn list_for_payment(
    conn: &mut DbConnection,
    payment_id: &str,
    limit: i64,
    starting_after: Option<&str>,
) -> QueryResult<Option<Vec<RefundRow>>> {
    if let Some(cursor) = starting_after
        && !find_by_id(conn, cursor)?
            .is_some_and(|r| r.payment_id == payment_id && r.status != RefundStatus::Rejected)
    {
        return Ok(None);
    }
    let mut query = refunds::table
        .filter(refunds::payment_id.eq(payment_id))
        .filter(refunds::status.ne(RefundStatus::Rejected.as_str()))
        .select(RefundRow::as_select())
        .order(refunds::id.desc())
        .limit(limit + 1)
        .into_boxed();
    if let Some(cursor) = starting_after {
        query = query.filter(refunds::id.lt(cursor));
    }
    query.load(conn).map(Some)
}

/// Refund rows of a payment by status (tests and diagnostics).
pub fn count_by_status(
    conn: &mut DbConnection,
    payment_id: &str,
    status: &str,
) -> QueryResult<i64> {
    refunds::table
        .filter(refunds::payment_id.eq(payment_id))
        .filter(refunds::status.eq(status))
        .count()
        .get_result(conn)
}
