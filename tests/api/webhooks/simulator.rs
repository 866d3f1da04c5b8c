//! The simulator's own signed webhooks: async payments finished by them, and its
//! delivery retried until a 2xx or given up.

use super::*;

#[actix_web::test]
async fn an_async_payment_is_finished_by_the_simulators_signed_webhook() {
    let app = spawn_app_with(|s| s.provider_async_delay = Duration::from_millis(200)).await;
    let request = json!({"amount": 4200, "currency": "usd", "payment_method": "pm_card_async"});
    let first = app.post_payment("async-1", &request).await;
    assert_eq!(first.status, 202, "{}", first.text());
    let payment = first.json();
    assert_eq!(payment["status"], "processing");

    let finished = app
        .wait_until_final(payment["id"].as_str().unwrap(), Duration::from_secs(20))
        .await;
    assert_eq!(finished["status"], "succeeded");
    assert_eq!(
        finished["provider_charge_id"],
        payment["provider_charge_id"]
    );
    assert_eq!(app.webhook_events().await, 1, "it came by webhook");

    let retry = app.post_payment("async-1", &request).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json(), finished);
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn an_async_decline_is_failed_by_the_simulators_signed_webhook() {
    let app = spawn_app_with(|s| s.provider_async_delay = Duration::from_millis(200)).await;
    let request =
        json!({"amount": 700, "currency": "eur", "payment_method": "pm_card_async_declined"});
    let first = app.post_payment("async-2", &request).await;
    assert_eq!(first.status, 202, "{}", first.text());
    let finished = app
        .wait_until_final(
            first.json()["id"].as_str().unwrap(),
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(finished["status"], "failed");
    assert_eq!(finished["failure_code"], "card_declined");
    let retry = app.post_payment("async-2", &request).await;
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(app.webhook_events().await, 1);
}

/// A receiver that refuses the first `refusals` deliveries with 503, checking every
/// signature it gets; returns its URL and what it saw: (webhook-id, valid signature).
async fn flaky_receiver(refusals: usize) -> (String, Arc<Mutex<Vec<(String, bool)>>>) {
    let seen: Arc<Mutex<Vec<(String, bool)>>> = Arc::default();
    let log = seen.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = actix_web::HttpServer::new(move || {
        let log = log.clone();
        actix_web::App::new().default_service(actix_web::web::to(
            move |req: actix_web::HttpRequest, body: actix_web::web::Bytes| {
                let log = log.clone();
                async move {
                    let header = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
                    let headers = SignedHeaders {
                        id: header("webhook-id"),
                        timestamp: header("webhook-timestamp"),
                        signature: header("webhook-signature"),
                    };
                    let valid =
                        signature::verify(&[test_secret()], headers, &body, unix_now()).is_ok();
                    let mut seen = log.lock().unwrap();
                    seen.push((headers.id.unwrap_or("").to_owned(), valid));
                    if seen.len() <= refusals {
                        actix_web::HttpResponse::ServiceUnavailable().finish()
                    } else {
                        actix_web::HttpResponse::Ok().finish()
                    }
                }
            },
        ))
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    (format!("http://127.0.0.1:{port}/hook"), seen)
}

fn quick_retries(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        first_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(40),
        timeout: Duration::from_secs(5),
    }
}

fn succeeded_charge() -> Charge {
    Charge {
        id: "ch_1".into(),
        status: ProviderStatus::Succeeded,
        amount: 100,
        currency: "usd".into(),
        reference: "pay_1".into(),
        failure_code: None,
        failure_message: None,
    }
}

#[actix_web::test]
async fn delivery_is_retried_with_the_same_id_until_a_2xx() {
    let (url, seen) = flaky_receiver(3).await;
    let delivery = WebhookDelivery::new(url, test_secret(), quick_retries(10));
    let event = webhook_delivery::charge_event(&succeeded_charge()).unwrap();
    assert_eq!(delivery.deliver(&event).await.unwrap(), 4);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 4, "three refusals, then the delivery");
    assert!(
        seen.iter().all(|(id, valid)| *id == event.id && *valid),
        "{seen:?}"
    );
}

#[actix_web::test]
async fn delivery_gives_up_after_its_attempts() {
    let (url, seen) = flaky_receiver(usize::MAX).await;
    let delivery = WebhookDelivery::new(url, test_secret(), quick_retries(3));
    let event = webhook_delivery::charge_event(&succeeded_charge()).unwrap();
    let failed = delivery.deliver(&event).await.unwrap_err();
    assert_eq!(failed.attempts, 3);
    assert_eq!(seen.lock().unwrap().len(), 3);
}
