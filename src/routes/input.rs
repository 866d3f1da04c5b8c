//! Reading request input: the JSON body (content type, size limit, unknown fields, types)
//! and query strings, turning every problem into a 4xx that names the field at fault.

use std::collections::BTreeMap;

use actix_web::http::header;
use actix_web::{HttpRequest, web};
use futures_util::StreamExt;
use serde_json::{Map, Value};

use crate::domain::IdempotencyKey;
use crate::error::ApiError;

pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The body of a JSON POST, read up to the limit: 415 for another content type, 413 beyond
/// 64 KiB (checked on `Content-Length` first, then on what actually arrives).
pub async fn read_json_body(
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<web::Bytes, ApiError> {
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !essence.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::UnsupportedMediaType);
    }
    read_body(req, payload).await
}

/// The raw body, whatever its content type, up to the limit: 413 beyond 64 KiB (checked on
/// `Content-Length` first, then on what actually arrives). Webhooks use it directly: their
/// signature covers the exact bytes, which must not be looked at before it is checked.
pub async fn read_body(
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

/// The `Idempotency-Key` header of a POST that requires one.
pub fn idempotency_key(req: &HttpRequest) -> Result<IdempotencyKey, ApiError> {
    let mut values = req.headers().get_all("idempotency-key");
    let first = values.next().ok_or(ApiError::IdempotencyKeyMissing)?;
    if values.next().is_some() {
        return Err(ApiError::IdempotencyKeyInvalid(
            "Idempotency-Key must be sent once",
        ));
    }
    IdempotencyKey::parse(first.as_bytes()).map_err(ApiError::IdempotencyKeyInvalid)
}

/// A JSON object body whose fields are taken one by one; fields that are not allowed are
/// refused up front so that a typo never silently drops a value.
pub struct JsonObject {
    fields: Map<String, Value>,
}

impl JsonObject {
    pub fn parse(body: &[u8], allowed: &[&str]) -> Result<Self, ApiError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| ApiError::InvalidRequest {
            detail: format!("the body is not valid JSON: {e}"),
            param: None,
        })?;
        let Value::Object(fields) = value else {
            return Err(ApiError::InvalidRequest {
                detail: "the body must be a JSON object".to_owned(),
                param: None,
            });
        };
        if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ApiError::invalid(
                unknown.clone(),
                format!("unknown field `{unknown}`"),
            ));
        }
        Ok(Self { fields })
    }

    /// The field's value; JSON `null` counts as absent.
    fn take(&mut self, name: &str) -> Option<Value> {
        self.fields.remove(name).filter(|v| !v.is_null())
    }

    pub fn optional_integer(&mut self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| ApiError::invalid(name, format!("`{name}` must be an integer"))),
        }
    }

    pub fn required_integer(&mut self, name: &str) -> Result<i64, ApiError> {
        self.optional_integer(name)?
            .ok_or_else(|| ApiError::invalid(name, format!("`{name}` is required")))
    }

    pub fn optional_string(
        &mut self,
        name: &str,
        max_chars: usize,
    ) -> Result<Option<String>, ApiError> {
        match self.take(name) {
            None => Ok(None),
            Some(Value::String(s)) if s.chars().count() <= max_chars => Ok(Some(s)),
            Some(Value::String(_)) => Err(ApiError::invalid(
                name,
                format!("`{name}` must be at most {max_chars} characters"),
            )),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("`{name}` must be a string"),
            )),
        }
    }

    pub fn required_string(&mut self, name: &str, max_chars: usize) -> Result<String, ApiError> {
        self.optional_string(name, max_chars)?
            .ok_or_else(|| ApiError::invalid(name, format!("`{name}` is required")))
    }

    /// An object of string values, e.g. `metadata`; absent or null is empty.
    pub fn optional_string_map(
        &mut self,
        name: &str,
        max_keys: usize,
        max_key_chars: usize,
        max_value_chars: usize,
    ) -> Result<BTreeMap<String, String>, ApiError> {
        let object = match self.take(name) {
            None => return Ok(BTreeMap::new()),
            Some(Value::Object(object)) => object,
            Some(_) => {
                return Err(ApiError::invalid(
                    name,
                    format!("`{name}` must be an object"),
                ));
            }
        };
        if object.len() > max_keys {
            return Err(ApiError::invalid(
                name,
                format!("`{name}` may have at most {max_keys} keys"),
            ));
        }
        object
            .into_iter()
            .map(|(key, value)| {
                if key.is_empty() || key.chars().count() > max_key_chars {
                    return Err(ApiError::invalid(
                        name,
                        format!("`{name}` keys must be 1 to {max_key_chars} characters"),
                    ));
                }
                match value {
                    Value::String(s) if s.chars().count() <= max_value_chars => Ok((key, s)),
                    _ => Err(ApiError::invalid(
                        name,
                        format!("`{name}` values must be strings of at most {max_value_chars} characters"),
                    )),
                }
            })
            .collect()
    }
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
        for (i, (name, _)) in pairs.iter().enumerate() {
            if !allowed.contains(&name.as_str()) {
                return Err(ApiError::invalid(
                    name.clone(),
                    format!("unknown query parameter `{name}`"),
                ));
            }
            if pairs[..i].iter().any(|(n, _)| n == name) {
                return Err(ApiError::invalid(
                    name.clone(),
                    format!("`{name}` may be given once"),
                ));
            }
        }
        Ok(Self { pairs })
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
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
