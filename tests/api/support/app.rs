//! The real service in-process (the same `Application::build` as `main`) on port 0, against
//! a database of its own ([`TestDatabase`]), and the settings every test starts from.

use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use payments_api::config::Settings;
use payments_api::db::merchants;
use payments_api::domain::new_api_key;
use payments_api::provider::sim::Simulator;
use payments_api::startup::{Application, Schema, open_database};
use payments_api::state::AppState;
use serde_json::Value;

use super::database::TestDatabase;
use super::provider::TestProvider;

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

/// The tests' HTTP client.
pub fn test_client() -> awc::Client {
    http_client(Redirects::Follow)
}

pub enum Redirects {
    Follow,
    Show,
}

/// Every HTTP client of the tests is made here. It keeps an idle connection for 2 s at most,
/// under the server's keep-alive (actix-web's default, 5 s), so a connection the server has
/// closed is never taken from the pool for a new request: with awc's default of 15 s, a
/// request sent after a long wait in a browser test failed with `Connect(Disconnected)`.
pub fn http_client(redirects: Redirects) -> awc::Client {
    let builder = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .connector(
            awc::Connector::new()
                .limit(1000)
                .conn_keep_alive(Duration::from_secs(2)),
        );
    match redirects {
        Redirects::Follow => builder.finish(),
        Redirects::Show => builder.disable_redirects().finish(),
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
    let db = open_database(&settings, Schema::Migrate).expect("the database, to verify its ledger");
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
