//! `POST /v1/payments/{id}/refunds` bodies, parsed into a request that can only exist
//! valid, and its fingerprint: what makes two refund requests "the same".

use serde::Serialize;

use crate::body::JsonObject;
use crate::domain::{Amount, sha256_hex};
use crate::error::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum RefundReason {
    RequestedByCustomer,
    Duplicate,
    Fraudulent,
}

impl RefundReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RequestedByCustomer => "requested_by_customer",
            Self::Duplicate => "duplicate",
            Self::Fraudulent => "fraudulent",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "requested_by_customer" => Some(Self::RequestedByCustomer),
            "duplicate" => Some(Self::Duplicate),
            "fraudulent" => Some(Self::Fraudulent),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = CreateRefundRequest)]
#[serde(deny_unknown_fields)]
pub struct NewRefund {
    /// Minor units; absent: whatever is left to refund when the request is claimed.
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 99_999_999, example = 500)]
    pub amount: Option<Amount>,
    pub reason: Option<RefundReason>,
}

impl NewRefund {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse_or_empty(body, &["amount", "reason"])?;
        let amount = object
            .optional_integer("amount")?
            .map(|a| {
                Amount::parse(a).map_err(|e| ApiError::invalid("amount", format!("`amount` {e}")))
            })
            .transpose()?;
        let reason = object
            .optional_string("reason", 64)?
            .map(|r| {
                RefundReason::parse(&r).ok_or_else(|| {
                    ApiError::invalid(
                        "reason",
                        "`reason` must be requested_by_customer, duplicate or fraudulent",
                    )
                })
            })
            .transpose()?;
        Ok(Self { amount, reason })
    }

    /// SHA-256 of the normalised request, the payment it refunds included: one key names
    /// one refund of one payment. An absent amount ("all that is left") is a different
    /// request from an explicit one, even of the same value.
    pub fn fingerprint(&self, payment_id: &str) -> String {
        #[derive(Serialize)]
        struct Canonical<'a> {
            endpoint: &'static str,
            payment_id: &'a str,
            amount: Option<i64>,
            reason: Option<&'static str>,
        }
        let canonical = Canonical {
            endpoint: "POST /v1/payments/{id}/refunds",
            payment_id,
            amount: self.amount.map(Amount::minor_units),
            reason: self.reason.map(RefundReason::as_str),
        };
        // A struct of strings and integers always serialises.
        let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
        sha256_hex(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<NewRefund, ApiError> {
        NewRefund::parse(body.as_bytes())
    }

    fn param_of(body: &str) -> Option<String> {
        match parse(body) {
            Err(ApiError::InvalidRequest { param, .. }) => param,
            other => panic!("{body}: expected invalid_request, got {other:?}"),
        }
    }

    #[test]
    fn amount_and_reason_are_optional() {
        assert_eq!(
            parse("{}").unwrap(),
            NewRefund {
                amount: None,
                reason: None
            }
        );
        let full = parse(r#"{"amount": 500, "reason": "duplicate"}"#).unwrap();
        assert_eq!(full.amount.map(Amount::minor_units), Some(500));
        assert_eq!(full.reason, Some(RefundReason::Duplicate));
        assert_eq!(
            parse(r#"{"amount": null, "reason": null}"#).unwrap(),
            parse("{}").unwrap()
        );
    }

    #[test]
    fn bad_fields_name_their_param() {
        for (body, param) in [
            (r#"{"amount": 0}"#, "amount"),
            (r#"{"amount": -5}"#, "amount"),
            (r#"{"amount": "5"}"#, "amount"),
            (r#"{"amount": 1.5}"#, "amount"),
            (r#"{"reason": "because"}"#, "reason"),
            (r#"{"reason": 1}"#, "reason"),
            (r#"{"amount": 5, "currency": "usd"}"#, "currency"),
        ] {
            assert_eq!(param_of(body).as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn fingerprints_cover_payment_amount_and_reason() {
        let a = parse(r#"{"amount": 500, "reason": "duplicate"}"#).unwrap();
        let same = parse(r#"{ "reason": "duplicate", "amount": 500 }"#).unwrap();
        assert_eq!(a.fingerprint("pay_1"), same.fingerprint("pay_1"));
        assert_ne!(a.fingerprint("pay_1"), a.fingerprint("pay_2"));
        for other in [
            r#"{"amount": 501, "reason": "duplicate"}"#,
            r#"{"amount": 500}"#,
            r#"{"reason": "duplicate"}"#,
            r#"{"amount": 500, "reason": "fraudulent"}"#,
        ] {
            assert_ne!(
                a.fingerprint("pay_1"),
                parse(other).unwrap().fingerprint("pay_1"),
                "{other}"
            );
        }
    }
}
