//! Load generator for `scripts/bench.sh`: drives a running payments-api over HTTP and prints,
//! per scenario, requests/s, p50, p99 and the non-2xx count.
//!
//!   cargo bench --bench loadgen -- --url URL[,URL…] --key KEY --scenario new|replay|storm
//!       [--connections 64] [--seconds 10] [--storm 500] [--replay-keys 1000]
//!
//! With several URLs (instances of one service on one database) the requests go round
//! robin over them. `storm` sends `--storm` requests with one idempotency key, at most
//! `--connections` at a time.

use std::cell::Cell;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

struct Args {
    urls: Vec<String>,
    key: String,
    scenario: String,
    connections: usize,
    seconds: u64,
    storm: usize,
    replay_keys: usize,
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
            other => return Err(format!("unknown argument {other}")),
        }
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
            "RESULT scenario={scenario} requests={n} rps={:.0} p50_ms={:.2} p99_ms={:.2} non_2xx={}{} errors={}",
            n as f64 / elapsed.as_secs_f64(),
            self.percentile(0.50),
            self.percentile(0.99),
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

/// `connections` loops, each sending its next key as soon as the previous answer arrived.
async fn closed_loop(
    args: &Args,
    client: &awc::Client,
    key_of: impl Fn(usize, u64) -> String,
) -> (Samples, Duration) {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let workers = (0..args.connections).map(|worker| {
        let key_of = &key_of;
        async move {
            let mut samples = Samples::default();
            let mut i = 0u64;
            while Instant::now() < deadline {
                timed(client, args, &key_of(worker, i), &mut samples).await;
                i += 1;
            }
            samples
        }
    });
    let mut all = Samples::default();
    for s in join_all(workers).await {
        all.merge(s);
    }
    (all, started.elapsed())
}

async fn run(args: Args) -> Result<(), String> {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(30))
        .connector(awc::Connector::new().limit(args.connections.max(args.storm) + 8))
        .finish();
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    match args.scenario.as_str() {
        "new" => {
            let (samples, elapsed) =
                closed_loop(&args, &client, |w, i| format!("bench-{run_id}-{w}-{i}")).await;
            samples.report("new", elapsed);
        }
        "replay" => {
            // Finish a fixed set of payments first, then retry them over and over.
            let keys: Vec<String> = (0..args.replay_keys)
                .map(|i| format!("replay-{run_id}-{i}"))
                .collect();
            for chunk in keys.chunks(args.connections) {
                join_all(chunk.iter().map(|k| post(&client, &args, k))).await;
            }
            let (samples, elapsed) = closed_loop(&args, &client, |w, i| {
                keys[(w * 7919 + i as usize * 31) % keys.len()].clone()
            })
            .await;
            samples.report("replay", elapsed);
        }
        "storm" => {
            let key = format!("storm-{run_id}");
            let started = Instant::now();
            let sent = Cell::new(0);
            let workers = (0..args.connections.min(args.storm)).map(|_| async {
                let mut samples = Samples::default();
                let mut bodies = Vec::new();
                while sent.get() < args.storm {
                    sent.set(sent.get() + 1);
                    if let Some(body) = timed(&client, &args, &key, &mut samples).await {
                        bodies.push(body);
                    }
                }
                (samples, bodies)
            });
            let results = join_all(workers).await;
            let elapsed = started.elapsed();
            let mut all = Samples::default();
            let mut bodies = HashSet::new();
            let mut charge_ids = HashSet::new();
            for (samples, answers) in results {
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
    if let Err(e) = actix_web::rt::System::new().block_on(run(args)) {
        eprintln!("loadgen: {e}");
        std::process::exit(1);
    }
}
