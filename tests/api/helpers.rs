//! Starts the real service (the same `Application::build` as `main`) on port 0, against a
//! database of its own: a fresh SQLite file, or with `TEST_DATABASE_URL` a fresh schema in
//! that PostgreSQL database.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::ServerHandle;
use awc::http::StatusCode;
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use payments_api::config::Settings;
use payments_api::db::{
    DatabaseTarget, merchants, payments as payment_rows, refunds as refund_rows,
};
use payments_api::domain::new_api_key;
use payments_api::provider::sim_server::{self, Faults};
use payments_api::provider::{ProviderRefund, Simulator};
use payments_api::startup::{Application, connect_and_migrate};
use payments_api::state::AppState;
use serde_json::Value;

pub struct TestApp {
    pub address: String,
    pub api_key: String,
    pub merchant_id: String,
    pub client: awc::Client,
    pub simulator: Arc<Simulator>,
    pub state: AppState,
    handle: ServerHandle,
    /// Shared by the instances of a cluster: the database goes when the last one stops.
    _database: Option<Arc<TestDatabase>>,
    /// The database as the test made it (not through a proxy the test may have put in
    /// between): what the ledger is verified on when the instance stops.
    ledger_url: String,
}

pub struct TestResponse {
    pub status: StatusCode,
    pub headers: awc::http::header::HeaderMap,
    pub body: Vec<u8>,
}

impl TestResponse {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Asserts a problem+json answer with this status and code.
    pub fn assert_problem(&self, status: u16, code: &str) -> Value {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.text());
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let problem = self.json();
        assert_eq!(problem["code"], code, "{problem}");
        assert_eq!(problem["status"], status);
        assert!(problem["title"].is_string() && problem["type"].is_string());
        problem
    }
}

/// A database of a test's own: a fresh SQLite file, or a fresh PostgreSQL schema.
pub enum TestDatabase {
    Sqlite(std::path::PathBuf),
    Postgres { base_url: String, schema: String },
}

impl TestDatabase {
    /// The database and its URL.
    pub fn create() -> (Self, String) {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        match std::env::var("TEST_DATABASE_URL")
            .ok()
            .filter(|v| !v.is_empty())
        {
            Some(base_url) => {
                assert!(
                    matches!(
                        DatabaseTarget::parse(&base_url),
                        Ok(DatabaseTarget::Postgres(_))
                    ),
                    "TEST_DATABASE_URL must be a postgres:// URL"
                );
                let schema = format!("test_{unique}");
                let mut conn = PgConnection::establish(&base_url)
                    .unwrap_or_else(|e| panic!("cannot reach TEST_DATABASE_URL: {e}"));
                if behind_pooler() {
                    // A pooler forwards no `options`: the schema is instead the search_path
                    // of a role of the test's own, which every server session of it gets.
                    conn.batch_execute(&format!(
                        "CREATE ROLE {schema} LOGIN; \
                         CREATE SCHEMA {schema} AUTHORIZATION {schema}; \
                         ALTER ROLE {schema} SET search_path = {schema}"
                    ))
                    .expect("create role and schema");
                    let url = with_user(&base_url, &schema);
                    return (Self::Postgres { base_url, schema }, url);
                }
                conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
                    .expect("create schema");
                let separator = if base_url.contains('?') { '&' } else { '?' };
                let url = format!("{base_url}{separator}options=-csearch_path%3D{schema}");
                (Self::Postgres { base_url, schema }, url)
            }
            None => {
                let dir = std::env::temp_dir().join("payments-api-tests");
                std::fs::create_dir_all(&dir).expect("temp dir");
                let path = dir.join(format!("{unique}.db"));
                let url = format!("sqlite://{}", path.display());
                (Self::Sqlite(path), url)
            }
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match self {
            Self::Sqlite(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Self::Postgres { base_url, schema } => {
                if let Ok(mut conn) = PgConnection::establish(base_url) {
                    let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
                    if behind_pooler() {
                        // The pooler keeps idle server sessions a while: end them now, so
                        // the shared server's connection slots are not used up.
                        let _ = conn.batch_execute(&format!(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                             WHERE usename = '{schema}'; DROP ROLE IF EXISTS {schema}"
                        ));
                    }
                }
            }
        }
    }
}

/// `TEST_DATABASE_POOLER=1`: `TEST_DATABASE_URL` is a pooler in transaction mode
/// (`scripts/test-pgbouncer.sh`), which cannot pass `options=-csearch_path…` on.
fn behind_pooler() -> bool {
    std::env::var("TEST_DATABASE_POOLER").is_ok_and(|v| v == "1")
}

/// `url` with `user` as its user and no password (the test pooler trusts loopback).
fn with_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let host = rest[..authority_end].rfind('@').map_or(0, |at| at + 1);
    format!("{scheme}://{user}@{}", &rest[host..])
}

/// The secret the test server accepts (and its simulator signs with): tests sign with it.
pub const TEST_WEBHOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

pub fn test_settings(database_url: String) -> Settings {
    // DATABASE_PREPARED_STATEMENTS=off (behind a pooler) is the one setting taken from the
    // environment.
    let mut settings = Settings::from_lookup(|name| {
        (name == "DATABASE_PREPARED_STATEMENTS")
            .then(|| std::env::var(name).ok())
            .flatten()
    })
    .expect("default settings");
    settings.database_url = database_url;
    settings.bind_addr = "127.0.0.1:0".to_owned();
    settings.bootstrap_api_key = Some(new_api_key());
    settings.workers = Some(2);
    settings.database_pool_size = 8;
    settings.idempotency_wait = Duration::from_secs(10);
    settings.webhook_secrets = vec![TEST_WEBHOOK_SECRET.to_owned()];
    settings
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    let (database, url) = TestDatabase::create();
    let mut app = start_instance(test_settings(url.clone()), configure, None).await;
    app._database = Some(Arc::new(database));
    app.ledger_url = url;
    app
}

/// The service with `PROVIDER_URL` pointing at `provider`; `app.simulator` is its ledger.
pub async fn spawn_app_with_provider(
    provider: &TestProvider,
    configure: impl FnOnce(&mut Settings),
) -> TestApp {
    spawn_app_against(&provider.url, provider.simulator.clone(), configure).await
}

/// The service with `PROVIDER_URL` set to `url`, `ledger` as `app.simulator`.
async fn spawn_app_against(
    url: &str,
    ledger: Arc<Simulator>,
    configure: impl FnOnce(&mut Settings),
) -> TestApp {
    let (database, db_url) = TestDatabase::create();
    let mut settings = test_settings(db_url.clone());
    settings.provider_url = Some(url.to_owned());
    let mut app = start_instance(settings, configure, Some(ledger)).await;
    app._database = Some(Arc::new(database));
    app.ledger_url = db_url;
    app
}

/// `n` instances of the service on one database and one provider, as in production.
pub async fn spawn_cluster(
    n: usize,
    provider: &TestProvider,
    configure: impl Fn(&mut Settings),
) -> (Vec<TestApp>, Arc<TestDatabase>) {
    let (database, url) = TestDatabase::create();
    let database = Arc::new(database);
    let mut settings = test_settings(url);
    settings.provider_url = Some(provider.url.clone());
    let mut apps = Vec::new();
    for _ in 0..n {
        let mut app = start_instance(
            settings.clone(),
            &configure,
            Some(provider.simulator.clone()),
        )
        .await;
        app._database = Some(database.clone());
        apps.push(app);
    }
    (apps, database)
}

/// An instance on a database the test made itself (no database is dropped with it).
pub async fn start_on(settings: Settings) -> TestApp {
    start_instance(settings, |_| {}, None).await
}

async fn start_instance(
    mut settings: Settings,
    configure: impl FnOnce(&mut Settings),
    provider_ledger: Option<Arc<Simulator>>,
) -> TestApp {
    configure(&mut settings);
    let database_url = settings.database_url.clone();
    let api_key = settings.bootstrap_api_key.clone().expect("bootstrap key");
    let app = Application::build(settings)
        .await
        .expect("the application starts");
    let address = format!("http://127.0.0.1:{}", app.port());
    let simulator = provider_ledger
        .or_else(|| app.simulator())
        .expect("a provider ledger");
    let state = app.state().clone();
    let handle = app.handle();
    actix_web::rt::spawn(app.run_until_stopped());
    let merchant_id = state
        .db
        .run(|conn| {
            merchants::find_by_name(conn, "default").map(|m| m.map(|m| m.id).unwrap_or_default())
        })
        .await
        .expect("default merchant");
    TestApp {
        address,
        api_key,
        merchant_id,
        client: test_client(),
        simulator,
        state,
        handle,
        _database: None,
        ledger_url: database_url,
    }
}

pub fn test_client() -> awc::Client {
    awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .connector(awc::Connector::new().limit(1000))
        .finish()
}

/// The provider simulator over HTTP on port 0, with its faults under the test's control.
pub struct TestProvider {
    pub url: String,
    pub simulator: Arc<Simulator>,
    pub faults: Arc<Faults>,
    handle: ServerHandle,
}

pub async fn spawn_provider() -> TestProvider {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind provider");
    let url = format!(
        "http://{}",
        listener.local_addr().expect("provider address")
    );
    let simulator = Arc::new(Simulator::new());
    let faults = Arc::new(Faults::default());
    let server = sim_server::serve(listener, simulator.clone(), faults.clone(), None)
        .expect("provider starts");
    let handle = server.handle();
    actix_web::rt::spawn(server);
    TestProvider {
        url,
        simulator,
        faults,
        handle,
    }
}

/// The service with `PROVIDER_URL` pointing at a provider that is not the simulator
/// (`app.simulator` is then an empty ledger).
pub async fn spawn_app_with_provider_url(
    url: &str,
    configure: impl FnOnce(&mut Settings),
) -> TestApp {
    spawn_app_against(url, Arc::new(Simulator::new()), configure).await
}

/// One call a [`ScriptedProvider`] received.
#[derive(Debug, Clone)]
pub struct ProviderCall {
    pub path: String,
    pub idempotency_key: String,
    pub body: String,
}

/// A provider that answers each call with the next of the raw HTTP responses it was given
/// (the last one again once they run out) and records every call: for answers the simulator
/// never gives, such as a body cut short or text that no database column can hold.
pub struct ScriptedProvider {
    pub url: String,
    calls: Arc<std::sync::Mutex<Vec<ProviderCall>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl ScriptedProvider {
    pub fn start(answers: Vec<Vec<u8>>) -> Self {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind provider");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let calls: Arc<std::sync::Mutex<Vec<ProviderCall>>> = Arc::default();
        let stop: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (log, stopped) = (calls.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut answers = answers.into_iter().peekable();
            let mut last = Vec::new();
            for stream in listener.incoming() {
                if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    let Ok(n) = stream.read(&mut buf) else {
                        break (String::new(), String::new());
                    };
                    if n == 0 {
                        break (String::new(), String::new());
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let Some((head, body)) = text.split_once("\r\n\r\n") else {
                        continue;
                    };
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if body.len() >= length {
                        break (head.to_owned(), body.to_owned());
                    }
                };
                let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
                let idempotency_key = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("idempotency-key")
                            .then(|| value.trim().to_owned())
                    })
                    .unwrap_or_default();
                log.lock().unwrap().push(ProviderCall {
                    path,
                    idempotency_key,
                    body,
                });
                if let Some(next) = answers.next() {
                    last = next;
                }
                let _ = stream.write_all(&last);
                let _ = stream.flush();
            }
        });
        Self { url, calls, stop }
    }

    pub fn calls(&self) -> Vec<ProviderCall> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for ScriptedProvider {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = std::net::TcpStream::connect(self.url.trim_start_matches("http://"));
    }
}

/// A whole 200 answer with this JSON body, on a connection that closes after it.
pub fn provider_answer(json: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{json}",
        json.len()
    )
    .into_bytes()
}

impl Drop for TestProvider {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

impl TestApp {
    /// A second merchant with its own API key.
    pub async fn create_merchant(&self, name: &str) -> String {
        let name = name.to_owned();
        let key = new_api_key();
        let k = key.clone();
        self.state
            .db
            .run(move |conn| {
                let merchant = merchants::ensure_merchant(conn, &name)
                    .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))?;
                merchants::ensure_api_key(conn, &merchant, &k)
                    .map_err(|e| diesel::result::Error::QueryBuilderError(e.to_string().into()))
            })
            .await
            .expect("merchant created");
        key
    }

    /// POST with the default key, JSON content type and the given idempotency key.
    pub async fn post_payment(&self, idempotency_key: &str, body: &Value) -> TestResponse {
        self.post_json("/v1/payments", &self.api_key, Some(idempotency_key), body)
            .await
    }

    pub async fn post_json(
        &self,
        path: &str,
        api_key: &str,
        idempotency_key: Option<&str>,
        body: &Value,
    ) -> TestResponse {
        let mut headers = vec![
            ("Authorization", format!("Bearer {api_key}")),
            ("Content-Type", "application/json".to_owned()),
        ];
        if let Some(key) = idempotency_key {
            headers.push(("Idempotency-Key", key.to_owned()));
        }
        self.request("POST", path, &headers, body.to_string().into_bytes())
            .await
    }

    pub async fn get(&self, path: &str) -> TestResponse {
        self.get_as(path, &self.api_key).await
    }

    pub async fn get_as(&self, path: &str, api_key: &str) -> TestResponse {
        let auth = format!("Bearer {api_key}");
        self.request("GET", path, &[("Authorization", auth)], Vec::new())
            .await
    }

    /// Any request, headers as given (a name may repeat).
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> TestResponse {
        let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.address));
        for (name, value) in headers {
            request = request.append_header((*name, value.as_str()));
        }
        let mut response = request
            .send_body(body)
            .await
            .expect("the request completes");
        let body = response
            .body()
            .limit(10 * 1024 * 1024)
            .await
            .expect("the body arrives")
            .to_vec();
        TestResponse {
            status: response.status(),
            headers: response.headers().clone(),
            body,
        }
    }

    /// Charges the provider made (one per idempotency key).
    pub fn charges(&self) -> usize {
        self.simulator.charges().len()
    }

    /// POST a refund of `payment_id` with the default key and this idempotency key.
    pub async fn post_refund(
        &self,
        payment_id: &str,
        idempotency_key: &str,
        body: &Value,
    ) -> TestResponse {
        let path = format!("/v1/payments/{payment_id}/refunds");
        self.post_json(&path, &self.api_key, Some(idempotency_key), body)
            .await
    }

    /// A succeeded payment of `amount` (minor units) of the default merchant: its id.
    pub async fn paid_payment(&self, amount: i64) -> String {
        let key = format!("paid-{}", uuid::Uuid::new_v4().simple());
        let response = self.post_payment(&key, &visa(amount)).await;
        assert_eq!(response.status, 201, "{}", response.text());
        let payment = response.json();
        assert_eq!(payment["status"], "succeeded");
        payment["id"].as_str().unwrap().to_owned()
    }

    /// Refunds the provider made (one per idempotency key).
    pub fn provider_refunds(&self) -> Vec<ProviderRefund> {
        self.simulator.refunds()
    }

    /// `(amount_reserved, amount_refunded)` of a payment, as stored.
    pub async fn refund_totals(&self, payment_id: &str) -> (i64, i64) {
        let (merchant_id, payment_id) = (self.merchant_id.clone(), payment_id.to_owned());
        let payment = self
            .state
            .db
            .run(move |conn| refund_rows::find_payment(conn, &merchant_id, &payment_id))
            .await
            .expect("read payment")
            .expect("payment exists");
        (payment.amount_reserved, payment.amount_refunded)
    }

    /// Refund rows of a payment with this status (`rejected` = stored refusals).
    pub async fn refund_rows(&self, payment_id: &str, status: &'static str) -> i64 {
        let payment_id = payment_id.to_owned();
        self.state
            .db
            .run(move |conn| refund_rows::count_by_status(conn, &payment_id, status))
            .await
            .expect("count refunds")
    }

    /// Payment rows of the default merchant.
    pub async fn payment_rows(&self) -> i64 {
        let merchant_id = self.merchant_id.clone();
        self.state
            .db
            .run(move |conn| payment_rows::count_for_merchant(conn, &merchant_id))
            .await
            .expect("count payments")
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        // Stop accepting before the database goes away with `self.database`.
        drop(self.handle.stop(false));
        self.state.shutdown.trigger();
        // Every test ends by checking the ledger of the database it used, whatever it
        // asserted itself: a test that breaks an invariant fails here.
        if !std::thread::panicking() {
            verify_ledger_at(&self.ledger_url);
        }
    }
}

/// `payments-api ledger verify` on the database at `url`, on a connection of its own:
/// panics with every violation.
pub fn verify_ledger_at(url: &str) {
    let mut settings = test_settings(url.to_owned());
    settings.database_pool_size = 1;
    let db = connect_and_migrate(&settings).expect("the database, to verify its ledger");
    let mut conn = db.pool().get().expect("a connection to verify the ledger");
    let verification = payments_api::ledger::verify(&mut conn).expect("ledger verify");
    assert!(
        verification.holds(),
        "{}: {:#?}",
        verification.summary(),
        verification.violations
    );
}

pub fn visa(amount: i64) -> Value {
    serde_json::json!({"amount": amount, "currency": "usd", "payment_method": "pm_card_visa"})
}

/// For a child process started with `env_clear()`: the database settings of this run, which
/// behind a pooler (`scripts/test-pgbouncer.sh`) it needs as much as the tests do.
pub fn pass_database_settings(command: &mut Command) {
    if let Ok(prepared) = std::env::var("DATABASE_PREPARED_STATEMENTS") {
        command.env("DATABASE_PREPARED_STATEMENTS", prepared);
    }
}

/// The real binary as a child process.
pub struct ServiceProcess {
    child: Child,
    pub address: String,
}

impl ServiceProcess {
    pub async fn start(env: &[(&str, String)]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_payments-api"));
        command
            .env_clear()
            .env("BIND_ADDR", format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        pass_database_settings(&mut command);
        for (name, value) in env {
            command.env(name, value);
        }
        let child = command.spawn().expect("the service starts");
        let address = format!("http://127.0.0.1:{port}");
        let client = test_client();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(format!("{address}/health/live")).send().await
                && r.status() == 200
            {
                break;
            }
            assert!(Instant::now() < deadline, "the service did not come up");
            actix_web::rt::time::sleep(Duration::from_millis(50)).await;
        }
        Self { child, address }
    }

    pub fn kill_9(&mut self) {
        let _ = self.child.kill(); // SIGKILL: no shutdown, no cleanup
        let _ = self.child.wait();
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        self.kill_9();
    }
}
