//! The typed API against the real service (in-process provider): every operation this
//! server serves, with its answers and its problems as types.
//!
//! The event feed and list and webhook endpoints are served too, but their typed calls are
//! not tested here yet.

use std::time::Duration;

use payments_client::{
    CancelPayment, CancellationReason, CaptureMethod, CapturePayment, CreatePayment, CreateRefund,
    ErrorCode, ListPayments, ListRefunds, PaymentStatus, RefundReason, RefundStatus, TryStreamExt,
};

use crate::support::{Service, client_for};

fn visa(amount: i64) -> CreatePayment {
    CreatePayment::new(amount, "USD", "pm_card_visa")
}

#[actix_web::test]
async fn payments_are_created_replayed_read_and_listed() {
    let service = Service::start(None, |_| {}).await;
    let client = service.client();

    let order = visa(2000)
        .customer_id("cus_1")
        .description("order 1001")
        .metadata("order", "1001");
    let created = client
        .create_payment(&order)
        .idempotency_key("order-1001")
        .send()
        .await
        .expect("created");
    assert_eq!(created.status, 201);
    assert!(!created.replayed);
    assert!(created.request_id.is_some());
    let payment = created.data;
    assert_eq!(payment.status, PaymentStatus::Succeeded);
    assert_eq!(payment.currency, "usd");
    assert_eq!(payment.customer_id.as_deref(), Some("cus_1"));
    assert_eq!(
        payment.metadata.get("order").map(String::as_str),
        Some("1001")
    );
    assert!(payment.id.starts_with("pay_") && payment.provider_charge_id.is_some());

    // The same call with the same key: the stored answer, nothing charged again.
    let again = client
        .create_payment(&order)
        .idempotency_key("order-1001")
        .send()
        .await
        .expect("replayed");
    assert!(again.replayed);
    assert_eq!(again.data, payment);
    assert_eq!(
        service
            .in_process
            .as_ref()
            .expect("simulator")
            .charges()
            .len(),
        1
    );

    assert_eq!(
        client.get_payment(&payment.id).await.expect("read"),
        payment
    );

    let mut ids = vec![payment.id.clone()];
    for amount in [100, 200, 300, 400] {
        ids.push(
            client
                .create_payment(&visa(amount).customer_id("cus_1"))
                .await
                .expect("created")
                .id,
        );
    }
    client
        .create_payment(&visa(999).customer_id("cus_2"))
        .await
        .expect("created");
    ids.reverse(); // newest first

    let page = client
        .list_payments(&ListPayments {
            limit: Some(2),
            customer_id: Some("cus_1".into()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert_eq!(
        page.data.iter().map(|p| p.id.clone()).collect::<Vec<_>>(),
        ids[..2]
    );
    assert!(page.has_more);

    let streamed: Vec<_> = client
        .stream_payments(ListPayments {
            limit: Some(2),
            customer_id: Some("cus_1".into()),
            ..Default::default()
        })
        .map_ok(|p| p.id)
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(streamed, ids);

    let after: Vec<_> = client
        .stream_payments(ListPayments {
            limit: Some(3),
            customer_id: Some("cus_1".into()),
            starting_after: Some(ids[1].clone()),
            ..Default::default()
        })
        .map_ok(|p| p.id)
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(after, ids[2..]);
}

#[actix_web::test]
async fn problems_come_back_typed() {
    let service = Service::start(None, |_| {}).await;
    let client = service.client();

    let declined = client
        .create_payment(&CreatePayment::new(500, "eur", "pm_card_declined"))
        .await
        .expect("a decline is a payment");
    assert_eq!(declined.status, PaymentStatus::Failed);
    assert_eq!(declined.failure_code.as_deref(), Some("card_declined"));

    let invalid = client.create_payment(&visa(0)).await.expect_err("amount 0");
    let problem = invalid.problem().expect("a problem");
    assert_eq!(
        (problem.status, &problem.code),
        (400, &ErrorCode::InvalidRequest)
    );
    assert_eq!(problem.param.as_deref(), Some("amount"));
    assert!(problem.request_id.is_some() && problem.detail.is_some());
    assert_eq!(invalid.attempts(), 1);

    client
        .create_payment(&visa(100))
        .idempotency_key("k-1")
        .await
        .expect("created");
    let reused = client
        .create_payment(&visa(101))
        .idempotency_key("k-1")
        .await
        .expect_err("reused");
    assert_eq!(reused.code(), Some(&ErrorCode::IdempotencyKeyReused));
    assert_eq!(reused.status(), Some(422));
    assert_eq!(reused.idempotency_key(), Some("k-1"));

    let missing = client
        .get_payment("pay_does_not_exist")
        .await
        .expect_err("404");
    assert_eq!(missing.code(), Some(&ErrorCode::NotFound));

    let stranger = client_for(&service.url(), "sk_test_wrong");
    let unauthorized = stranger.get_payment("pay_x").await.expect_err("401");
    assert_eq!(unauthorized.code(), Some(&ErrorCode::Unauthorized));
    assert_eq!(unauthorized.attempts(), 1);
}

#[actix_web::test]
async fn refunds_are_created_listed_and_refused_typed() {
    let service = Service::start(None, |_| {}).await;
    let client = service.client();
    let payment = client.create_payment(&visa(1000)).await.expect("paid");

    let first = client
        .create_refund(
            &payment.id,
            &CreateRefund {
                amount: Some(300),
                reason: Some(RefundReason::RequestedByCustomer),
            },
        )
        .send()
        .await
        .expect("refunded");
    assert_eq!(first.status, 201);
    assert_eq!(first.data.status, RefundStatus::Succeeded);
    assert_eq!(first.data.reason, Some(RefundReason::RequestedByCustomer));
    assert_eq!(first.data.payment_id, payment.id);

    let too_much = client
        .create_refund(
            &payment.id,
            &CreateRefund {
                amount: Some(800),
                reason: None,
            },
        )
        .await
        .expect_err("more than is left");
    assert_eq!(too_much.code(), Some(&ErrorCode::AmountExceedsRefundable));

    let rest = client
        .create_refund(&payment.id, &CreateRefund::default())
        .await
        .expect("the rest");
    assert_eq!(rest.amount, 700);
    let nothing_left = client
        .create_refund(&payment.id, &CreateRefund::default())
        .await
        .expect_err("nothing left");
    assert_eq!(nothing_left.code(), Some(&ErrorCode::PaymentNotRefundable));
    assert_eq!(
        nothing_left.attempts(),
        1,
        "a 409 other than in_use is not retried"
    );

    let page = client
        .list_refunds(
            &payment.id,
            &ListRefunds {
                limit: Some(1),
                ..Default::default()
            },
        )
        .await
        .expect("page");
    assert_eq!(page.data[0].id, rest.id);
    assert!(page.has_more);
    let all: Vec<_> = client
        .stream_refunds(
            &payment.id,
            ListRefunds {
                limit: Some(1),
                ..Default::default()
            },
        )
        .map_ok(|r| r.id)
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(all, vec![rest.id, first.data.id]);
    assert_eq!(
        client
            .get_payment(&payment.id)
            .await
            .expect("read")
            .amount_refunded,
        1000
    );
}

#[actix_web::test]
async fn a_202_is_awaited_until_the_providers_webhook_finishes_the_payment() {
    let service = Service::start(None, |s| s.provider_async_delay = Duration::from_secs(2)).await;
    let client = service.client();
    let params = CreatePayment::new(2500, "usd", "pm_card_async");

    let first = client
        .create_payment(&params)
        .send()
        .await
        .expect("accepted");
    assert_eq!(
        (first.status, first.data.status),
        (202, PaymentStatus::Processing)
    );
    let key = first.idempotency_key.clone().expect("a key");

    let finished = client
        .create_payment(&params)
        .idempotency_key(key.clone())
        .wait_until_final(Duration::from_secs(20))
        .send()
        .await
        .expect("final");
    assert_eq!(finished.status, 201);
    assert_eq!(finished.data.status, PaymentStatus::Succeeded);
    assert_eq!(finished.data.id, first.data.id);
    assert_eq!(finished.idempotency_key.as_deref(), Some(key.as_str()));
    assert!(
        finished.attempts >= 2,
        "the first answer was 202, so it had to ask again"
    );
    let charges = service.in_process.as_ref().expect("simulator").charges();
    assert_eq!(charges.len(), 1);
}

#[actix_web::test]
async fn authorizations_are_captured_or_canceled_once() {
    let service = Service::start(None, |_| {}).await;
    let simulator = service.in_process.clone().expect("simulator");
    let client = service.client();
    let manual =
        || CreatePayment::new(5000, "usd", "pm_card_visa").capture_method(CaptureMethod::Manual);

    let held = client.create_payment(&manual()).await.expect("authorized");
    assert_eq!(held.status, PaymentStatus::RequiresCapture);
    assert_eq!(held.capture_method, CaptureMethod::Manual);
    assert_eq!((held.amount_capturable, held.amount_captured), (5000, 0));

    let too_much = client
        .capture_payment(&held.id, &CapturePayment { amount: Some(5001) })
        .await
        .expect_err("more than is held");
    assert_eq!(too_much.code(), Some(&ErrorCode::AmountExceedsCapturable));

    let captured = client
        .capture_payment(&held.id, &CapturePayment { amount: Some(3000) })
        .idempotency_key("ship-1")
        .send()
        .await
        .expect("captured");
    assert_eq!(captured.status, 200);
    assert_eq!(captured.data.status, PaymentStatus::Succeeded);
    assert_eq!(
        (
            captured.data.amount_capturable,
            captured.data.amount_captured
        ),
        (0, 3000)
    );
    let again = client
        .capture_payment(&held.id, &CapturePayment { amount: Some(3000) })
        .idempotency_key("ship-1")
        .send()
        .await
        .expect("replayed");
    assert!(again.replayed);
    assert_eq!(again.data, captured.data);
    let twice = client
        .capture_payment(&held.id, &CapturePayment::default())
        .await
        .expect_err("already captured");
    assert_eq!(twice.code(), Some(&ErrorCode::PaymentNotCapturable));
    assert_eq!(twice.attempts(), 1);
    assert_eq!(simulator.captures().len(), 1);

    let other = client.create_payment(&manual()).await.expect("authorized");
    let reason = Some(CancellationReason::RequestedByCustomer);
    let canceled = client
        .cancel_payment(
            &other.id,
            &CancelPayment {
                cancellation_reason: reason,
            },
        )
        .await
        .expect("canceled");
    assert_eq!(canceled.status, PaymentStatus::Canceled);
    assert_eq!(canceled.cancellation_reason, reason);
    assert_eq!(canceled.amount_capturable, 0);
    let not_again = client
        .cancel_payment(&other.id, &CancelPayment::default())
        .await
        .expect_err("already canceled");
    assert_eq!(not_again.code(), Some(&ErrorCode::PaymentNotCancelable));
    assert_eq!(simulator.cancels().len(), 1);
}
