use std::process::ExitCode;

use payments_api::config::Settings;
use payments_api::db::merchants;
use payments_api::domain::new_api_key;
use payments_api::startup::{Application, connect_and_migrate};
use payments_api::telemetry;
use payments_api::webhooks::WebhookSecret;

const USAGE: &str = "usage: payments-api [serve | migrate | api-keys create --merchant NAME]";

fn main() -> ExitCode {
    // A .env file may supply settings; a missing one is fine.
    let _ = dotenvy::dotenv();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("payments-api: {e}");
            return ExitCode::from(2);
        }
    };
    telemetry::init(settings.log_format);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        [] | ["serve"] => serve(settings),
        ["migrate"] => connect_and_migrate(&settings)
            .map(|_| println!("migrations applied"))
            .map_err(|e| e.to_string()),
        ["api-keys", "create", "--merchant", name] => create_api_key(&settings, name),
        ["-h" | "--help" | "help"] => {
            println!("{USAGE}");
            Ok(())
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("payments-api: {e}");
            ExitCode::FAILURE
        }
    }
}

fn create_api_key(settings: &Settings, merchant: &str) -> Result<(), String> {
    let name = merchant.trim();
    if name.is_empty() || name.len() > 255 {
        return Err("--merchant must be 1 to 255 characters".to_owned());
    }
    let db = connect_and_migrate(settings).map_err(|e| e.to_string())?;
    let mut conn = db.pool().get().map_err(|e| e.to_string())?;
    let merchant = merchants::ensure_merchant(&mut conn, name).map_err(|e| e.to_string())?;
    let key = new_api_key();
    merchants::ensure_api_key(&mut conn, &merchant, &key).map_err(|e| e.to_string())?;
    // Shown once: only its hash is stored.
    println!("{key}");
    eprintln!(
        "API key created for merchant {:?} ({}); it is not shown again",
        merchant.name, merchant.id
    );
    Ok(())
}

fn serve(mut settings: Settings) -> Result<(), String> {
    let demo_key = if settings.bootstrap_api_key.is_none() {
        let key = new_api_key();
        settings.bootstrap_api_key = Some(key.clone());
        Some(key)
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
    actix_web::rt::System::new().block_on(async move {
        let bind = settings.bind_addr.clone();
        let app = Application::build(settings).await.map_err(|e| e.to_string())?;
        let host = bind.rsplit_once(':').map(|(h, _)| h).unwrap_or("127.0.0.1");
        let url = format!("http://{host}:{}", app.port());
        tracing::info!(%url, "payments-api listening");
        if let Some(key) = demo_key {
            // The zero-config run's demo key is logged on purpose, once, so the service can
            // be tried at once; set BOOTSTRAP_API_KEY (or use `api-keys create`) otherwise.
            tracing::info!(
                "demo API key (merchant \"default\"): {key}\n  try: curl -s {url}/v1/payments \
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
        app.run_until_stopped().await.map_err(|e| e.to_string())
    })
}
