//! API keys (CONTRACT §11): several per merchant, revocation that reaches every instance
//! within 5 s, keys from before key ids still working; and the `payments-api` binary's
//! commands, run for real against the test's own database.

use std::process::Command;
use std::time::{Duration, Instant};

use diesel::backend::Backend;
use diesel::migration::MigrationSource;
use diesel::prelude::*;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use payments_api::db::DbConnection;
use payments_api::db::merchants::{self, ApiKey, Revocation};
use payments_api::db::pool::{DatabaseTarget, build_pool};
use payments_api::domain::{ApiKeyId, new_api_key};

use crate::support::{
    TestApp, TestDatabase, pass_database_settings, spawn_app_with, spawn_cluster, spawn_provider,
    test_settings, visa,
};

/// Creates a key for the merchant `name` (creating the merchant) the way the CLI does.
async fn create_key(app: &TestApp, name: &str, label: Option<&str>) -> (String, ApiKey) {
    let key = new_api_key();
    let (name, k, label) = (name.to_owned(), key.clone(), label.map(str::to_owned));
    let row = app
        .state
        .db
        .run(move |conn| {
            let merchant = merchants::ensure_merchant(conn, &name).map_err(into_diesel)?;
            merchants::create_api_key(conn, &merchant, &k, label.as_deref()).map_err(into_diesel)
        })
        .await
        .expect("key created");
    (key, row)
}

fn into_diesel(e: payments_api::db::DbError) -> diesel::result::Error {
    diesel::result::Error::QueryBuilderError(e.to_string().into())
}

async fn revoke(app: &TestApp, key_id: &str) -> Revocation {
    let key_id = key_id.to_owned();
    app.state
        .db
        .run(move |conn| merchants::revoke_api_key(conn, &key_id).map_err(into_diesel))
        .await
        .expect("revoke")
}

/// Polls `GET /v1/payments` with `key` until it answers 401; the time that took.
async fn until_refused(app: &TestApp, key: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let response = app.get_as("/v1/payments", key).await;
        if response.status == 401 {
            response.assert_problem(401, "unauthorized");
            return started.elapsed();
        }
        assert_eq!(response.status, 200, "{}", response.text());
        assert!(
            started.elapsed() < within,
            "a revoked key still works after {within:?}"
        );
        actix_web::rt::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_web::test]
async fn two_keys_of_one_merchant_both_work_on_the_same_payments() {
    let app = spawn_app_with(|_| {}).await;
    let (first, first_row) = create_key(&app, "acme", Some("web")).await;
    let (second, second_row) = create_key(&app, "acme", None).await;
    assert_ne!(first_row.id, second_row.id);
    assert_eq!(first_row.merchant_id, second_row.merchant_id);
    assert_eq!(first_row.last4.as_deref(), Some(&first[first.len() - 4..]));

    let created = app
        .post_json("/v1/payments", &first, Some("two-keys"), &visa(1200))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_owned();
    // The second key is the same merchant: it sees the payment and replays the key.
    let seen = app.get_as(&format!("/v1/payments/{id}"), &second).await;
    assert_eq!(seen.status, 200, "{}", seen.text());
    let replayed = app
        .post_json("/v1/payments", &second, Some("two-keys"), &visa(1200))
        .await;
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.json()["id"], id.as_str());
    // The default merchant's key does not.
    app.get(&format!("/v1/payments/{id}"))
        .await
        .assert_problem(404, "not_found");
    assert_eq!(app.charges(), 1);
}

#[actix_web::test]
async fn a_revoked_key_is_refused_within_5_s_on_every_instance_that_cached_it() {
    let provider = spawn_provider().await;
    let (apps, _database) = spawn_cluster(2, &provider, |_| {}).await;
    let (old, old_row) = create_key(&apps[0], "rotating", Some("old")).await;
    let (new, _) = create_key(&apps[0], "rotating", Some("new")).await;
    // Both instances authenticate the key, and so hold it in their caches.
    for app in &apps {
        for key in [&old, &new] {
            let response = app.get_as("/v1/payments", key).await;
            assert_eq!(response.status, 200, "{}", response.text());
        }
    }

    let revoked_at = Instant::now();
    assert!(matches!(
        revoke(&apps[0], &old_row.id).await,
        Revocation::Revoked(_)
    ));
    for app in &apps {
        let remaining = Duration::from_secs(5).saturating_sub(revoked_at.elapsed());
        until_refused(app, &old, remaining).await;
    }
    assert!(revoked_at.elapsed() < Duration::from_secs(5));
    // The merchant's other key is untouched; revoking again keeps the first time.
    for app in &apps {
        assert_eq!(app.get_as("/v1/payments", &new).await.status, 200);
    }
    match revoke(&apps[1], &old_row.id).await {
        Revocation::AlreadyRevoked(row) => assert!(row.revoked_at.is_some()),
        other => panic!("expected AlreadyRevoked, got {other:?}"),
    }
    assert!(matches!(
        revoke(&apps[1], "key_00000000000000000000000000000000").await,
        Revocation::NotFound
    ));
}

const PG_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");
const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
/// The migration that gave keys ids (its folder's version, without dashes).
const KEY_IDS_MIGRATION: &str = "20261123000200";

/// Applies every migration older than [`KEY_IDS_MIGRATION`]: the schema as it was.
fn migrate_to_before_key_ids<DB, C>(conn: &mut C, source: EmbeddedMigrations)
where
    DB: Backend,
    C: MigrationHarness<DB>,
    EmbeddedMigrations: MigrationSource<DB>,
{
    // Pending migrations come in version order.
    let pending = conn.pending_migrations(source).expect("pending migrations");
    let older = pending
        .iter()
        .take_while(|m| {
            m.name().version().to_string().replace('-', "").as_str() < KEY_IDS_MIGRATION
        })
        .count();
    assert!(older < pending.len(), "the key-ids migration exists");
    for migration in &pending[..older] {
        conn.run_migration(migration.as_ref())
            .expect("an older migration");
    }
}

#[actix_web::test]
async fn keys_stored_before_key_ids_still_work_after_the_migration() {
    let (database, url) = TestDatabase::create();
    let old_key = new_api_key();
    {
        let prepared_statements = test_settings(url.clone()).database_prepared_statements;
        let pool =
            build_pool(DatabaseTarget::parse(&url).unwrap(), 1, prepared_statements).unwrap();
        let mut conn = pool.get().unwrap();
        let conn: &mut DbConnection = &mut conn;
        match conn {
            DbConnection::Postgres(c) => migrate_to_before_key_ids(c, PG_MIGRATIONS),
            DbConnection::Sqlite(c) => migrate_to_before_key_ids(c, SQLITE_MIGRATIONS),
        }
        // The old code's insert: no id, label, last4 or revocation (those columns do not
        // exist yet).
        diesel::sql_query(
            "INSERT INTO merchants (id, name, created_at) \
             VALUES ('mer_legacy', 'legacy', '2026-01-02 03:04:05')",
        )
        .execute(conn)
        .unwrap();
        diesel::sql_query(format!(
            "INSERT INTO api_keys (key_hash, merchant_id, created_at) \
             VALUES ('{}', 'mer_legacy', '2026-01-02 03:04:05')",
            merchants::hash_api_key(&old_key)
        ))
        .execute(conn)
        .unwrap();
    }

    // The service applies the rest at start.
    let app = spawn_app_with(|s| s.database_url = url.clone()).await;
    let response = app
        .post_json("/v1/payments", &old_key, Some("legacy-1"), &visa(500))
        .await;
    assert_eq!(response.status, 201, "{}", response.text());

    // Code still inserting the old way during a rolling deploy gets an id too.
    let rolling_key = new_api_key();
    let insert = format!(
        "INSERT INTO api_keys (key_hash, merchant_id, created_at) \
         VALUES ('{}', 'mer_legacy', '2026-01-02 03:04:06')",
        merchants::hash_api_key(&rolling_key)
    );
    app.state
        .db
        .run(move |conn| diesel::sql_query(insert).execute(conn))
        .await
        .unwrap();
    assert_eq!(app.get_as("/v1/payments", &rolling_key).await.status, 200);

    let keys = app
        .state
        .db
        .run(|conn| merchants::list_api_keys(conn, Some("legacy")))
        .await
        .unwrap();
    assert_eq!(keys.len(), 2);
    for (key, merchant) in &keys {
        assert!(ApiKeyId::is_valid(&key.id), "{}", key.id);
        assert_eq!(merchant, "legacy");
        assert_eq!(key.last4, None, "the key itself was never stored");
        assert_eq!(key.revoked_at, None);
    }
    assert_ne!(keys[0].0.id, keys[1].0.id);
    // A backfilled id revokes like any other.
    assert!(matches!(
        revoke(&app, &keys[0].0.id).await,
        Revocation::Revoked(_)
    ));
    until_refused(&app, &old_key, Duration::from_secs(5)).await;
    assert_eq!(app.get_as("/v1/payments", &rolling_key).await.status, 200);
    drop(app);
    drop(database);
}

// ---- The binary ---------------------------------------------------------------------

struct CliOutput {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `payments-api ARGS` with only `DATABASE_URL` set, in an empty directory (no
/// `.env` to pick up).
async fn cli(database_url: &str, args: &[&str]) -> CliOutput {
    let mut command = Command::new(env!("CARGO_BIN_EXE_payments-api"));
    command
        .args(args)
        .env_clear()
        .env("DATABASE_URL", database_url)
        .current_dir(std::env::temp_dir());
    pass_database_settings(&mut command);
    let output = actix_web::rt::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("the binary runs");
    CliOutput {
        code: output.status.code().expect("exited"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}

/// `api-keys create`: the key (stdout, alone) and its id (stderr, alone on a line).
async fn cli_create(url: &str, args: &[&str]) -> (String, String, CliOutput) {
    let out = cli(url, &[&["api-keys", "create"], args].concat()).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "stdout is the key alone: {:?}", out.stdout);
    let key = lines[0].to_owned();
    assert!(key.starts_with("sk_test_") && key.len() > 40, "{key}");
    let ids: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| ApiKeyId::is_valid(l))
        .collect();
    assert_eq!(ids.len(), 1, "one id line on stderr: {:?}", out.stderr);
    assert!(!out.stderr.contains(&key), "the key is printed once");
    let id = ids[0].to_owned();
    (key, id, out)
}

/// `api-keys list` lines, split into their 6 tab-separated fields.
fn fields(stdout: &str) -> Vec<Vec<String>> {
    stdout
        .lines()
        .map(|line| {
            let fields: Vec<String> = line.split('\t').map(str::to_owned).collect();
            assert_eq!(fields.len(), 6, "{line:?}");
            fields
        })
        .collect()
}

#[actix_web::test]
async fn every_command_has_help_and_bad_usage_exits_2() {
    // No database is needed (nor touched) for help.
    let nowhere = "sqlite:///nonexistent-dir/never-created.db";
    for (args, expect) in [
        (&["--help"][..], "api-keys"),
        (&["serve", "--help"][..], "Run the HTTP service"),
        (&["migrate", "--help"][..], "migrations"),
        (&["api-keys", "--help"][..], "revoke"),
        (
            &["api-keys", "create", "--help"][..],
            "creates the merchant if it does not exist",
        ),
        (&["api-keys", "list", "--help"][..], "never the key"),
        (&["api-keys", "revoke", "--help"][..], "within 5 seconds"),
        (&["help", "api-keys", "create"][..], "--label"),
    ] {
        let out = cli(nowhere, args).await;
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        assert!(out.stdout.contains("Usage: payments-api"), "{args:?}");
        assert!(out.stdout.contains(expect), "{args:?}: {}", out.stdout);
    }
    for args in [
        &["bogus"][..],
        &["api-keys"][..],
        &["api-keys", "create"][..],
        &["api-keys", "create", "--merchant", ""][..],
        &[
            "api-keys",
            "create",
            "--merchant",
            "a",
            "--label",
            "tab\there",
        ][..],
        &["api-keys", "revoke"][..],
    ] {
        let out = cli(nowhere, args).await;
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert!(!std::path::Path::new("/nonexistent-dir").exists());
}

#[actix_web::test]
async fn api_keys_create_list_and_revoke_through_the_binary() {
    let (database, url) = TestDatabase::create();
    let migrated = cli(&url, &["migrate"]).await;
    assert_eq!(migrated.code, 0, "{}", migrated.stderr);

    let (first, first_id, out) =
        cli_create(&url, &["--merchant", "acme", "--label", "checkout servers"]).await;
    assert!(
        out.stderr.contains("created merchant \"acme\""),
        "{}",
        out.stderr
    );
    let (second, second_id, out) = cli_create(&url, &["--merchant", "acme"]).await;
    assert!(!out.stderr.contains("created merchant"), "{}", out.stderr);
    let (other, _, _) = cli_create(&url, &["--merchant", "globex", "--label", "ci"]).await;

    let listed = cli(&url, &["api-keys", "list"]).await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let all = fields(&listed.stdout);
    assert_eq!(all.len(), 3, "{}", listed.stdout);
    let acme = cli(&url, &["api-keys", "list", "--merchant", "acme"]).await;
    let rows = fields(&acme.stdout);
    assert_eq!(rows.len(), 2, "{}", acme.stdout);
    assert_eq!(rows[0][0], first_id);
    assert_eq!(rows[0][1], "acme");
    assert_eq!(rows[0][2], "checkout servers");
    assert!(
        chrono::DateTime::parse_from_rfc3339(&rows[0][3]).is_ok(),
        "{}",
        rows[0][3]
    );
    assert_eq!(rows[0][4], first[first.len() - 4..]);
    assert_eq!(rows[0][5], "active");
    assert_eq!(rows[1][0], second_id);
    assert_eq!(rows[1][2], "-");
    assert_eq!(rows[1][4], second[second.len() - 4..]);
    for key in [&first, &second, &other] {
        for text in [&listed.stdout, &listed.stderr, &acme.stdout, &acme.stderr] {
            assert!(!text.contains(key.as_str()), "a listing shows a key");
            assert!(!text.contains(&merchants::hash_api_key(key)));
        }
    }
    let unknown = cli(&url, &["api-keys", "list", "--merchant", "nobody"]).await;
    assert_eq!(unknown.code, 1);
    assert!(unknown.stderr.contains("no merchant named \"nobody\""));

    // The service on the same database: both keys of acme work.
    let app = spawn_app_with(|s| s.database_url = url.clone()).await;
    for key in [&first, &second, &other] {
        assert_eq!(app.get_as("/v1/payments", key).await.status, 200);
    }

    let revoked = cli(&url, &["api-keys", "revoke", &first_id]).await;
    assert_eq!(revoked.code, 0, "{}", revoked.stderr);
    assert!(revoked.stdout.starts_with(&format!("revoked {first_id}")));
    until_refused(&app, &first, Duration::from_secs(5)).await;
    assert_eq!(app.get_as("/v1/payments", &second).await.status, 200);

    let rows = fields(
        &cli(&url, &["api-keys", "list", "--merchant", "acme"])
            .await
            .stdout,
    );
    assert!(rows[0][5].starts_with("revoked 20"), "{:?}", rows[0]);
    assert_eq!(rows[1][5], "active");
    let again = cli(&url, &["api-keys", "revoke", &first_id]).await;
    assert_eq!(again.code, 0);
    assert!(again.stdout.contains("already revoked"), "{}", again.stdout);

    let missing = cli(
        &url,
        &["api-keys", "revoke", "key_00000000000000000000000000000000"],
    )
    .await;
    assert_eq!(missing.code, 1);
    assert!(missing.stderr.contains("no API key"), "{}", missing.stderr);
    // A key pasted instead of its id is refused without being echoed.
    let pasted = cli(&url, &["api-keys", "revoke", &second]).await;
    assert_eq!(pasted.code, 1);
    assert!(!pasted.stderr.contains(&second) && !pasted.stdout.contains(&second));
    assert_eq!(app.get_as("/v1/payments", &second).await.status, 200);

    // Refused input created nothing: still 3 keys of ours plus the service's bootstrap key.
    let bad = cli(
        &url,
        &["api-keys", "create", "--merchant", "x", "--label", "a\nb"],
    )
    .await;
    assert_eq!(bad.code, 2);
    let all = fields(&cli(&url, &["api-keys", "list"]).await.stdout);
    assert_eq!(all.len(), 4, "{all:?}");
    assert!(all.iter().all(|row| row[1] != "x"));
    drop(app);
    drop(database);
}
