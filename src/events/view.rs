//! The event object as the API shows it. Events are stored rendered (the exact bytes every
//! delivery sends), so these types only describe them for the OpenAPI document.

use serde::Serialize;

use super::event_type::{EventType, TEST_EVENT_TYPE};
use crate::domain::RequestRef;

/// `{"id": "evt_…", "object": "event", "type", "created_at", "data": {"object": …}, "request"}`.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Event)]
pub struct EventObject {
    #[schema(example = "evt_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f")]
    id: String,
    #[schema(example = "event")]
    object: String,
    #[serde(rename = "type")]
    #[schema(value_type = EventObjectType)]
    kind: EventType,
    /// RFC 3339, UTC: when the change was made.
    #[schema(format = DateTime)]
    created_at: String,
    data: EventData,
    /// The API request that made the change; null when a provider webhook, the recovery
    /// worker or an expiry made it.
    #[schema(required = true)]
    request: Option<RequestRef>,
}

/// The `type` of an event object, as a receiver may get it: every recorded [`EventType`],
/// and the test event, which is only ever delivered (never recorded, so neither in the
/// feed nor a type an endpoint can subscribe to). Listed from the same constants the
/// service uses, so a new type cannot be missing here.
pub struct EventObjectType;

impl utoipa::PartialSchema for EventObjectType {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let types = EventType::ALL
            .iter()
            .map(|t| t.as_str())
            .chain([TEST_EVENT_TYPE]);
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::Type::String)
            .enum_values(Some(types))
            .description(Some(
                "What happened. `webhook_endpoint.test` is only in the test delivery that \
                 `POST /v1/webhook_endpoints/{id}/test` sends: it is not in the events list, \
                 and `enabled_events` cannot name it.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for EventObjectType {}

#[derive(Serialize, utoipa::ToSchema)]
pub struct EventData {
    /// The object right after the change (a payment, refund, payout or dispute), as `GET`
    /// would have shown it then.
    #[schema(value_type = Object)]
    object: serde_json::Value,
}

/// A page of events.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EventList {
    #[schema(example = "list")]
    object: String,
    data: Vec<EventObject>,
    has_more: bool,
}

/// `{"object": "list", "data": [...], "has_more": …}` of stored event bodies, unchanged.
pub fn render_list<'a>(bodies: impl Iterator<Item = &'a str>, has_more: bool) -> String {
    let data: Vec<&str> = bodies.collect();
    format!(
        "{{\"object\":\"list\",\"data\":[{}],\"has_more\":{has_more}}}",
        data.join(",")
    )
}
