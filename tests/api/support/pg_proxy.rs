//! PostgreSQL behind a TCP proxy the test controls: cut, restored, or made to lose one
//! answer; for the tests of the database going away (ops, deliveries, group commit).

use std::io::{Read, Write};
use std::net::{Shutdown as SocketShutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};

use super::app::{TestApp, spawn_app_with};
use super::database::skip;

/// A TCP proxy in front of PostgreSQL that the test can cut (every open connection is
/// closed, new ones are dropped at once) and restore, or set to lose the answer to one
/// statement (see [`Proxy::lose_answer_after`]).
pub struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    /// Connections stay open and nothing is forwarded (see [`Proxy::freeze`]).
    frozen: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    stopped: Arc<AtomicBool>,
    trap: Arc<Trap>,
}

/// What the client must send, in order, on one connection before its answer is lost.
#[derive(Default)]
struct Trap {
    needles: Mutex<Vec<Vec<u8>>>,
    sprung: AtomicBool,
}

impl Trap {
    /// Whether `chunk` completes the trap for a connection that has seen `progress` needles
    /// (advanced here). Springs once.
    fn springs(&self, progress: &mut usize, chunk: &[u8]) -> bool {
        let needles = self.needles.lock().unwrap();
        if needles.is_empty() || self.sprung.load(Ordering::SeqCst) {
            return false;
        }
        if let Some(needle) = needles.get(*progress)
            && chunk.windows(needle.len()).any(|w| w == needle.as_slice())
        {
            *progress += 1;
        }
        *progress == needles.len() && !self.sprung.swap(true, Ordering::SeqCst)
    }
}

/// Copies one direction of a connection. Client to server (`trap` given): once the trap
/// springs, the message that sprang it still reaches the server, every answer after it is
/// dropped (`lost`), and 300 ms later both sides are closed.
fn pipe(
    mut from: TcpStream,
    mut to: TcpStream,
    trap: Option<Arc<Trap>>,
    lost: Arc<AtomicBool>,
    frozen: Arc<AtomicBool>,
) {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 16 * 1024];
        let mut progress = 0;
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    while frozen.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let springs = trap
                        .as_ref()
                        .is_some_and(|trap| trap.springs(&mut progress, &buffer[..n]));
                    if springs {
                        lost.store(true, Ordering::SeqCst);
                    } else if lost.load(Ordering::SeqCst) {
                        continue;
                    }
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                    if springs {
                        let (from, to) = (from.try_clone().unwrap(), to.try_clone().unwrap());
                        std::thread::spawn(move || {
                            std::thread::sleep(Duration::from_millis(300));
                            let _ = from.shutdown(SocketShutdown::Both);
                            let _ = to.shutdown(SocketShutdown::Both);
                        });
                    }
                }
            }
        }
        let _ = from.shutdown(SocketShutdown::Both);
        let _ = to.shutdown(SocketShutdown::Both);
    });
}

impl Proxy {
    fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let frozen = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(AtomicBool::new(false));
        let trap = Arc::new(Trap::default());
        let (up2, frozen2, open2, stopped2, trap2) = (
            up.clone(),
            frozen.clone(),
            open.clone(),
            stopped.clone(),
            trap.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if stopped2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                if !up2.load(Ordering::SeqCst) {
                    let _ = client.shutdown(SocketShutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5))
                else {
                    continue;
                };
                let mut open = open2.lock().unwrap();
                open.push(client.try_clone().unwrap());
                open.push(server.try_clone().unwrap());
                let lost = Arc::new(AtomicBool::new(false));
                let to_server = (client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(
                    to_server.0,
                    to_server.1,
                    Some(trap2.clone()),
                    lost.clone(),
                    frozen2.clone(),
                );
                pipe(server, client, None, lost, frozen2.clone());
            }
        });
        Self {
            port,
            up,
            frozen,
            open,
            stopped,
            trap,
        }
    }

    /// The database accepts and never answers (a hung server, a pooler whose server is
    /// gone): connections stay open, nothing is forwarded, until [`Proxy::thaw`].
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// What was held is delivered, late.
    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }

    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(SocketShutdown::Both);
        }
    }

    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }

    /// The next connection that sends each of `needles` in order (e.g. `UPDATE payments`,
    /// then `COMMIT`) has the last of them delivered and every answer after it lost: the
    /// server did the work, the service never hears so. Once.
    pub fn lose_answer_after(&self, needles: &[&str]) {
        *self.trap.needles.lock().unwrap() =
            needles.iter().map(|n| n.as_bytes().to_vec()).collect();
        self.trap.sprung.store(false, Ordering::SeqCst);
    }

    pub fn answer_lost(&self) -> bool {
        self.trap.sprung.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.thaw();
        self.cut();
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wake the accept loop
    }
}

/// `postgres://user@host:port/db?…` → (host:port, the URL with `authority` in its place).
pub fn split_authority(url: &str, authority: &str) -> (String, String) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (userinfo_host, tail) = rest.split_at(end);
    let (userinfo, host) = match userinfo_host.rsplit_once('@') {
        Some((user, host)) => (format!("{user}@"), host),
        None => (String::new(), userinfo_host),
    };
    let host = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    };
    (host, format!("{scheme}://{userinfo}{authority}{tail}"))
}

/// A PostgreSQL schema of this test's own, dropped at the end.
pub struct PgSchema {
    base_url: String,
    schema: String,
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        if let Ok(mut conn) = PgConnection::establish(&self.base_url) {
            let _ = conn.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

/// An app whose PostgreSQL (a schema of its own) sits behind a [`Proxy`] the test controls,
/// whichever backend the rest of the suite runs on. `None` (and a note) without PostgreSQL.
pub async fn app_behind_proxy(
    configure: impl FnOnce(&mut payments_api::config::Settings),
) -> Option<(TestApp, Proxy, PgSchema)> {
    let (proxy, pg_schema, proxied) = postgres_behind_proxy()?;
    let app = spawn_app_with(move |s| {
        s.database_url = proxied;
        configure(s);
    })
    .await;
    Some((app, proxy, pg_schema))
}

/// A schema of the test's own in the tests' PostgreSQL, reached through a [`Proxy`]: the
/// proxy, the schema (dropped with it) and the URL through the proxy. `None` (skipped) when
/// there is no PostgreSQL and none was asked for.
pub fn postgres_behind_proxy() -> Option<(Proxy, PgSchema, String)> {
    let base_url = std::env::var("TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let mut admin = match PgConnection::establish(&base_url) {
        Ok(conn) => conn,
        // Under CI, or when PostgreSQL was asked for, a missing server is a failure.
        Err(e)
            if std::env::var_os("CI").is_some()
                || std::env::var_os("TEST_DATABASE_URL").is_some() =>
        {
            panic!("no PostgreSQL at {base_url} for the database-down test: {e}")
        }
        Err(e) => {
            skip(&format!(
                "the database-down tests need a PostgreSQL: none at {base_url} ({e})"
            ));
            return None;
        }
    };
    let schema = format!("test_dbdown_{}", uuid::Uuid::new_v4().simple());
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let pg_schema = PgSchema {
        base_url: base_url.clone(),
        schema: schema.clone(),
    };
    let (upstream, _) = split_authority(&base_url, "");
    let upstream = upstream.to_socket_addrs().unwrap().next().unwrap();
    let proxy = Proxy::start(upstream);
    let (_, proxied) = split_authority(&base_url, &format!("127.0.0.1:{}", proxy.port));
    let separator = if proxied.contains('?') { '&' } else { '?' };
    let proxied = format!("{proxied}{separator}options=-csearch_path%3D{schema}");
    Some((proxy, pg_schema, proxied))
}
