//! Bodies of the `/v1/webhook_endpoints…` POSTs, parsed into requests that can only exist
//! valid, each with its fingerprint (what makes two requests with one key "the same").

use serde::Serialize;

use crate::body::JsonObject;
use crate::domain::{DestinationError, EndpointUrl};
use crate::domain::{EndpointStatus, Timestamp, sha256_hex};
use crate::error::ApiError;
use crate::events::{EnabledEvents, EventType};

const MAX_DESCRIPTION_CHARS: usize = 1000;
/// Every type once, plus `*`.
const MAX_ENABLED_EVENTS: usize = 16;
/// How long the previous secret keeps signing after a rotation, at most (7 days).
pub const MAX_EXPIRE_CURRENT_SECS: i64 = 604_800;
pub const DEFAULT_EXPIRE_CURRENT_SECS: i64 = 86_400;

pub fn url_error(e: DestinationError) -> ApiError {
    ApiError::invalid("url", e.to_string())
}

/// SHA-256 of the canonical form of a request on one operation (and object).
fn fingerprint<T: Serialize>(operation: &str, object_id: &str, canonical: &T) -> String {
    // Structs of strings, numbers and lists always serialise.
    let body = serde_json::to_string(canonical).unwrap_or_default();
    sha256_hex(format!("{operation}\n{object_id}\n{body}").as_bytes())
}

/// A delete's fingerprint: the operation and the endpoint (it has no body).
pub fn delete_fingerprint(endpoint_id: &str) -> String {
    fingerprint("delete", endpoint_id, &())
}

fn parse_url(object: &mut JsonObject, required: bool) -> Result<Option<EndpointUrl>, ApiError> {
    let text = if required {
        Some(object.required_string("url", EndpointUrl::MAX_LEN)?)
    } else {
        object.optional_string("url", EndpointUrl::MAX_LEN)?
    };
    text.map(|t| EndpointUrl::parse(&t).map_err(url_error))
        .transpose()
}

fn parse_enabled_events(object: &mut JsonObject) -> Result<Option<EnabledEvents>, ApiError> {
    let Some(items) = object.optional_string_list("enabled_events", MAX_ENABLED_EVENTS, 64)? else {
        return Ok(None);
    };
    if items.is_empty() {
        return Err(ApiError::invalid(
            "enabled_events",
            "`enabled_events` must name at least one event type, or \"*\"",
        ));
    }
    EnabledEvents::parse(items.iter().map(String::as_str))
        .map(Some)
        .map_err(|bad| {
            let known: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
            ApiError::invalid(
                "enabled_events",
                format!(
                    "`enabled_events` holds {bad:?}: each entry must be \"*\" or one of {}",
                    known.join(", ")
                ),
            )
        })
}

/// Sorted, so the same set in another order is the same request.
fn canonical_events(events: &EnabledEvents) -> Vec<&'static str> {
    let mut items: Vec<&'static str> = match events {
        EnabledEvents::All => vec![EnabledEvents::WILDCARD],
        EnabledEvents::Only(types) => types.iter().map(|t| t.as_str()).collect(),
    };
    items.sort_unstable();
    items
}

/// `POST /v1/webhook_endpoints`.
#[derive(Debug, Clone, utoipa::ToSchema)]
#[schema(as = CreateWebhookEndpointRequest)]
#[serde(deny_unknown_fields)]
pub struct NewEndpoint {
    /// `http` or `https`, at most 2048 characters, no user info, a public destination.
    #[schema(value_type = String, max_length = 2048, example = "https://example.com/webhooks")]
    pub url: EndpointUrl,
    /// Event types, or `["*"]` for all of them.
    #[schema(value_type = Vec<String>, min_items = 1, max_items = 16, example = json!(["payment.succeeded", "refund.succeeded"]))]
    pub enabled_events: EnabledEvents,
    #[schema(max_length = 1000)]
    pub description: Option<String>,
}

impl NewEndpoint {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse(body, &["url", "enabled_events", "description"])?;
        let url = parse_url(&mut object, true)?
            .ok_or_else(|| ApiError::invalid("url", "`url` is required"))?;
        let enabled_events = parse_enabled_events(&mut object)?
            .ok_or_else(|| ApiError::invalid("enabled_events", "`enabled_events` is required"))?;
        let description = object.optional_string("description", MAX_DESCRIPTION_CHARS)?;
        Ok(Self {
            url,
            enabled_events,
            description,
        })
    }

    pub fn fingerprint(&self) -> String {
        #[derive(Serialize)]
        struct Canonical<'a> {
            url: &'a str,
            enabled_events: Vec<&'static str>,
            description: Option<&'a str>,
        }
        fingerprint(
            "create",
            "",
            &Canonical {
                url: self.url.as_str(),
                enabled_events: canonical_events(&self.enabled_events),
                description: self.description.as_deref(),
            },
        )
    }
}

/// `POST /v1/webhook_endpoints/{id}`: only the fields given change. An empty
/// `description` removes it.
#[derive(Debug, Clone, utoipa::ToSchema)]
#[schema(as = UpdateWebhookEndpointRequest)]
#[serde(deny_unknown_fields)]
pub struct EndpointUpdate {
    #[schema(value_type = Option<String>, max_length = 2048, example = "https://example.com/webhooks")]
    pub url: Option<EndpointUrl>,
    #[schema(value_type = Option<Vec<String>>, min_items = 1, max_items = 16, example = json!(["*"]))]
    pub enabled_events: Option<EnabledEvents>,
    pub description: Option<String>,
    /// `enabled` again resumes delivery of what is pending.
    pub status: Option<EndpointStatus>,
}

impl EndpointUpdate {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object =
            JsonObject::parse(body, &["url", "enabled_events", "description", "status"])?;
        let url = parse_url(&mut object, false)?;
        let enabled_events = parse_enabled_events(&mut object)?;
        let description = object.optional_string("description", MAX_DESCRIPTION_CHARS)?;
        let status = object
            .optional_string("status", 16)?
            .map(|s| {
                EndpointStatus::parse(&s).ok_or_else(|| {
                    ApiError::invalid("status", "`status` must be enabled or disabled")
                })
            })
            .transpose()?;
        Ok(Self {
            url,
            enabled_events,
            description,
            status,
        })
    }

    pub fn fingerprint(&self, endpoint_id: &str) -> String {
        #[derive(Serialize)]
        struct Canonical<'a> {
            url: Option<&'a str>,
            enabled_events: Option<Vec<&'static str>>,
            description: Option<&'a str>,
            status: Option<&'static str>,
        }
        fingerprint(
            "update",
            endpoint_id,
            &Canonical {
                url: self.url.as_ref().map(EndpointUrl::as_str),
                enabled_events: self.enabled_events.as_ref().map(canonical_events),
                description: self.description.as_deref(),
                status: self.status.map(EndpointStatus::as_str),
            },
        )
    }
}

/// `POST /v1/webhook_endpoints/{id}/rotate_secret`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = RotateSecretRequest)]
#[serde(deny_unknown_fields)]
pub struct Rotation {
    /// How long the current secret keeps signing (beside the new one), 0 to 604800 s.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 604_800, default = 86_400, nullable)]
    pub expire_current_in_s: i64,
}

impl Rotation {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse_or_empty(body, &["expire_current_in_s"])?;
        let expire_current_in_s = object
            .optional_integer("expire_current_in_s")?
            .unwrap_or(DEFAULT_EXPIRE_CURRENT_SECS);
        if !(0..=MAX_EXPIRE_CURRENT_SECS).contains(&expire_current_in_s) {
            return Err(ApiError::invalid(
                "expire_current_in_s",
                "`expire_current_in_s` must be from 0 to 604800",
            ));
        }
        Ok(Self {
            expire_current_in_s,
        })
    }

    pub fn fingerprint(&self, endpoint_id: &str) -> String {
        fingerprint("rotate_secret", endpoint_id, &self.expire_current_in_s)
    }
}

/// Which earlier events a replay sends again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum ReplayScope {
    /// Events whose latest delivery to this endpoint failed.
    Failed,
    /// Every event this endpoint was sent or subscribes to.
    All,
}

/// `POST /v1/webhook_endpoints/{id}/replay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = ReplayRequest)]
#[serde(deny_unknown_fields)]
pub struct Replay {
    /// RFC 3339: events created at or after this.
    #[schema(value_type = String, format = DateTime, example = "2026-11-01T00:00:00Z")]
    pub since: Timestamp,
    /// RFC 3339: events created at or before this (default: now).
    #[schema(value_type = Option<String>, format = DateTime, example = "2026-12-01T00:00:00Z")]
    pub until: Option<Timestamp>,
    /// `failed` (default) or `all`.
    #[serde(default)]
    #[schema(nullable)]
    pub status: ReplayScope,
}

fn parse_time(object: &mut JsonObject, name: &str) -> Result<Option<Timestamp>, ApiError> {
    object
        .optional_string(name, 64)?
        .map(|text| {
            chrono::DateTime::parse_from_rfc3339(&text)
                .map(|t| t.naive_utc())
                .map_err(|_| {
                    ApiError::invalid(name, format!("`{name}` must be an RFC 3339 date-time"))
                })
        })
        .transpose()
}

impl Replay {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse(body, &["since", "until", "status"])?;
        let since = parse_time(&mut object, "since")?
            .ok_or_else(|| ApiError::invalid("since", "`since` is required"))?;
        let until = parse_time(&mut object, "until")?;
        if until.is_some_and(|until| until < since) {
            return Err(ApiError::invalid(
                "until",
                "`until` must not be before `since`",
            ));
        }
        let status = match object.optional_string("status", 16)?.as_deref() {
            None | Some("failed") => ReplayScope::Failed,
            Some("all") => ReplayScope::All,
            Some(_) => {
                return Err(ApiError::invalid(
                    "status",
                    "`status` must be failed or all",
                ));
            }
        };
        Ok(Self {
            since,
            until,
            status,
        })
    }

    pub fn fingerprint(&self, endpoint_id: &str) -> String {
        let scope = match self.status {
            ReplayScope::Failed => "failed",
            ReplayScope::All => "all",
        };
        fingerprint(
            "replay",
            endpoint_id,
            &(
                self.since.and_utc().timestamp_micros(),
                self.until.map(|u| u.and_utc().timestamp_micros()),
                scope,
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param_of<T: std::fmt::Debug>(result: Result<T, ApiError>) -> String {
        match result {
            Err(ApiError::InvalidRequest { param: Some(p), .. }) => p,
            other => panic!("expected invalid_request with a param, got {other:?}"),
        }
    }

    #[test]
    fn a_new_endpoint_needs_a_url_and_known_event_types() {
        let ok = NewEndpoint::parse(
            br#"{"url": "https://93.184.215.14/h", "enabled_events": ["refund.failed", "payment.succeeded"]}"#,
        )
        .unwrap();
        let reordered = NewEndpoint::parse(
            br#"{"enabled_events": ["payment.succeeded", "refund.failed"], "url": "https://93.184.215.14/h", "description": null}"#,
        )
        .unwrap();
        assert_eq!(ok.fingerprint(), reordered.fingerprint());
        for (body, param) in [
            (r#"{"enabled_events": ["*"]}"#, "url"),
            (r#"{"url": "https://a.example/"}"#, "enabled_events"),
            (
                r#"{"url": "https://a.example/", "enabled_events": []}"#,
                "enabled_events",
            ),
            (
                r#"{"url": "https://a.example/", "enabled_events": ["payment.*"]}"#,
                "enabled_events",
            ),
            (
                r#"{"url": "https://a.example/", "enabled_events": "*"}"#,
                "enabled_events",
            ),
            (
                r#"{"url": "https://a.example/", "enabled_events": [1]}"#,
                "enabled_events",
            ),
            (
                r#"{"url": "ftp://a.example/", "enabled_events": ["*"]}"#,
                "url",
            ),
            (r#"{"url": 5, "enabled_events": ["*"]}"#, "url"),
            (
                r#"{"url": "https://a.example/", "enabled_events": ["*"], "secret": "x"}"#,
                "secret",
            ),
        ] {
            assert_eq!(
                param_of(NewEndpoint::parse(body.as_bytes())),
                param,
                "{body}"
            );
        }
    }

    #[test]
    fn rotation_and_replay_bounds() {
        assert_eq!(Rotation::parse(b"{}").unwrap().expire_current_in_s, 86_400);
        assert_eq!(
            Rotation::parse(br#"{"expire_current_in_s": 0}"#)
                .unwrap()
                .expire_current_in_s,
            0
        );
        assert_eq!(
            param_of(Rotation::parse(br#"{"expire_current_in_s": 604801}"#)),
            "expire_current_in_s"
        );
        let replay = Replay::parse(br#"{"since": "2026-11-23T10:00:00+01:00"}"#).unwrap();
        assert_eq!(replay.status, ReplayScope::Failed);
        assert_eq!(replay.since.to_string(), "2026-11-23 09:00:00");
        assert_eq!(param_of(Replay::parse(b"{}")), "since");
        assert_eq!(
            param_of(Replay::parse(br#"{"since": "yesterday"}"#)),
            "since"
        );
        assert_eq!(
            param_of(Replay::parse(
                br#"{"since": "2026-11-23T10:00:00Z", "until": "2026-11-22T10:00:00Z"}"#
            )),
            "until"
        );
        assert_eq!(
            param_of(Replay::parse(
                br#"{"since": "2026-11-23T10:00:00Z", "status": "pending"}"#
            )),
            "status"
        );
        assert_eq!(
            param_of(EndpointUpdate::parse(br#"{"status": "paused"}"#)),
            "status"
        );
    }
}
