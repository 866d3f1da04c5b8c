//! The bodies of `POST /v1/payments/{id}/capture` and `…/cancel`, parsed into requests
//! that can only exist valid, each with its fingerprint.

use serde::Serialize;

use crate::body::JsonObject;
use crate::domain::{Amount, sha256_hex};
use crate::error::ApiError;

/// `POST /v1/payments/{id}/capture` body.
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = CapturePaymentRequest)]
#[serde(deny_unknown_fields)]
pub struct NewCapture {
    /// Minor units; absent: all of `amount_capturable`.
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 99_999_999, example = 1500)]
    pub amount: Option<Amount>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum CancellationReason {
    RequestedByCustomer,
    Duplicate,
    Fraudulent,
    Abandoned,
    /// Set by the service when an authorization expires; not accepted in requests.
    Expired,
}

impl CancellationReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequestedByCustomer => "requested_by_customer",
            Self::Duplicate => "duplicate",
            Self::Fraudulent => "fraudulent",
            Self::Abandoned => "abandoned",
            Self::Expired => "expired",
        }
    }

    /// The reasons a merchant may give.
    fn parse_requested(s: &str) -> Option<Self> {
        match s {
            "requested_by_customer" => Some(Self::RequestedByCustomer),
            "duplicate" => Some(Self::Duplicate),
            "fraudulent" => Some(Self::Fraudulent),
            "abandoned" => Some(Self::Abandoned),
            _ => None,
        }
    }
}

/// `POST /v1/payments/{id}/cancel` body.
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = CancelPaymentRequest)]
#[serde(deny_unknown_fields)]
pub struct NewCancel {
    /// `requested_by_customer`, `duplicate`, `fraudulent` or `abandoned`.
    #[schema(
        value_type = Option<String>,
        pattern = "^(requested_by_customer|duplicate|fraudulent|abandoned)$",
        example = "requested_by_customer"
    )]
    pub cancellation_reason: Option<CancellationReason>,
}

impl NewCapture {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse_or_empty(body, &["amount"])?;
        let amount = object
            .optional_integer("amount")?
            .map(|a| {
                Amount::parse(a).map_err(|e| ApiError::invalid("amount", format!("`amount` {e}")))
            })
            .transpose()?;
        Ok(Self { amount })
    }
}

impl NewCancel {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse_or_empty(body, &["cancellation_reason"])?;
        let cancellation_reason = object
            .optional_string("cancellation_reason", 64)?
            .map(|r| {
                CancellationReason::parse_requested(&r).ok_or_else(|| {
                    ApiError::invalid(
                        "cancellation_reason",
                        "`cancellation_reason` must be requested_by_customer, duplicate, \
                         fraudulent or abandoned",
                    )
                })
            })
            .transpose()?;
        Ok(Self {
            cancellation_reason,
        })
    }
}

/// SHA-256 of the normalised request, its payment included: one key names one operation
/// on one payment. An absent amount ("all") differs from an explicit one.
pub(super) fn fingerprint(
    kind: &str,
    payment_id: &str,
    amount: Option<i64>,
    reason: Option<&str>,
) -> String {
    #[derive(Serialize)]
    struct Canonical<'a> {
        endpoint: String,
        payment_id: &'a str,
        amount: Option<i64>,
        reason: Option<&'a str>,
    }
    let canonical = Canonical {
        endpoint: format!("POST /v1/payments/{{id}}/{kind}"),
        payment_id,
        amount,
        reason,
    };
    // A struct of strings and integers always serialises.
    sha256_hex(&serde_json::to_vec(&canonical).unwrap_or_default())
}

/// What a capture or cancel request asks for.
pub enum Requested {
    Capture(NewCapture),
    Cancel(NewCancel),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::captures::{CANCEL, CAPTURE};

    #[test]
    fn bodies_parse_and_refuse_what_they_must() {
        assert_eq!(NewCapture::parse(b"").unwrap().amount, None);
        assert_eq!(NewCapture::parse(b"{}").unwrap().amount, None);
        assert_eq!(
            NewCapture::parse(br#"{"amount": 1500}"#)
                .unwrap()
                .amount
                .map(|a| a.minor_units()),
            Some(1500)
        );
        for bad in [
            &br#"{"amount": 0}"#[..],
            br#"{"amount": "1"}"#,
            br#"{"x": 1}"#,
            b"[]",
        ] {
            assert!(
                NewCapture::parse(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            NewCancel::parse(br#"{"cancellation_reason": "abandoned"}"#)
                .unwrap()
                .cancellation_reason,
            Some(CancellationReason::Abandoned)
        );
        assert!(NewCancel::parse(br#"{"cancellation_reason": "expired"}"#).is_err());
        assert!(NewCancel::parse(br#"{"amount": 1}"#).is_err());
    }

    #[test]
    fn fingerprints_bind_the_payment_the_kind_and_the_request() {
        let base = fingerprint(CAPTURE, "pay_1", Some(100), None);
        assert_eq!(base, fingerprint(CAPTURE, "pay_1", Some(100), None));
        assert_ne!(base, fingerprint(CAPTURE, "pay_2", Some(100), None));
        assert_ne!(base, fingerprint(CAPTURE, "pay_1", None, None));
        assert_ne!(base, fingerprint(CANCEL, "pay_1", Some(100), None));
        assert_ne!(
            fingerprint(CANCEL, "pay_1", None, Some("duplicate")),
            fingerprint(CANCEL, "pay_1", None, None)
        );
    }
}
