//! The balance, its transactions and payouts through the typed client, against the real
//! service (in-process provider): reads, filters and streams, a payout made once per key,
//! the typed `insufficient_balance`, and a pending payout waited out.

use std::time::Duration;

use payments_api::config::Settings;
use payments_client::{
    BalanceTransaction, BalanceTransactionStatus, BalanceTransactionType, CreatePayment,
    CreatePayout, CreateRefund, ErrorCode, EventType, ListBalanceTransactions, ListEvents,
    ListPayouts, PayoutStatus, TryStreamExt,
};

use crate::support::Service;

fn visa(amount: i64) -> CreatePayment {
    CreatePayment::new(amount, "usd", "pm_card_visa")
}

/// Money available at once, no fees: balances are easy to read.
fn funds_at_once(s: &mut Settings) {
    s.ledger.pending = Duration::ZERO;
    s.ledger.fee_percent_bps = 0;
    s.ledger.fee_fixed = 0;
}

/// `(type, amount)` of each transaction, in the order given.
fn movements(transactions: &[BalanceTransaction]) -> Vec<(BalanceTransactionType, i64)> {
    transactions
        .iter()
        .map(|t| (t.transaction_type, t.amount))
        .collect()
}

#[actix_web::test]
async fn a_charge_is_pending_with_its_fee_and_transactions_are_read_and_filtered() {
    // The default settings: charges pending for two days, 2.9 % + 30 in fees.
    let service = Service::start(None, |_| {}).await;
    let client = service.client();
    let empty = client.get_balance().await.expect("balance");
    assert!(empty.available.is_empty() && empty.pending.is_empty());

    let payment = client.create_payment(&visa(2000)).await.expect("paid");
    let balance = client.get_balance().await.expect("balance");
    assert_eq!(balance.pending_in("usd"), 1912, "2000 less a fee of 88");
    assert_eq!(balance.available_in("usd"), 0);

    let refund = client
        .create_refund(
            &payment.id,
            &CreateRefund {
                amount: Some(500),
                reason: None,
            },
        )
        .await
        .expect("refunded");
    // A refund leaves `available` at once, pending charge or not: it goes below zero.
    let balance = client.get_balance().await.expect("balance");
    assert_eq!(
        (balance.available_in("usd"), balance.pending_in("usd")),
        (-500, 1912)
    );

    let all = client
        .list_balance_transactions(&ListBalanceTransactions::default())
        .await
        .expect("a page");
    assert!(!all.has_more);
    assert_eq!(
        movements(&all.data),
        [
            (BalanceTransactionType::Refund, -500),
            (BalanceTransactionType::Charge, 2000)
        ],
        "newest first"
    );
    let charge = &all.data[1];
    assert!(charge.id.starts_with("txn_"));
    assert_eq!((charge.fee, charge.net), (88, 1912));
    assert_eq!(charge.currency, "usd");
    assert_eq!(charge.source, payment.id);
    assert_eq!(charge.status, BalanceTransactionStatus::Pending);
    assert_eq!(
        charge.available_on - charge.created_at,
        chrono::Duration::days(2)
    );
    assert_eq!(all.data[0].source, refund.id);
    assert_eq!(all.data[0].status, BalanceTransactionStatus::Available);
    assert_eq!(
        &client
            .get_balance_transaction(&charge.id)
            .await
            .expect("read"),
        charge
    );

    let by_type = client
        .list_balance_transactions(&ListBalanceTransactions {
            transaction_type: Some(BalanceTransactionType::Refund),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert_eq!(by_type.data, all.data[..1]);
    let by_source = client
        .list_balance_transactions(&ListBalanceTransactions {
            source: Some(payment.id.clone()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert_eq!(by_source.data, all.data[1..]);
    let none = client
        .list_balance_transactions(&ListBalanceTransactions {
            transaction_type: Some(BalanceTransactionType::Payout),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(none.data.is_empty());

    let missing = client
        .get_balance_transaction("txn_00000000000000000000000000000000")
        .await
        .expect_err("404");
    assert_eq!(missing.code(), Some(&ErrorCode::NotFound));

    // Nothing is available: a payout is refused for good, typed, and moves nothing.
    let refused = client
        .create_payout(&CreatePayout::new(1, "usd"))
        .idempotency_key("po-none")
        .await
        .expect_err("insufficient balance");
    assert_eq!(refused.code(), Some(&ErrorCode::InsufficientBalance));
    assert_eq!(refused.status(), Some(422));
    assert_eq!(refused.attempts(), 1, "a 422 is an answer, not retried");
    assert!(!refused.is_outcome_unknown());
    let again = client
        .create_payout(&CreatePayout::new(1, "usd"))
        .idempotency_key("po-none")
        .await
        .expect_err("the key's stored answer");
    assert_eq!(again.code(), Some(&ErrorCode::InsufficientBalance));
    let simulator = service.in_process.as_ref().expect("simulator");
    assert_eq!(simulator.payouts.calls(), 0);
    let payouts = client
        .list_payouts(&ListPayouts::default())
        .await
        .expect("a page");
    assert!(payouts.data.is_empty(), "a refusal is no payout");
}

#[actix_web::test]
async fn transactions_stream_across_pages() {
    let service = Service::start(None, funds_at_once).await;
    let client = service.client();
    let mut payments = Vec::new();
    for amount in [100, 200, 300, 400, 500] {
        payments.push(client.create_payment(&visa(amount)).await.expect("paid").id);
    }
    payments.reverse(); // newest first

    let first = client
        .list_balance_transactions(&ListBalanceTransactions {
            limit: Some(2),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert_eq!(first.data.len(), 2);
    assert!(first.has_more);

    let streamed: Vec<BalanceTransaction> = client
        .stream_balance_transactions(ListBalanceTransactions {
            limit: Some(2),
            ..Default::default()
        })
        .try_collect()
        .await
        .expect("every page");
    let sources: Vec<&str> = streamed.iter().map(|t| t.source.as_str()).collect();
    assert_eq!(sources, payments, "every charge once, newest first");
    assert_eq!(streamed[..2], first.data);
    assert!(
        streamed
            .iter()
            .all(|t| t.status == BalanceTransactionStatus::Available && t.fee == 0)
    );

    let after: Vec<String> = client
        .stream_balance_transactions(ListBalanceTransactions {
            limit: Some(2),
            starting_after: Some(streamed[1].id.clone()),
            transaction_type: Some(BalanceTransactionType::Charge),
            ..Default::default()
        })
        .map_ok(|t| t.source)
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(after, payments[2..]);
    assert_eq!(
        client
            .get_balance()
            .await
            .expect("balance")
            .available_in("usd"),
        1500
    );
}

#[actix_web::test]
async fn a_payout_is_made_once_per_key_and_listed_by_status() {
    let service = Service::start(None, |s| {
        funds_at_once(s);
        s.provider_async_delay = Duration::from_millis(300);
    })
    .await;
    let simulator = service.in_process.clone().expect("simulator");
    let client = service.client();
    for amount in [4000, 3000, 3000] {
        client.create_payment(&visa(amount)).await.expect("paid");
    }
    assert_eq!(
        client
            .get_balance()
            .await
            .expect("balance")
            .available_in("usd"),
        10_000
    );

    let params = CreatePayout::new(4000, "USD").description("weekly");
    let created = client
        .create_payout(&params)
        .idempotency_key("po-weekly")
        .send()
        .await
        .expect("paid out");
    assert_eq!(created.status, 201);
    assert!(!created.replayed);
    let paid = created.data;
    assert!(paid.id.starts_with("po_"));
    assert_eq!(paid.status, PayoutStatus::Paid);
    assert_eq!((paid.amount, paid.currency.as_str()), (4000, "usd"));
    assert_eq!(paid.destination, "ba_test_instant");
    assert_eq!(paid.description.as_deref(), Some("weekly"));
    assert_eq!(paid.failure_code, None);

    // The same call with the same key: the stored answer, no second payout.
    let again = client
        .create_payout(&params)
        .idempotency_key("po-weekly")
        .send()
        .await
        .expect("replayed");
    assert_eq!(again.status, 201);
    assert!(again.replayed);
    assert_eq!(again.data, paid);
    let at_provider = simulator.payouts.all();
    assert_eq!(at_provider.len(), 1, "one payout at the provider");
    assert_eq!(simulator.payouts.calls(), 1, "the replay never reached it");
    assert_eq!(
        paid.provider_payout_id.as_deref(),
        Some(at_provider[0].id.as_str())
    );
    let reused = client
        .create_payout(&CreatePayout::new(4001, "usd"))
        .idempotency_key("po-weekly")
        .await
        .expect_err("another request");
    assert_eq!(reused.code(), Some(&ErrorCode::IdempotencyKeyReused));
    assert_eq!(client.get_payout(&paid.id).await.expect("read"), paid);

    let moved = client
        .list_balance_transactions(&ListBalanceTransactions {
            source: Some(paid.id.clone()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert_eq!(
        movements(&moved.data),
        [(BalanceTransactionType::Payout, -4000)]
    );
    assert_eq!(moved.data[0].status, BalanceTransactionStatus::Available);

    // A payout the bank refuses fails, and its amount comes back.
    let declined = client
        .create_payout(&CreatePayout::new(1000, "usd").destination("ba_test_declined"))
        .await
        .expect("a refusal by the bank is a payout");
    assert_eq!(declined.status, PayoutStatus::Failed);
    assert_eq!(declined.failure_code.as_deref(), Some("account_frozen"));
    let moved: Vec<BalanceTransaction> = client
        .stream_balance_transactions(ListBalanceTransactions {
            source: Some(declined.id.clone()),
            ..Default::default()
        })
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(
        movements(&moved),
        [
            (BalanceTransactionType::PayoutFailure, 1000),
            (BalanceTransactionType::Payout, -1000)
        ]
    );

    // Pending at first (202), finished by the provider's webhook: waited out with the key.
    let later = CreatePayout::new(500, "usd").destination("ba_test_async");
    let first = client
        .create_payout(&later)
        .idempotency_key("po-async")
        .send()
        .await
        .expect("accepted");
    assert_eq!(
        (first.status, first.data.status),
        (202, PayoutStatus::Pending)
    );
    let finished = client
        .create_payout(&later)
        .idempotency_key("po-async")
        .wait_until_final(Duration::from_secs(20))
        .send()
        .await
        .expect("final");
    assert_eq!(finished.status, 201);
    assert_eq!(finished.data.status, PayoutStatus::Paid);
    assert_eq!(finished.data.id, first.data.id);

    let over = client
        .create_payout(&CreatePayout::new(5501, "usd"))
        .await
        .expect_err("more than the 5500 left");
    assert_eq!(over.code(), Some(&ErrorCode::InsufficientBalance));
    assert!(over.problem().and_then(|p| p.detail.as_deref()).is_some());
    assert_eq!(
        client
            .get_balance()
            .await
            .expect("balance")
            .available_in("usd"),
        5500
    );
    assert_eq!(simulator.payouts.all().len(), 3);

    let paid_ids: Vec<String> = client
        .stream_payouts(ListPayouts {
            limit: Some(1),
            status: Some(PayoutStatus::Paid),
            ..Default::default()
        })
        .map_ok(|p| p.id)
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(paid_ids, [finished.data.id.clone(), paid.id.clone()]);
    let failed = client
        .list_payouts(&ListPayouts {
            status: Some(PayoutStatus::Failed),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert_eq!(failed.data, std::slice::from_ref(&declined));
    let page = client
        .list_payouts(&ListPayouts {
            limit: Some(2),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(page.has_more);
    assert_eq!(page.data[0].id, finished.data.id);
    assert_eq!(page.data[1].id, declined.id);

    let events = client
        .list_events(&ListEvents {
            event_type: Some(EventType::PayoutFailed),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert_eq!(events.data.len(), 1);
    assert_eq!(events.data[0].payout(), Some(&declined));
}
