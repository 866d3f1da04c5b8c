//! A merchant's step on a dispute as an operation of the one mechanism: evidence saved (the
//! database only, answered at the claim), evidence submitted or the dispute closed (the
//! claim holds the dispute, the provider is asked with our step id as its idempotency key,
//! and the finish moves the dispute through [`super::advance`]).

use super::request::{DisputeEvidence, close_fingerprint};
use super::{advance, view};
use crate::auth::Merchant;
use crate::config::Settings;
use crate::db::DbConnection;
use crate::db::dispute_steps::{self as steps, CLOSE, DisputeStepRow, EVIDENCE, SUBMIT};
use crate::db::disputes::{self as rows, DisputeRow};
use crate::domain::{
    DisputeId, DisputeStatus, DisputeStepId, IdempotencyKey, RequestRef, StepStatus, now,
};
use crate::error::ApiError;
use crate::idempotency::{Answer, idempotent_record};
use crate::operations::Settled;
use crate::operations::keyed::Refusal;
use crate::operations::{self, Called, Claimed, Lease, Operation};
use crate::provider::{DisputeState, DisputeStepRequest, OutcomeUnknown, ProviderError};
use crate::state::AppState;

idempotent_record!(DisputeStepRow);

/// Names dispute steps in the idempotency scopes and metrics.
const RESOURCE: &str = "dispute_step";

/// What the provider said to a step.
#[derive(Debug, Clone)]
pub enum StepOutcome {
    /// Taken: the dispute is now in this state at the provider.
    Done(DisputeState),
    /// A final 4xx (409: the dispute can no longer take the step): nothing moved.
    Refused(String),
}

/// A step on a dispute, as an [`Operation`].
pub struct DisputeStep;

impl Operation for DisputeStep {
    type Row = DisputeStepRow;
    /// The provider's id of the dispute.
    type Call = String;
    type Outcome = StepOutcome;

    fn resource(_: &DisputeStepRow) -> &'static str {
        RESOURCE
    }

    /// Two endpoints, two scopes of keys: the evidence's (saved or submitted) and the close's.
    fn scope(row: &DisputeStepRow) -> &'static str {
        if row.kind == CLOSE {
            "dispute_close"
        } else {
            "dispute_evidence"
        }
    }

    fn claim(
        conn: &mut DbConnection,
        claim: &DisputeStepRow,
        _: &Settings,
    ) -> diesel::QueryResult<Claimed<DisputeStepRow, String>> {
        claim_step(conn, claim)
    }

    fn find_by_key(
        conn: &mut DbConnection,
        claim: &DisputeStepRow,
    ) -> diesel::QueryResult<Option<DisputeStepRow>> {
        let (merchant, kind, key) = (&claim.merchant_id, &claim.kind, &claim.idempotency_key);
        steps::find_by_idempotency_key(conn, merchant, kind, key)
    }

    fn call_for(_: &mut DbConnection, row: &DisputeStepRow) -> diesel::QueryResult<String> {
        row.provider_dispute_id
            .clone()
            .ok_or(diesel::result::Error::NotFound)
    }

    async fn call(
        state: &AppState,
        row: &DisputeStepRow,
        provider_dispute_id: &String,
    ) -> Result<Called<StepOutcome>, OutcomeUnknown> {
        let request = if row.kind == CLOSE {
            DisputeStepRequest::Close
        } else {
            DisputeStepRequest::Evidence {
                text: row.evidence_text.clone(),
            }
        };
        match state
            .provider
            .dispute_step(&row.id, provider_dispute_id, &request)
            .await
        {
            Ok(dispute) => Ok(Called::Final(StepOutcome::Done(dispute.status))),
            Err(ProviderError::Refused(why)) => Ok(Called::Final(StepOutcome::Refused(why))),
            Err(ProviderError::Unknown(unknown)) => Err(unknown),
        }
    }

    fn finish(
        conn: &mut DbConnection,
        row: &DisputeStepRow,
        outcome: &StepOutcome,
        request: Option<&RequestRef>,
        _: &Settings,
    ) -> diesel::QueryResult<Settled<DisputeStepRow>> {
        finish_step(conn, row, outcome, request)
    }

    /// The 202 body is the dispute as it is (its step still at the provider).
    fn render_unfinished(
        conn: &mut DbConnection,
        row: &DisputeStepRow,
    ) -> diesel::QueryResult<String> {
        let dispute =
            rows::find_by_id(conn, &row.dispute_id)?.ok_or(diesel::result::Error::NotFound)?;
        render(&dispute)
    }
}

fn render(dispute: &DisputeRow) -> diesel::QueryResult<String> {
    view::render(dispute).map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))
}

/// `POST /v1/disputes/{id}`: saves the evidence, and with `submit` sends it.
pub async fn update_dispute(
    state: &AppState,
    merchant: &Merchant,
    id: DisputeId,
    key: IdempotencyKey,
    request: DisputeEvidence,
    request_id: Option<String>,
) -> Result<Answer, ApiError> {
    let fingerprint = request.fingerprint(id.as_str());
    let kind = if request.submit { SUBMIT } else { EVIDENCE };
    take_step(
        state,
        merchant,
        id,
        key,
        kind,
        request.text,
        fingerprint,
        request_id,
    )
    .await
}

/// `POST /v1/disputes/{id}/close`: accepts the loss.
pub async fn close_dispute(
    state: &AppState,
    merchant: &Merchant,
    id: DisputeId,
    key: IdempotencyKey,
    request_id: Option<String>,
) -> Result<Answer, ApiError> {
    let fingerprint = close_fingerprint(id.as_str());
    take_step(
        state,
        merchant,
        id,
        key,
        CLOSE,
        None,
        fingerprint,
        request_id,
    )
    .await
}

#[allow(clippy::too_many_arguments)] // the two requests' parts, named
async fn take_step(
    state: &AppState,
    merchant: &Merchant,
    id: DisputeId,
    key: IdempotencyKey,
    kind: &'static str,
    evidence_text: Option<String>,
    fingerprint: String,
    request_id: Option<String>,
) -> Result<Answer, ApiError> {
    // An unknown (or another merchant's) dispute is answered before anything is stored:
    // there is nothing a key could be bound to.
    let dispute = super::find(state, merchant, &id).await?;
    let lease = Lease::new(state);
    let claim = DisputeStepRow {
        id: DisputeStepId::generate().into_string(),
        merchant_id: merchant.id.clone(),
        dispute_id: dispute.id,
        kind: kind.to_owned(),
        idempotency_key: key.as_str().to_owned(),
        request_fingerprint: fingerprint,
        evidence_text,
        provider_dispute_id: Some(dispute.provider_dispute_id),
        status: StepStatus::Pending,
        response_status: None,
        response_body: None,
        lease_token: Some(lease.token),
        lease_expires_at: Some(lease.expires_at),
        provider_attempts: 1,
        created_at: lease.at,
        updated_at: lease.at,
    };
    let origin = request_id.map(|id| RequestRef {
        id,
        idempotency_key: Some(key.as_str().to_owned()),
    });
    operations::execute::<DisputeStep>(state, claim, origin).await
}

/// One transaction: the insert that decides the key's winner, then the guarded write that
/// decides whether the dispute takes the step now (it is `needs_response` and no other step
/// is at the provider): evidence only saved is done there, a submit or close holds the
/// dispute for its call. A dispute no longer `needs_response` is the stored 409; one whose
/// other step is still at the provider is a 409 that stores nothing (the transaction rolls
/// back, the key stays free): that step may yet be refused, and a retry then takes this one.
fn claim_step(
    conn: &mut DbConnection,
    claim: &DisputeStepRow,
) -> diesel::QueryResult<Claimed<DisputeStepRow, String>> {
    use diesel::Connection;
    let claimed = conn.transaction::<_, Refusal, _>(|conn| {
        steps::insert(conn, claim)?;
        let at = claim.created_at;
        let text = claim.evidence_text.as_deref();
        let taken = match claim.kind.as_str() {
            EVIDENCE => rows::save_evidence(conn, &claim.dispute_id, text, None, at)?,
            SUBMIT => rows::save_evidence(conn, &claim.dispute_id, text, Some(&claim.id), at)?,
            _ => rows::hold(conn, &claim.dispute_id, &claim.id, at)?,
        };
        let dispute =
            rows::find_by_id(conn, &claim.dispute_id)?.ok_or(diesel::result::Error::NotFound)?;
        if taken && claim.kind != EVIDENCE {
            let mut row = claim.clone();
            if claim.kind == SUBMIT && row.evidence_text != dispute.evidence_text {
                // A submit without evidence sends the draft saved before.
                row.evidence_text = dispute.evidence_text.clone();
                steps::set_evidence(conn, &row.id, row.evidence_text.as_deref())?;
            }
            return Ok(Claimed::Won(row, dispute.provider_dispute_id));
        }
        let (status, answer) = if taken {
            (StepStatus::Succeeded, Answer::new(200, render(&dispute)?))
        } else if dispute.status == DisputeStatus::NeedsResponse {
            return Err(Refusal::Api(ApiError::DisputeNotEditable(format!(
                "dispute {} takes no evidence or close now: another step on it is at the \
                 provider; retry with the same key once it has answered",
                dispute.id
            ))));
        } else {
            let refusal = ApiError::DisputeNotEditable(format!(
                "dispute {} takes no evidence or close now: it is `{}`; only a \
                 `needs_response` dispute does",
                dispute.id, dispute.status
            ));
            (StepStatus::Rejected, Answer::refusal(&refusal))
        };
        steps::answer_at_claim(
            conn,
            &claim.id,
            status,
            i32::from(answer.status),
            &answer.body,
        )?;
        Ok(Claimed::Answered(answer))
    });
    Refusal::unstored(claimed)
}

/// Applies the provider's answer in one transaction, guarded by the step still being
/// pending: the dispute is let go, and moved forward if the provider took the step; the
/// answer every retry replays is stored. Returns the step after.
fn finish_step(
    conn: &mut DbConnection,
    row: &DisputeStepRow,
    outcome: &StepOutcome,
    request: Option<&RequestRef>,
) -> diesel::QueryResult<Settled<DisputeStepRow>> {
    use diesel::Connection;
    conn.transaction(|conn| {
        let at = now();
        // Write first: it is the guard, and on SQLite it takes the write lock before any read.
        if !steps::lock_unfinished(conn, &row.id, at)? {
            return Ok(Settled::already_final(steps::find_by_id(conn, &row.id)?));
        }
        let mut step = row.clone();
        let answer = match outcome {
            StepOutcome::Refused(why) => {
                rows::let_go(conn, &step.dispute_id, &step.id, None)?;
                step.status = step.status.move_to(StepStatus::Failed)?;
                Answer::refusal(&ApiError::DisputeNotEditable(format!(
                    "the provider refused the {}: {why}",
                    step.kind
                )))
            }
            StepOutcome::Done(state) => {
                let submitted = (step.kind == SUBMIT).then_some(at);
                rows::let_go(conn, &step.dispute_id, &step.id, submitted)?;
                let dispute = rows::find_by_id(conn, &step.dispute_id)?
                    .ok_or(diesel::result::Error::NotFound)?;
                let to = match (step.kind.as_str(), state) {
                    (CLOSE, _) | (_, DisputeState::Lost) => DisputeStatus::Lost,
                    (_, DisputeState::Won) => DisputeStatus::Won,
                    _ => DisputeStatus::UnderReview,
                };
                let dispute = match advance(conn, dispute, to, at, request)? {
                    super::Advanced::Moved(d) | super::Advanced::NotForward(d) => d,
                };
                step.status = step.status.move_to(StepStatus::Succeeded)?;
                Answer::new(200, render(&dispute)?)
            }
        };
        step.response_status = Some(i32::from(answer.status));
        step.response_body = Some(answer.body.to_string());
        step.lease_token = None;
        step.lease_expires_at = None;
        step.updated_at = at;
        if !steps::finish(conn, &step)? {
            return Err(diesel::result::Error::RollbackTransaction);
        }
        Ok(Settled::Applied(step))
    })
}
