//! The problem responses of the OpenAPI document, written once: each set below is what a
//! kind of route can refuse, for `responses(...)` of its `#[utoipa::path]`. A set names the
//! errors themselves, so the status, the `code` and the `Retry-After` / `WWW-Authenticate`
//! headers of each response are the ones the service really answers with.
//!
//! Not here: the `404` of a list (each says which `starting_after` it did not find, in its
//! own annotation) and `500` (added to every operation by the document itself).

use std::collections::BTreeMap;

use actix_web::ResponseError;
use actix_web::http::header;
use utoipa::IntoResponses;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::{ContentBuilder, ObjectBuilder, Ref, RefOr, Response, ResponseBuilder, Type};

use crate::error::{ApiError, PROBLEM_JSON};

/// An error a route can answer, and what it means there.
type Problem = (ApiError, &'static str);

/// What any route that takes an API key can answer before it does anything else.
fn api_key() -> Vec<Problem> {
    vec![
        (
            ApiError::Unauthorized,
            "the `Authorization: Bearer` API key is missing or unknown",
        ),
        (
            ApiError::RateLimited {
                retry_after_secs: 1,
            },
            "this merchant sent more requests per second than the service allows; nothing was \
             done, retry after `Retry-After` seconds",
        ),
        (
            ApiError::ServiceUnavailable,
            "the database cannot be reached; retry after `Retry-After` seconds",
        ),
    ]
}

fn query() -> Vec<Problem> {
    vec![(
        ApiError::invalid("", ""),
        "a query parameter is unknown, repeated or not valid; `param` names it",
    )]
}

/// A request that takes no query parameters (a read or a delete of one object, the balance,
/// a POST) refuses any.
fn no_query() -> Vec<Problem> {
    vec![(
        ApiError::invalid("", ""),
        "a query parameter was sent, and this request takes none; `param` names it",
    )]
}

/// What reading a JSON body can refuse.
fn json_body() -> Vec<Problem> {
    vec![
        (
            ApiError::invalid("", ""),
            "the body is not a valid request; `param` names the field at fault",
        ),
        (
            ApiError::PayloadTooLarge { limit: 0 },
            "the body is over 64 KiB",
        ),
        (
            ApiError::UnsupportedMediaType,
            "the body is not `application/json` (or is compressed)",
        ),
    ]
}

/// What the `Idempotency-Key` header can refuse: `required` on the POSTs that move money.
fn idempotency_key(required: bool) -> Vec<Problem> {
    let mut problems = vec![
        (
            ApiError::IdempotencyKeyInvalid(""),
            "the `Idempotency-Key` header is sent twice, empty, too long or not visible ASCII",
        ),
        (
            ApiError::IdempotencyKeyInUse {
                retry_after_secs: 1,
            },
            "the first request with this key is still running; retry after `Retry-After` seconds",
        ),
        (
            ApiError::IdempotencyKeyReused,
            "this key was already used with a different request",
        ),
    ];
    if required {
        problems.push((
            ApiError::IdempotencyKeyMissing,
            "the `Idempotency-Key` header is missing",
        ));
    }
    problems
}

/// The problems of several sets, in one list.
fn all<const N: usize>(sets: [Vec<Problem>; N]) -> Vec<Problem> {
    sets.into_iter().flatten().collect()
}

/// The `{id}` of the path names nothing of the caller's.
fn not_found(meaning: &'static str) -> Vec<Problem> {
    vec![(ApiError::NotFound(String::new()), meaning)]
}

fn payment_not_found() -> Vec<Problem> {
    not_found("no such payment of yours (or `id` is not a payment id)")
}

fn endpoint_not_found() -> Vec<Problem> {
    not_found("no such webhook endpoint of yours")
}

/// A POST that moves money: API key, no query, JSON body, required `Idempotency-Key`.
fn money_post() -> Vec<Problem> {
    all([api_key(), no_query(), json_body(), idempotency_key(true)])
}

/// The responses of `problems`, one per status; the codes sharing a status are listed in its
/// description.
fn responses(problems: Vec<Problem>) -> BTreeMap<String, RefOr<Response>> {
    let mut by_status: BTreeMap<u16, Vec<Problem>> = BTreeMap::new();
    for problem in problems {
        by_status
            .entry(problem.0.status_code().as_u16())
            .or_default()
            .push(problem);
    }
    by_status
        .into_iter()
        .map(|(status, problems)| (status.to_string(), RefOr::T(response(&problems))))
        .collect()
}

/// One problem response for errors of the same status.
fn response(problems: &[Problem]) -> Response {
    let description = problems
        .iter()
        .map(|(error, meaning)| format!("`{}`: {meaning}", error.code()))
        .collect::<Vec<_>>()
        .join("; or ");
    let mut response = ResponseBuilder::new().description(description).content(
        PROBLEM_JSON,
        ContentBuilder::new()
            .schema(Some(Ref::from_schema_name("Problem")))
            .build(),
    );
    // Asked of the error responses themselves (not of a 500: building one logs it).
    let sends = |name| {
        problems.iter().any(|(error, _)| {
            !matches!(error, ApiError::Internal(_))
                && error.error_response().headers().contains_key(&name)
        })
    };
    let string = || ObjectBuilder::new().schema_type(Type::String);
    if sends(header::RETRY_AFTER) {
        response = response.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::Integer)
                        .minimum(Some(1)),
                ))
                .description(Some("Seconds to wait before retrying"))
                .build(),
        );
    }
    if problems.iter().any(|(error, _)| error.is_stored_refusal()) {
        response = response.header(
            "Idempotent-Replayed",
            HeaderBuilder::new()
                .schema(Some(ObjectBuilder::new().schema_type(Type::Boolean)))
                .description(Some(
                    "`true` when this refusal is the stored answer of an earlier request with \
                     the same key",
                ))
                .build(),
        );
    }
    if sends(header::WWW_AUTHENTICATE) {
        response = response.header(
            "WWW-Authenticate",
            HeaderBuilder::new()
                .schema(Some(string()))
                .description(Some("`Bearer`"))
                .build(),
        );
    }
    response.build()
}

/// Declares a set: a type for `responses(...)` whose responses are those of `$problems`.
macro_rules! problem_set {
    ($(#[$doc:meta])* $name:ident = $problems:expr) => {
        $(#[$doc])*
        pub struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                responses($problems)
            }
        }
    };
}

problem_set!(
    /// `GET /v1/balance`: 401, 429, 503, and 400 for a query.
    BalanceProblems = all([api_key(), no_query()])
);

problem_set!(
    /// `GET /v1/payments/{id}`.
    PaymentProblems = all([api_key(), no_query(), payment_not_found()])
);

problem_set!(
    /// `GET /v1/balance_transactions/{id}`.
    TransactionNotFoundProblems = all([
        api_key(),
        no_query(),
        not_found("no such balance transaction of yours (or `id` is not a `txn_` id)"),
    ])
);

problem_set!(
    /// `GET /v1/events/{id}`.
    EventNotFoundProblems = all([
        api_key(),
        no_query(),
        not_found("no such event of yours (or `id` is not an `evt_` id)"),
    ])
);

problem_set!(
    /// `GET` and `DELETE /v1/webhook_endpoints/{id}`.
    EndpointProblems = all([api_key(), no_query(), endpoint_not_found()])
);

problem_set!(
    /// A list: the API key's problems and 400 for its query parameters.
    ListProblems = all([api_key(), query()])
);

problem_set!(
    /// `POST /v1/payments`.
    CreatePaymentProblems = money_post()
);

problem_set!(
    /// `POST /v1/payments/{id}/capture`.
    CaptureProblems = all([
        money_post(),
        payment_not_found(),
        vec![
            (
                ApiError::PaymentNotCapturable(String::new()),
                "the payment is not `requires_capture`, its authorization expired, or another \
                 capture or cancel has it (kept as this key's answer)",
            ),
            (
                ApiError::AmountExceedsCapturable(String::new()),
                "`amount` is more than `amount_capturable`",
            ),
        ],
    ])
);

problem_set!(
    /// `POST /v1/payments/{id}/cancel`.
    CancelProblems = all([
        money_post(),
        payment_not_found(),
        vec![(
            ApiError::PaymentNotCancelable(String::new()),
            "the payment is not `requires_capture`, its authorization expired, or another \
             capture or cancel has it (kept as this key's answer)",
        )],
    ])
);

problem_set!(
    /// `POST /v1/payments/{id}/refunds`.
    RefundProblems = all([
        money_post(),
        payment_not_found(),
        vec![
            (
                ApiError::PaymentNotRefundable(String::new()),
                "the payment has not succeeded, or nothing of it is left to refund",
            ),
            (
                ApiError::PaymentDisputed(String::new()),
                "a dispute of the payment is open (`needs_response` or `under_review`)",
            ),
            (
                ApiError::AmountExceedsRefundable(String::new()),
                "`amount` is more than what is left to refund",
            ),
        ],
    ])
);

problem_set!(
    /// `POST /v1/payouts`.
    PayoutProblems = all([
        money_post(),
        vec![(
            ApiError::InsufficientBalance(String::new()),
            "`amount` is more than the available balance in `currency` (kept as this key's answer)",
        )],
    ])
);

problem_set!(
    /// `GET /v1/payouts/{id}`.
    PayoutNotFoundProblems = all([
        api_key(),
        no_query(),
        not_found("no such payout of yours (or `id` is not a payout id)"),
    ])
);

problem_set!(
    /// `POST /v1/disputes/{id}` and `POST /v1/disputes/{id}/close`.
    DisputeStepProblems = all([
        money_post(),
        not_found("no such dispute of yours (or `id` is not a dispute id)"),
        vec![(
            ApiError::DisputeNotEditable(String::new()),
            "the dispute is no longer `needs_response`, or another step on it is at the \
             provider (kept as this key's answer)",
        )],
    ])
);

problem_set!(
    /// `GET /v1/disputes/{id}`.
    DisputeNotFoundProblems = all([
        api_key(),
        no_query(),
        not_found("no such dispute of yours (or `id` is not a dispute id)"),
    ])
);

/// A webhook endpoint POST: its `Idempotency-Key` is optional.
fn endpoint_post() -> Vec<Problem> {
    all([api_key(), no_query(), json_body(), idempotency_key(false)])
}

problem_set!(
    /// `POST /v1/webhook_endpoints`.
    NewEndpointProblems = endpoint_post()
);

problem_set!(
    /// The POSTs to `/v1/webhook_endpoints/{id}` and below.
    EndpointPostProblems = all([endpoint_post(), endpoint_not_found()])
);

problem_set!(
    /// `POST /v1/webhooks/provider`: signed by the provider, no API key, never rate limited.
    ProviderWebhookProblems = vec![
        (
            ApiError::invalid("", ""),
            "the body is signed but is not an event",
        ),
        (
            ApiError::InvalidSignature(""),
            "the `webhook-*` headers are missing, malformed, too old, or the signature does \
             not match",
        ),
        (
            ApiError::WebhookIdConflict,
            "this `webhook-id` was received before with another body",
        ),
        (
            ApiError::PayloadTooLarge { limit: 0 },
            "the body is over 64 KiB",
        ),
        (ApiError::UnsupportedMediaType, "the body is compressed"),
        (
            ApiError::ServiceUnavailable,
            "the database cannot be reached; nothing was recorded, deliver it again",
        ),
    ]
);

problem_set!(
    /// `GET /health/ready`.
    ReadinessProblems = vec![(
        ApiError::ServiceUnavailable,
        "the database did not answer within 2 s",
    )]
);

/// The 500 every operation can answer.
pub fn internal_error() -> Response {
    response(&[(
        ApiError::internal(""),
        "something went wrong on our side; the body reveals no internals",
    )])
}
