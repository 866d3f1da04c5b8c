//! The statements every new payment runs, as PostgreSQL is best at them.
//!
//! diesel never caches an `UPDATE` (nor an `INSERT` with optional values) as a prepared
//! statement, so through its DSL both are parsed and planned on every payment — about a
//! third of the database's CPU per payment, measured with `scripts/bench.sh`. The claim
//! has a static query id and a fixed text, so diesel's statement cache keeps it prepared;
//! the finish is planned once per batch (see [`FinishPayments`]). Each takes one array per
//! column, so one text serves a single claim or finish and a group-committed batch of any
//! size alike. The SQL is the same as the DSL's in `payments/mod.rs`, which SQLite still uses.

use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text, Timestamp};
use diesel::{QueryResult, RunQueryDsl};

use super::row::PaymentRow;
use crate::db::array::Column;

super::super::insert::unnest_insert! {
    /// Group commit of claims: `INSERT … SELECT * FROM unnest(<one array per column>) ON
    /// CONFLICT DO NOTHING RETURNING id`. A row whose key is taken is not inserted and its id
    /// not returned. One array per column rather than one `VALUES` tuple per row: the text is
    /// the same for every batch size, so each connection prepares it once (a statement per
    /// size would be up to 128 prepared statements per connection, in both processes' memory).
    InsertPayments<'a> for &'a PaymentRow => "payments"
        then " ON CONFLICT DO NOTHING RETURNING id" returning Text {
        id: Text = |r| -> &'a str { &r.id },
        merchant_id: Text = |r| -> &'a str { &r.merchant_id },
        idempotency_key: Text = |r| -> &'a str { &r.idempotency_key },
        request_fingerprint: Text = |r| -> &'a str { &r.request_fingerprint },
        amount: BigInt = |r| -> i64 { r.amount },
        currency: Text = |r| -> &'a str { &r.currency },
        payment_method: Text = |r| -> &'a str { &r.payment_method },
        customer_id: Nullable<Text> = |r| -> Option<&'a str> { r.customer_id.as_deref() },
        description: Nullable<Text> = |r| -> Option<&'a str> { r.description.as_deref() },
        metadata: Text = |r| -> &'a str { &r.metadata },
        status: Text = |r| -> &'a str { r.status.as_str() },
        amount_refunded: BigInt = |r| -> i64 { r.amount_refunded },
        provider_charge_id: Nullable<Text> =
            |r| -> Option<&'a str> { r.provider_charge_id.as_deref() },
        failure_code: Nullable<Text> = |r| -> Option<&'a str> { r.failure_code.as_deref() },
        failure_message: Nullable<Text> =
            |r| -> Option<&'a str> { r.failure_message.as_deref() },
        response_status: Nullable<Integer> = |r| -> Option<i32> { r.response_status },
        response_body: Nullable<Text> = |r| -> Option<&'a str> { r.response_body.as_deref() },
        lease_token: Nullable<Text> = |r| -> Option<&'a str> { r.lease_token.as_deref() },
        lease_expires_at: Nullable<Timestamp> =
            |r| -> Option<crate::domain::Timestamp> { r.lease_expires_at },
        provider_attempts: Integer = |r| -> i32 { r.provider_attempts },
        created_at: Timestamp = |r| -> crate::domain::Timestamp { r.created_at },
        updated_at: Timestamp = |r| -> crate::domain::Timestamp { r.updated_at },
        capture_method: Text = |r| -> &'a str { &r.capture_method },
    }
}

/// Group commit of finishes (and a single finish): `UPDATE payments AS p SET <final state>
/// FROM unnest(<one array per column>) AS v WHERE p.id = v.id AND p.status || '' =
/// 'processing' RETURNING p.id`. Ids must be distinct. One text for every batch size, like
/// [`InsertPayments`]. The guard is written `status || ''` so that it is never read through
/// the partial index of unfinished payments (see `db/lease.rs`): with the table analyzed,
/// PostgreSQL planned `status = 'processing'` as a scan of that whole index per batch.
///
/// Unlike the claim, this statement is a join, and how PostgreSQL should join depends on
/// how large the table is now, so it is planned on every call instead of prepared once. A
/// plan made while the table was small (a new database) reads the payments to update with
/// a scan of the whole table or of the partial index of unfinished payments (which keeps
/// an entry for every payment claimed since the last vacuum), and a prepared statement
/// keeps its plan for the life of the connection: only `ANALYZE` or `VACUUM` of the table
/// makes PostgreSQL plan it again, and where autovacuum is off, nothing does. Measured
/// from an empty database: the update took 15–90 ms within a minute, and new payments fell
/// from 3 700/s to 2 000/s in 30 s. Planned per call it reads each row by primary key, at
/// the cost of one parse and plan per batch (no difference measured in throughput).
pub struct FinishPayments<'a> {
    id: Column<&'a str>,
    status: Column<&'a str>,
    provider_charge_id: Column<Option<&'a str>>,
    failure_code: Column<Option<&'a str>>,
    failure_message: Column<Option<&'a str>>,
    response_status: Column<Option<i32>>,
    response_body: Column<Option<&'a str>>,
    amount_capturable: Column<i64>,
    amount_captured: Column<i64>,
    authorized_at: Column<Option<crate::domain::Timestamp>>,
    updated_at: Column<crate::domain::Timestamp>,
}

impl<'a> FinishPayments<'a> {
    pub fn new(rows: &[&'a PaymentRow]) -> Self {
        let optional =
            |f: fn(&'a PaymentRow) -> Option<&'a str>| rows.iter().map(|r| f(r)).collect();
        Self {
            id: rows.iter().map(|r| r.id.as_str()).collect(),
            status: rows.iter().map(|r| r.status.as_str()).collect(),
            provider_charge_id: optional(|r| r.provider_charge_id.as_deref()),
            failure_code: optional(|r| r.failure_code.as_deref()),
            failure_message: optional(|r| r.failure_message.as_deref()),
            response_status: rows.iter().map(|r| r.response_status).collect(),
            response_body: optional(|r| r.response_body.as_deref()),
            amount_capturable: rows.iter().map(|r| r.amount_capturable).collect(),
            amount_captured: rows.iter().map(|r| r.amount_captured).collect(),
            authorized_at: rows.iter().map(|r| r.authorized_at).collect(),
            updated_at: rows.iter().map(|r| r.updated_at).collect(),
        }
    }
}

impl QueryId for FinishPayments<'_> {
    type QueryId = FinishPayments<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl QueryFragment<Pg> for FinishPayments<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        // Planned on every call (see the type's documentation).
        out.unsafe_to_cache_prepared();
        out.push_sql(
            "UPDATE payments AS p SET status = v.status, \
             provider_charge_id = v.provider_charge_id, failure_code = v.failure_code, \
             failure_message = v.failure_message, response_status = v.response_status, \
             response_body = v.response_body, amount_capturable = v.amount_capturable, \
             amount_captured = v.amount_captured, authorized_at = v.authorized_at, \
             lease_token = NULL, lease_expires_at = NULL, updated_at = v.updated_at \
             FROM unnest(",
        );
        out.push_bind_param::<Array<Text>, _>(&self.id)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.status)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.provider_charge_id)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.failure_code)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.failure_message)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Integer>>, _>(&self.response_status)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.response_body)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.amount_capturable)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.amount_captured)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Timestamp>>, _>(&self.authorized_at)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Timestamp>, _>(&self.updated_at)?;
        out.push_sql(
            ") AS v (id, status, provider_charge_id, failure_code, failure_message, \
             response_status, response_body, amount_capturable, amount_captured, \
             authorized_at, updated_at) WHERE p.id = v.id AND p.status || '' = 'processing' \
             RETURNING p.id",
        );
        Ok(())
    }
}

impl Query for FinishPayments<'_> {
    type SqlType = Text;
}

impl RunQueryDsl<diesel::PgConnection> for FinishPayments<'_> {}

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;

    use crate::db::migrate::tests::{PaymentsReads, Schema};
    use crate::db::pool::DbConnection;
    use crate::db::{payments, schema};
    use payments::PaymentRow;

    fn claim(conn: &mut DbConnection, numbers: std::ops::RangeInclusive<u32>) {
        conn.batch_execute(&format!(
            "INSERT INTO payments (id, merchant_id, idempotency_key, request_fingerprint, \
             amount, currency, payment_method, metadata, status, created_at, updated_at) \
             SELECT 'pay_' || n, 'mer_t', 'key-' || n, 'fp', 2000, 'usd', 'pm_card_visa', \
             '{{}}', 'processing', now(), now() FROM generate_series({}, {}) n",
            numbers.start(),
            numbers.end()
        ))
        .unwrap();
    }

    /// Finishes the payments `numbers` in one statement, and returns how that statement read
    /// the table: (sequential scans, index scans).
    fn finish(conn: &mut DbConnection, numbers: std::ops::RangeInclusive<u32>) -> (i64, i64) {
        let ids: Vec<String> = numbers.map(|n| format!("pay_{n}")).collect();
        let rows: Vec<PaymentRow> = schema::payments::table
            .filter(schema::payments::id.eq_any(&ids))
            .select(PaymentRow::as_select())
            .load(conn)
            .unwrap()
            .into_iter()
            .map(|mut row| {
                row.status = crate::domain::PaymentStatus::Succeeded;
                row.response_status = Some(201);
                row.response_body = Some("{}".to_owned());
                row
            })
            .collect();
        conn.transaction(|conn| {
            let before = PaymentsReads::now(conn)?;
            let finished = payments::finish_many(conn, &rows.iter().collect::<Vec<_>>())?;
            assert_eq!(finished, vec![true; ids.len()]);
            let after = PaymentsReads::now(conn)?;
            diesel::QueryResult::Ok((
                after.seq_scans - before.seq_scans,
                after.index_scans - before.index_scans,
            ))
        })
        .unwrap()
    }

    /// The finish reads each payment by its primary key, however many payments the table
    /// holds: not with a plan made while the table was small (a scan of all of it).
    #[test]
    fn a_finish_reads_each_payment_by_its_primary_key_however_large_the_table() {
        let Some((_schema, mut conn)) = Schema::migrated() else {
            return;
        };
        conn.batch_execute(
            "INSERT INTO merchants (id, name, created_at) VALUES ('mer_t', 't', now())",
        )
        .unwrap();
        // A new database: more finishes than PostgreSQL needs to settle on one plan for a
        // statement it keeps prepared.
        claim(&mut conn, 1..=40);
        for batch in 0..10 {
            finish(&mut conn, batch * 4 + 1..=batch * 4 + 4);
        }
        // Then many payments claimed and finished, with no vacuum since.
        claim(&mut conn, 41..=20_040);
        conn.batch_execute(
            "UPDATE payments SET status = 'succeeded', response_status = 201, \
             response_body = '{}' WHERE status = 'processing'",
        )
        .unwrap();
        claim(&mut conn, 20_041..=20_048);
        let (seq_scans, index_scans) = finish(&mut conn, 20_041..=20_048);
        assert_eq!(
            (seq_scans, index_scans),
            (0, 8),
            "one primary-key lookup per payment finished (sequential scans, index scans)"
        );
    }

    /// A table analyzed while few payments were unfinished (2 000 claimed and finished, with
    /// no vacuum since), then 2 000 more claimed: the planner takes the partial index of
    /// unfinished payments for nearly empty, though it holds an entry for each of the 4 000.
    fn analyzed_with_few_unfinished(conn: &mut DbConnection) {
        conn.batch_execute(
            "INSERT INTO merchants (id, name, created_at) VALUES ('mer_t', 't', now())",
        )
        .unwrap();
        claim(conn, 1..=2_000);
        conn.batch_execute(
            "UPDATE payments SET status = 'succeeded', response_status = 201, \
             response_body = '{}' WHERE status = 'processing'; ANALYZE payments",
        )
        .unwrap();
        claim(conn, 2_001..=4_000);
    }

    /// Still by primary key once the table has statistics taken while few payments were
    /// unfinished: a guard written `status = 'processing'` was read as one scan of all of
    /// the partial index of unfinished payments per batch.
    #[test]
    fn a_finish_reads_by_primary_key_after_the_table_is_analyzed_with_few_unfinished() {
        let Some((_schema, mut conn)) = Schema::migrated() else {
            return;
        };
        analyzed_with_few_unfinished(&mut conn);
        let (seq_scans, index_scans) = finish(&mut conn, 2_001..=2_008);
        assert_eq!(
            (seq_scans, index_scans),
            (0, 8),
            "one primary-key lookup per payment finished (sequential scans, index scans)"
        );
    }

    /// The lease protocol's guarded update of one unfinished payment reads that payment by
    /// its primary key on the same table: not all the unfinished payments through their
    /// partial index.
    #[test]
    fn a_lease_guard_reads_one_row_after_the_table_is_analyzed_with_few_unfinished() {
        let Some((_schema, mut conn)) = Schema::migrated() else {
            return;
        };
        analyzed_with_few_unfinished(&mut conn);
        let rows = conn
            .transaction(|conn| {
                let before = PaymentsReads::now(conn)?;
                let locked = payments::lock_unfinished(conn, "pay_3000", crate::domain::now())?;
                assert!(locked, "the unfinished payment is locked");
                diesel::QueryResult::Ok(PaymentsReads::now(conn)?.index_rows - before.index_rows)
            })
            .unwrap();
        assert_eq!(rows, 1, "rows read to lock one unfinished payment");
    }
}
