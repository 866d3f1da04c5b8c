//! The steps a merchant takes on a dispute (evidence saved, evidence submitted, the dispute
//! closed): one row each, the idempotency record of its request, owned through a lease
//! while it is at the provider.

use diesel::prelude::*;

use super::pool::DbConnection;
use super::schema::dispute_steps;
use crate::domain::{StepStatus, Timestamp};

super::lease::lease_protocol!(
    dispute_steps,
    DisputeStepRow,
    StepStatus::Pending.as_str(),
    provider_dispute_id
);

/// Steps: `evidence` (saved only), `submit` (saved and sent), `close` (the loss accepted).
pub const EVIDENCE: &str = "evidence";
pub const SUBMIT: &str = "submit";
pub const CLOSE: &str = "close";

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = dispute_steps)]
pub struct DisputeStepRow {
    pub id: String,
    pub merchant_id: String,
    pub dispute_id: String,
    /// [`EVIDENCE`], [`SUBMIT`] or [`CLOSE`].
    pub kind: String,
    pub idempotency_key: String,
    pub request_fingerprint: String,
    pub evidence_text: Option<String>,
    /// The provider's id of the dispute the step acts on.
    pub provider_dispute_id: Option<String>,
    #[diesel(deserialize_as = String, serialize_as = String)]
    pub status: StepStatus,
    pub response_status: Option<i32>,
    pub response_body: Option<String>,
    pub lease_token: Option<String>,
    pub lease_expires_at: Option<Timestamp>,
    pub provider_attempts: i32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The claim: the insert whose unique (merchant_id, idempotency_key) decides the winner.
pub fn insert(conn: &mut DbConnection, row: &DisputeStepRow) -> QueryResult<()> {
    diesel::insert_into(dispute_steps::table)
        .values(row.clone())
        .execute(conn)
        .map(|_| ())
}

/// The step that holds `key` on its endpoint: the close's, or the evidence's (saved or
/// submitted), which are two scopes (unique on merchant, `kind = 'close'`, key).
pub fn find_by_idempotency_key(
    conn: &mut DbConnection,
    merchant_id: &str,
    kind: &str,
    key: &str,
) -> QueryResult<Option<DisputeStepRow>> {
    let query = dispute_steps::table
        .filter(dispute_steps::merchant_id.eq(super::unplanned(merchant_id)))
        .filter(dispute_steps::idempotency_key.eq(key))
        .into_boxed();
    let query = if kind == CLOSE {
        query.filter(dispute_steps::kind.eq(CLOSE))
    } else {
        query.filter(dispute_steps::kind.ne(CLOSE))
    };
    query
        .select(DisputeStepRow::as_select())
        .first(conn)
        .optional()
}

/// Ends a fresh claim at once with its stored answer: `succeeded` (a step that only wrote
/// the database) or `rejected` (refused before the provider was asked).
pub fn answer_at_claim(
    conn: &mut DbConnection,
    id: &str,
    status: StepStatus,
    response_status: i32,
    response_body: &str,
) -> QueryResult<()> {
    diesel::update(
        dispute_steps::table
            .filter(dispute_steps::id.eq(id))
            .filter(super::lease::still!(
                dispute_steps::status,
                StepStatus::Pending.as_str()
            )),
    )
    .set((
        dispute_steps::status.eq(status.as_str()),
        dispute_steps::response_status.eq(response_status),
        dispute_steps::response_body.eq(response_body),
        dispute_steps::lease_token.eq(None::<String>),
        dispute_steps::lease_expires_at.eq(None::<Timestamp>),
    ))
    .execute(conn)
    .map(|_| ())
}

/// Writes the final step and the answer every retry replays, guarded by it still being
/// pending.
pub fn finish(conn: &mut DbConnection, row: &DisputeStepRow) -> QueryResult<bool> {
    diesel::update(
        dispute_steps::table
            .filter(dispute_steps::id.eq(&row.id))
            .filter(super::lease::still!(
                dispute_steps::status,
                StepStatus::Pending.as_str()
            )),
    )
    .set((
        dispute_steps::status.eq(row.status.as_str()),
        dispute_steps::response_status.eq(row.response_status),
        dispute_steps::response_body.eq(&row.response_body),
        dispute_steps::lease_token.eq(None::<String>),
        dispute_steps::lease_expires_at.eq(None::<Timestamp>),
        dispute_steps::updated_at.eq(row.updated_at),
    ))
    .execute(conn)
    .map(|n| n == 1)
}

/// The evidence a submit sends: what its dispute holds once the claim saved it (the draft
/// saved before, when the request gave none).
pub fn set_evidence(conn: &mut DbConnection, id: &str, text: Option<&str>) -> QueryResult<()> {
    diesel::update(dispute_steps::table.filter(dispute_steps::id.eq(id)))
        .set(dispute_steps::evidence_text.eq(text))
        .execute(conn)
        .map(|_| ())
}
