//! Prometheus metrics, served at `GET /metrics` (unauthenticated, like the health checks:
//! it holds counts and latencies, never ids, keys or amounts).
//!
//! Every label value comes from a fixed set (a route *template*, an outcome enum, a
//! `&'static str`), never from request data, so the number of series stays bounded.
//! The helpers are free functions so any flow can count without reaching for the state:
//! `metrics::idempotency("payment", IdempotencyOutcome::Created)`,
//! `metrics::webhook(WebhookOutcome::Duplicate)`, `metrics::recovery(RecoveryAction::PaymentResumed)`.

use std::sync::LazyLock;
use std::time::Duration;

use actix_web::http::{Method, StatusCode};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// Seconds; from a fast in-process simulator up to the provider timeout and its retries.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    http_duration: HistogramVec,
    idempotency: IntCounterVec,
    provider_calls: IntCounterVec,
    provider_duration: HistogramVec,
    webhooks: IntCounterVec,
    recovery: IntCounterVec,
    webhook_deliveries: IntCounterVec,
    webhook_delivery_duration: HistogramVec,
    webhook_delivery_oldest_pending: IntGauge,
    pool_connections: IntGauge,
    pool_idle: IntGauge,
    pool_max: IntGauge,
    rate_limited: IntCounter,
    idempotency_polls: IntCounter,
    group_commit_batch: HistogramVec,
    group_commit_duration: HistogramVec,
    reconciliation_discrepancies: IntGaugeVec,
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    // The definitions are constants: a bad name is a programming error that the unit test
    // below catches, not something a request can cause.
    let metric = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric name");
    metric
}

/// A counter without labels.
fn total(registry: &Registry, name: &str, help: &str) -> IntCounter {
    let metric = IntCounter::new(name, help).expect("valid counter");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric name");
    metric
}

fn histogram(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
    let metric = HistogramVec::new(opts, labels).expect("valid histogram");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric name");
    metric
}

fn gauge(registry: &Registry, name: &str, help: &str) -> IntGauge {
    let metric = IntGauge::new(name, help).expect("valid gauge");
    registry
        .register(Box::new(metric.clone()))
        .expect("unique metric name");
    metric
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

impl Metrics {
    /// Every family registered, the known series at 0.
    fn new() -> Self {
        let r = Registry::new();
        let metrics = Metrics {
            http_requests: counter(
                &r,
                "http_requests_total",
                "HTTP requests answered, by method, route template and status.",
                &["method", "route", "status"],
            ),
            http_duration: histogram(
                &r,
                "http_request_duration_seconds",
                "Time to answer an HTTP request, by method and route template.",
                &["method", "route"],
            ),
            idempotency: counter(
                &r,
                "idempotency_outcomes_total",
                "What a request with an Idempotency-Key turned out to be: created (won the key), \
             replayed (got the stored final response), in_use (409, first still running), \
             reused (422, same key with a different request).",
                &["resource", "outcome"],
            ),
            provider_calls: counter(
                &r,
                "provider_calls_total",
                "Calls to the payment provider, by operation (charge, refund, capture, cancel) and \
             outcome (the provider's status, unknown, or refused: a final 4xx).",
                &["operation", "outcome"],
            ),
            provider_duration: histogram(
                &r,
                "provider_call_duration_seconds",
                "Latency of calls to the payment provider, by operation.",
                &["operation"],
            ),
            webhooks: counter(
                &r,
                "webhooks_total",
                "Inbound provider webhooks: accepted, duplicate (redelivery), rejected.",
                &["outcome"],
            ),
            recovery: counter(
                &r,
                "recovery_actions_total",
                "What the recovery worker did with abandoned work, by action.",
                &["action"],
            ),
            webhook_deliveries: counter(
                &r,
                "webhook_deliveries_total",
                "Delivery attempts to merchants' webhook endpoints, by outcome: succeeded, \
             retrying (failed, another attempt scheduled), failed (given up, or 410).",
                &["outcome"],
            ),
            webhook_delivery_duration: histogram(
                &r,
                "webhook_delivery_attempt_duration_seconds",
                "Time of one delivery attempt to a merchant's endpoint (lookup, connect, answer).",
                &[],
            ),
            reconciliation_discrepancies: {
                let metric = IntGaugeVec::new(
                    Opts::new(
                        "reconciliation_discrepancies",
                        "Open discrepancies between our records and the provider's settlement \
                         report, by kind (as stored: every instance shows the same).",
                    ),
                    &["kind"],
                )
                .expect("valid gauge");
                r.register(Box::new(metric.clone()))
                    .expect("unique metric name");
                metric
            },
            webhook_delivery_oldest_pending: gauge(
                &r,
                "webhook_delivery_oldest_pending_seconds",
                "Age of the oldest delivery still waiting for an enabled endpoint (0: none).",
            ),
            pool_connections: gauge(
                &r,
                "db_pool_connections",
                "Open database connections in the pool (idle and in use).",
            ),
            pool_idle: gauge(&r, "db_pool_idle_connections", "Idle database connections."),
            pool_max: gauge(&r, "db_pool_max_connections", "Pool size limit."),
            // No merchant label: ids never become label values (see the module docs).
            rate_limited: total(
                &r,
                "rate_limited_requests_total",
                "Requests answered 429 rate_limited: a merchant over RATE_LIMIT_PER_SECOND.",
            ),
            idempotency_polls: total(
                &r,
                "idempotency_polls_total",
                "Reads of a row by the duplicate waiting for a request with its key that runs in \
             another instance (one such duplicate per key and instance; the rest wait on it).",
            ),
            group_commit_batch: {
                let opts = HistogramOpts::new(
                    "db_group_commit_batch_size",
                    "Writes carried by one group-commit statement (PostgreSQL), by statement.",
                )
                .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]);
                let metric = HistogramVec::new(opts, &["statement"]).expect("valid histogram");
                r.register(Box::new(metric.clone()))
                    .expect("unique metric name");
                metric
            },
            group_commit_duration: histogram(
                &r,
                "db_group_commit_duration_seconds",
                "Time one group-commit batch took on its connection (PostgreSQL), by statement: \
             with one lane per statement, a batch forms while the one before it runs.",
                &["statement"],
            ),
            registry: r,
        };
        // Known series start at 0, so they are on the page (and `rate()` works) before the
        // first event.
        for outcome in [
            IdempotencyOutcome::Created,
            IdempotencyOutcome::Replayed,
            IdempotencyOutcome::InUse,
            IdempotencyOutcome::Reused,
        ] {
            metrics
                .idempotency
                .with_label_values(&["payment", outcome.as_str()]);
        }
        // Every operation with the outcomes it can have, and its latency.
        for (operation, statuses) in [
            (
                "charge",
                &["succeeded", "failed", "pending", "requires_capture"][..],
            ),
            ("refund", &["succeeded", "failed", "pending"][..]),
            ("capture", &["succeeded", "pending"][..]),
            ("cancel", &["canceled", "pending"][..]),
        ] {
            for outcome in statuses.iter().chain(&["unknown", "refused"]) {
                metrics
                    .provider_calls
                    .with_label_values(&[operation, outcome]);
            }
            metrics.provider_duration.with_label_values(&[operation]);
        }
        // The families of every request, with the main route's series, before any request.
        for status in ["201", "202"] {
            metrics
                .http_requests
                .with_label_values(&["POST", "/v1/payments", status]);
        }
        metrics
            .http_duration
            .with_label_values(&["POST", "/v1/payments"]);
        for outcome in ["succeeded", "retrying", "failed"] {
            metrics.webhook_deliveries.with_label_values(&[outcome]);
        }
        for outcome in [
            WebhookOutcome::Accepted,
            WebhookOutcome::Duplicate,
            WebhookOutcome::Rejected,
        ] {
            metrics.webhooks.with_label_values(&[outcome.as_str()]);
        }
        for action in RecoveryAction::ALL {
            metrics.recovery.with_label_values(&[action.as_str()]);
        }
        for kind in DISCREPANCY_KINDS {
            metrics
                .reconciliation_discrepancies
                .with_label_values(&[kind]);
        }
        metrics
    }

    fn render(&self) -> Result<String, prometheus::Error> {
        let families = self.registry.gather();
        let mut out = Vec::new();
        TextEncoder::new().encode(&families, &mut out)?;
        String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }
}

/// A method label from a fixed set (an odd extension method must not mint new series).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// One answered request. `route` is the matched template (`/v1/payments/{id}`) or
/// `unmatched`, never the raw path.
pub fn http_request(method: &Method, route: &str, status: StatusCode, elapsed: Duration) {
    let m = &*METRICS;
    let method = method_label(method);
    m.http_requests
        .with_label_values(&[method, route, status.as_str()])
        .inc();
    m.http_duration
        .with_label_values(&[method, route])
        .observe(elapsed.as_secs_f64());
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdempotencyOutcome {
    /// This request won the key and did the work.
    Created,
    /// The stored final response was replayed.
    Replayed,
    /// 409: the first request with the key was still running.
    InUse,
    /// 422: the key came with a different request.
    Reused,
}

impl IdempotencyOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Replayed => "replayed",
            Self::InUse => "in_use",
            Self::Reused => "reused",
        }
    }
}

/// `resource` is the kind of object the key creates: `"payment"`, `"refund"`.
pub fn idempotency(resource: &'static str, outcome: IdempotencyOutcome) {
    METRICS
        .idempotency
        .with_label_values(&[resource, outcome.as_str()])
        .inc();
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookOutcome {
    Accepted,
    Duplicate,
    Rejected,
}

impl WebhookOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Duplicate => "duplicate",
            Self::Rejected => "rejected",
        }
    }
}

pub fn webhook(outcome: WebhookOutcome) {
    METRICS
        .webhooks
        .with_label_values(&[outcome.as_str()])
        .inc();
}

/// What the recovery worker did: the `action` label of `recovery_actions_total`.
#[derive(Clone, Copy, Debug)]
pub enum RecoveryAction {
    PaymentResumed,
    RefundResumed,
    OperationResumed,
    PayoutResumed,
    AuthorizationExpired,
}

impl RecoveryAction {
    /// Every action, each on the page from the start.
    const ALL: [Self; 5] = [
        Self::PaymentResumed,
        Self::RefundResumed,
        Self::OperationResumed,
        Self::PayoutResumed,
        Self::AuthorizationExpired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PaymentResumed => "payment_resumed",
            Self::RefundResumed => "refund_resumed",
            Self::OperationResumed => "operation_resumed",
            Self::PayoutResumed => "payout_resumed",
            Self::AuthorizationExpired => "authorization_expired",
        }
    }
}

pub fn recovery(action: RecoveryAction) {
    METRICS.recovery.with_label_values(&[action.as_str()]).inc();
}

/// One attempt to deliver an event to a merchant's endpoint; `outcome` is `succeeded`,
/// `retrying` or `failed`.
pub fn webhook_delivery(outcome: &'static str, elapsed: Duration) {
    let m = &*METRICS;
    m.webhook_deliveries.with_label_values(&[outcome]).inc();
    m.webhook_delivery_duration
        .with_label_values::<&str>(&[])
        .observe(elapsed.as_secs_f64());
}

/// The age, in seconds, of the oldest delivery still waiting.
pub fn webhook_delivery_backlog(oldest_age_secs: i64) {
    METRICS.webhook_delivery_oldest_pending.set(oldest_age_secs);
}

/// The discrepancy kinds of reconciliation, each a series of its gauge from the start.
pub const DISCREPANCY_KINDS: [&str; 5] = [
    "missing_here",
    "missing_at_provider",
    "amount_mismatch",
    "currency_mismatch",
    "duplicate_at_provider",
];

/// The open discrepancies by kind, as stored (kinds not given are 0).
pub fn reconciliation_discrepancies(open: &[(String, i64)]) {
    for kind in DISCREPANCY_KINDS {
        let count = open.iter().find(|(k, _)| k == kind).map_or(0, |(_, n)| *n);
        METRICS
            .reconciliation_discrepancies
            .with_label_values(&[kind])
            .set(count);
    }
}

/// One provider call: `operation` is `"charge"` or `"refund"`; `outcome` the provider's
/// status (`succeeded`, `failed`, `pending`) or `unknown` (timeout, 5xx, broken connection).
pub fn provider_call(operation: &'static str, outcome: &'static str, elapsed: Duration) {
    let m = &*METRICS;
    m.provider_calls
        .with_label_values(&[operation, outcome])
        .inc();
    m.provider_duration
        .with_label_values(&[operation])
        .observe(elapsed.as_secs_f64());
}

/// One request refused with 429 `rate_limited`.
pub fn rate_limited() {
    METRICS.rate_limited.inc();
}

/// One read of a row by a duplicate waiting for another instance.
pub fn idempotency_poll() {
    METRICS.idempotency_polls.inc();
}

/// One group-commit statement of `size` writes (`statement`: `payment_claim`, …).
pub fn group_commit_batch(statement: &'static str, size: usize) {
    METRICS
        .group_commit_batch
        .with_label_values(&[statement])
        .observe(size as f64);
}

/// How long one group-commit batch of `statement` took, from its start to its outcome.
pub fn group_commit_duration(statement: &'static str, elapsed: Duration) {
    METRICS
        .group_commit_duration
        .with_label_values(&[statement])
        .observe(elapsed.as_secs_f64());
}

/// The pool as it is at scrape time.
pub fn observe_pool(state: diesel::r2d2::State, max_size: u32) {
    let m = &*METRICS;
    m.pool_connections.set(i64::from(state.connections));
    m.pool_idle.set(i64::from(state.idle_connections));
    m.pool_max.set(i64::from(max_size));
}

/// Everything in the Prometheus text exposition format.
pub fn render() -> Result<String, prometheus::Error> {
    METRICS.render()
}

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_defined_and_rendered() {
        http_request(
            &Method::GET,
            "/health/live",
            StatusCode::OK,
            Duration::from_millis(1),
        );
        idempotency("payment", IdempotencyOutcome::Created);
        webhook(WebhookOutcome::Accepted);
        recovery(RecoveryAction::PaymentResumed);
        provider_call("charge", "succeeded", Duration::from_millis(3));
        webhook_delivery("succeeded", Duration::from_millis(3));
        webhook_delivery_backlog(0);
        let text = render().unwrap();
        for family in [
            "http_requests_total",
            "http_request_duration_seconds_bucket",
            "idempotency_outcomes_total",
            "provider_calls_total",
            "provider_call_duration_seconds_bucket",
            "webhooks_total",
            "recovery_actions_total",
            "db_pool_connections",
            "db_pool_idle_connections",
            "webhook_deliveries_total",
            "webhook_delivery_attempt_duration_seconds_bucket",
            "webhook_delivery_oldest_pending_seconds",
            "rate_limited_requests_total",
            "idempotency_polls_total",
        ] {
            assert!(text.contains(family), "{family} missing from:\n{text}");
        }
    }

    /// Every family the contract names is on the page of a fresh instance: an alert on a
    /// series that is absent until its first event would fire falsely, or never.
    #[test]
    fn the_contracts_families_are_on_the_page_before_any_event() {
        // A fresh set, as a new instance has: the other tests record events in the global.
        let text = Metrics::new().render().unwrap();
        for family in [
            "# TYPE http_requests_total counter",
            "# TYPE http_request_duration_seconds histogram",
            "# TYPE idempotency_outcomes_total counter",
            "# TYPE provider_calls_total counter",
            "# TYPE provider_call_duration_seconds histogram",
            "# TYPE webhooks_total counter",
            "# TYPE recovery_actions_total counter",
        ] {
            assert!(text.contains(family), "{family} missing from:\n{text}");
        }
        for operation in ["charge", "refund", "capture", "cancel"] {
            for outcome in ["unknown", "refused"] {
                let series = format!(
                    "provider_calls_total{{operation=\"{operation}\",outcome=\"{outcome}\"}}"
                );
                assert!(text.contains(&series), "{series} missing from:\n{text}");
            }
        }
    }

    #[test]
    fn every_recovery_action_is_on_the_page_before_it_happens() {
        let text = render().unwrap();
        for action in RecoveryAction::ALL {
            let action = action.as_str();
            let series = format!("recovery_actions_total{{action=\"{action}\"}}");
            assert!(text.contains(&series), "{series} missing from:\n{text}");
        }
    }

    #[test]
    fn unknown_methods_share_one_label() {
        let odd = Method::from_bytes(b"BREW").unwrap();
        assert_eq!(method_label(&odd), "OTHER");
        assert_eq!(method_label(&Method::POST), "POST");
    }
}
