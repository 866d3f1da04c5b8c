//! The real binary: logs without secrets, SIGTERM, bad settings.

use super::*;

// ---------------------------------------------------------------------------------------
// The real binary: logs, SIGTERM, bad settings

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

/// A stop asked for while the service is still starting, here waiting for a database that
/// refuses every connection, ends the start with exit 0 (not death by the signal, 143).
#[actix_web::test]
async fn sigterm_while_waiting_for_the_database_at_start_exits_0() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port(); // free again once the listener drops: nothing answers there
    let refused = format!("postgres://postgres@127.0.0.1:{port}/nothing");
    let mut service = Service::spawn(&[("DATABASE_URL", &refused)]);
    // The pool logs each failed connection: the start is waiting for the database.
    service.wait_for_line("database connection").await;
    assert!(
        !service.output().contains("payments-api listening"),
        "{}",
        service.output()
    );
    service.sigterm();
    let exit = service.wait_for_exit().await;
    assert_eq!(exit.code(), Some(0), "{exit}\n{}", service.output());
    assert!(
        service.output().contains("stopped before serving"),
        "{}",
        service.output()
    );
}

/// A database that cannot be reached at the start stops it (exit 1) with the cause and
/// the setting to look at.
#[actix_web::test]
async fn a_database_that_refuses_at_start_stops_it_naming_database_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let refused = format!("postgres://postgres@127.0.0.1:{port}/nothing");
    let mut service = Service::spawn(&[("DATABASE_URL", &refused)]);
    let exit = service.wait_for_exit().await;
    assert_eq!(exit.code(), Some(1), "{exit}\n{}", service.output());
    let output = service.output();
    assert!(output.contains("DATABASE_URL"), "{output}");
    assert!(
        output.contains("cannot connect to the database"),
        "{output}"
    );
    assert!(!output.contains("payments-api listening"), "{output}");
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

    // A value that is not UTF-8 is a bad value too, not an unset one: `migrate` would
    // otherwise migrate the default database in its place and say it had.
    let folder = std::env::temp_dir().join(format!("not-utf8-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("a folder");
    for (name, value) in [
        ("DATABASE_URL", &b"sqlite://elsewhere.db\xff"[..]),
        // A query string would become part of the file's name.
        ("DATABASE_URL", &b"sqlite://elsewhere.db?mode=ro"[..]),
        ("RATE_LIMIT_PER_SECOND", &b"2\xff"[..]),
        ("WEBHOOK_SECRETS", &b"whsec_\xff"[..]),
    ] {
        use std::os::unix::ffi::OsStrExt;
        let output = Command::new(env!("CARGO_BIN_EXE_payments-api"))
            .current_dir(&folder)
            .env_clear()
            .env(name, std::ffi::OsStr::from_bytes(value))
            .arg("migrate")
            .stdin(Stdio::null())
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(name), "{stderr}");
        assert!(
            !folder.join("data").exists(),
            "{name}: the default database was made"
        );
    }
    let _ = std::fs::remove_dir_all(&folder);

    // A .env file that cannot be read is not used in part: it stops the start too.
    let folder = std::env::temp_dir().join(format!("dotenv-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("a folder");
    std::fs::write(
        folder.join(".env"),
        "BIND_ADDR=127.0.0.1:0\nnot a setting\n",
    )
    .expect(".env");
    let output = Command::new(env!("CARGO_BIN_EXE_payments-api"))
        .current_dir(&folder)
        .env_clear()
        .env("DATABASE_URL", "sqlite://never-created.db")
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    let _ = std::fs::remove_dir_all(&folder);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(".env"), "{stderr}");
}

/// Settings judged only once the database is open (or by libpq) are bad settings all the
/// same: exit 2 and the variable's name, never a password in the message. A start that
/// wrongly went on serving is stopped after 30 s and fails the test.
#[actix_web::test]
async fn settings_judged_at_the_start_stop_it_with_exit_2_and_their_name() {
    let (_database, url) = TestDatabase::create();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_payments-api"))
            .current_dir(std::env::temp_dir())
            .env_clear()
            .env("DATABASE_URL", &url)
            .env("BIND_ADDR", "127.0.0.1:0")
            .envs(env.iter().copied())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().expect("wait").is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let output = child.wait_with_output().expect("output");
        let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), stdout, stderr)
    };
    let (code, bravo_key, stderr) = run(&["api-keys", "create", "--merchant", "bravo"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    for (env, name) in [
        // A key of another merchant never authenticates `default`: not a bootstrap key.
        (
            vec![("BOOTSTRAP_API_KEY", bravo_key.as_str())],
            "BOOTSTRAP_API_KEY",
        ),
        (
            vec![
                ("TLS_CA_FILE", "/nonexistent/ca.pem"),
                ("BOOTSTRAP_API_KEY", API_KEY),
            ],
            "TLS_CA_FILE",
        ),
        (
            vec![("DATABASE_URL", "postgres://postgres:Sup3rS3cret@[::1")],
            "DATABASE_URL",
        ),
        (
            vec![(
                "DATABASE_URL",
                "postgres://postgres:Sup3rS3cret@127.0.0.1/db?sslmode=bogus",
            )],
            "DATABASE_URL",
        ),
    ] {
        let (code, _, stderr) = run(&[], &env);
        assert_eq!(code, Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(name), "{env:?}: {stderr}");
        assert!(!stderr.contains("Sup3rS3cret"), "{stderr}");
    }
    // `reconcile` reads TLS_CA_FILE when it calls the provider, and judges it the same way.
    let (code, _, stderr) = run(
        &["reconcile"],
        &[
            ("TLS_CA_FILE", "/nonexistent/ca.pem"),
            ("PROVIDER_URL", "https://127.0.0.1:9"),
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("TLS_CA_FILE"), "{stderr}");
    // Without a provider to read, it does not read a new simulator's empty report (every
    // money move "missing", the real discrepancies "resolved"): it stops, naming the setting.
    let (code, stdout, stderr) = run(&["reconcile"], &[]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("PROVIDER_URL"), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    // Nor a window whose report RFC 3339 cannot write.
    let (code, stdout, stderr) = run(
        &[
            "reconcile",
            "--from",
            "0000-01-01T00:00:00Z",
            "--to",
            "2026-01-01T00:00:00Z",
        ],
        &[("PROVIDER_URL", "http://127.0.0.1:9")],
    );
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("0001-01-01T01:00:00Z"), "{stderr}");
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
    // WEBHOOK_URL goes with a good secret: its own value is what stops the start.
    let secret = ("WEBHOOK_SECRET", WEBHOOK_SECRET);
    for (name, value, with) in [
        ("RUST_LOG", "[[[", None),
        ("LOG_FORMAT", "xml", None),
        ("PROVIDER_FAIL_RATE", "2", None),
        ("WEBHOOK_URL", "abc", Some(secret)),
        ("WEBHOOK_URL", "ftp://x/y", Some(secret)),
    ] {
        let env: Vec<(&str, &str)> = std::iter::once((name, value)).chain(with).collect();
        let output = run(&[], &env);
        assert_eq!(output.status.code(), Some(2), "{name}={value}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(name), "{stderr}");
    }
    // Nor is a value that is not UTF-8 taken for an unset one.
    use std::os::unix::ffi::OsStrExt;
    let output = Command::new(env!("CARGO_BIN_EXE_provider-sim"))
        .current_dir(std::env::temp_dir())
        .env_clear()
        .env("PROVIDER_SIM_BIND", "nowhere")
        .env(
            "PROVIDER_FAIL_RATE",
            std::ffi::OsStr::from_bytes(b"0.5\xff"),
        )
        .stdin(Stdio::null())
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PROVIDER_FAIL_RATE"), "{stderr}");
}
