//! Captures and cancels of authorized payments (table `payment_operations`, one row per
//! capture or cancel), and the hold they take on their payment.
//!
//! At most one capture or cancel ever moves a payment: each claims the authorization with
//! one guarded update (`operation_id IS NULL AND status = 'requires_capture'`), so of any
//! number of racing requests, instances and expiry passes, exactly one holds it.

use diesel::prelude::*;

use super::pool::DbConnection;
use super::schema::{payment_operations, payments};
use crate::domain::{PaymentStatus, StepStatus, Timestamp};

super::lease::lease_protocol!(
    payment_operations,
    CaptureRow,
    StepStatus::Pending.as_str(),
    provider_charge_id
);

pub const CAPTURE: &str = "capture";
pub const CANCEL: &str = "cancel";

/// The status of a payment whose authorization a capture or cancel may hold.
const REQUIRES_CAPTURE: PaymentStatus = PaymentStatus::RequiresCapture;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = payment_operations)]
pub struct CaptureRow {
    pub id: String,
    pub merchant_id: String,
    pub payment_id: String,
    /// `capture` or `cancel`.
    pub kind: String,
    pub idempotency_key: String,
    pub request_fingerprint: String,
    /// What a capture charges (0 in a claim: all that is capturable); 0 for a cancel.
    pub amount: i64,
    pub cancellation_reason: Option<String>,
    pub provider_charge_id: Option<String>,
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub status: StepStatus,
    pub response_status: Option<i32>,
    pub response_body: Option<String>,
    pub lease_token: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub provider_attempts: i32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// What a capture or cancel needs to know about its payment.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payments)]
pub struct AuthorizedPayment {
    pub id: String,
    pub merchant_id: String,
    #[diesel(deserialize_as = String)]
    pub status: PaymentStatus,
    pub amount_capturable: i64,
    pub provider_charge_id: Option<String>,
    pub operation_id: Option<String>,
    pub authorized_at: Option<Timestamp>,
}

pub fn find_payment(
    conn: &mut DbConnection,
    merchant_id: &str,
    payment_id: &str,
) -> QueryResult<Option<AuthorizedPayment>> {
    payments::table
        .filter(payments::id.eq(payment_id))
        .filter(payments::merchant_id.eq(merchant_id))
        .select(AuthorizedPayment::as_select())
        .first(conn)
        .optional()
}

/// The claim: the insert whose unique (merchant_id, kind, idempotency_key) decides the
/// winner. A lost race comes back as `UniqueViolation`.
pub fn insert(conn: &mut DbConnection, row: &CaptureRow) -> QueryResult<()> {
    diesel::insert_into(payment_operations::table)
        .values(row.clone())
        .execute(conn)
        .map(|_| ())
}

/// Which authorizations a hold may take, by when they were given (the expiry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Age {
    /// Any: no authorization can have expired yet.
    Any,
    /// Only one given after this cutoff: a merchant's capture or cancel, which an expired
    /// authorization refuses even before the expiry has canceled it.
    Live(Timestamp),
    /// Only one given at or before it: the expiry's own cancel.
    Expired(Timestamp),
}

impl AuthorizedPayment {
    /// Whether this authorization is past `cutoff` with nothing holding it: the condition of
    /// [`find_expired`], for a payment already read.
    pub fn expired_by(&self, cutoff: Timestamp) -> bool {
        self.status == REQUIRES_CAPTURE
            && self.operation_id.is_none()
            && self.authorized_at.is_some_and(|at| at <= cutoff)
    }
}

/// Takes the payment's authorization for operation `operation_id`: only while it is
/// `requires_capture`, nobody else holds it, it holds at least `amount`, and its age is what
/// `age` allows. Returns whether this caller got it; of racing callers exactly one does.
/// The age is decided here, in the update, so that a capture and the expiry racing for one
/// authorization are decided like any two captures: by the one guarded write.
pub fn hold(
    conn: &mut DbConnection,
    payment_id: &str,
    operation_id: &str,
    amount: i64,
    age: Age,
) -> QueryResult<bool> {
    let mut update = diesel::update(
        payments::table
            .filter(payments::id.eq(payment_id))
            .filter(super::lease::still!(
                payments::status,
                REQUIRES_CAPTURE.as_str()
            ))
            .filter(payments::operation_id.is_null())
            .filter(payments::amount_capturable.ge(amount)),
    )
    .set(payments::operation_id.eq(operation_id))
    .into_boxed();
    update = match age {
        Age::Any => update,
        Age::Live(cutoff) => update.filter(payments::authorized_at.gt(cutoff)),
        Age::Expired(cutoff) => update.filter(payments::authorized_at.le(cutoff)),
    };
    update.execute(conn).map(|n| n == 1)
}

/// The provider refused the operation: the authorization is free again.
pub fn let_go(conn: &mut DbConnection, payment_id: &str, operation_id: &str) -> QueryResult<()> {
    diesel::update(
        payments::table
            .filter(payments::id.eq(payment_id))
            .filter(payments::operation_id.eq(operation_id)),
    )
    .set(payments::operation_id.eq(None::<String>))
    .execute(conn)
    .map(|_| ())
}

/// A capture went through: the payment is `succeeded` with `amount` charged and the rest
/// of the hold released. Only the operation holding the authorization can do this.
pub fn capture_payment(
    conn: &mut DbConnection,
    payment_id: &str,
    operation_id: &str,
    amount: i64,
    at: Timestamp,
) -> QueryResult<bool> {
    diesel::update(
        payments::table
            .filter(payments::id.eq(payment_id))
            .filter(payments::operation_id.eq(operation_id))
            .filter(super::lease::still!(
                payments::status,
                REQUIRES_CAPTURE.as_str()
            )),
    )
    .set((
        payments::status.eq(REQUIRES_CAPTURE.move_to(PaymentStatus::Succeeded)?.as_str()),
        payments::amount_captured.eq(amount),
        payments::amount_capturable.eq(0),
        payments::updated_at.eq(at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// A cancel went through: the authorization is released, nothing was charged.
pub fn cancel_payment(
    conn: &mut DbConnection,
    payment_id: &str,
    operation_id: &str,
    reason: Option<&str>,
    at: Timestamp,
) -> QueryResult<bool> {
    diesel::update(
        payments::table
            .filter(payments::id.eq(payment_id))
            .filter(payments::operation_id.eq(operation_id))
            .filter(super::lease::still!(
                payments::status,
                REQUIRES_CAPTURE.as_str()
            )),
    )
    .set((
        payments::status.eq(REQUIRES_CAPTURE.move_to(PaymentStatus::Canceled)?.as_str()),
        payments::amount_capturable.eq(0),
        payments::cancellation_reason.eq(reason),
        payments::updated_at.eq(at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// Sets what a claim resolved to: the amount (a capture may have left it to "all") and
/// the charge it works on.
pub fn set_claimed(
    conn: &mut DbConnection,
    id: &str,
    amount: i64,
    charge_id: &str,
) -> QueryResult<()> {
    diesel::update(payment_operations::table.filter(payment_operations::id.eq(id)))
        .set((
            payment_operations::amount.eq(amount),
            payment_operations::provider_charge_id.eq(charge_id),
        ))
        .execute(conn)
        .map(|_| ())
}

/// Turns a fresh claim into a stored refusal: its answer is final and replayed.
pub fn reject(
    conn: &mut DbConnection,
    id: &str,
    response_status: i32,
    response_body: &str,
) -> QueryResult<()> {
    diesel::update(
        payment_operations::table
            .filter(payment_operations::id.eq(id))
            .filter(super::lease::still!(
                payment_operations::status,
                StepStatus::Pending.as_str()
            )),
    )
    .set((
        payment_operations::status.eq(StepStatus::Rejected.as_str()),
        payment_operations::response_status.eq(response_status),
        payment_operations::response_body.eq(response_body),
        payment_operations::lease_token.eq(None::<String>),
        payment_operations::lease_expires_at.eq(None::<Timestamp>),
    ))
    .execute(conn)
    .map(|_| ())
}

pub fn find_by_idempotency_key(
    conn: &mut DbConnection,
    merchant_id: &str,
    kind: &str,
    key: &str,
) -> QueryResult<Option<CaptureRow>> {
    payment_operations::table
        .filter(payment_operations::merchant_id.eq(super::unplanned(merchant_id)))
        .filter(payment_operations::kind.eq(kind))
        .filter(payment_operations::idempotency_key.eq(key))
        .select(CaptureRow::as_select())
        .first(conn)
        .optional()
}

/// Writes the final state and the answer every retry will replay.
pub fn finish(conn: &mut DbConnection, row: &CaptureRow) -> QueryResult<bool> {
    diesel::update(
        payment_operations::table
            .filter(payment_operations::id.eq(&row.id))
            .filter(super::lease::still!(
                payment_operations::status,
                StepStatus::Pending.as_str()
            )),
    )
    .set((
        payment_operations::status.eq(row.status.as_str()),
        payment_operations::response_status.eq(row.response_status),
        payment_operations::response_body.eq(&row.response_body),
        payment_operations::lease_token.eq(None::<String>),
        payment_operations::lease_expires_at.eq(None::<Timestamp>),
        payment_operations::updated_at.eq(row.updated_at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// Authorizations given before `authorized_before` that no capture or cancel holds:
/// `(payment id, merchant id)`, oldest first.
pub fn find_expired(
    conn: &mut DbConnection,
    authorized_before: Timestamp,
    limit: i64,
) -> QueryResult<Vec<(String, String)>> {
    payments::table
        .filter(payments::status.eq(REQUIRES_CAPTURE.as_str()))
        .filter(payments::operation_id.is_null())
        .filter(payments::authorized_at.le(authorized_before))
        .order(payments::authorized_at.asc())
        .limit(limit)
        .select((payments::id, payments::merchant_id))
        .load(conn)
}
