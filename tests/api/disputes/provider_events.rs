//! The provider's dispute events: applied once, forward only, never a 5xx; those that
//! cannot apply are recorded and change nothing; those that come before their payment is
//! final wait for it.

use std::time::Duration;

use serde_json::{Value, json};

use super::{DISPUTE_FEE, opening};
use crate::support::{TestApp, assert_holds_for, spawn_app, spawn_app_with, visa};

impl TestApp {
    async fn visa_payment(&self, key: &str, amount: i64) -> Value {
        let response = self.post_payment(key, &visa(amount)).await;
        assert_eq!(response.status, 201, "{}", response.text());
        response.json()
    }

    /// Out of order: an automatic payment left `processing` (the simulator's webhook far
    /// away) and an authorization (800, `requires_capture`), each disputed before it is final;
    /// the first one's dispute also moved to `under_review`.
    async fn disputed_before_final(&self) -> (Value, Value) {
        let processing = self
            .post_payment(
                "pay-async",
                &json!({"amount": 2000, "currency": "usd", "payment_method": "pm_card_async"}),
            )
            .await
            .json();
        assert_eq!(processing["status"], "processing");
        let held = self.post_payment("pay-held", &manual()).await.json();
        assert_eq!(held["status"], "requires_capture");
        self.provider_event(
            "charge.dispute.created",
            opening("du_early", &processing, 2000),
        )
        .await;
        self.provider_event("charge.dispute.updated", moving("du_early", "under_review"))
            .await;
        self.provider_event("charge.dispute.created", opening("du_held", &held, 800))
            .await;
        (processing, held)
    }

    /// The provider's webhook that finishes `payment` (left `processing`) as succeeded.
    async fn charge_succeeded(&self, payment: &Value) {
        let charge = json!({
            "charge_id": payment["provider_charge_id"],
            "reference": payment["id"],
            "amount": payment["amount"],
            "currency": payment["currency"],
        });
        let response = self.provider_event("charge.succeeded", charge).await;
        assert_eq!(response.json()["duplicate"], false);
    }

    async fn all_disputes(&self) -> Vec<Value> {
        let response = self.get("/v1/disputes?limit=100").await;
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()["data"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// An authorization of 800.
fn manual() -> Value {
    json!({"amount": 800, "currency": "usd", "payment_method": "pm_card_visa",
        "capture_method": "manual"})
}

fn moving(provider_dispute_id: &str, status: &str) -> Value {
    json!({"dispute_id": provider_dispute_id, "status": status})
}

#[actix_web::test]
async fn dispute_events_open_once_and_only_move_forward() {
    let app = spawn_app().await;
    let payment = app.visa_payment("pay-events", 2500).await;
    let payment_id = payment["id"].as_str().unwrap();
    let created = opening("du_forward", &payment, 2500);
    let first = app
        .provider_event_with_id(
            "evt_dispute_open",
            "charge.dispute.created",
            created.clone(),
        )
        .await;
    assert_eq!(first.json()["duplicate"], false);
    let redelivered = app
        .provider_event_with_id(
            "evt_dispute_open",
            "charge.dispute.created",
            created.clone(),
        )
        .await;
    assert_eq!(redelivered.json()["duplicate"], true);
    // The same dispute under another webhook id: still one.
    app.provider_event("charge.dispute.created", created).await;
    let disputes = app.all_disputes().await;
    assert_eq!(disputes.len(), 1, "{disputes:?}");
    let id = disputes[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(disputes[0]["status"], "needs_response");
    assert_eq!(disputes[0]["provider_dispute_id"], "du_forward");
    assert_eq!(
        disputes[0]["evidence_due_by"],
        "2026-12-05T00:00:00.000000Z"
    );

    for (kind, status, expected) in [
        ("charge.dispute.updated", "under_review", "under_review"),
        ("charge.dispute.updated", "under_review", "under_review"),
        ("charge.dispute.closed", "won", "won"),
        ("charge.dispute.closed", "lost", "won"),
        ("charge.dispute.updated", "under_review", "won"),
    ] {
        app.provider_event(kind, moving("du_forward", status)).await;
        let now = app.get(&format!("/v1/disputes/{id}")).await.json();
        assert_eq!(now["status"], expected, "after {kind} {status}");
    }
    for kind in ["dispute.created", "dispute.updated", "dispute.closed"] {
        assert_eq!(app.events_about(kind, &id).await.len(), 1, "{kind}");
    }
    assert_eq!(
        app.movements(&id).await,
        [
            ("dispute".to_owned(), -2500, DISPUTE_FEE),
            ("dispute_reversal".to_owned(), 2500, 0)
        ]
    );
    assert_eq!(app.payment_json(payment_id).await["amount_disputed"], 0);
    app.post_dispute(
        &format!("/v1/disputes/{id}/close"),
        "late-close",
        &json!({}),
    )
    .await
    .assert_problem(409, "dispute_not_editable");
}

#[actix_web::test]
async fn dispute_events_that_cannot_apply_are_recorded_and_change_nothing() {
    let app = spawn_app_with(|s| s.recovery_interval = Duration::from_millis(50)).await;
    let paid = app.visa_payment("pay-ok", 1000).await;
    let declined = app
        .post_payment(
            "pay-declined",
            &json!({"amount": 1000, "currency": "usd", "payment_method": "pm_card_declined"}),
        )
        .await
        .json();
    let mut unknown = paid.clone();
    unknown["id"] = json!("pay_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f");
    let mut other_charge = paid.clone();
    other_charge["provider_charge_id"] = json!("ch_someone_else");
    let mut euros = opening("du_eur", &paid, 1000);
    euros["currency"] = json!("eur");
    for (name, data) in [
        ("unknown payment", opening("du_unknown", &unknown, 1000)),
        ("failed payment", opening("du_declined", &declined, 1000)),
        ("more than captured", opening("du_more", &paid, 1001)),
        ("another charge", opening("du_charge", &other_charge, 1000)),
        ("another currency", euros),
        ("malformed", json!({"dispute_id": "du_x"})),
        // Longer than an index entry may be: a 500 on PostgreSQL.
        (
            "a dispute id of 3 000 bytes",
            opening(&format!("du_{}", "x".repeat(3000)), &paid, 1000),
        ),
    ] {
        let response = app.provider_event("charge.dispute.created", data).await;
        assert_eq!(response.json()["duplicate"], false, "{name}");
    }
    app.provider_event("charge.dispute.closed", moving("du_nobody", "won"))
        .await;
    app.provider_event("charge.dispute.updated", moving("du_nobody", "lost"))
        .await;
    app.provider_event(
        "charge.dispute.closed",
        moving(&format!("du_{}", "y".repeat(3000)), "won"),
    )
    .await;
    // Nothing waits for these either: the recovery pass opens nothing.
    assert_holds_for(Duration::from_millis(300), "no dispute opens", || async {
        app.all_disputes().await.is_empty()
    })
    .await;
    let moved = app
        .get("/v1/balance_transactions?type=dispute")
        .await
        .json();
    assert_eq!(moved["data"].as_array().map(Vec::len), Some(0));
    assert_eq!(
        app.payment_json(paid["id"].as_str().unwrap()).await["amount_disputed"],
        0
    );
}

/// Provider text no column may hold (a control character, a NUL) is made fit (U+FFFD), not
/// refused: the dispute still opens, and an event for no payment of ours is still recorded
/// (a 400 would bring it back, the same, until the provider gave up).
#[actix_web::test]
async fn provider_text_with_control_characters_is_recorded_and_applied() {
    let app = spawn_app().await;
    let paid = app.visa_payment("pay-ctl", 1000).await;
    let mut data = opening("du_ctl\u{0}", &paid, 1000);
    data["reason"] = json!("fraudulent\u{b}");
    let response = app.provider_event("charge.dispute.created", data).await;
    assert_eq!(response.json()["duplicate"], false);
    let disputes = app.all_disputes().await;
    assert_eq!(disputes.len(), 1, "{disputes:?}");
    assert_eq!(disputes[0]["reason"], "fraudulent\u{fffd}");
    assert_eq!(disputes[0]["amount"], 1000);
    let moved = app
        .get("/v1/balance_transactions?type=dispute")
        .await
        .json();
    assert_eq!(moved["data"].as_array().map(Vec::len), Some(1), "{moved}");

    // An unknown reference with a NUL in it, and a key holding a control character: recorded
    // once, a redelivery recognised.
    let mut unknown = paid.clone();
    unknown["id"] = json!("pay_\u{0}nobody");
    let mut data = opening("du_nobody", &unknown, 1000);
    data["\u{7}note"] = json!("\u{1b}[31m");
    let first = app
        .provider_event_with_id("msg_ctl_1", "charge.dispute.created", data.clone())
        .await;
    assert_eq!(first.json()["duplicate"], false);
    let again = app
        .provider_event_with_id("msg_ctl_1", "charge.dispute.created", data)
        .await;
    assert_eq!(again.json()["duplicate"], true);
    assert_eq!(app.all_disputes().await.len(), 1);
}

/// A payment's disputes together take back at most what was captured: one that would go
/// past it is recorded and changes nothing.
#[actix_web::test]
async fn disputes_of_one_payment_never_hold_more_than_was_captured() {
    let app = spawn_app().await;
    let paid = app.visa_payment("pay-two-disputes", 1000).await;
    let payment_id = paid["id"].as_str().unwrap();
    for (id, amount) in [("du_first", 600), ("du_too_much", 500), ("du_rest", 400)] {
        app.provider_event("charge.dispute.created", opening(id, &paid, amount))
            .await;
    }
    let mut opened: Vec<String> = app
        .all_disputes()
        .await
        .iter()
        .map(|d| d["provider_dispute_id"].as_str().unwrap().to_owned())
        .collect();
    opened.sort();
    assert_eq!(opened, ["du_first", "du_rest"]);
    assert_eq!(app.payment_json(payment_id).await["amount_disputed"], 1000);
    let moved = app
        .get("/v1/balance_transactions?type=dispute")
        .await
        .json();
    assert_eq!(moved["data"].as_array().map(Vec::len), Some(2));
}

/// Many disputes of one payment opened at the same moment, each by its own delivery: the
/// capture bounds them together, whichever order the database decides them in.
#[actix_web::test]
async fn disputes_of_one_payment_opened_at_once_never_hold_more_than_was_captured() {
    use futures_util::future::join_all;
    let app = spawn_app().await;
    let paid = app.visa_payment("pay-dispute-race", 1000).await;
    let payment_id = paid["id"].as_str().unwrap();
    let answers = join_all((0..8).map(|i| {
        app.provider_event(
            "charge.dispute.created",
            opening(&format!("du_race_{i}"), &paid, 300),
        )
    }))
    .await;
    let statuses: Vec<_> = answers.iter().map(|a| a.status).collect();
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(app.all_disputes().await.len(), 3);
    assert_eq!(app.payment_json(payment_id).await["amount_disputed"], 900);
    let moved = app
        .get("/v1/balance_transactions?type=dispute")
        .await
        .json();
    assert_eq!(moved["data"].as_array().map(Vec::len), Some(3));
}

/// The provider's webhooks are not ordered: a dispute's close that comes before its opening
/// is kept, and the dispute, once opened, ends as the close says (not stuck open).
#[actix_web::test]
async fn a_close_that_comes_before_its_opening_is_applied_when_the_dispute_opens() {
    let app = spawn_app().await;
    let paid = app.visa_payment("pay-early-close", 1000).await;
    let payment_id = paid["id"].as_str().unwrap();
    app.provider_event("charge.dispute.updated", moving("du_early", "under_review"))
        .await;
    app.provider_event("charge.dispute.closed", moving("du_early", "won"))
        .await;
    assert!(app.all_disputes().await.is_empty(), "nothing to move yet");

    app.provider_event("charge.dispute.created", opening("du_early", &paid, 1000))
        .await;
    let disputes = app.all_disputes().await;
    assert_eq!(disputes.len(), 1);
    assert_eq!(disputes[0]["status"], "won");
    let dispute_id = disputes[0]["id"].as_str().unwrap();
    let moved = app
        .get(&format!("/v1/balance_transactions?source={dispute_id}"))
        .await
        .json();
    let mut types: Vec<&str> = moved["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    types.sort_unstable();
    assert_eq!(types, ["dispute", "dispute_reversal"]);
    let events = app.get("/v1/events?type=dispute.closed").await.json();
    assert_eq!(events["data"].as_array().map(Vec::len), Some(1));
    let payment = app.payment_json(payment_id).await;
    assert_eq!(payment["amount_disputed"], 0, "a won dispute holds nothing");
    let refund = app
        .post_refund(payment_id, "after-won", &json!({"amount": 100}))
        .await;
    assert_eq!(refund.status, 201, "{}", refund.text());
}

#[actix_web::test]
async fn dispute_events_for_a_payment_not_final_yet_wait_for_it() {
    let app = spawn_app_with(|s| {
        // The simulator's own webhooks are far away: the test sends them.
        s.provider_async_delay = Duration::from_secs(3600);
        s.recovery_interval = Duration::from_millis(50);
    })
    .await;
    let (processing, held) = app.disputed_before_final().await;
    let canceled = app.post_payment("pay-canceled", &manual()).await.json();
    app.provider_event(
        "charge.dispute.created",
        opening("du_canceled", &canceled, 800),
    )
    .await;
    assert_holds_for(Duration::from_millis(300), "nothing opens yet", || async {
        app.all_disputes().await.is_empty()
    })
    .await;

    app.charge_succeeded(&processing).await;
    let early = app
        .dispute_when(processing["id"].as_str().unwrap(), "under_review")
        .await;
    assert_eq!(early["amount"], 2000);

    let held_id = held["id"].as_str().unwrap();
    let captured = app.capture(held_id, "capture-held", &json!({})).await;
    assert_eq!(captured.status, 200, "{}", captured.text());
    app.dispute_when(held_id, "needs_response").await;

    let canceled_id = canceled["id"].as_str().unwrap();
    let cancel = app
        .post_json(
            &format!("/v1/payments/{canceled_id}/cancel"),
            &app.api_key,
            Some("cancel-it"),
            &json!({}),
        )
        .await;
    assert_eq!(cancel.status, 200, "{}", cancel.text());
    assert_holds_for(
        Duration::from_millis(300),
        "no dispute for a payment that ended without a capture",
        || async { app.disputes_of(canceled_id).await.is_empty() },
    )
    .await;
    assert_eq!(app.all_disputes().await.len(), 2);
}

/// A kept opening is applied in the transaction that captures its payment, not at the
/// recovery pass (here an hour away): from the first answer after the capture, the dispute
/// is open and the payment cannot be refunded.
#[actix_web::test]
async fn a_kept_dispute_opens_with_the_capture_of_its_payment() {
    let app = spawn_app_with(|s| {
        s.provider_async_delay = Duration::from_secs(3600);
        s.recovery_interval = Duration::from_secs(3600);
    })
    .await;
    let (processing, held) = app.disputed_before_final().await;
    assert!(app.all_disputes().await.is_empty(), "nothing opens yet");

    // The webhook that finishes the payment opens its dispute and moves it, at once.
    let id = processing["id"].as_str().unwrap();
    app.charge_succeeded(&processing).await;
    let disputes = app.disputes_of(id).await;
    assert_eq!(disputes.len(), 1, "{disputes:?}");
    assert_eq!(disputes[0]["status"], "under_review");
    assert_eq!(app.payment_json(id).await["amount_disputed"], 2000);
    let refund = app.post_refund(id, "refund-disputed", &json!({})).await;
    assert_eq!(refund.status, 409, "{}", refund.text());
    assert_eq!(refund.json()["code"], "payment_disputed");
    assert_eq!(
        app.movements(id).await,
        vec![("charge".to_owned(), 2000, 88)]
    );
    let dispute_id = disputes[0]["id"].as_str().unwrap();
    assert_eq!(
        app.movements(dispute_id).await,
        vec![("dispute".to_owned(), -2000, DISPUTE_FEE)]
    );

    // So does the capture of an authorization.
    let held_id = held["id"].as_str().unwrap();
    let captured = app.capture(held_id, "capture-held", &json!({})).await;
    assert_eq!(captured.status, 200, "{}", captured.text());
    let disputes = app.disputes_of(held_id).await;
    assert_eq!(disputes.len(), 1, "{disputes:?}");
    assert_eq!(disputes[0]["status"], "needs_response");
    assert_eq!(app.payment_json(held_id).await["amount_disputed"], 800);

    // Applied once: the recovery pass finds nothing left, and no money moved back at all.
    assert_eq!(
        payments_api::inbound::apply_deferred_disputes(&app.state).await,
        0
    );
    assert_eq!(
        app.movements(dispute_id).await,
        vec![("dispute".to_owned(), -2000, DISPUTE_FEE)]
    );
    assert!(
        app.provider_refunds().is_empty(),
        "no refund reached the provider"
    );
}

/// While the provider's opening of a dispute is kept (its payment was not final when it
/// came, and the recovery pass has not applied it yet), the payment's refunds wait as for
/// an open dispute.
#[actix_web::test]
async fn a_payment_with_a_kept_dispute_opening_is_not_refunded() {
    let app = spawn_app_with(|s| s.recovery_interval = Duration::from_secs(3600)).await;
    let payment = app.visa_payment("pay-kept", 2000).await;
    let id = payment["id"].as_str().unwrap().to_owned();
    // What a webhook leaves when the payment became final just after it read it.
    let kept = payments_api::db::disputes::DeferredRow {
        webhook_id: "evt_kept_race".to_owned(),
        provider_dispute_id: "du_raced".to_owned(),
        payment_id: id.clone(),
        event_type: "charge.dispute.created".to_owned(),
        data: opening("du_raced", &payment, 2000).to_string(),
        created_at: payments_api::domain::now(),
    };
    app.state
        .db
        .run(move |conn| payments_api::db::disputes::defer(conn, &kept))
        .await
        .expect("the kept opening");
    let refund = app
        .post_refund(&id, "refund-kept", &json!({"amount": 500}))
        .await;
    assert_eq!(refund.status, 409, "{}", refund.text());
    assert_eq!(refund.json()["code"], "payment_disputed");
    assert_eq!(
        app.movements(&id).await,
        vec![("charge".to_owned(), 2000, 88)]
    );
    assert!(
        app.provider_refunds().is_empty(),
        "no refund reached the provider"
    );

    // Once applied, the dispute is open: refunds still wait, now for it.
    payments_api::inbound::apply_deferred_disputes(&app.state).await;
    assert_eq!(app.disputes_of(&id).await.len(), 1);
    assert_eq!(app.payment_json(&id).await["amount_disputed"], 2000);
}

#[actix_web::test]
async fn a_lost_partial_dispute_bounds_what_is_left_to_refund() {
    let app = spawn_app().await;
    let payment = app.visa_payment("pay-partial", 2000).await;
    let payment_id = payment["id"].as_str().unwrap();
    app.provider_event("charge.dispute.created", opening("du_part", &payment, 500))
        .await;
    app.provider_event("charge.dispute.closed", moving("du_part", "lost"))
        .await;
    let payment_now = app.payment_json(payment_id).await;
    assert_eq!(payment_now["amount_disputed"], 500);
    app.post_refund(payment_id, "too-much", &json!({"amount": 1600}))
        .await
        .assert_problem(422, "amount_exceeds_refundable");
    let rest = app.post_refund(payment_id, "the-rest", &json!({})).await;
    assert_eq!(rest.status, 201, "{}", rest.text());
    assert_eq!(rest.json()["amount"], 1500);
}

/// A dispute's opening and its close delivered at the same moment, many times over: each
/// dispute ends won, its money back, whichever of the two the database took first (the close
/// was kept "until the opening" after the opening had looked for kept moves, and never
/// applied: 5 of 30 on PostgreSQL before the two took turns).
#[actix_web::test]
async fn an_opening_and_its_close_delivered_at_once_end_with_the_close_applied() {
    use futures_util::future::join_all;
    let app = spawn_app().await;
    let app = &app;
    let payments = join_all(
        (0..24).map(|i| async move { app.visa_payment(&format!("pay-race-{i}"), 900).await }),
    )
    .await;
    join_all(payments.iter().enumerate().flat_map(|(i, payment)| {
        let provider_id = format!("du_race_{i}");
        [
            app.provider_event(
                "charge.dispute.created",
                opening(&provider_id, payment, 900),
            ),
            app.provider_event("charge.dispute.closed", moving(&provider_id, "won")),
        ]
    }))
    .await;
    let disputes = app.all_disputes().await;
    assert_eq!(disputes.len(), 24, "{disputes:?}");
    for dispute in &disputes {
        assert_eq!(dispute["status"], "won", "{dispute}");
        let id = dispute["id"].as_str().unwrap();
        assert_eq!(
            app.movements(id).await,
            [
                ("dispute".to_owned(), -900, DISPUTE_FEE),
                ("dispute_reversal".to_owned(), 900, 0)
            ],
            "{dispute}"
        );
        assert_eq!(app.events_about("dispute.closed", id).await.len(), 1);
    }
    for payment in &payments {
        let id = payment["id"].as_str().unwrap();
        assert_eq!(app.payment_json(id).await["amount_disputed"], 0, "{id}");
    }
}

/// The same dispute opened and won by many deliveries at once (each under its own webhook
/// id, as a provider retrying from several workers would): one dispute, one `dispute` and one
/// `dispute_reversal`, one event of each kind.
#[actix_web::test]
async fn concurrent_deliveries_of_one_dispute_move_its_money_once() {
    use futures_util::future::join_all;
    let app = spawn_app().await;
    let payment = app.visa_payment("pay-storm", 1800).await;
    let created = opening("du_storm", &payment, 1800);
    join_all((0..8).map(|_| app.provider_event("charge.dispute.created", created.clone()))).await;
    let disputes = app.all_disputes().await;
    assert_eq!(disputes.len(), 1, "{disputes:?}");
    let id = disputes[0]["id"].as_str().unwrap().to_owned();
    join_all(
        (0..8).map(|_| app.provider_event("charge.dispute.closed", moving("du_storm", "won"))),
    )
    .await;
    assert_eq!(
        app.movements(&id).await,
        [
            ("dispute".to_owned(), -1800, DISPUTE_FEE),
            ("dispute_reversal".to_owned(), 1800, 0)
        ]
    );
    assert_eq!(app.events_about("dispute.created", &id).await.len(), 1);
    assert_eq!(app.events_about("dispute.closed", &id).await.len(), 1);
    assert_eq!(
        app.payment_json(payment["id"].as_str().unwrap()).await["amount_disputed"],
        0
    );
}
