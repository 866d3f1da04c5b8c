//! Group commit of the payment write path (PostgreSQL): concurrent claims share one
//! insert, concurrent finishes one update, and none of the §3 promises weakens. On SQLite
//! payments are written alone; those runs check that.

use std::time::Duration;

use futures_util::future::join_all;
use payments_api::db::events as event_rows;
use payments_api::db::group_commit::GroupCommit;
use payments_api::db::payments::{self as payment_rows, FinalState, PaymentRow};
use payments_api::domain::{PaymentId, RequestRef, now, sha256_hex};
use payments_api::payments::{Charged, final_state};
use payments_api::provider::{Charge, ProviderStatus};
use serde_json::json;

use crate::support::app_behind_proxy;
use crate::support::{TestApp, spawn_app, spawn_app_with, visa};

/// The group-commit lanes of new payments.
struct Lanes {
    claims: GroupCommit<PaymentRow, bool>,
    finishes: GroupCommit<FinalState, bool>,
}

/// The group commit of `app`, or `None` (and a check that it is SQLite) when it has none.
fn writes(app: &TestApp) -> Option<Lanes> {
    let writes = &app.state.payment_writes;
    match (writes.claims.group_commit(), writes.finishes.group_commit()) {
        (Some(claims), Some(finishes)) => Some(Lanes {
            claims: claims.clone(),
            finishes: finishes.clone(),
        }),
        _ => {
            assert!(
                app.state.settings.database_url.starts_with("sqlite://"),
                "PostgreSQL without group commit"
            );
            crate::support::skip("SQLite writes payments alone: no group commit to check");
            None
        }
    }
}

/// A claim of `key` for the app's merchant, as the API builds it.
fn claim(app: &TestApp, key: &str, amount: i64) -> PaymentRow {
    let at = now();
    PaymentRow {
        id: PaymentId::generate().to_string(),
        merchant_id: app.merchant_id.clone(),
        idempotency_key: key.to_owned(),
        request_fingerprint: sha256_hex(format!("{key}:{amount}").as_bytes()),
        amount,
        currency: "usd".to_owned(),
        payment_method: "pm_card_visa".to_owned(),
        customer_id: None,
        description: None,
        metadata: "{}".to_owned(),
        status: payments_api::domain::PaymentStatus::Processing,
        amount_refunded: 0,
        provider_charge_id: None,
        failure_code: None,
        failure_message: None,
        response_status: None,
        response_body: None,
        lease_token: Some(format!("lease-{key}")),
        lease_expires_at: Some(at + chrono::Duration::seconds(30)),
        provider_attempts: 1,
        created_at: at,
        updated_at: at,
        capture_method: "automatic".to_owned(),
        amount_capturable: 0,
        amount_captured: 0,
        cancellation_reason: None,
        authorized_at: None,
        operation_id: None,
        amount_disputed: 0,
    }
}

async fn stored(app: &TestApp, key: &str) -> Option<PaymentRow> {
    let (merchant, key) = (app.merchant_id.clone(), key.to_owned());
    app.state
        .db
        .run(move |conn| payment_rows::find_by_idempotency_key(conn, &merchant, &key))
        .await
        .unwrap()
}

#[actix_web::test]
async fn claims_queued_together_are_one_insert_and_each_caller_learns_its_own_outcome() {
    let app = spawn_app().await;
    let Some(writes) = writes(&app) else { return };
    // A key taken before the batch, in the middle of it.
    let taken = claim(&app, "gc-taken", 100);
    let submitted = taken.clone();
    app.state
        .db
        .run(move |conn| payment_rows::insert(conn, &submitted))
        .await
        .unwrap();

    let batch = [
        claim(&app, "gc-a", 100),
        claim(&app, "gc-a", 100), // the same key twice in one batch
        claim(&app, "gc-taken", 100),
        claim(&app, "gc-b", 200),
        claim(&app, "gc-a", 999), // and a third time, with another request
        claim(&app, "gc-c", 300),
    ];
    // All submitted before any lane runs (this runtime has one thread): one batch.
    let won: Vec<bool> = join_all(batch.iter().map(|row| writes.claims.submit(row.clone())))
        .await
        .into_iter()
        .map(|result| result.expect("claim"))
        .collect();

    assert_eq!(won, [true, false, false, true, false, true]);
    assert!(
        writes.claims.stats().largest() >= batch.len(),
        "the claims were not one batch: largest {}",
        writes.claims.stats().largest()
    );
    // Each winner's own row holds its key; the taken key still holds the first one.
    for (row, won) in batch.iter().zip(&won) {
        let holder = stored(&app, &row.idempotency_key).await.expect("row");
        if *won {
            assert_eq!(holder.id, row.id);
            assert_eq!(holder.amount, row.amount);
        } else {
            assert_ne!(holder.id, row.id);
        }
    }
    assert_eq!(stored(&app, "gc-taken").await.unwrap().id, taken.id);
    assert_eq!(app.payment_rows().await, 4);
}

#[actix_web::test]
async fn a_batch_that_fails_is_split_and_only_the_bad_write_fails() {
    let app = spawn_app().await;
    let Some(writes) = writes(&app) else { return };
    // amount 0 breaks the table's CHECK: the whole statement fails.
    let batch = [
        claim(&app, "split-1", 100),
        claim(&app, "split-bad", 0),
        claim(&app, "split-2", 200),
    ];
    let results = join_all(batch.iter().map(|row| writes.claims.submit(row.clone()))).await;

    assert!(matches!(results[0], Ok(true)), "{:?}", results[0]);
    assert!(results[1].is_err(), "the bad claim was accepted");
    assert!(matches!(results[2], Ok(true)), "{:?}", results[2]);
    assert_eq!(writes.claims.stats().split(), 1, "the batch was not split");
    assert!(stored(&app, "split-1").await.is_some());
    assert!(stored(&app, "split-bad").await.is_none());
    assert!(stored(&app, "split-2").await.is_some());
}

/// The final state of `row` as the provider's answer `status` makes it.
fn finished(row: &PaymentRow, status: ProviderStatus, made_by: &str) -> FinalState {
    let charge = Charge {
        id: format!("ch_{}", row.id),
        status,
        amount: row.amount,
        currency: row.currency.clone(),
        reference: row.id.clone(),
        failure_code: None,
        failure_message: None,
    };
    let (row, body) = final_state(row.clone(), Charged::Answered(charge), now()).unwrap();
    FinalState {
        row,
        body,
        made_by: Some(RequestRef {
            id: made_by.to_owned(),
            idempotency_key: None,
        }),
        policy: Default::default(),
    }
}

#[actix_web::test]
async fn finishes_queued_together_are_one_update_with_one_event_per_payment_finished() {
    let app = spawn_app().await;
    let Some(writes) = writes(&app) else { return };
    let rows: Vec<PaymentRow> = (0..3)
        .map(|n| claim(&app, &format!("fin-{n}"), 100))
        .collect();
    for row in &rows {
        assert!(writes.claims.submit(row.clone()).await.unwrap());
    }
    let batch = [
        finished(&rows[0], ProviderStatus::Succeeded, "req-0"),
        finished(&rows[1], ProviderStatus::Failed, "req-1"),
        // A second final state for payment 0 in the same batch: it cannot win.
        finished(&rows[0], ProviderStatus::Failed, "req-0-again"),
        finished(&rows[2], ProviderStatus::Succeeded, "req-2"),
    ];
    let applied: Vec<bool> = join_all(batch.iter().map(|s| writes.finishes.submit(s.clone())))
        .await
        .into_iter()
        .map(|result| result.expect("finish"))
        .collect();
    assert_eq!(applied, [true, true, false, true]);
    assert!(writes.finishes.stats().largest() >= batch.len());

    // Finishing again later changes nothing: the guard holds across batches too.
    let late = finished(&rows[1], ProviderStatus::Succeeded, "req-late");
    assert!(!writes.finishes.submit(late).await.unwrap());

    let expected = ["succeeded", "failed", "succeeded"];
    for (row, status) in rows.iter().zip(expected) {
        let now_stored = stored(&app, &row.idempotency_key).await.unwrap();
        assert_eq!(
            now_stored.status.as_str(),
            status,
            "{}",
            row.idempotency_key
        );
        assert!(now_stored.response_body.is_some());
    }
    let merchant = app.merchant_id.clone();
    let events = app
        .state
        .db
        .run(move |conn| event_rows::all_for_merchant(conn, &merchant))
        .await
        .unwrap();
    assert_eq!(events.len(), 3, "one event per payment finished");
    for (row, status) in rows.iter().zip(expected) {
        let event = events
            .iter()
            .find(|e| e.object_id == row.id)
            .expect("event");
        assert_eq!(event.event_type, format!("payment.{status}"));
        assert!(!event.body.contains("again") && !event.body.contains("late"));
    }
}

/// The endpoints of a finish batch's merchants are looked up at once: each event still goes
/// to its own merchant's enabled endpoints that want it, and to no one else's.
#[actix_web::test]
async fn a_batch_of_several_merchants_delivers_each_event_to_its_own_merchants_endpoints() {
    use diesel::prelude::*;
    use payments_api::db::merchants::{find_by_api_key, hash_api_key};
    use payments_api::db::schema::{events, webhook_deliveries};
    let app = spawn_app_with(|s| s.webhook_allow_private_urls = true).await;
    let Some(writes) = writes(&app) else { return };
    let endpoint = |key: String, enabled: &'static str| {
        let app = &app;
        async move {
            let body = json!({"url": "http://127.0.0.1:9/hook", "enabled_events": [enabled]});
            let created = app
                .post_json("/v1/webhook_endpoints", &key, None, &body)
                .await;
            assert_eq!(created.status, 201, "{}", created.text());
            created.json()["id"].as_str().unwrap().to_owned()
        }
    };
    let merchant_id = |key: String| {
        let app = &app;
        async move {
            app.state
                .db
                .run(move |conn| find_by_api_key(conn, &hash_api_key(&key)))
                .await
                .unwrap()
                .expect("merchant")
                .id
        }
    };
    let other_key = app.create_merchant("gc-other").await;
    let quiet_key = app.create_merchant("gc-quiet").await;
    let ours = endpoint(app.api_key.clone(), "*").await;
    let theirs = endpoint(other_key.clone(), "payment.failed").await;
    let (other, quiet) = (merchant_id(other_key).await, merchant_id(quiet_key).await);

    let owned_by = |merchant: &str, key: &str| {
        let mut row = claim(&app, key, 100);
        row.merchant_id = merchant.to_owned();
        row
    };
    let rows = [
        claim(&app, "gcm-ours-ok", 100),
        claim(&app, "gcm-ours-failed", 100),
        owned_by(&other, "gcm-other-ok"),
        owned_by(&other, "gcm-other-failed"),
        owned_by(&quiet, "gcm-quiet-failed"),
    ];
    for row in &rows {
        assert!(writes.claims.submit(row.clone()).await.unwrap());
    }
    let outcomes = [
        ProviderStatus::Succeeded,
        ProviderStatus::Failed,
        ProviderStatus::Succeeded,
        ProviderStatus::Failed,
        ProviderStatus::Failed,
    ];
    let batch: Vec<FinalState> = rows
        .iter()
        .zip(outcomes)
        .map(|(row, status)| finished(row, status, &row.idempotency_key))
        .collect();
    let applied: Vec<bool> = join_all(batch.iter().map(|s| writes.finishes.submit(s.clone())))
        .await
        .into_iter()
        .map(|result| result.expect("finish"))
        .collect();
    assert_eq!(applied, [true; 5]);
    assert!(writes.finishes.stats().largest() >= batch.len());

    let mut delivered: Vec<(String, String)> = app
        .state
        .db
        .run(|conn| {
            webhook_deliveries::table
                .inner_join(events::table.on(events::id.eq(webhook_deliveries::event_id)))
                .select((webhook_deliveries::endpoint_id, events::object_id))
                .load(conn)
        })
        .await
        .unwrap();
    delivered.sort();
    let mut expected = vec![
        (ours.clone(), rows[0].id.clone()),
        (ours, rows[1].id.clone()),
        (theirs, rows[3].id.clone()),
    ];
    expected.sort();
    assert_eq!(
        delivered, expected,
        "each merchant's endpoints get that merchant's events they want, and nothing else"
    );
}

/// A finish that loses to another path (a webhook, another instance finished the payment
/// first) writes none of what a finish records, even in a batch whose other finishes write
/// theirs: no second event, no delivery of it, no balance transaction, no entry. On
/// PostgreSQL the batch is one statement whose inserts are guarded by the update's result.
#[actix_web::test]
async fn a_finish_that_loses_in_a_batch_records_nothing_and_the_others_record_theirs() {
    use diesel::prelude::*;
    use payments_api::db::schema::webhook_deliveries;
    use payments_api::db::schema::{balance_transactions, events, ledger_entries};
    let app = spawn_app_with(|s| s.webhook_allow_private_urls = true).await;
    let body = json!({"url": "http://127.0.0.1:9/hook", "enabled_events": ["*"]});
    let created = app
        .post_json("/v1/webhook_endpoints", &app.api_key, None, &body)
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let path = &app.state.payment_writes;
    let (early, late) = (
        claim(&app, "lose-early", 700),
        claim(&app, "lose-late", 900),
    );
    for row in [&early, &late] {
        assert!(path.claims.submit(row.clone()).await.unwrap());
    }
    // Another path finishes the first payment: it failed.
    let first = finished(&early, ProviderStatus::Failed, "req-webhook");
    assert!(path.finishes.submit(first).await.unwrap());

    // Then a batch says both succeeded: only the second is this batch's to finish.
    let batch = [
        finished(&early, ProviderStatus::Succeeded, "req-lost"),
        finished(&late, ProviderStatus::Succeeded, "req-won"),
    ];
    let applied: Vec<bool> = join_all(batch.iter().map(|s| path.finishes.submit(s.clone())))
        .await
        .into_iter()
        .map(|result| result.expect("finish"))
        .collect();
    assert_eq!(applied, [false, true]);
    if let Some(lanes) = writes(&app) {
        assert!(lanes.finishes.stats().largest() >= batch.len(), "one batch");
    }

    let (written, delivered, transactions, entries) = app
        .state
        .db
        .run(move |conn| {
            let written: Vec<(String, String)> = events::table
                .select((events::object_id, events::event_type))
                .order(events::object_id)
                .load(conn)?;
            let delivered: i64 = webhook_deliveries::table.count().get_result(conn)?;
            let transactions: Vec<(String, String)> = balance_transactions::table
                .select((balance_transactions::id, balance_transactions::source_id))
                .load(conn)?;
            let entries: Vec<String> = ledger_entries::table
                .select(ledger_entries::transaction_id)
                .load(conn)?;
            Ok((written, delivered, transactions, entries))
        })
        .await
        .unwrap();
    let mut expected = vec![
        (early.id.clone(), "payment.failed".to_owned()),
        (late.id.clone(), "payment.succeeded".to_owned()),
    ];
    expected.sort();
    assert_eq!(written, expected, "one event per payment, the winner's");
    assert_eq!(delivered, 2, "one delivery per event written");
    let sources: Vec<&str> = transactions
        .iter()
        .map(|(_, source)| source.as_str())
        .collect();
    assert_eq!(
        sources,
        [late.id.as_str()],
        "only the succeeded payment is posted"
    );
    let posted = &transactions[0].0;
    assert!(entries.len() >= 2, "{entries:?}");
    assert!(
        entries.iter().all(|t| t == posted),
        "entries of another transaction"
    );
    assert_eq!(
        stored(&app, "lose-early").await.unwrap().status.as_str(),
        "failed"
    );
}

#[actix_web::test]
async fn concurrent_payments_over_http_are_batched_and_charged_once_per_key() {
    let app = spawn_app().await;
    let writes = writes(&app);
    // 80 distinct keys, and 20 requests sharing one more key, all at once.
    let requests = (0..100).map(|n| {
        let key = if n < 80 {
            format!("http-gc-{n}")
        } else {
            "http-gc-shared".to_owned()
        };
        let body = if n < 80 { visa(1000 + n) } else { visa(5000) };
        let app = &app;
        async move { app.post_payment(&key, &body).await }
    });
    let responses = join_all(requests).await;
    let mut shared = None;
    for (n, response) in responses.iter().enumerate() {
        assert!(
            response.status == 201 || (n >= 80 && response.status == 409),
            "{n}: {} {}",
            response.status,
            response.text()
        );
        if n >= 80 && response.status == 201 {
            let id = response.json()["id"].as_str().unwrap().to_owned();
            assert!(
                shared.get_or_insert(id.clone()) == &id,
                "two payments for one key"
            );
        }
    }
    assert_eq!(app.charges(), 81, "one charge per key");
    assert_eq!(app.payment_rows().await, 81);
    let merchant = app.merchant_id.clone();
    let events = app
        .state
        .db
        .run(move |conn| event_rows::all_for_merchant(conn, &merchant))
        .await
        .unwrap();
    assert_eq!(events.len(), 81, "one event per payment");
    if let Some(writes) = writes {
        let (claims, finishes) = (writes.claims.stats(), writes.finishes.stats());
        eprintln!(
            "claims: {} in {} batches (largest {}); finishes: {} in {} batches (largest {})",
            claims.items(),
            claims.batches(),
            claims.largest(),
            finishes.items(),
            finishes.batches(),
            finishes.largest()
        );
        assert!(claims.largest() > 1, "no claims were coalesced");
        assert!(claims.batches() < claims.items());
    }
}

/// The answer to a claim's insert is lost after PostgreSQL committed it: 503, nothing
/// charged; the retry finds the row and, once its lease is free, charges once.
#[actix_web::test]
async fn a_claim_whose_answer_was_lost_is_503_and_the_retry_finds_the_row() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.database_prepared_statements = false; // every statement's text crosses the proxy
        s.processing_lease = Duration::from_millis(500);
    })
    .await
    else {
        return;
    };
    assert!(
        app.state.payment_writes.claims.group_commit().is_some(),
        "PostgreSQL batches claims"
    );
    assert_eq!(app.get("/v1/payments").await.status, 200); // warms the key cache
    // Unprepared, diesel sends the statement and its run in one message (Parse, Bind,
    // Execute, Sync); it commits on its own, and its answer is the one lost.
    proxy.lose_answer_after(&["INSERT INTO payments"]);

    let body = visa(700);
    let lost = app.post_payment("lost-claim", &body).await;
    assert!(proxy.answer_lost());
    lost.assert_problem(503, "service_unavailable");
    assert_eq!(app.charges(), 0, "nothing is charged on an unknown claim");
    assert_eq!(app.payment_rows().await, 1, "the claim committed");

    let mut retry = app.post_payment("lost-claim", &body).await;
    for _ in 0..40 {
        if retry.status != 409 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
        retry = app.post_payment("lost-claim", &body).await;
    }
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(app.charges(), 1);
    assert_eq!(app.payment_rows().await, 1);
}

/// The answer to a finish's COMMIT is lost after PostgreSQL committed it: 503; the retry
/// replays the stored payment, with one charge and one event.
#[actix_web::test]
async fn a_finish_whose_commit_answer_was_lost_is_503_and_the_retry_replays_it() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.database_prepared_statements = false;
    })
    .await
    else {
        return;
    };
    assert!(
        app.state.payment_writes.claims.group_commit().is_some(),
        "PostgreSQL batches finishes"
    );
    assert_eq!(app.get("/v1/payments").await.status, 200);
    proxy.lose_answer_after(&["UPDATE payments", "COMMIT"]);

    let body = json!({"amount": 800, "currency": "usd", "payment_method": "pm_card_visa"});
    let lost = app.post_payment("lost-finish", &body).await;
    assert!(proxy.answer_lost());
    lost.assert_problem(503, "service_unavailable");
    assert_eq!(app.charges(), 1);

    let mut retry = app.post_payment("lost-finish", &body).await;
    for _ in 0..40 {
        if retry.status != 409 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
        retry = app.post_payment("lost-finish", &body).await;
    }
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.json()["status"], "succeeded");
    assert_eq!(
        app.charges(),
        1,
        "the lost answer made the customer pay twice"
    );
    assert_eq!(app.payment_rows().await, 1);
    let merchant = app.merchant_id.clone();
    let events = app
        .state
        .db
        .run(move |conn| event_rows::all_for_merchant(conn, &merchant))
        .await
        .unwrap();
    assert_eq!(events.len(), 1, "one event for the payment");
}
