//! Webhook endpoints and deliveries as the API shows them.

use serde::Serialize;

use crate::db::deliveries::DeliveryRow;
use crate::db::webhook_endpoints::EndpointRow;
use crate::domain::{DeliveryStatus, EndpointStatus, format_timestamp};
use crate::events::EnabledEvents;

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = WebhookEndpoint)]
pub struct EndpointObject<'a> {
    #[schema(example = "we_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    id: &'a str,
    #[schema(example = "webhook_endpoint")]
    object: &'static str,
    url: &'a str,
    #[schema(value_type = Vec<String>, example = json!(["payment.succeeded"]))]
    enabled_events: serde_json::Value,
    #[schema(required = true)]
    description: Option<&'a str>,
    #[schema(value_type = EndpointStatus)]
    status: &'a str,
    /// Only in the answers that make a secret (create, rotate_secret): keep it then.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")]
    secret: Option<&'a str>,
    #[schema(format = DateTime)]
    created_at: String,
    #[schema(format = DateTime)]
    updated_at: String,
}

impl<'a> EndpointObject<'a> {
    pub fn from_row(row: &'a EndpointRow, with_secret: bool) -> Self {
        let enabled = EnabledEvents::from_stored(&row.enabled_events).to_json();
        Self {
            id: &row.id,
            object: "webhook_endpoint",
            url: &row.url,
            enabled_events: serde_json::from_str(&enabled).unwrap_or_default(),
            description: row.description.as_deref(),
            status: row.status.as_str(),
            secret: with_secret.then_some(row.secret.as_str()),
            created_at: format_timestamp(row.created_at),
            updated_at: format_timestamp(row.updated_at),
        }
    }
}

pub fn render(row: &EndpointRow, with_secret: bool) -> String {
    to_json(&EndpointObject::from_row(row, with_secret))
}

fn to_json<T: Serialize>(value: &T) -> String {
    // Structs of strings, numbers and JSON values always serialise.
    serde_json::to_string(value).unwrap_or_default()
}

/// `{"object": "list", "data": [...], "has_more": …}`.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = WebhookEndpointList)]
pub struct EndpointList<'a> {
    #[schema(example = "list")]
    object: &'static str,
    data: Vec<EndpointObject<'a>>,
    has_more: bool,
}

pub fn render_list(rows: &[EndpointRow], has_more: bool) -> String {
    to_json(&EndpointList {
        object: "list",
        data: rows
            .iter()
            .map(|r| EndpointObject::from_row(r, false))
            .collect(),
        has_more,
    })
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = DeletedWebhookEndpoint)]
pub struct Deleted<'a> {
    id: &'a str,
    #[schema(example = "webhook_endpoint")]
    object: &'static str,
    deleted: bool,
}

pub fn render_deleted(id: &str) -> String {
    to_json(&Deleted {
        id,
        object: "webhook_endpoint",
        deleted: true,
    })
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = WebhookDelivery)]
pub struct DeliveryObject<'a> {
    #[schema(example = "wd_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    id: &'a str,
    #[schema(example = "webhook_delivery")]
    object: &'static str,
    endpoint_id: &'a str,
    event_id: &'a str,
    event_type: &'a str,
    #[schema(value_type = DeliveryStatus)]
    status: &'a str,
    attempts: i32,
    /// When the next attempt is due (pending deliveries only).
    #[schema(required = true, format = DateTime)]
    next_attempt_at: Option<String>,
    #[schema(required = true)]
    last_attempt: Option<LastAttempt<'a>>,
    #[schema(format = DateTime)]
    created_at: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct LastAttempt<'a> {
    #[schema(format = DateTime)]
    at: String,
    /// The receiver's HTTP status; null when no answer came (refused, timed out, …).
    #[schema(required = true)]
    status_code: Option<i32>,
    #[schema(required = true)]
    error: Option<&'a str>,
    #[schema(required = true)]
    duration_ms: Option<i64>,
}

impl<'a> DeliveryObject<'a> {
    fn from_row(row: &'a DeliveryRow) -> Self {
        Self {
            id: &row.id,
            object: "webhook_delivery",
            endpoint_id: &row.endpoint_id,
            event_id: &row.event_id,
            event_type: &row.event_type,
            status: row.status.as_str(),
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at.map(format_timestamp),
            last_attempt: row.last_attempt_at.map(|at| LastAttempt {
                at: format_timestamp(at),
                status_code: row.last_status_code,
                error: row.last_error.as_deref(),
                duration_ms: row.last_duration_ms,
            }),
            created_at: format_timestamp(row.created_at),
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = WebhookDeliveryList)]
pub struct DeliveryList<'a> {
    #[schema(example = "list")]
    object: &'static str,
    data: Vec<DeliveryObject<'a>>,
    has_more: bool,
}

pub fn render_deliveries(rows: &[DeliveryRow], has_more: bool) -> String {
    to_json(&DeliveryList {
        object: "list",
        data: rows.iter().map(DeliveryObject::from_row).collect(),
        has_more,
    })
}

/// `POST …/replay`: how many deliveries were queued.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Queued {
    pub queued: usize,
}

/// `POST …/test`: how the one attempt went.
#[derive(Serialize, utoipa::ToSchema)]
pub struct TestResult {
    pub delivered: bool,
    #[schema(required = true)]
    pub status_code: Option<u16>,
    #[schema(required = true)]
    pub error: Option<String>,
    pub duration_ms: u64,
}

pub fn render_value<T: Serialize>(value: &T) -> String {
    to_json(value)
}
