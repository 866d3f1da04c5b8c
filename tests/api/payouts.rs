//! Payouts (§12): from the available balance, at most once per key, never more than is
//! available under any concurrency, on the one operation mechanism.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::support::{TestApp, TestResponse, spawn_app_with, spawn_cluster, spawn_provider};

impl TestApp {
    pub(crate) async fn post_payout(&self, key: &str, body: &Value) -> TestResponse {
        self.post_json("/v1/payouts", &self.api_key, Some(key), body)
            .await
    }

    /// `available` in usd.
    pub(crate) async fn available_usd(&self) -> i64 {
        let balance = self.get("/v1/balance").await.json();
        balance["available"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["currency"] == "usd")
            .map_or(0, |m| m["amount"].as_i64().unwrap())
    }

    /// The types and amounts of a source's balance transactions, oldest first.
    pub(crate) async fn movements_of(&self, source: &str) -> Vec<String> {
        let listed = self
            .get(&format!("/v1/balance_transactions?source={source}"))
            .await
            .json();
        let mut all: Vec<String> = listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| format!("{} {}", t["type"].as_str().unwrap(), t["amount"]))
            .collect();
        all.reverse();
        all
    }
}

/// Money available at once, no fees: balances are easy to read.
pub(crate) fn funds_at_once(s: &mut payments_api::config::Settings) {
    s.ledger.pending = Duration::ZERO;
    s.ledger.fee_percent_bps = 0;
    s.ledger.fee_fixed = 0;
}

#[actix_web::test]
async fn a_payout_is_made_once_per_key_and_leaves_the_available_balance() {
    let app = spawn_app_with(funds_at_once).await;
    app.paid_payment(10_000).await;

    let body = json!({"amount": 4000, "currency": "usd", "description": "weekly"});
    let first = app.post_payout("po-once", &body).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let payout = first.json();
    assert_eq!(payout["object"], "payout");
    assert_eq!(payout["status"], "paid");
    assert_eq!(payout["destination"], "ba_test_instant");
    assert_eq!(payout["description"], "weekly");
    assert!(
        payout["provider_payout_id"]
            .as_str()
            .unwrap()
            .starts_with("tr_")
    );
    let id = payout["id"].as_str().unwrap();
    assert!(id.starts_with("po_"));

    let again = app.post_payout("po-once", &body).await;
    assert_eq!(again.status, 201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.text(), first.text());
    let other = app
        .post_payout("po-once", &json!({"amount": 4001, "currency": "usd"}))
        .await;
    other.assert_problem(422, "idempotency_key_reused");

    assert_eq!(app.simulator.payouts.all().len(), 1);
    assert_eq!(app.available_usd().await, 6000);
    assert_eq!(app.movements_of(id).await, ["payout -4000"]);
    let got = app.get(&format!("/v1/payouts/{id}")).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json(), payout);
    let listed = app.get("/v1/payouts?status=paid").await.json();
    assert_eq!(listed["data"].as_array().unwrap().len(), 1);
    let events = app.get("/v1/events?type=payout.paid").await.json();
    assert_eq!(events["data"][0]["data"]["object"]["id"], id);
}

/// A payout is bounded by the balance, not by what one payment may be: two payments of the
/// largest amount pay out more than either in one payout.
#[actix_web::test]
async fn a_payout_larger_than_any_payment_is_made_when_the_balance_holds_it() {
    let app = spawn_app_with(|s| {
        s.ledger.fee_percent_bps = 0;
        s.ledger.fee_fixed = 0;
        s.ledger.pending = std::time::Duration::ZERO;
    })
    .await;
    app.paid_payment(99_999_999).await;
    app.paid_payment(99_999_999).await;
    let paid = app
        .post_payout(
            "po-large",
            &json!({"amount": 150_000_000, "currency": "usd"}),
        )
        .await;
    assert_eq!(paid.status, 201, "{}", paid.text());
    assert_eq!(paid.json()["status"], "paid");
    assert_eq!(paid.json()["amount"], 150_000_000);
    let balance = app.get("/v1/balance").await.json();
    assert_eq!(balance["available"][0]["amount"], 49_999_998);
    let beyond_json = app
        .post_payout(
            "po-beyond",
            &json!({"amount": 9_007_199_254_740_992_i64, "currency": "usd"}),
        )
        .await;
    beyond_json.assert_problem(400, "invalid_request");
    assert_eq!(app.simulator.payouts.calls(), 1);
}

#[actix_web::test]
async fn a_payout_over_the_available_balance_is_refused_for_good_and_moves_nothing() {
    // The default pending period: the charge's money is not available yet.
    let app = spawn_app_with(|s| {
        s.ledger.fee_percent_bps = 0;
        s.ledger.fee_fixed = 0;
    })
    .await;
    app.paid_payment(5000).await;
    let refused = app
        .post_payout("po-too-much", &json!({"amount": 1, "currency": "usd"}))
        .await;
    let problem = refused.assert_problem(422, "insufficient_balance");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("0 usd available"),
        "{problem}"
    );
    let again = app
        .post_payout("po-too-much", &json!({"amount": 1, "currency": "usd"}))
        .await;
    assert_eq!(again.status, 422);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(app.simulator.payouts.calls(), 0);
    let listed = app.get("/v1/payouts").await.json();
    assert_eq!(listed["data"], json!([]), "a refusal is no payout");
    assert_eq!(
        app.get("/v1/balance_transactions?type=payout").await.json()["data"],
        json!([])
    );
}

#[actix_web::test]
async fn a_failed_payout_gives_its_amount_back() {
    let app = spawn_app_with(funds_at_once).await;
    app.paid_payment(3000).await;
    let failed = app
        .post_payout(
            "po-frozen",
            &json!({"amount": 2000, "currency": "usd", "destination": "ba_test_declined"}),
        )
        .await;
    assert_eq!(failed.status, 201, "{}", failed.text());
    let payout = failed.json();
    assert_eq!(payout["status"], "failed");
    assert_eq!(payout["failure_code"], "account_frozen");
    let id = payout["id"].as_str().unwrap();
    assert_eq!(
        app.movements_of(id).await,
        ["payout -2000", "payout_failure 2000"]
    );
    assert_eq!(app.available_usd().await, 3000);
    let bad = app
        .post_payout(
            "po-bad-destination",
            &json!({"amount": 5, "currency": "usd", "destination": "acct_1"}),
        )
        .await;
    assert_eq!(
        bad.assert_problem(400, "invalid_request")["param"],
        "destination"
    );
}

/// Waits until the payout `id` is no longer pending: its final object.
pub(crate) async fn final_payout(app: &TestApp, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let payout = app.get(&format!("/v1/payouts/{id}")).await.json();
        if payout["status"] != "pending" {
            return payout;
        }
        assert!(Instant::now() < deadline, "payout {id} never finished");
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_web::test]
async fn pending_payouts_are_finished_by_the_providers_webhook() {
    let app = spawn_app_with(|s| {
        funds_at_once(s);
        s.provider_async_delay = Duration::from_millis(200);
    })
    .await;
    app.paid_payment(5000).await;
    let paid_later = app
        .post_payout(
            "po-async",
            &json!({"amount": 1000, "currency": "usd", "destination": "ba_test_async"}),
        )
        .await;
    assert_eq!(paid_later.status, 202, "{}", paid_later.text());
    assert_eq!(paid_later.json()["status"], "pending");
    let closed = app
        .post_payout(
            "po-closed",
            &json!({"amount": 1500, "currency": "usd", "destination": "ba_test_closed"}),
        )
        .await;
    assert_eq!(closed.status, 202, "{}", closed.text());
    // Pending payouts have left the available balance already.
    assert_eq!(app.available_usd().await, 2500);

    let paid = final_payout(&app, paid_later.json()["id"].as_str().unwrap()).await;
    assert_eq!(paid["status"], "paid");
    let failed = final_payout(&app, closed.json()["id"].as_str().unwrap()).await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["failure_code"], "account_closed");
    assert_eq!(app.available_usd().await, 4000);
    // The retry learns the final answer.
    let retry = app
        .post_payout(
            "po-closed",
            &json!({"amount": 1500, "currency": "usd", "destination": "ba_test_closed"}),
        )
        .await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.json()["status"], "failed");
    assert_eq!(app.simulator.payouts.all().len(), 2);
    let failed_events = app.get("/v1/events?type=payout.failed").await.json();
    assert_eq!(failed_events["data"].as_array().unwrap().len(), 1);
}

/// The provider's `payout.paid` names the currency in its own case: it finishes the payout
/// (a case-sensitive comparison took it for a mismatch, and the payout stayed pending for
/// ever, its redeliveries duplicates).
#[actix_web::test]
async fn a_payout_event_finishes_the_payout_whatever_the_case_of_its_currency() {
    let app = spawn_app_with(|s| {
        funds_at_once(s);
        s.provider_async_delay = Duration::from_secs(600);
    })
    .await;
    app.paid_payment(5000).await;
    let pending = app
        .post_payout(
            "po-case",
            &json!({"amount": 1000, "currency": "usd", "destination": "ba_test_async"}),
        )
        .await;
    assert_eq!(pending.status, 202, "{}", pending.text());
    let id = pending.json()["id"].as_str().unwrap().to_owned();
    let at_provider = app.simulator.payouts.all();
    assert_eq!(at_provider.len(), 1);
    app.provider_event(
        "payout.paid",
        json!({"payout_id": at_provider[0].id, "reference": id, "amount": 1000, "currency": "USD"}),
    )
    .await;
    assert_eq!(final_payout(&app, &id).await["status"], "paid");
    assert_eq!(app.available_usd().await, 4000);
}

#[actix_web::test]
async fn concurrent_payouts_over_three_instances_never_pay_more_than_is_available() {
    let provider = spawn_provider().await;
    let (apps, _database) = spawn_cluster(3, &provider, funds_at_once).await;
    for amount in [4000, 3000, 3000] {
        apps[0].paid_payment(amount).await;
    }
    let available = apps[1].available_usd().await;
    assert_eq!(available, 10_000);

    // 20 payouts of 1500 with different keys, at once, spread over the instances: 30 000
    // asked of 10 000.
    let answers = join_all((0..20).map(|i| {
        let app = &apps[i % 3];
        async move {
            app.post_payout(
                &format!("po-race-{i}"),
                &json!({"amount": 1500, "currency": "usd"}),
            )
            .await
        }
    }))
    .await;
    let paid: Vec<&TestResponse> = answers.iter().filter(|r| r.status == 201).collect();
    let refused = answers
        .iter()
        .filter(|r| r.status == 422 && r.json()["code"] == "insufficient_balance")
        .count();
    assert_eq!(
        paid.len() + refused,
        20,
        "every answer is a payout or a refusal"
    );
    assert_eq!(
        paid.len(),
        6,
        "exactly those that fit: 6 × 1500 ≤ 10 000 < 7 × 1500"
    );
    assert!(paid.iter().all(|r| r.json()["status"] == "paid"));
    assert_eq!(
        provider.simulator.payouts.all().len(),
        paid.len(),
        "one provider payout each"
    );
    assert_eq!(apps[2].available_usd().await, 1000);
    // Newest first is newest by `created_at` too, though the claims were decided before
    // their transactions committed, in whatever order the instances wrote them.
    let listed = apps[0]
        .get("/v1/balance_transactions?limit=100")
        .await
        .json();
    let times: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["created_at"].as_str().unwrap())
        .collect();
    assert!(times.len() >= 7, "the charges and six payouts: {times:?}");
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "listed newest first: {times:?}"
    );
}
