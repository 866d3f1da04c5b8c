//! Operating the service: health, metrics, the OpenAPI document and docs page, logs without
//! secrets, the database going away and coming back, SIGTERM, settings checked at start.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown as SocketShutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use payments_api::routes::ROUTES;
use payments_api::startup::Application;
use serde_json::{Value, json};

use crate::support::{TestDatabase, spawn_app, spawn_app_with, test_settings, visa, wait_until};

// ---------------------------------------------------------------------------------------
// Health

#[actix_web::test]
async fn live_and_ready_answer_200() {
    let app = spawn_app().await;
    let live = app.request("GET", "/health/live", &[], Vec::new()).await;
    assert_eq!(live.status, 200);
    assert_eq!(live.json()["status"], "ok");
    let ready = app.request("GET", "/health/ready", &[], Vec::new()).await;
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert_eq!(ready.json()["status"], "ready");
    assert!(ready.header("x-request-id").is_some());
}

// ---------------------------------------------------------------------------------------
// Metrics

/// The value of one series in a Prometheus text page (0 when absent).
fn series(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(name_and_labels)?;
            rest.strip_prefix(' ')?.trim().parse::<f64>().ok()
        })
        .unwrap_or(0.0)
}

async fn scrape(app: &crate::support::TestApp) -> String {
    let response = app.request("GET", "/metrics", &[], Vec::new()).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert!(
        response
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/plain")),
        "{:?}",
        response.header("content-type")
    );
    response.text()
}

const CREATED: &str = r#"idempotency_outcomes_total{outcome="created",resource="payment"}"#;
const REPLAYED: &str = r#"idempotency_outcomes_total{outcome="replayed",resource="payment"}"#;
const REUSED: &str = r#"idempotency_outcomes_total{outcome="reused",resource="payment"}"#;
const IN_USE: &str = r#"idempotency_outcomes_total{outcome="in_use",resource="payment"}"#;
const CHARGE_OK: &str = r#"provider_calls_total{operation="charge",outcome="succeeded"}"#;
const CHARGE_DECLINED: &str = r#"provider_calls_total{operation="charge",outcome="failed"}"#;
const GET_PAYMENT_200: &str =
    r#"http_requests_total{method="GET",route="/v1/payments/{id}",status="200"}"#;
const UNMATCHED_404: &str = r#"http_requests_total{method="GET",route="unmatched",status="404"}"#;

#[actix_web::test]
async fn metrics_count_requests_by_route_template_and_idempotency_and_provider_outcomes() {
    let app = spawn_app().await;
    // Tests share the process's registry and run in parallel: compare before and after.
    let before = scrape(&app).await;

    let first = app.post_payment("metrics-1", &visa(1500)).await;
    assert_eq!(first.status, 201);
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.post_payment("metrics-1", &visa(1500)).await.status, 201);
    app.post_payment("metrics-1", &visa(1501))
        .await
        .assert_problem(422, "idempotency_key_reused");
    let declined = json!({"amount": 100, "currency": "usd", "payment_method": "pm_card_declined"});
    assert_eq!(app.post_payment("metrics-2", &declined).await.status, 201);
    assert_eq!(app.get(&format!("/v1/payments/{id}")).await.status, 200);
    let secret_path = "/no-such-route-with-an-id-pay_0123456789";
    assert_eq!(app.get(secret_path).await.status, 404);

    let after = scrape(&app).await;
    let grew = |series_name: &str, by: f64| {
        let delta = series(&after, series_name) - series(&before, series_name);
        assert!(
            delta >= by,
            "{series_name} grew by {delta}, expected {by}:\n{after}"
        );
    };
    grew(CREATED, 2.0);
    grew(REPLAYED, 1.0);
    grew(REUSED, 1.0);
    grew(CHARGE_OK, 1.0);
    grew(CHARGE_DECLINED, 1.0);
    grew(GET_PAYMENT_200, 1.0);
    grew(UNMATCHED_404, 1.0);
    assert!(after.contains("provider_call_duration_seconds_bucket{operation=\"charge\""));
    assert!(
        after.contains(
            "http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/payments\""
        )
    );
    // Route templates only: no ids, no raw paths in label values.
    assert!(!after.contains(&id), "a payment id leaked into the metrics");
    assert!(!after.contains(secret_path));
    // The pool, observed at scrape time: the pool of this app has at least one connection.
    assert!(series(&after, "db_pool_connections") >= 1.0, "{after}");
    assert!(series(&after, "db_pool_max_connections") >= 1.0, "{after}");
    assert!(after.contains("# TYPE db_pool_idle_connections gauge"));
    // Families the parallel branches will feed are already exposed.
    assert!(after.contains(r#"webhooks_total{outcome="duplicate"}"#));
}

#[actix_web::test]
async fn metrics_count_a_duplicate_told_in_use() {
    let app = spawn_app_with(|s| {
        s.provider_latency = Duration::from_millis(1500);
        s.idempotency_wait = Duration::ZERO;
    })
    .await;
    let before = scrape(&app).await;
    let body = visa(700);
    let (first, second) = tokio::join!(app.post_payment("busy-1", &body), async {
        actix_web::rt::time::sleep(Duration::from_millis(300)).await;
        app.post_payment("busy-1", &body).await
    });
    assert_eq!(first.status, 201);
    second.assert_problem(409, "idempotency_key_in_use");
    let after = scrape(&app).await;
    assert!(
        series(&after, IN_USE) - series(&before, IN_USE) >= 1.0,
        "{after}"
    );
}

// ---------------------------------------------------------------------------------------
// OpenAPI and the docs page

fn method_key(method: &actix_web::http::Method) -> String {
    method.as_str().to_ascii_lowercase()
}

/// Every `$ref` in the document, e.g. `#/components/schemas/Payment`.
fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    out.push(v.as_str().unwrap_or_default().to_owned());
                } else {
                    refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[actix_web::test]
async fn the_openapi_document_describes_every_route_the_service_serves() {
    let app = spawn_app().await;
    let response = app.request("GET", "/openapi.json", &[], Vec::new()).await;
    assert_eq!(response.status, 200);
    let doc = response.json();
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3."),
        "{}",
        doc["openapi"]
    );
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    let paths = doc["paths"].as_object().expect("paths");

    // Every served route is documented, with responses and X-Request-Id on each.
    for route in ROUTES {
        let operation = &doc["paths"][route.path][method_key(&route.method)];
        assert!(
            operation.is_object(),
            "{} {} is served but not in the document",
            route.method,
            route.path
        );
        assert!(
            operation["tags"][0].is_string(),
            "{} {} has no tag",
            route.method,
            route.path
        );
        let responses = operation["responses"].as_object().expect("responses");
        assert!(!responses.is_empty(), "{} {}", route.method, route.path);
        for (status, response) in responses {
            assert!(
                response["headers"]["X-Request-Id"].is_object(),
                "{} {} {status} lacks X-Request-Id",
                route.method,
                route.path
            );
        }
    }
    // Every operation has its own id: client generators name methods after them, and two
    // operations sharing one (both handlers called `list`) break the generated client.
    let mut operation_ids = std::collections::HashSet::new();
    for route in ROUTES {
        let id = doc["paths"][route.path][method_key(&route.method)]["operationId"]
            .as_str()
            .unwrap_or_else(|| panic!("{} {} has no operationId", route.method, route.path));
        assert!(
            operation_ids.insert(id.to_owned()),
            "operationId {id} is used twice ({} {} among them)",
            route.method,
            route.path
        );
    }
    // Nothing is documented that is not served.
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            assert!(
                ROUTES
                    .iter()
                    .any(|r| r.path == path && method_key(&r.method) == *method),
                "{method} {path} is documented but not served"
            );
        }
    }
    // The table is what is served: each route answers (401 without a key is fine), never
    // "no such route".
    for route in ROUTES {
        let path = route.path.replace("{id}", "pay_x");
        let answer = app
            .request(route.method.as_str(), &path, &[], Vec::new())
            .await;
        assert!(
            answer.status != 404,
            "{} {path}: {}",
            route.method,
            answer.status
        );
    }

    // Every schema reference resolves.
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for reference in all {
        let name = reference
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("unexpected $ref {reference}"));
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{reference} does not resolve"
        );
    }

    // The headers of the idempotency contract and the problem responses.
    let create = &doc["paths"]["/v1/payments"]["post"];
    let key = create["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .expect("Idempotency-Key documented");
    assert_eq!(key["in"], "header");
    assert_eq!(key["required"], true);
    assert!(create["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
    for status in ["409", "503"] {
        assert!(
            create["responses"][status]["headers"]["Retry-After"].is_object(),
            "{status} lacks Retry-After"
        );
    }
    for status in ["202", "400", "401", "413", "415", "422", "500"] {
        assert!(create["responses"][status].is_object(), "{status} missing");
    }
    assert!(
        create["responses"]["409"]["content"]["application/problem+json"]["schema"]["$ref"]
            .as_str()
            .is_some_and(|r| r.ends_with("/Problem"))
    );
    assert!(create["requestBody"]["content"]["application/json"]["schema"].is_object());
    assert_eq!(create["security"][0]["api_key"], json!([]));
    assert_eq!(
        doc["components"]["securitySchemes"]["api_key"]["scheme"],
        "bearer"
    );
    for schema in [
        "CreatePaymentRequest",
        "Payment",
        "PaymentList",
        "PaymentStatus",
        "Problem",
    ] {
        assert!(
            doc["components"]["schemas"][schema].is_object(),
            "{schema} missing"
        );
    }
    let payment = &doc["components"]["schemas"]["Payment"]["properties"];
    for field in [
        "id",
        "amount",
        "currency",
        "status",
        "amount_refunded",
        "created_at",
    ] {
        assert!(payment[field].is_object(), "Payment.{field} missing");
    }
    assert!(
        doc["paths"]["/health/ready"]["get"]["responses"]["503"]["headers"]["Retry-After"]
            .is_object()
    );
}

#[actix_web::test]
async fn the_docs_page_is_served_from_the_binary() {
    let app = spawn_app().await;
    let redirect = awc::Client::builder()
        .disable_redirects()
        .finish()
        .get(format!("{}/docs", app.address))
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), 308);
    assert_eq!(
        redirect
            .headers()
            .get("location")
            .unwrap()
            .to_str()
            .unwrap(),
        "/docs/"
    );

    let page = app.request("GET", "/docs/", &[], Vec::new()).await;
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    let html = page.text();
    // Every script and stylesheet is local, and is there.
    let mut assets = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        for piece in html.split(attribute).skip(1) {
            let target = piece.split('"').next().unwrap();
            assert!(
                !target.contains("://") && !target.starts_with("//"),
                "the docs page loads {target} from elsewhere"
            );
            assets.push(target.trim_start_matches("./").to_owned());
        }
    }
    assert!(assets.iter().any(|a| a.ends_with(".js")), "{html}");
    for asset in assets {
        let file = app
            .request("GET", &format!("/docs/{asset}"), &[], Vec::new())
            .await;
        assert_eq!(file.status, 200, "/docs/{asset}");
    }
    let init = app
        .request("GET", "/docs/swagger-initializer.js", &[], Vec::new())
        .await;
    assert_eq!(init.status, 200);
    let init = init.text();
    assert!(init.contains("/openapi.json"), "{init}");
    assert!(!init.contains("https://"), "{init}");
    // A file the page does not have is a 404 like any other: a problem, with a request id.
    for missing in ["/docs/nope.js", "/docs/%00"] {
        let response = app.request("GET", missing, &[], Vec::new()).await;
        response.assert_problem(404, "not_found");
        assert!(response.header("x-request-id").is_some(), "{missing}");
    }
}

// ---------------------------------------------------------------------------------------
// Background tasks stop with the server

#[actix_web::test]
async fn background_tasks_are_told_to_stop_when_the_server_stops() {
    let (_database, url) = TestDatabase::create();
    let app = Application::build(test_settings(url)).await.unwrap();
    let handle = app.handle();
    let shutdown = app.state().shutdown.clone();
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    shutdown.spawn("test-worker", |stop| async move {
        loop {
            tokio::select! {
                _ = stop.requested() => break,
                _ = actix_web::rt::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        flag.store(true, Ordering::SeqCst);
    });
    let server = actix_web::rt::spawn(app.run_until_stopped());
    actix_web::rt::time::sleep(Duration::from_millis(200)).await;
    assert!(!finished.load(Ordering::SeqCst));
    handle.stop(true).await;
    let stopped = actix_web::rt::time::timeout(Duration::from_secs(30), server).await;
    assert!(matches!(stopped, Ok(Ok(Ok(())))), "{stopped:?}");
    assert!(
        finished.load(Ordering::SeqCst),
        "the worker was not stopped"
    );
    assert!(shutdown.is_requested());
}

// ---------------------------------------------------------------------------------------
// The real binary: logs, SIGTERM, bad settings

/// `payments-api` running as a child process, its stdout and stderr collected line by line.
struct Service {
    child: std::process::Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
    client: awc::Client,
    _database: TestDatabase,
}

fn collect(stream: impl Read + Send + 'static, lines: Arc<Mutex<Vec<String>>>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            lines.lock().unwrap().push(line);
        }
    });
}

impl Service {
    async fn start(envs: &[(&str, &str)]) -> Self {
        let (database, url) = TestDatabase::create();
        let workdir = std::env::temp_dir().join("payments-api-tests");
        std::fs::create_dir_all(&workdir).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_payments-api"));
        command
            .current_dir(&workdir) // no stray .env
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", &url)
            .env("BIND_ADDR", "127.0.0.1:0")
            .env("WORKERS", "2")
            .env("RUST_LOG", "info")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("the binary starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        collect(child.stdout.take().unwrap(), lines.clone());
        collect(child.stderr.take().unwrap(), lines.clone());
        let mut service = Self {
            child,
            port: 0,
            lines,
            client: awc::Client::builder()
                .timeout(Duration::from_secs(60))
                .finish(),
            _database: database,
        };
        let listening = service.wait_for_line("payments-api listening").await;
        let url_start = listening.find("http://127.0.0.1:").expect("url logged") + 17;
        service.port = listening[url_start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap();
        service
    }

    /// Waits (bounded) for a line containing `needle`, and returns it.
    async fn wait_for_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(line) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return line.clone();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the service exited ({status}):\n{}", self.output());
            }
            assert!(
                Instant::now() < deadline,
                "no line with {needle:?}:\n{}",
                self.output()
            );
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, String) {
        let method = awc::http::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.client.request(method, self.url(path));
        for (name, value) in headers {
            request = request.insert_header((*name, *value));
        }
        let mut response = request.send_body(body.to_owned()).await.expect("answered");
        let body = response.body().await.expect("body");
        (
            response.status().as_u16(),
            String::from_utf8_lossy(&body).into_owned(),
        )
    }

    fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Waits (bounded) for the process to exit.
    async fn wait_for_exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the service did not exit:\n{}", self.output());
            }
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

const API_KEY: &str = "sk_test_LOGSECRET_0123456789abcdef";
const WEBHOOK_SECRET: &str = "whsec_V0VCSE9PS1NFQ1JFVE1BUktFUjEyMzQ1Ng==";

#[actix_web::test]
async fn logs_are_json_lines_without_keys_secrets_signatures_or_bodies() {
    let mut service = Service::start(&[
        ("LOG_FORMAT", "json"),
        ("BOOTSTRAP_API_KEY", API_KEY),
        ("WEBHOOK_SECRETS", WEBHOOK_SECRET),
    ])
    .await;
    let bearer = format!("Bearer {API_KEY}");
    let body_marker = "BODYMARKER7f3a";
    let body = json!({
        "amount": 4200, "currency": "usd", "payment_method": "pm_card_visa",
        "description": body_marker, "metadata": {"note": body_marker}
    })
    .to_string();
    let (status, created) = service
        .send(
            "POST",
            "/v1/payments",
            &[
                ("Authorization", &bearer),
                ("Content-Type", "application/json"),
                ("Idempotency-Key", "log-test-1"),
                ("X-Request-Id", "req-log-test-1"),
            ],
            &body,
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let payment: Value = serde_json::from_str(&created).unwrap();
    // A bad request echoing the body, a wrong key, and a signed webhook delivery.
    let (status, _) = service
        .send(
            "POST",
            "/v1/payments",
            &[
                ("Authorization", &bearer),
                ("Content-Type", "application/json"),
                ("Idempotency-Key", "log-test-2"),
            ],
            &format!("{{\"amount\": \"{body_marker}\"}}"),
        )
        .await;
    assert_eq!(status, 400);
    let wrong_key = "sk_test_WRONGKEY_0123456789abcdef";
    let (status, _) = service
        .send(
            "GET",
            "/v1/payments",
            &[("Authorization", &format!("Bearer {wrong_key}"))],
            "",
        )
        .await;
    assert_eq!(status, 401);
    let signature = "v1,U0lHTkFUVVJFTUFSS0VSMTIzNDU2Nzg5MGFiY2RlZg==";
    let webhook_body = format!(
        "{{\"type\":\"charge.succeeded\",\"data\":{{\"reference\":\"{}\",\"note\":\"{body_marker}\"}}}}",
        payment["id"].as_str().unwrap()
    );
    let (status, _) = service
        .send(
            "POST",
            "/v1/webhooks/provider",
            &[
                ("Content-Type", "application/json"),
                ("webhook-id", "msg_logtest"),
                ("webhook-timestamp", "1700000000"),
                ("webhook-signature", signature),
            ],
            &webhook_body,
        )
        .await;
    assert!(status < 500, "{status}");

    service.sigterm();
    assert!(service.wait_for_exit().await.success());
    let output = service.output();

    // The logs were captured, as JSON lines with the request fields.
    assert!(output.contains("req-log-test-1"), "{output}");
    let mut request_lines = 0;
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let event: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        if event["request_id"] == "req-log-test-1" && event["message"] == "request" {
            request_lines += 1;
            assert_eq!(event["route"], "/v1/payments");
            assert_eq!(event["status"], 201);
            assert!(event["latency_ms"].is_number());
            assert!(event["merchant"].as_str().is_some_and(|m| !m.is_empty()));
        }
    }
    assert_eq!(request_lines, 1, "{output}");
    for secret in [
        API_KEY,
        bearer.as_str(),
        wrong_key,
        WEBHOOK_SECRET,
        "V0VCSE9PS1NFQ1JFVE1BUktFUjEyMzQ1Ng", // the secret's key part
        signature,
        "U0lHTkFUVVJFTUFSS0VSMTIzNDU2Nzg5MGFiY2RlZg", // the signature's MAC part
        body_marker,
    ] {
        assert!(
            !output.contains(secret),
            "{secret:?} appears in the logs:\n{output}"
        );
    }
}

#[actix_web::test]
async fn sigterm_lets_the_in_flight_payment_finish_then_exits_0() {
    let mut service = Service::start(&[
        ("BOOTSTRAP_API_KEY", API_KEY),
        ("PROVIDER_LATENCY_MS", "1500"),
    ])
    .await;
    let bearer = format!("Bearer {API_KEY}");
    let answered = Arc::new(AtomicBool::new(false));
    let in_flight = async {
        let answer = service
            .send(
                "POST",
                "/v1/payments",
                &[
                    ("Authorization", &bearer),
                    ("Content-Type", "application/json"),
                    ("Idempotency-Key", "sigterm-1"),
                ],
                &visa(990).to_string(),
            )
            .await;
        answered.store(true, Ordering::SeqCst);
        answer
    };
    let lines = service.lines.clone();
    let pid = service.child.id().to_string();
    let port = service.port;
    let answered_flag = answered.clone();
    let terminate = async move {
        let answered = answered_flag;
        // The provider call is under way once the payment is claimed.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("payment claimed"))
        {
            assert!(Instant::now() < deadline, "the payment was never claimed");
            actix_web::rt::time::sleep(Duration::from_millis(10)).await;
        }
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        // The server stops accepting at once: new connections are refused while the
        // payment is still in flight.
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_ok() {
            assert!(Instant::now() < deadline, "still accepting after SIGTERM");
            actix_web::rt::time::sleep(Duration::from_millis(10)).await;
        }
        let refused = !answered.load(Ordering::SeqCst);
        (port, refused)
    };
    let ((status, body), (port, refused)) = tokio::join!(in_flight, terminate);
    assert!(
        refused,
        "the listener closed only after the in-flight request was answered"
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["status"],
        "succeeded"
    );
    let exit = service.wait_for_exit().await;
    assert_eq!(exit.code(), Some(0), "{}", service.output());
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the port is still open"
    );
}

#[actix_web::test]
async fn a_bad_setting_stops_the_start_and_names_the_variable() {
    let output = Command::new(env!("CARGO_BIN_EXE_payments-api"))
        .current_dir(std::env::temp_dir())
        .env_clear()
        .env("PROVIDER_TIMEOUT_MS", "soon")
        .env("DATABASE_URL", "sqlite://never-created.db")
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PROVIDER_TIMEOUT_MS"), "{stderr}");
    assert!(stderr.contains("soon"), "{stderr}");
}

/// `provider-sim` too: `--help` describes it and exits 0 (it does not start serving); a
/// bad argument or setting stops it with exit 2 and a message naming the setting.
#[actix_web::test]
async fn provider_sim_has_help_and_a_bad_setting_stops_it() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_provider-sim"))
            .current_dir(std::env::temp_dir())
            .env_clear()
            // Never serves: were a setting let through, it would stop at the address.
            .env("PROVIDER_SIM_BIND", "nowhere")
            .envs(env.iter().copied())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("the binary runs")
    };
    let help = run(&["--help"], &[]);
    assert_eq!(help.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&help.stdout);
    assert!(stdout.contains("Usage: provider-sim"), "{stdout}");
    assert!(stdout.contains("PROVIDER_FAIL_RATE"), "{stdout}");
    assert_eq!(run(&["--bogus"], &[]).status.code(), Some(2));
    for (name, value) in [
        ("RUST_LOG", "[[["),
        ("LOG_FORMAT", "xml"),
        ("PROVIDER_FAIL_RATE", "2"),
    ] {
        let output = run(&[], &[(name, value)]);
        assert_eq!(output.status.code(), Some(2), "{name}={value}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(name), "{stderr}");
    }
}

// ---------------------------------------------------------------------------------------
// The database goes away and comes back

/// A TCP proxy in front of PostgreSQL that the test can cut (every open connection is
/// closed, new ones are dropped at once) and restore, or set to lose the answer to one
/// statement (see [`Proxy::lose_answer_after`]).
pub(crate) struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    /// Connections stay open and nothing is forwarded (see [`Proxy::freeze`]).
    frozen: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    stopped: Arc<AtomicBool>,
    trap: Arc<Trap>,
}

/// What the client must send, in order, on one connection before its answer is lost.
#[derive(Default)]
struct Trap {
    needles: Mutex<Vec<Vec<u8>>>,
    sprung: AtomicBool,
}

impl Trap {
    /// Whether `chunk` completes the trap for a connection that has seen `progress` needles
    /// (advanced here). Springs once.
    fn springs(&self, progress: &mut usize, chunk: &[u8]) -> bool {
        let needles = self.needles.lock().unwrap();
        if needles.is_empty() || self.sprung.load(Ordering::SeqCst) {
            return false;
        }
        if let Some(needle) = needles.get(*progress)
            && chunk.windows(needle.len()).any(|w| w == needle.as_slice())
        {
            *progress += 1;
        }
        *progress == needles.len() && !self.sprung.swap(true, Ordering::SeqCst)
    }
}

/// Copies one direction of a connection. Client to server (`trap` given): once the trap
/// springs, the message that sprang it still reaches the server, every answer after it is
/// dropped (`lost`), and 300 ms later both sides are closed.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    trap: Option<Arc<Trap>>,
    lost: Arc<AtomicBool>,
    frozen: Arc<AtomicBool>,
) {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        let mut progress = 0;
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    while frozen.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let springs = trap
                        .as_ref()
                        .is_some_and(|trap| trap.springs(&mut progress, &buffer[..n]));
                    if springs {
                        lost.store(true, Ordering::SeqCst);
                    } else if lost.load(Ordering::SeqCst) {
                        continue;
                    }
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                    if springs {
                        let (from, to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_millis(300));
                            let _ = from.shutdown(SocketShutdown::Both);
                            let _ = to.shutdown(SocketShutdown::Both);
                        });
                    }
                }
            }
        }
        let _ = from.shutdown(SocketShutdown::Both);
        let _ = to.shutdown(SocketShutdown::Both);
    });
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let frozen = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(AtomicBool::new(false));
        let trap = Arc::new(Trap::default());
        let (up2, frozen2, open2, stopped2, trap2) = (
            up.clone(),
            frozen.clone(),
            open.clone(),
            stopped.clone(),
            trap.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                if !up2.load(Ordering::SeqCst) {
                    let _ = client.shutdown(SocketShutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))
                else {
                    continue;
                };
                let mut open = open2.lock().unwrap();
                open.push(client.try_clone().unwrap());
                open.push(server.try_clone().unwrap());
                let lost = Arc::new(AtomicBool::new(false));
                let to_server = (client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(
                    to_server.0,
                    to_server.1,
                    Some(trap2.clone()),
                    lost.clone(),
                    frozen2.clone(),
                );
                pipe(server, client, None, lost, frozen2.clone());
            }
        });
        Self {
            port,
            up,
            frozen,
            open,
            stopped,
            trap,
        }
    }

    /// The database accepts and never answers (a hung server, a pooler whose server is
    /// gone): connections stay open, nothing is forwarded, until [`Proxy::thaw`].
    pub(crate) fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// What was held is delivered, late.
    pub(crate) fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }

    pub(crate) fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(SocketShutdown::Both);
        }
    }

    pub(crate) fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// The next connection that sends each of `needles` in order (e.g. `UPDATE payments`,
    /// then `COMMIT`) has the last of them delivered and every answer after it lost: the
    /// server did the work, the service never hears so. Once.
    pub(crate) fn lose_answer_after(&self, needles: &[&str]) {
        *self.trap.needles.lock().unwrap() =
            needles.iter().map(|n| n.as_bytes().to_vec()).collect();
        self.trap.sprung.store(false, Ordering::SeqCst);
    }

    pub(crate) fn answer_lost(&self) -> bool {
        self.trap.sprung.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.thaw();
        self.cut();
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wake the accept loop
    }
}

/// `postgres://user@host:port/db?…` → (host:port, the URL with `authority` in its place).
fn split_authority(url: &str, authority: &str) -> (String, String) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (userinfo_host, tail) = rest.split_at(end);
    let (userinfo, host) = match userinfo_host.rsplit_once('@') {
        Some((user, host)) => (format!("{user}@"), host),
        None => (String::new(), userinfo_host),
    };
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    };
    (host, format!("{scheme}://{userinfo}{authority}{tail}"))
}

/// A PostgreSQL schema of this test's own, dropped at the end.
pub(crate) struct PgSchema {
    base_url: String,
    schema: String,
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        if let Ok(mut conn) = PgConnection::establish(&self.base_url) {
            let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

/// An app whose PostgreSQL (a schema of its own) sits behind a [`Proxy`] the test controls,
/// whichever backend the rest of the suite runs on. `None` (and a note) without PostgreSQL.
pub(crate) async fn app_behind_proxy(
    configure: impl FnOnce(&mut payments_api::config::Settings),
) -> Option<(crate::support::TestApp, Proxy, PgSchema)> {
    let (proxy, pg_schema, proxied) = postgres_behind_proxy()?;
    let app = spawn_app_with(move |s| {
        s.database_url = proxied;
        configure(s);
    })
    .await;
    Some((app, proxy, pg_schema))
}

/// A schema of the test's own in the tests' PostgreSQL, reached through a [`Proxy`]: the
/// proxy, the schema (dropped with it) and the URL through the proxy. `None` (skipped) when
/// there is no PostgreSQL and none was asked for.
pub(crate) fn postgres_behind_proxy() -> Option<(Proxy, PgSchema, String)> {
    let base_url = std::env::var("TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let mut admin = match PgConnection::establish(&base_url) {
        Ok(conn) => conn,
        // Under CI, or when PostgreSQL was asked for, a missing server is a failure.
        Err(e)
            if std::env::var_os("CI").is_some()
                || std::env::var_os("TEST_DATABASE_URL").is_some() =>
        {
            panic!("no PostgreSQL at {base_url} for the database-down test: {e}")
        }
        Err(e) => {
            crate::support::skip(&format!(
                "the database-down tests need a PostgreSQL: none at {base_url} ({e})"
            ));
            return None;
        }
    };
    let schema = format!("test_dbdown_{}", uuid::Uuid::new_v4().simple());
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let pg_schema = PgSchema {
        base_url: base_url.clone(),
        schema: schema.clone(),
    };
    let (upstream, _) = split_authority(&base_url, "");
    let upstream = upstream.to_socket_addrs().unwrap().next().unwrap();
    let proxy = Proxy::start(upstream);
    let (_, proxied) = split_authority(&base_url, &format!("127.0.0.1:{}", proxy.port));
    let separator = if proxied.contains('?') { '&' } else { '?' };
    let proxied = format!("{proxied}{separator}options=-csearch_path%3D{schema}");
    Some((proxy, pg_schema, proxied))
}

/// Cuts the database once the provider has been called: the claim is committed, the
/// provider's answer not yet stored.
async fn cut_once_called(proxy: &Proxy, called: impl Fn() -> bool) {
    let called = &called;
    wait_until(
        Duration::from_secs(60),
        "the provider is called",
        || async move { called() },
    )
    .await;
    proxy.cut();
}

async fn wait_until_ready(app: &crate::support::TestApp) {
    wait_until(
        Duration::from_secs(30),
        "the service recovers: /health/ready answers 200",
        || async {
            app.request("GET", "/health/ready", &[], Vec::new())
                .await
                .status
                == 200
        },
    )
    .await;
}

#[actix_web::test]
async fn with_the_database_down_requests_answer_503_and_service_recovers_without_restart() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|_| {}).await else {
        return;
    };
    let first = app.post_payment("db-down-1", &visa(300)).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        app.request("GET", "/health/ready", &[], Vec::new())
            .await
            .status,
        200
    );

    // What bounds the wait: a short checkout timeout. (Recovery comes from dropping the
    // connections that lost their server; the second half of this test proves it.)
    let pool = app.state.db.pool();
    assert!(pool.connection_timeout() <= Duration::from_secs(5));

    proxy.cut();
    let checks = [
        ("GET", "/health/ready".to_owned()),
        ("GET", format!("/v1/payments/{id}")),
        ("GET", "/v1/payments".to_owned()),
        ("POST", "/v1/payments".to_owned()),
    ];
    for (method, path) in &checks {
        let started = Instant::now();
        let response = if *method == "POST" {
            app.post_payment("db-down-2", &visa(301)).await
        } else if path.starts_with("/health") {
            app.request(method, path, &[], Vec::new()).await
        } else {
            app.get(path).await
        };
        // Answered (the client's own timeout would fail the test on a hang), never a 500.
        response.assert_problem(503, "service_unavailable");
        assert!(
            response.header("retry-after").is_some(),
            "{method} {path} has no Retry-After"
        );
        eprintln!(
            "{method} {path} with the database down: 503 after {:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        app.charges(),
        1,
        "nothing was charged while the database was down"
    );

    proxy.restore();
    wait_until_ready(&app).await;
    let fetched = app.get(&format!("/v1/payments/{id}")).await;
    assert_eq!(fetched.status, 200, "{}", fetched.text());
    let again = app.post_payment("db-down-3", &visa(302)).await;
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(app.charges(), 2);
}

/// A database that accepts and never answers is no hang either (CONTRACT §2: 503 within
/// 5 s): the network timeouts end only connections whose packets go unanswered, so each
/// request gives up on the server by itself. What it sent may apply once the server answers
/// again, as after a connection lost after COMMIT: the retry finds it, nothing is charged
/// twice.
#[actix_web::test]
async fn a_database_that_never_answers_gets_503_not_a_hang() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.processing_lease = Duration::from_millis(500);
    })
    .await
    else {
        return;
    };
    let first = app.post_payment("frozen-1", &visa(300)).await;
    assert_eq!(first.status, 201, "{}", first.text());
    let id = first.json()["id"].as_str().unwrap().to_owned();

    proxy.freeze();
    let started = Instant::now();
    let path = format!("/v1/payments/{id}");
    let body = visa(301);
    let (fetched, listed, created) = tokio::join!(
        app.get(&path),
        app.get("/v1/payments"),
        app.post_payment("frozen-2", &body),
    );
    for response in [&fetched, &listed, &created] {
        // Answered (the client's own timeout would fail the test on a hang), never a 500.
        response.assert_problem(503, "service_unavailable");
        assert!(response.header("retry-after").is_some());
    }
    eprintln!(
        "with the database silent: three 503s after {:?}",
        started.elapsed()
    );

    proxy.thaw();
    wait_until_ready(&app).await;
    let mut again = app.post_payment("frozen-2", &visa(301)).await;
    for _ in 0..20 {
        if again.status != 409 {
            break;
        }
        // The claim sent into the silence committed late, under a lease nobody holds.
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
        again = app.post_payment("frozen-2", &visa(301)).await;
    }
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(app.charges(), 2);
}

/// Every request that meets a silent database answers 503 within 5 s of asking (CONTRACT
/// §2), also one whose write queued behind a batch already stuck on it: the wait is
/// counted from the request, not from when its own batch started.
#[actix_web::test]
async fn writes_queued_behind_a_stuck_batch_answer_503_within_5_s() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|_| {}).await else {
        return;
    };
    // Warm the API key cache, so only the payments' own writes meet the silence.
    assert_eq!(app.get("/v1/payments").await.status, 200);
    proxy.freeze();
    let app = &app;
    let answers = futures_util::future::join_all((0..12u64).map(|i| async move {
        actix_web::rt::time::sleep(Duration::from_millis(30 * i)).await;
        let asked = Instant::now();
        let response = app.post_payment(&format!("queued-{i}"), &visa(100)).await;
        (response, asked.elapsed())
    }))
    .await;
    for (response, took) in &answers {
        response.assert_problem(503, "service_unavailable");
        assert!(*took <= Duration::from_secs(5), "answered after {took:?}");
    }
    proxy.thaw();
}

/// SQLite's "cannot be reached": another process holds the file's write lock past the busy
/// timeout. A write then answers 503 with `Retry-After` within 5 s, not a 500, and goes
/// through once the lock is let go.
#[actix_web::test]
async fn a_sqlite_file_locked_by_another_process_answers_503_then_recovers() {
    use diesel::{Connection, SqliteConnection};
    let app = spawn_app().await;
    let Some(path) = app.state.settings.database_url.strip_prefix("sqlite://") else {
        return; // PostgreSQL: see the proxy tests
    };
    assert_eq!(app.get("/v1/payments").await.status, 200);
    let mut other = SqliteConnection::establish(path).unwrap();
    other.batch_execute("BEGIN EXCLUSIVE").unwrap();
    let asked = Instant::now();
    let locked = app.post_payment("locked-1", &visa(700)).await;
    let took = asked.elapsed();
    locked.assert_problem(503, "service_unavailable");
    assert!(locked.header("retry-after").is_some());
    assert!(took <= Duration::from_secs(5), "answered after {took:?}");
    other.batch_execute("ROLLBACK").unwrap();

    let after = app.post_payment("locked-1", &visa(700)).await;
    assert_eq!(after.status, 201, "{}", after.text());
    assert_eq!(app.charges(), 1);
}

/// SIGTERM ends the process even while the database is silent: a request whose call to
/// it was given up (503) leaves a thread waiting on the server, and the process does not
/// wait for that thread to exit.
#[actix_web::test]
async fn sigterm_exits_while_the_database_never_answers() {
    let Some((proxy, _schema, url)) = postgres_behind_proxy() else {
        return;
    };
    let mut service = Service::start(&[
        ("DATABASE_URL", &url),
        ("BOOTSTRAP_API_KEY", API_KEY),
        ("PROVIDER_LATENCY_MS", "0"),
    ])
    .await;
    let auth = format!("Bearer {API_KEY}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Idempotency-Key", "before"),
    ];
    let body = visa(500).to_string();
    assert_eq!(
        service
            .send("POST", "/v1/payments", &headers, &body)
            .await
            .0,
        201
    );

    proxy.freeze();
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Idempotency-Key", "into-the-silence"),
    ];
    let (status, _) = service.send("POST", "/v1/payments", &headers, &body).await;
    assert_eq!(status, 503);
    service.sigterm();
    let exited = service.wait_for_exit().await;
    assert!(exited.success(), "{exited}");
    proxy.thaw();
}

#[actix_web::test]
async fn a_database_outage_during_a_payment_answers_503_and_a_retry_charges_once() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.provider_latency = Duration::from_millis(1000);
        s.processing_lease = Duration::from_millis(500);
    })
    .await
    else {
        return;
    };
    // Warm the API key cache, so only the payment's own writes meet the outage.
    assert_eq!(app.get("/v1/payments").await.status, 200);
    let body = visa(450);
    let (during, ()) = tokio::join!(
        app.post_payment("outage-1", &body),
        cut_once_called(&proxy, || app.simulator.charge_calls() > 0)
    );
    // The provider charged, but the outcome could not be stored: not a 500, not a hang.
    during.assert_problem(503, "service_unavailable");
    assert!(during.header("retry-after").is_some());

    proxy.restore();
    wait_until_ready(&app).await;
    // The retry takes the abandoned payment over (its lease has run out) and asks the
    // provider again with the same idempotency key: the customer is charged once.
    let mut retry = app.post_payment("outage-1", &body).await;
    for _ in 0..40 {
        if retry.status != 409 {
            break;
        }
        actix_web::rt::time::sleep(Duration::from_millis(250)).await;
        retry = app.post_payment("outage-1", &body).await;
    }
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.json()["status"], "succeeded");
    assert_eq!(app.charges(), 1, "the outage made the customer pay twice");
    assert_eq!(app.payment_rows().await, 1);
}

#[test]
fn split_authority_replaces_host_and_port() {
    let (host, url) = split_authority(
        "postgres://postgres@127.0.0.1:5432/postgres?x=1",
        "127.0.0.1:6000",
    );
    assert_eq!(host, "127.0.0.1:5432");
    assert_eq!(url, "postgres://postgres@127.0.0.1:6000/postgres?x=1");
    let (host, _) = split_authority("postgresql://db/app", "h:1");
    assert_eq!(host, "db:5432");
}

#[actix_web::test]
async fn an_answer_the_database_missed_is_stored_once_it_is_back() {
    // A lease far longer than the test: only the background store can finish the payment.
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.provider_latency = Duration::from_millis(1000);
        s.processing_lease = Duration::from_secs(120);
        s.recovery_interval = Duration::from_secs(120);
    })
    .await
    else {
        return;
    };
    assert_eq!(app.get("/v1/payments").await.status, 200);
    let body = visa(460);
    let (during, ()) = tokio::join!(
        app.post_payment("outage-2", &body),
        cut_once_called(&proxy, || app.simulator.charge_calls() > 0)
    );
    during.assert_problem(503, "service_unavailable");

    proxy.restore();
    wait_until_ready(&app).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        let list = app.get("/v1/payments?status=succeeded").await.json();
        if let Some(id) = list["data"][0]["id"].as_str() {
            break id.to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "the provider's answer was never stored"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    };
    let retry = app.post_payment("outage-2", &body).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.json()["id"], id.as_str());
    assert_eq!(
        app.simulator.charge_calls(),
        1,
        "stored without asking the provider again"
    );
}

#[actix_web::test]
async fn a_refund_answer_the_database_missed_is_stored_once_it_is_back() {
    let Some((app, proxy, _schema)) = app_behind_proxy(|s| {
        s.provider_latency = Duration::from_millis(1000);
        s.processing_lease = Duration::from_secs(120);
        s.recovery_interval = Duration::from_secs(120);
    })
    .await
    else {
        return;
    };
    let payment_id = app.paid_payment(800).await;
    let body = json!({"amount": 300});
    let (during, ()) = tokio::join!(
        app.post_refund(&payment_id, "outage-r", &body),
        cut_once_called(&proxy, || app.simulator.refund_calls() > 0)
    );
    during.assert_problem(503, "service_unavailable");

    proxy.restore();
    wait_until_ready(&app).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.refund_totals(&payment_id).await != (300, 300) {
        assert!(
            Instant::now() < deadline,
            "the provider's refund answer was never stored"
        );
        actix_web::rt::time::sleep(Duration::from_millis(100)).await;
    }
    let retry = app.post_refund(&payment_id, "outage-r", &body).await;
    assert_eq!(retry.status, 201, "{}", retry.text());
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        app.simulator.refund_calls(),
        1,
        "stored without asking the provider again"
    );
}
