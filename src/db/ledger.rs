//! The ledger's rows: balance transactions and their entries, written once and never
//! changed (the database refuses UPDATE and DELETE on both), and the reads of them.
//!
//! A balance is not stored anywhere: it is the sum of a merchant's transactions, so no
//! row is updated by every payment (no hot account), and a pending charge counts as
//! available the moment its `available_on` passes, with nothing written.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};

use super::DbConnection;
use super::schema::{balance_transactions, ledger_entries};
use crate::domain::Timestamp;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = balance_transactions)]
pub struct TransactionRow {
    pub id: String,
    pub merchant_id: String,
    pub txn_type: String,
    pub source_id: String,
    pub amount: i64,
    pub fee: i64,
    pub net: i64,
    pub currency: String,
    pub available_on: Timestamp,
    pub created_at: Timestamp,
}

impl TransactionRow {
    /// Whether it counts as available at `at`: a charge once its `available_on` has passed;
    /// every other kind from the moment it is written (a refund, payout or dispute takes
    /// money at once, and a failure or reversal gives it back at once), whatever the clock of
    /// the instance that reads it. [`balance`] and [`available`] sum by the same rule.
    pub fn is_available(&self, at: Timestamp) -> bool {
        self.txn_type != WAITS || self.available_on <= at
    }
}

/// The one kind of transaction whose money waits for its `available_on`. Every other kind
/// is available however far its `available_on` (its writer's clock) is ahead of the
/// reader's: a payout written by an instance whose clock ran ahead was pending to the others
/// until their clocks caught up, and a payout there did not count it (paid twice over).
const WAITS: &str = "charge";

/// One entry of a transaction (only ever written: verification reads entries in SQL).
#[derive(Debug, Clone, Insertable)]
#[diesel(table_name = ledger_entries)]
pub struct EntryRow {
    pub transaction_id: String,
    pub account: &'static str,
    pub merchant_id: String,
    pub currency: String,
    pub amount: i64,
}

super::insert::unnest_insert! {
    /// A group-commit batch's balance transactions, in one prepared statement.
    InsertTransactions<'a> for TransactionRow => "balance_transactions" {
        id: diesel::sql_types::Text = |r| -> &'a str { &r.id },
        merchant_id: diesel::sql_types::Text = |r| -> &'a str { &r.merchant_id },
        txn_type: diesel::sql_types::Text = |r| -> &'a str { &r.txn_type },
        source_id: diesel::sql_types::Text = |r| -> &'a str { &r.source_id },
        amount: diesel::sql_types::BigInt = |r| -> i64 { r.amount },
        fee: diesel::sql_types::BigInt = |r| -> i64 { r.fee },
        net: diesel::sql_types::BigInt = |r| -> i64 { r.net },
        currency: diesel::sql_types::Text = |r| -> &'a str { &r.currency },
        available_on: diesel::sql_types::Timestamp = |r| -> Timestamp { r.available_on },
        created_at: diesel::sql_types::Timestamp = |r| -> Timestamp { r.created_at },
    }
}

super::insert::unnest_insert! {
    /// Their entries, in one prepared statement.
    InsertEntries<'a> for EntryRow => "ledger_entries" {
        transaction_id: diesel::sql_types::Text = |r| -> &'a str { &r.transaction_id },
        account: diesel::sql_types::Text = |r| -> &'static str { r.account },
        merchant_id: diesel::sql_types::Text = |r| -> &'a str { &r.merchant_id },
        currency: diesel::sql_types::Text = |r| -> &'a str { &r.currency },
        amount: diesel::sql_types::BigInt = |r| -> i64 { r.amount },
    }
}

/// The transactions and their entries: one statement on PostgreSQL (one round trip in the
/// group-commit batch's transaction), two on SQLite. A second transaction of the same kind
/// for the same object is a unique violation: the caller's transaction fails rather than
/// count money twice.
pub fn insert(
    conn: &mut DbConnection,
    transactions: &[TransactionRow],
    entries: &[EntryRow],
) -> QueryResult<()> {
    if transactions.is_empty() {
        return Ok(());
    }
    if let DbConnection::Postgres(pg) = conn {
        let both = super::insert::Together {
            writes: (InsertTransactions::new(transactions),),
            last: InsertEntries::new(entries),
        };
        return both.execute(pg).map(|_| ());
    }
    super::insert_rows!(
        &mut *conn,
        balance_transactions::table,
        transactions,
        InsertTransactions
    )?;
    super::insert_rows!(conn, ledger_entries::table, entries, InsertEntries)
}

pub fn find(
    conn: &mut DbConnection,
    merchant_id: &str,
    id: &str,
) -> QueryResult<Option<TransactionRow>> {
    balance_transactions::table
        .filter(balance_transactions::merchant_id.eq(merchant_id))
        .filter(balance_transactions::id.eq(id))
        .select(TransactionRow::as_select())
        .first(conn)
        .optional()
}

/// What a list of transactions is narrowed to.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub txn_type: Option<String>,
    pub source_id: Option<String>,
}

/// A merchant's transactions, newest first, `limit + 1` of them (see [`super::page`]).
/// `None` if `starting_after` names no transaction of the merchant.
pub fn list(
    conn: &mut DbConnection,
    merchant_id: &str,
    limit: i64,
    starting_after: Option<&str>,
    filter: &ListFilter,
) -> QueryResult<Option<Vec<TransactionRow>>> {
    if let Some(cursor) = starting_after
        && find(conn, merchant_id, cursor)?.is_none()
    {
        return Ok(None);
    }
    let mut query = balance_transactions::table
        .filter(balance_transactions::merchant_id.eq(merchant_id))
        .select(TransactionRow::as_select())
        .order(balance_transactions::id.desc())
        .limit(limit + 1)
        .into_boxed();
    if let Some(cursor) = starting_after {
        query = query.filter(balance_transactions::id.lt(cursor));
    }
    if let Some(kind) = &filter.txn_type {
        query = query.filter(balance_transactions::txn_type.eq(kind));
    }
    if let Some(source) = &filter.source_id {
        query = query.filter(balance_transactions::source_id.eq(source));
    }
    query.load(conn).map(Some)
}

/// The transactions of these objects (payments, refunds, disputes, payouts), oldest first.
pub fn for_sources(
    conn: &mut DbConnection,
    source_ids: &[&str],
) -> QueryResult<Vec<TransactionRow>> {
    balance_transactions::table
        .filter(balance_transactions::source_id.eq_any(source_ids))
        .select(TransactionRow::as_select())
        .order(balance_transactions::id.asc())
        .load(conn)
}

/// A merchant's balance in one currency: the sums of `net` over its transactions already
/// available at `at` and over those still pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrencyBalance {
    pub currency: String,
    pub available: i64,
    pub pending: i64,
}

/// `SUM` of a BIGINT is NUMERIC on PostgreSQL: cast back, the same text on both backends.
fn sum_of_net() -> diesel::expression::SqlLiteral<Nullable<BigInt>> {
    diesel::dsl::sql::<Nullable<BigInt>>("CAST(SUM(net) AS BIGINT)")
}

pub fn balance(
    conn: &mut DbConnection,
    merchant_id: &str,
    at: Timestamp,
) -> QueryResult<Vec<CurrencyBalance>> {
    let available: Vec<(String, Option<i64>)> = balance_transactions::table
        .filter(balance_transactions::merchant_id.eq(merchant_id))
        .filter(
            balance_transactions::available_on
                .le(at)
                .or(balance_transactions::txn_type.ne(WAITS)),
        )
        .group_by(balance_transactions::currency)
        .select((balance_transactions::currency, sum_of_net()))
        .load(conn)?;
    let pending: Vec<(String, Option<i64>)> = balance_transactions::table
        .filter(balance_transactions::merchant_id.eq(merchant_id))
        .filter(balance_transactions::available_on.gt(at))
        .filter(balance_transactions::txn_type.eq(WAITS))
        .group_by(balance_transactions::currency)
        .select((balance_transactions::currency, sum_of_net()))
        .load(conn)?;
    let mut balances: std::collections::BTreeMap<String, CurrencyBalance> = Default::default();
    for (currency, sum, is_available) in available
        .into_iter()
        .map(|(c, s)| (c, s, true))
        .chain(pending.into_iter().map(|(c, s)| (c, s, false)))
    {
        let entry = balances
            .entry(currency.clone())
            .or_insert_with(|| CurrencyBalance {
                currency,
                available: 0,
                pending: 0,
            });
        if is_available {
            entry.available = sum.unwrap_or(0);
        } else {
            entry.pending = sum.unwrap_or(0);
        }
    }
    Ok(balances.into_values().collect())
}

/// The merchant's available balance in `currency` at `at`.
pub fn available(
    conn: &mut DbConnection,
    merchant_id: &str,
    currency: &str,
    at: Timestamp,
) -> QueryResult<i64> {
    balance_transactions::table
        .filter(balance_transactions::merchant_id.eq(merchant_id))
        .filter(balance_transactions::currency.eq(currency))
        .filter(
            balance_transactions::available_on
                .le(at)
                .or(balance_transactions::txn_type.ne(WAITS)),
        )
        .select(sum_of_net())
        .first::<Option<i64>>(conn)
        .map(|sum| sum.unwrap_or(0))
}

/// One broken rule, as `ledger verify` reports it.
#[derive(Debug, Clone, QueryableByName)]
pub struct Violation {
    #[diesel(sql_type = Text)]
    pub rule: String,
    #[diesel(sql_type = Text)]
    pub subject: String,
    #[diesel(sql_type = Text)]
    pub detail: String,
}

/// The rules of the ledger, each a query that returns the rows breaking it (no
/// parameters: one text for both backends). Every query reads the database in one pass.
const RULES: &[&str] = &[
    // Every transaction's entries sum to zero, and it has entries.
    "SELECT 'entries_sum_to_zero' AS rule, t.id AS subject, \
            'entries sum to ' || CAST(COALESCE(SUM(e.amount), 0) AS TEXT) || ' over ' \
            || CAST(COUNT(e.transaction_id) AS TEXT) || ' entries' AS detail \
     FROM balance_transactions t LEFT JOIN ledger_entries e ON e.transaction_id = t.id \
     GROUP BY t.id HAVING COALESCE(SUM(e.amount), 0) <> 0 OR COUNT(e.transaction_id) = 0",
    // Each transaction's own entries say what it says: its merchant's balance moves by its
    // net, the platform's fees by its fee, all in its merchant and currency (entries that
    // sum to zero could still move money between the two, and the balances agree in total).
    "SELECT 'entries_match_transaction' AS rule, t.id AS subject, \
            'net ' || CAST(t.net AS TEXT) || ', fee ' || CAST(t.fee AS TEXT) \
            || '; merchant balance entries ' || CAST(COALESCE(SUM(CASE WHEN \
                e.account = 'merchant_balance' THEN e.amount END), 0) AS TEXT) \
            || ', platform fee entries ' || CAST(COALESCE(SUM(CASE WHEN \
                e.account = 'platform_fees' THEN e.amount END), 0) AS TEXT) AS detail \
     FROM balance_transactions t JOIN ledger_entries e ON e.transaction_id = t.id \
     GROUP BY t.id, t.net, t.fee \
     HAVING COALESCE(SUM(CASE WHEN e.account = 'merchant_balance' THEN e.amount END), 0) \
                <> t.net \
         OR COALESCE(SUM(CASE WHEN e.account = 'platform_fees' THEN e.amount END), 0) \
                <> t.fee \
         OR SUM(CASE WHEN e.merchant_id <> t.merchant_id OR e.currency <> t.currency \
                THEN 1 ELSE 0 END) > 0",
    // Every entry belongs to a transaction (no foreign key says so: see the migration
    // `ledger_entries_unreferenced`).
    "SELECT 'entry_has_transaction' AS rule, e.transaction_id AS subject, \
            'a ' || e.account || ' entry of ' || CAST(e.amount AS TEXT) \
            || ' without its transaction' AS detail \
     FROM ledger_entries e \
     WHERE NOT EXISTS (SELECT 1 FROM balance_transactions t WHERE t.id = e.transaction_id)",
    // Net is amount less fee; a fee is never negative.
    "SELECT 'net_is_amount_less_fee' AS rule, id AS subject, \
            'amount ' || CAST(amount AS TEXT) || ', fee ' || CAST(fee AS TEXT) \
            || ', net ' || CAST(net AS TEXT) AS detail \
     FROM balance_transactions WHERE net <> amount - fee OR fee < 0",
    // Each balance account equals the sum of its transactions.
    "SELECT 'balance_is_sum_of_transactions' AS rule, \
            t.merchant_id || ' ' || t.currency AS subject, \
            'transactions net ' || CAST(SUM(t.net) AS TEXT) || ', balance account ' \
            || CAST(COALESCE((SELECT SUM(e.amount) FROM ledger_entries e \
                WHERE e.merchant_id = t.merchant_id AND e.currency = t.currency \
                  AND e.account = 'merchant_balance'), 0) AS TEXT) AS detail \
     FROM balance_transactions t GROUP BY t.merchant_id, t.currency \
     HAVING SUM(t.net) <> COALESCE((SELECT SUM(e.amount) FROM ledger_entries e \
         WHERE e.merchant_id = t.merchant_id AND e.currency = t.currency \
           AND e.account = 'merchant_balance'), 0)",
    // No object has the same movement twice.
    "SELECT 'once_per_object' AS rule, source_id AS subject, \
            txn_type || ' recorded ' || CAST(COUNT(*) AS TEXT) || ' times' AS detail \
     FROM balance_transactions GROUP BY source_id, txn_type HAVING COUNT(*) > 1",
    // A succeeded payment's charges sum to what was captured; any other payment has none.
    "SELECT 'payment_charges' AS rule, p.id AS subject, \
            p.status || ', captured ' || CAST(p.amount_captured AS TEXT) || ', charged ' \
            || CAST(COALESCE(SUM(t.amount), 0) AS TEXT) AS detail \
     FROM payments p LEFT JOIN balance_transactions t \
          ON t.source_id = p.id AND t.txn_type = 'charge' \
     GROUP BY p.id, p.status, p.amount_captured \
     HAVING COALESCE(SUM(t.amount), 0) <> \
            CASE WHEN p.status = 'succeeded' THEN p.amount_captured ELSE 0 END",
    // A refund's transactions: − its amount while pending or once succeeded, 0 once
    // failed, none when it was refused (rejected).
    "SELECT 'refund_transactions' AS rule, r.id AS subject, \
            r.status || ', amount ' || CAST(r.amount AS TEXT) || ', transactions sum to ' \
            || CAST(COALESCE(SUM(t.amount), 0) AS TEXT) || ' over ' \
            || CAST(COUNT(t.id) AS TEXT) AS detail \
     FROM refunds r LEFT JOIN balance_transactions t ON t.source_id = r.id \
     GROUP BY r.id, r.status, r.amount \
     HAVING COALESCE(SUM(t.amount), 0) <> CASE r.status \
                WHEN 'pending' THEN -r.amount WHEN 'succeeded' THEN -r.amount ELSE 0 END \
         OR COUNT(t.id) <> CASE r.status \
                WHEN 'pending' THEN 1 WHEN 'succeeded' THEN 1 WHEN 'failed' THEN 2 ELSE 0 END",
    // A payout's transactions: − its amount while pending or once paid, 0 once failed,
    // none when it was refused (rejected).
    "SELECT 'payout_transactions' AS rule, o.id AS subject, \
            o.status || ', amount ' || CAST(o.amount AS TEXT) || ', transactions sum to ' \
            || CAST(COALESCE(SUM(t.amount), 0) AS TEXT) || ' over ' \
            || CAST(COUNT(t.id) AS TEXT) AS detail \
     FROM payouts o LEFT JOIN balance_transactions t ON t.source_id = o.id \
     GROUP BY o.id, o.status, o.amount \
     HAVING COALESCE(SUM(t.amount), 0) <> CASE o.status \
                WHEN 'pending' THEN -o.amount WHEN 'paid' THEN -o.amount ELSE 0 END \
         OR COUNT(t.id) <> CASE o.status \
                WHEN 'pending' THEN 1 WHEN 'paid' THEN 1 WHEN 'failed' THEN 2 ELSE 0 END",
    // A dispute's transactions: − its amount (with the fee) from its opening, and + its
    // amount back once won.
    "SELECT 'dispute_transactions' AS rule, d.id AS subject, \
            d.status || ', amount ' || CAST(d.amount AS TEXT) || ', transactions sum to ' \
            || CAST(COALESCE(SUM(t.amount), 0) AS TEXT) || ' over ' \
            || CAST(COUNT(t.id) AS TEXT) AS detail \
     FROM disputes d LEFT JOIN balance_transactions t ON t.source_id = d.id \
     GROUP BY d.id, d.status, d.amount \
     HAVING COALESCE(SUM(t.amount), 0) <> CASE d.status WHEN 'won' THEN 0 ELSE -d.amount END \
         OR COUNT(t.id) <> CASE d.status WHEN 'won' THEN 2 ELSE 1 END",
    // Every transaction names an object that exists, of the merchant.
    "SELECT 'source_exists' AS rule, t.id AS subject, \
            t.txn_type || ' names ' || t.source_id AS detail \
     FROM balance_transactions t \
     WHERE NOT EXISTS (SELECT 1 FROM payments p \
                       WHERE p.id = t.source_id AND p.merchant_id = t.merchant_id) \
       AND NOT EXISTS (SELECT 1 FROM refunds r \
                       WHERE r.id = t.source_id AND r.merchant_id = t.merchant_id) \
       AND NOT EXISTS (SELECT 1 FROM payouts o \
                       WHERE o.id = t.source_id AND o.merchant_id = t.merchant_id) \
       AND NOT EXISTS (SELECT 1 FROM disputes d \
                       WHERE d.id = t.source_id AND d.merchant_id = t.merchant_id)",
];

/// Every violation of the ledger's rules in the whole database.
pub fn violations(conn: &mut DbConnection) -> QueryResult<Vec<Violation>> {
    let mut found = Vec::new();
    for rule in RULES {
        found.extend(diesel::sql_query(*rule).load::<Violation>(conn)?);
    }
    Ok(found)
}

/// How much `ledger verify` looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub transactions: i64,
    pub entries: i64,
}

pub fn counts(conn: &mut DbConnection) -> QueryResult<Counts> {
    Ok(Counts {
        transactions: balance_transactions::table.count().get_result(conn)?,
        entries: ledger_entries::table.count().get_result(conn)?,
    })
}

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, SqliteConnection};

    use super::*;
    use crate::db::migrate::{run_migrations, tests::Schema};
    use crate::domain::{LedgerPolicy, now};
    use crate::ledger::{Posting, post};

    /// A payout written by an instance whose clock runs 10 s ahead of this one's: its
    /// `available_on` is in this reader's future, and it must still leave `available` here
    /// at once, or a payout made here would not count it (on SQLite, and on PostgreSQL when
    /// the tests have one).
    #[test]
    fn a_debit_written_ahead_of_the_readers_clock_leaves_available_at_once() {
        let sqlite = SqliteConnection::establish(":memory:").expect("sqlite");
        let mut connections = vec![(None, DbConnection::Sqlite(sqlite))];
        if let Some((schema, pg)) = Schema::migrated() {
            connections.push((Some(schema), pg));
        }
        for (_schema, mut conn) in connections {
            run_migrations(&mut conn).expect("migrated");
            conn.batch_execute(
                "INSERT INTO merchants (id, name, created_at) \
                 VALUES ('mer_t', 't', CURRENT_TIMESTAMP)",
            )
            .expect("merchant");
            let at = now();
            let at_once = LedgerPolicy {
                fee_percent_bps: 0,
                fee_fixed: 0,
                pending: std::time::Duration::ZERO,
                ..LedgerPolicy::default()
            };
            let waits = LedgerPolicy {
                pending: LedgerPolicy::default().pending,
                ..at_once
            };
            let ahead = at + chrono::Duration::seconds(10);
            post(
                &mut conn,
                &[
                    Posting::charge(&at_once, "mer_t", "pay_a", 10_000, "usd", at),
                    Posting::payout("mer_t", "po_ahead", 9_000, "usd", ahead),
                    // A charge still waits for its own `available_on`.
                    Posting::charge(&waits, "mer_t", "pay_b", 500, "usd", at),
                ],
            )
            .expect("posted");
            assert_eq!(available(&mut conn, "mer_t", "usd", at).unwrap(), 1_000);
            let balance = balance(&mut conn, "mer_t", at).unwrap();
            assert_eq!(
                (balance[0].available, balance[0].pending),
                (1_000, 500),
                "the payout is not pending"
            );
            let rows: Vec<TransactionRow> = balance_transactions::table
                .order(balance_transactions::source_id)
                .select(TransactionRow::as_select())
                .load(&mut conn)
                .unwrap();
            let status: Vec<(&str, bool)> = rows
                .iter()
                .map(|r| (r.source_id.as_str(), r.is_available(at)))
                .collect();
            assert_eq!(
                status,
                [("pay_a", true), ("pay_b", false), ("po_ahead", true)]
            );
        }
    }
}
