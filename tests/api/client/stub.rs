//! A tiny scripted HTTP server: answers the n-th request with the n-th reply of its script
//! (the last one repeats) and records when each request came and with which key.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone)]
pub enum Reply {
    Answer {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// Close the connection without answering.
    Hangup,
    /// Answer nothing for this long, then close.
    Hang(Duration),
}

#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub method: String,
    pub path: String,
    pub idempotency_key: Option<String>,
    pub body: Vec<u8>,
}

pub struct Stub {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stub {
    pub async fn start(script: Vec<Reply>) -> Self {
        assert!(!script.is_empty());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind stub");
        let url = format!("http://{}", listener.local_addr().expect("stub address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, script.clone(), log.clone()));
            }
        });
        Self { url, seen, task }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("log").clone()
    }

    /// The distinct idempotency keys the requests carried.
    pub fn keys(&self) -> Vec<Option<String>> {
        let mut keys: Vec<_> = self.seen().into_iter().map(|s| s.idempotency_key).collect();
        keys.dedup();
        keys
    }
}

/// One request per connection: every answer says `connection: close`.
async fn serve(mut stream: TcpStream, script: Vec<Reply>, log: Arc<Mutex<Vec<Seen>>>) {
    let Some(seen) = read_request(&mut stream).await else {
        return;
    };
    let index = {
        let mut log = log.lock().expect("log");
        log.push(seen);
        log.len() - 1
    };
    match script[index.min(script.len() - 1)].clone() {
        Reply::Hangup => {}
        Reply::Hang(time) => tokio::time::sleep(time).await,
        Reply::Answer {
            status,
            headers,
            body,
        } => {
            let mut text = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                text.push_str(&format!("{name}: {value}\r\n"));
            }
            text.push_str("\r\n");
            text.push_str(&body);
            let _ = stream.write_all(text.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Seen> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let at = Instant::now();
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let mut length = 0;
    let mut idempotency_key = None;
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().ok()?,
                "idempotency-key" => idempotency_key = Some(value.trim().to_owned()),
                _ => {}
            }
        }
    }
    let mut body = buffer[head_end..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Seen {
        at,
        method,
        path,
        idempotency_key,
        body,
    })
}

pub fn problem(status: u16, code: &str, retry_after: Option<u64>) -> Reply {
    let mut headers = vec![
        ("content-type", "application/problem+json".to_owned()),
        ("x-request-id", format!("req-{status}-{code}")),
    ];
    if let Some(seconds) = retry_after {
        headers.push(("retry-after", seconds.to_string()));
    }
    Reply::Answer {
        status,
        headers,
        body: format!(
            r#"{{"type":"https://payments-api.dev/problems/{code}","title":"t","status":{status},"detail":"d","code":"{code}"}}"#
        ),
    }
}

pub fn payment(status_code: u16, status: &str) -> Reply {
    Reply::Answer {
        status: status_code,
        headers: vec![("content-type", "application/json".to_owned())],
        body: format!(
            r#"{{"id":"pay_1","object":"payment","amount":2000,"currency":"usd","status":"{status}",
            "amount_refunded":0,"payment_method":"pm_card_visa","customer_id":null,"description":null,
            "metadata":{{}},"provider_charge_id":null,"failure_code":null,"failure_message":null,
            "created_at":"2026-11-22T06:00:00Z","updated_at":"2026-11-22T06:00:00Z"}}"#
        ),
    }
}
