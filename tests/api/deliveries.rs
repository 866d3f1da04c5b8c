//! Webhook endpoints and signed deliveries (CONTRACT §9), against real receivers on
//! loopback ports, verified by a Standard Webhooks implementation written here from the
//! specification (not the service's signing code).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, TestDatabase, TestResponse, spawn_app, spawn_app_with, spawn_cluster, spawn_provider,
    test_client, visa,
};

// ---------------------------------------------------------------------------------------
// An independent Standard Webhooks v1 verifier, from the specification:
// signed content = "{webhook-id}.{webhook-timestamp}.{body}", HMAC-SHA256 keyed with the
// base64-decoded part of "whsec_…", header "webhook-signature" = space-separated
// "v1,<base64 tag>" entries.

/// Which `v1` entries of the delivery's signature header the secret produced.
fn signature_matches(secret: &str, request: &Received) -> Vec<bool> {
    use base64::Engine;
    use hmac::{Hmac, Mac};
    let engine = base64::engine::general_purpose::STANDARD;
    let key = engine
        .decode(secret.strip_prefix("whsec_").expect("whsec_ prefix"))
        .expect("base64 key");
    let id = request.header("webhook-id");
    let timestamp = request.header("webhook-timestamp");
    let now = chrono::Utc::now().timestamp();
    let sent: i64 = timestamp.parse().expect("integer timestamp");
    assert!(
        (now - sent).abs() <= 300,
        "timestamp {sent} is not now ({now})"
    );
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).expect("any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(&request.body);
    let expected = engine.encode(mac.finalize().into_bytes());
    request
        .header("webhook-signature")
        .split(' ')
        .map(|entry| {
            let (version, tag) = entry.split_once(',').expect("version,tag");
            assert_eq!(version, "v1", "{entry}");
            tag == expected
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// A receiver on a loopback port: records every request, answers as the test says.

#[derive(Debug, Clone)]
pub struct Received {
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub arrived: Instant,
    /// When the answer was sent (None while the receiver still holds the request).
    pub answered: Option<Instant>,
    pub status: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {name} header in {:?}", self.headers))
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

/// What the receiver answers: status, extra headers, how long it waits first.
#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub delay: Duration,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            delay: Duration::ZERO,
        }
    }

    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// Decides the reply from the `webhook-id` and how many requests with it came before.
type Behaviour = Arc<dyn Fn(&str, usize) -> Reply + Send + Sync>;

pub struct Receiver {
    pub url: String,
    log: Arc<Mutex<Vec<Received>>>,
    behaviour: Arc<Mutex<Behaviour>>,
    handle: ServerHandle,
}

struct ReceiverState {
    log: Arc<Mutex<Vec<Received>>>,
    behaviour: Arc<Mutex<Behaviour>>,
}

async fn receive(
    req: HttpRequest,
    body: web::Bytes,
    state: web::Data<ReceiverState>,
) -> HttpResponse {
    let headers: HashMap<String, String> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let id = headers.get("webhook-id").cloned().unwrap_or_default();
    let behaviour = state.behaviour.lock().unwrap().clone();
    let (index, reply) = {
        let mut log = state.log.lock().unwrap();
        let before = log.iter().filter(|r| r.header("webhook-id") == id).count();
        let reply = behaviour(&id, before);
        log.push(Received {
            headers,
            body: body.to_vec(),
            arrived: Instant::now(),
            answered: None,
            status: reply.status,
        });
        (log.len() - 1, reply)
    };
    actix_web::rt::time::sleep(reply.delay).await;
    state.log.lock().unwrap()[index].answered = Some(Instant::now());
    let mut response =
        HttpResponse::build(actix_web::http::StatusCode::from_u16(reply.status).unwrap());
    for (name, value) in reply.headers {
        response.insert_header((name, value));
    }
    response.finish()
}

impl Receiver {
    pub async fn start(behaviour: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) -> Self {
        Self::serve(behaviour, None).await
    }

    /// Serves `https` with this TLS configuration.
    pub async fn start_tls(
        behaviour: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
        tls: rustls::ServerConfig,
    ) -> Self {
        Self::serve(behaviour, Some(tls)).await
    }

    async fn serve(
        behaviour: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
        tls: Option<rustls::ServerConfig>,
    ) -> Self {
        let log = Arc::new(Mutex::new(Vec::new()));
        let behaviour: Arc<Mutex<Behaviour>> = Arc::new(Mutex::new(Arc::new(behaviour)));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}/hooks", listener.local_addr().unwrap());
        let (l, b) = (log.clone(), behaviour.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(ReceiverState {
                    log: l.clone(),
                    behaviour: b.clone(),
                }))
                .default_service(web::to(receive))
        })
        .workers(2)
        .disable_signals();
        let server = match tls {
            Some(tls) => server.listen_rustls_0_23(listener, tls),
            None => server.listen(listener),
        }
        .unwrap()
        .run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Self {
            url,
            log,
            behaviour,
            handle,
        }
    }

    pub async fn always(status: u16) -> Self {
        Self::start(move |_, _| Reply::status(status)).await
    }

    pub fn behave(&self, behaviour: impl Fn(&str, usize) -> Reply + Send + Sync + 'static) {
        *self.behaviour.lock().unwrap() = Arc::new(behaviour);
    }

    pub fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }

    /// Waits until `done` holds for what was received.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let received = self.received();
            if done(&received) {
                return received;
            }
            assert!(
                Instant::now() < deadline,
                "waited 30 s for {what}; received {}",
                received.len()
            );
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

// ---------------------------------------------------------------------------------------
// The service side.

const MS: fn(u64) -> Duration = Duration::from_millis;

async fn app_delivering(configure: impl FnOnce(&mut payments_api::config::Settings)) -> TestApp {
    spawn_app_with(|s| {
        s.webhook_allow_private_urls = true;
        s.webhook_retry_schedule = vec![MS(100), MS(200)];
        s.webhook_timeout = Duration::from_secs(5);
        configure(s);
    })
    .await
}

impl TestApp {
    /// Registers an endpoint; returns its id and secret.
    pub async fn create_endpoint(&self, url: &str, events: &[&str]) -> (String, String) {
        let response = self
            .post_json(
                "/v1/webhook_endpoints",
                &self.api_key,
                None,
                &json!({"url": url, "enabled_events": events}),
            )
            .await;
        assert_eq!(response.status, 201, "{}", response.text());
        let endpoint = response.json();
        (
            endpoint["id"].as_str().unwrap().to_owned(),
            endpoint["secret"].as_str().unwrap().to_owned(),
        )
    }

    pub async fn endpoint_post(&self, id: &str, action: &str, body: &Value) -> TestResponse {
        let path = match action {
            "" => format!("/v1/webhook_endpoints/{id}"),
            action => format!("/v1/webhook_endpoints/{id}/{action}"),
        };
        self.post_json(&path, &self.api_key, None, body).await
    }

    /// Replays the endpoint's events since `since` (`status` as the API takes it, or its
    /// default): how many were queued.
    pub async fn replay_since(
        &self,
        endpoint_id: &str,
        since: &str,
        status: Option<&str>,
    ) -> Value {
        let mut body = json!({"since": since});
        if let Some(status) = status {
            body["status"] = json!(status);
        }
        let response = self.endpoint_post(endpoint_id, "replay", &body).await;
        assert_eq!(response.status, 202, "{}", response.text());
        response.json()["queued"].clone()
    }

    pub async fn deliveries(&self, endpoint_id: &str) -> Vec<Value> {
        let response = self
            .get(&format!(
                "/v1/webhook_endpoints/{endpoint_id}/deliveries?limit=100"
            ))
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
        response.json()["data"].as_array().unwrap().clone()
    }

    pub async fn wait_for_delivery(&self, endpoint_id: &str, status: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let deliveries = self.deliveries(endpoint_id).await;
            if let Some(found) = deliveries.iter().find(|d| d["status"] == status) {
                return found.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {status} delivery: {deliveries:?}"
            );
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn endpoint_status(&self, id: &str) -> String {
        let endpoint = self
            .get(&format!("/v1/webhook_endpoints/{id}"))
            .await
            .json();
        endpoint["status"].as_str().unwrap().to_owned()
    }
}

fn ids(received: &[Received]) -> Vec<String> {
    received
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect()
}

#[actix_web::test]
async fn a_change_is_delivered_signed_with_the_events_exact_body_to_each_matching_endpoint() {
    let app = app_delivering(|_| {}).await;
    let all = Receiver::always(200).await;
    let refunds_only = Receiver::always(204).await;
    let (all_id, all_secret) = app.create_endpoint(&all.url, &["*"]).await;
    let (refunds_id, refunds_secret) = app
        .create_endpoint(&refunds_only.url, &["refund.succeeded"])
        .await;

    let payment_id = app.paid_payment(2500).await;
    let received = all.wait_for("the payment event", |r| !r.is_empty()).await;
    let delivery = &received[0];
    let event = app.get("/v1/events").await.json()["data"][0].clone();
    assert_eq!(event["type"], "payment.succeeded");
    assert_eq!(event["data"]["object"]["id"], payment_id.as_str());
    assert_eq!(delivery.header("webhook-id"), event["id"].as_str().unwrap());
    let by_id = app
        .get(&format!("/v1/events/{}", event["id"].as_str().unwrap()))
        .await;
    assert_eq!(
        delivery.body, by_id.body,
        "the body is the event, byte for byte"
    );
    assert_eq!(delivery.header("content-type"), "application/json");
    assert!(
        delivery.header("user-agent").starts_with("payments-api/"),
        "{}",
        delivery.header("user-agent")
    );
    assert_eq!(signature_matches(&all_secret, delivery), [true]);
    assert_eq!(signature_matches(&refunds_secret, delivery), [false]);

    let refund = app
        .post_refund(&payment_id, "deliver-refund", &json!({"amount": 100}))
        .await;
    assert_eq!(refund.status, 201);
    let got = refunds_only
        .wait_for("the refund event", |r| !r.is_empty())
        .await;
    assert_eq!(got.len(), 1, "the payment event is not for this endpoint");
    assert_eq!(got[0].json()["type"], "refund.succeeded");
    assert_eq!(got[0].json()["data"]["object"], refund.json());
    assert_eq!(signature_matches(&refunds_secret, &got[0]), [true]);
    all.wait_for("both events", |r| r.len() == 2).await;

    let succeeded = app.wait_for_delivery(&all_id, "succeeded").await;
    assert_eq!(succeeded["object"], "webhook_delivery");
    assert_eq!(succeeded["attempts"], 1);
    assert_eq!(succeeded["next_attempt_at"], Value::Null);
    assert_eq!(succeeded["last_attempt"]["status_code"], 200);
    assert_eq!(succeeded["endpoint_id"], all_id.as_str());
    app.wait_for_delivery(&refunds_id, "succeeded").await;
    // Each event once per endpoint: nothing arrives twice.
    actix_web::rt::time::sleep(MS(700)).await;
    let mut seen = ids(&all.received());
    seen.sort();
    seen.dedup();
    assert_eq!((all.received().len(), seen.len()), (2, 2));
    assert_eq!(refunds_only.received().len(), 1);
}

#[actix_web::test]
async fn failed_attempts_are_retried_on_the_schedule_with_the_same_id_then_the_delivery_fails() {
    let app = app_delivering(|s| s.webhook_retry_schedule = vec![MS(300), MS(600)]).await;
    let receiver = Receiver::always(500).await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;

    let received = receiver.wait_for("three attempts", |r| r.len() == 3).await;
    let failed = app.wait_for_delivery(&endpoint_id, "failed").await;
    assert_eq!(failed["attempts"], 3, "two delays: three attempts");
    assert_eq!(failed["last_attempt"]["status_code"], 500);
    assert_eq!(failed["last_attempt"]["error"], "answered 500");
    assert_eq!(failed["next_attempt_at"], Value::Null);
    let first_id = received[0].header("webhook-id");
    assert!(received.iter().all(|r| r.header("webhook-id") == first_id));
    assert!(received.iter().all(|r| r.body == received[0].body));
    // Each delay (less 20 % jitter) runs from the end of the failed attempt.
    let gap = |a: &Received, b: &Received| b.arrived - a.answered.unwrap();
    assert!(
        gap(&received[0], &received[1]) >= MS(240),
        "{:?}",
        gap(&received[0], &received[1])
    );
    assert!(
        gap(&received[1], &received[2]) >= MS(480),
        "{:?}",
        gap(&received[1], &received[2])
    );
    actix_web::rt::time::sleep(MS(1000)).await;
    assert_eq!(receiver.received().len(), 3, "no attempt after the last");

    let metrics = app.request("GET", "/metrics", &[], Vec::new()).await.text();
    for series in [
        "webhook_deliveries_total{outcome=\"retrying\"}",
        "webhook_deliveries_total{outcome=\"failed\"}",
        "webhook_delivery_attempt_duration_seconds_count",
        "webhook_delivery_oldest_pending_seconds",
    ] {
        assert!(metrics.contains(series), "{series} missing");
    }
}

/// A retry is attempted when it falls due, not at the worker's next 250 ms pass: with
/// delays of 100 ms (80–120 with jitter) a pass every 250 ms made every gap 250 ms or more.
#[actix_web::test]
async fn a_retry_is_attempted_when_it_falls_due_not_at_the_next_polling_pass() {
    let app = app_delivering(|s| s.webhook_retry_schedule = vec![MS(100); 6]).await;
    let receiver = Receiver::always(500).await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let received = receiver.wait_for("seven attempts", |r| r.len() == 7).await;
    app.wait_for_delivery(&endpoint_id, "failed").await;
    let gaps: Vec<Duration> = received
        .windows(2)
        .map(|pair| pair[1].arrived - pair[0].answered.unwrap())
        .collect();
    assert!(gaps.iter().all(|gap| *gap >= MS(80)), "{gaps:?}");
    assert!(gaps.iter().min().unwrap() < &MS(200), "{gaps:?}");
}

#[actix_web::test]
async fn a_retry_after_on_503_is_honoured_and_a_3xx_is_a_failure() {
    let app = app_delivering(|s| s.webhook_retry_schedule = vec![MS(100), MS(100)]).await;
    let receiver = Receiver::start(|_, before| match before {
        0 => Reply {
            status: 503,
            headers: vec![("Retry-After", "2".to_owned())],
            delay: Duration::ZERO,
        },
        1 => Reply {
            status: 302,
            headers: vec![("Location", "http://127.0.0.1:9/elsewhere".to_owned())],
            delay: Duration::ZERO,
        },
        _ => Reply::status(200),
    })
    .await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let received = receiver.wait_for("three attempts", |r| r.len() == 3).await;
    let waited = received[1].arrived - received[0].answered.unwrap();
    assert!(
        waited >= Duration::from_secs(2),
        "Retry-After: 2 honoured, waited {waited:?}"
    );
    let delivered = app.wait_for_delivery(&endpoint_id, "succeeded").await;
    assert_eq!(delivered["attempts"], 3, "the redirect was not followed");
}

#[actix_web::test]
async fn a_410_disables_the_endpoint_and_enabling_it_resumes_what_is_pending() {
    let app = app_delivering(|s| s.webhook_retry_schedule = vec![MS(1500)]).await;
    let receiver = Receiver::always(410).await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let failed = app.wait_for_delivery(&endpoint_id, "failed").await;
    assert_eq!(failed["attempts"], 1, "410: no retry");
    assert_eq!(app.endpoint_status(&endpoint_id).await, "disabled");
    // Disabled: new events are not queued for it.
    app.paid_payment(1100).await;
    actix_web::rt::time::sleep(MS(500)).await;
    assert_eq!(receiver.received().len(), 1);
    assert_eq!(app.deliveries(&endpoint_id).await.len(), 1);

    // Enabled again; a failure leaves a delivery pending, a disable holds it, an enable
    // resumes it.
    receiver.behave(|_, before| Reply::status(if before == 0 { 500 } else { 200 }));
    let enabled = app
        .endpoint_post(&endpoint_id, "", &json!({"status": "enabled"}))
        .await;
    assert_eq!(enabled.status, 200, "{}", enabled.text());
    assert_eq!(enabled.json()["status"], "enabled");
    app.paid_payment(1200).await;
    receiver
        .wait_for("the failed first attempt", |r| r.len() == 2)
        .await;
    let disabled = app
        .endpoint_post(&endpoint_id, "", &json!({"status": "disabled"}))
        .await;
    assert_eq!(disabled.json()["status"], "disabled");
    actix_web::rt::time::sleep(MS(2500)).await;
    assert_eq!(
        receiver.received().len(),
        2,
        "nothing is sent to a disabled endpoint"
    );
    assert_eq!(
        app.deliveries(&endpoint_id).await[0]["status"],
        "pending",
        "but what is pending stays pending"
    );
    app.endpoint_post(&endpoint_id, "", &json!({"status": "enabled"}))
        .await;
    let received = receiver
        .wait_for("the resumed delivery", |r| r.len() == 3)
        .await;
    assert_eq!(
        received[1].header("webhook-id"),
        received[2].header("webhook-id")
    );
    assert_eq!(received[2].status, 200);
}

#[actix_web::test]
async fn an_endpoint_failing_for_webhook_disable_after_ms_is_disabled() {
    let app = app_delivering(|s| {
        s.webhook_retry_schedule = vec![MS(100); 50];
        s.webhook_disable_after = MS(600);
    })
    .await;
    let receiver = Receiver::always(500).await;
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.endpoint_status(&endpoint_id).await != "disabled" {
        assert!(Instant::now() < deadline, "never disabled");
        actix_web::rt::time::sleep(MS(50)).await;
    }
    let attempts = receiver.received();
    let span = attempts.last().unwrap().answered.unwrap() - attempts[0].answered.unwrap();
    assert!(span >= MS(600), "disabled after {span:?} of failures");
    actix_web::rt::time::sleep(MS(800)).await;
    assert_eq!(
        receiver.received().len(),
        attempts.len(),
        "no attempt once disabled"
    );
}

#[actix_web::test]
async fn a_hanging_endpoint_does_not_delay_deliveries_to_another() {
    let app = app_delivering(|s| s.webhook_timeout = Duration::from_secs(60)).await;
    let hanging = Receiver::start(|_, _| Reply::status(200).after(Duration::from_secs(120))).await;
    let healthy = Receiver::always(200).await;
    app.create_endpoint(&hanging.url, &["*"]).await;
    app.create_endpoint(&healthy.url, &["*"]).await;
    for i in 0..20 {
        app.paid_payment(100 + i).await;
    }
    // Well inside the hanging endpoint's 60 s timeout: nothing waits for it.
    let started = Instant::now();
    healthy.wait_for("all 20 events", |r| r.len() == 20).await;
    assert!(started.elapsed() < Duration::from_secs(30));
    let held = hanging.received();
    assert!(
        (1..=payments_api::deliveries::slots::MAX_IN_FLIGHT_PER_ENDPOINT).contains(&held.len()),
        "{} attempts in flight to one endpoint",
        held.len()
    );
    assert!(held.iter().all(|r| r.answered.is_none()), "still hanging");
}

/// More hanging endpoints than the shared slots can serve (4 each would be 80 of 64): the
/// healthy endpoint still has its own first slot, so it waits for none of them.
#[actix_web::test]
async fn many_hanging_endpoints_do_not_delay_deliveries_to_another() {
    use payments_api::deliveries::slots::{MAX_EXTRA_IN_FLIGHT, MAX_IN_FLIGHT_PER_ENDPOINT};
    let app = app_delivering(|s| s.webhook_timeout = Duration::from_secs(60)).await;
    let hanging = Receiver::start(|_, _| Reply::status(200).after(Duration::from_secs(120))).await;
    let healthy = Receiver::always(200).await;
    let slow_endpoints = MAX_EXTRA_IN_FLIGHT / (MAX_IN_FLIGHT_PER_ENDPOINT - 1) + 4;
    for i in 0..slow_endpoints {
        app.create_endpoint(&format!("{}/slow/{i}", hanging.url), &["*"])
            .await;
    }
    for i in 0..8 {
        app.paid_payment(100 + i).await;
    }
    // Every hanging endpoint holds what it may before the healthy one is added.
    hanging
        .wait_for("the hanging endpoints' slots", |r| {
            r.len() >= slow_endpoints + MAX_EXTRA_IN_FLIGHT
        })
        .await;
    app.create_endpoint(&healthy.url, &["*"]).await;
    for i in 0..5 {
        app.paid_payment(200 + i).await;
    }
    // Well inside the hanging endpoints' 60 s timeout: nothing waits for them.
    healthy.wait_for("5 events", |r| r.len() == 5).await;
    let held = hanging.received();
    assert_eq!(
        held.len(),
        slow_endpoints + MAX_EXTRA_IN_FLIGHT,
        "in flight"
    );
    assert!(held.iter().all(|r| r.answered.is_none()), "still hanging");
}

/// A list's `starting_after` must name one of the caller's own objects: another merchant's,
/// or one that does not exist, is a 404 (CONTRACT §2), as the feed's `after` is.
#[actix_web::test]
async fn a_cursor_naming_nothing_of_yours_is_404_on_every_list() {
    let app = app_delivering(|_| {}).await;
    let receiver = Receiver::always(200).await;
    let theirs_key = app.create_merchant("other").await;
    let id_of = |response: TestResponse| {
        assert!(response.status.is_success(), "{}", response.text());
        response.json()["id"].as_str().unwrap().to_owned()
    };
    let first_id = |response: TestResponse| {
        response.json()["data"][0]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let endpoint_body = json!({"url": receiver.url, "enabled_events": ["*"]});

    // One object of each kind for each merchant (their endpoints first, so that each
    // has a delivery).
    let (ours_endpoint, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    let theirs_endpoint = id_of(
        app.post_json("/v1/webhook_endpoints", &theirs_key, None, &endpoint_body)
            .await,
    );
    let ours_payment = app.paid_payment(500).await;
    let ours_refund = id_of(
        app.post_refund(&ours_payment, "r", &json!({"amount": 100}))
            .await,
    );
    let theirs_payment = id_of(
        app.post_json("/v1/payments", &theirs_key, Some("p"), &visa(700))
            .await,
    );
    let theirs_refund = id_of(
        app.post_json(
            &format!("/v1/payments/{theirs_payment}/refunds"),
            &theirs_key,
            Some("r"),
            &json!({"amount": 100}),
        )
        .await,
    );
    receiver.wait_for("4 events", |r| r.len() >= 4).await;
    let ours_deliveries = format!("/v1/webhook_endpoints/{ours_endpoint}/deliveries");
    let theirs_deliveries = format!("/v1/webhook_endpoints/{theirs_endpoint}/deliveries");
    let lists = [
        (
            "/v1/payments".to_owned(),
            ours_payment.clone(),
            theirs_payment,
        ),
        (
            format!("/v1/payments/{ours_payment}/refunds"),
            ours_refund,
            theirs_refund,
        ),
        (
            "/v1/events".to_owned(),
            first_id(app.get("/v1/events").await),
            first_id(app.get_as("/v1/events", &theirs_key).await),
        ),
        (
            "/v1/webhook_endpoints".to_owned(),
            ours_endpoint,
            theirs_endpoint,
        ),
        (
            ours_deliveries.clone(),
            first_id(app.get(&ours_deliveries).await),
            first_id(app.get_as(&theirs_deliveries, &theirs_key).await),
        ),
    ];
    for (list, ours, theirs) in lists {
        // A well-formed id of the same kind that names nothing.
        let made_up = format!(
            "{}{}",
            &ours[..ours.len() - 1],
            if ours.ends_with('0') { '1' } else { '0' }
        );
        let page = app.get(&format!("{list}?starting_after={ours}")).await;
        assert_eq!(page.status, 200, "{list} after ours: {}", page.text());
        for cursor in [theirs, made_up] {
            app.get(&format!("{list}?starting_after={cursor}"))
                .await
                .assert_problem(404, "not_found");
        }
    }
}

#[actix_web::test]
async fn a_rotated_secret_signs_beside_the_new_one_until_it_expires() {
    let app = app_delivering(|_| {}).await;
    let receiver = Receiver::always(200).await;
    let (endpoint_id, first) = app.create_endpoint(&receiver.url, &["*"]).await;
    let rotated = app
        .endpoint_post(
            &endpoint_id,
            "rotate_secret",
            &json!({"expire_current_in_s": 3600}),
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.text());
    let second = rotated.json()["secret"].as_str().unwrap().to_owned();
    assert!(second.starts_with("whsec_") && second != first);
    let read = app
        .get(&format!("/v1/webhook_endpoints/{endpoint_id}"))
        .await
        .json();
    assert_eq!(
        read["secret"],
        Value::Null,
        "the secret is never shown again"
    );
    assert!(!read.as_object().unwrap().contains_key("secret"));

    app.paid_payment(1000).await;
    let received = receiver.wait_for("a delivery", |r| r.len() == 1).await;
    assert_eq!(signature_matches(&second, &received[0]), [true, false]);
    assert_eq!(signature_matches(&first, &received[0]), [false, true]);

    // No body: the current secret overlaps for the default 24 h; then expire it at once.
    let default = app
        .request(
            "POST",
            &format!("/v1/webhook_endpoints/{endpoint_id}/rotate_secret"),
            &[("Authorization", format!("Bearer {}", app.api_key))],
            Vec::new(),
        )
        .await;
    assert_eq!(default.status, 200, "{}", default.text());
    let third = default.json()["secret"].as_str().unwrap().to_owned();
    let last = app
        .endpoint_post(
            &endpoint_id,
            "rotate_secret",
            &json!({"expire_current_in_s": 0}),
        )
        .await;
    let fourth = last.json()["secret"].as_str().unwrap().to_owned();
    app.paid_payment(1100).await;
    let received = receiver
        .wait_for("a second delivery", |r| r.len() == 2)
        .await;
    assert_eq!(signature_matches(&fourth, &received[1]), [true]);
    for old in [&first, &second, &third] {
        assert_eq!(signature_matches(old, &received[1]), [false]);
    }
    let problem = app
        .endpoint_post(
            &endpoint_id,
            "rotate_secret",
            &json!({"expire_current_in_s": 604801}),
        )
        .await
        .assert_problem(400, "invalid_request");
    assert_eq!(problem["param"], "expire_current_in_s");
}

#[actix_web::test]
async fn replay_delivers_failed_events_again_with_their_original_id() {
    let app = app_delivering(|s| s.webhook_retry_schedule = Vec::new()).await;
    let receiver = Receiver::always(500).await;
    let since = chrono::Utc::now() - chrono::TimeDelta::minutes(1);
    let (endpoint_id, secret) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    app.wait_for_delivery(&endpoint_id, "failed").await;
    let first = receiver.received()[0].clone();

    receiver.behave(|_, _| Reply::status(200));
    let body = json!({"since": since.to_rfc3339()});
    let key = "replay-1";
    let post = |body: Value| {
        let path = format!("/v1/webhook_endpoints/{endpoint_id}/replay");
        let app = &app;
        async move { app.post_json(&path, &app.api_key, Some(key), &body).await }
    };
    let replayed = post(body.clone()).await;
    assert_eq!(replayed.status, 202, "{}", replayed.text());
    assert_eq!(replayed.json(), json!({"queued": 1}));
    let again = post(body.clone()).await;
    assert_eq!(
        (again.status.as_u16(), again.body.clone()),
        (202, replayed.body.clone())
    );
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    post(json!({"since": since.to_rfc3339(), "status": "all"}))
        .await
        .assert_problem(422, "idempotency_key_reused");

    let received = receiver.wait_for("the replay", |r| r.len() == 2).await;
    assert_eq!(received[1].header("webhook-id"), first.header("webhook-id"));
    assert_eq!(received[1].body, first.body);
    assert_eq!(signature_matches(&secret, &received[1]), [true]);
    app.wait_for_delivery(&endpoint_id, "succeeded").await;

    // Nothing failed any more; `all` sends it once more.
    let since = since.to_rfc3339();
    assert_eq!(app.replay_since(&endpoint_id, &since, None).await, 0);
    assert_eq!(app.replay_since(&endpoint_id, &since, Some("all")).await, 1);
    receiver
        .wait_for("the second replay", |r| r.len() == 3)
        .await;
    let future = (chrono::Utc::now() + chrono::TimeDelta::minutes(1)).to_rfc3339();
    assert_eq!(app.replay_since(&endpoint_id, &future, None).await, 0);
}

/// The replay's limit counts only events that concern the endpoint: a failed delivery
/// behind more than the limit of the merchant's other events is still replayed.
#[actix_web::test]
async fn replay_finds_a_failed_delivery_behind_more_other_events_than_its_limit() {
    use payments_api::events::{self, EventType, NewEvent};
    use payments_api::webhook_endpoints::REPLAY_LIMIT;
    let app = app_delivering(|s| s.webhook_retry_schedule = Vec::new()).await;
    let receiver = Receiver::always(500).await;
    let since = chrono::Utc::now() - chrono::TimeDelta::minutes(1);
    let (endpoint_id, _) = app
        .create_endpoint(&receiver.url, &["payment.failed"])
        .await;
    // More events than a replay looks at, none of them for this endpoint.
    let merchant_id = app.merchant_id.clone();
    app.state
        .db
        .run(move |conn| {
            use diesel::Connection;
            conn.transaction(|conn| {
                let others = usize::try_from(REPLAY_LIMIT).unwrap() + 10;
                for _ in 0..others / 1000 + 1 {
                    let batch: Vec<NewEvent<'_>> = (0..1000)
                        .map(|_| NewEvent {
                            merchant_id: &merchant_id,
                            kind: EventType::PaymentSucceeded,
                            object_id: "pay_other",
                            object: "{}",
                            request: None,
                        })
                        .collect();
                    events::record_all(conn, &batch)?;
                }
                Ok(())
            })
        })
        .await
        .expect("other events recorded");
    let declined = json!({"amount": 500, "currency": "usd", "payment_method": "pm_card_declined"});
    assert_eq!(app.post_payment("declined", &declined).await.status, 201);
    app.wait_for_delivery(&endpoint_id, "failed").await;

    receiver.behave(|_, _| Reply::status(200));
    let since = since.to_rfc3339();
    assert_eq!(app.replay_since(&endpoint_id, &since, None).await, 1);
    assert_eq!(
        app.replay_since(&endpoint_id, &since, Some("all")).await,
        0,
        "the replay is still pending"
    );
    let received = receiver.wait_for("the replay", |r| r.len() == 2).await;
    assert_eq!(
        received[1].header("webhook-id"),
        received[0].header("webhook-id")
    );
}

/// A CA of the test's own and a certificate for 127.0.0.1 signed by it: the CA's PEM, and
/// the receiver's TLS configuration.
fn test_certificates() -> (String, rustls::ServerConfig) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "payments-api test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)
    .unwrap();
    (ca.pem(), server)
}

/// Endpoints may be `https` (CONTRACT §9): deliveries go over TLS, verified against the
/// built-in roots and TLS_CA_FILE's; a certificate nobody vouches for fails the attempt.
#[actix_web::test]
async fn https_endpoints_are_delivered_to_over_verified_tls() {
    let (ca_pem, server_tls) = test_certificates();
    let ca_file = std::env::temp_dir().join(format!("ca-{}.pem", uuid::Uuid::new_v4().simple()));
    std::fs::write(&ca_file, ca_pem).unwrap();
    let receiver = Receiver::start_tls(|_, _| Reply::status(200), server_tls).await;
    assert!(receiver.url.starts_with("https://127.0.0.1:"));

    let trusting = {
        let ca_file = ca_file.clone();
        app_delivering(move |s| s.tls_ca_file = Some(ca_file)).await
    };
    let (endpoint_id, secret) = trusting.create_endpoint(&receiver.url, &["*"]).await;
    trusting.paid_payment(1000).await;
    let delivered = trusting.wait_for_delivery(&endpoint_id, "succeeded").await;
    assert_eq!(delivered["last_attempt"]["status_code"], 200);
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    assert_eq!(signature_matches(&secret, &received[0]), [true]);

    // Without the CA the receiver's certificate is not trusted: nothing is sent.
    let unaware = app_delivering(|_| {}).await;
    let (endpoint_id, _) = unaware.create_endpoint(&receiver.url, &["*"]).await;
    let path = format!("/v1/webhook_endpoints/{endpoint_id}/test");
    let test = unaware
        .post_json(&path, &unaware.api_key, None, &json!({}))
        .await
        .json();
    assert_eq!(test["delivered"], false, "{test}");
    assert!(
        test["error"].as_str().unwrap().contains("certificate"),
        "{test}"
    );
    assert_eq!(test["status_code"], Value::Null, "{test}");
    assert_eq!(
        receiver.received().len(),
        1,
        "no request reached the receiver"
    );
    let _ = std::fs::remove_file(ca_file);
}

#[actix_web::test]
async fn test_sends_a_signed_test_event_now_that_is_not_in_the_feed() {
    let app = app_delivering(|_| {}).await;
    let receiver = Receiver::always(200).await;
    let (endpoint_id, secret) = app
        .create_endpoint(&receiver.url, &["payment.failed"])
        .await;
    let headers = [
        ("Authorization", format!("Bearer {}", app.api_key)),
        ("X-Request-Id", "req-test-1".to_owned()),
    ];
    let path = format!("/v1/webhook_endpoints/{endpoint_id}/test");
    let result = app.request("POST", &path, &headers, Vec::new()).await;
    assert_eq!(result.status, 200, "{}", result.text());
    let result = result.json();
    assert_eq!(result["delivered"], true);
    assert_eq!(result["status_code"], 200);
    assert_eq!(result["error"], Value::Null);
    assert!(result["duration_ms"].is_u64());
    let received = receiver.received();
    assert_eq!(received.len(), 1);
    let event = received[0].json();
    assert_eq!(event["type"], "webhook_endpoint.test");
    assert_eq!(event["data"]["object"]["id"], endpoint_id.as_str());
    assert_eq!(event["request"]["id"], "req-test-1");
    assert_eq!(signature_matches(&secret, &received[0]), [true]);
    assert_eq!(app.get("/v1/events").await.json()["data"], json!([]));

    receiver.behave(|_, _| Reply::status(500));
    let failed = app
        .post_json(&path, &app.api_key, Some("test-key"), &json!({}))
        .await
        .json();
    assert_eq!(
        (
            failed["delivered"].clone(),
            failed["status_code"].clone(),
            failed["error"].clone()
        ),
        (json!(false), json!(500), json!("answered 500"))
    );
    // With a key, the first answer is the answer.
    receiver.behave(|_, _| Reply::status(200));
    let replay = app
        .post_json(&path, &app.api_key, Some("test-key"), &json!({}))
        .await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.json(), failed);
    assert_eq!(receiver.received().len(), 2);

    let other = app.create_merchant("other-test").await;
    app.post_json(&path, &other, None, &json!({}))
        .await
        .assert_problem(404, "not_found");
}

#[actix_web::test]
async fn webhook_endpoints_are_managed_per_merchant_and_keys_replay_their_answer() {
    let app = app_delivering(|_| {}).await;
    let body = json!({
        "url": "https://hooks.example/payments",
        "enabled_events": ["refund.failed", "payment.succeeded"],
        "description": "orders"
    });
    // A storm of identical creates with one key: one endpoint, one answer.
    let responses = join_all(
        (0..20).map(|_| app.post_json("/v1/webhook_endpoints", &app.api_key, Some("we-1"), &body)),
    )
    .await;
    assert!(
        responses.iter().all(|r| r.status == 201),
        "{}",
        responses[0].text()
    );
    assert!(responses.iter().all(|r| r.body == responses[0].body));
    let replays = responses
        .iter()
        .filter(|r| r.header("idempotent-replayed") == Some("true"))
        .count();
    assert_eq!(replays, 19);
    let created = responses[0].json();
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("we_"));
    assert_eq!(created["object"], "webhook_endpoint");
    assert_eq!(created["url"], "https://hooks.example/payments");
    assert_eq!(
        created["enabled_events"],
        json!(["refund.failed", "payment.succeeded"])
    );
    assert_eq!(created["description"], "orders");
    assert_eq!(created["status"], "enabled");
    assert!(created["secret"].as_str().unwrap().starts_with("whsec_"));
    app.post_json(
        "/v1/webhook_endpoints",
        &app.api_key,
        Some("we-1"),
        &json!({"url": "https://x.example/", "enabled_events": ["*"]}),
    )
    .await
    .assert_problem(422, "idempotency_key_reused");

    let list = app.get("/v1/webhook_endpoints").await.json();
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(!list["data"][0].as_object().unwrap().contains_key("secret"));

    let updated = app
        .endpoint_post(
            &id,
            "",
            &json!({"enabled_events": ["*"], "description": ""}),
        )
        .await;
    assert_eq!(updated.status, 200, "{}", updated.text());
    let updated = updated.json();
    assert_eq!(updated["enabled_events"], json!(["*"]));
    assert_eq!(updated["description"], Value::Null);
    assert_eq!(updated["url"], created["url"]);
    assert!(!updated.as_object().unwrap().contains_key("secret"));

    let other = app.create_merchant("other-endpoints").await;
    app.get_as(&format!("/v1/webhook_endpoints/{id}"), &other)
        .await
        .assert_problem(404, "not_found");
    app.post_json(
        &format!("/v1/webhook_endpoints/{id}"),
        &other,
        None,
        &json!({}),
    )
    .await
    .assert_problem(404, "not_found");
    app.get_as(&format!("/v1/webhook_endpoints/{id}/deliveries"), &other)
        .await
        .assert_problem(404, "not_found");
    let delete_as = |key: String| {
        let path = format!("/v1/webhook_endpoints/{id}");
        let app = &app;
        async move {
            app.request(
                "DELETE",
                &path,
                &[("Authorization", format!("Bearer {key}"))],
                Vec::new(),
            )
            .await
        }
    };
    delete_as(other.clone())
        .await
        .assert_problem(404, "not_found");
    assert_eq!(
        app.get_as("/v1/webhook_endpoints", &other).await.json()["data"],
        json!([])
    );

    for (body, param) in [
        (json!({"url": "https://x.example/"}), "enabled_events"),
        (
            json!({"url": "https://x.example/", "enabled_events": ["payment.exploded"]}),
            "enabled_events",
        ),
        (
            json!({"url": "gopher://x.example/", "enabled_events": ["*"]}),
            "url",
        ),
        (
            json!({"url": "https://u:p@x.example/", "enabled_events": ["*"]}),
            "url",
        ),
        (
            json!({"url": "https://x.example/", "enabled_events": ["*"], "status": "enabled"}),
            "status",
        ),
    ] {
        let problem = app
            .post_json("/v1/webhook_endpoints", &app.api_key, None, &body)
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], param, "{body}");
    }
    app.get("/v1/webhook_endpoints/we_nope")
        .await
        .assert_problem(404, "not_found");
    app.get(&format!(
        "/v1/webhook_endpoints/{id}/deliveries?status=lost"
    ))
    .await
    .assert_problem(400, "invalid_request");

    let deleted = delete_as(app.api_key.clone()).await;
    assert_eq!(deleted.status, 200);
    assert_eq!(
        deleted.json(),
        json!({"id": id, "object": "webhook_endpoint", "deleted": true})
    );
    delete_as(app.api_key.clone())
        .await
        .assert_problem(404, "not_found");
    app.get(&format!("/v1/webhook_endpoints/{id}"))
        .await
        .assert_problem(404, "not_found");
}

#[actix_web::test]
async fn non_public_destinations_are_refused_in_any_spelling() {
    let app = spawn_app().await; // WEBHOOK_ALLOW_PRIVATE_URLS is false by default
    for url in [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://10.0.0.8/",
        "http://192.168.0.1/",
        "http://172.20.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0/",
        "http://[::]/",
        "http://224.0.0.251/",
        "http://[fe80::1]/",
        "http://[fd00::1]/",
        "http://100.100.100.100/",
    ] {
        let problem = app
            .post_json(
                "/v1/webhook_endpoints",
                &app.api_key,
                None,
                &json!({"url": url, "enabled_events": ["*"]}),
            )
            .await
            .assert_problem(400, "invalid_request");
        assert_eq!(problem["param"], "url", "{url}");
    }
    let long = format!("https://93.184.215.14/{}", "a".repeat(2048));
    let problem = app
        .post_json(
            "/v1/webhook_endpoints",
            &app.api_key,
            None,
            &json!({"url": long, "enabled_events": ["*"]}),
        )
        .await
        .assert_problem(400, "invalid_request");
    assert_eq!(problem["param"], "url");

    let created = app
        .post_json(
            "/v1/webhook_endpoints",
            &app.api_key,
            None,
            &json!({"url": "https://93.184.215.14/hook", "enabled_events": ["*"]}),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let problem = app
        .endpoint_post(&id, "", &json!({"url": "http://[::ffff:7f00:1]/"}))
        .await
        .assert_problem(400, "invalid_request");
    assert_eq!(problem["param"], "url");
    assert_eq!(endpoint_url(&app, &id).await, "https://93.184.215.14/hook");
}

async fn endpoint_url(app: &TestApp, id: &str) -> String {
    let endpoint = app.get(&format!("/v1/webhook_endpoints/{id}")).await.json();
    endpoint["url"].as_str().unwrap().to_owned()
}

#[actix_web::test]
async fn three_instances_never_overlap_attempts_of_one_delivery() {
    let provider = spawn_provider().await;
    let (apps, _database) = spawn_cluster(3, &provider, |s| {
        s.bootstrap_api_key = Some("sk_test_delivery_cluster_00001".to_owned());
        s.webhook_allow_private_urls = true;
        s.webhook_retry_schedule = vec![MS(20), MS(20)];
        s.webhook_timeout = Duration::from_secs(10);
    })
    .await;
    // Slow, and failing twice per event before it succeeds.
    let receiver = Receiver::start(|_, before| {
        Reply::status(if before < 2 { 500 } else { 200 }).after(MS(300))
    })
    .await;
    apps[0].create_endpoint(&receiver.url, &["*"]).await;
    join_all((0..15).map(|i| apps[i % 3].paid_payment(500 + i as i64))).await;

    let received = receiver
        .wait_for("15 successful deliveries", |r| {
            r.iter()
                .filter(|r| r.status == 200 && r.answered.is_some())
                .count()
                >= 15
        })
        .await;
    actix_web::rt::time::sleep(MS(500)).await;
    let mut by_id: HashMap<String, Vec<Received>> = HashMap::new();
    for r in receiver.received() {
        by_id
            .entry(r.header("webhook-id").to_owned())
            .or_default()
            .push(r);
    }
    assert_eq!(by_id.len(), 15, "{} events", by_id.len());
    for (id, mut attempts) in by_id {
        attempts.sort_by_key(|r| r.arrived);
        assert_eq!(attempts.len(), 3, "{id}: {} attempts", attempts.len());
        for pair in attempts.windows(2) {
            assert!(
                pair[0].answered.unwrap() <= pair[1].arrived,
                "{id}: two attempts in flight at once"
            );
        }
    }
    assert!(received.len() >= 45);
}

#[actix_web::test]
async fn a_delivery_in_flight_when_the_instance_is_killed_arrives_after_the_restart() {
    let receiver = Receiver::start(|_, before| {
        // The first attempt hangs: the instance is killed while it waits.
        Reply::status(200).after(if before == 0 {
            Duration::from_secs(120)
        } else {
            Duration::ZERO
        })
    })
    .await;
    let (_database, url) = TestDatabase::create();
    let key = "sk_test_kill9_deliveries_000001".to_owned();
    let env = [
        ("DATABASE_URL", url),
        ("BOOTSTRAP_API_KEY", key.clone()),
        ("WEBHOOK_ALLOW_PRIVATE_URLS", "true".to_owned()),
        ("WEBHOOK_TIMEOUT_MS", "2000".to_owned()),
    ];
    let mut service = crate::helpers::ServiceProcess::start(&env).await;
    let client = test_client();
    let auth = format!("Bearer {key}");
    let created: Value = client
        .post(format!("{}/v1/webhook_endpoints", service.address))
        .insert_header(("Authorization", auth.clone()))
        .send_json(&json!({"url": receiver.url, "enabled_events": ["*"]}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let endpoint_id = created["id"].as_str().unwrap().to_owned();
    let paid = client
        .post(format!("{}/v1/payments", service.address))
        .insert_header(("Authorization", auth.clone()))
        .insert_header(("Idempotency-Key", "kill9-delivery"))
        .send_json(&visa(3300))
        .await
        .unwrap();
    assert_eq!(paid.status(), 201);
    let first = receiver
        .wait_for("the first attempt", |r| r.len() == 1)
        .await;
    service.kill_9();

    let restarted = crate::helpers::ServiceProcess::start(&env).await;
    let received = receiver
        .wait_for("the attempt after the restart", |r| r.len() == 2)
        .await;
    assert_eq!(
        received[1].header("webhook-id"),
        first[0].header("webhook-id")
    );
    assert_eq!(received[1].body, first[0].body);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let deliveries: Value = client
            .get(format!(
                "{}/v1/webhook_endpoints/{endpoint_id}/deliveries",
                restarted.address
            ))
            .insert_header(("Authorization", auth.clone()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let data = deliveries["data"].as_array().unwrap();
        assert_eq!(data.len(), 1, "{deliveries}");
        if data[0]["status"] == "succeeded" {
            break;
        }
        assert!(Instant::now() < deadline, "{deliveries}");
        actix_web::rt::time::sleep(MS(100)).await;
    }
}

#[actix_web::test]
async fn an_attempt_whose_outcome_the_database_missed_is_made_again_once_it_is_back() {
    let receiver = Receiver::start(|_, before| {
        Reply::status(200).after(if before == 0 {
            MS(1000)
        } else {
            Duration::ZERO
        })
    })
    .await;
    let Some((app, proxy, _schema)) = crate::ops::app_behind_proxy(|s| {
        s.webhook_allow_private_urls = true;
        s.webhook_timeout = Duration::from_secs(2);
    })
    .await
    else {
        return;
    };
    let (endpoint_id, _) = app.create_endpoint(&receiver.url, &["*"]).await;
    app.paid_payment(1000).await;
    let first = receiver
        .wait_for("the first attempt", |r| r.len() == 1)
        .await;
    // The database goes away while the attempt is in flight: its 200 cannot be recorded.
    proxy.cut();
    receiver
        .wait_for("the answer to the first attempt", |r| {
            r[0].answered.is_some()
        })
        .await;
    // Longer than a pool checkout may wait (3 s): recording the attempt must fail, not
    // merely wait for the database to come back.
    actix_web::rt::time::sleep(MS(4000)).await;
    proxy.restore();
    let received = receiver
        .wait_for("the attempt again", |r| r.len() == 2)
        .await;
    assert_eq!(
        received[1].header("webhook-id"),
        first[0].header("webhook-id")
    );
    assert_eq!(received[1].body, first[0].body);
    let delivered = app.wait_for_delivery(&endpoint_id, "succeeded").await;
    assert_eq!(delivered["attempts"], 1, "the attempt that was recorded");
}
