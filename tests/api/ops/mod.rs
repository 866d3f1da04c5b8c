//! Operating the service: health, metrics, the OpenAPI document and docs page, logs without
//! secrets, the database going away and coming back, SIGTERM, settings checked at start.

use std::io::{BufRead, BufReader, Read};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use payments_api::routes::ROUTES;
use payments_api::startup::Application;
use serde_json::{Value, json};

use crate::support::{
    TestDatabase, assert_holds_for, spawn_app, spawn_app_with, test_settings, visa, wait_until,
};

mod binary;
mod connections;
mod database_down;
mod health;
mod openapi;

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
    /// Starts the binary and waits until it listens.
    async fn start(envs: &[(&str, &str)]) -> Self {
        let mut service = Self::spawn(envs);
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

    /// Starts the binary (a new test database unless `envs` sets `DATABASE_URL`).
    fn spawn(envs: &[(&str, &str)]) -> Self {
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
        Self {
            child,
            port: 0,
            lines,
            client: crate::support::app::test_client(),
            _database: database,
        }
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
