//! Merchants' webhook endpoints (docs/api.md): create, read, update, delete, rotate the
//! secret, list deliveries, replay, send a test event.
//!
//! Every POST takes an optional `Idempotency-Key` with the usual rules. An operation that only
//! writes the database claims the key, does its work and stores its answer in ONE
//! transaction, so a key is never left half-used: a concurrent duplicate waits on the
//! key's row (PostgreSQL) or the write lock (SQLite) and then replays the answer. `test`
//! makes an HTTP call, so it claims the key with a lease first and stores its answer
//! after, and a duplicate follows it as payments' duplicates do.

pub mod request;
pub mod view;

use crate::auth::Merchant;
use crate::db::deliveries::{self as delivery_rows, DeliveryRow};
use crate::db::idempotency_keys::{self as key_rows, KeyRow};
use crate::db::webhook_endpoints::{self as rows, ENABLED, EndpointRow};
use crate::db::{DbConnection, DbError};
use crate::deliveries::{self, LEASE_MARGIN, send};
use crate::domain::{IdempotencyKey, Timestamp, new_lease_token, now, sha256_hex};
use crate::error::ApiError;
use crate::events::{
    self, DELIVERY_ID_PREFIX, EVENT_ID_PREFIX, EnabledEvents, EventType, RequestRef, new_id,
};
use crate::idempotency::{self, Answer, Followed, IdempotentRecord};
use crate::metrics::{self, IdempotencyOutcome};
use crate::signing::WebhookSecret;
use crate::state::AppState;

pub use request::{EndpointUpdate, NewEndpoint, Replay, ReplayScope, Rotation, url_error};

pub const ENDPOINT_ID_PREFIX: &str = "we_";
/// Names these requests in the idempotency metrics.
const RESOURCE: &str = "webhook_endpoint";
/// A key's scope is the operation it was used on.
const CREATE: &str = "POST /v1/webhook_endpoints";
const UPDATE: &str = "POST /v1/webhook_endpoints/{id}";
const ROTATE: &str = "POST /v1/webhook_endpoints/{id}/rotate_secret";
const REPLAY: &str = "POST /v1/webhook_endpoints/{id}/replay";
const TEST: &str = "POST /v1/webhook_endpoints/{id}/test";
/// Events one replay looks at, at most (oldest first); replay again from a later `since`
/// for more.
pub const REPLAY_LIMIT: i64 = 10_000;
pub const TEST_EVENT_TYPE: &str = "webhook_endpoint.test";

fn no_such_endpoint() -> ApiError {
    ApiError::NotFound("no such webhook endpoint".to_owned())
}

/// Why an operation's transaction ended without an answer to store.
enum Refusal {
    /// An answer that is not remembered (404): the transaction, key claim included, is
    /// rolled back.
    Api(ApiError),
    Db(diesel::result::Error),
}

impl From<diesel::result::Error> for Refusal {
    fn from(e: diesel::result::Error) -> Self {
        Self::Db(e)
    }
}

/// The claim of `key` for `scope`, held by `token`.
fn key_claim(
    merchant: &Merchant,
    key: &IdempotencyKey,
    scope: &'static str,
    fingerprint: String,
    token: &str,
    lease_until: Timestamp,
) -> KeyRow {
    KeyRow {
        merchant_id: merchant.id.clone(),
        scope: scope.to_owned(),
        idempotency_key: key.as_str().to_owned(),
        request_fingerprint: fingerprint,
        response_status: None,
        response_body: None,
        lease_token: Some(token.to_owned()),
        lease_expires_at: Some(lease_until),
        created_at: now(),
    }
}

/// Runs `op` (which only writes the database) once per key: claim, work and answer in one
/// transaction. Without a key it just runs.
async fn write_once<F>(
    state: &AppState,
    merchant: &Merchant,
    key: Option<IdempotencyKey>,
    scope: &'static str,
    fingerprint: String,
    op: F,
) -> Result<Answer, ApiError>
where
    F: FnOnce(&mut DbConnection) -> Result<Answer, Refusal> + Send + 'static,
{
    use diesel::Connection;
    let token = new_lease_token();
    let claim = key
        .as_ref()
        .map(|k| key_claim(merchant, k, scope, fingerprint, &token, now()));
    let stored = claim.clone();
    let result = state
        .db
        .run(move |conn| {
            let outcome = conn.transaction::<Answer, Refusal, _>(|conn| {
                // First: the insert decides which request with this key runs.
                if let Some(claim) = &stored {
                    key_rows::insert(conn, claim)?;
                }
                let answer = op(conn)?;
                if let Some(claim) = &stored {
                    let status = i32::from(answer.status);
                    key_rows::store_answer(conn, claim, &token, status, &answer.body)?;
                }
                Ok(answer)
            });
            match outcome {
                Ok(answer) => Ok(Ok(answer)),
                Err(Refusal::Api(e)) => Ok(Err(e)),
                Err(Refusal::Db(e)) => Err(e),
            }
        })
        .await;
    match (result, claim) {
        (Ok(Ok(answer)), claim) => {
            if claim.is_some() {
                metrics::idempotency(RESOURCE, IdempotencyOutcome::Created);
            }
            Ok(answer)
        }
        (Ok(Err(refusal)), _) => Err(refusal),
        (Err(DbError::UniqueViolation(_)), Some(claim)) => match follow_key(state, &claim).await? {
            Ok(answer) => Ok(answer),
            // Only a `test` claim is ever seen without its answer.
            Err(_) => Err(ApiError::internal(
                "an idempotency record without its answer",
            )),
        },
        (Err(e), _) => Err(e.into()),
    }
}

/// A key record, named for the in-process registry of running requests.
struct KeyRecord {
    row: KeyRow,
    name: String,
}

impl KeyRecord {
    fn new(row: KeyRow) -> Self {
        let name = idempotency::scope_key(
            RESOURCE,
            &row.merchant_id,
            &format!("{}\u{0}{}", row.scope, row.idempotency_key),
        );
        Self { row, name }
    }
}

impl IdempotentRecord for KeyRecord {
    fn record_id(&self) -> &str {
        &self.name
    }

    fn merchant_id(&self) -> &str {
        &self.row.merchant_id
    }

    fn idempotency_key(&self) -> &str {
        &self.row.idempotency_key
    }

    fn fingerprint(&self) -> &str {
        &self.row.request_fingerprint
    }

    fn lease_token(&self) -> Option<&str> {
        self.row.lease_token.as_deref()
    }

    fn stored_response(&self) -> (Option<i32>, Option<&str>) {
        (self.row.response_status, self.row.response_body.as_deref())
    }

    fn lease_expires_at(&self) -> Option<Timestamp> {
        self.row.lease_expires_at
    }
}

/// A request whose key was claimed before: 422 if it is a different request, else the
/// stored answer (waiting for it while the first request runs). `Err(token)` inside: the
/// first request died and this one took the key over with `token`, so it runs now.
async fn follow_key(state: &AppState, claim: &KeyRow) -> Result<Result<Answer, String>, ApiError> {
    let find = {
        let claim = claim.clone();
        move |conn: &mut DbConnection| {
            key_rows::find(
                conn,
                &claim.merchant_id,
                &claim.scope,
                &claim.idempotency_key,
            )
        }
    };
    let existing = state
        .db
        .run(find.clone())
        .await?
        .ok_or_else(|| ApiError::internal("idempotency key conflict without a record"))?;
    if existing.request_fingerprint != claim.request_fingerprint {
        metrics::idempotency(RESOURCE, IdempotencyOutcome::Reused);
        return Err(ApiError::IdempotencyKeyReused);
    }
    let lease = test_lease(state);
    let followed = idempotency::follow(
        &state.inflight,
        state.settings.idempotency_wait,
        KeyRecord::new(existing),
        |_, token| {
            let row = claim.clone();
            async move {
                let at = now();
                Ok(state
                    .db
                    .run(move |conn| key_rows::take_over(conn, &row, &token, at, at + lease))
                    .await?)
            }
        },
        |_| {
            let find = find.clone();
            async move {
                state
                    .db
                    .run(find)
                    .await?
                    .map(KeyRecord::new)
                    .ok_or_else(|| ApiError::internal("idempotency record vanished"))
            }
        },
    )
    .await;
    idempotency::observe(RESOURCE, &followed);
    Ok(match followed? {
        Followed::Answer(answer) => Ok(answer),
        Followed::TakenOver(_, token) => Err(token),
    })
}

/// How long a `test` owns its key: the attempt's timeout and a margin.
fn test_lease(state: &AppState) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(state.settings.webhook_timeout + LEASE_MARGIN)
        .unwrap_or(chrono::TimeDelta::MAX)
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
    let merchant_id = merchant.id.clone();
    write_once(state, merchant, key, CREATE, fingerprint, move |conn| {
        let at = now();
        let row = EndpointRow {
            id: new_id(ENDPOINT_ID_PREFIX),
            merchant_id,
            url: request.url.as_str().to_owned(),
            enabled_events: request.enabled_events.to_json(),
            description: request.description.filter(|d| !d.is_empty()),
            status: ENABLED.to_owned(),
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
    })
    .await
}

/// Locks and reads the merchant's endpoint inside an operation's transaction.
fn locked(conn: &mut DbConnection, merchant_id: &str, id: &str) -> Result<EndpointRow, Refusal> {
    if !rows::lock(conn, merchant_id, id)? {
        return Err(Refusal::Api(no_such_endpoint()));
    }
    rows::find(conn, merchant_id, id)?.ok_or_else(|| Refusal::Api(no_such_endpoint()))
}

pub async fn get(state: &AppState, merchant: &Merchant, id: String) -> Result<String, ApiError> {
    if !events::is_id(&id, ENDPOINT_ID_PREFIX) {
        return Err(no_such_endpoint());
    }
    let merchant_id = merchant.id.clone();
    let row = state
        .db
        .run(move |conn| rows::find(conn, &merchant_id, &id))
        .await?
        .ok_or_else(no_such_endpoint)?;
    Ok(view::render(&row, false))
}

pub async fn list(
    state: &AppState,
    merchant: &Merchant,
    starting_after: Option<String>,
    limit: i64,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let found = state
        .db
        .run(move |conn| rows::list(conn, &merchant_id, starting_after.as_deref(), limit))
        .await?
        .ok_or_else(|| ApiError::unknown_cursor("webhook endpoint"))?;
    let (found, has_more) = crate::db::page(found, limit);
    Ok(view::render_list(&found, has_more))
}

pub async fn update(
    state: &AppState,
    merchant: &Merchant,
    id: String,
    key: Option<IdempotencyKey>,
    update: EndpointUpdate,
) -> Result<Answer, ApiError> {
    if !events::is_id(&id, ENDPOINT_ID_PREFIX) {
        return Err(no_such_endpoint());
    }
    if let Some(url) = &update.url {
        url.check(state.settings.webhook_allow_private_urls)
            .await
            .map_err(url_error)?;
    }
    let fingerprint = update.fingerprint(&id);
    let merchant_id = merchant.id.clone();
    write_once(state, merchant, key, UPDATE, fingerprint, move |conn| {
        let mut row = locked(conn, &merchant_id, &id)?;
        if let Some(url) = update.url {
            row.url = url.as_str().to_owned();
        }
        if let Some(enabled) = update.enabled_events {
            row.enabled_events = enabled.to_json();
        }
        if let Some(description) = update.description {
            row.description = Some(description).filter(|d| !d.is_empty());
        }
        if let Some(status) = update.status {
            if status.as_str() == ENABLED && row.status != ENABLED {
                // A fresh start: the failures that disabled it no longer count.
                row.failing_since = None;
            }
            row.status = status.as_str().to_owned();
        }
        row.updated_at = now();
        rows::update(conn, &row)?;
        Ok(Answer::new(200, view::render(&row, false)))
    })
    .await
}

pub async fn delete(state: &AppState, merchant: &Merchant, id: String) -> Result<String, ApiError> {
    if !events::is_id(&id, ENDPOINT_ID_PREFIX) {
        return Err(no_such_endpoint());
    }
    let (merchant_id, target) = (merchant.id.clone(), id.clone());
    if !state
        .db
        .run(move |conn| rows::delete(conn, &merchant_id, &target))
        .await?
    {
        return Err(no_such_endpoint());
    }
    tracing::info!(endpoint_id = %id, "webhook endpoint deleted");
    Ok(view::render_deleted(&id))
}

pub async fn rotate_secret(
    state: &AppState,
    merchant: &Merchant,
    id: String,
    key: Option<IdempotencyKey>,
    rotation: Rotation,
) -> Result<Answer, ApiError> {
    if !events::is_id(&id, ENDPOINT_ID_PREFIX) {
        return Err(no_such_endpoint());
    }
    let fingerprint = rotation.fingerprint(&id);
    let merchant_id = merchant.id.clone();
    write_once(state, merchant, key, ROTATE, fingerprint, move |conn| {
        let mut row = locked(conn, &merchant_id, &id)?;
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
    })
    .await
}

pub async fn list_deliveries(
    state: &AppState,
    merchant: &Merchant,
    id: String,
    status: Option<&'static str>,
    starting_after: Option<String>,
    limit: i64,
) -> Result<String, ApiError> {
    if !events::is_id(&id, ENDPOINT_ID_PREFIX) {
        return Err(no_such_endpoint());
    }
    let merchant_id = merchant.id.clone();
    let found = state
        .db
        .run(move |conn| {
            if rows::find(conn, &merchant_id, &id)?.is_none() {
                return Ok(Err(no_such_endpoint()));
            }
            let page = delivery_rows::list_for_endpoint(
                conn,
                &id,
                status,
                starting_after.as_deref(),
                limit,
            )?;
            Ok(page.ok_or_else(|| ApiError::unknown_cursor("delivery of this endpoint")))
        })
        .await??;
    let (found, has_more) = crate::db::page(found, limit);
    Ok(view::render_deliveries(&found, has_more))
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
    if !events::is_id(&id, ENDPOINT_ID_PREFIX) {
        return Err(no_such_endpoint());
    }
    let fingerprint = replay.fingerprint(&id);
    let merchant_id = merchant.id.clone();
    write_once(state, merchant, key, REPLAY, fingerprint, move |conn| {
        let endpoint = locked(conn, &merchant_id, &id)?;
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
            &merchant_id,
            &id,
            replay.since,
            until,
            which,
            REPLAY_LIMIT,
        )?;
        let ids: Vec<String> = candidates
            .iter()
            .map(|(event_id, _)| event_id.clone())
            .collect();
        let mut latest = std::collections::HashMap::new();
        for (event_id, status) in delivery_rows::statuses_for_events(conn, &id, &ids)? {
            latest.insert(event_id, status);
        }
        let mut queued = 0;
        for (event_id, event_type) in candidates {
            let wanted = match (latest.get(&event_id).map(String::as_str), replay.status) {
                (Some(delivery_rows::PENDING), _) => false,
                (Some(status), ReplayScope::Failed) => status == delivery_rows::FAILED,
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
                        new_id(DELIVERY_ID_PREFIX),
                        &id,
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
    })
    .await
}

/// Sends a signed `webhook_endpoint.test` event to the endpoint now (not kept in the feed)
/// and answers how it went.
pub async fn send_test(
    state: &AppState,
    merchant: &Merchant,
    id: String,
    key: Option<IdempotencyKey>,
    made_by: RequestRef,
) -> Result<Answer, ApiError> {
    if !events::is_id(&id, ENDPOINT_ID_PREFIX) {
        return Err(no_such_endpoint());
    }
    let endpoint = {
        let (merchant_id, id) = (merchant.id.clone(), id.clone());
        state
            .db
            .run(move |conn| rows::find(conn, &merchant_id, &id))
            .await?
            .ok_or_else(no_such_endpoint)?
    };
    let Some(key) = key else {
        return test_once(state, &endpoint, &made_by).await;
    };
    let token = new_lease_token();
    let fingerprint = sha256_hex(format!("test\n{id}").as_bytes());
    let claim = key_claim(
        merchant,
        &key,
        TEST,
        fingerprint,
        &token,
        now() + test_lease(state),
    );
    let inserted = {
        let claim = claim.clone();
        state
            .db
            .run(move |conn| key_rows::insert(conn, &claim))
            .await
    };
    let token = match inserted {
        Ok(()) => {
            metrics::idempotency(RESOURCE, IdempotencyOutcome::Created);
            token
        }
        Err(DbError::UniqueViolation(_)) => match follow_key(state, &claim).await? {
            Ok(answer) => return Ok(answer),
            Err(taken_over) => taken_over,
        },
        Err(e) => return Err(e.into()),
    };
    let answer = test_once(state, &endpoint, &made_by).await?;
    store_test_answer(state, claim, token, &answer).await?;
    Ok(answer)
}

async fn store_test_answer(
    state: &AppState,
    claim: KeyRow,
    token: String,
    answer: &Answer,
) -> Result<(), ApiError> {
    let (status, body) = (i32::from(answer.status), answer.body.to_string());
    state
        .db
        .run(move |conn| key_rows::store_answer(conn, &claim, &token, status, &body))
        .await?;
    Ok(())
}

/// One signed attempt of a fresh `webhook_endpoint.test` event, by the worker's own code.
async fn test_once(
    state: &AppState,
    endpoint: &EndpointRow,
    made_by: &RequestRef,
) -> Result<Answer, ApiError> {
    let event_id = new_id(EVENT_ID_PREFIX);
    let object = view::render(endpoint, false);
    let body = events::render_event(&event_id, TEST_EVENT_TYPE, now(), &object, Some(made_by))
        .map_err(ApiError::internal)?;
    let secrets = deliveries::signing_secrets(
        &endpoint.secret,
        endpoint.previous_secret.as_deref(),
        endpoint.previous_secret_expires_at,
        now(),
    );
    let settings = &state.settings;
    let client = send::client(settings.webhook_timeout, 1, &state.tls);
    let attempt = send::send(
        &client,
        &send::Outgoing {
            url: &endpoint.url,
            webhook_id: &event_id,
            body: &body,
            secrets: &secrets,
        },
        settings.webhook_timeout,
        settings.webhook_allow_private_urls,
    )
    .await;
    let result = view::TestResult {
        delivered: attempt.succeeded(),
        status_code: attempt.status_code,
        error: attempt.error,
        duration_ms: u64::try_from(attempt.duration.as_millis()).unwrap_or(u64::MAX),
    };
    Ok(Answer::new(200, view::render_value(&result)))
}
