//! Events (docs/events.md): every change of a payment, refund, payout or dispute that matters
//! to a merchant, recorded in the transaction of the change, readable from a feed that never
//! skips and delivered to the merchant's webhook endpoints.
//!
//! ```text
//! change (payment finished, refund finished, …) ── one transaction ──────────────────────┐
//!   UPDATE … WHERE status = '<expected>'   ← the guard decides who changes it (and emits) │
//!   events::record: INSERT events (seq NULL) + INSERT webhook_deliveries per endpoint     │
//!                                                                             COMMIT ─────┘
//! GET /v1/events?order=asc&after=… ─▶ sequence_pending (numbers committed events, one pass
//!                                     at a time) ─▶ SELECT … WHERE seq > seq(after) ORDER BY seq
//! delivery worker ─▶ claims due deliveries (lease) ─▶ POST, signed ─▶ records the attempt
//! ```
//!
//! Why the feed never skips is written down in `docs/events.md`.

mod event_type;
pub mod view;

pub use event_type::{EventType, TEST_EVENT_TYPE};

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use crate::auth::Merchant;
use crate::db::deliveries::{self as delivery_rows, DeliveryRow};
use crate::db::events::{self as rows, NewEventRow};
use crate::db::{Db, DbConnection, DbError};
use crate::domain::{DeliveryId, EventId, Timestamp, format_timestamp, now};
use crate::error::ApiError;
use crate::state::AppState;

/// Which events an endpoint wants: exact types, or `*` for all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnabledEvents {
    All,
    Only(Vec<EventType>),
}

impl EnabledEvents {
    pub const WILDCARD: &'static str = "*";

    /// From the API's list; `Err` names the first entry that is neither a type nor `*`.
    pub fn parse<'a>(items: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut types = Vec::new();
        let mut all = false;
        for item in items {
            if item == Self::WILDCARD {
                all = true;
            } else {
                let kind = EventType::parse(item).ok_or_else(|| item.to_owned())?;
                if !types.contains(&kind) {
                    types.push(kind);
                }
            }
        }
        Ok(if all { Self::All } else { Self::Only(types) })
    }

    /// As stored and shown: a JSON array of strings.
    pub fn to_json(&self) -> String {
        let items: Vec<&str> = match self {
            Self::All => vec![Self::WILDCARD],
            Self::Only(types) => types.iter().map(|t| t.as_str()).collect(),
        };
        serde_json::to_string(&items).unwrap_or_else(|_| "[]".to_owned())
    }

    /// From the stored JSON array; a value that does not parse matches nothing.
    pub fn from_stored(json: &str) -> Self {
        serde_json::from_str::<Vec<String>>(json)
            .ok()
            .and_then(|items| Self::parse(items.iter().map(String::as_str)).ok())
            .unwrap_or(Self::Only(Vec::new()))
    }

    pub fn matches(&self, kind: EventType) -> bool {
        match self {
            Self::All => true,
            Self::Only(types) => types.contains(&kind),
        }
    }
}

use crate::domain::RequestRef;

/// One change to record: `object` is the payment or refund right after it, as the API
/// renders it (JSON). `request` is `None` when no API request made it (a provider webhook,
/// the recovery worker, an expiry).
pub struct NewEvent<'a> {
    pub merchant_id: &'a str,
    pub kind: EventType,
    pub object_id: &'a str,
    pub object: &'a str,
    pub request: Option<&'a RequestRef>,
}

/// Records one change: the event and one delivery per enabled endpoint of the merchant
/// whose `enabled_events` match. Call it inside the transaction that makes the change,
/// after the guarded update that decided this caller makes it, so the event commits (or
/// rolls back) with the change: never one without the other, never twice. Returns the
/// event's id.
pub fn record(conn: &mut DbConnection, event: NewEvent<'_>) -> diesel::QueryResult<String> {
    let mut ids = record_all(conn, &[event], &[])?;
    ids.pop().ok_or(diesel::result::Error::NotFound)
}

/// [`record`] for many changes at once (a group commit of finishes), with the ledger's
/// `postings` of the same changes: one statement inserts the events and the postings and
/// reads the endpoints of all their merchants (PostgreSQL), then one insert of the
/// deliveries (none if there are none). Returns the events' ids, in order.
pub fn record_all(
    conn: &mut DbConnection,
    events: &[NewEvent<'_>],
    postings: &[crate::ledger::Posting],
) -> diesel::QueryResult<Vec<String>> {
    if events.is_empty() {
        crate::ledger::post(conn, postings)?;
        return Ok(Vec::new());
    }
    let created_at = now();
    let mut ids = Vec::with_capacity(events.len());
    let mut bodies = Vec::with_capacity(events.len());
    for event in events {
        let id = EventId::generate().into_string();
        let body = render_event(
            &id,
            event.kind.as_str(),
            created_at,
            event.object,
            event.request,
        )
        .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
        ids.push(id);
        bodies.push(body);
    }
    let rows: Vec<NewEventRow<'_>> = events
        .iter()
        .zip(ids.iter().zip(&bodies))
        .map(|(event, (id, body))| NewEventRow {
            id,
            merchant_id: event.merchant_id,
            event_type: event.kind.as_str(),
            object_id: event.object_id,
            body,
            created_at,
        })
        .collect();
    let (transactions, entries) = crate::ledger::rows_of(postings);
    let mut merchants: Vec<&str> = events.iter().map(|e| e.merchant_id).collect();
    merchants.sort_unstable();
    merchants.dedup();
    let mut endpoints: HashMap<String, Vec<(String, EnabledEvents)>> = HashMap::new();
    for (merchant_id, endpoint, enabled) in
        rows::insert_and_find_endpoints(conn, &rows, (&transactions, &entries), &merchants)?
    {
        endpoints
            .entry(merchant_id)
            .or_default()
            .push((endpoint, EnabledEvents::from_stored(&enabled)));
    }
    let mut deliveries = Vec::new();
    for (event, id) in events.iter().zip(&ids) {
        for (endpoint_id, enabled) in endpoints.get(event.merchant_id).into_iter().flatten() {
            if enabled.matches(event.kind) {
                deliveries.push(DeliveryRow::due_now(
                    DeliveryId::generate().into_string(),
                    endpoint_id,
                    id,
                    event.kind.as_str(),
                    created_at,
                ));
            }
        }
    }
    delivery_rows::insert(conn, &deliveries)?;
    Ok(ids)
}

/// The event object: `{"id", "object": "event", "type", "created_at", "data": {"object":
/// …}, "request"}`, with `object` (already JSON) embedded as it is, so the payment in an
/// event reads exactly as the API answers it.
pub fn render_event(
    id: &str,
    kind: &str,
    created_at: Timestamp,
    object: &str,
    request: Option<&RequestRef>,
) -> serde_json::Result<String> {
    #[derive(Serialize)]
    struct Head<'a> {
        id: &'a str,
        object: &'static str,
        #[serde(rename = "type")]
        kind: &'a str,
        created_at: String,
    }
    // `object` must be one JSON value: checked, so a bad caller cannot corrupt the feed.
    serde_json::from_str::<serde::de::IgnoredAny>(object)?;
    let head = serde_json::to_string(&Head {
        id,
        object: "event",
        kind,
        created_at: format_timestamp(created_at),
    })?;
    let request = serde_json::to_string(&request)?;
    let open = head.strip_suffix('}').unwrap_or(&head);
    Ok(format!(
        "{open},\"data\":{{\"object\":{object}}},\"request\":{request}}}"
    ))
}

/// How many events one sequencing pass numbers, and how many passes a read may run.
const SEQUENCE_BATCH: i64 = 1000;
const SEQUENCE_PASSES: usize = 20;

/// Numbers every committed event that has none yet (bounded), so the feed can show it.
fn sequence_committed(conn: &mut DbConnection) -> diesel::QueryResult<()> {
    for _ in 0..SEQUENCE_PASSES {
        if !rows::has_unsequenced(conn)? || rows::sequence_pending(conn, SEQUENCE_BATCH)? == 0 {
            break;
        }
    }
    Ok(())
}

pub async fn get_event(
    state: &AppState,
    merchant: &Merchant,
    id: String,
) -> Result<String, ApiError> {
    if !EventId::is_valid(&id) {
        return Err(no_such_event());
    }
    let merchant_id = merchant.id.clone();
    state
        .db
        .run(move |conn| rows::find(conn, &merchant_id, &id))
        .await?
        .map(|row| row.body)
        .ok_or_else(no_such_event)
}

fn no_such_event() -> ApiError {
    ApiError::NotFound("no such event".to_owned())
}

/// Which page of events to read.
#[derive(Debug, Clone)]
pub enum EventPage {
    /// Newest first, like the other lists.
    NewestFirst { starting_after: Option<String> },
    /// The feed: in the order events became visible, after the event `after` (from the
    /// oldest kept event without it).
    Feed { after: Option<String> },
}

pub async fn list_events(
    state: &AppState,
    merchant: &Merchant,
    page: EventPage,
    kind: Option<EventType>,
    limit: i64,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let kind = kind.map(EventType::as_str);
    let rows = state
        .db
        .run(move |conn| match page {
            EventPage::NewestFirst { starting_after } => Ok(rows::list_newest_first(
                conn,
                &merchant_id,
                kind,
                starting_after.as_deref(),
                limit,
            )?
            .ok_or_else(|| ApiError::unknown_cursor("event"))),
            EventPage::Feed { after } => {
                sequence_committed(conn)?;
                let after_seq = match after {
                    None => 0,
                    Some(id) => match rows::seq_of(conn, &merchant_id, &id)? {
                        None => {
                            return Ok(Err(ApiError::NotFound(
                                "`after` names no event of this merchant (it may have been \
                                 pruned)"
                                    .to_owned(),
                            )));
                        }
                        Some(Some(seq)) => seq,
                        // Not numbered yet after every pass allowed: nothing after it is
                        // visible yet either; the client asks again.
                        Some(None) => return Ok(Ok(Vec::new())),
                    },
                };
                rows::feed(conn, &merchant_id, kind, after_seq, limit).map(Ok)
            }
        })
        .await??;
    let (rows, has_more) = crate::db::page(rows, limit);
    Ok(view::render_list(
        rows.iter().map(|r| r.body.as_str()),
        has_more,
    ))
}

/// How often expired events are pruned, the first time shortly after start.
const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);
const PRUNE_FIRST_DELAY: Duration = Duration::from_secs(60);
const PRUNE_BATCH: i64 = 1000;

/// Deletes events (with their deliveries) older than `retention`, `PRUNE_BATCH` rows per
/// statement. Returns how many went. Idempotency keys are never pruned, the webhook
/// endpoints' no more than the payments': a retry a year later still replays.
pub async fn prune_expired(
    db: &Db,
    now: Timestamp,
    retention: chrono::TimeDelta,
) -> Result<usize, DbError> {
    let cutoff = now - retention;
    let full = usize::try_from(PRUNE_BATCH).unwrap_or(usize::MAX);
    let mut total = 0;
    loop {
        let deleted = db
            .run(move |conn| rows::delete_created_before(conn, cutoff, PRUNE_BATCH))
            .await?;
        total += deleted;
        if deleted < full {
            return Ok(total);
        }
    }
}

/// Prunes the events past `EVENT_RETENTION_DAYS` shortly after start, then hourly.
pub fn spawn_retention_task(state: &AppState) {
    let db = state.db.clone();
    let retention = state.settings.event_retention;
    state.shutdown.spawn_periodic(
        "event-retention",
        PRUNE_FIRST_DELAY,
        PRUNE_INTERVAL,
        move || {
            let db = db.clone();
            async move {
                match prune_expired(&db, now(), retention).await {
                    Ok(0) => {}
                    Ok(deleted) => tracing::info!(deleted, "expired events pruned"),
                    Err(e) => tracing::warn!(error = %e, "pruning events failed; will retry"),
                }
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_embeds_the_object_as_rendered_and_names_its_request() {
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0)
            .unwrap()
            .naive_utc();
        let request = RequestRef {
            id: "req-1".into(),
            idempotency_key: Some("k\"1".into()),
        };
        let body = render_event(
            "evt_1",
            "payment.succeeded",
            at,
            r#"{"id":"pay_1","amount":5}"#,
            Some(&request),
        )
        .unwrap();
        assert_eq!(
            body,
            r#"{"id":"evt_1","object":"event","type":"payment.succeeded","created_at":"2023-11-14T22:13:20.000000Z","data":{"object":{"id":"pay_1","amount":5}},"request":{"id":"req-1","idempotency_key":"k\"1"}}"#
        );
        let none = render_event("evt_2", "refund.failed", at, "{}", None).unwrap();
        assert!(
            none.ends_with(r#""data":{"object":{}},"request":null}"#),
            "{none}"
        );
        assert!(render_event("evt_3", "x", at, "{not json", None).is_err());
    }

    #[test]
    fn enabled_events_are_types_or_the_wildcard() {
        let some =
            EnabledEvents::parse(["payment.failed", "refund.succeeded", "payment.failed"]).unwrap();
        assert!(some.matches(EventType::PaymentFailed));
        assert!(!some.matches(EventType::PaymentSucceeded));
        assert_eq!(some.to_json(), r#"["payment.failed","refund.succeeded"]"#);
        assert_eq!(EnabledEvents::from_stored(&some.to_json()), some);
        let all = EnabledEvents::parse(["*"]).unwrap();
        assert!(EventType::ALL.iter().all(|t| all.matches(*t)));
        assert_eq!(
            EnabledEvents::parse(["payment.*"]),
            Err("payment.*".to_owned())
        );
        assert!(!EnabledEvents::from_stored("garbage").matches(EventType::PaymentFailed));
    }
}
