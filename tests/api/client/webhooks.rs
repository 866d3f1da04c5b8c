//! The client's webhook verification accepts what the service's signer signs (the same
//! scheme, two implementations) and returns the typed event.

use std::time::SystemTime;

use payments_api::inbound::{WebhookSecret, sign};
use payments_client::{
    CreatePayment, EventType, PaymentStatus, WebhookError, WebhookHeaders, WebhookVerifier,
};

use crate::support::Service;

#[actix_web::test]
async fn a_delivery_signed_by_the_service_verifies_into_a_typed_event() {
    let service = Service::start(None, |_| {}).await;
    let client = service.client();
    let payment = client
        .create_payment(&CreatePayment::new(4200, "usd", "pm_card_visa"))
        .idempotency_key("order-42")
        .await
        .expect("paid");

    // The event a delivery carries, with the payment as the server renders it.
    let body = serde_json::json!({
        "id": "evt_1", "object": "event", "type": "payment.succeeded",
        "created_at": "2026-11-22T06:00:00Z",
        "data": {"object": serde_json::to_value(&payment).expect("json")
            .as_object().cloned().map(|mut o| { o.insert("object".into(), "payment".into()); o })},
        "request": {"id": "req-1", "idempotency_key": "order-42"},
    })
    .to_string();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let rotated_out =
        WebhookSecret::parse("whsec_cGF5bWVudHMtYXBpLWRlbW8td2ViaG9vay1zZWNyZXQ=").expect("secret");
    let current = WebhookSecret::parse(crate::support::TEST_WEBHOOK_SECRET).expect("secret");
    // During a rotation the service sends two v1 entries; the merchant may hold either.
    let signature = format!(
        "{} {}",
        sign(&rotated_out, "evt_1", now, body.as_bytes()),
        sign(&current, "evt_1", now, body.as_bytes())
    );
    let timestamp = now.to_string();
    let headers = WebhookHeaders {
        id: Some("evt_1"),
        timestamp: Some(&timestamp),
        signature: Some(&signature),
    };

    let verifier = WebhookVerifier::new([crate::support::TEST_WEBHOOK_SECRET]).expect("secret");
    let event = verifier.verify(headers, body.as_bytes()).expect("verified");
    assert_eq!(event.event_type, EventType::PaymentSucceeded);
    let delivered = event.payment().expect("the payment");
    assert_eq!(delivered, &payment);
    assert_eq!(delivered.status, PaymentStatus::Succeeded);

    let tampered = body.replace("4200", "4201");
    assert!(matches!(
        verifier.verify(headers, tampered.as_bytes()),
        Err(WebhookError::NoMatchingSignature)
    ));
    let stranger =
        WebhookVerifier::new(["whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"]).expect("secret");
    assert!(stranger.verify(headers, body.as_bytes()).is_err());
}
