//! Every error the API answers, as RFC 9457 problem details with a stable `code`.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

pub const PROBLEM_JSON: &str = "application/problem+json";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{detail}")]
    InvalidRequest {
        detail: String,
        param: Option<String>,
    },
    #[error("this request requires an Idempotency-Key header")]
    IdempotencyKeyMissing,
    #[error("{0}")]
    IdempotencyKeyInvalid(&'static str),
    #[error("missing or invalid API key")]
    Unauthorized,
    #[error("{0}")]
    InvalidSignature(&'static str),
    #[error("{0}")]
    NotFound(String),
    #[error("the first request with this Idempotency-Key is still being processed; retry later")]
    IdempotencyKeyInUse { retry_after_secs: u64 },
    #[error("{0}")]
    PaymentNotRefundable(String),
    #[error("this webhook id was already received with a different body")]
    WebhookIdConflict,
    #[error("the request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("the request body must be JSON (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("this Idempotency-Key was already used with a different request")]
    IdempotencyKeyReused,
    #[error("{0}")]
    AmountExceedsRefundable(String),
    /// A payout larger than the available balance in its currency.
    #[error("{0}")]
    InsufficientBalance(String),
    #[error("{0}")]
    PaymentNotCapturable(String),
    #[error("{0}")]
    PaymentNotCancelable(String),
    #[error("{0}")]
    AmountExceedsCapturable(String),
    /// A refund of a payment whose dispute is open.
    #[error("{0}")]
    PaymentDisputed(String),
    /// Evidence or close for a dispute that is no longer `needs_response`.
    #[error("{0}")]
    DisputeNotEditable(String),
    #[error("the database is unavailable; retry later")]
    ServiceUnavailable,
    #[error("too many requests for this merchant (over RATE_LIMIT_PER_SECOND); retry later")]
    RateLimited { retry_after_secs: u64 },
    /// The cause is logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
}

/// An RFC 9457 problem details body, as every error is answered.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(example = json!({"type": "https://payments-api.dev/problems/invalid_request",
    "title": "Invalid request", "status": 400, "detail": "`amount` is required",
    "code": "invalid_request", "param": "amount"}))]
pub struct Problem<'a> {
    /// A URI naming the problem type.
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: String,
    /// Stable, machine-readable, e.g. `invalid_request`; each operation's responses name
    /// the codes it can answer.
    code: &'a str,
    /// The request field at fault, where one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    param: Option<&'a str>,
}

impl ApiError {
    /// A refusal decided after the key was claimed, and so stored as the key's answer and
    /// replayed (docs/api.md, "Refusals are answers too"): the only errors
    /// [`crate::idempotency::Answer::refusal`] takes, and the ones the API document marks
    /// `Idempotent-Replayed`.
    pub fn is_stored_refusal(&self) -> bool {
        matches!(
            self,
            Self::PaymentNotRefundable(_)
                | Self::PaymentNotCapturable(_)
                | Self::PaymentNotCancelable(_)
                | Self::PaymentDisputed(_)
                | Self::DisputeNotEditable(_)
                | Self::AmountExceedsRefundable(_)
                | Self::AmountExceedsCapturable(_)
                | Self::InsufficientBalance(_)
        )
    }

    /// A list's `starting_after` that names none of the caller's `what`s (another
    /// merchant's object is a 404, docs/api.md).
    pub fn unknown_cursor(what: &str) -> Self {
        Self::NotFound(format!("`starting_after` names no {what} of yours"))
    }

    pub fn invalid(param: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::InvalidRequest {
            detail: detail.into(),
            param: Some(param.into()),
        }
    }

    pub fn internal(cause: impl std::fmt::Display) -> Self {
        Self::Internal(cause.to_string())
    }

    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest { .. } => "invalid_request",
            Self::IdempotencyKeyMissing => "idempotency_key_missing",
            Self::IdempotencyKeyInvalid(_) => "idempotency_key_invalid",
            Self::Unauthorized => "unauthorized",
            Self::InvalidSignature(_) => "invalid_signature",
            Self::NotFound(_) => "not_found",
            Self::IdempotencyKeyInUse { .. } => "idempotency_key_in_use",
            Self::PaymentNotRefundable(_) => "payment_not_refundable",
            Self::WebhookIdConflict => "webhook_id_conflict",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::AmountExceedsRefundable(_) => "amount_exceeds_refundable",
            Self::InsufficientBalance(_) => "insufficient_balance",
            Self::PaymentNotCapturable(_) => "payment_not_capturable",
            Self::PaymentNotCancelable(_) => "payment_not_cancelable",
            Self::AmountExceedsCapturable(_) => "amount_exceeds_capturable",
            Self::PaymentDisputed(_) => "payment_disputed",
            Self::DisputeNotEditable(_) => "dispute_not_editable",
            Self::ServiceUnavailable => "service_unavailable",
            Self::RateLimited { .. } => "rate_limited",
            Self::Internal(_) => "internal_error",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::InvalidRequest { .. } => "Invalid request",
            Self::IdempotencyKeyMissing => "Idempotency-Key missing",
            Self::IdempotencyKeyInvalid(_) => "Idempotency-Key invalid",
            Self::Unauthorized => "Unauthorized",
            Self::InvalidSignature(_) => "Invalid webhook signature",
            Self::NotFound(_) => "Not found",
            Self::IdempotencyKeyInUse { .. } => "Idempotency-Key in use",
            Self::PaymentNotRefundable(_) => "Payment not refundable",
            Self::WebhookIdConflict => "Webhook id conflict",
            Self::PayloadTooLarge { .. } => "Payload too large",
            Self::UnsupportedMediaType => "Unsupported media type",
            Self::IdempotencyKeyReused => "Idempotency-Key reused",
            Self::AmountExceedsRefundable(_) => "Amount exceeds refundable",
            Self::InsufficientBalance(_) => "Insufficient balance",
            Self::PaymentNotCapturable(_) => "Payment not capturable",
            Self::PaymentNotCancelable(_) => "Payment not cancelable",
            Self::AmountExceedsCapturable(_) => "Amount exceeds capturable",
            Self::PaymentDisputed(_) => "Payment disputed",
            Self::DisputeNotEditable(_) => "Dispute not editable",
            Self::ServiceUnavailable => "Service unavailable",
            Self::RateLimited { .. } => "Rate limited",
            Self::Internal(_) => "Internal server error",
        }
    }

    fn detail(&self) -> String {
        match self {
            Self::Internal(_) => "an unexpected error occurred; it has been logged".to_owned(),
            other => other.to_string(),
        }
    }

    /// The problem document this error answers with; stored refusals replay it verbatim.
    pub fn problem_json(&self) -> String {
        let code = self.code();
        let problem = Problem {
            kind: format!("https://payments-api.dev/problems/{code}"),
            title: self.title(),
            status: self.status_code().as_u16(),
            detail: self.detail(),
            code,
            param: self.param(),
        };
        // Serialising a struct of strings cannot fail; fall back to a fixed body regardless.
        serde_json::to_string(&problem).unwrap_or_else(|_| {
            r#"{"type":"about:blank","title":"Internal server error","status":500,"code":"internal_error"}"#.to_owned()
        })
    }

    fn param(&self) -> Option<&str> {
        match self {
            Self::InvalidRequest { param, .. } => param.as_deref(),
            _ => None,
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::InvalidRequest { .. }
            | Self::IdempotencyKeyMissing
            | Self::IdempotencyKeyInvalid(_) => StatusCode::BAD_REQUEST,
            Self::Unauthorized | Self::InvalidSignature(_) => StatusCode::UNAUTHORIZED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::IdempotencyKeyInUse { .. }
            | Self::PaymentNotRefundable(_)
            | Self::PaymentNotCapturable(_)
            | Self::PaymentNotCancelable(_)
            | Self::PaymentDisputed(_)
            | Self::DisputeNotEditable(_)
            | Self::WebhookIdConflict => StatusCode::CONFLICT,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::IdempotencyKeyReused
            | Self::AmountExceedsRefundable(_)
            | Self::InsufficientBalance(_)
            | Self::AmountExceedsCapturable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if let Self::Internal(cause) = self {
            tracing::error!(%cause, "internal error");
        }
        let mut response = HttpResponse::build(status);
        response.insert_header((header::CONTENT_TYPE, PROBLEM_JSON));
        match self {
            Self::IdempotencyKeyInUse { retry_after_secs }
            | Self::RateLimited { retry_after_secs } => {
                response.insert_header((header::RETRY_AFTER, retry_after_secs.to_string()));
            }
            Self::ServiceUnavailable => {
                response.insert_header((header::RETRY_AFTER, "1"));
            }
            Self::Unauthorized => {
                response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
            }
            _ => {}
        }
        response.body(self.problem_json())
    }
}
