//! The real binary as a child process.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::app::test_client;
use super::wait::wait_until;

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
        let live = format!("{address}/health/live");
        wait_until(
            Duration::from_secs(30),
            "the service answers /health/live",
            || {
                let request = client.get(&live).send();
                async move { request.await.is_ok_and(|r| r.status() == 200) }
            },
        )
        .await;
        Self { child, address }
    }

    /// SIGTERM, then waits (up to 60 s) for the process to exit.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "SIGTERM sent");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "still running 60 s after SIGTERM"
            );
            actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        }
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
