//! The two statements every new payment runs, written so PostgreSQL prepares them once
//! per connection.
//!
//! diesel never caches an `UPDATE` (nor an `INSERT` with optional values) as a prepared
//! statement, so through its DSL both are parsed and planned on every payment — about a
//! third of the database's CPU per payment, measured with `scripts/bench.sh`. These
//! fragments have a static query id and a fixed text, so diesel's statement cache keeps
//! them. The SQL is the same as the DSL's in `payments.rs`, which SQLite still uses.

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Integer, Nullable, Text, Timestamp};
use diesel::{QueryResult, RunQueryDsl};

use super::payments::PaymentRow;

/// `INSERT INTO payments (…all columns…) VALUES (…)`: the claim.
pub struct InsertPayment<'a>(pub &'a PaymentRow);

/// `UPDATE payments SET <final state> WHERE id = ? AND status = 'processing'`.
pub struct FinishPayment<'a>(pub &'a PaymentRow);

/// Group commit of claims: `INSERT … VALUES (…), (…) ON CONFLICT DO NOTHING RETURNING id`.
/// A row whose key is taken is not inserted and its id not returned. Not a static query:
/// diesel caches it by its text, one statement per batch size.
pub struct InsertPayments<'a>(pub &'a [&'a PaymentRow]);

/// Group commit of finishes: `UPDATE payments AS p SET <final state> FROM (VALUES (…), (…))
/// AS v WHERE p.id = v.id AND p.status = 'processing' RETURNING p.id`. Ids must be distinct.
pub struct FinishPayments<'a>(pub &'a [&'a PaymentRow]);

impl QueryId for InsertPayment<'_> {
    type QueryId = InsertPayment<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl QueryId for FinishPayment<'_> {
    type QueryId = FinishPayment<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

const INSERT_PAYMENTS: &str = "INSERT INTO payments (id, merchant_id, idempotency_key, \
     request_fingerprint, amount, currency, payment_method, customer_id, description, metadata, \
     status, amount_refunded, provider_charge_id, failure_code, failure_message, \
     response_status, response_body, lease_token, lease_expires_at, provider_attempts, \
     created_at, updated_at, capture_method) VALUES ";

/// `(…the values of every column the claim sets…)`.
fn push_claim_values<'b>(out: &mut AstPass<'_, 'b, Pg>, r: &'b PaymentRow) -> QueryResult<()> {
    out.push_sql("(");
    out.push_bind_param::<Text, _>(&r.id)?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(&r.merchant_id)?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(&r.idempotency_key)?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(&r.request_fingerprint)?;
    out.push_sql(", ");
    out.push_bind_param::<BigInt, _>(&r.amount)?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(&r.currency)?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(&r.payment_method)?;
    out.push_sql(", ");
    out.push_bind_param::<Nullable<Text>, _>(&r.customer_id)?;
    out.push_sql(", ");
    out.push_bind_param::<Nullable<Text>, _>(&r.description)?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(&r.metadata)?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(&r.status)?;
    out.push_sql(", ");
    out.push_bind_param::<BigInt, _>(&r.amount_refunded)?;
    out.push_sql(", ");
    out.push_bind_param::<Nullable<Text>, _>(&r.provider_charge_id)?;
    out.push_sql(", ");
    out.push_bind_param::<Nullable<Text>, _>(&r.failure_code)?;
    out.push_sql(", ");
    out.push_bind_param::<Nullable<Text>, _>(&r.failure_message)?;
    out.push_sql(", ");
    out.push_bind_param::<Nullable<Integer>, _>(&r.response_status)?;
    out.push_sql(", ");
    out.push_bind_param::<Nullable<Text>, _>(&r.response_body)?;
    out.push_sql(", ");
    out.push_bind_param::<Nullable<Text>, _>(&r.lease_token)?;
    out.push_sql(", ");
    out.push_bind_param::<Nullable<Timestamp>, _>(&r.lease_expires_at)?;
    out.push_sql(", ");
    out.push_bind_param::<Integer, _>(&r.provider_attempts)?;
    out.push_sql(", ");
    out.push_bind_param::<Timestamp, _>(&r.created_at)?;
    out.push_sql(", ");
    out.push_bind_param::<Timestamp, _>(&r.updated_at)?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(&r.capture_method)?;
    out.push_sql(")");
    Ok(())
}

impl QueryFragment<Pg> for InsertPayment<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(INSERT_PAYMENTS);
        push_claim_values(&mut out, self.0)
    }
}

impl QueryFragment<Pg> for InsertPayments<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(INSERT_PAYMENTS);
        for (n, row) in self.0.iter().enumerate() {
            if n > 0 {
                out.push_sql(", ");
            }
            push_claim_values(&mut out, row)?;
        }
        out.push_sql(" ON CONFLICT DO NOTHING RETURNING id");
        Ok(())
    }
}

impl QueryFragment<Pg> for FinishPayment<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let r = self.0;
        out.push_sql("UPDATE payments SET status = ");
        out.push_bind_param::<Text, _>(&r.status)?;
        out.push_sql(", provider_charge_id = ");
        out.push_bind_param::<Nullable<Text>, _>(&r.provider_charge_id)?;
        out.push_sql(", failure_code = ");
        out.push_bind_param::<Nullable<Text>, _>(&r.failure_code)?;
        out.push_sql(", failure_message = ");
        out.push_bind_param::<Nullable<Text>, _>(&r.failure_message)?;
        out.push_sql(", response_status = ");
        out.push_bind_param::<Nullable<Integer>, _>(&r.response_status)?;
        out.push_sql(", response_body = ");
        out.push_bind_param::<Nullable<Text>, _>(&r.response_body)?;
        out.push_sql(", amount_capturable = ");
        out.push_bind_param::<BigInt, _>(&r.amount_capturable)?;
        out.push_sql(", amount_captured = ");
        out.push_bind_param::<BigInt, _>(&r.amount_captured)?;
        out.push_sql(", authorized_at = ");
        out.push_bind_param::<Nullable<Timestamp>, _>(&r.authorized_at)?;
        out.push_sql(", lease_token = NULL, lease_expires_at = NULL, updated_at = ");
        out.push_bind_param::<Timestamp, _>(&r.updated_at)?;
        out.push_sql(" WHERE id = ");
        out.push_bind_param::<Text, _>(&r.id)?;
        out.push_sql(" AND status = 'processing'");
        Ok(())
    }
}

impl QueryId for InsertPayments<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl QueryId for FinishPayments<'_> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl QueryFragment<Pg> for FinishPayments<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(
            "UPDATE payments AS p SET status = v.status, \
             provider_charge_id = v.provider_charge_id, failure_code = v.failure_code, \
             failure_message = v.failure_message, response_status = v.response_status, \
             response_body = v.response_body, amount_capturable = v.amount_capturable, \
             amount_captured = v.amount_captured, authorized_at = v.authorized_at, \
             lease_token = NULL, lease_expires_at = NULL, updated_at = v.updated_at FROM (VALUES ",
        );
        for (n, r) in self.0.iter().enumerate() {
            out.push_sql(if n == 0 { "(" } else { ", (" });
            out.push_bind_param::<Text, _>(&r.id)?;
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(&r.status)?;
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Text>, _>(&r.provider_charge_id)?;
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Text>, _>(&r.failure_code)?;
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Text>, _>(&r.failure_message)?;
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Integer>, _>(&r.response_status)?;
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Text>, _>(&r.response_body)?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&r.amount_capturable)?;
            out.push_sql(", ");
            out.push_bind_param::<BigInt, _>(&r.amount_captured)?;
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Timestamp>, _>(&r.authorized_at)?;
            out.push_sql(", ");
            out.push_bind_param::<Timestamp, _>(&r.updated_at)?;
            out.push_sql(")");
        }
        out.push_sql(
            ") AS v (id, status, provider_charge_id, failure_code, failure_message, \
             response_status, response_body, amount_capturable, amount_captured, \
             authorized_at, updated_at) WHERE p.id = v.id AND p.status = 'processing' \
             RETURNING p.id",
        );
        Ok(())
    }
}

impl RunQueryDsl<diesel::PgConnection> for InsertPayment<'_> {}
impl Query for InsertPayments<'_> {
    type SqlType = Text;
}

impl Query for FinishPayments<'_> {
    type SqlType = Text;
}

impl RunQueryDsl<diesel::PgConnection> for InsertPayments<'_> {}
impl RunQueryDsl<diesel::PgConnection> for FinishPayments<'_> {}
impl RunQueryDsl<diesel::PgConnection> for FinishPayment<'_> {}
