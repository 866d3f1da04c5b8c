//! `payments-api ledger verify`: it passes a true ledger, names each broken rule, and
//! neither makes nor migrates the database it checks.

use std::process::Command;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use serde_json::json;

use crate::support::{TestDatabase, pass_database_settings, test_settings};

/// `payments-api ledger verify` on the database at `url`: its exit code and stdout.
pub(crate) fn verify_command(url: &str) -> (i32, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_payments-api"));
    command
        .args(["ledger", "verify"])
        .env_clear()
        .env("DATABASE_URL", url);
    pass_database_settings(&mut command);
    let output = command.output().expect("run payments-api ledger verify");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[actix_web::test]
async fn ledger_verify_passes_a_true_ledger_and_names_each_violation() {
    let (database, url) = TestDatabase::create();
    let app = crate::support::start_on(test_settings(url.clone())).await;
    let payment_id = app.paid_payment(2000).await;
    app.post_refund(&payment_id, "verify-refund", &json!({"amount": 500}))
        .await;
    let (code, out) = verify_command(&url);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("2 transactions"), "{out}");
    assert!(out.contains("0 violations"), "{out}");

    // The ledger refuses to be edited: append-only.
    let edit = app
        .state
        .db
        .run(|conn| conn.batch_execute("UPDATE balance_transactions SET amount = amount + 1"))
        .await;
    assert!(edit.is_err(), "an UPDATE of the ledger must be refused");
    let delete = app
        .state
        .db
        .run(|conn| conn.batch_execute("DELETE FROM ledger_entries"))
        .await;
    assert!(delete.is_err(), "a DELETE of the ledger must be refused");

    // Break it behind the service's back: a payment's captured amount no longer matches its
    // charge, a transaction whose entries do not balance, and an entry of no transaction.
    let merchant_id = app.merchant_id.clone();
    let pid = payment_id.clone();
    app.state
        .db
        .run(move |conn| {
            conn.batch_execute(&format!(
                "UPDATE payments SET amount_captured = 1999 WHERE id = '{pid}';
                 INSERT INTO balance_transactions (id, merchant_id, txn_type, source_id, amount,
                     fee, net, currency, available_on, created_at)
                 VALUES ('txn_broken', '{merchant_id}', 'refund_failure', '{pid}', 5, 0, 5,
                     'usd', '2026-01-01 00:00:00', '2026-01-01 00:00:00');
                 INSERT INTO ledger_entries (transaction_id, account, merchant_id, currency, amount)
                 VALUES ('txn_broken', 'merchant_balance', '{merchant_id}', 'usd', 5);
                 INSERT INTO ledger_entries (transaction_id, account, merchant_id, currency, amount)
                 VALUES ('txn_orphan', 'platform_fees', '{merchant_id}', 'usd', 7);
                 INSERT INTO balance_transactions (id, merchant_id, txn_type, source_id, amount,
                     fee, net, currency, available_on, created_at)
                 VALUES ('txn_shifted', '{merchant_id}', 'dispute_reversal', 'dp_shifted', 10,
                     0, 10, 'usd', '2026-01-01 00:00:00', '2026-01-01 00:00:00');
                 INSERT INTO ledger_entries (transaction_id, account, merchant_id, currency, amount)
                 VALUES ('txn_shifted', 'merchant_balance', '{merchant_id}', 'usd', 15),
                        ('txn_shifted', 'platform_fees', '{merchant_id}', 'usd', -5),
                        ('txn_shifted', 'provider_held', '{merchant_id}', 'usd', -10);"
            ))
        })
        .await
        .unwrap();
    let (code, out) = verify_command(&url);
    assert_eq!(code, 1, "{out}");
    for rule in [
        "entries_sum_to_zero",
        "payment_charges",
        "entry_has_transaction",
        "entries_match_transaction",
    ] {
        assert!(out.contains(rule), "{rule} not reported: {out}");
    }
    assert!(out.contains("txn_broken"), "{out}");
    assert!(out.contains("txn_orphan"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("entries_match_transaction") && l.contains("txn_shifted")),
        "entries that sum to zero but move fees into the balance: {out}"
    );
    assert!(out.lines().last().unwrap().contains("violations"), "{out}");
    // This test broke its ledger on purpose: the check at the end of every test would fail.
    std::mem::forget(app);
    drop(database);
}

/// A check must not make what it checks: `ledger verify` on a SQLite path with no file there
/// (a typo) fails, and leaves no empty database behind that would pass next time.
#[test]
fn ledger_verify_of_a_database_that_is_not_there_fails_and_makes_none() {
    let path = std::env::temp_dir().join(format!("no-ledger-{}.db", uuid::Uuid::new_v4()));
    let (code, out) = verify_command(&format!("sqlite://{}", path.display()));
    assert_eq!(code, 1, "{out}");
    assert!(!path.exists(), "verify made {}", path.display());
}

/// Nor migrate what it checks: on a database that holds no schema (an empty SQLite file, an
/// empty PostgreSQL schema) `ledger verify` fails and writes nothing; it used to migrate it
/// and pass.
#[test]
fn ledger_verify_of_a_database_without_the_schema_fails_and_writes_nothing() {
    let (database, url) = TestDatabase::create();
    let tables = |url: &str| -> i64 {
        #[derive(QueryableByName)]
        struct Count {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            n: i64,
        }
        let mut conn = PgConnection::establish(url).expect("connect");
        diesel::sql_query(
            "SELECT count(*) AS n FROM information_schema.tables \
             WHERE table_schema = current_schema()",
        )
        .get_result::<Count>(&mut conn)
        .expect("count")
        .n
    };
    let sqlite = url.strip_prefix("sqlite://").map(std::path::PathBuf::from);
    match &sqlite {
        Some(path) => std::fs::write(path, b"").expect("an empty file"),
        None => assert_eq!(tables(&url), 0),
    }
    let (code, out) = verify_command(&url);
    assert_eq!(code, 1, "{out}");
    match &sqlite {
        Some(path) => assert_eq!(std::fs::metadata(path).expect("still there").len(), 0),
        None => assert_eq!(tables(&url), 0, "verify made tables"),
    }
    drop(database);
}
