//! Unknown and failed provider outcomes: the amount held, resumed or released once.

use super::*;

/// A provider that never answers: every outcome is unknown.
struct Unreachable;

impl PaymentProvider for Unreachable {
    fn create_charge<'a>(
        &'a self,
        _: &'a str,
        _: &'a ChargeRequest,
    ) -> LocalBoxFuture<'a, Result<Charge, ProviderError>> {
        Box::pin(async { Err(OutcomeUnknown("timed out".into()).into()) })
    }

    fn create_refund<'a>(
        &'a self,
        _: &'a str,
        _: &'a RefundRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderRefund, ProviderError>> {
        Box::pin(async { Err(OutcomeUnknown("timed out".into()).into()) })
    }

    fn capture_charge<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a CaptureRequest,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        Box::pin(async { Err(OutcomeUnknown("timed out".into()).into()) })
    }

    fn cancel_charge<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        Box::pin(async { Err(OutcomeUnknown("timed out".into()).into()) })
    }

    fn create_payout<'a>(
        &'a self,
        _: &'a str,
        _: &'a PayoutRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderPayout, ProviderError>> {
        Box::pin(async { Err(OutcomeUnknown("timed out".into()).into()) })
    }

    fn dispute_step<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a payments_api::provider::DisputeStepRequest,
    ) -> LocalBoxFuture<'a, Result<payments_api::provider::ProviderDispute, ProviderError>> {
        Box::pin(async { Err(OutcomeUnknown("timed out".into()).into()) })
    }

    fn settlements<'a>(
        &'a self,
        _: &'a payments_api::provider::SettlementQuery,
    ) -> LocalBoxFuture<'a, Result<payments_api::provider::SettlementPage, ProviderError>> {
        Box::pin(async { Err(OutcomeUnknown("timed out".into()).into()) })
    }
}

pub(crate) async fn refund_through_unreachable_provider(
    app: &TestApp,
    payment_id: &str,
    key: &[u8],
    amount: i64,
) -> serde_json::Value {
    let mut state = app.state.clone();
    state.provider = Arc::new(Unreachable);
    let merchant = Merchant {
        id: app.merchant_id.clone(),
        name: "default".to_owned(),
    };
    let request = NewRefund {
        amount: Some(Amount::parse(amount).unwrap()),
        reason: None,
    };
    let answer = refunds::create_refund(
        &state,
        &merchant,
        PaymentId::parse(payment_id).unwrap(),
        IdempotencyKey::parse(key).unwrap(),
        request,
        None,
        None,
    )
    .await
    .unwrap();
    assert_eq!(answer.status, 202, "{}", answer.body);
    serde_json::from_str(&answer.body).unwrap()
}

#[actix_web::test]
async fn an_unknown_outcome_answers_202_holds_the_amount_and_a_retry_resumes() {
    let app = spawn_app().await;
    let payment_id = app.paid_payment(1000).await;

    let pending = refund_through_unreachable_provider(&app, &payment_id, b"unknown", 400).await;
    assert_eq!(pending["status"], "pending");
    assert_eq!(pending["provider_refund_id"], serde_json::Value::Null);
    // Held while unknown, so nothing else can take it...
    assert_eq!(app.refund_totals(&payment_id).await, (400, 0));
    app.post_refund(&payment_id, "too-much", &json!({"amount": 700}))
        .await
        .assert_problem(422, "amount_exceeds_refundable");
    let listed = app
        .get(&format!("/v1/payments/{payment_id}/refunds"))
        .await
        .json();
    assert_eq!(listed["data"][0]["status"], "pending");

    // ...and a retry takes the refund over and asks the provider with the same key.
    let resumed = app
        .post_refund(&payment_id, "unknown", &json!({"amount": 400}))
        .await;
    assert_eq!(resumed.status, 201, "{}", resumed.text());
    assert_eq!(resumed.json()["id"], pending["id"]);
    assert_eq!(resumed.json()["status"], "succeeded");
    assert_eq!(app.provider_refunds().len(), 1);
    assert_eq!(
        app.provider_refunds()[0].reference,
        pending["id"].as_str().unwrap()
    );
    assert_eq!(app.refund_totals(&payment_id).await, (400, 400));
}

#[actix_web::test]
async fn a_failed_outcome_releases_the_amount_once() {
    let app = spawn_app().await;
    let payment_id = app.paid_payment(1000).await;
    let pending = refund_through_unreachable_provider(&app, &payment_id, b"will-fail", 600).await;
    let refund_id = pending["id"].as_str().unwrap().to_owned();
    assert_eq!(app.refund_totals(&payment_id).await, (600, 0));

    // As a `refund.failed` webhook would report it, twice.
    let outcome = RefundOutcome::Failed {
        provider_refund_id: Some("pr_failed".to_owned()),
        failure_code: Some("expired_card".to_owned()),
    };
    for expect_applied in [true, false] {
        let (id, outcome) = (refund_id.clone(), outcome.clone());
        let applied = app
            .state
            .db
            .run(move |conn| refunds::apply_refund_outcome(conn, &id, &outcome, None))
            .await
            .unwrap();
        match applied {
            OutcomeApplied::Applied(row) if expect_applied => {
                assert_eq!(row.status.as_str(), "failed")
            }
            OutcomeApplied::AlreadyFinal(row) if !expect_applied => {
                assert_eq!(row.status.as_str(), "failed")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    // A later success report cannot move it sideways.
    let id = refund_id.clone();
    let late = app
        .state
        .db
        .run(move |conn| {
            refunds::apply_refund_outcome(
                conn,
                &id,
                &RefundOutcome::Succeeded {
                    provider_refund_id: Some("pr_late".to_owned()),
                },
                None,
            )
        })
        .await
        .unwrap();
    assert!(matches!(late, OutcomeApplied::AlreadyFinal(_)));
    assert_eq!(app.refund_totals(&payment_id).await, (0, 0));

    // The retry learns the final answer; the released amount can be refunded again.
    let retry = app
        .post_refund(&payment_id, "will-fail", &json!({"amount": 600}))
        .await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json()["status"], "failed");
    assert_eq!(retry.json()["failure_code"], "expired_card");
    assert_eq!(app.simulator.refund_calls(), 0);
    let all = app.post_refund(&payment_id, "after-fail", &json!({})).await;
    assert_eq!(all.status, 201);
    assert_eq!(all.json()["amount"], 1000);
    assert_eq!(app.refund_totals(&payment_id).await, (1000, 1000));

    let unknown = app
        .state
        .db
        .run(|conn| refunds::apply_refund_outcome(conn, "re_nope", &outcome_clone(), None))
        .await
        .unwrap();
    assert!(matches!(unknown, OutcomeApplied::Unknown));
}

fn outcome_clone() -> RefundOutcome {
    RefundOutcome::Succeeded {
        provider_refund_id: Some("pr_x".to_owned()),
    }
}
