//! What reconciliation reads and writes: our money moves by reference and by time, the
//! movements a run has matched, the discrepancies, and the lease of the one running.

use diesel::dsl::{exists, not};
use diesel::prelude::*;

use super::pool::DbConnection;
use super::schema::{
    balance_transactions, disputes, payments, payouts, reconciliation_discrepancies,
    reconciliation_lease, reconciliation_seen, refunds,
};
use crate::domain::{DisputeStatus, PaymentStatus, PayoutStatus, RefundStatus, Timestamp};

/// The one lease row.
const LEASE: &str = "reconcile";

// --- our records, by reference ---

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payments)]
pub struct OurPayment {
    pub id: String,
    #[diesel(deserialize_as = String)]
    pub status: PaymentStatus,
    pub capture_method: String,
    pub amount_captured: i64,
    pub currency: String,
}

pub fn payments_by_id(conn: &mut DbConnection, ids: &[&str]) -> QueryResult<Vec<OurPayment>> {
    payments::table
        .filter(payments::id.eq_any(ids))
        .select(OurPayment::as_select())
        .load(conn)
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = refunds)]
pub struct OurRefund {
    pub id: String,
    #[diesel(deserialize_as = String)]
    pub status: RefundStatus,
    pub amount: i64,
    pub currency: String,
}

pub fn refunds_by_id(conn: &mut DbConnection, ids: &[&str]) -> QueryResult<Vec<OurRefund>> {
    refunds::table
        .filter(refunds::id.eq_any(ids))
        .select(OurRefund::as_select())
        .load(conn)
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payouts)]
pub struct OurPayout {
    pub id: String,
    #[diesel(deserialize_as = String)]
    pub status: PayoutStatus,
    pub amount: i64,
    pub currency: String,
}

pub fn payouts_by_id(conn: &mut DbConnection, ids: &[&str]) -> QueryResult<Vec<OurPayout>> {
    payouts::table
        .filter(payouts::id.eq_any(ids))
        .select(OurPayout::as_select())
        .load(conn)
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = disputes)]
pub struct OurDispute {
    pub id: String,
    pub payment_id: String,
    #[diesel(deserialize_as = String)]
    pub status: DisputeStatus,
    pub amount: i64,
    pub currency: String,
}

pub fn disputes_of(conn: &mut DbConnection, payment_ids: &[&str]) -> QueryResult<Vec<OurDispute>> {
    disputes::table
        .filter(disputes::payment_id.eq_any(payment_ids))
        .select(OurDispute::as_select())
        .load(conn)
}

// --- what a run has matched ---

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = reconciliation_seen)]
pub struct SeenRow {
    pub run_id: String,
    pub movement_type: String,
    pub reference: String,
    pub movement_id: String,
}

/// Of `references`, those this run has matched a movement of `movement_type` to already:
/// (reference, that movement's id).
pub fn seen(
    conn: &mut DbConnection,
    run_id: &str,
    movement_type: &str,
    references: &[&str],
) -> QueryResult<Vec<(String, String)>> {
    reconciliation_seen::table
        .filter(reconciliation_seen::run_id.eq(run_id))
        .filter(reconciliation_seen::movement_type.eq(movement_type))
        .filter(reconciliation_seen::reference.eq_any(references))
        .select((
            reconciliation_seen::reference,
            reconciliation_seen::movement_id,
        ))
        .load(conn)
}

pub fn mark_seen(conn: &mut DbConnection, rows: &[SeenRow]) -> QueryResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    super::insert::insert_rows!(conn, reconciliation_seen::table, rows, InsertSeen)
}

super::insert::unnest_insert! {
    /// The movements a reconciliation run matched, in one prepared statement.
    InsertSeen<'a> for SeenRow => "reconciliation_seen" {
        run_id: diesel::sql_types::Text = |r| -> &'a str { &r.run_id },
        movement_type: diesel::sql_types::Text = |r| -> &'a str { &r.movement_type },
        reference: diesel::sql_types::Text = |r| -> &'a str { &r.reference },
        movement_id: diesel::sql_types::Text = |r| -> &'a str { &r.movement_id },
    }
}

pub fn forget_run(conn: &mut DbConnection, run_id: &str) -> QueryResult<()> {
    diesel::delete(reconciliation_seen::table.filter(reconciliation_seen::run_id.eq(run_id)))
        .execute(conn)
        .map(|_| ())
}

// --- our money moves in a window that no movement matched ---

/// One of our money moves: its movement type, reference, money, and when it became final.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurMove {
    pub movement_type: &'static str,
    pub reference: String,
    /// Which of the reference's moves of this type it is, when it may have several: the
    /// dispute, for a dispute's movements (they name its payment).
    pub dispute: Option<String>,
    pub amount: i64,
    pub currency: String,
    pub at: Timestamp,
}

/// Captured payments (their `charge` balance transaction) in `[from, to)` that run `run_id`
/// matched no movement to, after `after` by payment id, at most `limit`.
pub fn unmatched_charges(
    conn: &mut DbConnection,
    run_id: &str,
    (from, to): (Timestamp, Timestamp),
    after: &str,
    limit: i64,
) -> QueryResult<Vec<OurMove>> {
    let matched = reconciliation_seen::table
        .filter(reconciliation_seen::run_id.eq(run_id))
        .filter(reconciliation_seen::movement_type.eq_any(["charge", "capture"]))
        .filter(reconciliation_seen::reference.eq(balance_transactions::source_id));
    let rows: Vec<(String, String, i64, String, Timestamp)> = balance_transactions::table
        .inner_join(payments::table.on(payments::id.eq(balance_transactions::source_id)))
        .filter(balance_transactions::txn_type.eq("charge"))
        .filter(balance_transactions::created_at.ge(from))
        .filter(balance_transactions::created_at.lt(to))
        .filter(balance_transactions::source_id.gt(after))
        .filter(not(exists(matched)))
        .order(balance_transactions::source_id.asc())
        .limit(limit)
        .select((
            balance_transactions::source_id,
            payments::capture_method,
            balance_transactions::amount,
            balance_transactions::currency,
            balance_transactions::created_at,
        ))
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(reference, method, amount, currency, at)| OurMove {
            dispute: None,
            movement_type: if method == "manual" {
                "capture"
            } else {
                "charge"
            },
            reference,
            amount,
            currency,
            at,
        })
        .collect())
}

/// Defines `$name`: the rows of `$table` in status `$status` that became final (their last
/// update) in `[from, to)` and that run `run_id` matched no `$movement` to, after `after` by
/// id, at most `limit`: refunds that succeeded, payouts that were paid.
macro_rules! unmatched_final {
    ($name:ident, $table:ident, $status:expr, $movement:literal) => {
        pub fn $name(
            conn: &mut DbConnection,
            run_id: &str,
            (from, to): (Timestamp, Timestamp),
            after: &str,
            limit: i64,
        ) -> QueryResult<Vec<OurMove>> {
            let matched = reconciliation_seen::table
                .filter(reconciliation_seen::run_id.eq(run_id))
                .filter(reconciliation_seen::movement_type.eq($movement))
                .filter(reconciliation_seen::reference.eq($table::id));
            let rows: Vec<(String, i64, String, Timestamp)> = $table::table
                .filter($table::status.eq($status.as_str()))
                .filter($table::updated_at.ge(from))
                .filter($table::updated_at.lt(to))
                .filter($table::id.gt(after))
                .filter(not(exists(matched)))
                .order($table::id.asc())
                .limit(limit)
                .select((
                    $table::id,
                    $table::amount,
                    $table::currency,
                    $table::updated_at,
                ))
                .load(conn)?;
            Ok(rows
                .into_iter()
                .map(|(reference, amount, currency, at)| OurMove {
                    dispute: None,
                    movement_type: $movement,
                    reference,
                    amount,
                    currency,
                    at,
                })
                .collect())
        }
    };
}

unmatched_final!(
    unmatched_refunds,
    refunds,
    RefundStatus::Succeeded,
    "refund"
);
unmatched_final!(unmatched_payouts, payouts, PayoutStatus::Paid, "payout");

/// Disputes opened (`dispute`) or won (`dispute_reversal`) in `[from, to)` by their balance
/// transaction, unmatched (as above; the movement names the disputed payment). Paged by
/// transaction id.
pub fn unmatched_disputes(
    conn: &mut DbConnection,
    run_id: &str,
    (from, to): (Timestamp, Timestamp),
    after: &str,
    limit: i64,
) -> QueryResult<Vec<(String, OurMove)>> {
    // A run marks a dispute's movement seen by the dispute's id: a payment may have several.
    let matched = reconciliation_seen::table
        .filter(reconciliation_seen::run_id.eq(run_id))
        .filter(reconciliation_seen::movement_type.eq(balance_transactions::txn_type))
        .filter(reconciliation_seen::reference.eq(disputes::id));
    let rows: Vec<(String, String, String, String, i64, String, Timestamp)> =
        balance_transactions::table
            .inner_join(disputes::table.on(disputes::id.eq(balance_transactions::source_id)))
            .filter(balance_transactions::txn_type.eq_any(["dispute", "dispute_reversal"]))
            .filter(balance_transactions::created_at.ge(from))
            .filter(balance_transactions::created_at.lt(to))
            .filter(balance_transactions::id.gt(after))
            .filter(not(exists(matched)))
            .order(balance_transactions::id.asc())
            .limit(limit)
            .select((
                balance_transactions::id,
                balance_transactions::txn_type,
                disputes::id,
                disputes::payment_id,
                disputes::amount,
                balance_transactions::currency,
                balance_transactions::created_at,
            ))
            .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|(txn, kind, dispute, reference, amount, currency, at)| {
            let movement_type = if kind == "dispute" {
                "dispute"
            } else {
                "dispute_reversal"
            };
            (
                txn,
                OurMove {
                    movement_type,
                    reference,
                    dispute: Some(dispute),
                    amount,
                    currency,
                    at,
                },
            )
        })
        .collect())
}

// --- discrepancies ---

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = reconciliation_discrepancies)]
pub struct DiscrepancyRow {
    pub id: String,
    pub fingerprint: String,
    pub kind: String,
    pub movement_type: String,
    pub reference: String,
    pub provider_movement_id: Option<String>,
    pub expected_amount: Option<i64>,
    pub expected_currency: Option<String>,
    pub found_amount: Option<i64>,
    pub found_currency: Option<String>,
    pub occurred_at: Timestamp,
    pub first_seen_at: Timestamp,
    pub last_seen_at: Timestamp,
    pub last_run_id: String,
    pub resolved_at: Option<Timestamp>,
}

/// Stores a discrepancy once: a new one is inserted; one stored before is seen again (and
/// open again if it had been resolved). Returns it as stored (its `first_seen_at` is the
/// first run's).
pub fn store(conn: &mut DbConnection, row: &DiscrepancyRow) -> QueryResult<DiscrepancyRow> {
    let updated = diesel::update(
        reconciliation_discrepancies::table
            .filter(reconciliation_discrepancies::fingerprint.eq(&row.fingerprint)),
    )
    .set((
        reconciliation_discrepancies::last_seen_at.eq(row.last_seen_at),
        reconciliation_discrepancies::last_run_id.eq(&row.last_run_id),
        reconciliation_discrepancies::resolved_at.eq(None::<Timestamp>),
    ))
    .execute(conn)?;
    if updated == 0 {
        diesel::insert_into(reconciliation_discrepancies::table)
            .values(row.clone())
            .execute(conn)?;
    }
    reconciliation_discrepancies::table
        .filter(reconciliation_discrepancies::fingerprint.eq(&row.fingerprint))
        .select(DiscrepancyRow::as_select())
        .first(conn)
}

/// Marks resolved the open discrepancies of `[from, to)` that run `run_id` did not find
/// again. Returns how many.
pub fn resolve_unseen(
    conn: &mut DbConnection,
    run_id: &str,
    (from, to): (Timestamp, Timestamp),
    at: Timestamp,
) -> QueryResult<usize> {
    diesel::update(
        reconciliation_discrepancies::table
            .filter(reconciliation_discrepancies::resolved_at.is_null())
            .filter(reconciliation_discrepancies::occurred_at.ge(from))
            .filter(reconciliation_discrepancies::occurred_at.lt(to))
            .filter(reconciliation_discrepancies::last_run_id.ne(run_id)),
    )
    .set(reconciliation_discrepancies::resolved_at.eq(at))
    .execute(conn)
}

/// The open discrepancies, by kind.
pub fn open_by_kind(conn: &mut DbConnection) -> QueryResult<Vec<(String, i64)>> {
    reconciliation_discrepancies::table
        .filter(reconciliation_discrepancies::resolved_at.is_null())
        .group_by(reconciliation_discrepancies::kind)
        .select((
            reconciliation_discrepancies::kind,
            diesel::dsl::count_star(),
        ))
        .load(conn)
}

/// The open discrepancies about one merchant's money moves (a reference that is one of its
/// payments, refunds or payouts), the newest first, at most `limit`. A provider movement
/// naming nothing of ours belongs to no merchant: the command and the metric show those.
pub fn open_for_merchant(
    conn: &mut DbConnection,
    merchant_id: &str,
    limit: i64,
) -> QueryResult<Vec<DiscrepancyRow>> {
    use super::schema::{payments, payouts, refunds};
    let reference = reconciliation_discrepancies::reference;
    let payment = reference.eq_any(
        payments::table
            .filter(payments::merchant_id.eq(merchant_id))
            .select(payments::id),
    );
    let refund = reference.eq_any(
        refunds::table
            .filter(refunds::merchant_id.eq(merchant_id))
            .select(refunds::id),
    );
    let payout = reference.eq_any(
        payouts::table
            .filter(payouts::merchant_id.eq(merchant_id))
            .select(payouts::id),
    );
    reconciliation_discrepancies::table
        .filter(reconciliation_discrepancies::resolved_at.is_null())
        .filter(payment.or(refund).or(payout))
        .order(reconciliation_discrepancies::first_seen_at.desc())
        .limit(limit)
        .select(DiscrepancyRow::as_select())
        .load(conn)
}

// --- one run at a time ---

/// Takes the lease for run `run_id` until `until`, if nobody holds it. True if taken.
pub fn take_lease(
    conn: &mut DbConnection,
    run_id: &str,
    now: Timestamp,
    until: Timestamp,
) -> QueryResult<bool> {
    diesel::update(
        reconciliation_lease::table
            .filter(reconciliation_lease::name.eq(LEASE))
            .filter(
                reconciliation_lease::held_until
                    .is_null()
                    .or(reconciliation_lease::held_until.le(now)),
            ),
    )
    .set((
        reconciliation_lease::holder.eq(run_id),
        reconciliation_lease::held_until.eq(until),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// Keeps the lease of a run that is still going. False: it was lost (taken over after it
/// ran out).
pub fn renew_lease(conn: &mut DbConnection, run_id: &str, until: Timestamp) -> QueryResult<bool> {
    diesel::update(
        reconciliation_lease::table
            .filter(reconciliation_lease::name.eq(LEASE))
            .filter(reconciliation_lease::holder.eq(run_id)),
    )
    .set(reconciliation_lease::held_until.eq(until))
    .execute(conn)
    .map(|n| n == 1)
}

pub fn release_lease(conn: &mut DbConnection, run_id: &str) -> QueryResult<()> {
    diesel::update(
        reconciliation_lease::table
            .filter(reconciliation_lease::name.eq(LEASE))
            .filter(reconciliation_lease::holder.eq(run_id)),
    )
    .set((
        reconciliation_lease::holder.eq(None::<String>),
        reconciliation_lease::held_until.eq(None::<Timestamp>),
    ))
    .execute(conn)
    .map(|_| ())
}

/// Claims the scheduled run due at `now` for this instance: of all instances asking, one
/// gets each due run, and the next is due `every` later. The first claim only schedules.
/// Returns whether a run is due for this caller.
pub fn claim_scheduled(
    conn: &mut DbConnection,
    now: Timestamp,
    every: chrono::Duration,
) -> QueryResult<bool> {
    let first = diesel::update(
        reconciliation_lease::table
            .filter(reconciliation_lease::name.eq(LEASE))
            .filter(reconciliation_lease::next_run_at.is_null()),
    )
    .set(reconciliation_lease::next_run_at.eq(now + every))
    .execute(conn)?;
    if first == 1 {
        return Ok(false);
    }
    diesel::update(
        reconciliation_lease::table
            .filter(reconciliation_lease::name.eq(LEASE))
            .filter(reconciliation_lease::next_run_at.le(now)),
    )
    .set(reconciliation_lease::next_run_at.eq(now + every))
    .execute(conn)
    .map(|n| n == 1)
}
