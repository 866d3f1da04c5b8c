//! The ledger (balance, balance transactions, `ledger verify`): every movement of money
//! posted once, in the transaction of its change, double-entry inside. (Every test of the
//! suite also ends with `ledger verify` of its database: `TestApp`'s drop.)

mod verify;

use std::time::{Duration, Instant};

use diesel::prelude::*;
use futures_util::future::join_all;
use payments_api::db::DbConnection;
use payments_api::db::ledger::{TransactionRow, for_sources};
use payments_api::db::schema::balance_transactions;
use payments_api::refunds::{self, RefundOutcome};
use serde_json::{Value, json};

use crate::refunds::refund_through_unreachable_provider;
use crate::support::{TestApp, TestDatabase, spawn_app, spawn_app_with, test_settings};

pub(crate) use verify::verify_command;

/// `(available, pending)` in usd, as `GET /v1/balance` answers.
async fn usd_balance(app: &TestApp) -> (i64, i64) {
    let response = app.get("/v1/balance").await;
    assert_eq!(response.status, 200, "{}", response.text());
    let balance = response.json();
    assert_eq!(balance["object"], "balance");
    let amount = |side: &str| -> i64 {
        balance[side]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["currency"] == "usd")
            .map_or(0, |m| m["amount"].as_i64().unwrap())
    };
    (amount("available"), amount("pending"))
}

async fn transactions(app: &TestApp, query: &str) -> Vec<Value> {
    let response = app.get(&format!("/v1/balance_transactions{query}")).await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()["data"].as_array().unwrap().clone()
}

async fn rows_of(app: &TestApp, source: &str) -> Vec<TransactionRow> {
    let source = source.to_owned();
    app.state
        .db
        .run(move |conn| for_sources(conn, &[source.as_str()]))
        .await
        .unwrap()
}

#[actix_web::test]
async fn a_charge_is_pending_until_its_available_on_passes_with_nothing_written() {
    let app = spawn_app_with(|s| s.ledger.pending = Duration::from_millis(1500)).await;
    assert_eq!(usd_balance(&app).await, (0, 0));
    let payment_id = app.paid_payment(2000).await;

    // 2000 × 2.9 % + 30 = 88.
    assert_eq!(usd_balance(&app).await, (0, 1912));
    let listed = transactions(&app, "").await;
    assert_eq!(listed.len(), 1);
    let txn = &listed[0];
    assert_eq!(txn["object"], "balance_transaction");
    assert_eq!(txn["type"], "charge");
    assert_eq!(txn["source"], payment_id.as_str());
    assert_eq!(
        (&txn["amount"], &txn["fee"], &txn["net"]),
        (&json!(2000), &json!(88), &json!(1912))
    );
    assert_eq!(txn["currency"], "usd");
    assert_eq!(txn["status"], "pending");
    assert!(txn["id"].as_str().unwrap().starts_with("txn_"));

    // The moment available_on passes, the balance says so: no job, no write.
    let deadline = Instant::now() + Duration::from_secs(10);
    while usd_balance(&app).await != (1912, 0) {
        assert!(
            Instant::now() < deadline,
            "the charge never became available"
        );
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
    let one = app
        .get(&format!(
            "/v1/balance_transactions/{}",
            txn["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["status"], "available");
    assert_eq!(one.json()["available_on"], txn["available_on"]);
    assert_eq!(rows_of(&app, &payment_id).await.len(), 1);
}

#[actix_web::test]
async fn fees_follow_the_settings_and_never_exceed_the_charge() {
    let app = spawn_app_with(|s| {
        s.ledger.pending = Duration::ZERO;
        s.ledger.fee_percent_bps = 100;
        s.ledger.fee_fixed = 50;
    })
    .await;
    let big = app.paid_payment(10_000).await;
    let small = app.paid_payment(40).await;
    let fee_net = |rows: Vec<TransactionRow>| (rows[0].fee, rows[0].net);
    assert_eq!(fee_net(rows_of(&app, &big).await), (150, 9850));
    assert_eq!(fee_net(rows_of(&app, &small).await), (40, 0));
    assert_eq!(usd_balance(&app).await, (9850, 0));
}

#[actix_web::test]
async fn refunds_leave_the_balance_at_once_and_a_failed_one_comes_back() {
    let app = spawn_app_with(|s| s.ledger.pending = Duration::ZERO).await;
    let payment_id = app.paid_payment(1000).await;
    // 1000 × 2.9 % = 29, + 30 = 59.
    assert_eq!(usd_balance(&app).await, (941, 0));

    let refund = app
        .post_refund(&payment_id, "ledger-refund", &json!({"amount": 300}))
        .await;
    assert_eq!(refund.status, 201, "{}", refund.text());
    assert_eq!(usd_balance(&app).await, (641, 0));

    // A refund whose outcome is not known yet has left the balance too; its failure
    // brings the amount back, once however often it is reported.
    let pending =
        refund_through_unreachable_provider(&app, &payment_id, b"ledger-fails", 200).await;
    let refund_id = pending["id"].as_str().unwrap().to_owned();
    assert_eq!(usd_balance(&app).await, (441, 0));
    for _ in 0..2 {
        let id = refund_id.clone();
        app.state
            .db
            .run(move |conn| {
                refunds::apply_refund_outcome(
                    conn,
                    &id,
                    &RefundOutcome::Failed {
                        provider_refund_id: None,
                        failure_code: Some("expired_card".to_owned()),
                    },
                    None,
                )
            })
            .await
            .unwrap();
    }
    assert_eq!(usd_balance(&app).await, (641, 0));
    let kinds: Vec<String> = transactions(&app, &format!("?source={refund_id}"))
        .await
        .iter()
        .map(|t| format!("{} {}", t["type"].as_str().unwrap(), t["amount"]))
        .collect();
    assert_eq!(kinds, ["refund_failure 200", "refund -200"]);
    let refunds_only = transactions(&app, "?type=refund").await;
    assert!(
        transactions(&app, "?type=dispute_reversal")
            .await
            .is_empty()
    );
    assert_eq!(refunds_only.len(), 2);
    assert!(
        refunds_only
            .iter()
            .all(|t| t["type"] == "refund" && t["fee"] == 0)
    );
}

#[actix_web::test]
async fn a_partial_capture_is_charged_what_was_captured_and_a_cancel_nothing() {
    let app = spawn_app_with(|s| s.ledger.pending = Duration::ZERO).await;
    let manual = |amount: i64| {
        json!({"amount": amount, "currency": "usd", "payment_method": "pm_card_visa",
               "capture_method": "manual"})
    };
    let held = app.post_payment("ledger-held", &manual(1000)).await.json();
    let canceled = app
        .post_payment("ledger-canceled", &manual(500))
        .await
        .json();
    assert_eq!(
        usd_balance(&app).await,
        (0, 0),
        "an authorization moves no money"
    );

    let id = held["id"].as_str().unwrap();
    let captured = app
        .post_json(
            &format!("/v1/payments/{id}/capture"),
            &app.api_key,
            Some("ledger-capture"),
            &json!({"amount": 600}),
        )
        .await;
    assert_eq!(captured.status, 200, "{}", captured.text());
    let cid = canceled["id"].as_str().unwrap();
    let cancel = app
        .post_json(
            &format!("/v1/payments/{cid}/cancel"),
            &app.api_key,
            Some("ledger-cancel"),
            &json!({}),
        )
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text());

    let rows = rows_of(&app, id).await;
    assert_eq!(rows.len(), 1);
    // 600 × 2.9 % = 17.4 → 17, + 30.
    assert_eq!((rows[0].amount, rows[0].fee), (600, 47));
    assert!(rows_of(&app, cid).await.is_empty());
    assert_eq!(usd_balance(&app).await, (553, 0));
}

#[actix_web::test]
async fn concurrent_retries_and_refunds_post_each_movement_once() {
    let app = spawn_app_with(|s| s.ledger.pending = Duration::ZERO).await;
    // 20 payments, each sent 4 times at once.
    let sends = (0..80).map(|i| {
        let app = &app;
        async move {
            app.post_payment(
                &format!("ledger-many-{}", i % 20),
                &json!({
                "amount": 1000 + (i % 20), "currency": "usd", "payment_method": "pm_card_visa"}),
            )
            .await
        }
    });
    let answers = join_all(sends).await;
    let mut ids: Vec<String> = answers
        .iter()
        .map(|r| {
            assert!(r.status == 201 || r.status == 409, "{}", r.text());
            r.json()["id"].as_str().unwrap_or_default().to_owned()
        })
        .filter(|id| !id.is_empty())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 20);
    assert_eq!(app.charges(), 20);

    // Each payment refunded by 3 concurrent requests with different keys, each for 400 of
    // about 1000: two fit, one is refused.
    let refunds = ids
        .iter()
        .flat_map(|id| (0..3).map(move |n| (id.clone(), format!("ledger-re-{id}-{n}"))));
    let refunds = join_all(refunds.map(|(id, key)| {
        let app = &app;
        async move { app.post_refund(&id, &key, &json!({"amount": 400})).await }
    }))
    .await;
    let made = refunds.iter().filter(|r| r.status == 201).count();
    assert_eq!(made, 40, "two refunds of 400 fit each payment");

    let charges = transactions(&app, "?type=charge&limit=100").await;
    assert_eq!(charges.len(), 20);
    let refund_txns = transactions(&app, "?type=refund&limit=100").await;
    assert_eq!(refund_txns.len(), 40);
    let net: i64 = charges
        .iter()
        .map(|t| t["net"].as_i64().unwrap())
        .sum::<i64>()
        - 40 * 400;
    assert_eq!(usd_balance(&app).await, (net, 0));
}

#[actix_web::test]
async fn balance_transaction_lists_page_and_refuse_bad_input() {
    let app = spawn_app().await;
    for _ in 0..3 {
        app.paid_payment(500).await;
    }
    let first = transactions(&app, "?limit=2").await;
    assert_eq!(first.len(), 2);
    let after = first[1]["id"].as_str().unwrap();
    let rest = transactions(&app, &format!("?limit=2&starting_after={after}")).await;
    assert_eq!(rest.len(), 1);
    assert!(rest[0]["id"].as_str().unwrap() < after, "newest first");

    for (query, param) in [
        ("?type=payout_of_sorts", "type"),
        ("?source=ch_123", "source"),
        ("?starting_after=pay_1", "starting_after"),
        ("?limit=0", "limit"),
        ("?colour=red", "colour"),
    ] {
        let response = app.get(&format!("/v1/balance_transactions{query}")).await;
        let problem = response.assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], param, "{query}");
    }
    let missing = app
        .get("/v1/balance_transactions/txn_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")
        .await;
    missing.assert_problem(404, "not_found");
    let other = app.create_merchant("ledger-other").await;
    let theirs = app.get_as("/v1/balance", &other).await;
    assert_eq!(
        theirs.json(),
        json!({"object": "balance", "available": [], "pending": []})
    );
    let unauthenticated = app.get_as("/v1/balance", "sk_test_nope_nope_nope").await;
    unauthenticated.assert_problem(401, "unauthorized");
}

#[actix_web::test]
async fn an_upgraded_database_gets_the_transactions_of_what_existed_before_the_ledger() {
    let (database, url) = TestDatabase::create();
    let app = crate::support::start_on(test_settings(url.clone())).await;
    // Money moved the way the previous release moved it: payments, a capture, refunds,
    // one of them failed.
    let mut sources = Vec::new();
    for amount in [1000, 2500, 40] {
        sources.push(app.paid_payment(amount).await);
    }
    let refunded = sources[1].clone();
    let refund = app
        .post_refund(&refunded, "upgrade-refund", &json!({"amount": 700}))
        .await
        .json();
    sources.push(refund["id"].as_str().unwrap().to_owned());
    let failed = refund_through_unreachable_provider(&app, &refunded, b"upgrade-fail", 300).await;
    let failed_id = failed["id"].as_str().unwrap().to_owned();
    let id = failed_id.clone();
    app.state
        .db
        .run(move |conn| {
            refunds::apply_refund_outcome(
                conn,
                &id,
                &RefundOutcome::Failed {
                    provider_refund_id: None,
                    failure_code: None,
                },
                None,
            )
        })
        .await
        .unwrap();
    sources.push(failed_id);
    let posted = ledger_summary(&app).await;
    assert_eq!(posted.len(), 6);
    drop(app);

    // Back to the schema of the previous release (the ledger's migration reverted, its
    // tables gone), then migrated again as an upgrade would be.
    let db = payments_api::startup::open_database(
        &test_settings(url.clone()),
        payments_api::startup::Schema::Migrate,
    )
    .expect("the database");
    let mut conn = db.pool().get().expect("connection");
    revert_through_the_ledger(&mut conn);
    let gone = diesel::sql_query("SELECT 1 FROM balance_transactions").execute(&mut **conn);
    assert!(
        gone.is_err(),
        "the ledger's tables are gone before the upgrade"
    );
    drop(conn);
    let app = crate::support::start_on(test_settings(url.clone())).await;
    assert_eq!(
        ledger_summary(&app).await,
        posted,
        "the backfill writes what the service itself posted"
    );
    let (code, out) = verify_command(&url);
    assert_eq!(code, 0, "{out}");
    drop(app);
    drop(database);
}

/// Every transaction as (source, type, amount, fee, net), sorted.
async fn ledger_summary(app: &TestApp) -> Vec<(String, String, i64, i64, i64)> {
    let mut all: Vec<(String, String, i64, i64, i64)> = app
        .state
        .db
        .run(|conn| {
            balance_transactions::table
                .select((
                    balance_transactions::source_id,
                    balance_transactions::txn_type,
                    balance_transactions::amount,
                    balance_transactions::fee,
                    balance_transactions::net,
                ))
                .load(conn)
        })
        .await
        .unwrap();
    all.sort();
    all
}

/// Reverts the migrations down to and including the ledger's (those after it first).
fn revert_through_the_ledger(conn: &mut DbConnection) {
    use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
    const PG: EmbeddedMigrations = embed_migrations!("migrations/postgres");
    const SQLITE: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
    const LEDGER: &str = "20261127000001";
    for _ in 0..10 {
        let version = match &mut *conn {
            DbConnection::Postgres(c) => c.revert_last_migration(PG).map(|v| v.to_string()),
            DbConnection::Sqlite(c) => c.revert_last_migration(SQLITE).map(|v| v.to_string()),
        }
        .expect("revert a migration");
        if version.replace('-', "") == LEDGER {
            return;
        }
    }
    panic!("the ledger's migration was never reverted");
}

/// A movement already posted cannot be posted again: the second posting of a payment's
/// charge fails its transaction (balance transactions and entries alike, one statement on
/// PostgreSQL), and the payment keeps one transaction with its entries.
#[actix_web::test]
async fn a_movement_posted_again_is_refused_and_counted_once() {
    use payments_api::db::schema::ledger_entries;
    use payments_api::ledger::{Posting, post};
    let app = spawn_app().await;
    let payment = app.paid_payment(1000).await;
    let entries_of = |id: String| {
        let app = &app;
        async move {
            app.state
                .db
                .run(move |conn| {
                    ledger_entries::table
                        .filter(ledger_entries::transaction_id.eq(id))
                        .count()
                        .get_result::<i64>(conn)
                })
                .await
                .unwrap()
        }
    };
    let before = rows_of(&app, &payment).await;
    assert_eq!(before.len(), 1, "the payment's charge");
    let entries = entries_of(before[0].id.clone()).await;
    assert!(entries >= 2, "{entries} entries");

    let (merchant, source) = (app.merchant_id.clone(), payment.clone());
    let again = app
        .state
        .db
        .run(move |conn| {
            let posting = Posting::charge(
                &Default::default(),
                &merchant,
                &source,
                1000,
                "usd",
                payments_api::domain::now(),
            );
            Ok(conn.transaction(|conn| post(conn, &[posting])).is_err())
        })
        .await
        .unwrap();
    assert!(again, "a second charge of the same payment is refused");
    let after = rows_of(&app, &payment).await;
    assert_eq!(after.len(), 1, "still one transaction");
    assert_eq!(after[0].id, before[0].id);
    let total: i64 = app
        .state
        .db
        .run(|conn| ledger_entries::table.count().get_result(conn))
        .await
        .unwrap();
    assert_eq!(total, entries, "no entry of the refused posting stayed");
}
