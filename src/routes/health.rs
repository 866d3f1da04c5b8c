use actix_web::{HttpResponse, web};
use diesel::connection::SimpleConnection;

use crate::error::ApiError;
use crate::startup::AppState;

pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

/// 200 when the database answers, else 503.
pub async fn ready(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    state
        .db
        .run(|conn| conn.batch_execute("SELECT 1"))
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "readiness check failed");
            ApiError::ServiceUnavailable
        })?;
    Ok(HttpResponse::Ok().json(serde_json::json!({"status": "ready"})))
}
