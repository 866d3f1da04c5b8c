use std::io::IsTerminal;
use std::process::ExitCode;

use chrono::SecondsFormat;
use clap::{Parser, Subcommand};
use payments_api::api_keys::{self, label, merchant_name};
use payments_api::config::Settings;
use payments_api::db::merchants::{self, ApiKey, Revocation};
use payments_api::db::{Db, DbConnection};
use payments_api::domain::{ApiKeyId, Timestamp};
use payments_api::shutdown::StopSignals;
use payments_api::signing::WebhookSecret;
use payments_api::startup::{Application, Schema, StartupError, open_database};
use payments_api::telemetry;

/// An idempotent payment API: a payment request, however often it is sent, charges at most
/// once.
///
/// Settings come from the environment (or a .env file): DATABASE_URL, BIND_ADDR,
/// BOOTSTRAP_API_KEY, RATE_LIMIT_PER_SECOND, … (see docs/settings.md). With no command, `serve`.
#[derive(Parser)]
#[command(name = "payments-api", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service (the default when no command is given).
    ///
    /// Applies pending migrations first. With no BOOTSTRAP_API_KEY set, uses a demo key for
    /// merchant "default", made on the first start and kept beside the SQLite database (or
    /// in data/ on PostgreSQL) as demo-api-key, and logs it; with no WEBHOOK_SECRETS set,
    /// generates a webhook secret and logs it.
    Serve,
    /// Apply pending database migrations to DATABASE_URL, then exit.
    Migrate,
    /// Create, list and revoke merchants' API keys (in the database of DATABASE_URL).
    ///
    /// Rotation: `create` a new key, switch the client to it, `revoke` the old one. A
    /// merchant may hold any number of keys.
    #[command(subcommand)]
    ApiKeys(ApiKeysCommand),
    /// Check the ledger (balance transactions and their entries).
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// Reconcile our records with the provider's settlement report (PROVIDER_URL).
    ///
    /// Every provider movement of the window must match exactly one of our money moves of
    /// the same kind, amount and currency, and each of ours its movement. Prints each
    /// discrepancy found as one JSON line, then `reconciled: N matched, M discrepancies
    /// (…)`, M counting every open discrepancy. Exits 0 with none open, 3 with some, 1 when
    /// it could not run (another run in progress, the provider or database unreachable).
    /// Moves no money.
    Reconcile {
        /// Start of the window (RFC 3339). Default: 24 h before its end.
        #[arg(long, value_name = "RFC3339", value_parser = rfc3339)]
        from: Option<Timestamp>,
        /// End of the window, exclusive (RFC 3339). Default: 10 minutes ago.
        #[arg(long, value_name = "RFC3339", value_parser = rfc3339)]
        to: Option<Timestamp>,
    },
}

fn rfc3339(raw: &str) -> Result<Timestamp, String> {
    chrono::DateTime::parse_from_rfc3339(raw.trim())
        .map(|t| t.naive_utc())
        .map_err(|e| format!("not an RFC 3339 time: {e}"))
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Check the whole database: every transaction's entries sum to zero; every balance
    /// equals the sum of its transactions; every final payment and refund has exactly the
    /// transactions it should; no object has a movement twice.
    ///
    /// Prints each violation on a line of its own (rule, subject, detail, tab-separated),
    /// then one summary line. Exits 0 when the ledger holds, 1 when it does not (or the
    /// database cannot be read).
    Verify,
}

#[derive(Subcommand)]
enum ApiKeysCommand {
    /// Create an API key for a merchant; creates the merchant if it does not exist yet.
    ///
    /// Prints the key once, on stdout: only its hash is stored, so it cannot be shown
    /// again. Prints the key's id (key_…) on stderr, with a note when the merchant was new.
    Create {
        /// The merchant's name (1 to 255 characters); a merchant of this name is created
        /// when there is none.
        #[arg(long, value_name = "NAME", value_parser = merchant_name)]
        merchant: String,
        /// A note to tell the key apart in `api-keys list` (1 to 200 characters), e.g.
        /// "checkout servers, 2026-11".
        #[arg(long, value_name = "TEXT", value_parser = label)]
        label: Option<String>,
    },
    /// List API keys, oldest first, one line per key; never the key itself.
    ///
    /// Tab-separated fields: id, merchant, label ("-" when none), created (UTC), the key's
    /// last 4 characters ("????" for keys created before keys had ids: only their hash was
    /// ever stored), and "active", or "revoked" and the time it was revoked. A header line is
    /// printed only when stdout is a terminal.
    List {
        /// Only this merchant's keys (an unknown merchant is an error).
        #[arg(long, value_name = "NAME", value_parser = merchant_name)]
        merchant: Option<String>,
    },
    /// Revoke an API key by its id (see `api-keys list`).
    ///
    /// Every running instance answers 401 to the key within 5 seconds; requests that had
    /// already been authenticated finish. Revoking a revoked key changes nothing.
    Revoke {
        /// The key's id, `key_…` (not the key itself).
        #[arg(value_name = "KEY_ID")]
        key_id: String,
    },
}

fn main() -> ExitCode {
    one_malloc_arena_per_core();
    // Usage errors exit 2, `--help` and `--version` 0, before any setting is read.
    let cli = Cli::parse();
    // A .env file may supply settings; a missing one is fine.
    if let Err(e) = payments_api::config::load_dotenv() {
        eprintln!("payments-api: {e}");
        return ExitCode::from(2);
    }
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("payments-api: {e}");
            return ExitCode::from(2);
        }
    };
    let result: Result<(), Failure> = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            telemetry::init(settings.log_format, &settings.log_filter);
            serve(settings)
        }
        // The other commands log nothing: their stdout is their output, for scripts.
        Command::Migrate => {
            connect(settings, Schema::Migrate).map(|_| println!("migrations applied"))
        }
        Command::ApiKeys(command) => {
            connect(settings, Schema::Migrate).and_then(|db| Ok(api_keys(&db, command)?))
        }
        Command::Ledger(LedgerCommand::Verify) => existing(&settings)
            .map_err(Failure::from)
            .and_then(|()| connect(settings, Schema::AsItIs))
            .and_then(|db| Ok(verify(&db)?)),
        Command::Reconcile { from, to } => return reconcile(settings, from, to),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("payments-api: {}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}

/// Why a command failed, and its exit status: 2 for a bad setting (as when one is read at
/// the start), 1 for anything else.
struct Failure {
    message: String,
    status: u8,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Self { message, status: 1 }
    }
}

impl From<StartupError> for Failure {
    fn from(e: StartupError) -> Self {
        let status = if matches!(e, StartupError::Config(_)) {
            2
        } else {
            1
        };
        Self {
            message: e.to_string(),
            status,
        }
    }
}

/// The database, with one connection (all a command needs).
fn connect(mut settings: Settings, schema: Schema) -> Result<Db, Failure> {
    settings.database_pool_size = 1;
    Ok(open_database(&settings, schema)?)
}

/// A check of a database must not make one: a SQLite file that is not there (a mistyped
/// path) is an error, not an empty database that passes.
fn existing(settings: &Settings) -> Result<(), String> {
    use payments_api::db::pool::DatabaseTarget;
    match DatabaseTarget::parse(&settings.database_url) {
        Ok(DatabaseTarget::Sqlite(path)) if !path.exists() => {
            Err(format!("no database at {}", path.display()))
        }
        Ok(DatabaseTarget::Sqlite(path)) if path.metadata().is_ok_and(|m| m.len() == 0) => {
            Err(format!("no database at {} (an empty file)", path.display()))
        }
        _ => Ok(()),
    }
}

/// Exit status of `reconcile` when discrepancies are open.
const DISCREPANCIES_OPEN: u8 = 3;

fn reconcile(settings: Settings, from: Option<Timestamp>, to: Option<Timestamp>) -> ExitCode {
    use payments_api::reconcile::{self, Window};
    let default = Window::ending_before(payments_api::domain::now());
    let to = to.unwrap_or(default.to);
    let window = match Window::new(from.unwrap_or(to - chrono::Duration::hours(24)), to) {
        Ok(window) => window,
        Err(why) => {
            eprintln!("payments-api: {why}");
            return ExitCode::from(2);
        }
    };
    let outcome = connect(settings.clone(), Schema::Migrate).and_then(|db| {
        let provider = payments_api::startup::command_provider(&settings)?;
        actix_web::rt::System::new().block_on(async move {
            let mut print = |found: &reconcile::Found| println!("{}", found.json_line());
            reconcile::reconcile(&db, provider.as_ref(), window, &mut print)
                .await
                .map_err(|e| Failure::from(e.to_string()))
        })
    });
    match outcome {
        Ok(report) => {
            println!("{}", report.summary());
            if report.open_total() > 0 {
                ExitCode::from(DISCREPANCIES_OPEN)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(failure) => {
            eprintln!("payments-api: {}", failure.message);
            ExitCode::from(failure.status)
        }
    }
}

fn verify(db: &Db) -> Result<(), String> {
    let mut conn = db.pool().get().map_err(|e| e.to_string())?;
    let verification = payments_api::ledger::verify(&mut conn).map_err(|e| e.to_string())?;
    for violation in &verification.violations {
        println!(
            "{}\t{}\t{}",
            violation.rule, violation.subject, violation.detail
        );
    }
    println!("{}", verification.summary());
    if verification.holds() {
        Ok(())
    } else {
        Err(format!(
            "the ledger does not hold: {} violations",
            verification.violations.len()
        ))
    }
}

fn api_keys(db: &Db, command: ApiKeysCommand) -> Result<(), String> {
    let mut conn = db.pool().get().map_err(|e| e.to_string())?;
    let conn: &mut DbConnection = &mut conn;
    match command {
        ApiKeysCommand::Create { merchant, label } => create_key(conn, &merchant, label),
        ApiKeysCommand::List { merchant } => list_keys(conn, merchant.as_deref()),
        ApiKeysCommand::Revoke { key_id } => revoke_key(conn, &key_id),
    }
}

fn create_key(
    conn: &mut DbConnection,
    merchant: &str,
    label: Option<String>,
) -> Result<(), String> {
    let api_keys::Created {
        key,
        row,
        merchant,
        new_merchant,
    } = api_keys::create_for_merchant_named(conn, merchant, label.as_deref())
        .map_err(|e| e.to_string())?;
    // Shown once: only its hash is stored.
    println!("{}", key.key());
    eprintln!("{}", row.id);
    if new_merchant {
        eprintln!(
            "payments-api: created merchant {:?} ({})",
            merchant.name, merchant.id
        );
    }
    eprintln!(
        "payments-api: the key above (stdout) authenticates merchant {:?}; it is not shown again",
        merchant.name
    );
    Ok(())
}

fn list_keys(conn: &mut DbConnection, merchant: Option<&str>) -> Result<(), String> {
    if let Some(name) = merchant
        && merchants::find_by_name(conn, name)
            .map_err(|e| e.to_string())?
            .is_none()
    {
        return Err(format!("no merchant named {name:?}"));
    }
    let keys = merchants::list_api_keys(conn, merchant).map_err(|e| e.to_string())?;
    if std::io::stdout().is_terminal() {
        println!("ID\tMERCHANT\tLABEL\tCREATED\tLAST4\tSTATUS");
    }
    for (key, merchant) in keys {
        println!("{}", key_line(&key, &merchant));
    }
    Ok(())
}

fn utc(t: Timestamp) -> String {
    t.and_utc().to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// One line of `api-keys list`. It cannot show the key: the row holds only its hash.
fn key_line(key: &ApiKey, merchant: &str) -> String {
    let status = match key.revoked_at {
        Some(at) => format!("revoked {}", utc(at)),
        None => "active".to_owned(),
    };
    format!(
        "{}\t{}\t{}\t{}\t{}\t{}",
        key.id,
        merchant,
        key.label.as_deref().unwrap_or("-"),
        utc(key.created_at),
        key.last4.as_deref().unwrap_or("????"),
        status
    )
}

fn revoke_key(conn: &mut DbConnection, key_id: &str) -> Result<(), String> {
    // Checked here rather than by clap, whose message would echo the value: it may be a
    // key pasted by mistake.
    if !ApiKeyId::is_valid(key_id) {
        return Err(
            "KEY_ID must be a key id like key_0190… (32 hex digits), not a key; \
                    `api-keys list` shows them"
                .to_owned(),
        );
    }
    match api_keys::revoke(conn, None, key_id).map_err(|e| e.to_string())? {
        Revocation::Revoked(key) => {
            println!(
                "revoked {} (merchant {}); every instance answers 401 to it within 5 s",
                key.id, key.merchant_id
            );
            Ok(())
        }
        Revocation::AlreadyRevoked(key) => {
            let at = key.revoked_at.map(utc).unwrap_or_default();
            println!("{} was already revoked at {at}; nothing changed", key.id);
            Ok(())
        }
        Revocation::NotFound => Err(format!("no API key with id {key_id}")),
    }
}

/// glibc's malloc gives each thread that allocates while another holds its arena a new
/// arena, up to eight per core; the service's threads (the HTTP workers, the blocking
/// threads of database calls, the workers) spread their allocations over a dozen, and
/// memory freed in one is not reused by the others. One arena per core keeps the same
/// throughput and about 3 MiB less peak RSS at 1 000 connections (docs/benchmark.md, "Memory
/// per connection"). Where the environment sets the limit (`MALLOC_ARENA_MAX`, or
/// `glibc.malloc.arena_max` in `GLIBC_TUNABLES`), it decides instead. Called first in `main`,
/// before any thread exists.
fn one_malloc_arena_per_core() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none()
        && !std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.arena_max"))
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets a limit glibc's allocator reads when it makes an arena;
        // no other thread exists yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

fn serve(mut settings: Settings) -> Result<(), Failure> {
    let demo_key = if settings.bootstrap_api_key.is_none() {
        let demo = payments_api::demo::api_key(&settings.database_url)?;
        settings.bootstrap_api_key = Some(demo.key.clone());
        Some(demo)
    } else {
        None
    };
    let generated_webhook_secret = if settings.webhook_secrets.is_empty() {
        let secret = WebhookSecret::generate();
        settings.webhook_secrets = vec![secret.clone()];
        Some(secret)
    } else {
        None
    };
    let runner = actix_web::rt::System::new();
    let served = runner.block_on(async move {
        let bind = settings.bind_addr.clone();
        let mut stop = StopSignals::listen().map_err(|e| Failure::from(e.to_string()))?;
        // A stop asked for before the service serves (while it waits for its database, say)
        // ends the start: exit 0, as after serving.
        let app = tokio::select! {
            built = Application::build(settings) => built?,
            asked = stop.asked() => {
                tracing::info!(stop = ?asked, "stop asked for while starting: stopped before serving");
                return Ok(());
            }
        };
        app.stop_on(stop);
        let host = bind.rsplit_once(':').map(|(h, _)| h).unwrap_or("127.0.0.1");
        let url = format!("http://{host}:{}", app.port());
        tracing::info!(%url, "payments-api listening");
        if let Some(demo) = demo_key.filter(|_| !app.bootstrap_revoked()) {
            // The zero-config run's demo key is logged on purpose, at every start, so the
            // service can be tried at once; set BOOTSTRAP_API_KEY (or use `api-keys create`)
            // otherwise.
            let key = demo.key;
            let kept = demo.file.map_or_else(
                || "this run only".to_owned(),
                |file| format!("kept in {}", file.display()),
            );
            tracing::info!(
                "demo API key (merchant \"default\", {kept}): {key}\n  try: curl -s {url}/v1/payments \
                 -H 'Authorization: Bearer {key}' -H 'Idempotency-Key: demo-1' \
                 -H 'Content-Type: application/json' \
                 -d '{{\"amount\": 2000, \"currency\": \"usd\", \"payment_method\": \"pm_card_visa\"}}'"
            );
        }
        if let Some(secret) = generated_webhook_secret {
            // Like the demo key: the zero-config run logs its generated secret once, so
            // test webhooks can be signed by hand; set WEBHOOK_SECRETS otherwise.
            tracing::info!(
                "webhook secret (generated; set WEBHOOK_SECRETS to choose one): {secret}"
            );
        }
        app.run_until_stopped()
            .await
            .map_err(|e| Failure::from(e.to_string()))
    });
    // Not dropped: dropping the runtime waits for every blocking thread, and one still
    // waiting on a database that accepts and never answers (its request was answered 503
    // long ago) would keep the process from exiting for as long as the database is silent.
    // Everything else has stopped; the process exits next, which ends that thread too.
    std::mem::forget(runner);
    served
}
