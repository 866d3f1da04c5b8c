//! A response as sent and as replayed: its status and exact bytes.

use std::sync::Arc;

use actix_web::HttpResponse;
use actix_web::http::{StatusCode, header};

use crate::error::{ApiError, PROBLEM_JSON};

/// `Idempotent-Replayed: true` marks a replayed answer (names are case-insensitive; the
/// server writes them in lower case).
pub const REPLAYED_HEADER: header::HeaderName =
    header::HeaderName::from_static("idempotent-replayed");

/// A response as sent: status and exact body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: Arc<str>,
    /// Set on replays of a stored final response.
    pub replayed: bool,
}

impl Answer {
    pub fn new(status: u16, body: impl Into<Arc<str>>) -> Self {
        Self {
            status,
            body: body.into(),
            replayed: false,
        }
    }

    /// A refusal as the final answer stored for an idempotency key (the 409/422 refusals
    /// of refunds, captures and cancels), replayed verbatim.
    pub fn refusal(error: &ApiError) -> Self {
        use actix_web::ResponseError;
        // The API document says which refusals a key replays from the same list.
        debug_assert!(error.is_stored_refusal(), "not a stored refusal: {error:?}");
        Self::new(error.status_code().as_u16(), error.problem_json())
    }

    pub fn replayed(mut self) -> Self {
        self.replayed = true;
        self
    }

    /// Final answers (201/200, and stored refusals such as 409/422) are fixed; 202
    /// ("still processing") is not.
    pub fn is_final(&self) -> bool {
        self.status != 202
    }

    /// What a duplicate that waited for this answer is told: the replay of a final answer,
    /// or the same 202 (rather than all of them retrying at once).
    pub fn for_duplicate(self) -> Self {
        if self.is_final() {
            self.replayed()
        } else {
            self
        }
    }

    pub fn into_response(self) -> HttpResponse {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = HttpResponse::build(status);
        // A stored refusal is a problem document, replayed as one.
        let content_type = if self.status >= 400 {
            PROBLEM_JSON
        } else {
            "application/json"
        };
        // Static names and values: nothing to parse or copy for each answer.
        response.insert_header((
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(content_type),
        ));
        if self.replayed {
            response.insert_header((REPLAYED_HEADER, header::HeaderValue::from_static("true")));
        }
        // The body's bytes are shared with the stored answer, not copied.
        response.body(actix_web::web::Bytes::from_owner(SharedBody(self.body)))
    }
}

/// An answer's body as the bytes of a response.
struct SharedBody(Arc<str>);

impl AsRef<[u8]> for SharedBody {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// Names one idempotency scope: a merchant's key on one kind of request. The parts are
/// ASCII (a key is visible ASCII), so the separator, which is not, cannot be part of one;
/// unlike a NUL, it prints in a log line.
pub fn scope_key(resource: &str, merchant_id: &str, idempotency_key: &str) -> String {
    [resource, SEPARATOR, merchant_id, SEPARATOR, idempotency_key].concat()
}

/// Between the parts of a [`scope_key`].
const SEPARATOR: &str = " \u{b7} ";
