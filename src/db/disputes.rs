//! Dispute rows, and the provider's dispute events waiting for their payment to be final
//! (the steps a merchant takes on a dispute are in [`super::dispute_steps`]).
//!
//! A dispute holds money on its payment through two numbers: `amount_disputed` (the amount
//! of its open and lost disputes) and `disputes_open`. Every update that moves them is
//! guarded by the dispute's own status move, so each happens once. One step at a time may
//! be at the provider for a dispute: it holds the dispute through `step_id`, like a capture
//! holds its authorization.

use diesel::prelude::*;

use super::pool::DbConnection;
use super::schema::{deferred_disputes, disputes, payments};
use crate::domain::{DisputeStatus, Timestamp};

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = disputes)]
pub struct DisputeRow {
    pub id: String,
    pub merchant_id: String,
    pub payment_id: String,
    pub provider_dispute_id: String,
    pub amount: i64,
    pub currency: String,
    pub reason: String,
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub status: DisputeStatus,
    pub evidence_text: Option<String>,
    pub evidence_submitted_at: Option<Timestamp>,
    pub evidence_due_by: Timestamp,
    pub step_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Inserts a dispute the provider opened. A second opening of the same provider dispute
/// (another webhook id, at the same moment) is told apart by the unique provider id: it
/// inserts nothing and answers false, and the caller's transaction goes on (savepoint).
pub fn insert(conn: &mut DbConnection, row: &DisputeRow) -> QueryResult<bool> {
    use diesel::result::{DatabaseErrorKind, Error};
    let inserted = conn.transaction(|conn| {
        diesel::insert_into(disputes::table)
            .values(row.clone())
            .execute(conn)
    });
    match inserted {
        Ok(_) => Ok(true),
        Err(Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => Ok(false),
        Err(e) => Err(e),
    }
}

pub fn find_by_id(conn: &mut DbConnection, id: &str) -> QueryResult<Option<DisputeRow>> {
    disputes::table
        .filter(disputes::id.eq(id))
        .select(DisputeRow::as_select())
        .first(conn)
        .optional()
}

pub fn find_for_merchant(
    conn: &mut DbConnection,
    merchant_id: &str,
    id: &str,
) -> QueryResult<Option<DisputeRow>> {
    disputes::table
        .filter(disputes::id.eq(id))
        .filter(disputes::merchant_id.eq(merchant_id))
        .select(DisputeRow::as_select())
        .first(conn)
        .optional()
}

pub fn find_by_provider_id(
    conn: &mut DbConnection,
    provider_dispute_id: &str,
) -> QueryResult<Option<DisputeRow>> {
    disputes::table
        .filter(disputes::provider_dispute_id.eq(provider_dispute_id))
        .select(DisputeRow::as_select())
        .first(conn)
        .optional()
}

/// The merchant's disputes, newest first, `limit + 1` rows. `None` if `starting_after`
/// names no dispute of the merchant.
pub fn list(
    conn: &mut DbConnection,
    merchant_id: &str,
    limit: i64,
    starting_after: Option<&str>,
    status: Option<DisputeStatus>,
    payment_id: Option<&str>,
) -> QueryResult<Option<Vec<DisputeRow>>> {
    if let Some(cursor) = starting_after
        && find_for_merchant(conn, merchant_id, cursor)?.is_none()
    {
        return Ok(None);
    }
    let mut query = disputes::table
        .filter(disputes::merchant_id.eq(merchant_id))
        .select(DisputeRow::as_select())
        .order(disputes::id.desc())
        .limit(limit + 1)
        .into_boxed();
    if let Some(cursor) = starting_after {
        query = query.filter(disputes::id.lt(cursor));
    }
    if let Some(status) = status {
        query = query.filter(disputes::status.eq(status.as_str()));
    }
    if let Some(payment_id) = payment_id {
        query = query.filter(disputes::payment_id.eq(payment_id));
    }
    query.load(conn).map(Some)
}

/// A merchant's open disputes, the soonest evidence due date first (`open`), or its closed
/// ones, newest first; at most `limit`.
pub fn by_openness(
    conn: &mut DbConnection,
    merchant_id: &str,
    open: bool,
    limit: i64,
) -> QueryResult<Vec<DisputeRow>> {
    let statuses: Vec<&str> = DisputeStatus::ALL
        .iter()
        .filter(|s| s.is_open() == open)
        .map(|s| s.as_str())
        .collect();
    let query = disputes::table
        .filter(disputes::merchant_id.eq(merchant_id))
        .filter(disputes::status.eq_any(statuses))
        .select(DisputeRow::as_select())
        .limit(limit);
    if open {
        query
            .order((disputes::evidence_due_by.asc(), disputes::id.asc()))
            .load(conn)
    } else {
        query.order(disputes::id.desc()).load(conn)
    }
}

/// Moves a dispute from `from` to `to` (the caller checked the move is legal): false if it
/// was not `from` any more (someone else moved it first).
pub fn move_status(
    conn: &mut DbConnection,
    id: &str,
    from: DisputeStatus,
    to: DisputeStatus,
    at: Timestamp,
) -> QueryResult<bool> {
    diesel::update(
        disputes::table
            .filter(disputes::id.eq(id))
            .filter(disputes::status.eq(from.as_str())),
    )
    .set((
        disputes::status.eq(to.as_str()),
        disputes::updated_at.eq(at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// Saves evidence on a dispute that takes it: `needs_response`, with no step at the
/// provider. `None` keeps the evidence saved before (a submit alone sends the draft). With
/// `step_id`, the step also takes the dispute (a submit). False: it does not take evidence
/// now.
pub fn save_evidence(
    conn: &mut DbConnection,
    id: &str,
    text: Option<&str>,
    step_id: Option<&str>,
    at: Timestamp,
) -> QueryResult<bool> {
    let target = disputes::table
        .filter(disputes::id.eq(id))
        .filter(disputes::status.eq(DisputeStatus::NeedsResponse.as_str()))
        .filter(disputes::step_id.is_null());
    match text {
        Some(text) => diesel::update(target)
            .set((
                disputes::evidence_text.eq(text),
                disputes::step_id.eq(step_id),
                disputes::updated_at.eq(at),
            ))
            .execute(conn),
        None => diesel::update(target)
            .set((disputes::step_id.eq(step_id), disputes::updated_at.eq(at)))
            .execute(conn),
    }
    .map(|n| n == 1)
}

/// Takes the dispute for a close: only while `needs_response` with no step at the provider.
pub fn hold(conn: &mut DbConnection, id: &str, step_id: &str, at: Timestamp) -> QueryResult<bool> {
    diesel::update(
        disputes::table
            .filter(disputes::id.eq(id))
            .filter(disputes::status.eq(DisputeStatus::NeedsResponse.as_str()))
            .filter(disputes::step_id.is_null()),
    )
    .set((disputes::step_id.eq(step_id), disputes::updated_at.eq(at)))
    .execute(conn)
    .map(|n| n == 1)
}

/// The step is over: the dispute takes the next one. Marks the evidence submitted when
/// `submitted_at` is given (a change of the dispute, so its `updated_at` too: the step may
/// end after the provider decided the dispute, which then does not move again).
pub fn let_go(
    conn: &mut DbConnection,
    id: &str,
    step_id: &str,
    submitted_at: Option<Timestamp>,
) -> QueryResult<()> {
    let target = disputes::table
        .filter(disputes::id.eq(id))
        .filter(disputes::step_id.eq(step_id));
    match submitted_at {
        Some(at) => diesel::update(target)
            .set((
                disputes::step_id.eq(None::<String>),
                disputes::evidence_submitted_at.eq(at),
                disputes::updated_at.eq(at),
            ))
            .execute(conn),
        None => diesel::update(target)
            .set(disputes::step_id.eq(None::<String>))
            .execute(conn),
    }
    .map(|_| ())
}

/// A dispute opened on the payment: its amount is disputed and refunds wait. False (nothing
/// changed) when the payment's disputes would together hold more than was captured; the
/// guard is in the write, so concurrent openings are decided one after the other.
pub fn open_on_payment(
    conn: &mut DbConnection,
    payment_id: &str,
    amount: i64,
) -> QueryResult<bool> {
    diesel::update(
        payments::table
            .filter(payments::id.eq(payment_id))
            .filter((payments::amount_captured - payments::amount_disputed).ge(amount)),
    )
    .set((
        payments::amount_disputed.eq(payments::amount_disputed + amount),
        payments::disputes_open.eq(payments::disputes_open + 1),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// A dispute of the payment closed: no longer open; a won one no longer disputed.
pub fn close_on_payment(
    conn: &mut DbConnection,
    payment_id: &str,
    amount: i64,
    won: bool,
) -> QueryResult<()> {
    let given_back = if won { amount } else { 0 };
    diesel::update(payments::table.filter(payments::id.eq(payment_id)))
        .set((
            payments::amount_disputed.eq(payments::amount_disputed - given_back),
            payments::disputes_open.eq(payments::disputes_open - 1),
        ))
        .execute(conn)
        .map(|_| ())
}

/// What a dispute needs to know about its payment.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payments)]
pub struct DisputedPayment {
    pub id: String,
    pub merchant_id: String,
    #[diesel(deserialize_as = String)]
    pub status: crate::domain::PaymentStatus,
    pub currency: String,
    pub provider_charge_id: Option<String>,
}

pub fn find_payment(conn: &mut DbConnection, id: &str) -> QueryResult<Option<DisputedPayment>> {
    payments::table
        .filter(payments::id.eq(id))
        .select(DisputedPayment::as_select())
        .first(conn)
        .optional()
}

/// Serialises, until the end of the caller's transaction, every provider event of one
/// provider dispute (its opening, its moves, and a kept one applied later), on every
/// instance: each then reads what the one before it committed. Without it an opening and a
/// move arriving at once each missed the other's write: the move was kept "until the
/// opening" after the opening had looked for kept moves, and was never applied. The caller
/// has recorded the webhook already (on SQLite that holds the write lock).
pub fn lock_provider_dispute(
    conn: &mut DbConnection,
    provider_dispute_id: &str,
) -> QueryResult<()> {
    super::lock_until_commit(conn, &format!("dispute:{provider_dispute_id}"))
}

// --- deferred provider events ---

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = deferred_disputes)]
pub struct DeferredRow {
    pub webhook_id: String,
    pub provider_dispute_id: String,
    pub payment_id: String,
    pub event_type: String,
    pub data: String,
    pub created_at: Timestamp,
}

/// Keeps an event for later (once per webhook id: its redelivery is a duplicate before it
/// gets here).
pub fn defer(conn: &mut DbConnection, row: &DeferredRow) -> QueryResult<()> {
    diesel::insert_into(deferred_disputes::table)
        .values(row.clone())
        .execute(conn)
        .map(|_| ())
}

/// The payment a kept `charge.dispute.created` of this provider dispute waits for, if one
/// is kept: later events of the dispute wait with it.
pub fn deferred_payment_of(
    conn: &mut DbConnection,
    provider_dispute_id: &str,
) -> QueryResult<Option<String>> {
    deferred_disputes::table
        .filter(deferred_disputes::provider_dispute_id.eq(provider_dispute_id))
        .filter(deferred_disputes::payment_id.ne(UNTIL_OPENED))
        .select(deferred_disputes::payment_id)
        .first(conn)
        .optional()
}

/// What a kept event's `payment_id` is while it waits for its dispute to open rather than
/// for a payment (a move that came before the dispute's opening).
pub const UNTIL_OPENED: &str = "";

/// The kept moves of a provider dispute that came before its opening, oldest first.
pub fn kept_moves(
    conn: &mut DbConnection,
    provider_dispute_id: &str,
) -> QueryResult<Vec<DeferredRow>> {
    deferred_disputes::table
        .filter(deferred_disputes::provider_dispute_id.eq(provider_dispute_id))
        .filter(deferred_disputes::payment_id.eq(UNTIL_OPENED))
        .order((
            deferred_disputes::created_at.asc(),
            deferred_disputes::webhook_id.asc(),
        ))
        .select(DeferredRow::as_select())
        .load(conn)
}

/// Kept events whose payment is final now, oldest first.
pub fn ready(conn: &mut DbConnection, limit: i64) -> QueryResult<Vec<DeferredRow>> {
    use crate::domain::PaymentStatus;
    let finals = [
        PaymentStatus::Succeeded.as_str(),
        PaymentStatus::Failed.as_str(),
        PaymentStatus::Canceled.as_str(),
    ];
    deferred_disputes::table
        .inner_join(payments::table.on(payments::id.eq(deferred_disputes::payment_id)))
        .filter(payments::status.eq_any(finals))
        .order((
            deferred_disputes::created_at.asc(),
            deferred_disputes::webhook_id.asc(),
        ))
        .limit(limit)
        .select(DeferredRow::as_select())
        .load(conn)
}

/// The kept events that wait for these payments, oldest first: applied in the transaction
/// that captures them.
pub fn kept_for(conn: &mut DbConnection, payment_ids: &[&str]) -> QueryResult<Vec<DeferredRow>> {
    deferred_disputes::table
        .filter(deferred_disputes::payment_id.eq_any(payment_ids))
        .order((
            deferred_disputes::created_at.asc(),
            deferred_disputes::webhook_id.asc(),
        ))
        .select(DeferredRow::as_select())
        .load(conn)
}

/// Whether an opening of a dispute of this payment is kept, waiting to be applied: the
/// provider has told us the money is disputed, so refunds wait as for an open dispute.
pub fn opening_kept(
    conn: &mut DbConnection,
    payment_id: &str,
    opening_type: &str,
) -> QueryResult<bool> {
    diesel::select(diesel::dsl::exists(
        deferred_disputes::table
            .filter(deferred_disputes::payment_id.eq(payment_id))
            .filter(deferred_disputes::event_type.eq(opening_type)),
    ))
    .get_result(conn)
}

/// Takes a kept event to apply it: true for exactly one of concurrent takers.
pub fn take(conn: &mut DbConnection, webhook_id: &str) -> QueryResult<bool> {
    diesel::delete(deferred_disputes::table.filter(deferred_disputes::webhook_id.eq(webhook_id)))
        .execute(conn)
        .map(|n| n == 1)
}
