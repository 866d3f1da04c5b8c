//! Payment rows. Every update that moves a payment is guarded by the state it expects
//! (`WHERE status = 'processing'`, `WHERE lease_token = ?`), so two actors can never both
//! apply a transition.

use std::collections::HashSet;

use diesel::prelude::*;

mod prepared;
mod row;

pub use row::PaymentRow;

use super::group_commit::WritePath;
use super::pool::DbConnection;
use super::schema::payments;
use crate::domain::{PaymentId, PaymentStatus, RequestRef, Timestamp};

const PROCESSING: PaymentStatus = PaymentStatus::Processing;

super::lease::lease_protocol!(
    payments,
    PaymentRow,
    PROCESSING.as_str(),
    provider_charge_id
);

/// The claim: the insert whose unique (merchant_id, idempotency_key) decides the winner.
/// A lost race comes back as `UniqueViolation`.
pub fn insert(conn: &mut DbConnection, row: &PaymentRow) -> QueryResult<()> {
    match conn {
        // The batch statement with one row (one prepared statement for every claim): the
        // only constraint it can skip a row for is the key (ids are random UUIDs).
        DbConnection::Postgres(pg) => {
            match prepared::InsertPayments::new(&[row]).load::<String>(pg)?[..] {
                [] => Err(diesel::result::Error::DatabaseError(
                    diesel::result::DatabaseErrorKind::UniqueViolation,
                    Box::new(format!(
                        "payments_idempotency: the key of {} is taken",
                        row.id
                    )),
                )),
                _ => Ok(()),
            }
        }
        DbConnection::Sqlite(_) => diesel::insert_into(payments::table)
            .values(row.clone())
            .execute(conn)
            .map(|_| ()),
    }
}

/// Group commit of claims: inserts each row whose key is free, in one statement on
/// PostgreSQL. True for each row inserted, in the order of `rows`: a row whose key was
/// taken (before, or by an earlier row of `rows`) is not, and its caller follows the row
/// that holds the key. Rows are matched by id, never by the order of `RETURNING`.
pub fn insert_many(conn: &mut DbConnection, rows: &[PaymentRow]) -> QueryResult<Vec<bool>> {
    let mut keys = HashSet::new();
    let tried: Vec<&PaymentRow> = rows
        .iter()
        .filter(|r| keys.insert((r.merchant_id.as_str(), r.idempotency_key.as_str())))
        .collect();
    let inserted: HashSet<String> = match conn {
        DbConnection::Postgres(pg) => prepared::InsertPayments::new(&tried)
            .load::<String>(pg)?
            .into_iter()
            .collect(),
        DbConnection::Sqlite(_) => {
            let mut inserted = HashSet::new();
            for row in tried {
                match conn.transaction(|conn| insert(conn, row)) {
                    Ok(()) => {
                        inserted.insert(row.id.clone());
                    }
                    Err(diesel::result::Error::DatabaseError(
                        diesel::result::DatabaseErrorKind::UniqueViolation,
                        _,
                    )) => {}
                    Err(e) => return Err(e),
                }
            }
            inserted
        }
    };
    Ok(rows.iter().map(|r| inserted.contains(&r.id)).collect())
}

/// A payment's final state to write: the row as it is after, the body its answer and its
/// event carry, and the API request that made the change (none for a webhook or the
/// recovery worker).
#[derive(Debug, Clone)]
pub struct FinalState {
    pub row: PaymentRow,
    pub body: String,
    pub made_by: Option<RequestRef>,
    /// The terms its charge, if it succeeded, is posted to the ledger by.
    pub policy: crate::domain::LedgerPolicy,
}

/// The write path of new payments (see [`WritePath`]): on PostgreSQL concurrent claims
/// become one insert, concurrent finishes one update and one insert of their events.
#[derive(Clone)]
pub struct PaymentWrites {
    /// True for a claim that won its key.
    pub claims: WritePath<PaymentRow>,
    /// True for a final state this write applied (false: the payment was already final).
    pub finishes: WritePath<FinalState>,
}

pub fn find_by_idempotency_key(
    conn: &mut DbConnection,
    merchant_id: &str,
    key: &str,
) -> QueryResult<Option<PaymentRow>> {
    payments::table
        .filter(payments::merchant_id.eq(super::unplanned(merchant_id)))
        .filter(payments::idempotency_key.eq(key))
        .select(PaymentRow::as_select())
        .first(conn)
        .optional()
}

pub fn find(
    conn: &mut DbConnection,
    merchant_id: &str,
    id: &str,
) -> QueryResult<Option<PaymentRow>> {
    payments::table
        .filter(payments::id.eq(id))
        .filter(payments::merchant_id.eq(merchant_id))
        .select(PaymentRow::as_select())
        .first(conn)
        .optional()
}

/// Writes the final state and the response every retry will replay. Only a payment still
/// `processing` can be finished, whoever holds the lease: the provider's answer for one
/// idempotency key is the same for everyone. Returns false if it was already final.
pub fn finish(conn: &mut DbConnection, row: &PaymentRow) -> QueryResult<bool> {
    if let DbConnection::Postgres(_) = conn {
        return Ok(finish_many(conn, &[row])?.contains(&true));
    }
    diesel::update(payments::table.filter(payments::id.eq(&row.id)).filter(
        crate::db::lease::still!(payments::status, PROCESSING.as_str()),
    ))
    .set((
        payments::status.eq(row.status.as_str()),
        payments::provider_charge_id.eq(&row.provider_charge_id),
        payments::failure_code.eq(&row.failure_code),
        payments::failure_message.eq(&row.failure_message),
        payments::response_status.eq(row.response_status),
        payments::response_body.eq(&row.response_body),
        payments::amount_capturable.eq(row.amount_capturable),
        payments::amount_captured.eq(row.amount_captured),
        payments::authorized_at.eq(row.authorized_at),
        payments::lease_token.eq(None::<String>),
        payments::lease_expires_at.eq(None::<Timestamp>),
        payments::updated_at.eq(row.updated_at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// [`finish`] for many payments, in one statement on PostgreSQL. Ids must be distinct.
/// True for each row this call finished, in the order of `rows` (matched by id).
pub fn finish_many(conn: &mut DbConnection, rows: &[&PaymentRow]) -> QueryResult<Vec<bool>> {
    match conn {
        DbConnection::Postgres(pg) => {
            let finished: HashSet<String> = prepared::FinishPayments::new(rows)
                .load::<String>(pg)?
                .into_iter()
                .collect();
            Ok(rows.iter().map(|r| finished.contains(&r.id)).collect())
        }
        DbConnection::Sqlite(_) => rows.iter().map(|row| finish(conn, row)).collect(),
    }
}

#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub limit: i64,
    pub starting_after: Option<String>,
    pub status: Option<PaymentStatus>,
    pub customer_id: Option<String>,
    /// Made at or after this moment (the dashboard's date filter).
    pub created_from: Option<Timestamp>,
    /// Made before this moment.
    pub created_before: Option<Timestamp>,
}

/// Newest first (ids are time-ordered), `limit + 1` rows so the caller can tell `has_more`;
/// `None` if `starting_after` names no payment of this merchant.
pub fn list(
    conn: &mut DbConnection,
    merchant_id: &str,
    filter: &ListFilter,
) -> QueryResult<Option<Vec<PaymentRow>>> {
    if let Some(cursor) = &filter.starting_after
        && find(conn, merchant_id, cursor)?.is_none()
    {
        return Ok(None);
    }
    let mut query = payments::table
        .filter(payments::merchant_id.eq(merchant_id))
        .select(PaymentRow::as_select())
        .order(payments::id.desc())
        .limit(filter.limit + 1)
        .into_boxed();
    if let Some(cursor) = &filter.starting_after {
        query = query.filter(payments::id.lt(cursor));
    }
    if let Some(status) = filter.status {
        query = query.filter(payments::status.eq(status.as_str()));
    }
    if let Some(customer) = &filter.customer_id {
        query = query.filter(payments::customer_id.eq(customer));
    }
    // Ids are time-ordered: a time range is a range of the `(merchant_id, id)` index.
    if let Some(from) = filter.created_from {
        query = query.filter(payments::id.ge(PaymentId::first_at(from)));
    }
    if let Some(before) = filter.created_before {
        query = query.filter(payments::id.lt(PaymentId::first_at(before)));
    }
    query.load(conn).map(Some)
}

pub fn count_for_merchant(conn: &mut DbConnection, merchant_id: &str) -> QueryResult<i64> {
    payments::table
        .filter(payments::merchant_id.eq(merchant_id))
        .count()
        .get_result(conn)
}

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;

    use super::payments;
    use crate::db::migrate::tests::{PaymentsReads, Schema};

    /// A retry finds its payment through the unique (merchant, key) index even when the
    /// merchant is one the planner's statistics have not seen: one row read, not a walk
    /// through that merchant's payments.
    #[test]
    fn a_key_lookup_reads_one_row_for_a_merchant_new_to_the_statistics() {
        let Some((_schema, mut conn)) = Schema::migrated() else {
            return;
        };
        // Ids and keys as long as real ones: which index looks cheaper depends on their size.
        let (old, new) = (format!("mer_{:032x}", 1), format!("mer_{:032x}", 2));
        let payments_of = |merchant: &str, count: u32| {
            format!(
                "INSERT INTO payments (id, merchant_id, idempotency_key, request_fingerprint, \
                 amount, currency, payment_method, metadata, status, created_at, updated_at) \
                 SELECT 'pay_' || md5('{merchant}' || n), '{merchant}', \
                 'retry-' || md5(n::text) || '-' || n, 'fp', 2000, 'usd', 'pm_card_visa', \
                 '{{}}', 'processing', now(), now() FROM generate_series(1, {count}) n;"
            )
        };
        // The statistics are taken while only the old merchant has payments; the new one
        // then gets twenty times as many.
        conn.batch_execute(&format!(
            "INSERT INTO merchants (id, name, created_at) VALUES \
             ('{old}', 'old', now()), ('{new}', 'new', now()); {} ANALYZE payments; {}",
            payments_of(&old, 1_000),
            payments_of(&new, 20_000)
        ))
        .unwrap();
        // The key of the new merchant's payment with the highest id: the last one a walk
        // through the merchant's payments in id order would come to.
        let key: String = payments::table
            .filter(payments::merchant_id.eq(&new))
            .order(payments::id.desc())
            .select(payments::idempotency_key)
            .first(&mut conn)
            .unwrap();
        let rows = conn
            .transaction(|conn| {
                let before = PaymentsReads::now(conn)?;
                let found = super::find_by_idempotency_key(conn, &new, &key)?;
                assert!(found.is_some(), "the payment is found");
                QueryResult::Ok(PaymentsReads::now(conn)?.index_rows - before.index_rows)
            })
            .unwrap();
        assert_eq!(rows, 1, "rows read to find one payment by its key");
    }
}
