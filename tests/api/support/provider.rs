//! Providers for the service to call: the simulator over HTTP ([`TestProvider`]), and a
//! scripted one for answers the simulator never gives ([`ScriptedProvider`]).

use std::sync::Arc;

use actix_web::dev::ServerHandle;
use payments_api::provider::sim::Simulator;
use payments_api::provider::sim::server::{self as sim_server, Faults};

/// The provider simulator over HTTP on port 0, with its faults under the test's control.
pub struct TestProvider {
    pub url: String,
    pub simulator: Arc<Simulator>,
    pub faults: Arc<Faults>,
    handle: ServerHandle,
}

pub async fn spawn_provider() -> TestProvider {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind provider");
    let url = format!(
        "http://{}",
        listener.local_addr().expect("provider address")
    );
    let simulator = Arc::new(Simulator::new());
    let faults = Arc::new(Faults::default());
    let server = sim_server::serve(listener, simulator.clone(), faults.clone(), None)
        .expect("provider starts");
    let handle = server.handle();
    actix_web::rt::spawn(server);
    TestProvider {
        url,
        simulator,
        faults,
        handle,
    }
}

/// One call a [`ScriptedProvider`] received.
#[derive(Debug, Clone)]
pub struct ProviderCall {
    pub path: String,
    pub idempotency_key: String,
    pub body: String,
}

/// A provider that answers each call with the next of the raw HTTP responses it was given
/// (the last one again once they run out) and records every call: for answers the simulator
/// never gives, such as a body cut short or text that no database column can hold.
pub struct ScriptedProvider {
    pub url: String,
    calls: Arc<std::sync::Mutex<Vec<ProviderCall>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl ScriptedProvider {
    pub fn start(answers: Vec<Vec<u8>>) -> Self {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind provider");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let calls: Arc<std::sync::Mutex<Vec<ProviderCall>>> = Arc::default();
        let stop: Arc<std::sync::atomic::AtomicBool> = Arc::default();
        let (log, stopped) = (calls.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut answers = answers.into_iter().peekable();
            let mut last = Vec::new();
            for stream in listener.incoming() {
                if stopped.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                let (head, body) = loop {
                    let Ok(n) = stream.read(&mut buf) else {
                        break (String::new(), String::new());
                    };
                    if n == 0 {
                        break (String::new(), String::new());
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let Some((head, body)) = text.split_once("\r\n\r\n") else {
                        continue;
                    };
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if body.len() >= length {
                        break (head.to_owned(), body.to_owned());
                    }
                };
                let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
                let idempotency_key = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("idempotency-key")
                            .then(|| value.trim().to_owned())
                    })
                    .unwrap_or_default();
                log.lock().unwrap().push(ProviderCall {
                    path,
                    idempotency_key,
                    body,
                });
                if let Some(next) = answers.next() {
                    last = next;
                }
                let _ = stream.write_all(&last);
                let _ = stream.flush();
            }
        });
        Self { url, calls, stop }
    }

    pub fn calls(&self) -> Vec<ProviderCall> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for ScriptedProvider {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = std::net::TcpStream::connect(self.url.trim_start_matches("http://"));
    }
}

/// A whole 200 answer with this JSON body, on a connection that closes after it.
pub fn provider_answer(json: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{json}",
        json.len()
    )
    .into_bytes()
}

impl Drop for TestProvider {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}
