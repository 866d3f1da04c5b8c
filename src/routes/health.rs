use std::time::Duration;

use actix_web::{HttpResponse, web};
use diesel::connection::SimpleConnection;

use crate::error::ApiError;
use crate::state::AppState;

/// Readiness answers within this, whatever the database does (a load balancer's probe
/// timeout is typically a few seconds).
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The process is running.
#[utoipa::path(
    get,
    path = "/health/live",
    operation_id = "check_liveness",
    tag = "operations",
    security(()),
    responses((status = 200, description = "Alive", body = Object, example = json!({"status": "ok"}))),
)]
pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// 200 when the database answers within 2 s, else 503.
#[utoipa::path(
    get,
    path = "/health/ready",
    operation_id = "check_readiness",
    tag = "operations",
    security(()),
    responses(
        (status = 200, description = "Ready: the database answered", body = Object, example = json!({"status": "ready"})),
        super::problems::ReadinessProblems,
    )
)]
pub async fn ready(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let check = state.db.run(|conn| conn.batch_execute("SELECT 1"));
    match actix_web::rt::time::timeout(READY_TIMEOUT, check).await {
        Ok(Ok(())) => Ok(HttpResponse::Ok().json(serde_json::json!({"status": "ready"}))),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness check failed");
            Err(ApiError::ServiceUnavailable)
        }
        Err(_) => {
            tracing::warn!(
                timeout_ms = READY_TIMEOUT.as_millis() as u64,
                "readiness check timed out"
            );
            Err(ApiError::ServiceUnavailable)
        }
    }
}
