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

use crate::support::{
    TestApp, TestDatabase, TestResponse, assert_holds_for, spawn_app, spawn_app_with,
    spawn_cluster, spawn_provider, test_client, visa,
};

mod attempts;
mod endpoints;
mod instances;
mod signing;

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
