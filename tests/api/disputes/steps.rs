//! The merchant's steps: evidence saved, submitted, the dispute closed; each once per key,
//! refused once the dispute no longer takes it, and the money each outcome moves.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;

use super::DISPUTE_FEE;
use crate::support::{TestApp, spawn_app_with, spawn_app_with_provider, spawn_provider};

fn quick_disputes(s: &mut payments_api::config::Settings) {
    s.provider_async_delay = Duration::from_millis(150);
    s.ledger.pending = Duration::ZERO;
}

#[actix_web::test]
async fn submitted_winning_evidence_wins_the_dispute_and_gives_the_amount_back() {
    let app = spawn_app_with(quick_disputes).await;
    let payment = app.disputed_payment("pay-disputed", 2000).await;
    let payment_id = payment["id"].as_str().unwrap();
    let dispute = app.dispute_when(payment_id, "needs_response").await;
    let id = dispute["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("dp_"), "{dispute}");
    assert_eq!(dispute["amount"], 2000);
    assert_eq!(dispute["reason"], "fraudulent");
    assert_eq!(dispute["evidence_submitted_at"], serde_json::Value::Null);
    assert_eq!(app.payment_json(payment_id).await["amount_disputed"], 2000);
    assert_eq!(
        app.movements(&id).await,
        [("dispute".to_owned(), -2000, DISPUTE_FEE)]
    );
    // Refunds wait while the dispute is open.
    app.post_refund(payment_id, "refund-while-open", &json!({}))
        .await
        .assert_problem(409, "payment_disputed");

    // Saved only: nothing goes to the provider.
    let path = format!("/v1/disputes/{id}");
    let saved = app
        .post_dispute(&path, "ev-1", &json!({"evidence": {"text": "draft"}}))
        .await;
    assert_eq!(saved.status, 200, "{}", saved.text());
    assert_eq!(saved.json()["evidence"]["text"], "draft");
    assert_eq!(saved.json()["status"], "needs_response");
    assert_eq!(app.simulator.disputes.calls(), 0);

    // A draft is kept until replaced; a submit alone sends it.
    let draft = json!({"evidence": {"text": "signed for: winning_evidence"}});
    let saved = app.post_dispute(&path, "ev-1b", &draft).await;
    assert_eq!(
        saved.json()["evidence"]["text"],
        "signed for: winning_evidence"
    );
    let kept = app.post_dispute(&path, "ev-1c", &json!({})).await;
    assert_eq!(kept.status, 200, "{}", kept.text());
    assert_eq!(
        kept.json()["evidence"]["text"],
        "signed for: winning_evidence"
    );
    let body = json!({"submit": true});
    let submitted = app.post_dispute(&path, "ev-2", &body).await;
    assert_eq!(submitted.status, 200, "{}", submitted.text());
    assert_eq!(submitted.json()["status"], "under_review");
    assert!(submitted.json()["evidence_submitted_at"].is_string());
    let replay = app.post_dispute(&path, "ev-2", &body).await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("Idempotent-Replayed"), Some("true"));
    assert_eq!(replay.text(), submitted.text());
    assert_eq!(app.simulator.disputes.calls(), 1, "one provider call");
    // Under review, it takes no more evidence: the key's final answer.
    app.post_dispute(&path, "ev-3", &json!({"evidence": {"text": "more"}}))
        .await
        .assert_problem(409, "dispute_not_editable");

    let won = app.dispute_when(payment_id, "won").await;
    assert_eq!(won["evidence"]["text"], "signed for: winning_evidence");
    assert_eq!(
        app.movements(&id).await,
        [
            ("dispute".to_owned(), -2000, DISPUTE_FEE),
            ("dispute_reversal".to_owned(), 2000, 0)
        ]
    );
    assert_eq!(app.payment_json(payment_id).await["amount_disputed"], 0);
    for kind in ["dispute.created", "dispute.updated", "dispute.closed"] {
        assert_eq!(app.events_about(kind, &id).await.len(), 1, "{kind}");
    }
    // Won: all of the payment is refundable again.
    let refund = app
        .post_refund(payment_id, "refund-after-won", &json!({}))
        .await;
    assert_eq!(refund.status, 201, "{}", refund.text());
    assert_eq!(refund.json()["amount"], 2000);
}

#[actix_web::test]
async fn a_closed_dispute_is_lost_once_and_what_it_took_is_no_longer_refundable() {
    let app = spawn_app_with(quick_disputes).await;
    let payment = app.disputed_payment("pay-lost", 3000).await;
    let payment_id = payment["id"].as_str().unwrap();
    let dispute = app.dispute_when(payment_id, "needs_response").await;
    let id = dispute["id"].as_str().unwrap();
    let close = format!("/v1/disputes/{id}/close");

    // Many hands on one key: one close at the provider, one answer.
    let empty = json!({});
    let answers = join_all((0..8).map(|_| app.post_dispute(&close, "close-1", &empty))).await;
    for answer in &answers {
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert_eq!(answer.json()["status"], "lost");
    }
    assert_eq!(app.simulator.disputes.calls(), 1);
    // Another key: the dispute takes no more steps, and that answer stands for its key.
    for _ in 0..2 {
        app.post_dispute(&close, "close-2", &json!({}))
            .await
            .assert_problem(409, "dispute_not_editable");
    }
    assert_eq!(app.simulator.disputes.calls(), 1);
    // The simulator announces the loss too: it changes nothing more.
    tokio_sleep(Duration::from_millis(400)).await;
    assert_eq!(
        app.movements(id).await,
        [("dispute".to_owned(), -3000, DISPUTE_FEE)]
    );
    assert_eq!(app.events_about("dispute.closed", id).await.len(), 1);
    let payment = app.payment_json(payment_id).await;
    assert_eq!(payment["amount_disputed"], 3000);
    app.post_refund(payment_id, "refund-after-lost", &json!({}))
        .await
        .assert_problem(409, "payment_not_refundable");
}

#[actix_web::test]
async fn steps_on_one_dispute_with_different_keys_at_once_take_it_once() {
    let app = spawn_app_with(quick_disputes).await;
    let payment = app.disputed_payment("pay-race", 1000).await;
    let dispute = app
        .dispute_when(payment["id"].as_str().unwrap(), "needs_response")
        .await;
    let id = dispute["id"].as_str().unwrap();
    let app = &app;
    let answers = join_all((0..10).map(|n| {
        let (path, body) = if n % 2 == 0 {
            (
                format!("/v1/disputes/{id}"),
                json!({"evidence": {"text": format!("evidence {n}")}, "submit": true}),
            )
        } else {
            (format!("/v1/disputes/{id}/close"), json!({}))
        };
        let key = format!("race-{n}");
        async move { app.post_dispute(&path, &key, &body).await }
    }))
    .await;
    let taken = answers.iter().filter(|a| a.status == 200).count();
    assert_eq!(taken, 1, "exactly one step takes the dispute");
    for refused in answers.iter().filter(|a| a.status != 200) {
        refused.assert_problem(409, "dispute_not_editable");
    }
    assert_eq!(app.simulator.disputes.calls(), 1);
}

/// A 409 from the provider is the key's final answer; nothing moved, and the dispute takes
/// the next step.
#[actix_web::test]
async fn a_step_the_provider_refuses_is_the_keys_final_409_and_lets_the_dispute_go() {
    let provider = spawn_provider().await;
    let app = spawn_app_with_provider(&provider, |s| s.provider_max_attempts = 1).await;
    let dispute = opened_by_the_provider(&app, "pay-refused", "du_refused", 900).await;
    let close = format!("/v1/disputes/{}/close", dispute["id"].as_str().unwrap());
    provider.faults.refuse_next.lock().unwrap().push_back(409);
    let calls = || provider.faults.http_calls.load(Ordering::SeqCst);
    let before = calls();
    for _ in 0..2 {
        app.post_dispute(&close, "refused-close", &json!({}))
            .await
            .assert_problem(409, "dispute_not_editable");
    }
    assert_eq!(calls() - before, 1, "asked once; the refusal is replayed");
    let again = app
        .get(&format!("/v1/disputes/{}", dispute["id"].as_str().unwrap()))
        .await;
    assert_eq!(again.json()["status"], "needs_response");
    // The provider this test runs does not know `du_refused`: the next close is refused
    // by it too, which shows the dispute was let go (not held by the first step).
    app.post_dispute(&close, "second-close", &json!({}))
        .await
        .assert_problem(409, "dispute_not_editable");
    assert_eq!(calls() - before, 2);
}

/// A key's scope is one merchant and one endpoint: the same key saves evidence on a dispute
/// and then closes it, each once.
#[actix_web::test]
async fn one_key_on_the_evidence_and_on_the_close_is_two_requests() {
    let app = spawn_app_with(quick_disputes).await;
    let payment = app.disputed_payment("pay-one-key", 1200).await;
    let dispute = app
        .dispute_when(payment["id"].as_str().unwrap(), "needs_response")
        .await;
    let id = dispute["id"].as_str().unwrap();
    let (save, close) = (
        format!("/v1/disputes/{id}"),
        format!("/v1/disputes/{id}/close"),
    );
    let draft = json!({"evidence": {"text": "a draft"}});
    let saved = app.post_dispute(&save, "one-key", &draft).await;
    assert_eq!(saved.status, 200, "{}", saved.text());
    let closed = app.post_dispute(&close, "one-key", &json!({})).await;
    assert_eq!(closed.status, 200, "{}", closed.text());
    assert_eq!(closed.json()["status"], "lost");
    assert_eq!(
        app.simulator.disputes.calls(),
        1,
        "the close was asked once"
    );

    // Each endpoint's key still keeps its own request.
    let replayed = app.post_dispute(&save, "one-key", &draft).await;
    assert_eq!(replayed.body, saved.body);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    app.post_dispute(&save, "one-key", &json!({"evidence": {"text": "another"}}))
        .await
        .assert_problem(422, "idempotency_key_reused");
    let again = app.post_dispute(&close, "one-key", &json!({})).await;
    assert_eq!(again.body, closed.body);
    assert_eq!(app.simulator.disputes.calls(), 1);
}

/// A step asked for while another is at the provider is refused without being stored: the
/// dispute is still `needs_response`, and if the provider refuses the other step, the same
/// key then takes this one.
#[actix_web::test]
async fn a_step_refused_while_another_is_at_the_provider_can_be_retried_with_its_key() {
    let provider = spawn_provider().await;
    let app = spawn_app_with_provider(&provider, |s| s.provider_max_attempts = 1).await;
    let dispute = opened_by_the_provider(&app, "pay-busy", "du_busy", 700).await;
    let id = dispute["id"].as_str().unwrap();
    let (close, save) = (
        format!("/v1/disputes/{id}/close"),
        format!("/v1/disputes/{id}"),
    );
    let draft = json!({"evidence": {"text": "the receipt"}});
    // The provider this test runs does not know `du_busy`: it refuses the close, slowly.
    provider.faults.latency_ms.store(600, Ordering::SeqCst);
    let (closed, busy) =
        futures_util::future::join(app.post_dispute(&close, "slow-close", &json!({})), async {
            tokio_sleep(Duration::from_millis(200)).await;
            app.post_dispute(&save, "draft-while-busy", &draft).await
        })
        .await;
    busy.assert_problem(409, "dispute_not_editable");
    closed.assert_problem(409, "dispute_not_editable");
    provider.faults.latency_ms.store(0, Ordering::SeqCst);

    let retried = app.post_dispute(&save, "draft-while-busy", &draft).await;
    assert_eq!(retried.status, 200, "{}", retried.text());
    assert_eq!(retried.json()["status"], "needs_response");
    assert_eq!(retried.json()["evidence"]["text"], "the receipt");
}

#[actix_web::test]
async fn bad_steps_are_refused_and_change_nothing() {
    let app = spawn_app_with(quick_disputes).await;
    let payment = app.disputed_payment("pay-bad", 1200).await;
    let dispute = app
        .dispute_when(payment["id"].as_str().unwrap(), "needs_response")
        .await;
    let id = dispute["id"].as_str().unwrap();
    let path = format!("/v1/disputes/{id}");
    let long = "a".repeat(20_001);
    for (body, param) in [
        (json!({"evidence": {"text": long}}), "evidence"),
        (json!({"evidence": {"text": 7}}), "evidence"),
        (json!({"evidence": "text"}), "evidence"),
        (json!({"submit": "yes"}), "submit"),
        (json!({"amount": 1}), "amount"),
    ] {
        let problem = app
            .post_dispute(&path, "bad", &body)
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], param, "{body}");
    }
    app.post_dispute(
        "/v1/disputes/dp_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f",
        "nobody",
        &json!({}),
    )
    .await
    .assert_problem(404, "not_found");
    app.post_dispute("/v1/disputes/pay_x/close", "bad-id", &json!({}))
        .await
        .assert_problem(404, "not_found");
    let missing_key = app.post_json(&path, &app.api_key, None, &json!({})).await;
    missing_key.assert_problem(400, "idempotency_key_missing");
    app.get("/v1/disputes?status=open")
        .await
        .assert_problem(400, "invalid_request");
    let after = app.get(&path).await.json();
    assert_eq!(after, dispute, "nothing changed");
    assert_eq!(app.simulator.disputes.calls(), 0);
    // Another merchant sees nothing of it.
    let other = app.create_merchant("other").await;
    assert_eq!(app.get_as(&path, &other).await.status, 404);
}

/// A submit whose answer comes after the provider decided the dispute (the simulator takes
/// the evidence, sends its `won` webhook 150 ms later and answers the submit at 600 ms):
/// the dispute is `won` once, and the evidence it marks submitted is a change of the
/// dispute, so `updated_at` moves with it.
#[actix_web::test]
async fn a_submit_that_ends_after_the_dispute_was_decided_marks_it_updated() {
    let app = spawn_app_with(|s| {
        quick_disputes(s);
        s.provider_latency = Duration::from_millis(600);
    })
    .await;
    let payment = app.disputed_payment("pay-late-submit", 1500).await;
    let dispute = app
        .dispute_when(payment["id"].as_str().unwrap(), "needs_response")
        .await;
    let id = dispute["id"].as_str().unwrap();
    let path = format!("/v1/disputes/{id}");
    let body = json!({"evidence": {"text": "winning_evidence"}, "submit": true});
    let submitted = app.post_dispute(&path, "late", &body).await;
    assert_eq!(submitted.status, 200, "{}", submitted.text());
    let after = submitted.json();
    assert_eq!(after["status"], "won", "{after}");
    assert!(after["evidence_submitted_at"].is_string(), "{after}");
    assert_eq!(
        after["updated_at"], after["evidence_submitted_at"],
        "{after}"
    );
    assert_eq!(app.get(&path).await.json(), after);
    assert_eq!(app.events_about("dispute.closed", id).await.len(), 1);
    assert_eq!(app.events_about("dispute.updated", id).await.len(), 0);
    // The money moved once each way: the dispute, and its reversal when won.
    assert_eq!(
        app.simulator.disputes.calls(),
        1,
        "one submit at the provider"
    );
    assert_eq!(
        app.movements(id).await,
        [
            ("dispute".to_owned(), -1500, DISPUTE_FEE),
            ("dispute_reversal".to_owned(), 1500, 0)
        ]
    );
}

/// A paid payment, and a dispute of `amount` on it opened by the provider's webhook (for a
/// provider this test runs, which does not know the dispute): the dispute, `needs_response`.
async fn opened_by_the_provider(
    app: &TestApp,
    key: &str,
    provider_dispute_id: &str,
    amount: i64,
) -> serde_json::Value {
    let card = json!({"amount": amount, "currency": "usd", "payment_method": "pm_card_visa"});
    let payment = app.post_payment(key, &card).await.json();
    let opening = super::opening(provider_dispute_id, &payment, amount);
    app.provider_event("charge.dispute.created", opening).await;
    app.dispute_when(payment["id"].as_str().unwrap(), "needs_response")
        .await
}

async fn tokio_sleep(duration: Duration) {
    actix_web::rt::time::sleep(duration).await;
}
