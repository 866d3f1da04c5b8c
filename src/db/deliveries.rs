//! Webhook deliveries: one row per (event, endpoint) to deliver, the queue the delivery
//! worker drains. A row is claimed with a lease by one guarded update, so of all workers
//! in all instances exactly one holds a delivery's attempt at a time.

use diesel::prelude::*;

use super::pool::DbConnection;
use super::schema::{events, webhook_deliveries, webhook_endpoints};
use crate::domain::{DeliveryStatus, EndpointStatus, Timestamp};

const PENDING: DeliveryStatus = DeliveryStatus::Pending;

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = webhook_deliveries)]
pub struct DeliveryRow {
    pub id: String,
    pub endpoint_id: String,
    pub event_id: String,
    pub event_type: String,
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub status: DeliveryStatus,
    pub attempts: i32,
    pub next_attempt_at: Option<Timestamp>,
    pub lease_token: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub last_attempt_at: Option<Timestamp>,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub last_duration_ms: Option<i64>,
    pub created_at: Timestamp,
}

impl DeliveryRow {
    /// A delivery of `event_id` to `endpoint_id`, due at once.
    pub fn due_now(
        id: String,
        endpoint_id: &str,
        event_id: &str,
        event_type: &str,
        at: Timestamp,
    ) -> Self {
        Self {
            id,
            endpoint_id: endpoint_id.to_owned(),
            event_id: event_id.to_owned(),
            event_type: event_type.to_owned(),
            status: PENDING,
            attempts: 0,
            next_attempt_at: Some(at),
            lease_token: None,
            lease_expires_at: None,
            last_attempt_at: None,
            last_status_code: None,
            last_error: None,
            last_duration_ms: None,
            created_at: at,
        }
    }
}

super::insert::unnest_insert! {
    /// The deliveries of a group-commit batch's events, in one prepared statement.
    InsertDeliveries<'a> for DeliveryRow => "webhook_deliveries" {
        id: diesel::sql_types::Text = |r| -> &'a str { &r.id },
        endpoint_id: diesel::sql_types::Text = |r| -> &'a str { &r.endpoint_id },
        event_id: diesel::sql_types::Text = |r| -> &'a str { &r.event_id },
        event_type: diesel::sql_types::Text = |r| -> &'a str { &r.event_type },
        status: diesel::sql_types::Text = |r| -> &'static str { r.status.as_str() },
        attempts: diesel::sql_types::Integer = |r| -> i32 { r.attempts },
        next_attempt_at: diesel::sql_types::Nullable<diesel::sql_types::Timestamp> =
            |r| -> Option<Timestamp> { r.next_attempt_at },
        lease_token: diesel::sql_types::Nullable<diesel::sql_types::Text> =
            |r| -> Option<&'a str> { r.lease_token.as_deref() },
        lease_expires_at: diesel::sql_types::Nullable<diesel::sql_types::Timestamp> =
            |r| -> Option<Timestamp> { r.lease_expires_at },
        last_attempt_at: diesel::sql_types::Nullable<diesel::sql_types::Timestamp> =
            |r| -> Option<Timestamp> { r.last_attempt_at },
        last_status_code: diesel::sql_types::Nullable<diesel::sql_types::Integer> =
            |r| -> Option<i32> { r.last_status_code },
        last_error: diesel::sql_types::Nullable<diesel::sql_types::Text> =
            |r| -> Option<&'a str> { r.last_error.as_deref() },
        last_duration_ms: diesel::sql_types::Nullable<diesel::sql_types::BigInt> =
            |r| -> Option<i64> { r.last_duration_ms },
        created_at: diesel::sql_types::Timestamp = |r| -> Timestamp { r.created_at },
    }
}

/// Inserts `rows`: one statement on PostgreSQL (however many), one per row on SQLite.
pub fn insert(conn: &mut DbConnection, rows: &[DeliveryRow]) -> QueryResult<()> {
    super::insert_rows!(conn, webhook_deliveries::table, rows, InsertDeliveries)
}

type DueAndFree = diesel::dsl::And<
    diesel::dsl::And<
        diesel::dsl::Eq<webhook_deliveries::status, &'static str>,
        diesel::dsl::LtEq<webhook_deliveries::next_attempt_at, Timestamp>,
    >,
    diesel::dsl::Or<
        diesel::dsl::IsNull<webhook_deliveries::lease_expires_at>,
        diesel::dsl::LtEq<webhook_deliveries::lease_expires_at, Timestamp>,
    >,
>;

/// Pending, due by `now`, and nobody's lease on it.
fn due_and_free(now: Timestamp) -> DueAndFree {
    webhook_deliveries::status
        .eq(PENDING.as_str())
        .and(webhook_deliveries::next_attempt_at.le(now))
        .and(
            webhook_deliveries::lease_expires_at
                .is_null()
                .or(webhook_deliveries::lease_expires_at.le(now)),
        )
}

/// Enabled endpoints with a pending delivery that is due and whose lease is free, leaving
/// out `busy` ones (those this instance already sends to as much as it may).
pub fn endpoints_with_due(
    conn: &mut DbConnection,
    now: Timestamp,
    busy: &[String],
    limit: i64,
) -> QueryResult<Vec<String>> {
    let mut query = webhook_deliveries::table
        .inner_join(webhook_endpoints::table)
        .filter(due_and_free(now))
        .filter(webhook_endpoints::status.eq(EndpointStatus::Enabled.as_str()))
        .select(webhook_deliveries::endpoint_id)
        .distinct()
        .limit(limit)
        .into_boxed();
    if !busy.is_empty() {
        query = query.filter(webhook_deliveries::endpoint_id.ne_all(busy.to_vec()));
    }
    query.load(conn)
}

/// When the next pending delivery falls due after `now`, if one does (its lease aside):
/// the worker's next pass need not wait longer.
pub fn next_due_after(conn: &mut DbConnection, now: Timestamp) -> QueryResult<Option<Timestamp>> {
    webhook_deliveries::table
        .filter(webhook_deliveries::status.eq(PENDING.as_str()))
        .filter(webhook_deliveries::next_attempt_at.gt(now))
        .select(diesel::dsl::min(webhook_deliveries::next_attempt_at))
        .first(conn)
}

/// Up to `limit` due deliveries of one endpoint whose lease is free, most overdue first.
pub fn due_for_endpoint(
    conn: &mut DbConnection,
    endpoint_id: &str,
    now: Timestamp,
    limit: i64,
) -> QueryResult<Vec<String>> {
    webhook_deliveries::table
        .filter(webhook_deliveries::endpoint_id.eq(endpoint_id))
        .filter(due_and_free(now))
        .order(webhook_deliveries::next_attempt_at.asc())
        .select(webhook_deliveries::id)
        .limit(limit)
        .load(conn)
}

/// Takes the lease of a due delivery. Returns whether this caller won; of any number of
/// workers at once exactly one does.
pub fn claim(
    conn: &mut DbConnection,
    id: &str,
    token: &str,
    now: Timestamp,
    lease_until: Timestamp,
) -> QueryResult<bool> {
    diesel::update(
        webhook_deliveries::table
            .filter(webhook_deliveries::id.eq(id))
            .filter(due_and_free(now)),
    )
    .set((
        webhook_deliveries::lease_token.eq(token),
        webhook_deliveries::lease_expires_at.eq(lease_until),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// What an attempt needs: the delivery, the event's exact body, where to and with what keys.
#[derive(Debug, Clone, Queryable)]
pub struct Claimed {
    pub delivery_id: String,
    pub endpoint_id: String,
    pub event_id: String,
    pub attempts: i32,
    pub body: String,
    pub url: String,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<Timestamp>,
}

pub fn load_claimed(conn: &mut DbConnection, id: &str) -> QueryResult<Option<Claimed>> {
    webhook_deliveries::table
        .inner_join(webhook_endpoints::table)
        .inner_join(events::table)
        .filter(webhook_deliveries::id.eq(id))
        .select((
            webhook_deliveries::id,
            webhook_deliveries::endpoint_id,
            webhook_deliveries::event_id,
            webhook_deliveries::attempts,
            events::body,
            webhook_endpoints::url,
            webhook_endpoints::secret,
            webhook_endpoints::previous_secret,
            webhook_endpoints::previous_secret_expires_at,
        ))
        .first(conn)
        .optional()
}

/// One attempt as it went.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    pub at: Timestamp,
    pub status_code: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// Where a delivery goes after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    Succeeded,
    RetryAt(Timestamp),
    Failed,
}

/// Records an attempt and the delivery's next step, and gives up the lease. Guarded by the
/// lease token: returns false (nothing written) if this worker no longer held it.
pub fn finish_attempt(
    conn: &mut DbConnection,
    id: &str,
    token: &str,
    attempt: &AttemptRecord,
    next: NextStep,
) -> QueryResult<bool> {
    let (status, next_attempt_at) = match next {
        NextStep::Succeeded => (DeliveryStatus::Succeeded, None),
        NextStep::RetryAt(at) => (PENDING, Some(at)),
        NextStep::Failed => (DeliveryStatus::Failed, None),
    };
    let status = PENDING.move_to(status)?;
    diesel::update(
        webhook_deliveries::table
            .filter(webhook_deliveries::id.eq(id))
            .filter(webhook_deliveries::lease_token.eq(token))
            .filter(webhook_deliveries::status.eq(PENDING.as_str())),
    )
    .set((
        webhook_deliveries::status.eq(status.as_str()),
        webhook_deliveries::attempts.eq(webhook_deliveries::attempts + 1),
        webhook_deliveries::next_attempt_at.eq(next_attempt_at),
        webhook_deliveries::lease_token.eq(None::<String>),
        webhook_deliveries::lease_expires_at.eq(None::<Timestamp>),
        webhook_deliveries::last_attempt_at.eq(attempt.at),
        webhook_deliveries::last_status_code.eq(attempt.status_code),
        webhook_deliveries::last_error.eq(&attempt.error),
        webhook_deliveries::last_duration_ms.eq(attempt.duration_ms),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// An endpoint's deliveries, newest first, `limit + 1` rows; `None` if `starting_after`
/// names no delivery of this endpoint.
pub fn list_for_endpoint(
    conn: &mut DbConnection,
    endpoint_id: &str,
    status: Option<DeliveryStatus>,
    starting_after: Option<&str>,
    limit: i64,
) -> QueryResult<Option<Vec<DeliveryRow>>> {
    if let Some(cursor) = starting_after {
        let known = webhook_deliveries::table
            .filter(webhook_deliveries::id.eq(cursor.to_owned()))
            .filter(webhook_deliveries::endpoint_id.eq(endpoint_id));
        if !diesel::select(diesel::dsl::exists(known)).get_result::<bool>(conn)? {
            return Ok(None);
        }
    }
    let mut query = webhook_deliveries::table
        .filter(webhook_deliveries::endpoint_id.eq(endpoint_id))
        .select(DeliveryRow::as_select())
        .order(webhook_deliveries::id.desc())
        .limit(limit + 1)
        .into_boxed();
    if let Some(status) = status {
        query = query.filter(webhook_deliveries::status.eq(status.as_str()));
    }
    if let Some(cursor) = starting_after {
        query = query.filter(webhook_deliveries::id.lt(cursor.to_owned()));
    }
    query.load(conn).map(Some)
}

/// Which events a replay may queue again: only those an endpoint had a delivery of that
/// failed, or also those it subscribes to (`types`, `None` for all).
pub enum ReplayCandidates<'a> {
    Failed,
    DeliveredOr { types: Option<&'a [&'a str]> },
}

/// The merchant's events created in `[since, until]` that a replay to `endpoint_id` may
/// queue again, oldest first, at most `limit`. Chosen in SQL, so the limit counts only
/// events that concern the endpoint, never the merchant's other events.
pub fn replay_candidates(
    conn: &mut DbConnection,
    merchant_id: &str,
    endpoint_id: &str,
    since: Timestamp,
    until: Timestamp,
    candidates: ReplayCandidates<'_>,
    limit: i64,
) -> QueryResult<Vec<(String, String)>> {
    let delivered = webhook_deliveries::table
        .filter(webhook_deliveries::endpoint_id.eq(endpoint_id))
        .select(webhook_deliveries::event_id);
    let mut query = events::table
        .filter(events::merchant_id.eq(merchant_id))
        .filter(events::created_at.ge(since))
        .filter(events::created_at.le(until))
        .order(events::id.asc())
        .select((events::id, events::event_type))
        .limit(limit)
        .into_boxed();
    query = match candidates {
        ReplayCandidates::Failed => query.filter(events::id.eq_any(
            delivered.filter(webhook_deliveries::status.eq(DeliveryStatus::Failed.as_str())),
        )),
        ReplayCandidates::DeliveredOr { types: None } => query,
        ReplayCandidates::DeliveredOr { types: Some(types) } => query.filter(
            events::event_type
                .eq_any(types.to_vec())
                .or(events::id.eq_any(delivered)),
        ),
    };
    query.load(conn)
}

/// `(event id, status)` of the endpoint's deliveries of these events, oldest first (so the
/// last one per event is its latest).
pub fn statuses_for_events(
    conn: &mut DbConnection,
    endpoint_id: &str,
    event_ids: &[String],
) -> QueryResult<Vec<(String, DeliveryStatus)>> {
    let mut out = Vec::new();
    // Bounded IN lists: SQLite allows at most 32 766 parameters per statement.
    for chunk in event_ids.chunks(1000) {
        out.extend(
            webhook_deliveries::table
                .filter(webhook_deliveries::endpoint_id.eq(endpoint_id))
                .filter(webhook_deliveries::event_id.eq_any(chunk))
                .order(webhook_deliveries::id.asc())
                .select((webhook_deliveries::event_id, webhook_deliveries::status))
                .load::<(String, String)>(conn)?,
        );
    }
    out.into_iter()
        .map(|(event_id, status)| {
            let status = DeliveryStatus::try_from(status)
                .map_err(|e| diesel::result::Error::DeserializationError(e.into()))?;
            Ok((event_id, status))
        })
        .collect()
}

/// When the oldest delivery still waiting for an enabled endpoint was created.
pub fn oldest_pending(conn: &mut DbConnection) -> QueryResult<Option<Timestamp>> {
    webhook_deliveries::table
        .inner_join(webhook_endpoints::table)
        .filter(webhook_deliveries::status.eq(PENDING.as_str()))
        .filter(webhook_endpoints::status.eq(EndpointStatus::Enabled.as_str()))
        .select(diesel::dsl::min(webhook_deliveries::created_at))
        .first(conn)
}

/// Every delivery of these events (a payment's timeline).
pub fn for_events(conn: &mut DbConnection, event_ids: &[&str]) -> QueryResult<Vec<DeliveryRow>> {
    webhook_deliveries::table
        .filter(webhook_deliveries::event_id.eq_any(event_ids))
        .select(DeliveryRow::as_select())
        .order(webhook_deliveries::id.asc())
        .load(conn)
}
