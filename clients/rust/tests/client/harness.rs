//! The real service, in-process, on a database of its own (a fresh SQLite file, or with
//! `TEST_DATABASE_URL` a fresh PostgreSQL schema), optionally with the provider simulator
//! over HTTP so its ledger counts the charges. It can be restarted on the same database and
//! port, as a deploy or a crash would.

use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use payments_api::config::Settings;
use payments_api::domain::new_api_key;
use payments_api::provider::sim::Simulator;
use payments_api::provider::sim::server::{self as sim_server, Faults};
use payments_api::startup::Application;
use payments_api::state::AppState;
use payments_client::{Client, RetryPolicy};

/// The secret the service accepts on inbound webhooks (and its in-process simulator signs
/// with).
pub const WEBHOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A database of a test's own, dropped with it.
pub enum TestDatabase {
    Sqlite(std::path::PathBuf),
    Postgres { base_url: String, schema: String },
}

impl TestDatabase {
    pub fn create() -> (Self, String) {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        match std::env::var("TEST_DATABASE_URL")
            .ok()
            .filter(|v| !v.is_empty())
        {
            Some(base_url) => {
                let schema = format!("client_test_{unique}");
                let mut conn = PgConnection::establish(&base_url)
                    .unwrap_or_else(|e| panic!("cannot reach TEST_DATABASE_URL: {e}"));
                conn.batch_execute(&format!("CREATE SCHEMA {schema}"))
                    .expect("create schema");
                let separator = if base_url.contains('?') { '&' } else { '?' };
                let url = format!("{base_url}{separator}options=-csearch_path%3D{schema}");
                (Self::Postgres { base_url, schema }, url)
            }
            None => {
                let dir = std::env::temp_dir().join("payments-client-tests");
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
                }
            }
        }
    }
}

/// `provider-sim` on port 0: the provider protocol over HTTP, with a ledger.
pub struct Provider {
    pub url: String,
    pub simulator: Arc<Simulator>,
    handle: ServerHandle,
}

impl Provider {
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind provider");
        let url = format!(
            "http://{}",
            listener.local_addr().expect("provider address")
        );
        let simulator = Arc::new(Simulator::new());
        let server = sim_server::serve(
            listener,
            simulator.clone(),
            Arc::new(Faults::default()),
            None,
        )
        .expect("provider starts");
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Self {
            url,
            simulator,
            handle,
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

struct Running {
    handle: ServerHandle,
    state: AppState,
    served: actix_web::rt::task::JoinHandle<std::io::Result<()>>,
}

/// The service. Fields drop in order: the server stops before its database goes away.
pub struct Service {
    running: Option<Running>,
    settings: Settings,
    pub api_key: String,
    pub port: u16,
    /// The in-process simulator, when no provider URL was given.
    pub in_process: Option<Arc<Simulator>>,
    _database: TestDatabase,
}

impl Service {
    /// The service on a fresh database; `provider` = `PROVIDER_URL`, else the in-process
    /// simulator.
    pub async fn start(provider: Option<&Provider>, configure: impl FnOnce(&mut Settings)) -> Self {
        let (database, url) = TestDatabase::create();
        let mut settings = Settings::from_lookup(|_| None).expect("default settings");
        settings.database_url = url;
        settings.bind_addr = "127.0.0.1:0".to_owned();
        settings.bootstrap_api_key = Some(new_api_key());
        settings.workers = Some(2);
        settings.database_pool_size = 8;
        settings.webhook_secrets = vec![WEBHOOK_SECRET.to_owned()];
        settings.provider_url = provider.map(|p| p.url.clone());
        configure(&mut settings);
        let api_key = settings.bootstrap_api_key.clone().expect("bootstrap key");
        let mut service = Self {
            running: None,
            settings,
            api_key,
            port: 0,
            in_process: None,
            _database: database,
        };
        service.launch().await;
        // Restarts come back on the same port.
        service.settings.bind_addr = format!("127.0.0.1:{}", service.port);
        service
    }

    async fn launch(&mut self) {
        let app = Application::build(self.settings.clone())
            .await
            .expect("the service starts");
        self.port = app.port();
        self.in_process = app.simulator();
        let handle = app.handle();
        let state = app.state().clone();
        let served = actix_web::rt::spawn(app.run_until_stopped());
        self.running = Some(Running {
            handle,
            state,
            served,
        });
    }

    /// Stops the service at once (requests in flight are cut off, as in a crash or a
    /// hurried deploy), leaves it down for `down`, then starts a new one on the same
    /// database and port.
    pub async fn restart(&mut self, down: Duration) {
        if let Some(running) = self.running.take() {
            running.handle.stop(false).await;
            running.state.shutdown.trigger();
            let _ = running.served.await;
        }
        tokio::time::sleep(down).await;
        self.launch().await;
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A client of this service (directly, no proxy) with a quick retry policy.
    pub fn client(&self) -> Client {
        client_for(&self.url(), &self.api_key)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            drop(running.handle.stop(false));
            running.state.shutdown.trigger();
        }
    }
}

pub fn client_for(url: &str, api_key: &str) -> Client {
    Client::builder(url, api_key)
        .retry_policy(
            RetryPolicy::default()
                .initial_delay(Duration::from_millis(20))
                .max_delay(Duration::from_millis(500)),
        )
        .build()
        .expect("client")
}
