//! `POST /v1/payments` bodies, parsed into a request that can only exist valid, and its
//! fingerprint: what makes two requests "the same" for idempotency.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::body::JsonObject;
use crate::domain::{Amount, Currency, sha256_hex};
use crate::error::ApiError;

pub const MAX_METADATA_KEYS: usize = 50;
pub const MAX_METADATA_KEY_LEN: usize = 40;
pub const MAX_METADATA_VALUE_LEN: usize = 500;

/// When the money moves: at once, or when the merchant captures the authorization.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum CaptureMethod {
    #[default]
    Automatic,
    Manual,
}

impl CaptureMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Automatic => "automatic",
            Self::Manual => "manual",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "automatic" => Some(Self::Automatic),
            "manual" => Some(Self::Manual),
            _ => None,
        }
    }
}

/// The longest `customer_id`, in characters (a list's filter by it too).
pub const MAX_CUSTOMER_ID_CHARS: usize = 255;

/// Unknown fields are refused (400 `invalid_request` naming the field).
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = CreatePaymentRequest)]
#[serde(deny_unknown_fields)]
pub struct NewPayment {
    /// Minor units, 1 to 99 999 999.
    #[schema(value_type = i64, minimum = 1, maximum = 99_999_999, example = 2000)]
    pub amount: Amount,
    /// ISO 4217 code, any case.
    #[schema(value_type = String, example = "usd")]
    pub currency: Currency,
    /// A test token: `pm_card_visa`, `pm_card_declined`, `pm_card_async`, …
    #[schema(min_length = 1, max_length = 255, example = "pm_card_visa")]
    pub payment_method: String,
    #[schema(max_length = 255)]
    pub customer_id: Option<String>,
    #[schema(max_length = 1000)]
    pub description: Option<String>,
    /// At most 50 keys of at most 40 characters; string values of at most 500 characters.
    #[schema(value_type = Option<std::collections::HashMap<String, String>>)]
    pub metadata: BTreeMap<String, String>,
    /// `automatic` (default): charge now; `manual`: authorize now, capture later.
    #[schema(value_type = Option<CaptureMethod>)]
    pub capture_method: CaptureMethod,
}

impl NewPayment {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse(
            body,
            &[
                "amount",
                "currency",
                "payment_method",
                "customer_id",
                "description",
                "metadata",
                "capture_method",
            ],
        )?;
        let amount = object.required_integer("amount")?;
        let amount = Amount::parse(amount)
            .map_err(|e| ApiError::invalid("amount", format!("`amount` {e}")))?;
        let currency = object.required_string("currency", 3)?;
        let currency = Currency::parse(&currency)
            .map_err(|e| ApiError::invalid("currency", format!("`currency` {e}")))?;
        let payment_method = object.required_string("payment_method", 255)?;
        if payment_method.is_empty() {
            return Err(ApiError::invalid(
                "payment_method",
                "`payment_method` must not be empty",
            ));
        }
        let customer_id = object.optional_string("customer_id", MAX_CUSTOMER_ID_CHARS)?;
        let description = object.optional_string("description", 1000)?;
        let metadata = object.optional_string_map(
            "metadata",
            MAX_METADATA_KEYS,
            MAX_METADATA_KEY_LEN,
            MAX_METADATA_VALUE_LEN,
        )?;
        let capture_method = object
            .optional_string("capture_method", 16)?
            .map(|m| {
                CaptureMethod::parse(&m).ok_or_else(|| {
                    ApiError::invalid(
                        "capture_method",
                        "`capture_method` must be automatic or manual",
                    )
                })
            })
            .transpose()?
            .unwrap_or_default();
        Ok(Self {
            amount,
            currency,
            payment_method,
            customer_id,
            description,
            metadata,
            capture_method,
        })
    }

    /// SHA-256 of the normalised request: key order, whitespace and currency case are gone
    /// by now, so equal requests hash equal.
    pub fn fingerprint(&self) -> String {
        #[derive(Serialize)]
        struct Canonical<'a> {
            endpoint: &'static str,
            amount: i64,
            currency: &'a str,
            payment_method: &'a str,
            customer_id: Option<&'a str>,
            description: Option<&'a str>,
            metadata: &'a BTreeMap<String, String>,
            // Absent for automatic payments, so keys claimed before manual capture existed
            // keep their fingerprint (a retry a year later still replays).
            #[serde(skip_serializing_if = "Option::is_none")]
            capture_method: Option<&'static str>,
        }
        let canonical = Canonical {
            endpoint: "POST /v1/payments",
            amount: self.amount.minor_units(),
            currency: self.currency.as_str(),
            payment_method: &self.payment_method,
            customer_id: self.customer_id.as_deref(),
            description: self.description.as_deref(),
            metadata: &self.metadata,
            capture_method: (self.capture_method == CaptureMethod::Manual)
                .then_some(CaptureMethod::Manual.as_str()),
        };
        // A struct of strings and integers always serialises.
        let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
        sha256_hex(&bytes)
    }

    pub fn metadata_json(&self) -> String {
        serde_json::to_string(&self.metadata).unwrap_or_else(|_| "{}".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<NewPayment, ApiError> {
        NewPayment::parse(body.as_bytes())
    }

    fn param_of(body: &str) -> Option<String> {
        match parse(body) {
            Err(ApiError::InvalidRequest { param, .. }) => param,
            other => panic!("{body}: expected invalid_request, got {other:?}"),
        }
    }

    #[test]
    fn equal_requests_have_equal_fingerprints() {
        let a = parse(r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"}}"#).unwrap();
        let b = parse(
            r#"{ "metadata": {"b":"2", "a":"1"},
                 "payment_method": "pm_card_visa", "currency": "USD", "amount": 2000 }"#,
        )
        .unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let explicit_nulls = parse(r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"},"customer_id":null,"description":null}"#).unwrap();
        assert_eq!(a.fingerprint(), explicit_nulls.fingerprint());
        let explicit_automatic = parse(r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"a":"1","b":"2"},"capture_method":"automatic"}"#).unwrap();
        assert_eq!(a.fingerprint(), explicit_automatic.fingerprint());
    }

    #[test]
    fn automatic_fingerprints_are_what_they_were_before_capture_method() {
        // Keys claimed by earlier versions must still replay: this is the fingerprint the
        // previous release computed for this request.
        let request =
            parse(r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}"#).unwrap();
        let before = sha256_hex(
            br#"{"endpoint":"POST /v1/payments","amount":2000,"currency":"usd","payment_method":"pm_card_visa","customer_id":null,"description":null,"metadata":{}}"#,
        );
        assert_eq!(request.fingerprint(), before);
    }

    #[test]
    fn different_requests_have_different_fingerprints() {
        let base =
            parse(r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}"#).unwrap();
        for other in [
            r#"{"amount":2001,"currency":"usd","payment_method":"pm_card_visa"}"#,
            r#"{"amount":2000,"currency":"eur","payment_method":"pm_card_visa"}"#,
            r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_amex"}"#,
            r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","customer_id":"c"}"#,
            r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","description":"d"}"#,
            r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","metadata":{"k":"v"}}"#,
            r#"{"amount":2000,"currency":"usd","payment_method":"pm_card_visa","capture_method":"manual"}"#,
        ] {
            assert_ne!(
                base.fingerprint(),
                parse(other).unwrap().fingerprint(),
                "{other}"
            );
        }
    }

    #[test]
    fn bad_fields_name_their_param() {
        let cases = [
            (
                r#"{"currency":"usd","payment_method":"pm_card_visa"}"#,
                "amount",
            ),
            (
                r#"{"amount":"2000","currency":"usd","payment_method":"pm_card_visa"}"#,
                "amount",
            ),
            (
                r#"{"amount":20.5,"currency":"usd","payment_method":"pm_card_visa"}"#,
                "amount",
            ),
            (
                r#"{"amount":0,"currency":"usd","payment_method":"pm_card_visa"}"#,
                "amount",
            ),
            (
                r#"{"amount":100000000,"currency":"usd","payment_method":"pm_card_visa"}"#,
                "amount",
            ),
            (
                r#"{"amount":1,"currency":"usdx","payment_method":"pm_card_visa"}"#,
                "currency",
            ),
            (
                r#"{"amount":1,"currency":"xyz","payment_method":"pm_card_visa"}"#,
                "currency",
            ),
            (r#"{"amount":1,"currency":"usd"}"#, "payment_method"),
            (
                r#"{"amount":1,"currency":"usd","payment_method":""}"#,
                "payment_method",
            ),
            (
                r#"{"amount":1,"currency":"usd","payment_method":"pm","extra":1}"#,
                "extra",
            ),
            (
                r#"{"amount":1,"currency":"usd","payment_method":"pm","customer_id":5}"#,
                "customer_id",
            ),
            (
                r#"{"amount":1,"currency":"usd","payment_method":"pm","metadata":[]}"#,
                "metadata",
            ),
            (
                r#"{"amount":1,"currency":"usd","payment_method":"pm","metadata":{"k":1}}"#,
                "metadata",
            ),
        ];
        for (body, param) in cases {
            assert_eq!(param_of(body).as_deref(), Some(param), "{body}");
        }
        let long = format!(
            r#"{{"amount":1,"currency":"usd","payment_method":"pm","description":"{}"}}"#,
            "d".repeat(1001)
        );
        assert_eq!(param_of(&long).as_deref(), Some("description"));
        let many: Vec<String> = (0..51).map(|i| format!(r#""k{i}":"v""#)).collect();
        let body = format!(
            r#"{{"amount":1,"currency":"usd","payment_method":"pm","metadata":{{{}}}}}"#,
            many.join(",")
        );
        assert_eq!(param_of(&body).as_deref(), Some("metadata"));
    }

    #[test]
    fn non_objects_are_rejected_without_param() {
        for body in ["", "not json", "[]", "null", "42", "{\"amount\":"] {
            assert!(
                matches!(
                    parse(body),
                    Err(ApiError::InvalidRequest { param: None, .. })
                ),
                "{body:?}"
            );
        }
    }
}
