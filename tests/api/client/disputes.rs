//! Disputes through the typed client, against the real service (in-process provider): the
//! simulator disputes every `pm_card_dispute` payment for its whole amount after
//! `provider_async_delay`. A dispute listed, read and answered (evidence saved, then
//! submitted once per key and won), the payment's `amount_disputed`, the typed
//! `payment_disputed` and `dispute_not_editable`, a dispute closed as lost, the dispute
//! events, lists by status and payment streamed across pages, and a submit whose provider
//! answer was lost (202) waited out with its key.

use std::sync::atomic::Ordering;
use std::time::Duration;

use payments_api::config::Settings;
use payments_api::provider::sim::{RetryPolicy, WebhookDelivery};
use payments_client::{
    Client, CreatePayment, CreateRefund, Dispute, DisputeStatus, ErrorCode, Event, EventType,
    ListDisputes, ListEvents, Payment, PaymentStatus, TryStreamExt, UpdateDispute,
};

use crate::support::{Service, spawn_provider, wait_for};
use crate::webhooks::test_secret;

/// How long a dispute may take to appear or be decided: far more than the delay.
const PATIENCE: Duration = Duration::from_secs(15);

/// Disputes opened and decided 150 ms after the provider's charge or step.
fn quick_disputes(s: &mut Settings) {
    s.provider_async_delay = Duration::from_millis(150);
}

fn disputed_card(amount: i64) -> CreatePayment {
    CreatePayment::new(amount, "usd", "pm_card_dispute")
}

/// A `pm_card_dispute` payment (succeeded, nothing disputed yet), and its dispute once the
/// client lists it.
async fn disputed_payment(client: &Client, amount: i64) -> (Payment, Dispute) {
    let payment = client
        .create_payment(&disputed_card(amount))
        .await
        .expect("paid");
    assert_eq!(payment.status, PaymentStatus::Succeeded);
    assert_eq!(payment.amount_disputed, 0, "its dispute comes later");
    let dispute = dispute_of(client, &payment.id).await;
    (payment, dispute)
}

/// Waits (bounded) until the client lists a dispute of `payment_id`, and returns it.
async fn dispute_of(client: &Client, payment_id: &str) -> Dispute {
    let params = ListDisputes {
        payment_id: Some(payment_id.to_owned()),
        ..Default::default()
    };
    wait_for(PATIENCE, &format!("a dispute of {payment_id}"), || async {
        let page = client.list_disputes(&params).await.expect("a page");
        page.data.into_iter().next()
    })
    .await
}

/// Waits (bounded) until the dispute is in `status`, and returns it.
async fn dispute_when(client: &Client, id: &str, status: DisputeStatus) -> Dispute {
    wait_for(PATIENCE, &format!("{id} {}", status.as_str()), || async {
        let dispute = client.get_dispute(id).await.expect("read");
        (dispute.status == status).then_some(dispute)
    })
    .await
}

/// The events of `kind` about the dispute `id`, newest first.
async fn dispute_events(client: &Client, kind: EventType, id: &str) -> Vec<Event> {
    let events: Vec<Event> = client
        .stream_events(ListEvents {
            event_type: Some(kind),
            ..Default::default()
        })
        .try_collect()
        .await
        .expect("every page");
    events
        .into_iter()
        .filter(|e| e.dispute().is_some_and(|d| d.id == id))
        .collect()
}

fn ids(disputes: &[Dispute]) -> Vec<&str> {
    disputes.iter().map(|d| d.id.as_str()).collect()
}

#[actix_web::test]
async fn a_dispute_is_listed_read_refuses_refunds_and_is_won_with_evidence_submitted_once() {
    let service = Service::start(None, quick_disputes).await;
    let simulator = service.in_process.clone().expect("simulator");
    let client = service.client();
    let (payment, dispute) = disputed_payment(&client, 2000).await;

    assert!(dispute.id.starts_with("dp_"), "{dispute:?}");
    assert_eq!(dispute.payment_id, payment.id);
    assert_eq!((dispute.amount, dispute.currency.as_str()), (2000, "usd"));
    assert_eq!(dispute.reason, "fraudulent");
    assert_eq!(dispute.status, DisputeStatus::NeedsResponse);
    assert_eq!(dispute.evidence.text, None);
    assert_eq!(dispute.evidence_submitted_at, None);
    assert!(dispute.evidence_due_by > dispute.created_at);
    let at_provider = simulator.disputes.all();
    assert_eq!(at_provider.len(), 1);
    assert_eq!(dispute.provider_dispute_id, at_provider[0].id);
    assert_eq!(
        client.get_dispute(&dispute.id).await.expect("read"),
        dispute
    );
    let missing = client
        .get_dispute("dp_00000000000000000000000000000000")
        .await
        .expect_err("404");
    assert_eq!(missing.code(), Some(&ErrorCode::NotFound));

    let disputed = client.get_payment(&payment.id).await.expect("read");
    assert_eq!(disputed.amount_disputed, 2000);
    assert_eq!(disputed.amount_refunded, 0);

    // Refunds wait while the dispute is open: typed, an answer (not retried), final.
    let refused = client
        .create_refund(&payment.id, &CreateRefund::default())
        .idempotency_key("refund-while-open")
        .await
        .expect_err("payment disputed");
    assert_eq!(refused.code(), Some(&ErrorCode::PaymentDisputed));
    assert_eq!(refused.status(), Some(409));
    assert_eq!(refused.attempts(), 1);
    assert!(!refused.is_outcome_unknown());

    // Saved only: nothing goes to the provider.
    let draft = client
        .update_dispute(&dispute.id, &UpdateDispute::new("draft"))
        .idempotency_key("ev-draft")
        .send()
        .await
        .expect("saved");
    assert_eq!(draft.status, 200);
    assert_eq!(draft.data.status, DisputeStatus::NeedsResponse);
    assert_eq!(draft.data.evidence.text.as_deref(), Some("draft"));
    assert_eq!(draft.data.evidence_submitted_at, None);
    assert_eq!(simulator.disputes.calls(), 0, "a draft is not sent");

    // Submitted: under review, one provider call however often the key is sent.
    let winning = UpdateDispute::new("signed for at the door: winning_evidence").submit(true);
    let submitted = client
        .update_dispute(&dispute.id, &winning)
        .idempotency_key("ev-submit")
        .wait_until_final(Duration::from_secs(20))
        .send()
        .await
        .expect("submitted");
    assert_eq!(submitted.status, 200);
    assert!(!submitted.replayed);
    let under_review = submitted.data;
    assert_eq!(under_review.id, dispute.id);
    assert_eq!(under_review.status, DisputeStatus::UnderReview);
    assert_eq!(
        under_review.evidence.text.as_deref(),
        Some("signed for at the door: winning_evidence")
    );
    assert!(under_review.evidence_submitted_at.is_some());
    let again = client
        .update_dispute(&dispute.id, &winning)
        .idempotency_key("ev-submit")
        .send()
        .await
        .expect("replayed");
    assert_eq!(again.status, 200);
    assert!(again.replayed);
    assert_eq!(again.data, under_review);
    assert_eq!(simulator.disputes.calls(), 1, "one provider call");
    let reused = client
        .update_dispute(&dispute.id, &UpdateDispute::new("other").submit(true))
        .idempotency_key("ev-submit")
        .await
        .expect_err("another request");
    assert_eq!(reused.code(), Some(&ErrorCode::IdempotencyKeyReused));

    // The provider decides: won, the amount back on the payment.
    let won = dispute_when(&client, &dispute.id, DisputeStatus::Won).await;
    assert_eq!(won.evidence, under_review.evidence);
    assert_eq!(
        won.evidence_submitted_at,
        under_review.evidence_submitted_at
    );
    assert_eq!(simulator.disputes.calls(), 1);
    assert_eq!(
        client
            .get_payment(&payment.id)
            .await
            .expect("read")
            .amount_disputed,
        0
    );

    // One event per move, typed, each with the dispute as it was then.
    let created = dispute_events(&client, EventType::DisputeCreated, &dispute.id).await;
    let updated = dispute_events(&client, EventType::DisputeUpdated, &dispute.id).await;
    let closed = dispute_events(&client, EventType::DisputeClosed, &dispute.id).await;
    assert_eq!((created.len(), updated.len(), closed.len()), (1, 1, 1));
    assert_eq!(created[0].dispute(), Some(&dispute));
    assert_eq!(
        updated[0].dispute().map(|d| d.status),
        Some(DisputeStatus::UnderReview)
    );
    assert_eq!(closed[0].dispute(), Some(&won));
}

#[actix_web::test]
async fn a_closed_dispute_is_lost_once_and_takes_no_more_steps() {
    let service = Service::start(None, quick_disputes).await;
    let simulator = service.in_process.clone().expect("simulator");
    let client = service.client();
    let (payment, dispute) = disputed_payment(&client, 3000).await;

    let closed = client
        .close_dispute(&dispute.id)
        .idempotency_key("close-1")
        .send()
        .await
        .expect("closed");
    assert_eq!(closed.status, 200);
    assert!(!closed.replayed);
    let lost = closed.data;
    assert_eq!(lost.id, dispute.id);
    assert_eq!(lost.status, DisputeStatus::Lost);
    assert_eq!(lost.evidence_submitted_at, None);
    let again = client
        .close_dispute(&dispute.id)
        .idempotency_key("close-1")
        .send()
        .await
        .expect("replayed");
    assert!(again.replayed);
    assert_eq!(again.data, lost);
    assert_eq!(simulator.disputes.calls(), 1, "one provider call");

    // Another key: the dispute takes no more steps; that answer is the key's, for good.
    for _ in 0..2 {
        let refused = client
            .close_dispute(&dispute.id)
            .idempotency_key("close-2")
            .await
            .expect_err("not editable");
        assert_eq!(refused.code(), Some(&ErrorCode::DisputeNotEditable));
        assert_eq!(refused.status(), Some(409));
        assert_eq!(refused.attempts(), 1, "a 409 answer is not retried");
        assert!(!refused.is_outcome_unknown());
    }
    let evidence = client
        .update_dispute(&dispute.id, &UpdateDispute::new("too late"))
        .await
        .expect_err("not editable");
    assert_eq!(evidence.code(), Some(&ErrorCode::DisputeNotEditable));
    assert_eq!(simulator.disputes.calls(), 1, "refused before the provider");
    let read = client.get_dispute(&dispute.id).await.expect("read");
    assert_eq!(
        (read.status, read.evidence.text),
        (DisputeStatus::Lost, None)
    );

    // Lost: its amount stays taken, and nothing is left to refund.
    let payment = client.get_payment(&payment.id).await.expect("read");
    assert_eq!(payment.amount_disputed, 3000);
    let refund = client
        .create_refund(&payment.id, &CreateRefund::default())
        .await
        .expect_err("nothing left");
    assert_eq!(refund.code(), Some(&ErrorCode::PaymentNotRefundable));
    let closed_events = dispute_events(&client, EventType::DisputeClosed, &dispute.id).await;
    assert_eq!(closed_events.len(), 1);
    assert_eq!(closed_events[0].dispute(), Some(&lost));
}

#[actix_web::test]
async fn disputes_are_listed_by_status_and_payment_and_streamed_across_pages() {
    let service = Service::start(None, quick_disputes).await;
    let client = service.client();
    // One after the other, so that they were opened in this order.
    let mut payments = Vec::new();
    let mut disputes = Vec::new();
    for amount in [100, 200, 300] {
        let (payment, dispute) = disputed_payment(&client, amount).await;
        payments.push(payment);
        disputes.push(dispute);
    }
    // A payment nobody disputes has none.
    let visa = client
        .create_payment(&CreatePayment::new(400, "usd", "pm_card_visa"))
        .await
        .expect("paid");
    let newest_first: Vec<&str> = ids(&disputes).into_iter().rev().collect();

    let first = client
        .list_disputes(&ListDisputes {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(first.has_more);
    assert_eq!(ids(&first.data), newest_first[..1]);
    let all: Vec<Dispute> = client
        .stream_disputes(ListDisputes {
            limit: Some(1),
            ..Default::default()
        })
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(ids(&all), newest_first, "each once, newest first");
    let rest: Vec<Dispute> = client
        .stream_disputes(ListDisputes {
            limit: Some(1),
            starting_after: Some(newest_first[0].to_owned()),
            ..Default::default()
        })
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(ids(&rest), newest_first[1..]);

    // By payment.
    for (payment, dispute) in payments.iter().zip(&disputes) {
        let page = client
            .list_disputes(&ListDisputes {
                payment_id: Some(payment.id.clone()),
                ..Default::default()
            })
            .await
            .expect("a page");
        assert_eq!(page.data, std::slice::from_ref(dispute));
    }
    let none = client
        .list_disputes(&ListDisputes {
            payment_id: Some(visa.id.clone()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(none.data.is_empty() && !none.has_more);

    // By status: the middle one closed (lost), the others still needing a response.
    let lost = client.close_dispute(&disputes[1].id).await.expect("closed");
    assert_eq!(lost.status, DisputeStatus::Lost);
    let needing: Vec<Dispute> = client
        .stream_disputes(ListDisputes {
            limit: Some(1),
            status: Some(DisputeStatus::NeedsResponse),
            ..Default::default()
        })
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(ids(&needing), [newest_first[0], newest_first[2]]);
    let closed = client
        .list_disputes(&ListDisputes {
            status: Some(DisputeStatus::Lost),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert_eq!(closed.data, [lost]);
    let won = client
        .list_disputes(&ListDisputes {
            status: Some(DisputeStatus::Won),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(won.data.is_empty());
    // Both filters at once.
    let both = client
        .list_disputes(&ListDisputes {
            status: Some(DisputeStatus::Lost),
            payment_id: Some(payments[0].id.clone()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(both.data.is_empty());
}

#[actix_web::test]
async fn a_submit_the_provider_did_not_answer_is_202_and_waited_out_with_its_key() {
    // The simulator over HTTP, its faults ours; one provider attempt per request, so a
    // failed call is an unknown outcome at once.
    let provider = spawn_provider().await;
    let service = Service::start(Some(&provider), |s| s.provider_max_attempts = 1).await;
    let client = service.client();
    let payment = client
        .create_payment(&disputed_card(2500))
        .await
        .expect("paid");
    // This simulator sends no webhooks: its dispute is opened and announced here.
    let charge_id = payment.provider_charge_id.clone().expect("a charge");
    let opened = provider
        .simulator
        .disputes
        .open(&charge_id, &payment.id, 2500, "usd")
        .expect("the charge's first dispute");
    let to_service = format!("{}/v1/webhooks/provider", service.url());
    WebhookDelivery::new(to_service, test_secret(), RetryPolicy::default())
        .deliver(&opened)
        .await
        .expect("delivered");
    let dispute = dispute_of(&client, &payment.id).await;
    assert_eq!(dispute.status, DisputeStatus::NeedsResponse);

    // The provider fails the next two calls (a 500, nothing done): the answer is unknown.
    provider.faults.fail_next.store(2, Ordering::SeqCst);
    let winning = UpdateDispute::new("winning_evidence").submit(true);
    let first = client
        .update_dispute(&dispute.id, &winning)
        .idempotency_key("ev-lost-answer")
        .send()
        .await
        .expect("accepted");
    assert_eq!(first.status, 202);
    assert_eq!(first.data.id, dispute.id);
    assert_eq!(first.data.status, DisputeStatus::NeedsResponse, "as it is");
    let finished = client
        .update_dispute(&dispute.id, &winning)
        .idempotency_key("ev-lost-answer")
        .wait_until_final(Duration::from_secs(20))
        .send()
        .await
        .expect("final");
    assert_eq!(finished.status, 200);
    assert!(finished.attempts >= 2, "a 202 first, then the final answer");
    assert_eq!(finished.data.id, dispute.id);
    assert_eq!(finished.data.status, DisputeStatus::UnderReview);
    assert!(finished.data.evidence_submitted_at.is_some());
    assert_eq!(provider.faults.fail_next.load(Ordering::SeqCst), 0);
    assert_eq!(
        provider.simulator.disputes.calls(),
        1,
        "the provider took the step once"
    );
    let replay = client
        .update_dispute(&dispute.id, &winning)
        .idempotency_key("ev-lost-answer")
        .send()
        .await
        .expect("replayed");
    assert!(replay.replayed);
    assert_eq!(replay.data, finished.data);
}
