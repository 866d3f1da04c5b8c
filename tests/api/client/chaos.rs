//! The promise, end to end: a thousand payments made with the client through a network that
//! resets connections, drops answers the service already sent, stalls and delays, end with
//! exactly one charge each at the provider (counted in its ledger), and every call returns
//! the final payment. Then the same with the service restarted in the middle of the run.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use payments_client::{
    Client, CreatePayment, ListPayments, Payment, PaymentStatus, Response, RetryPolicy,
    TryStreamExt,
};

use super::proxy::{Chaos, ChaosProxy, Stats};
use crate::support::{Service, TestProvider, spawn_provider};

const PAYMENTS: usize = 1000;
const CONCURRENCY: usize = 32;

fn chaos() -> Chaos {
    Chaos {
        reset_on_connect: 30,
        reset_after_request: 30,
        drop_answer: 50,
        stall_answer: 10,
        stall: Duration::from_millis(2500),
        delay_answer: 100,
        max_delay: Duration::from_millis(300),
    }
}

/// A client that gives up on an attempt after 1.5 s (the proxy's stalls last 2.5 s).
fn chaos_client(url: &str, api_key: &str) -> Client {
    Client::builder(url, api_key)
        .timeout(Duration::from_millis(1500))
        .retry_policy(
            RetryPolicy::default()
                .max_attempts(40)
                .max_elapsed(Duration::from_secs(120))
                .initial_delay(Duration::from_millis(20))
                .max_delay(Duration::from_millis(500)),
        )
        .build()
        .expect("client")
}

async fn start(provider: &TestProvider) -> Service {
    Service::start(Some(provider), |s| {
        s.processing_lease = Duration::from_secs(2);
        s.recovery_interval = Duration::from_millis(500);
        s.idempotency_wait = Duration::from_millis(500);
    })
    .await
}

/// Makes the payments, `CONCURRENCY` at a time; `done` counts finished calls.
async fn pay_all(
    client: &Client,
    done: &AtomicUsize,
) -> Vec<(usize, Result<Response<Payment>, payments_client::Error>)> {
    futures_util::stream::iter(0..PAYMENTS)
        .map(|n| async move {
            let params = CreatePayment::new(100 + n as i64, "usd", "pm_card_visa")
                .metadata("n", n.to_string());
            let result = client
                .create_payment(&params)
                .wait_until_final(Duration::from_secs(120))
                .send()
                .await;
            done.fetch_add(1, Ordering::SeqCst);
            (n, result)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

/// Every call returned its final payment, and the provider's ledger holds exactly one
/// charge per payment, for its amount.
async fn assert_exactly_once(
    results: Vec<(usize, Result<Response<Payment>, payments_client::Error>)>,
    provider: &TestProvider,
    client: &Client,
    stats: &Stats,
) {
    let mut payments = HashMap::new();
    let (mut attempts, mut replayed) = (0, 0);
    for (n, result) in results {
        let response = result.unwrap_or_else(|e| panic!("payment {n} failed: {e}"));
        assert_eq!(response.status, 201, "payment {n}");
        let payment = response.data;
        assert_eq!(payment.status, PaymentStatus::Succeeded, "payment {n}");
        assert_eq!(payment.amount, 100 + n as i64);
        assert_eq!(payment.metadata.get("n"), Some(&n.to_string()));
        attempts += response.attempts;
        replayed += usize::from(response.replayed);
        assert!(
            payments.insert(payment.id.clone(), payment).is_none(),
            "two calls got one payment"
        );
    }
    assert_eq!(payments.len(), PAYMENTS);

    let charges = provider.simulator.charges();
    let mut charged = HashSet::new();
    for charge in &charges {
        assert!(
            charged.insert(charge.reference.clone()),
            "{} was charged twice",
            charge.reference
        );
        let payment = payments
            .get(&charge.reference)
            .unwrap_or_else(|| panic!("a charge for no payment: {charge:?}"));
        assert_eq!(charge.amount, payment.amount);
        assert_eq!(
            payment.provider_charge_id.as_deref(),
            Some(charge.id.as_str())
        );
    }
    assert_eq!(charges.len(), PAYMENTS, "one charge per payment");

    // What the service lists agrees (read through the same faulty network, page by page).
    let listed: HashSet<String> = client
        .stream_payments(ListPayments {
            limit: Some(100),
            ..Default::default()
        })
        .map_ok(|p| p.id)
        .try_collect()
        .await
        .expect("the list");
    assert_eq!(listed, payments.keys().cloned().collect::<HashSet<_>>());

    eprintln!(
        "{PAYMENTS} payments: {attempts} requests, {replayed} answered by replay, {} provider charge calls; proxy: {}",
        provider.simulator.charge_calls(),
        stats.summary()
    );
    // The faults really happened, and the client really had to retry through them.
    for (what, counter) in [
        ("reset on connect", &stats.reset_on_connect),
        ("reset after request", &stats.reset_after_request),
        ("dropped answers", &stats.dropped_answers),
        ("stalled answers", &stats.stalled_answers),
        ("delayed answers", &stats.delayed_answers),
    ] {
        assert!(Stats::get(counter) > 0, "no {what}: {}", stats.summary());
    }
    assert!(attempts as usize > PAYMENTS);
    assert!(
        replayed > 0,
        "no call needed the stored answer of an earlier attempt"
    );
}

fn upstream(service: &Service) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], service.port))
}

#[actix_web::test]
async fn a_thousand_payments_through_a_lossy_network_charge_once_each() {
    let provider = spawn_provider().await;
    let service = start(&provider).await;
    let proxy = ChaosProxy::start(upstream(&service), chaos()).await;
    let client = chaos_client(&proxy.url, &service.api_key);

    let done = AtomicUsize::new(0);
    let results = pay_all(&client, &done).await;

    assert_exactly_once(results, &provider, &client, &proxy.stats).await;
}

#[actix_web::test]
async fn a_thousand_payments_charge_once_each_across_a_restart_of_the_service() {
    let provider = spawn_provider().await;
    let mut service = start(&provider).await;
    let proxy = ChaosProxy::start(upstream(&service), chaos()).await;
    let client = chaos_client(&proxy.url, &service.api_key);

    let done = Arc::new(AtomicUsize::new(0));
    let restart = async {
        while done.load(Ordering::SeqCst) < PAYMENTS * 3 / 10 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let at = done.load(Ordering::SeqCst);
        let started = Instant::now();
        service.restart(Duration::from_secs(1)).await;
        (at, started.elapsed())
    };
    let ((at, took), results) = tokio::join!(restart, pay_all(&client, &done));
    eprintln!("restarted after {at} payments, down for {took:?}");
    assert!(at < PAYMENTS, "the restart came after the run");
    assert!(
        Stats::get(&proxy.stats.upstream_refused) > 0,
        "nobody called while it was down"
    );

    assert_exactly_once(results, &provider, &client, &proxy.stats).await;
}
