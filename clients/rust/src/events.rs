//! Events: what happened to payments, refunds, payouts and disputes, from the feed, the
//! list, or a webhook delivery ([`crate::WebhookVerifier`]).

use std::fmt;

use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::client::Client;
use crate::error::Error;
use crate::list::{ListParams, Page};
use crate::{Dispute, Payment, Payout, Refund};

/// An event's `type`; also the entries of a webhook endpoint's `enabled_events`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventType {
    PaymentSucceeded,
    PaymentFailed,
    PaymentRequiresCapture,
    PaymentCanceled,
    RefundSucceeded,
    RefundFailed,
    PayoutPaid,
    PayoutFailed,
    /// A dispute was opened (`needs_response`).
    DisputeCreated,
    /// A dispute moved but is still open (evidence submitted: `under_review`).
    DisputeUpdated,
    /// A dispute was decided or closed: `won` or `lost`.
    DisputeClosed,
    /// What [`Client::test_webhook_endpoint`] sends (never in the feed).
    WebhookEndpointTest,
    /// `"*"`: every type, in `enabled_events` only.
    All,
    /// A type this client does not know.
    Other(String),
}

impl EventType {
    pub fn as_str(&self) -> &str {
        match self {
            Self::PaymentSucceeded => "payment.succeeded",
            Self::PaymentFailed => "payment.failed",
            Self::PaymentRequiresCapture => "payment.requires_capture",
            Self::PaymentCanceled => "payment.canceled",
            Self::RefundSucceeded => "refund.succeeded",
            Self::RefundFailed => "refund.failed",
            Self::PayoutPaid => "payout.paid",
            Self::PayoutFailed => "payout.failed",
            Self::DisputeCreated => "dispute.created",
            Self::DisputeUpdated => "dispute.updated",
            Self::DisputeClosed => "dispute.closed",
            Self::WebhookEndpointTest => "webhook_endpoint.test",
            Self::All => "*",
            Self::Other(other) => other,
        }
    }

    pub fn parse(text: &str) -> Self {
        match text {
            "payment.succeeded" => Self::PaymentSucceeded,
            "payment.failed" => Self::PaymentFailed,
            "payment.requires_capture" => Self::PaymentRequiresCapture,
            "payment.canceled" => Self::PaymentCanceled,
            "refund.succeeded" => Self::RefundSucceeded,
            "refund.failed" => Self::RefundFailed,
            "payout.paid" => Self::PayoutPaid,
            "payout.failed" => Self::PayoutFailed,
            "dispute.created" => Self::DisputeCreated,
            "dispute.updated" => Self::DisputeUpdated,
            "dispute.closed" => Self::DisputeClosed,
            "webhook_endpoint.test" => Self::WebhookEndpointTest,
            "*" => Self::All,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|s| Self::parse(&s))
    }
}

/// The event object.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct Event {
    /// `evt_…`; also the `webhook-id` of its deliveries (dedupe on it).
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub created_at: DateTime<Utc>,
    pub data: EventData,
    /// The API request that made the change; `None` when a provider webhook, the recovery
    /// worker or an authorization's expiry made it.
    #[serde(default)]
    pub request: Option<EventRequest>,
}

impl Event {
    /// The payment right after the change, for `payment.*` events.
    pub fn payment(&self) -> Option<&Payment> {
        match &self.data.object {
            EventObject::Payment(payment) => Some(payment),
            _ => None,
        }
    }

    /// The refund right after the change, for `refund.*` events.
    pub fn refund(&self) -> Option<&Refund> {
        match &self.data.object {
            EventObject::Refund(refund) => Some(refund),
            _ => None,
        }
    }

    /// The payout right after the change, for `payout.*` events.
    pub fn payout(&self) -> Option<&Payout> {
        match &self.data.object {
            EventObject::Payout(payout) => Some(payout),
            _ => None,
        }
    }

    /// The dispute right after the change, for `dispute.*` events.
    pub fn dispute(&self) -> Option<&Dispute> {
        match &self.data.object {
            EventObject::Dispute(dispute) => Some(dispute),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct EventData {
    pub object: EventObject,
}

/// The object an event is about, by its `object` field.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum EventObject {
    Payment(Box<Payment>),
    Refund(Box<Refund>),
    Payout(Box<Payout>),
    Dispute(Box<Dispute>),
    /// Anything else (e.g. the body of a `webhook_endpoint.test` event), as sent.
    Other(serde_json::Value),
}

impl<'de> Deserialize<'de> for EventObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let value = serde_json::Value::deserialize(deserializer)?;
        match value.get("object").and_then(|o| o.as_str()) {
            Some("payment") => serde_json::from_value(value)
                .map(|p| Self::Payment(Box::new(p)))
                .map_err(D::Error::custom),
            Some("refund") => serde_json::from_value(value)
                .map(|r| Self::Refund(Box::new(r)))
                .map_err(D::Error::custom),
            Some("payout") => serde_json::from_value(value)
                .map(|p| Self::Payout(Box::new(p)))
                .map_err(D::Error::custom),
            Some("dispute") => serde_json::from_value(value)
                .map(|d| Self::Dispute(Box::new(d)))
                .map_err(D::Error::custom),
            _ => Ok(Self::Other(value)),
        }
    }
}

/// The API request behind an event.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct EventRequest {
    /// Its `X-Request-Id`.
    pub id: String,
    pub idempotency_key: Option<String>,
}

/// Filters and paging of `GET /v1/events` (newest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListEvents {
    pub limit: Option<u32>,
    pub starting_after: Option<String>,
    pub event_type: Option<EventType>,
}

impl ListParams for ListEvents {
    fn limit(&self) -> Option<u32> {
        self.limit
    }

    fn starting_after(&self) -> Option<&str> {
        self.starting_after.as_deref()
    }

    fn filters(&self) -> Vec<(&'static str, String)> {
        let event_type = self
            .event_type
            .as_ref()
            .map(|t| ("type", t.as_str().to_owned()));
        event_type.into_iter().collect()
    }
}

/// The page size the feed stream asks for.
const FEED_PAGE: u32 = 100;

impl Client {
    /// One event.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let event = client.get_event("evt_…").await?;
    /// if let Some(payment) = event.payment() { println!("{} is {:?}", payment.id, payment.status) }
    /// # Ok(()) }
    /// ```
    pub async fn get_event(&self, id: &str) -> Result<Event, Error> {
        self.get(self.url(&["events", id])).await
    }

    /// One page of events, newest first.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{EventType, ListEvents};
    ///
    /// let page = client
    ///     .list_events(&ListEvents { event_type: Some(EventType::PaymentFailed), ..Default::default() })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn list_events(&self, params: &ListEvents) -> Result<Page<Event>, Error> {
        self.list(&["events"], params).await
    }

    /// Every event that matches, newest first, page after page.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::TryStreamExt;
    ///
    /// let recent: Vec<_> = client.stream_events(Default::default()).try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn stream_events(&self, params: ListEvents) -> BoxStream<'static, Result<Event, Error>> {
        self.list_all(&["events"], &params)
    }

    /// One page of the feed that never skips (`GET /v1/events?order=asc&after=`): events in
    /// the order they became visible, after `after` (from the oldest kept event when
    /// `None`). Ask again with the last id you got to see every event exactly once.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let mut cursor: Option<String> = None; // persist it between runs
    /// loop {
    ///     let page = client.events_feed(cursor.as_deref(), Some(100)).await?;
    ///     for event in &page.data { println!("{} {}", event.id, event.event_type) }
    ///     if let Some(last) = page.data.last() { cursor = Some(last.id.clone()) }
    ///     if !page.has_more { tokio::time::sleep(std::time::Duration::from_secs(1)).await }
    /// }
    /// # }
    /// ```
    pub async fn events_feed(
        &self,
        after: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Page<Event>, Error> {
        let url = self.url(&["events"]).map(|mut url| {
            let mut query = url.query_pairs_mut();
            query.append_pair("order", "asc");
            if let Some(after) = after {
                query.append_pair("after", after);
            }
            if let Some(limit) = limit {
                query.append_pair("limit", &limit.to_string());
            }
            drop(query);
            url
        });
        self.get(url).await
    }

    /// The feed after `after`, oldest first, up to the newest event visible now (then the
    /// stream ends: start another one after the last id to follow it further).
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::TryStreamExt;
    ///
    /// let mut feed = client.stream_events_feed(Some("evt_…".into()));
    /// while let Some(event) = feed.try_next().await? { println!("{}", event.id) }
    /// # Ok(()) }
    /// ```
    pub fn stream_events_feed(
        &self,
        after: Option<String>,
    ) -> BoxStream<'static, Result<Event, Error>> {
        let url = self.url(&["events"]).map(|mut url| {
            url.query_pairs_mut()
                .append_pair("order", "asc")
                .append_pair("limit", &FEED_PAGE.to_string());
            url
        });
        self.paginate(url, "after", after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_parses_with_its_payment() {
        let json = r#"{"id":"evt_1","object":"event","type":"payment.succeeded","created_at":"2026-11-22T06:00:00Z",
            "data":{"object":{"id":"pay_1","object":"payment","amount":2000,"currency":"usd","status":"succeeded",
            "capture_method":"automatic","amount_capturable":0,"amount_captured":2000,"amount_refunded":0,
            "payment_method":"pm_card_visa","customer_id":null,"description":null,"metadata":{},
            "provider_charge_id":"ch_1","failure_code":null,"failure_message":null,"cancellation_reason":null,
            "created_at":"2026-11-22T06:00:00Z","updated_at":"2026-11-22T06:00:01Z"}},
            "request":{"id":"req-1","idempotency_key":"order-1"}}"#;
        let event: Event = serde_json::from_str(json).expect("event");
        assert_eq!(event.event_type, EventType::PaymentSucceeded);
        let payment = event.payment().expect("a payment");
        assert_eq!(payment.amount_captured, 2000);
        assert_eq!(
            payment.amount_disputed, 0,
            "absent: a server before disputes"
        );
        assert_eq!(
            event.request.and_then(|r| r.idempotency_key).as_deref(),
            Some("order-1")
        );
    }

    #[test]
    fn a_payout_event_parses_with_its_payout() {
        let json = r#"{"id":"evt_3","object":"event","type":"payout.failed","created_at":"2026-11-22T06:00:00Z",
            "data":{"object":{"id":"po_1","object":"payout","amount":1500,"currency":"usd",
            "destination":"ba_test_closed","description":null,"status":"failed","provider_payout_id":"tr_1",
            "failure_code":"account_closed","created_at":"2026-11-22T06:00:00Z","updated_at":"2026-11-22T06:00:01Z"}},
            "request":null}"#;
        let event: Event = serde_json::from_str(json).expect("event");
        assert_eq!(event.event_type, EventType::PayoutFailed);
        let payout = event.payout().expect("a payout");
        assert_eq!(payout.failure_code.as_deref(), Some("account_closed"));
        assert!(event.payment().is_none() && event.refund().is_none());
        assert_eq!(EventType::parse("payout.paid"), EventType::PayoutPaid);
    }

    #[test]
    fn a_dispute_event_parses_with_its_dispute() {
        let json = r#"{"id":"evt_4","object":"event","type":"dispute.closed","created_at":"2026-11-28T06:00:00Z",
            "data":{"object":{"id":"dp_1","object":"dispute","payment_id":"pay_1","amount":2000,
            "currency":"usd","reason":"fraudulent","status":"won","evidence":{"text":"winning_evidence"},
            "evidence_submitted_at":"2026-11-28T05:00:00Z","evidence_due_by":"2026-12-05T00:00:00Z",
            "provider_dispute_id":"du_1","created_at":"2026-11-28T04:00:00Z","updated_at":"2026-11-28T06:00:00Z"}},
            "request":null}"#;
        let event: Event = serde_json::from_str(json).expect("event");
        assert_eq!(event.event_type, EventType::DisputeClosed);
        let dispute = event.dispute().expect("a dispute");
        assert_eq!(dispute.status, crate::DisputeStatus::Won);
        assert_eq!(dispute.evidence.text.as_deref(), Some("winning_evidence"));
        assert!(event.payment().is_none() && event.payout().is_none());
        for (text, kind) in [
            ("dispute.created", EventType::DisputeCreated),
            ("dispute.updated", EventType::DisputeUpdated),
            ("dispute.closed", EventType::DisputeClosed),
        ] {
            assert_eq!(EventType::parse(text), kind);
            assert_eq!(kind.as_str(), text);
        }
    }

    #[test]
    fn unknown_types_and_objects_are_kept() {
        let json = r#"{"id":"evt_2","type":"webhook_endpoint.test","created_at":"2026-11-22T06:00:00Z",
            "data":{"object":{"hello":"world"}},"request":null}"#;
        let event: Event = serde_json::from_str(json).expect("event");
        assert_eq!(event.event_type, EventType::WebhookEndpointTest);
        assert!(matches!(event.data.object, EventObject::Other(_)));
        assert_eq!(
            EventType::parse("payment.exploded").as_str(),
            "payment.exploded"
        );
        assert_eq!(
            serde_json::to_string(&EventType::All).expect("json"),
            r#""*""#
        );
    }
}
