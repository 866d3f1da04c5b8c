//! The provider protocol (docs/provider.md) as the service speaks it: the messages of a
//! charge, capture, cancel and refund, how a call can fail, and the [`PaymentProvider`] port
//! every provider sits behind.

use futures_util::future::LocalBoxFuture;
use serde::{Deserialize, Deserializer, Serialize};

use crate::domain::{Timestamp, sanitized};

/// The `failure_code` of a payment or refund whose call the provider refused (a 4xx:
/// nothing moved).
pub const PROVIDER_REFUSED: &str = "provider_refused";

/// `POST /v1/charges` body. `reference` is our payment id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChargeRequest {
    pub amount: i64,
    pub currency: String,
    pub payment_method: String,
    pub reference: String,
    /// `false`: authorize only (the answer is `requires_capture`); absent means `true`.
    #[serde(default = "charge_captures_by_default")]
    pub capture: bool,
}

fn charge_captures_by_default() -> bool {
    true
}

/// `POST /v1/charges/{id}/capture` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureRequest {
    pub amount: i64,
}

/// The provider's answer to a capture or a cancel: the charge as it is now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChargeUpdate {
    #[serde(deserialize_with = "provider_id")]
    pub id: String,
    pub status: ProviderStatus,
    /// What the capture charged (captures only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount_captured: Option<i64>,
    #[serde(default, deserialize_with = "echoed")]
    pub reference: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderStatus {
    Succeeded,
    Failed,
    /// Finished later by a signed webhook.
    Pending,
    /// Authorized, not charged yet (`capture: false`).
    RequiresCapture,
    /// An authorization released without charging.
    Canceled,
}

impl ProviderStatus {
    /// The status as the protocol writes it (also the metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Pending => "pending",
            Self::RequiresCapture => "requires_capture",
            Self::Canceled => "canceled",
        }
    }
}

/// The provider's answer to a charge: what it did with the money. Only `id` and `status`
/// decide anything; the echoed fields may be missing from another provider's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    #[serde(deserialize_with = "provider_id")]
    pub id: String,
    pub status: ProviderStatus,
    #[serde(default, deserialize_with = "echoed")]
    pub amount: i64,
    #[serde(default, deserialize_with = "echoed")]
    pub currency: String,
    #[serde(default, deserialize_with = "echoed")]
    pub reference: String,
    #[serde(default, deserialize_with = "provider_text")]
    pub failure_code: Option<String>,
    #[serde(default, deserialize_with = "provider_text")]
    pub failure_message: Option<String>,
}

/// `POST /v1/refunds` body. `reference` is our refund id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundRequest {
    /// The provider's charge being refunded (`ch_…`).
    pub charge: String,
    pub amount: i64,
    pub reference: String,
}

/// The provider's answer to a refund (`pr_…`): whether the money went back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderRefund {
    #[serde(deserialize_with = "provider_id")]
    pub id: String,
    pub status: ProviderStatus,
    #[serde(default, deserialize_with = "echoed")]
    pub amount: i64,
    #[serde(default, deserialize_with = "echoed")]
    pub charge: String,
    #[serde(default, deserialize_with = "echoed")]
    pub reference: String,
    #[serde(default, deserialize_with = "provider_text")]
    pub failure_code: Option<String>,
}

/// `POST /v1/payouts` body. `reference` is our payout id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutRequest {
    pub amount: i64,
    pub currency: String,
    /// The merchant's bank account (`ba_…`).
    pub destination: String,
    pub reference: String,
}

/// Where a payout is at the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayoutState {
    Paid,
    Failed,
    /// Finished later by a signed webhook.
    Pending,
}

impl PayoutState {
    /// The status as the protocol writes it (also the metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Paid => "paid",
            Self::Failed => "failed",
            Self::Pending => "pending",
        }
    }
}

/// The provider's answer to a payout (`tr_…`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderPayout {
    #[serde(deserialize_with = "provider_id")]
    pub id: String,
    pub status: PayoutState,
    #[serde(default, deserialize_with = "echoed")]
    pub amount: i64,
    #[serde(default, deserialize_with = "echoed")]
    pub currency: String,
    #[serde(default, deserialize_with = "echoed")]
    pub reference: String,
    #[serde(default, deserialize_with = "provider_text")]
    pub failure_code: Option<String>,
}

/// A merchant's step on a dispute, as the provider takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisputeStepRequest {
    /// `POST /v1/disputes/{id}/evidence`, body `{"evidence": {"text": …}}`.
    Evidence { text: Option<String> },
    /// `POST /v1/disputes/{id}/close`, body `{}`: the loss accepted.
    Close,
}

/// Where a dispute is at the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisputeState {
    NeedsResponse,
    UnderReview,
    Won,
    Lost,
}

impl DisputeState {
    /// The status as the protocol writes it (also the metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NeedsResponse => "needs_response",
            Self::UnderReview => "under_review",
            Self::Won => "won",
            Self::Lost => "lost",
        }
    }
}

/// The provider's answer to a dispute step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderDispute {
    #[serde(deserialize_with = "provider_id")]
    pub id: String,
    pub status: DisputeState,
}

/// The kinds of movement in the provider's settlement report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MovementKind {
    /// An automatic charge's money taken.
    Charge,
    /// An authorization's money taken at its capture.
    Capture,
    Refund,
    Payout,
    /// A disputed charge's money taken back (names the payment).
    Dispute,
    /// A won dispute's money given back (names the payment).
    DisputeReversal,
}

impl MovementKind {
    pub const ALL: [Self; 6] = [
        Self::Charge,
        Self::Capture,
        Self::Refund,
        Self::Payout,
        Self::Dispute,
        Self::DisputeReversal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Charge => "charge",
            Self::Capture => "capture",
            Self::Refund => "refund",
            Self::Payout => "payout",
            Self::Dispute => "dispute",
            Self::DisputeReversal => "dispute_reversal",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

/// `GET /v1/settlements` parameters: the movements made in `[created_gte, created_lt)`,
/// oldest first, at most `limit` (≤ 1000) after `starting_after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementQuery {
    pub created_gte: Timestamp,
    pub created_lt: Timestamp,
    pub limit: usize,
    pub starting_after: Option<String>,
}

/// One movement of money the provider made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettlementMovement {
    #[serde(deserialize_with = "provider_id")]
    pub id: String,
    #[serde(rename = "type")]
    pub kind: MovementKind,
    /// Our id of the payment, refund or payout (a payment's for disputes).
    #[serde(deserialize_with = "provider_string")]
    pub reference: String,
    /// Positive; the kind says the direction.
    pub amount: i64,
    #[serde(deserialize_with = "provider_string")]
    pub currency: String,
    #[serde(with = "rfc3339")]
    pub created_at: Timestamp,
}

/// A page of the settlement report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettlementPage {
    pub data: Vec<SettlementMovement>,
    pub has_more: bool,
}

/// Timestamps as the protocol writes them: RFC 3339.
mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::domain::{Timestamp, format_timestamp};

    pub fn serialize<S: Serializer>(at: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_timestamp(*at))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(deserializer)?;
        chrono::DateTime::parse_from_rfc3339(&text)
            .map(|t| t.naive_utc())
            .map_err(serde::de::Error::custom)
    }
}

/// The id the provider gives a charge or refund, which we store and send back: never
/// empty (an answer without one is not understood), and fit to store (see [`sanitized`]).
fn provider_id<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    let id = String::deserialize(deserializer)?;
    if id.is_empty() {
        return Err(serde::de::Error::custom("the provider gave an empty id"));
    }
    Ok(sanitized(id))
}

/// Text from the provider that we compare, store and print (a movement's reference and
/// currency), made fit to store like its ids: one movement PostgreSQL cannot hold would
/// stop every reconciliation of its window.
fn provider_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(sanitized(String::deserialize(deserializer)?))
}

/// A field the provider echoes from our request: only its id and status decide anything,
/// so an echo left out and one sent as `null` are the same (the type's default), not an
/// answer that cannot be understood (which would leave the outcome unknown for ever).
fn echoed<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Free text from the provider that we store and show (failure codes and messages).
fn provider_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.map(sanitized))
}

/// A timeout, a broken connection or a 5xx: the charge may or may not have happened.
/// The only safe move is to ask again later with the same idempotency key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("provider outcome unknown: {0}")]
pub struct OutcomeUnknown(pub String);

/// Why a provider call gave no answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// Ask again later with the same key.
    #[error(transparent)]
    Unknown(#[from] OutcomeUnknown),
    /// A 4xx (e.g. 409 for a charge that is no longer capturable, 400 for a request the
    /// provider will not take): a final refusal of the operation, nothing moved (docs/provider.md).
    #[error("provider refused: {0}")]
    Refused(String),
}

pub trait PaymentProvider: Send + Sync + 'static {
    /// Charges at most once per `idempotency_key`: the same key again returns the first
    /// result and moves no money.
    fn create_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a ChargeRequest,
    ) -> LocalBoxFuture<'a, Result<Charge, ProviderError>>;

    /// Refunds at most once per `idempotency_key` (our refund id): the same key again
    /// returns the first result and moves no money.
    fn create_refund<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a RefundRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderRefund, ProviderError>>;

    /// Captures `amount` of an authorized charge, at most once per `idempotency_key` (our
    /// capture's id); the rest of the authorization is released.
    fn capture_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        charge_id: &'a str,
        request: &'a CaptureRequest,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>>;

    /// Releases an authorized charge without charging, at most once per `idempotency_key`.
    fn cancel_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        charge_id: &'a str,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>>;

    /// Pays out to a bank account at most once per `idempotency_key` (our payout id): the
    /// same key again returns the first result and moves no money.
    fn create_payout<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a PayoutRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderPayout, ProviderError>>;

    /// Takes a step on the provider's dispute `dispute_id` at most once per
    /// `idempotency_key` (our id for the step). A refusal (409) means the dispute can no
    /// longer take it.
    fn dispute_step<'a>(
        &'a self,
        idempotency_key: &'a str,
        dispute_id: &'a str,
        step: &'a DisputeStepRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderDispute, ProviderError>>;

    /// A page of the settlement report: every movement of money the provider made (a read:
    /// any failure is just an error, nothing moved).
    fn settlements<'a>(
        &'a self,
        query: &'a SettlementQuery,
    ) -> LocalBoxFuture<'a, Result<SettlementPage, ProviderError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payout_answer_is_understood() {
        let payout: ProviderPayout =
            serde_json::from_str(r#"{"id": "tr_1", "status": "pending"}"#).unwrap();
        assert_eq!(payout.status, PayoutState::Pending);
        assert!(serde_json::from_str::<ProviderPayout>(r#"{"id": "", "status": "paid"}"#).is_err());
    }

    #[test]
    fn a_minimal_provider_answer_is_understood() {
        let charge: Charge =
            serde_json::from_str(r#"{"id": "ch_1", "status": "failed", "extra": 1}"#).unwrap();
        assert_eq!(charge.status, ProviderStatus::Failed);
        assert_eq!(charge.failure_code, None);
        let refund: ProviderRefund =
            serde_json::from_str(r#"{"id": "pr_1", "status": "pending"}"#).unwrap();
        assert_eq!(refund.status, ProviderStatus::Pending);
        assert!(serde_json::from_str::<Charge>(r#"{"id": "ch_1", "status": "odd"}"#).is_err());
    }

    /// An echoed field sent as `null` is one left out: the answer is understood (each
    /// failed to parse before, and the operation stayed unknown while the provider kept
    /// answering so).
    #[test]
    fn echoed_fields_sent_as_null_are_left_out() {
        let nulls = r#""amount": null, "currency": null, "reference": null, "charge": null"#;
        let charge: Charge = serde_json::from_str(&format!(
            r#"{{"id": "ch_1", "status": "succeeded", {nulls}}}"#
        ))
        .unwrap();
        assert_eq!((charge.amount, charge.reference.as_str()), (0, ""));
        let refund: ProviderRefund = serde_json::from_str(&format!(
            r#"{{"id": "pr_1", "status": "succeeded", {nulls}}}"#
        ))
        .unwrap();
        assert_eq!(refund.charge, "");
        let payout: ProviderPayout =
            serde_json::from_str(&format!(r#"{{"id": "tr_1", "status": "paid", {nulls}}}"#))
                .unwrap();
        assert_eq!(payout.currency, "");
        let update: ChargeUpdate = serde_json::from_str(
            r#"{"id": "ch_1", "status": "canceled", "reference": null, "amount_captured": null}"#,
        )
        .unwrap();
        assert_eq!(update.reference, "");
    }

    /// What the provider says is stored as it is, but for characters no database column
    /// may hold (PostgreSQL refuses U+0000 in text, for ever); an answer with no id is not
    /// understood.
    #[test]
    fn provider_text_is_made_fit_to_store() {
        let charge: Charge = serde_json::from_str(
            r#"{"id": "ch_\u0000", "status": "failed", "failure_code": "x\u0000",
                "failure_message": "declined\u0000 \u00e9"}"#,
        )
        .unwrap();
        assert_eq!(charge.id, "ch_\u{fffd}");
        assert_eq!(charge.failure_code.as_deref(), Some("x\u{fffd}"));
        assert_eq!(
            charge.failure_message.as_deref(),
            Some("declined\u{fffd} é")
        );
        let refund: ProviderRefund =
            serde_json::from_str(r#"{"id": "pr_\u0000", "status": "succeeded"}"#).unwrap();
        assert_eq!(refund.id, "pr_\u{fffd}");
        let update: ChargeUpdate =
            serde_json::from_str(r#"{"id": "ch_\u0001", "status": "canceled"}"#).unwrap();
        assert_eq!(update.id, "ch_\u{fffd}");
        let movement = |reference: &str, currency: &str, created_at: &str| {
            serde_json::from_str::<SettlementMovement>(&format!(
                r#"{{"id": "mv_\u0000", "type": "charge", "reference": "{reference}",
                    "amount": 1, "currency": "{currency}", "created_at": "{created_at}"}}"#
            ))
        };
        let odd = movement("pay_\\u0000x", "u\\u0000d", "2026-11-30T06:00:00Z").unwrap();
        assert_eq!(
            (
                odd.id.as_str(),
                odd.reference.as_str(),
                odd.currency.as_str()
            ),
            ("mv_\u{fffd}", "pay_\u{fffd}x", "u\u{fffd}d")
        );
        // A movement whose time cannot be read is not understood: the page is not either.
        assert!(movement("pay_1", "usd", "yesterday").is_err());
        for empty in [
            r#"{"id": "", "status": "succeeded"}"#,
            r#"{"status": "succeeded"}"#,
        ] {
            assert!(serde_json::from_str::<Charge>(empty).is_err(), "{empty}");
            assert!(
                serde_json::from_str::<ProviderRefund>(empty).is_err(),
                "{empty}"
            );
            assert!(
                serde_json::from_str::<ChargeUpdate>(empty).is_err(),
                "{empty}"
            );
        }
    }

    /// The protocol's spelling (docs/provider.md), both ways, for every status.
    #[test]
    fn statuses_are_written_as_the_protocol_spells_them() {
        for status in [
            ProviderStatus::Succeeded,
            ProviderStatus::Failed,
            ProviderStatus::Pending,
            ProviderStatus::RequiresCapture,
            ProviderStatus::Canceled,
        ] {
            let json = format!("\"{}\"", status.as_str());
            assert_eq!(serde_json::to_string(&status).unwrap(), json);
            assert_eq!(
                serde_json::from_str::<ProviderStatus>(&json).unwrap(),
                status
            );
        }
        assert_eq!(ProviderStatus::RequiresCapture.as_str(), "requires_capture");
    }
}
