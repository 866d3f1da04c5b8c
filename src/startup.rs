//! One builder for the whole service, used by `main` and by the tests alike.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::{Server, ServerHandle, Service, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::{App, HttpMessage, HttpServer, web};

use crate::auth::ApiKeyCache;
use crate::config::Settings;
use crate::connections::Connections;
use crate::db::merchants::{self, BootstrapKey};
use crate::db::pool::DatabaseTarget;
use crate::db::{self, Db};
use crate::idempotency::{FinalAnswers, InFlight};
use crate::inbound;
use crate::operations::Recovery;
use crate::payments::CreatePayment;
use crate::payouts::CreatePayout;
use crate::provider::sim::{InProcessProvider, RetryPolicy, Simulator, WebhookDelivery};
use crate::provider::{HttpProvider, PaymentProvider};
use crate::rate_limit::RateLimits;
use crate::refunds::CreateRefund;
use crate::routes;
use crate::shutdown::{Shutdown, Stop, StopSignals, WORKER_GRACE};
use crate::signing::WebhookSecret;
use crate::state::{AppState, RequestId};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Database(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

pub struct Application {
    port: u16,
    /// The bootstrap key (`BOOTSTRAP_API_KEY`, or the demo key) was revoked before.
    bootstrap_revoked: bool,
    server: Server,
    simulator: Option<Arc<Simulator>>,
    state: AppState,
}

/// The docs page's file server answers an unknown file under `/docs/` with a bare 404; it
/// gets the problem body every other error has (docs/api.md).
fn bare_not_found_as_problem(res: ServiceResponse) -> ServiceResponse {
    use actix_web::ResponseError;
    let bare = res.status() == actix_web::http::StatusCode::NOT_FOUND
        && !res
            .headers()
            .contains_key(actix_web::http::header::CONTENT_TYPE);
    if !bare {
        return res;
    }
    let problem = crate::error::ApiError::NotFound("no such route".to_owned()).error_response();
    res.into_response(problem)
}

/// What opening the database does with its schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schema {
    /// Brings it up to date first.
    Migrate,
    /// Changes nothing: the schema must be current already. A check of a database must not
    /// write to it (nor make a new one pass).
    AsItIs,
}

/// Opens the pool, with the schema as `schema` says.
pub fn open_database(settings: &Settings, schema: Schema) -> Result<Db, StartupError> {
    let target = DatabaseTarget::parse(&settings.database_url)
        .map_err(|why| crate::config::ConfigError::new("DATABASE_URL", why))?;
    // Named by the setting to look at (libpq's messages end in a line break).
    let named = |e: String| StartupError::Database(format!("DATABASE_URL: {}", e.trim_end()));
    let pool = db::pool::build_pool(
        target.clone(),
        settings.database_pool_size,
        settings.database_prepared_statements,
    )
    .map_err(named)?;
    let mut conn = pool
        .get()
        .map_err(|e| named(format!("cannot connect to the database: {e}")))?;
    match schema {
        Schema::Migrate => db::migrate::run_migrations(&mut conn),
        Schema::AsItIs => db::migrate::check_current(&mut conn),
    }
    .map_err(StartupError::Database)?;
    drop(conn);
    Ok(Db::new(pool, &target))
}

impl Application {
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let tls = client_tls(&settings)?;
        let db = {
            let settings = settings.clone();
            actix_web::rt::task::spawn_blocking(move || open_database(&settings, Schema::Migrate))
                .await
                .map_err(|e| StartupError::Database(e.to_string()))??
        };
        measure_database_clock(&db).await;
        let mut bootstrap_revoked = false;
        if let Some(key) = settings.bootstrap_api_key.clone() {
            let bootstrap = db
                .run(move |conn| merchants::ensure_bootstrap_key(conn, &key).map_err(into_diesel))
                .await
                .map_err(|e| {
                    StartupError::Database(format!("cannot create the bootstrap API key: {e}"))
                })?;
            match bootstrap {
                BootstrapKey::Ready => {}
                BootstrapKey::Revoked => {
                    tracing::warn!(
                        "the bootstrap API key is revoked: it authenticates nothing (make a key \
                         with `payments-api api-keys create --merchant default`)"
                    );
                    bootstrap_revoked = true;
                }
                BootstrapKey::OfAnotherMerchant(name) => {
                    return Err(crate::config::ConfigError::new(
                        "BOOTSTRAP_API_KEY",
                        format!("it is a key of merchant {name:?}, not of \"default\""),
                    )
                    .into());
                }
            }
        }

        let listener = listen(&settings.bind_addr).map_err(|source| StartupError::Bind {
            addr: settings.bind_addr.clone(),
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| StartupError::Bind {
            addr: settings.bind_addr.clone(),
            source,
        })?;
        let port = local_addr.port();

        let (provider, simulator): (Arc<dyn PaymentProvider>, _) = match &settings.provider_url {
            Some(url) => (
                Arc::new(HttpProvider::new(
                    url.clone(),
                    settings.provider_timeout,
                    settings.provider_max_attempts,
                    tls.clone(),
                )),
                None,
            ),
            None => {
                let simulator = Arc::new(Simulator::new());
                let in_process = in_process_provider(&settings, simulator.clone(), local_addr);
                (Arc::new(in_process), Some(simulator))
            }
        };
        let provider: Arc<dyn PaymentProvider> =
            Arc::new(crate::provider::MeteredProvider::new(provider));

        let payment_writes = crate::payments::start_writes(&db);
        let state = AppState {
            payment_writes,
            db,
            rate_limits: RateLimits::new(settings.rate_limit_per_second),
            provider,
            settings: Arc::new(settings),
            inflight: InFlight::default(),
            api_keys: ApiKeyCache::default(),
            final_answers: FinalAnswers::default(),
            shutdown: Shutdown::default(),
            tls,
        };
        let server = run(listener, state.clone())?;
        start_background_tasks(&state);
        Ok(Self {
            port,
            bootstrap_revoked,
            server,
            simulator,
            state,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the bootstrap key was found revoked (it authenticates nothing).
    pub fn bootstrap_revoked(&self) -> bool {
        self.bootstrap_revoked
    }

    /// The in-process simulator, when the service uses it (tests read its ledger).
    pub fn simulator(&self) -> Option<Arc<Simulator>> {
        self.simulator.clone()
    }

    pub fn state(&self) -> &AppState {
        &self.state
    }

    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Stops the server at the first of `signals` (the binary's; an embedded server stops by
    /// its handle).
    pub fn stop_on(&self, mut signals: StopSignals) {
        let server = self.server.handle();
        actix_web::rt::spawn(async move {
            let stop = signals.asked().await;
            tracing::info!(?stop, "stop asked for");
            server.stop(stop == Stop::Graceful).await;
            // As actix-server's own signal handling did: the System's arbiters (the HTTP
            // workers' threads) end too, before `main` returns (left running, one aborted the
            // process in its thread-locals' destruction: exit 139 on SIGTERM).
            actix_web::rt::System::current().stop();
        });
    }

    /// Serves until stopped ([`Application::stop_on`]'s signals, or [`ServerHandle::stop`]):
    /// in-flight requests finish first, then background tasks are told to stop and given a
    /// bounded time.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let served = self.server.await;
        tracing::info!("HTTP server stopped; stopping background tasks");
        self.state.shutdown.stop_workers(WORKER_GRACE).await;
        served
    }
}

/// Every background task of an instance, started here and nowhere else; each stops when
/// Where the server's autovacuum is off, analyzes the tables that changed enough, every
/// [`statistics::EVERY`](crate::db::statistics::EVERY) (see [`crate::db::statistics`]).
/// Measures how far the database's clock is from this host's and keeps the difference for
/// [`crate::domain::now`]. A difference over a tenth of a second is logged when it is taken:
/// this host's clock wants fixing, though the service no longer depends on it.
async fn measure_database_clock(db: &Db) {
    match db.run(db::clock::database_ahead).await {
        Ok(Some(reading)) => {
            let ahead = reading.ahead;
            if crate::domain::follow_database_clock(ahead)
                && ahead.abs() > chrono::Duration::milliseconds(100)
            {
                tracing::warn!(
                    database_ahead_ms = ahead.num_milliseconds(),
                    round_trip_ms = reading.round_trip.num_milliseconds(),
                    "this host's clock differs from the database's: times are taken from the \
                     database's"
                );
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(
            error = %e,
            "could not read the database's clock; the difference last measured stays"
        ),
    }
}

/// Measures the database's clock again every [`db::clock::EVERY`].
fn spawn_clock_keeper(state: &AppState) {
    let worker = state.clone();
    let every = db::clock::EVERY;
    state
        .shutdown
        .spawn_periodic("database clock", every, every, move || {
            let state = worker.clone();
            async move { measure_database_clock(&state.db).await }
        });
}

fn spawn_statistics_keeper(state: &AppState) {
    use crate::db::statistics;
    let worker = state.clone();
    let every = statistics::EVERY;
    state
        .shutdown
        .spawn_periodic("planner statistics", every, every, move || {
            let state = worker.clone();
            async move {
                let analyzed = state
                    .db
                    .run(|conn| {
                        if statistics::autovacuum_off(conn)? {
                            statistics::analyze_stale(conn)
                        } else {
                            Ok(Vec::new())
                        }
                    })
                    .await;
                match analyzed {
                    Ok(tables) if !tables.is_empty() => {
                        tracing::debug!(?tables, "analyzed (autovacuum is off)")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "could not analyze stale tables"),
                }
            }
        });
}

/// [`Application::run_until_stopped`] asks the shutdown handle to (the group-commit lanes
/// of [`crate::payments::start_writes`] stop with the last handle to them).
fn start_background_tasks(state: &AppState) {
    use crate::metrics::RecoveryAction;
    use crate::payments::authorization::{CaptureOrCancel, expire_authorizations};
    Recovery::default()
        .resume::<CreatePayment>(RecoveryAction::PaymentResumed)
        .resume::<CreateRefund>(RecoveryAction::RefundResumed)
        .resume::<CaptureOrCancel>(RecoveryAction::OperationResumed)
        .resume::<CreatePayout>(RecoveryAction::PayoutResumed)
        .resume::<crate::disputes::DisputeStep>(RecoveryAction::OperationResumed)
        .then(|state| async move {
            expire_authorizations(&state).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "expiring authorizations failed; will retry");
                0
            })
        })
        .then(|state| async move { inbound::apply_deferred_disputes(&state).await })
        .spawn(state);
    crate::reconcile::spawn_scheduled(state);
    crate::reconcile::spawn_metrics(state);
    crate::dashboard::spawn_session_cleanup(state);
    spawn_statistics_keeper(state);
    spawn_clock_keeper(state);
    inbound::spawn_retention_task(state);
    crate::events::spawn_retention_task(state);
    crate::deliveries::spawn_worker(state);
}

/// The provider a command (not the server) talks to: over HTTP at `PROVIDER_URL`, which must
/// be set (a command's own in-process simulator would have moved no money).
pub fn command_provider(settings: &Settings) -> Result<Arc<dyn PaymentProvider>, StartupError> {
    let Some(url) = &settings.provider_url else {
        // A new simulator's report holds no movement: every money move of the window would
        // read as missing at the provider, and the real discrepancies as resolved.
        return Err(crate::config::ConfigError::new(
            "PROVIDER_URL",
            "unset: `reconcile` reads the provider's settlement report over HTTP (the \
             in-process simulator's report lives in the serving process, which reconciles it \
             itself every RECONCILE_INTERVAL_MS)",
        )
        .into());
    };
    let tls = client_tls(settings)?;
    Ok(Arc::new(HttpProvider::new(
        url.clone(),
        settings.provider_timeout,
        settings.provider_max_attempts,
        tls,
    )))
}

/// What `https` calls out trust: a `TLS_CA_FILE` that cannot be read is a bad setting.
fn client_tls(settings: &Settings) -> Result<crate::tls::ClientTls, crate::config::ConfigError> {
    crate::tls::client_tls(settings.tls_ca_file.as_deref())
        .map_err(|why| crate::config::ConfigError::new("TLS_CA_FILE", why))
}

/// Where this server receives provider webhooks, as seen from this host.
fn self_webhook_url(addr: SocketAddr) -> String {
    let host = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!(
        "http://{}/v1/webhooks/provider",
        SocketAddr::new(host, addr.port())
    )
}

/// How many connections may wait to be accepted. std's `TcpListener::bind` uses 128, and
/// a burst of a few hundred clients (a retry storm) then overflows it: the dropped SYNs are
/// retried by the clients a full second later. Past `MAX_CONNECTIONS` the clients wait here
/// too. The kernel takes at most `net.core.somaxconn` (4 096 by default since Linux 5.4):
/// raise that where more clients than the instance holds may come at once.
pub const LISTEN_BACKLOG: i32 = 65_535;

/// Binds `addr` (an IP socket address) with [`LISTEN_BACKLOG`] and `SO_REUSEADDR`.
pub fn listen(addr: &str) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let addr: std::net::SocketAddr = addr.parse().map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: {e}"))
    })?;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// The simulator in this process. It finishes async charges by webhook to this very
/// server, signed with the first configured secret (the port is only known after the bind).
fn in_process_provider(
    settings: &Settings,
    simulator: Arc<Simulator>,
    local_addr: std::net::SocketAddr,
) -> InProcessProvider {
    let in_process = InProcessProvider::new(simulator, settings.provider_latency)
        .with_timeout(settings.provider_timeout, settings.provider_max_attempts);
    match settings
        .webhook_secrets
        .first()
        .map(|s| WebhookSecret::parse(s))
    {
        Some(Ok(secret)) => {
            let delivery =
                WebhookDelivery::new(self_webhook_url(local_addr), secret, RetryPolicy::default());
            in_process.with_webhooks(delivery, settings.provider_async_delay)
        }
        _ => {
            tracing::warn!("WEBHOOK_SECRETS is empty: async charges of the simulator stay pending");
            in_process
        }
    }
}

fn into_diesel(e: db::DbError) -> diesel::result::Error {
    match e {
        db::DbError::Query(e) => e,
        other => diesel::result::Error::QueryBuilderError(other.to_string().into()),
    }
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The caller's `X-Request-Id` when it is a sane one; else a new UUIDv7 of the clock every
/// instance shares ([`crate::domain::v7_now`]), so request ids made on hosts whose clocks
/// differ still sort as the requests came.
fn request_id_of(req: &actix_web::dev::ServiceRequest) -> RequestId {
    let theirs = req.headers().get(&REQUEST_ID);
    if let Some(theirs) = theirs.filter(|v| crate::domain::is_token(v.as_bytes(), 200)) {
        return RequestId(theirs.clone());
    }
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let ours = crate::domain::v7_now().hyphenated().encode_lower(&mut text);
    // A UUID's text is always a valid header value; the fallback is never taken.
    RequestId(HeaderValue::from_str(ours).unwrap_or_else(|_| HeaderValue::from_static("unknown")))
}

/// How long in-flight requests may take to finish after SIGTERM: the longest a request
/// can run (every provider attempt to its timeout, with the backoff between, and a retry's
/// wait for another request's outcome), at least 30 s, at most 10 minutes.
fn shutdown_grace(settings: &Settings) -> Duration {
    let attempts = settings.provider_max_attempts.max(1);
    let longest = (settings.provider_timeout + Duration::from_secs(2))
        .saturating_mul(attempts)
        .saturating_add(settings.idempotency_wait)
        .saturating_add(Duration::from_secs(5));
    longest.clamp(Duration::from_secs(30), Duration::from_secs(600))
}

/// Keeps the actix System the HTTP workers start in open until the process exits.
///
/// Each worker's thread holds a handle to the System (its channel to the System's task) in
/// a thread-local, and drops it in the thread's thread-local destructors, after tokio's own
/// thread-locals there are gone. Were that the last handle, dropping it would wake the
/// System's task from that thread, through a tokio thread-local already destroyed: a panic
/// in a thread-local destructor, which aborts the process. It was the last whenever the
/// main thread, done with its shutdown, exited (dropping its own handles) while a worker
/// thread was still being torn down: exit 134 instead of 0 on SIGTERM, in 3 of 7 rolling
/// restarts of the compose check here (gdb showed the worker in `drop(System)` →
/// `Tx::drop` → `wake_rx` → `LocalSet`'s `schedule` → `AccessError`, the main thread in
/// `exit`). A handle forgotten here is never dropped, so a worker's never closes the
/// channel and wakes nothing (one handle per server built: the binary builds one).
fn keep_system_open() {
    if let Some(system) = actix_web::rt::System::try_current() {
        std::mem::forget(system);
    }
}

fn run(listener: TcpListener, state: AppState) -> Result<Server, StartupError> {
    keep_system_open();
    let workers = state.settings.workers.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
    });
    let grace = shutdown_grace(&state.settings);
    let addr = state.settings.bind_addr.clone();
    let connections = Connections::new(state.settings.max_connections);
    let per_worker = connections.per_worker(workers);
    let counted = connections.clone();
    let data = web::Data::new(state);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .app_data(connections.clone())
            .wrap_fn(move |req, srv| {
                let request_id = request_id_of(&req);
                req.extensions_mut().insert(request_id.clone());
                let method = req.method().clone();
                let started = Instant::now();
                let fut = srv.call(req);
                async move {
                    let mut res = bare_not_found_as_problem(fut.await?.map_into_boxed_body());
                    res.headers_mut().insert(REQUEST_ID, request_id.0.clone());
                    // From its maximum down to seven eighths of it, the server lets a
                    // waiting client in after this answer (`src/connections.rs`).
                    if res
                        .request()
                        .app_data::<Connections>()
                        .is_some_and(Connections::closing)
                    {
                        let head = res.response_mut().head_mut();
                        head.set_connection_type(actix_web::http::ConnectionType::Close);
                    }
                    let route = res
                        .request()
                        .match_pattern()
                        .unwrap_or_else(|| "unmatched".into());
                    let elapsed = started.elapsed();
                    crate::metrics::http_request(&method, &route, res.status(), elapsed);
                    // The fields are evaluated only when the line is written.
                    tracing::info!(
                        request_id = %request_id.as_str(),
                        %method,
                        route,
                        merchant = res
                            .request()
                            .extensions()
                            .get::<crate::routes::authenticate::MerchantId>()
                            .map(|m| m.0.as_str()),
                        status = res.status().as_u16(),
                        latency_ms = elapsed.as_secs_f64() * 1000.0,
                        "request"
                    );
                    Ok::<_, actix_web::Error>(res)
                }
            })
            .configure(routes::configure)
            .configure(crate::dashboard::configure)
            .default_service(web::to(routes::not_found))
    })
    .on_connect(move |_, extensions| {
        extensions.insert(counted.opened());
    })
    .workers(workers)
    .max_connections(per_worker)
    .shutdown_timeout(grace.as_secs())
    // One listener of the stop signals, made before the start ([`Application::stop_on`]).
    .disable_signals();
    Ok(server
        .listen(listener)
        .map_err(|source| StartupError::Bind { addr, source })?
        .run())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shutdown_grace_covers_the_longest_request() {
        let mut settings = crate::config::Settings::from_lookup(|_| None).expect("defaults");
        // Defaults: 3 × (5 s + 2 s) + 2 s + 5 s = 28 s, so the floor.
        assert_eq!(shutdown_grace(&settings), Duration::from_secs(30));
        settings.provider_timeout = Duration::from_secs(60);
        assert_eq!(
            shutdown_grace(&settings),
            Duration::from_secs(3 * 62 + 2 + 5)
        );
        settings.provider_timeout = Duration::from_secs(3_600);
        assert_eq!(shutdown_grace(&settings), Duration::from_secs(600));
    }
}
