//! What can go wrong: the API's problem details as a typed [`Problem`], the network, or an
//! answer that does not parse. Every [`Error`] carries the `Idempotency-Key` of its call, so
//! a caller who gives up can retry later with the same key and still never pay twice.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// The stable, machine-readable `code` of a problem (docs/api.md). Codes this version does
/// not know arrive as [`ErrorCode::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    InvalidRequest,
    IdempotencyKeyMissing,
    IdempotencyKeyInvalid,
    Unauthorized,
    InvalidSignature,
    NotFound,
    IdempotencyKeyInUse,
    PaymentNotRefundable,
    PaymentNotCapturable,
    PaymentNotCancelable,
    /// A refund of a payment whose dispute is open (`needs_response` or `under_review`).
    PaymentDisputed,
    /// Evidence or a close for a dispute that is no longer `needs_response`, that another
    /// step holds, or whose step the provider refused (the key's final answer).
    DisputeNotEditable,
    WebhookIdConflict,
    PayloadTooLarge,
    UnsupportedMediaType,
    IdempotencyKeyReused,
    AmountExceedsRefundable,
    AmountExceedsCapturable,
    /// A payout of more than is available in its currency (the key's final answer).
    InsufficientBalance,
    RateLimited,
    ServiceUnavailable,
    InternalError,
    /// A code this client does not know, or `http_<status>` for an error answer that was
    /// not a problem document (e.g. from a proxy in between).
    Other(String),
}

impl ErrorCode {
    pub fn as_str(&self) -> &str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::IdempotencyKeyMissing => "idempotency_key_missing",
            Self::IdempotencyKeyInvalid => "idempotency_key_invalid",
            Self::Unauthorized => "unauthorized",
            Self::InvalidSignature => "invalid_signature",
            Self::NotFound => "not_found",
            Self::IdempotencyKeyInUse => "idempotency_key_in_use",
            Self::PaymentNotRefundable => "payment_not_refundable",
            Self::PaymentNotCapturable => "payment_not_capturable",
            Self::PaymentNotCancelable => "payment_not_cancelable",
            Self::PaymentDisputed => "payment_disputed",
            Self::DisputeNotEditable => "dispute_not_editable",
            Self::WebhookIdConflict => "webhook_id_conflict",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::AmountExceedsRefundable => "amount_exceeds_refundable",
            Self::AmountExceedsCapturable => "amount_exceeds_capturable",
            Self::InsufficientBalance => "insufficient_balance",
            Self::RateLimited => "rate_limited",
            Self::ServiceUnavailable => "service_unavailable",
            Self::InternalError => "internal_error",
            Self::Other(code) => code,
        }
    }

    pub fn parse(code: &str) -> Self {
        match code {
            "invalid_request" => Self::InvalidRequest,
            "idempotency_key_missing" => Self::IdempotencyKeyMissing,
            "idempotency_key_invalid" => Self::IdempotencyKeyInvalid,
            "unauthorized" => Self::Unauthorized,
            "invalid_signature" => Self::InvalidSignature,
            "not_found" => Self::NotFound,
            "idempotency_key_in_use" => Self::IdempotencyKeyInUse,
            "payment_not_refundable" => Self::PaymentNotRefundable,
            "payment_not_capturable" => Self::PaymentNotCapturable,
            "payment_not_cancelable" => Self::PaymentNotCancelable,
            "payment_disputed" => Self::PaymentDisputed,
            "dispute_not_editable" => Self::DisputeNotEditable,
            "webhook_id_conflict" => Self::WebhookIdConflict,
            "payload_too_large" => Self::PayloadTooLarge,
            "unsupported_media_type" => Self::UnsupportedMediaType,
            "idempotency_key_reused" => Self::IdempotencyKeyReused,
            "amount_exceeds_refundable" => Self::AmountExceedsRefundable,
            "amount_exceeds_capturable" => Self::AmountExceedsCapturable,
            "insufficient_balance" => Self::InsufficientBalance,
            "rate_limited" => Self::RateLimited,
            "service_unavailable" => Self::ServiceUnavailable,
            "internal_error" => Self::InternalError,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The code an error answer without a problem document stands for.
    fn from_status(status: u16) -> Self {
        match status {
            401 => Self::Unauthorized,
            404 => Self::NotFound,
            413 => Self::PayloadTooLarge,
            415 => Self::UnsupportedMediaType,
            429 => Self::RateLimited,
            500 => Self::InternalError,
            503 => Self::ServiceUnavailable,
            other => Self::Other(format!("http_{other}")),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error answer of the API: RFC 9457 problem details plus what the response headers
/// said (`X-Request-Id`, `Retry-After`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// The HTTP status.
    pub status: u16,
    pub code: ErrorCode,
    /// The request field at fault, where one is (`invalid_request`).
    pub param: Option<String>,
    pub title: Option<String>,
    pub detail: Option<String>,
    /// The problem type URI.
    pub type_uri: Option<String>,
    /// `X-Request-Id` of the answer: quote it when asking for help.
    pub request_id: Option<String>,
    /// `Retry-After` of the answer, where there was one.
    pub retry_after: Option<Duration>,
}

#[derive(Deserialize)]
struct ProblemBody {
    #[serde(rename = "type")]
    type_uri: Option<String>,
    title: Option<String>,
    detail: Option<String>,
    code: Option<String>,
    param: Option<String>,
}

impl Problem {
    /// The problem an error answer stands for. A body that is not a problem document (a
    /// proxy's HTML page, an empty 502) still gives a problem, its code from the status.
    pub(crate) fn from_answer(
        status: u16,
        body: &[u8],
        request_id: Option<String>,
        retry_after: Option<Duration>,
    ) -> Self {
        let parsed: Option<ProblemBody> = serde_json::from_slice(body).ok();
        let code = parsed
            .as_ref()
            .and_then(|p| p.code.as_deref())
            .map(ErrorCode::parse)
            .unwrap_or_else(|| ErrorCode::from_status(status));
        let (type_uri, title, detail, param) = match parsed {
            Some(p) => (p.type_uri, p.title, p.detail, p.param),
            None => (None, None, None, None),
        };
        Self {
            status,
            code,
            param,
            title,
            detail,
            type_uri,
            request_id,
            retry_after,
        }
    }

    /// Whether the same call may be sent again with the same key: the key is still
    /// running (409 `idempotency_key_in_use`), the merchant is rate limited (429), or the
    /// server failed (5xx). Every other 4xx is an answer that a retry would only repeat.
    pub fn is_retryable(&self) -> bool {
        self.status == 429
            || self.status >= 500
            || (self.status == 409 && self.code == ErrorCode::IdempotencyKeyInUse)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.code)?;
        if let Some(param) = &self.param {
            write!(f, " (param `{param}`)")?;
        }
        if let Some(detail) = &self.detail {
            write!(f, ": {detail}")?;
        }
        if let Some(id) = &self.request_id {
            write!(f, " [request {id}]")?;
        }
        Ok(())
    }
}

/// What went wrong, by kind.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The API answered with a problem: a final 4xx, or a retryable status (429, 5xx, 409
    /// `idempotency_key_in_use`) once the retry budget was spent.
    #[error("the API answered {0}")]
    Api(Problem),
    /// No answer arrived: the connection failed, broke or timed out. For a mutating call
    /// the outcome is unknown: retry later with [`Error::idempotency_key`] to learn it.
    #[error("no answer from the API: {0}")]
    Transport(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The server's TLS certificate was refused (no trusted CA signed it, it expired, or it
    /// names another host). Not retried: the handshake fails before a byte of the request
    /// is sent, and would fail the same way again. A private CA is added with
    /// [`crate::ClientBuilder::add_ca_pem`] or [`crate::ClientBuilder::add_ca_file`].
    #[error("the server's TLS certificate was refused ({reason}); nothing was sent")]
    Tls {
        /// What rustls said, e.g. `invalid peer certificate: UnknownIssuer`.
        reason: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A success status whose body is not what the contract says.
    #[error("the API answered {status} with a body that does not parse: {source}")]
    Decode {
        status: u16,
        #[source]
        source: serde_json::Error,
    },
    /// [`crate::Mutation::wait_until_final`] reached its deadline and the API still
    /// answered 202: the outcome is not known yet. `last` is the last answer's body.
    #[error("the outcome is still unknown (202) at the deadline")]
    StillPending { last: serde_json::Value },
    /// Something the caller passed cannot be sent (bad base URL, invalid idempotency key,
    /// a body that does not serialise).
    #[error("invalid input: {0}")]
    InvalidInput(String),
}

/// An error of one call, after every retry the policy allowed. One pointer wide.
#[derive(Debug)]
pub struct Error(Box<ErrorInner>);

#[derive(Debug)]
struct ErrorInner {
    kind: ErrorKind,
    idempotency_key: Option<String>,
    attempts: u32,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind) -> Self {
        Self(Box::new(ErrorInner {
            kind,
            idempotency_key: None,
            attempts: 0,
        }))
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput(message.into()))
    }

    pub(crate) fn transport(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::new(ErrorKind::Transport(Box::new(source)))
    }

    pub(crate) fn with_call(mut self, idempotency_key: Option<&str>, attempts: u32) -> Self {
        self.0.idempotency_key = idempotency_key.map(str::to_owned);
        self.0.attempts = attempts;
        self
    }

    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }

    pub fn into_kind(self) -> ErrorKind {
        self.0.kind
    }

    /// The problem the API answered, if it answered one.
    pub fn problem(&self) -> Option<&Problem> {
        match &self.0.kind {
            ErrorKind::Api(problem) => Some(problem),
            _ => None,
        }
    }

    /// The problem's code, if the API answered one.
    pub fn code(&self) -> Option<&ErrorCode> {
        self.problem().map(|p| &p.code)
    }

    /// The HTTP status, if the API answered.
    pub fn status(&self) -> Option<u16> {
        match &self.0.kind {
            ErrorKind::Api(problem) => Some(problem.status),
            ErrorKind::Decode { status, .. } => Some(*status),
            ErrorKind::StillPending { .. } => Some(202),
            _ => None,
        }
    }

    /// `X-Request-Id` of the answer, if the API answered with a problem.
    pub fn request_id(&self) -> Option<&str> {
        self.problem().and_then(|p| p.request_id.as_deref())
    }

    /// The `Idempotency-Key` the call was sent with (every attempt used the same one).
    /// After a transport error or [`ErrorKind::StillPending`], sending the same call with
    /// this key later is how to learn the outcome: it cannot charge twice.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.0.idempotency_key.as_deref()
    }

    /// How many requests were sent for the call (0 when it was refused before sending).
    pub fn attempts(&self) -> u32 {
        self.0.attempts
    }

    /// Whether the money may have moved: no final answer arrived for a mutating call.
    pub fn is_outcome_unknown(&self) -> bool {
        self.0.idempotency_key.is_some()
            && match &self.0.kind {
                ErrorKind::Transport(_) | ErrorKind::StillPending { .. } => true,
                // The refused attempt sent nothing, but an earlier one (a timeout, say)
                // may have reached the server.
                ErrorKind::Tls { .. } => self.0.attempts > 1,
                ErrorKind::Api(problem) => problem.is_retryable(),
                _ => false,
            }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.kind, f)?;
        if self.0.attempts > 1 {
            write!(f, " (after {} attempts)", self.0.attempts)?;
        }
        if let Some(key) = &self.0.idempotency_key {
            write!(f, " (Idempotency-Key {key})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.0.kind)
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Self::new(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_document_gives_its_code_param_and_request_id() {
        let body = br#"{"type":"https://payments-api.dev/problems/invalid_request","title":"Invalid request","status":400,"detail":"`amount` is required","code":"invalid_request","param":"amount"}"#;
        let problem = Problem::from_answer(400, body, Some("req-1".into()), None);
        assert_eq!(problem.code, ErrorCode::InvalidRequest);
        assert_eq!(problem.param.as_deref(), Some("amount"));
        assert_eq!(problem.request_id.as_deref(), Some("req-1"));
        assert!(!problem.is_retryable());
    }

    #[test]
    fn an_error_answer_without_a_problem_document_gets_its_code_from_the_status() {
        let problem = Problem::from_answer(502, b"<html>bad gateway</html>", None, None);
        assert_eq!(problem.code, ErrorCode::Other("http_502".into()));
        assert!(problem.is_retryable());
        assert_eq!(
            Problem::from_answer(429, b"", None, None).code,
            ErrorCode::RateLimited
        );
    }

    #[test]
    fn only_in_use_conflicts_rate_limits_and_server_errors_are_retryable() {
        let with_code = |status, code: &str| {
            let body = format!(r#"{{"code":"{code}","status":{status}}}"#);
            Problem::from_answer(status, body.as_bytes(), None, None)
        };
        assert!(with_code(409, "idempotency_key_in_use").is_retryable());
        assert!(with_code(429, "rate_limited").is_retryable());
        assert!(with_code(503, "service_unavailable").is_retryable());
        assert!(with_code(500, "internal_error").is_retryable());
        assert!(!with_code(409, "payment_not_refundable").is_retryable());
        assert!(!with_code(409, "payment_disputed").is_retryable());
        assert!(!with_code(409, "dispute_not_editable").is_retryable());
        assert!(!with_code(422, "idempotency_key_reused").is_retryable());
        assert!(!with_code(404, "not_found").is_retryable());
        assert!(!with_code(400, "invalid_request").is_retryable());
    }

    #[test]
    fn unknown_codes_round_trip() {
        assert_eq!(ErrorCode::parse("brand_new").as_str(), "brand_new");
        assert_eq!(
            ErrorCode::parse("amount_exceeds_capturable"),
            ErrorCode::AmountExceedsCapturable
        );
        assert_eq!(
            ErrorCode::parse("insufficient_balance"),
            ErrorCode::InsufficientBalance
        );
        assert_eq!(
            ErrorCode::InsufficientBalance.as_str(),
            "insufficient_balance"
        );
        for code in [ErrorCode::PaymentDisputed, ErrorCode::DisputeNotEditable] {
            assert_eq!(ErrorCode::parse(code.as_str()), code);
        }
        assert_eq!(ErrorCode::PaymentDisputed.as_str(), "payment_disputed");
        assert_eq!(
            ErrorCode::DisputeNotEditable.as_str(),
            "dispute_not_editable"
        );
    }
}
