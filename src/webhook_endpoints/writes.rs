//! The endpoint requests that only write the database: each is an [`EndpointWrite`] run
//! once per `Idempotency-Key` by the mechanism's database-only mode
//! ([`crate::operations::keyed`]), its claim, work and answer in one transaction.

use std::collections::HashMap;

use super::endpoint::{REPLAY_LIMIT, RESOURCE, no_such_endpoint};
use super::request::{
    EndpointUpdate, NewEndpoint, Replay, ReplayScope, Rotation, delete_fingerprint, url_error,
};
use super::view;
use crate::auth::Merchant;
use crate::db::DbConnection;
use crate::db::deliveries::{self as delivery_rows, DeliveryRow};
use crate::db::webhook_endpoints::{self as rows, EndpointRow};
use crate::domain::{DeliveryId, DeliveryStatus, EndpointId, EndpointStatus, IdempotencyKey, now};
use crate::error::ApiError;
use crate::events::{EnabledEvents, EventType};
use crate::idempotency::Answer;
use crate::operations::keyed::{DbWork, Refusal, write_once};
use crate::signing::WebhookSecret;
use crate::state::AppState;

/// A key's scope is the operation it was used on.
const CREATE: &str = "POST /v1/webhook_endpoints";
const UPDATE: &str = "POST /v1/webhook_endpoints/{id}";
const ROTATE: &str = "POST /v1/webhook_endpoints/{id}/rotate_secret";
const REPLAY: &str = "POST /v1/webhook_endpoints/{id}/replay";
const DELETE: &str = "DELETE /v1/webhook_endpoints/{id}";

/// What an endpoint request that only writes the database does.
#[derive(Clone)]
pub enum EndpointWrite {
    Create(NewEndpoint),
    Update { id: String, update: EndpointUpdate },
    Rotate { id: String, rotation: Rotation },
    Replay { id: String, replay: Replay },
    Delete { id: String },
}

impl DbWork for EndpointWrite {
    const RESOURCE: &'static str = RESOURCE;

    fn run(&self, conn: &mut DbConnection, merchant_id: &str) -> Result<Answer, Refusal> {
        match self {
            Self::Create(request) => create_in(conn, merchant_id, request),
            Self::Update { id, update } => update_in(conn, merchant_id, id, update),
            Self::Rotate { id, rotation } => rotate_in(conn, merchant_id, id, rotation),
            Self::Replay { id, replay } => replay_in(conn, merchant_id, id, replay),
            Self::Delete { id } => delete_in(conn, merchant_id, id),
        }
    }
}

pub async fn create(
    state: &AppState,
    merchant: &Merchant,
    key: Option<IdempotencyKey>,
    request: NewEndpoint,
) -> Result<Answer, ApiError> {
    request
        .url
        .check(state.settings.webhook_allow_private_urls)
        .await
        .map_err(url_error)?;
    let fingerprint = request.fingerprint();
    let work = EndpointWrite::Create(request);
    write_once(state, merchant, key, CREATE, fingerprint, work).await
}

fn create_in(
    conn: &mut DbConnection,
    merchant_id: &str,
    request: &NewEndpoint,
) -> Result<Answer, Refusal> {
    let at = now();
    let row = EndpointRow {
        id: EndpointId::generate().into_string(),
        merchant_id: merchant_id.to_owned(),
        url: request.url.as_str().to_owned(),
        enabled_events: request.enabled_events.to_json(),
        description: request.description.clone().filter(|d| !d.is_empty()),
        status: EndpointStatus::Enabled,
        secret: WebhookSecret::generate(),
        previous_secret: None,
        previous_secret_expires_at: None,
        failing_since: None,
        created_at: at,
        updated_at: at,
    };
    rows::insert(conn, &row)?;
    tracing::info!(endpoint_id = %row.id, "webhook endpoint created");
    Ok(Answer::new(201, view::render(&row, true)))
}

/// Locks and reads the merchant's endpoint inside an operation's transaction.
fn locked(conn: &mut DbConnection, merchant_id: &str, id: &str) -> Result<EndpointRow, Refusal> {
    if !rows::lock(conn, merchant_id, id)? {
        return Err(Refusal::Api(no_such_endpoint()));
    }
    rows::find(conn, merchant_id, id)?.ok_or_else(|| Refusal::Api(no_such_endpoint()))
}

pub async fn update(
    state: &AppState,
    merchant: &Merchant,
    id: String,
    key: Option<IdempotencyKey>,
    update: EndpointUpdate,
) -> Result<Answer, ApiError> {
    if !EndpointId::is_valid(&id) {
        return Err(no_such_endpoint());
    }
    if let Some(url) = &update.url {
        url.check(state.settings.webhook_allow_private_urls)
            .await
            .map_err(url_error)?;
    }
    let fingerprint = update.fingerprint(&id);
    let work = EndpointWrite::Update { id, update };
    write_once(state, merchant, key, UPDATE, fingerprint, work).await
}

fn update_in(
    conn: &mut DbConnection,
    merchant_id: &str,
    id: &str,
    update: &EndpointUpdate,
) -> Result<Answer, Refusal> {
    let mut row = locked(conn, merchant_id, id)?;
    if let Some(url) = &update.url {
        row.url = url.as_str().to_owned();
    }
    if let Some(enabled) = &update.enabled_events {
        row.enabled_events = enabled.to_json();
    }
    if let Some(description) = &update.description {
        row.description = Some(description.clone()).filter(|d| !d.is_empty());
    }
    if let Some(status) = update.status
        && status != row.status
    {
        if status == EndpointStatus::Enabled {
            // A fresh start: the failures that disabled it no longer count.
            row.failing_since = None;
        }
        row.status = row
            .status
            .move_to(status)
            .map_err(diesel::result::Error::from)?;
    }
    row.updated_at = now();
    rows::update(conn, &row)?;
    Ok(Answer::new(200, view::render(&row, false)))
}

/// Deletes the endpoint and its deliveries. The API's `DELETE` takes no key (`None`); the
/// dashboard's form passes its own, so that a second submit of the form is the first one's
/// replay (the same result) rather than a 404 for what it deleted itself.
pub async fn delete(
    state: &AppState,
    merchant: &Merchant,
    id: String,
    key: Option<IdempotencyKey>,
) -> Result<Answer, ApiError> {
    if !EndpointId::is_valid(&id) {
        return Err(no_such_endpoint());
    }
    let fingerprint = delete_fingerprint(&id);
    write_once(
        state,
        merchant,
        key,
        DELETE,
        fingerprint,
        EndpointWrite::Delete { id },
    )
    .await
}

fn delete_in(conn: &mut DbConnection, merchant_id: &str, id: &str) -> Result<Answer, Refusal> {
    if !rows::delete(conn, merchant_id, id)? {
        return Err(Refusal::Api(no_such_endpoint()));
    }
    tracing::info!(endpoint_id = %id, "webhook endpoint deleted");
    Ok(Answer::new(200, view::render_deleted(id)))
}

pub async fn rotate_secret(
    state: &AppState,
    merchant: &Merchant,
    id: String,
    key: Option<IdempotencyKey>,
    rotation: Rotation,
) -> Result<Answer, ApiError> {
    if !EndpointId::is_valid(&id) {
        return Err(no_such_endpoint());
    }
    let fingerprint = rotation.fingerprint(&id);
    let work = EndpointWrite::Rotate { id, rotation };
    write_once(state, merchant, key, ROTATE, fingerprint, work).await
}

fn rotate_in(
    conn: &mut DbConnection,
    merchant_id: &str,
    id: &str,
    rotation: &Rotation,
) -> Result<Answer, Refusal> {
    let mut row = locked(conn, merchant_id, id)?;
    let at = now();
    let overlap = chrono::TimeDelta::seconds(rotation.expire_current_in_s);
    let current = std::mem::replace(&mut row.secret, WebhookSecret::generate());
    (row.previous_secret, row.previous_secret_expires_at) = if overlap > chrono::TimeDelta::zero() {
        (Some(current), Some(at + overlap))
    } else {
        (None, None)
    };
    row.updated_at = at;
    rows::update(conn, &row)?;
    tracing::info!(endpoint_id = %row.id, overlap_s = rotation.expire_current_in_s, "webhook endpoint secret rotated");
    Ok(Answer::new(200, view::render(&row, true)))
}

/// Queues the events of `replay` for delivery again, each under its original id: those
/// whose latest delivery to this endpoint failed, or (`all`) every event in the window the
/// endpoint was sent or subscribes to. An event already waiting for this endpoint is not
/// queued twice.
pub async fn replay(
    state: &AppState,
    merchant: &Merchant,
    id: String,
    key: Option<IdempotencyKey>,
    replay: Replay,
) -> Result<Answer, ApiError> {
    if !EndpointId::is_valid(&id) {
        return Err(no_such_endpoint());
    }
    let fingerprint = replay.fingerprint(&id);
    let work = EndpointWrite::Replay { id, replay };
    write_once(state, merchant, key, REPLAY, fingerprint, work).await
}

fn replay_in(
    conn: &mut DbConnection,
    merchant_id: &str,
    id: &str,
    replay: &Replay,
) -> Result<Answer, Refusal> {
    let endpoint = locked(conn, merchant_id, id)?;
    let at = now();
    let until = replay.until.unwrap_or(at);
    let subscribed = EnabledEvents::from_stored(&endpoint.enabled_events);
    let types: Option<Vec<&str>> = match &subscribed {
        EnabledEvents::All => None,
        EnabledEvents::Only(types) => Some(types.iter().map(|t| t.as_str()).collect()),
    };
    let which = match replay.status {
        ReplayScope::Failed => delivery_rows::ReplayCandidates::Failed,
        ReplayScope::All => delivery_rows::ReplayCandidates::DeliveredOr {
            types: types.as_deref(),
        },
    };
    let candidates = delivery_rows::replay_candidates(
        conn,
        merchant_id,
        id,
        replay.since,
        until,
        which,
        REPLAY_LIMIT,
    )?;
    let ids: Vec<String> = candidates
        .iter()
        .map(|(event_id, _)| event_id.clone())
        .collect();
    let mut latest = HashMap::new();
    for (event_id, status) in delivery_rows::statuses_for_events(conn, id, &ids)? {
        latest.insert(event_id, status);
    }
    let mut queued = 0;
    for (event_id, event_type) in candidates {
        let wanted = match (latest.get(&event_id).copied(), replay.status) {
            (Some(DeliveryStatus::Pending), _) => false,
            (Some(status), ReplayScope::Failed) => status == DeliveryStatus::Failed,
            (None, ReplayScope::Failed) => false,
            (Some(_), ReplayScope::All) => true,
            (None, ReplayScope::All) => {
                EventType::parse(&event_type).is_some_and(|t| subscribed.matches(t))
            }
        };
        if wanted {
            delivery_rows::insert(
                conn,
                &[DeliveryRow::due_now(
                    DeliveryId::generate().into_string(),
                    id,
                    &event_id,
                    &event_type,
                    at,
                )],
            )?;
            queued += 1;
        }
    }
    tracing::info!(endpoint_id = %id, queued, "webhook deliveries replayed");
    Ok(Answer::new(
        202,
        view::render_value(&view::Queued { queued }),
    ))
}
