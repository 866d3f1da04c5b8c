//! Load generator for `scripts/bench.sh`: drives a running payments-api over HTTP and prints,
//! per scenario, requests/s, p50, p99 and the non-2xx count.
//!
//!   cargo bench --bench loadgen -- --url URL[,URL…] --key KEY[,KEY…] --scenario new|replay|live|storm
//!       [--connections 64] [--seconds 10] [--storm 500] [--replay-keys 1000] [--threads 2]
//!
//! With several URLs (instances of one service on one database) the connections are spread
//! round robin over them. With several API keys (of different merchants), `new` spreads its
//! payments round robin over them; the other scenarios use the first. `live` sends the replay's
//! headers to `GET /health/live`, the floor of what any request costs the service. `storm`
//! sends `--storm` requests with one idempotency key, at most `--connections` at a time.
//!
//! Each connection is a keep-alive HTTP/1.1 connection of its own, driven by its own task,
//! and speaks only what these requests need (a POST with a fixed body; answers with a
//! Content-Length), as wrk does: the load generator shares the machine's cores with the
//! service, and a general-purpose client spent as much CPU per request as the service did.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io;
use std::time::{Duration, Instant};

use actix_web::rt::net::TcpStream;

use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::{LocalBoxFuture, join_all};

struct Args {
    /// `host:port` of each instance
    addrs: Vec<&'static str>,
    /// API keys: `new` takes them in turn, the other scenarios the first.
    keys: Vec<String>,
    scenario: String,
    connections: usize,
    seconds: u64,
    storm: usize,
    replay_keys: usize,
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addrs: vec!["127.0.0.1:8080"],
        keys: Vec::new(),
        scenario: "new".into(),
        connections: 64,
        seconds: 10,
        storm: 500,
        replay_keys: 1000,
        threads: 2,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => {
                args.addrs = value()?
                    .split(',')
                    .map(|url| {
                        let addr = url.strip_prefix("http://").ok_or(format!(
                            "{url}: only http:// URLs (the load generator speaks plain HTTP/1.1)"
                        ))?;
                        Ok(&*addr.trim_end_matches('/').to_owned().leak())
                    })
                    .collect::<Result<_, String>>()?
            }
            "--key" => {
                args.keys = value()?
                    .split(',')
                    .filter(|k| !k.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
            "--scenario" => args.scenario = value()?,
            "--connections" => args.connections = value()?.parse().map_err(|e| format!("{e}"))?,
            "--seconds" => args.seconds = value()?.parse().map_err(|e| format!("{e}"))?,
            "--storm" => args.storm = value()?.parse().map_err(|e| format!("{e}"))?,
            "--replay-keys" => args.replay_keys = value()?.parse().map_err(|e| format!("{e}"))?,
            "--threads" => args.threads = value()?.parse().map_err(|e| format!("{e}"))?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.threads == 0 || args.connections == 0 {
        return Err("--threads and --connections must be at least 1".into());
    }
    if args.keys.is_empty() {
        return Err("--key is required".into());
    }
    Ok(args)
}

#[derive(Default)]
struct Samples {
    latencies: Vec<Duration>,
    /// Each non-2xx status with its count, to tell a 409 from a 503.
    statuses: std::collections::BTreeMap<u16, usize>,
    errors: usize,
    /// Connections of a timed run that got no answer before its end: clients an instance
    /// left waiting the whole run (served only once the others stopped) while it served
    /// others over and over.
    starved: usize,
}

impl Samples {
    fn merge(&mut self, other: Samples) {
        self.latencies.extend(other.latencies);
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        self.errors += other.errors;
        self.starved += other.starved;
    }

    fn report(&self, scenario: &str, elapsed: Duration) {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let percentile = |p: f64| match sorted.len() {
            0 => 0.0,
            n => sorted[((n as f64 * p).ceil() as usize).clamp(1, n) - 1].as_secs_f64() * 1000.0,
        };
        let n = sorted.len();
        println!(
            "RESULT scenario={scenario} requests={n} rps={:.0} p50_ms={:.2} p90_ms={:.2} p99_ms={:.2} max_ms={:.2} non_2xx={}{} errors={} starved={}",
            n as f64 / elapsed.as_secs_f64(),
            percentile(0.50),
            percentile(0.90),
            percentile(0.99),
            percentile(1.0),
            self.statuses.values().sum::<usize>(),
            self.statuses
                .iter()
                .map(|(status, n)| format!(" status_{status}={n}"))
                .collect::<String>(),
            self.errors,
            self.starved
        );
    }
}

/// One keep-alive connection to one instance; reconnects after an error.
///
/// Its work per request is kept to what wrk does, since it shares the cores with the
/// service: the request is copied together from fixed parts (no formatting), the answer is
/// read into a buffer that is zeroed once, not per read, and its head is parsed in one pass
/// over its bytes. The answer's body stays in the buffer until the next request
/// ([`Connection::body`]).
struct Connection {
    /// `host:port`
    addr: &'static str,
    stream: Option<TcpStream>,
    /// This connection's number, and how many payments it has posted: which API key the
    /// next one uses.
    n: usize,
    sent: usize,
    request: Vec<u8>,
    /// Bytes read: `read[..filled]`; the last answer's body is `read[body]`, and what
    /// follows it (`read[body.end..filled]`) belongs to the next answer.
    read: Vec<u8>,
    filled: usize,
    body: std::ops::Range<usize>,
}

/// What the load generator reads of an answer's head.
struct Head {
    status: u16,
    /// Where the body starts and ends in the buffer.
    body: std::ops::Range<usize>,
    /// The server closes the connection after this answer (`Connection: close`).
    close: bool,
}

impl Connection {
    /// Connection `n` goes to instance `n` modulo their number.
    fn new(args: &'static Args, n: usize) -> Self {
        Self {
            addr: args.addrs[n % args.addrs.len()],
            stream: None,
            n,
            sent: 0,
            request: Vec::with_capacity(512),
            read: vec![0; 16 * 1024],
            filled: 0,
            body: 0..0,
        }
    }

    /// Opens the connection unless it is open (before its first request, after an error).
    async fn connect(&mut self) -> io::Result<()> {
        if self.stream.is_none() {
            let connect = TcpStream::connect(self.addr);
            let timeout = actix_web::rt::time::timeout(Duration::from_secs(30), connect);
            self.stream = Some(timeout.await.map_err(|_| io::ErrorKind::TimedOut)??);
            (self.filled, self.body) = (0, 0..0);
        }
        Ok(())
    }

    /// The body of the last answer read.
    fn body(&self) -> &[u8] {
        &self.read[self.body.clone()]
    }

    /// POSTs a payment with `key` and reads the answer: its status (the body is
    /// [`Connection::body`]).
    async fn post(&mut self, args: &Args, key: &str) -> io::Result<u16> {
        self.connect().await?;
        let api_key = if args.scenario == "new" {
            &args.keys[(self.n + self.sent * args.connections) % args.keys.len()]
        } else {
            &args.keys[0]
        };
        self.sent += 1;
        self.request.clear();
        let (line, content_type, end) = if args.scenario == "live" {
            ("GET /health/live HTTP/1.1\r\nHost: ", "", "\r\n\r\n")
        } else {
            (
                "POST /v1/payments HTTP/1.1\r\nHost: ",
                "\r\nContent-Type: application/json",
                REQUEST_END,
            )
        };
        for part in [
            line,
            self.addr,
            "\r\nAuthorization: Bearer ",
            api_key,
            content_type,
            "\r\nIdempotency-Key: ",
            key,
            end,
        ] {
            self.request.extend_from_slice(part.as_bytes());
        }
        let exchange = async {
            let stream = self.stream.as_ref().ok_or(io::ErrorKind::NotConnected)?;
            write_all(stream, &self.request).await?;
            self.read_answer().await
        };
        match actix_web::rt::time::timeout(Duration::from_secs(30), exchange).await {
            Ok(Ok(head)) => {
                if head.close {
                    self.stream = None;
                }
                Ok(head.status)
            }
            Ok(Err(e)) => {
                self.stream = None;
                Err(e)
            }
            Err(_) => {
                self.stream = None;
                Err(io::ErrorKind::TimedOut.into())
            }
        }
    }

    /// Reads one answer (the buffer may already hold the start of it): its head; its body
    /// is then [`Connection::body`].
    async fn read_answer(&mut self) -> io::Result<Head> {
        // What followed the previous answer (nothing, without pipelining) moves to the front.
        let taken = self.body.end;
        self.read.copy_within(taken..self.filled, 0);
        (self.filled, self.body) = (self.filled - taken, 0..0);
        let stream = self.stream.as_ref().ok_or(io::ErrorKind::NotConnected)?;
        loop {
            if let Some(head) = parse_head(&self.read[..self.filled])?
                && head.body.end <= self.filled
            {
                self.body = head.body.clone();
                return Ok(head);
            }
            if self.filled == self.read.len() {
                let larger = self.read.len() * 2;
                self.read.resize(larger, 0);
            }
            stream.readable().await?;
            match stream.try_read(&mut self.read[self.filled..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The request's last header, the body's length, the blank line before the body, and the
/// body.
const REQUEST_END: &str = concat!(
    "\r\nContent-Length: ",
    69,
    "\r\n\r\n",
    r#"{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}"#
);
const _: () = assert!(
    REQUEST_END.len() == "\r\nContent-Length: 69\r\n\r\n".len() + 69,
    "the Content-Length states the body's length"
);

/// The head of the answer at the start of `bytes`, once all of it is there: its status, where
/// its body is (by Content-Length, which every answer here has) and whether the server
/// closes the connection after it.
fn parse_head(bytes: &[u8]) -> io::Result<Option<Head>> {
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let (mut status, mut length, mut close) = (None, None, false);
    let mut start = 0;
    // One pass over the head's lines, up to the empty line that ends it.
    while let Some(newline) = bytes[start..].iter().position(|&b| b == b'\n') {
        let line = &bytes[start..start + newline];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        start += newline + 1;
        if line.is_empty() {
            let length: usize =
                length.ok_or_else(|| invalid("an answer without Content-Length"))?;
            return Ok(Some(Head {
                status: status.ok_or_else(|| invalid("status line"))?,
                body: start..start + length,
                close,
            }));
        }
        if status.is_none() {
            status = line
                .get(9..12)
                .and_then(|code| std::str::from_utf8(code).ok())
                .and_then(|code| code.parse().ok());
            if status.is_none() {
                return Err(invalid("status line"));
            }
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-length") {
            length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
        } else if name.eq_ignore_ascii_case(b"connection") {
            close = value.eq_ignore_ascii_case(b"close");
        }
    }
    Ok(None)
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sends one request, timed, into `samples`; whether it was answered (its body is then
/// `connection.body()`).
async fn timed(connection: &mut Connection, args: &Args, key: &str, samples: &mut Samples) -> bool {
    // The clock starts once the connection is open, as wrk's does: opening 1 000 sockets at
    // once costs this process 40-60 ms of its own on 2 cores, before the service sees a byte.
    if connection.connect().await.is_err() {
        samples.errors += 1;
        return false;
    }
    let started = Instant::now();
    match connection.post(args, key).await {
        Ok(status) => {
            samples.latencies.push(started.elapsed());
            if !(200..300).contains(&status) {
                *samples.statuses.entry(status).or_default() += 1;
            }
            true
        }
        Err(_) => {
            samples.errors += 1;
            false
        }
    }
}

/// Runs `connection(n)` for every connection `n` in `0..--connections`, each as its own
/// task, spread over `--threads` threads with a runtime each, and returns what each
/// connection gave back with the time they took together.
///
/// One task per connection, as the service has one per connection: a single task joining
/// all of a thread's connections shares one scheduling budget among them, and under load
/// the connections it polls last were left waiting for hundreds of milliseconds with their
/// answers already sent (the load generator's queueing, counted as the service's latency).
/// One thread alone is also a bottleneck at 1 000 connections on 2 cores.
fn on_threads<T: Send + 'static>(
    args: &'static Args,
    connection: impl Fn(usize) -> LocalBoxFuture<'static, T> + Sync,
) -> (Vec<T>, Duration) {
    let started = Instant::now();
    let results = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..args.threads)
            .map(|t| {
                let connection = &connection;
                let (n, k) = (args.connections, args.threads);
                let workers = n * t / k..n * (t + 1) / k;
                scope.spawn(move || {
                    actix_web::rt::System::new().block_on(async move {
                        let tasks: Vec<_> = workers
                            .map(|n| actix_web::rt::spawn(connection(n)))
                            .collect();
                        join_all(tasks).await
                    })
                })
            })
            .collect();
        // A connection's task that panicked would silently drop its samples: fail instead.
        threads
            .into_iter()
            .flat_map(|thread| thread.join().expect("a load-generating thread panicked"))
            .map(|task| task.expect("a connection's task panicked"))
            .collect()
    });
    (results, started.elapsed())
}

/// `connections` loops, each sending its next key as soon as the previous answer arrived.
fn closed_loop(
    args: &'static Args,
    key_of: &'static (dyn Fn(usize, u64) -> Cow<'static, str> + Sync),
) -> (Samples, Duration) {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let (parts, elapsed) = on_threads(args, |worker| {
        Box::pin(async move {
            let mut connection = Connection::new(args, worker);
            let mut samples = Samples::default();
            let mut i = 0u64;
            let mut served = false;
            while Instant::now() < deadline {
                let answered = timed(&mut connection, args, &key_of(worker, i), &mut samples).await;
                served |= answered && Instant::now() < deadline;
                i += 1;
            }
            samples.starved += usize::from(!served);
            samples
        })
    });
    let mut all = Samples::default();
    for s in parts {
        all.merge(s);
    }
    (all, elapsed)
}

/// `args` and what the scenarios share are leaked: the process runs one scenario and
/// exits, and every connection's task may then borrow them.
fn run(args: &'static Args) -> Result<(), String> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    match args.scenario.as_str() {
        "new" => {
            let key_of = Box::leak(Box::new(move |w, i| {
                Cow::Owned(format!("bench-{run_id}-{w}-{i}"))
            }));
            let (samples, elapsed) = closed_loop(args, key_of);
            samples.report("new", elapsed);
        }
        "replay" => {
            // Finish a fixed set of payments first, then retry them over and over.
            let keys: &'static [String] = (0..args.replay_keys)
                .map(|i| format!("replay-{run_id}-{i}"))
                .collect::<Vec<_>>()
                .leak();
            // Connection `n` stores the keys `n`, `n + connections`, …
            on_threads(args, |n| {
                Box::pin(async move {
                    let mut connection = Connection::new(args, n);
                    for key in keys.iter().skip(n).step_by(args.connections) {
                        let _ = connection.post(args, key).await;
                    }
                })
            });
            let key_of = Box::leak(Box::new(|w: usize, i: u64| {
                Cow::Borrowed(keys[(w * 7919 + i as usize * 31) % keys.len()].as_str())
            }));
            let (samples, elapsed) = closed_loop(args, key_of);
            samples.report("replay", elapsed);
        }
        "live" => {
            // The replay's headers sent to `GET /health/live`: what this service's HTTP stack
            // (actix-http, the middleware, a handler that answers a constant) costs a request,
            // the most that any answer it serves could reach.
            let key_of = Box::leak(Box::new(|_: usize, _: u64| Cow::Borrowed("live")));
            let (samples, elapsed) = closed_loop(args, key_of);
            samples.report("live", elapsed);
        }
        "storm" => {
            let key: &'static str = format!("storm-{run_id}").leak();
            let sent: &'static AtomicUsize = Box::leak(Box::new(AtomicUsize::new(0)));
            let (parts, elapsed) = on_threads(args, |n| {
                Box::pin(async move {
                    let mut connection = Connection::new(args, n);
                    let mut samples = Samples::default();
                    let mut bodies = Vec::new();
                    while sent.fetch_add(1, Ordering::Relaxed) < args.storm {
                        if timed(&mut connection, args, key, &mut samples).await {
                            bodies.push(connection.body().to_vec());
                        }
                    }
                    (samples, bodies)
                })
            });
            let mut all = Samples::default();
            let mut bodies = HashSet::new();
            let mut charge_ids = HashSet::new();
            for (samples, answers) in parts {
                all.merge(samples);
                for body in answers {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body)
                        && let Some(id) = v["provider_charge_id"].as_str()
                    {
                        charge_ids.insert(id.to_owned());
                    }
                    bodies.insert(body);
                }
            }
            all.report("storm", elapsed);
            println!(
                "RESULT scenario=storm distinct_bodies={} distinct_charge_ids={}",
                bodies.len(),
                charge_ids.len()
            );
        }
        other => return Err(format!("unknown scenario {other}")),
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("loadgen: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(Box::leak(Box::new(args))) {
        eprintln!("loadgen: {e}");
        std::process::exit(1);
    }
}
