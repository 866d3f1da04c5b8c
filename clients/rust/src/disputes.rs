//! Disputes: a customer's bank taking a charge back, answered by the merchant with evidence
//! or accepted as lost.

use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;
use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::Error;
use crate::list::{ListParams, Page};
use crate::mutation::Mutation;

/// Where a dispute stands. It moves forward only: `needs_response` → `under_review` →
/// `won` | `lost`, or `needs_response` → `won` | `lost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DisputeStatus {
    /// Opened by the provider: the merchant may save and submit evidence before
    /// `evidence_due_by`, or close it.
    NeedsResponse,
    /// Evidence submitted: the card network decides.
    UnderReview,
    /// Decided for the merchant: the amount came back (the dispute fee is kept).
    Won,
    /// Decided against the merchant, or closed by it: the amount stays taken.
    Lost,
    /// A status this client does not know.
    #[serde(other)]
    Unknown,
}

impl DisputeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NeedsResponse => "needs_response",
            Self::UnderReview => "under_review",
            Self::Won => "won",
            Self::Lost => "lost",
            Self::Unknown => "unknown",
        }
    }

    /// Whether the dispute is still open (`needs_response` or `under_review`): while it
    /// is, refunds of its payment are refused with `payment_disputed`.
    pub fn is_open(self) -> bool {
        matches!(self, Self::NeedsResponse | Self::UnderReview)
    }
}

/// The evidence saved on a dispute: `text` is `None` until some is saved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DisputeEvidence {
    /// At most 20 000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// The dispute object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Dispute {
    /// `dp_…`
    pub id: String,
    /// The disputed payment, `pay_…`.
    pub payment_id: String,
    /// Minor units: what the customer's bank took back.
    pub amount: i64,
    pub currency: String,
    /// Why, as the provider says it (e.g. `fraudulent`).
    pub reason: String,
    pub status: DisputeStatus,
    #[serde(default)]
    pub evidence: DisputeEvidence,
    /// When the evidence was submitted to the provider; `None` until then.
    pub evidence_submitted_at: Option<DateTime<Utc>>,
    /// The last moment to answer.
    pub evidence_due_by: DateTime<Utc>,
    /// The provider's id of the dispute.
    pub provider_dispute_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/disputes/{id}`: evidence to save, and whether to submit it. Build it with
/// [`UpdateDispute::new`] and [`UpdateDispute::submit`].
///
/// Evidence sent replaces what was saved before; a request without `evidence`
/// (`UpdateDispute::default()`) keeps the saved draft, and with `submit(true)` sends it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UpdateDispute {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<DisputeEvidence>,
    /// `true`: send the evidence to the provider now (the dispute moves to
    /// `under_review`). `false` (not sent): only save it, nothing goes to the provider.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub submit: bool,
}

impl UpdateDispute {
    /// Evidence with this text (at most 20 000 characters), saved only until
    /// [`UpdateDispute::submit`] says otherwise.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            evidence: Some(DisputeEvidence {
                text: Some(text.into()),
            }),
            submit: false,
        }
    }

    /// Whether to send the evidence to the provider now.
    pub fn submit(mut self, submit: bool) -> Self {
        self.submit = submit;
        self
    }
}

/// The body of `POST /v1/disputes/{id}/close`: `{}`.
#[derive(Serialize)]
struct CloseDispute {}

/// Filters and paging of `GET /v1/disputes` (newest first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListDisputes {
    pub limit: Option<u32>,
    pub starting_after: Option<String>,
    pub status: Option<DisputeStatus>,
    /// Only the disputes of this payment (`pay_…`).
    pub payment_id: Option<String>,
}

impl ListParams for ListDisputes {
    fn limit(&self) -> Option<u32> {
        self.limit
    }

    fn starting_after(&self) -> Option<&str> {
        self.starting_after.as_deref()
    }

    fn filters(&self) -> Vec<(&'static str, String)> {
        let status = self.status.map(|s| ("status", s.as_str().to_owned()));
        let payment = self.payment_id.clone().map(|p| ("payment_id", p));
        status.into_iter().chain(payment).collect()
    }
}

impl Client {
    /// The dispute as it is now (404 `not_found` for another merchant's).
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let dispute = client.get_dispute("dp_…").await?;
    /// println!("{} {:?} due by {}", dispute.id, dispute.status, dispute.evidence_due_by);
    /// # Ok(()) }
    /// ```
    pub async fn get_dispute(&self, id: &str) -> Result<Dispute, Error> {
        self.get(self.url(&["disputes", id])).await
    }

    /// One page of disputes, newest first.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{DisputeStatus, ListDisputes};
    ///
    /// let page = client
    ///     .list_disputes(&ListDisputes { status: Some(DisputeStatus::NeedsResponse), ..Default::default() })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn list_disputes(&self, params: &ListDisputes) -> Result<Page<Dispute>, Error> {
        self.list(&["disputes"], params).await
    }

    /// Every dispute that matches, newest first, page after page.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{ListDisputes, TryStreamExt};
    ///
    /// let params = ListDisputes { payment_id: Some("pay_…".into()), ..Default::default() };
    /// let disputes: Vec<_> = client.stream_disputes(params).try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn stream_disputes(
        &self,
        params: ListDisputes,
    ) -> BoxStream<'static, Result<Dispute, Error>> {
        self.list_all(&["disputes"], &params)
    }

    /// Saves evidence on a `needs_response` dispute: 200 with the dispute. With
    /// [`UpdateDispute::submit`] the evidence is also sent to the provider: 200 with the
    /// dispute `under_review`, or 202 while the provider's answer is not known
    /// ([`Mutation::wait_until_final`] waits it out with the same key). 409
    /// `dispute_not_editable` when the dispute is no longer `needs_response`, another step
    /// on it is at the provider, or the provider refused the step (the key's final
    /// answer: a new attempt needs a new key). Sent with a new `Idempotency-Key` (or
    /// yours), the same on every retry: one provider call at most per key.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use std::time::Duration;
    /// use payments_client::{ErrorCode, UpdateDispute};
    ///
    /// // A draft first: nothing goes to the provider.
    /// client.update_dispute("dp_…", &UpdateDispute::new("Signed for at the door")).await?;
    /// match client
    ///     .update_dispute("dp_…", &UpdateDispute::new("Signed for at the door, photo attached").submit(true))
    ///     .idempotency_key("dp-7-submit")
    ///     .wait_until_final(Duration::from_secs(60))
    ///     .await
    /// {
    ///     Ok(dispute) => println!("{} {:?}", dispute.id, dispute.status),
    ///     Err(e) if e.code() == Some(&ErrorCode::DisputeNotEditable) => eprintln!("too late"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn update_dispute(&self, id: &str, params: &UpdateDispute) -> Mutation<Dispute> {
        self.mutation(self.url(&["disputes", id]), params)
    }

    /// Accepts the loss of a `needs_response` dispute: 200 with the dispute `lost` (its
    /// amount stays taken), 202 while the provider's answer is not known; 409
    /// `dispute_not_editable` as for [`Client::update_dispute`]. Sent with a new
    /// `Idempotency-Key` (or yours), the same on every retry.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let dispute = client.close_dispute("dp_…").idempotency_key("dp-7-close").await?;
    /// # Ok(()) }
    /// ```
    pub fn close_dispute(&self, id: &str) -> Mutation<Dispute> {
        self.mutation(self.url(&["disputes", id, "close"]), &CloseDispute {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_sends_only_what_was_set_and_a_close_sends_an_empty_object() {
        let draft = serde_json::to_value(UpdateDispute::new("signed for")).expect("json");
        assert_eq!(
            draft,
            serde_json::json!({"evidence": {"text": "signed for"}})
        );
        let submitted =
            serde_json::to_value(UpdateDispute::new("signed for").submit(true)).expect("json");
        assert_eq!(
            submitted,
            serde_json::json!({"evidence": {"text": "signed for"}, "submit": true})
        );
        assert_eq!(
            serde_json::to_value(UpdateDispute::default()).expect("json"),
            serde_json::json!({})
        );
        assert_eq!(
            serde_json::to_value(CloseDispute {}).expect("json"),
            serde_json::json!({})
        );
    }

    #[test]
    fn a_dispute_parses_with_or_without_evidence_and_unknown_statuses_are_kept_apart() {
        let json = r#"{"id":"dp_1","object":"dispute","payment_id":"pay_1","amount":2000,
            "currency":"usd","reason":"fraudulent","status":"needs_response","evidence":{},
            "evidence_submitted_at":null,"evidence_due_by":"2026-12-05T01:40:00.000000Z",
            "provider_dispute_id":"du_1","created_at":"2026-11-28T01:40:00Z",
            "updated_at":"2026-11-28T01:40:00Z"}"#;
        let dispute: Dispute = serde_json::from_str(json).expect("dispute");
        assert_eq!(dispute.status, DisputeStatus::NeedsResponse);
        assert!(dispute.status.is_open());
        assert_eq!(dispute.evidence.text, None);
        assert_eq!(dispute.evidence_submitted_at, None);
        assert_eq!(dispute.reason, "fraudulent");

        let submitted = json
            .replace(r#""needs_response""#, r#""under_review""#)
            .replace(r#""evidence":{}"#, r#""evidence":{"text":"signed for"}"#)
            .replace(
                r#""evidence_submitted_at":null"#,
                r#""evidence_submitted_at":"2026-11-28T02:00:00Z""#,
            );
        let dispute: Dispute = serde_json::from_str(&submitted).expect("dispute");
        assert_eq!(dispute.status, DisputeStatus::UnderReview);
        assert_eq!(dispute.evidence.text.as_deref(), Some("signed for"));
        assert!(dispute.evidence_submitted_at.is_some());

        let newer: Dispute =
            serde_json::from_str(&json.replace(r#""needs_response""#, r#""warning_closed""#))
                .expect("dispute");
        assert_eq!(newer.status, DisputeStatus::Unknown);
        assert!(!newer.status.is_open());
        assert!(!DisputeStatus::Won.is_open() && !DisputeStatus::Lost.is_open());
    }

    #[test]
    fn lists_filter_by_status_and_payment() {
        let params = ListDisputes {
            status: Some(DisputeStatus::UnderReview),
            payment_id: Some("pay_1".into()),
            ..Default::default()
        };
        assert_eq!(
            params.filters(),
            [
                ("status", "under_review".to_owned()),
                ("payment_id", "pay_1".to_owned())
            ]
        );
        assert!(ListDisputes::default().filters().is_empty());
    }
}
