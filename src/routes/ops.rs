//! Operating the service: metrics, the OpenAPI document and its docs page.
//! None of these need an API key (they reveal no merchant data); keep `/metrics` off the
//! public internet at the load balancer if its counts are sensitive to you.

use std::sync::LazyLock;

use actix_web::http::header;
use actix_web::{HttpResponse, ResponseError, web};
use utoipa_swagger_ui::{Config, SwaggerUi};

use crate::error::ApiError;
use crate::metrics;
use crate::state::AppState;

/// Prometheus metrics in the text exposition format.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "get_metrics",
    tag = "operations",
    description = "Prometheus text format: `http_requests_total`, `http_request_duration_seconds`, \
        `idempotency_outcomes_total`, `provider_calls_total`, `provider_call_duration_seconds`, \
        `webhooks_total`, `recovery_actions_total`, `db_pool_*`. Not authenticated.",
    security(()),
    responses(
        (status = 200, description = "Metrics", content_type = "text/plain", body = String),
    )
)]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let pool = state.db.pool();
    metrics::observe_pool(pool.state(), pool.max_size());
    match metrics::render() {
        Ok(text) => HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, metrics::CONTENT_TYPE))
            .body(text),
        Err(e) => ApiError::internal(format!("cannot render metrics: {e}")).error_response(),
    }
}

/// The document is built from the code once, on first use.
static OPENAPI_JSON: LazyLock<Result<String, String>> =
    LazyLock::new(|| super::document().to_json().map_err(|e| e.to_string()));

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "get_openapi_document",
    tag = "operations",
    security(()),
    responses(
        (status = 200, description = "The OpenAPI 3 document of this API", content_type = "application/json", body = Object),
    )
)]
pub async fn openapi_json() -> HttpResponse {
    match &*OPENAPI_JSON {
        Ok(json) => HttpResponse::Ok()
            .content_type("application/json")
            .body(json.clone()),
        Err(e) => {
            ApiError::internal(format!("cannot render the OpenAPI document: {e}")).error_response()
        }
    }
}

/// The API docs page (Swagger UI, served from the binary: it loads nothing from the internet).
#[utoipa::path(
    get,
    path = "/docs",
    operation_id = "get_docs_page",
    tag = "operations",
    security(()),
    responses(
        (status = 308, description = "Redirect to `/docs/`, the page itself",
            headers(("Location" = String, description = "`/docs/`"))),
    )
)]
pub async fn docs() -> HttpResponse {
    HttpResponse::PermanentRedirect()
        .insert_header((header::LOCATION, "/docs/"))
        .finish()
}

/// Swagger UI's files under `/docs/`, reading `/openapi.json`. The online validator badge
/// is switched off: it would call out to the internet.
pub fn swagger_ui() -> SwaggerUi {
    SwaggerUi::new("/docs/{_:.*}").config(Config::new(["/openapi.json"]).validator_url("none"))
}
