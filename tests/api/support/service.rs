//! The real service in-process as the client meets it: restartable on the same database
//! and port, as a deploy or a crash would, with the provider simulator in-process or over
//! HTTP ([`TestProvider`]) so its ledger counts the charges; and clients of it.

use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use payments_api::config::Settings;
use payments_api::provider::sim::Simulator;
use payments_api::startup::Application;
use payments_api::state::AppState;
use payments_client::{Client, RetryPolicy};

use super::app::test_settings;
use super::database::TestDatabase;
use super::provider::TestProvider;

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
    pub async fn start(
        provider: Option<&TestProvider>,
        configure: impl FnOnce(&mut Settings),
    ) -> Self {
        let (database, url) = TestDatabase::create();
        let mut settings = test_settings(url);
        // The client waits out an operation in flight as it would in production: with the
        // service's default wait, not the longer one of the service's own tests.
        settings.idempotency_wait = Settings::from_lookup(|_| None)
            .expect("default settings")
            .idempotency_wait;
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
