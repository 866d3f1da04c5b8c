//! `POST /v1/payouts` bodies, parsed into a request that can only exist valid, and its
//! fingerprint.

use serde::Serialize;

use crate::body::JsonObject;
use crate::domain::{Amount, Currency, sha256_hex};
use crate::error::ApiError;

/// Where a payout goes when the request names no destination.
pub const DEFAULT_DESTINATION: &str = "ba_test_instant";

#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = CreatePayoutRequest)]
#[serde(deny_unknown_fields)]
pub struct NewPayout {
    /// Minor units, at most the available balance in `currency`.
    #[schema(value_type = i64, minimum = 1, maximum = 9_007_199_254_740_991_i64, example = 1500)]
    pub amount: Amount,
    /// ISO 4217 code, any case (answered in lower case).
    #[schema(value_type = String, example = "usd")]
    pub currency: Currency,
    /// The bank account: `ba_` and 1 to 64 of A–Z a–z 0–9 _. Default `ba_test_instant`.
    #[serde(default)]
    #[schema(
        example = "ba_test_instant",
        pattern = "^ba_[A-Za-z0-9_]{1,64}$",
        nullable
    )]
    pub destination: String,
    #[schema(max_length = 1000)]
    pub description: Option<String>,
}

/// `ba_` + 1 to 64 of A–Z a–z 0–9 _.
fn is_destination(text: &str) -> bool {
    text.strip_prefix("ba_").is_some_and(|rest| {
        (1..=64).contains(&rest.len())
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

impl NewPayout {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object =
            JsonObject::parse(body, &["amount", "currency", "destination", "description"])?;
        let amount = Amount::parse_payout(object.required_integer("amount")?)
            .map_err(|e| ApiError::invalid("amount", format!("`amount` {e}")))?;
        let currency = Currency::parse(&object.required_string("currency", 3)?)
            .map_err(|e| ApiError::invalid("currency", format!("`currency` {e}")))?;
        let destination = match object.optional_string("destination", 67)? {
            None => DEFAULT_DESTINATION.to_owned(),
            Some(d) if is_destination(&d) => d,
            Some(_) => {
                return Err(ApiError::invalid(
                    "destination",
                    "`destination` must be `ba_` followed by 1 to 64 letters, digits or _",
                ));
            }
        };
        let description = object.optional_string("description", 1000)?;
        Ok(Self {
            amount,
            currency,
            destination,
            description,
        })
    }

    /// SHA-256 of the normalised request.
    pub fn fingerprint(&self) -> String {
        #[derive(Serialize)]
        struct Canonical<'a> {
            endpoint: &'static str,
            amount: i64,
            currency: &'a str,
            destination: &'a str,
            description: Option<&'a str>,
        }
        let canonical = Canonical {
            endpoint: "POST /v1/payouts",
            amount: self.amount.minor_units(),
            currency: self.currency.as_str(),
            destination: &self.destination,
            description: self.description.as_deref(),
        };
        // A struct of strings and integers always serialises.
        let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
        sha256_hex(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param_of(body: &str) -> Option<String> {
        match NewPayout::parse(body.as_bytes()) {
            Err(ApiError::InvalidRequest { param, .. }) => param,
            other => panic!("{body}: expected invalid_request, got {other:?}"),
        }
    }

    #[test]
    fn a_payout_needs_an_amount_and_a_currency_and_defaults_its_destination() {
        let payout = NewPayout::parse(br#"{"amount": 1500, "currency": "USD"}"#).unwrap();
        assert_eq!(payout.amount.minor_units(), 1500);
        assert_eq!(payout.currency.as_str(), "usd");
        assert_eq!(payout.destination, DEFAULT_DESTINATION);
        assert_eq!(
            param_of(r#"{"currency": "usd"}"#).as_deref(),
            Some("amount")
        );
        assert_eq!(
            param_of(r#"{"amount": 0, "currency": "usd"}"#).as_deref(),
            Some("amount")
        );
        assert_eq!(param_of(r#"{"amount": 5}"#).as_deref(), Some("currency"));
        assert_eq!(
            param_of(r#"{"amount": 5, "currency": "usd", "bank": "x"}"#).as_deref(),
            Some("bank")
        );
    }

    #[test]
    fn destinations_are_bank_account_ids() {
        for good in ["ba_test_async", "ba_1", &format!("ba_{}", "a".repeat(64))] {
            let body = format!(r#"{{"amount": 5, "currency": "usd", "destination": "{good}"}}"#);
            assert_eq!(NewPayout::parse(body.as_bytes()).unwrap().destination, good);
        }
        for bad in [
            "ba_",
            "acct_1",
            "ba_with space",
            "ba_ü",
            &format!("ba_{}", "a".repeat(65)),
        ] {
            let body = format!(r#"{{"amount": 5, "currency": "usd", "destination": "{bad}"}}"#);
            assert_eq!(param_of(&body).as_deref(), Some("destination"), "{bad}");
        }
    }

    #[test]
    fn the_same_request_has_the_same_fingerprint() {
        let a = NewPayout::parse(br#"{"amount": 5, "currency": "usd"}"#).unwrap();
        let b = NewPayout::parse(br#"{"currency": "USD", "amount": 5}"#).unwrap();
        let c = NewPayout::parse(br#"{"amount": 6, "currency": "usd"}"#).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
    }
}
