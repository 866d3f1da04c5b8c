//! Load generator for `scripts/bench.sh`: drives a running payments-api over HTTP and prints,
//! per scenario, requests/s, p50, p99 and the non-2xx count.
//!
//!   cargo bench --bench loadgen -- --url URL[,URL…] --key KEY --scenario new|replay|storm
//!       [--connections 64] [--seconds 10] [--storm 500] [--replay-keys 1000] [--threads 2]
//!
//! With several URLs (instances of one service on one database) the requests go round
//! robin over them. `storm` sends `--storm` requests with one idempotency key, at most
//! `--connections` at a time.

use std::cell::Cell;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::future::{LocalBoxFuture, join_all};

struct Args {
    urls: Vec<String>,
    key: String,
    scenario: String,
    connections: usize,
    seconds: u64,
    storm: usize,
    replay_keys: usize,
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        urls: vec!["http://127.0.0.1:8080".into()],
        key: String::new(),
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
            "--url" => args.urls = value()?.split(',').map(str::to_owned).collect(),
            "--key" => args.key = value()?,
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
    if args.key.is_empty() {
        return Err("--key is required".into());
    }
    Ok(args)
}

#[derive(Default)]
struct Samples {
    latencies: Vec<Duration>,
    non_2xx: usize,
    /// Each non-2xx status with its count, to tell a 409 from a 503.
    statuses: std::collections::BTreeMap<u16, usize>,
    errors: usize,
}

impl Samples {
    fn merge(&mut self, other: Samples) {
        self.latencies.extend(other.latencies);
        self.non_2xx += other.non_2xx;
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        self.errors += other.errors;
    }

    fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let mut sorted = self.latencies.clone();
        sorted.sort();
        let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
        sorted[index].as_secs_f64() * 1000.0
    }

    fn report(&self, scenario: &str, elapsed: Duration) {
        let n = self.latencies.len();
        println!(
            "RESULT scenario={scenario} requests={n} rps={:.0} p50_ms={:.2} p90_ms={:.2} p99_ms={:.2} max_ms={:.2} non_2xx={}{} errors={}",
            n as f64 / elapsed.as_secs_f64(),
            self.percentile(0.50),
            self.percentile(0.90),
            self.percentile(0.99),
            self.percentile(1.0),
            self.non_2xx,
            self.statuses
                .iter()
                .map(|(status, n)| format!(" status_{status}={n}"))
                .collect::<String>(),
            self.errors
        );
    }
}

const BODY: &str = r#"{"amount": 2000, "currency": "usd", "payment_method": "pm_card_visa"}"#;

async fn post(client: &awc::Client, args: &Args, key: &str) -> Result<(u16, Vec<u8>), String> {
    // Round robin over the instances.
    thread_local!(static NEXT: Cell<usize> = const { Cell::new(0) });
    let n = NEXT.with(|next| next.replace(next.get() + 1));
    let url = &args.urls[n % args.urls.len()];
    let mut response = client
        .post(format!("{url}/v1/payments"))
        .insert_header(("Authorization", format!("Bearer {}", args.key)))
        .insert_header(("Content-Type", "application/json"))
        .insert_header(("Idempotency-Key", key))
        .send_body(BODY)
        .await
        .map_err(|e| e.to_string())?;
    let body = response.body().await.map_err(|e| e.to_string())?;
    Ok((response.status().as_u16(), body.to_vec()))
}

async fn timed(
    client: &awc::Client,
    args: &Args,
    key: &str,
    samples: &mut Samples,
) -> Option<Vec<u8>> {
    let started = Instant::now();
    match post(client, args, key).await {
        Ok((status, body)) => {
            samples.latencies.push(started.elapsed());
            if !(200..300).contains(&status) {
                samples.non_2xx += 1;
                *samples.statuses.entry(status).or_default() += 1;
            }
            Some(body)
        }
        Err(_) => {
            samples.errors += 1;
            None
        }
    }
}

fn client(args: &Args) -> awc::Client {
    awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .connector(awc::Connector::new().limit(args.connections.max(args.storm) + 8))
        .finish()
}

/// Runs `part` on `--threads` threads, each with its own runtime and client, and returns
/// what each gave back with the time they took together. Thread `t` drives connections
/// `workers(t)`: one thread alone is the bottleneck at 1 000 connections on 2 cores, and
/// its own queueing would be counted as the service's latency.
fn on_threads<'a, T: Send>(
    args: &'a Args,
    part: impl Fn(awc::Client, std::ops::Range<usize>) -> LocalBoxFuture<'a, T> + Sync,
) -> (Vec<T>, Duration) {
    let started = Instant::now();
    let results = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..args.threads)
            .map(|t| {
                let part = &part;
                let (n, k) = (args.connections, args.threads);
                let workers = n * t / k..n * (t + 1) / k;
                scope.spawn(move || {
                    actix_web::rt::System::new()
                        .block_on(async move { part(client(args), workers).await })
                })
            })
            .collect();
        threads
            .into_iter()
            .filter_map(|thread| thread.join().ok())
            .collect()
    });
    (results, started.elapsed())
}

/// `connections` loops, each sending its next key as soon as the previous answer arrived.
fn closed_loop(args: &Args, key_of: &(dyn Fn(usize, u64) -> String + Sync)) -> (Samples, Duration) {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let (parts, elapsed) = on_threads(args, |client, workers| {
        Box::pin(async move {
            let client = &client;
            let loops = workers.map(|worker| async move {
                let mut samples = Samples::default();
                let mut i = 0u64;
                while Instant::now() < deadline {
                    timed(client, args, &key_of(worker, i), &mut samples).await;
                    i += 1;
                }
                samples
            });
            let mut all = Samples::default();
            for s in join_all(loops).await {
                all.merge(s);
            }
            all
        })
    });
    let mut all = Samples::default();
    for s in parts {
        all.merge(s);
    }
    (all, elapsed)
}

fn run(args: Args) -> Result<(), String> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    match args.scenario.as_str() {
        "new" => {
            let (samples, elapsed) = closed_loop(&args, &|w, i| format!("bench-{run_id}-{w}-{i}"));
            samples.report("new", elapsed);
        }
        "replay" => {
            // Finish a fixed set of payments first, then retry them over and over.
            let keys: Vec<String> = (0..args.replay_keys)
                .map(|i| format!("replay-{run_id}-{i}"))
                .collect();
            actix_web::rt::System::new().block_on(async {
                let client = client(&args);
                for chunk in keys.chunks(args.connections) {
                    join_all(chunk.iter().map(|k| post(&client, &args, k))).await;
                }
            });
            let (samples, elapsed) = closed_loop(&args, &|w, i| {
                keys[(w * 7919 + i as usize * 31) % keys.len()].clone()
            });
            samples.report("replay", elapsed);
        }
        "storm" => {
            let key = format!("storm-{run_id}");
            let sent = AtomicUsize::new(0);
            let (key, sent) = (&key, &sent);
            let args = &args;
            let (parts, elapsed) = on_threads(args, |client, workers| {
                Box::pin(async move {
                    let client = &client;
                    let loops = workers.take(args.storm).map(|_| async move {
                        let mut samples = Samples::default();
                        let mut bodies = Vec::new();
                        while sent.fetch_add(1, Ordering::Relaxed) < args.storm {
                            if let Some(body) = timed(client, args, key, &mut samples).await {
                                bodies.push(body);
                            }
                        }
                        (samples, bodies)
                    });
                    join_all(loops).await
                })
            });
            let mut all = Samples::default();
            let mut bodies = HashSet::new();
            let mut charge_ids = HashSet::new();
            for (samples, answers) in parts.into_iter().flatten() {
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
    if let Err(e) = run(args) {
        eprintln!("loadgen: {e}");
        std::process::exit(1);
    }
}
