//! The simulator over HTTP: the provider protocol of the contract, served by the same
//! [`Simulator`] core the service uses in-process. `provider-sim` runs it; tests start it
//! on port 0 and steer its faults.

use std::collections::VecDeque;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::http::StatusCode;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::in_process::InProcessProvider;
use super::simulator::Simulator;
use super::webhooks::WebhookDelivery;
use crate::provider::protocol::{
    CaptureRequest, ChargeRequest, DisputeStepRequest, PaymentProvider, PayoutRequest,
    ProviderError, RefundRequest, SettlementQuery,
};

/// Fault injection. Rates apply to every call; the `*_next` counters and `down` let tests
/// script exact sequences.
#[derive(Debug, Default)]
pub struct Faults {
    /// Latency of every answer of the simulator's, a refusal too (after the money has moved).
    pub latency_ms: AtomicU64,
    /// Answer 500 without charging, this share of calls (0.0–1.0, as parts per million).
    pub fail_rate_ppm: AtomicU32,
    /// Charge, then never answer, this share of calls.
    pub drop_rate_ppm: AtomicU32,
    /// Answer 500 without charging the next N calls.
    pub fail_next: AtomicU32,
    /// Charge, then never answer, the next N calls.
    pub drop_next: AtomicU32,
    /// Answer 503 to everything without charging.
    pub down: AtomicBool,
    /// Refuse the next calls, one each, with these 4xx statuses (in order), moving nothing.
    pub refuse_next: Mutex<VecDeque<u16>>,
    /// Charge calls that arrived over HTTP, whatever became of them.
    pub http_calls: AtomicU64,
    /// Money-moving calls being answered now, and the most there were at once.
    pub in_flight: AtomicU64,
    pub most_in_flight: AtomicU64,
}

impl Faults {
    pub fn rate_to_ppm(rate: f64) -> u32 {
        (rate.clamp(0.0, 1.0) * 1_000_000.0).round() as u32
    }

    fn take(counter: &AtomicU32) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    fn roll(ppm: &AtomicU32) -> bool {
        let ppm = ppm.load(Ordering::Relaxed);
        ppm > 0 && ((uuid::Uuid::new_v4().as_u128() >> 64) as u64 % 1_000_000) < u64::from(ppm)
    }

    fn should_fail(&self) -> bool {
        Self::take(&self.fail_next) || Self::roll(&self.fail_rate_ppm)
    }

    fn refusal(&self) -> Option<StatusCode> {
        let status = self
            .refuse_next
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop_front()?;
        StatusCode::from_u16(status).ok()
    }

    fn should_drop(&self) -> bool {
        Self::take(&self.drop_next) || Self::roll(&self.drop_rate_ppm)
    }

    /// Counts a call in [`Faults::in_flight`] until the guard is dropped.
    fn answering(&self) -> Answering<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        Answering(self)
    }
}

struct Answering<'a>(&'a Faults);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

struct SimState {
    simulator: Arc<Simulator>,
    /// The simulator with its webhook completion of pending charges: the same code the
    /// service runs in-process.
    provider: InProcessProvider,
    faults: Arc<Faults>,
}

fn error(status: StatusCode, message: &str) -> HttpResponse {
    HttpResponse::build(status).json(serde_json::json!({"error": {"message": message}}))
}

fn idempotency_key(req: &HttpRequest) -> Option<String> {
    let key = req.headers().get("idempotency-key")?.to_str().ok()?.trim();
    (!key.is_empty()).then(|| key.to_owned())
}

/// How long a dropped answer hangs: far longer than any client waits.
const DROP_HANG: Duration = Duration::from_secs(3600);

/// One money-moving call: faults first (nothing charged), then the simulator (charged
/// once per idempotency key), then maybe a dropped answer (charged, never answered). A
/// scripted refusal (`refuse_next`) answers its 4xx and moves nothing; a capture or cancel
/// the simulator refuses is answered 409.
async fn money_call<Req, Res, F>(
    state: &SimState,
    req: &HttpRequest,
    body: &[u8],
    call: F,
) -> HttpResponse
where
    Req: DeserializeOwned,
    Res: Serialize,
    F: AsyncFnOnce(&InProcessProvider, &str, &Req) -> Result<Res, ProviderError>,
{
    state.faults.http_calls.fetch_add(1, Ordering::SeqCst);
    let _answering = state.faults.answering();
    if state.faults.down.load(Ordering::SeqCst) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "simulated outage");
    }
    let Some(key) = idempotency_key(req) else {
        return error(StatusCode::BAD_REQUEST, "Idempotency-Key header required");
    };
    let request: Req = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("invalid request: {e}")),
    };
    if state.faults.should_fail() {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "simulated failure (nothing moved)",
        );
    }
    if let Some(status) = state.faults.refusal() {
        return error(status, "simulated refusal (nothing moved)");
    }
    let result = call(&state.provider, &key, &request).await;
    if result.is_ok() && state.faults.should_drop() {
        tracing::info!(%key, "simulated drop: money moved, not answering");
        actix_web::rt::time::sleep(DROP_HANG).await;
    }
    // The simulator's own answers, refusals included, take the latency.
    let latency = state.faults.latency_ms.load(Ordering::Relaxed);
    if latency > 0 {
        actix_web::rt::time::sleep(Duration::from_millis(latency)).await;
    }
    match result {
        Ok(result) => HttpResponse::Ok().json(result),
        Err(ProviderError::Refused(why)) => error(StatusCode::CONFLICT, &why),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

async fn create_charge(
    state: web::Data<SimState>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    money_call(
        &state,
        &req,
        &body,
        async |p: &InProcessProvider, key: &str, r: &ChargeRequest| p.create_charge(key, r).await,
    )
    .await
}

async fn create_refund(
    state: web::Data<SimState>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    money_call(
        &state,
        &req,
        &body,
        async |p: &InProcessProvider, key: &str, r: &RefundRequest| p.create_refund(key, r).await,
    )
    .await
}

async fn capture_charge(
    state: web::Data<SimState>,
    req: HttpRequest,
    charge_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    money_call(
        &state,
        &req,
        &body,
        async |p: &InProcessProvider, key: &str, r: &CaptureRequest| {
            p.capture_charge(key, &charge_id, r).await
        },
    )
    .await
}

async fn cancel_charge(
    state: web::Data<SimState>,
    req: HttpRequest,
    charge_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    money_call(
        &state,
        &req,
        &body,
        async |p: &InProcessProvider, key: &str, _: &serde_json::Value| {
            p.cancel_charge(key, &charge_id).await
        },
    )
    .await
}

async fn create_payout(
    state: web::Data<SimState>,
    req: HttpRequest,
    body: web::Bytes,
) -> HttpResponse {
    money_call(
        &state,
        &req,
        &body,
        async |p: &InProcessProvider, key: &str, r: &PayoutRequest| p.create_payout(key, r).await,
    )
    .await
}

/// `{"evidence": {"text"?: …}}`.
#[derive(serde::Deserialize)]
struct EvidenceBody {
    #[serde(default)]
    evidence: EvidenceText,
}

#[derive(serde::Deserialize, Default)]
struct EvidenceText {
    text: Option<String>,
}

async fn dispute_evidence(
    state: web::Data<SimState>,
    req: HttpRequest,
    dispute_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    money_call(
        &state,
        &req,
        &body,
        async |p: &InProcessProvider, key: &str, r: &EvidenceBody| {
            let step = DisputeStepRequest::Evidence {
                text: r.evidence.text.clone(),
            };
            p.dispute_step(key, &dispute_id, &step).await
        },
    )
    .await
}

async fn dispute_close(
    state: web::Data<SimState>,
    req: HttpRequest,
    dispute_id: web::Path<String>,
    body: web::Bytes,
) -> HttpResponse {
    money_call(
        &state,
        &req,
        &body,
        async |p: &InProcessProvider, key: &str, _: &serde_json::Value| {
            p.dispute_step(key, &dispute_id, &DisputeStepRequest::Close)
                .await
        },
    )
    .await
}

/// `GET /v1/settlements?created_gte=&created_lt=&limit=&starting_after=` (RFC 3339; `limit`
/// 1 to 1000, default 100; both bounds optional).
async fn settlements(state: web::Data<SimState>, req: HttpRequest) -> HttpResponse {
    let query = match settlement_query(req.query_string()) {
        Ok(query) => query,
        Err(why) => return error(StatusCode::BAD_REQUEST, &why),
    };
    match state.provider.settlements(&query).await {
        Ok(page) => HttpResponse::Ok().json(page),
        Err(e) => error(StatusCode::BAD_REQUEST, &e.to_string()),
    }
}

fn settlement_query(raw: &str) -> Result<SettlementQuery, String> {
    let mut query = SettlementQuery {
        created_gte: chrono::DateTime::UNIX_EPOCH.naive_utc(),
        created_lt: chrono::NaiveDateTime::MAX,
        limit: 100,
        starting_after: None,
    };
    let pairs = web::Query::<Vec<(String, String)>>::from_query(raw)
        .map_err(|e| format!("the query string could not be parsed: {e}"))?
        .into_inner();
    for (name, value) in pairs {
        let at = || {
            chrono::DateTime::parse_from_rfc3339(&value)
                .map(|t| t.naive_utc())
                .map_err(|e| format!("`{name}` is not RFC 3339: {e}"))
        };
        match name.as_str() {
            "created_gte" => query.created_gte = at()?,
            "created_lt" => query.created_lt = at()?,
            "limit" => {
                query.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or("`limit` must be 1 to 1000")?;
            }
            "starting_after" => query.starting_after = Some(value),
            other => return Err(format!("unknown parameter `{other}`")),
        }
    }
    Ok(query)
}

async fn list_payouts(state: web::Data<SimState>) -> HttpResponse {
    HttpResponse::Ok()
        .json(serde_json::json!({"object": "list", "data": state.simulator.payouts.all()}))
}

async fn list_charges(state: web::Data<SimState>) -> HttpResponse {
    HttpResponse::Ok()
        .json(serde_json::json!({"object": "list", "data": state.simulator.charges()}))
}

async fn list_refunds(state: web::Data<SimState>) -> HttpResponse {
    HttpResponse::Ok()
        .json(serde_json::json!({"object": "list", "data": state.simulator.refunds()}))
}

/// Serves the provider protocol on `listener` until stopped. With `webhooks`, pending
/// charges complete after the delay and are announced by a signed webhook.
pub fn serve(
    listener: TcpListener,
    simulator: Arc<Simulator>,
    faults: Arc<Faults>,
    webhooks: Option<(WebhookDelivery, Duration)>,
) -> std::io::Result<Server> {
    let mut provider = InProcessProvider::new(simulator.clone(), Duration::ZERO);
    if let Some((delivery, delay)) = webhooks {
        provider = provider.with_webhooks(delivery, delay);
    }
    let state = web::Data::new(SimState {
        simulator,
        provider,
        faults,
    });
    Ok(HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(web::PayloadConfig::new(64 * 1024))
            .route("/v1/charges", web::post().to(create_charge))
            .route("/v1/charges", web::get().to(list_charges))
            .route("/v1/charges/{id}/capture", web::post().to(capture_charge))
            .route("/v1/charges/{id}/cancel", web::post().to(cancel_charge))
            .route("/v1/refunds", web::post().to(create_refund))
            .route("/v1/refunds", web::get().to(list_refunds))
            .route("/v1/payouts", web::post().to(create_payout))
            .route("/v1/payouts", web::get().to(list_payouts))
            .route(
                "/v1/disputes/{id}/evidence",
                web::post().to(dispute_evidence),
            )
            .route("/v1/disputes/{id}/close", web::post().to(dispute_close))
            .route("/v1/settlements", web::get().to(settlements))
    })
    // A dropped answer hangs on purpose; don't let it hold up a stop.
    .shutdown_timeout(1)
    .listen(listener)?
    .run())
}
