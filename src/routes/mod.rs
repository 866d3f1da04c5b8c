//! HTTP only: extract, authenticate, call one flow, answer.

pub mod health;
pub mod input;
pub mod payments;
pub mod refunds;
pub mod webhooks;

use actix_web::{HttpResponse, web};

use crate::error::ApiError;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/payments")
            .route(web::post().to(payments::create))
            .route(web::get().to(payments::list))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/v1/payments/{id}")
            .route(web::get().to(payments::get))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/v1/payments/{id}/refunds")
            .route(web::post().to(refunds::create))
            .route(web::get().to(refunds::list))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/v1/webhooks/provider")
            .route(web::post().to(webhooks::provider))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/health/live")
            .route(web::get().to(health::live))
            .default_service(web::to(method_not_allowed)),
    )
    .service(
        web::resource("/health/ready")
            .route(web::get().to(health::ready))
            .default_service(web::to(method_not_allowed)),
    );
}

pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound("no such route".to_owned()))
}

async fn method_not_allowed() -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed)
}
