//! `src/db/schema.rs` is written by hand for both backends: this keeps it true to the
//! migrations, on whichever database the suite runs.

use std::collections::BTreeSet;

use diesel::prelude::*;
use diesel::sql_types::Text;
use payments_api::db::DbConnection;
use payments_api::db::schema::{
    api_keys, balance_transactions, dashboard_sessions, deferred_disputes, dispute_steps, disputes,
    events, idempotency_keys, ledger_entries, merchants, payment_operations, payments, payouts,
    reconciliation_discrepancies, reconciliation_lease, reconciliation_seen, refunds,
    webhook_deliveries, webhook_endpoints, webhook_events,
};

use crate::support::spawn_app;

#[derive(QueryableByName)]
struct ColumnName {
    #[diesel(sql_type = Text)]
    name: String,
}

/// The columns the migrated database has for `table`.
fn database_columns(conn: &mut DbConnection, table: &str) -> BTreeSet<String> {
    let query = match conn {
        DbConnection::Postgres(_) => format!(
            "SELECT column_name::text AS name FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = '{table}'"
        ),
        DbConnection::Sqlite(_) => format!("SELECT name FROM pragma_table_info('{table}')"),
    };
    diesel::sql_query(query)
        .load::<ColumnName>(conn)
        .expect("column names")
        .into_iter()
        .map(|c| c.name)
        .collect()
}

/// The columns `schema.rs` declares, read off the SQL diesel writes for `SELECT *`.
fn declared_columns(select_sql: &str, table: &str) -> BTreeSet<String> {
    let list = select_sql
        .strip_prefix("SELECT ")
        .and_then(|s| s.split(" FROM ").next())
        .expect("a SELECT");
    list.split(", ")
        .map(|c| {
            c.replace(&format!("\"{table}\"."), "")
                .replace(&format!("`{table}`."), "")
                .trim_matches(|ch| ch == '"' || ch == '`')
                .to_owned()
        })
        .collect()
}

macro_rules! select_sql {
    ($table:ident) => {
        diesel::debug_query::<diesel::sqlite::Sqlite, _>(&$table::table.select($table::all_columns))
            .to_string()
    };
}

#[actix_web::test]
async fn schema_rs_matches_the_migrated_database() {
    let app = spawn_app().await;
    let declared = [
        ("merchants", select_sql!(merchants)),
        ("api_keys", select_sql!(api_keys)),
        ("payments", select_sql!(payments)),
        ("refunds", select_sql!(refunds)),
        ("payment_operations", select_sql!(payment_operations)),
        ("webhook_events", select_sql!(webhook_events)),
        ("events", select_sql!(events)),
        ("webhook_endpoints", select_sql!(webhook_endpoints)),
        ("webhook_deliveries", select_sql!(webhook_deliveries)),
        ("idempotency_keys", select_sql!(idempotency_keys)),
        ("balance_transactions", select_sql!(balance_transactions)),
        ("ledger_entries", select_sql!(ledger_entries)),
        ("payouts", select_sql!(payouts)),
        ("disputes", select_sql!(disputes)),
        ("dispute_steps", select_sql!(dispute_steps)),
        ("deferred_disputes", select_sql!(deferred_disputes)),
        (
            "reconciliation_discrepancies",
            select_sql!(reconciliation_discrepancies),
        ),
        ("reconciliation_seen", select_sql!(reconciliation_seen)),
        ("reconciliation_lease", select_sql!(reconciliation_lease)),
        ("dashboard_sessions", select_sql!(dashboard_sessions)),
    ];
    let mut conn = app.state.db.pool().get().expect("a connection");
    for (table, sql) in declared {
        let in_schema_rs = declared_columns(&sql, table);
        assert!(in_schema_rs.len() > 2, "{table}: could not read {sql}");
        assert_eq!(
            database_columns(&mut conn, table),
            in_schema_rs,
            "{table}: the migrations and src/db/schema.rs disagree"
        );
    }
}
