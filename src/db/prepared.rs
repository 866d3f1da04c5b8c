//! The two statements every new payment runs, written so PostgreSQL prepares them once
//! per connection.
//!
//! diesel never caches an `UPDATE` (nor an `INSERT` with optional values) as a prepared
//! statement, so through its DSL both are parsed and planned on every payment — about a
//! third of the database's CPU per payment, measured with `scripts/bench.sh`. These
//! fragments have a static query id and a fixed text, so diesel's statement cache keeps
//! them. The SQL is the same as the DSL's in `payments.rs`, which SQLite still uses.

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Integer, Nullable, Text, Timestamp};
use diesel::{QueryResult, RunQueryDsl};

use super::payments::PaymentRow;

/// `INSERT INTO payments (…all columns…) VALUES (…)`: the claim.
pub struct InsertPayment<'a>(pub &'a PaymentRow);

/// `UPDATE payments SET <final state> WHERE id = ? AND status = 'processing'`.
pub struct FinishPayment<'a>(pub &'a PaymentRow);

impl QueryId for InsertPayment<'_> {
    type QueryId = InsertPayment<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl QueryId for FinishPayment<'_> {
    type QueryId = FinishPayment<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl QueryFragment<Pg> for InsertPayment<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let r = self.0;
        out.push_sql(
            "INSERT INTO payments (id, merchant_id, idempotency_key, request_fingerprint, \
             amount, currency, payment_method, customer_id, description, metadata, status, \
             amount_refunded, provider_charge_id, failure_code, failure_message, \
             response_status, response_body, lease_token, lease_expires_at, \
             provider_attempts, created_at, updated_at, capture_method) VALUES (",
        );
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

impl RunQueryDsl<diesel::PgConnection> for InsertPayment<'_> {}
impl RunQueryDsl<diesel::PgConnection> for FinishPayment<'_> {}
