//! Reading request input: the JSON body (content type, size limit, unknown fields, types),
//! query strings and path ids, turning every problem into a 4xx that names the field at
//! fault. Every string a request carries is checked here, once, by
//! [`check_text`]: whatever gets past this module is text the
//! database accepts on either backend. Headers are visible ASCII by the time a handler
//! reads them (`Idempotency-Key`, `Authorization`, `webhook-*` are parsed as such).

use actix_web::http::header;
use actix_web::{HttpRequest, web};
use futures_util::StreamExt;

use crate::auth::Merchant;
pub use crate::body::{JsonObject, parse_json};
use crate::domain::{IdempotencyKey, ObjectId, check_text};
use crate::error::ApiError;
use crate::idempotency::{Answer, Sent};
use crate::state::AppState;

pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A header sent more than once: it names no one value (two keys, two content types).
pub struct Repeated;

/// The one value of header `name`, if sent; [`Repeated`] if sent more than once. Each
/// caller answers a repetition its own way (400 for a key, 401 for credentials, 415 for a
/// content type).
pub fn header_once<'a>(
    req: &'a HttpRequest,
    name: &str,
) -> Result<Option<&'a header::HeaderValue>, Repeated> {
    let mut values = req.headers().get_all(name);
    let first = values.next();
    match values.next() {
        Some(_) => Err(Repeated),
        None => Ok(first),
    }
}

/// Whether the body is content-encoded (compressed): any `Content-Encoding` but
/// `identity`. Neither a JSON body nor a form is read as sent then.
pub fn content_encoded(req: &HttpRequest) -> bool {
    req.headers()
        .get_all(header::CONTENT_ENCODING)
        .any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
}

/// The body of a JSON POST, read up to the limit: 415 for another content type (or two), 413
/// beyond 64 KiB (checked on `Content-Length` first, then on what actually arrives).
pub async fn read_json_body(
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<web::Bytes, ApiError> {
    // Two content types name no one type: 415.
    let content_type = header_once(req, header::CONTENT_TYPE.as_str())
        .ok()
        .flatten()
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::UnsupportedMediaType);
    }
    no_query(req)?;
    read_body(req, payload).await
}

/// The body of a POST whose fields are all optional (parsed with
/// [`JsonObject::parse_or_empty`]): without a content type, no body at all (or only
/// whitespace) is fine; anything else sent must be JSON (415 otherwise).
pub async fn read_optional_json_body(
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<web::Bytes, ApiError> {
    let has_content_type = req.headers().contains_key(header::CONTENT_TYPE);
    if has_content_type {
        return read_json_body(req, payload).await;
    }
    no_query(req)?;
    let body = read_body(req, payload).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        Ok(body)
    } else {
        Err(ApiError::UnsupportedMediaType)
    }
}

/// A request takes all it asks for in its path and body, or its list's parameters: a query
/// parameter anywhere else (`?amount=5` on a capture, `?expand=x` on a payment) is 400, not
/// silently ignored as if it had been honoured.
fn no_query(req: &HttpRequest) -> Result<(), ApiError> {
    Query::parse(req, &[]).map(|_| ())
}

/// [`no_query`] as an extractor, for the requests without a body (an object's read, a
/// delete). Placed after [`super::authenticate::Authenticated`], so a caller without a
/// valid key learns 401 first.
pub struct NoQuery;

impl actix_web::FromRequest for NoQuery {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        std::future::ready(no_query(req).map(|()| Self))
    }
}

/// How long a declared body may take to arrive, from the end of the headers.
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The raw body, whatever its content type, up to the limit: 413 beyond 64 KiB (checked on
/// `Content-Length` first, then on what actually arrives); 400 if it does not arrive within
/// [`BODY_TIMEOUT`]; 415 if it is content-encoded (compressed: not JSON as sent). Webhooks
/// use it directly: their signature covers the exact bytes, which must not be looked at
/// before it is checked.
pub async fn read_body(req: &HttpRequest, payload: web::Payload) -> Result<web::Bytes, ApiError> {
    if content_encoded(req) {
        return Err(ApiError::UnsupportedMediaType);
    }
    match actix_web::rt::time::timeout(BODY_TIMEOUT, read_within_limit(req, payload)).await {
        Ok(body) => body,
        Err(_) => Err(ApiError::InvalidRequest {
            detail: format!(
                "the request body did not arrive within {} s",
                BODY_TIMEOUT.as_secs()
            ),
            param: None,
        }),
    }
}

async fn read_within_limit(
    req: &HttpRequest,
    mut payload: web::Payload,
) -> Result<web::Bytes, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let too_large = ApiError::PayloadTooLarge {
        limit: MAX_BODY_BYTES,
    };
    if declared.is_some_and(|len| len > MAX_BODY_BYTES) {
        return Err(too_large);
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(1024).min(MAX_BODY_BYTES));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::InvalidRequest {
            detail: format!("the request body could not be read: {e}"),
            param: None,
        })?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(too_large);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// A keyed POST exactly as it was sent; or, when this instance has already answered these
/// bytes under this key, its replay, found before the body is parsed (see [`Sent`]).
/// `resource` names the operation's idempotency scope.
pub fn sent_unless_replayed(
    state: &AppState,
    merchant: &Merchant,
    resource: &'static str,
    key: &IdempotencyKey,
    req: &HttpRequest,
    body: web::Bytes,
) -> Result<Sent, Answer> {
    let sent = Sent::new(req.uri(), body);
    let answers = &state.final_answers;
    match answers.answer_sent(resource, resource, &merchant.id, key.as_str(), &sent) {
        Some(replay) => Err(replay),
        None => Ok(sent),
    }
}

/// The `Idempotency-Key` header of a POST that requires one.
pub fn idempotency_key(req: &HttpRequest) -> Result<IdempotencyKey, ApiError> {
    let value = header_once(req, "idempotency-key")
        .map_err(|Repeated| ApiError::IdempotencyKeyInvalid("Idempotency-Key must be sent once"))?
        .ok_or(ApiError::IdempotencyKeyMissing)?;
    IdempotencyKey::parse(value.as_bytes()).map_err(ApiError::IdempotencyKeyInvalid)
}

/// Query parameters, each allowed at most once; unknown ones are refused.
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    pub fn parse(req: &HttpRequest, allowed: &[&str]) -> Result<Self, ApiError> {
        let pairs: Vec<(String, String)> =
            web::Query::<Vec<(String, String)>>::from_query(req.query_string())
                .map_err(|e| ApiError::InvalidRequest {
                    detail: format!("the query string could not be parsed: {e}"),
                    param: None,
                })?
                .into_inner();
        for (i, (name, value)) in pairs.iter().enumerate() {
            if !allowed.contains(&name.as_str()) {
                return Err(ApiError::invalid(
                    name.clone(),
                    format!("`{name}` is not a query parameter of this request"),
                ));
            }
            if pairs[..i].iter().any(|(n, _)| n == name) {
                return Err(ApiError::invalid(
                    name.clone(),
                    format!("`{name}` may be given once"),
                ));
            }
            check_text(value)
                .map_err(|rule| ApiError::invalid(name.clone(), format!("`{name}` {rule}")))?;
        }
        Ok(Self { pairs })
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A text parameter of at most `max_chars` characters (what the field it filters on
    /// may hold: a longer one could only match nothing, so it is a mistake, not a query).
    pub fn text(&self, name: &str, max_chars: usize) -> Result<Option<&str>, ApiError> {
        match self.get(name) {
            Some(v) if v.chars().count() > max_chars => Err(ApiError::invalid(
                name,
                format!("`{name}` must be at most {max_chars} characters"),
            )),
            v => Ok(v),
        }
    }

    /// `limit` of a list: 1 to 100, default 10.
    pub fn limit(&self) -> Result<i64, ApiError> {
        match self.get("limit") {
            None => Ok(10),
            Some(v) => v
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| {
                    ApiError::invalid("limit", "`limit` must be an integer from 1 to 100")
                }),
        }
    }

    /// `starting_after` of a list: an id that `is_id` accepts (`what` names it for the error).
    pub fn starting_after(
        &self,
        what: &str,
        is_id: impl Fn(&str) -> bool,
    ) -> Result<Option<String>, ApiError> {
        match self.get("starting_after") {
            None => Ok(None),
            Some(v) if is_id(v) => Ok(Some(v.to_owned())),
            Some(_) => Err(ApiError::invalid(
                "starting_after",
                format!("`starting_after` must be {what}"),
            )),
        }
    }
}

/// The `{id}` of a route, parsed into its domain type. A segment that is not such an id
/// names no object, so it is answered like an id that does not exist: 404 `not_found`.
/// Called in the handler after authentication, so a caller without a valid key learns
/// nothing (401) whatever the path.
pub fn path_id<T: ObjectId>(raw: &str) -> Result<T, ApiError> {
    T::parse_id(raw).ok_or_else(|| ApiError::NotFound(format!("no such {}", T::OBJECT)))
}

/// The request's `X-Request-Id` (set by the server's middleware on every request).
pub(crate) fn request_id(req: &actix_web::HttpRequest) -> Option<String> {
    use actix_web::HttpMessage;
    req.extensions()
        .get::<crate::state::RequestId>()
        .map(|id| id.as_str().to_owned())
}

#[cfg(test)]
mod tests {
    use super::{JsonObject, parse_json, path_id};
    use crate::domain::PaymentId;
    use crate::error::ApiError;

    fn param_of(result: Result<serde_json::Value, ApiError>) -> Option<String> {
        match result {
            Err(ApiError::InvalidRequest { param, .. }) => param,
            other => panic!("expected invalid_request, got {other:?}"),
        }
    }

    #[test]
    fn a_control_character_anywhere_in_the_body_names_its_top_level_field() {
        for (body, param) in [
            (r#"{"description": "a\u0000b"}"#, "description"),
            (r#"{"metadata": {"k": "\u001b[31m"}}"#, "metadata"),
            (r#"{"metadata": {"\u0000": "v"}}"#, "metadata"),
            (r#"{"data": {"items": [1, "x", "\u007f"]}}"#, "data"),
            ("{\"a\\u0001\": 1}", "a\u{1}"),
        ] {
            assert_eq!(
                param_of(parse_json(body.as_bytes())).as_deref(),
                Some(param),
                "{body}"
            );
        }
        assert_eq!(param_of(parse_json(br#"["\u0000"]"#)), None);
    }

    #[test]
    fn lone_surrogates_are_not_json_text() {
        for body in [r#"{"d": "\ud800"}"#, r#"{"d": "\udc00\ud800"}"#] {
            assert!(parse_json(body.as_bytes()).is_err(), "{body}");
        }
    }

    #[test]
    fn text_with_lines_and_any_script_passes_to_the_getters() {
        let body = r#"{"description": "line\n\ttab \u200f\u05e9 e\u0301 \ud83d\udcb3 \uffff"}"#;
        let mut object = JsonObject::parse(body.as_bytes(), &["description"]).unwrap();
        assert_eq!(
            object
                .optional_string("description", 100)
                .unwrap()
                .as_deref(),
            Some("line\n\ttab \u{200f}\u{5e9} e\u{301} \u{1f4b3} \u{ffff}")
        );
    }

    #[test]
    fn a_path_segment_that_is_not_an_id_is_not_found() {
        let id = PaymentId::generate();
        assert_eq!(path_id::<PaymentId>(id.as_str()).unwrap(), id);
        for bad in ["", "pay_\0", "pay_x", "re_0190a0b0c0d0e0f00000000000000000"] {
            match path_id::<PaymentId>(bad) {
                Err(ApiError::NotFound(detail)) => assert_eq!(detail, "no such payment"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
