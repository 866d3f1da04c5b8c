//! `POST /v1/webhook_endpoints/{id}/test`: one signed `webhook_endpoint.test` event sent
//! to the endpoint now (not kept in the feed), answering how it went. Under an
//! `Idempotency-Key` it is an [`Operation`] of the one mechanism: the claim holds a lease
//! on the key while the attempt runs, the answer is stored after it, and a duplicate waits
//! for it, replays it, or takes the key over if the first request died.

use super::endpoint::{RESOURCE, no_such_endpoint};
use super::view;
use crate::auth::Merchant;
use crate::config::Settings;
use crate::db::DbConnection;
use crate::db::idempotency_keys as key_rows;
use crate::db::webhook_endpoints::{self as rows, EndpointRow};
use crate::deliveries::attempt::LEASE_MARGIN;
use crate::deliveries::schedule::signing_secrets;
use crate::deliveries::send;
use crate::domain::RequestRef;
use crate::domain::{EndpointId, EventId, IdempotencyKey, new_lease_token, now, sha256_hex};
use crate::error::ApiError;
use crate::events::{self, TEST_EVENT_TYPE};
use crate::idempotency::Answer;
use crate::operations::Settled;
use crate::operations::keyed::KeyClaim;
use crate::operations::{self, Called, Claimed, Operation};
use crate::provider::OutcomeUnknown;
use crate::state::AppState;

const TEST: &str = "POST /v1/webhook_endpoints/{id}/test";

/// What a test send needs: the endpoint as read when the request came, and the event to
/// send (a fresh id, naming the request).
#[derive(Clone)]
pub struct TestSend {
    endpoint: EndpointRow,
    event_id: String,
    body: String,
}

impl TestSend {
    fn new(endpoint: EndpointRow, made_by: &RequestRef) -> Result<Self, ApiError> {
        let event_id = EventId::generate().into_string();
        let object = view::render(&endpoint, false);
        let body = events::render_event(&event_id, TEST_EVENT_TYPE, now(), &object, Some(made_by))
            .map_err(ApiError::internal)?;
        Ok(Self {
            endpoint,
            event_id,
            body,
        })
    }
}

/// The test send as an operation of the mechanism: its row is the key's record; its call
/// is the attempt; its outcome, the answer.
pub struct SendTest;

impl Operation for SendTest {
    type Row = KeyClaim<TestSend>;
    type Call = ();
    type Outcome = Answer;

    fn resource(_: &KeyClaim<TestSend>) -> &'static str {
        RESOURCE
    }

    fn scope(_: &KeyClaim<TestSend>) -> &'static str {
        TEST
    }

    /// The attempt's timeout and a margin.
    fn lease(state: &AppState, _: &KeyClaim<TestSend>) -> chrono::Duration {
        test_lease(state)
    }

    fn claim(
        conn: &mut DbConnection,
        claim: &KeyClaim<TestSend>,
        _: &Settings,
    ) -> diesel::QueryResult<Claimed<KeyClaim<TestSend>, ()>> {
        key_rows::insert(conn, &claim.row)?;
        Ok(Claimed::Won(claim.clone(), ()))
    }

    fn find_by_key(
        conn: &mut DbConnection,
        claim: &KeyClaim<TestSend>,
    ) -> diesel::QueryResult<Option<KeyClaim<TestSend>>> {
        claim.find(conn)
    }

    fn call_for(_: &mut DbConnection, _: &KeyClaim<TestSend>) -> diesel::QueryResult<()> {
        Ok(())
    }

    async fn call(
        state: &AppState,
        row: &KeyClaim<TestSend>,
        _: &(),
    ) -> Result<Called<Answer>, OutcomeUnknown> {
        Ok(Called::Final(test_once(state, &row.work).await))
    }

    fn finish(
        conn: &mut DbConnection,
        row: &KeyClaim<TestSend>,
        answer: &Answer,
        _: Option<&RequestRef>,
        _settings: &Settings,
    ) -> diesel::QueryResult<Settled<KeyClaim<TestSend>>> {
        let ours = row.store(conn, answer)?;
        // Stored by this request, or by one that took the key over meanwhile: theirs stands.
        let stored = row.find(conn)?;
        Ok(match stored {
            Some(stored) if ours => Settled::Applied(stored),
            found => Settled::already_final(found),
        })
    }

    fn render_unfinished(
        _: &mut DbConnection,
        row: &KeyClaim<TestSend>,
    ) -> diesel::QueryResult<String> {
        Ok(view::render(&row.work.endpoint, false))
    }
}

/// How long a test owns its key: the attempt's timeout and a margin.
fn test_lease(state: &AppState) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(state.settings.webhook_timeout + LEASE_MARGIN)
        .unwrap_or(chrono::TimeDelta::MAX)
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
    if !EndpointId::is_valid(&id) {
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
    let work = TestSend::new(endpoint, &made_by)?;
    let Some(key) = key else {
        return Ok(test_once(state, &work).await);
    };
    let fingerprint = sha256_hex(format!("test\n{id}").as_bytes());
    let lease = (new_lease_token(), now() + test_lease(state));
    let claim = KeyClaim::new(merchant, &key, TEST, fingerprint, lease, work);
    operations::execute::<SendTest>(state, claim, None).await
}

/// One signed attempt of a fresh `webhook_endpoint.test` event, by the worker's own code.
async fn test_once(state: &AppState, test: &TestSend) -> Answer {
    let endpoint = &test.endpoint;
    let secrets = signing_secrets(
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
            webhook_id: &test.event_id,
            body: &test.body,
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
    Answer::new(200, view::render_value(&result))
}
