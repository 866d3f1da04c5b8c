//! A TCP proxy between the client and the service that loses answers the way networks do:
//! it resets connections as they open, resets them right after forwarding a request, drops
//! answers the service already sent (the money moved; the client never hears), stalls an
//! answer past the client's timeout, and delays others. Each fault is drawn per event
//! with its own probability; `Stats` counts what was done, so a test can show it happened.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Probabilities in parts per thousand.
#[derive(Debug, Clone, Copy)]
pub struct Chaos {
    /// Reset a new connection before anything is forwarded: one in every
    /// 1000 / `reset_on_connect`, starting with the first. On a schedule rather than rolled,
    /// because a client that keeps its connections open makes few (about 120 in the chaos
    /// test), and a 3 % roll then left every one alone in about one run in forty.
    pub reset_on_connect: u32,
    /// Forward a request chunk, then reset the client's connection (the service still
    /// answers, to nobody).
    pub reset_after_request: u32,
    /// Swallow an answer the service sent and reset the client's connection.
    pub drop_answer: u32,
    /// Hold an answer for `stall`, then reset: longer than the client's timeout.
    pub stall_answer: u32,
    pub stall: Duration,
    /// Hold an answer for up to `max_delay`, then forward it.
    pub delay_answer: u32,
    pub max_delay: Duration,
}

#[derive(Debug, Default)]
pub struct Stats {
    pub connections: AtomicU64,
    pub upstream_refused: AtomicU64,
    pub reset_on_connect: AtomicU64,
    pub reset_after_request: AtomicU64,
    pub dropped_answers: AtomicU64,
    pub stalled_answers: AtomicU64,
    pub delayed_answers: AtomicU64,
    pub forwarded_answers: AtomicU64,
}

impl Stats {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::SeqCst)
    }

    pub fn summary(&self) -> String {
        format!(
            "connections {}, upstream refused {}, reset on connect {}, reset after request {}, \
             dropped answers {}, stalled {}, delayed {}, forwarded {}",
            Self::get(&self.connections),
            Self::get(&self.upstream_refused),
            Self::get(&self.reset_on_connect),
            Self::get(&self.reset_after_request),
            Self::get(&self.dropped_answers),
            Self::get(&self.stalled_answers),
            Self::get(&self.delayed_answers),
            Self::get(&self.forwarded_answers),
        )
    }
}

pub struct ChaosProxy {
    pub url: String,
    pub stats: Arc<Stats>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// True with probability `per_mille` / 1000.
fn roll(per_mille: u32) -> bool {
    per_mille > 0 && (uuid::Uuid::new_v4().as_u128() % 1000) < u128::from(per_mille)
}

fn random_below(max: Duration) -> Duration {
    max.mul_f64((uuid::Uuid::new_v4().as_u128() % 10_000) as f64 / 10_000.0)
}

/// Closes with RST instead of FIN: the peer sees "connection reset".
fn reset(stream: TcpStream) {
    let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
    drop(stream);
}

impl ChaosProxy {
    pub async fn start(upstream: SocketAddr, chaos: Chaos) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let stats = Arc::new(Stats::default());
        let counters = stats.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let nth = counters.connections.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(client, nth, upstream, chaos, counters.clone()));
            }
        });
        Self { url, stats, task }
    }
}

async fn serve(client: TcpStream, nth: u64, upstream: SocketAddr, chaos: Chaos, stats: Arc<Stats>) {
    if chaos.reset_on_connect > 0
        && nth.is_multiple_of(u64::from(1000 / chaos.reset_on_connect.min(1000)))
    {
        stats.reset_on_connect.fetch_add(1, Ordering::SeqCst);
        return reset(client);
    }
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        // The service is down (restarting): the client sees a reset, as from a balancer.
        stats.upstream_refused.fetch_add(1, Ordering::SeqCst);
        return reset(client);
    };
    let mut client = client;
    let (mut up, mut down) = (vec![0u8; 16 * 1024], vec![0u8; 16 * 1024]);
    loop {
        tokio::select! {
            read = client.read(&mut up) => {
                let n = match read { Ok(0) | Err(_) => return, Ok(n) => n };
                if server.write_all(&up[..n]).await.is_err() {
                    return reset(client);
                }
                if roll(chaos.reset_after_request) {
                    stats.reset_after_request.fetch_add(1, Ordering::SeqCst);
                    reset(client);
                    // Let the service finish and answer into the void.
                    let _ = tokio::time::timeout(Duration::from_secs(10), server.read(&mut down)).await;
                    return;
                }
            }
            read = server.read(&mut down) => {
                let n = match read { Ok(0) | Err(_) => return reset(client), Ok(n) => n };
                if roll(chaos.drop_answer) {
                    stats.dropped_answers.fetch_add(1, Ordering::SeqCst);
                    return reset(client);
                }
                if roll(chaos.stall_answer) {
                    stats.stalled_answers.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(chaos.stall).await;
                    return reset(client);
                }
                if roll(chaos.delay_answer) {
                    stats.delayed_answers.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(random_below(chaos.max_delay)).await;
                }
                if client.write_all(&down[..n]).await.is_err() {
                    return;
                }
                stats.forwarded_answers.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}
