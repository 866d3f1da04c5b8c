//! `POST /v1/disputes/{id}` and `POST /v1/disputes/{id}/close` bodies, parsed into requests
//! that can only exist valid, and their fingerprints.

use serde::Serialize;

use crate::body::JsonObject;
use crate::domain::sha256_hex;
use crate::error::ApiError;

/// The most evidence text a dispute takes.
pub const MAX_EVIDENCE_CHARS: usize = 20_000;

/// Evidence saved on a dispute, and sent to the provider with `submit`.
#[derive(Debug, Clone, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = UpdateDisputeRequest)]
#[serde(deny_unknown_fields)]
pub struct DisputeEvidence {
    /// `{"text": "…"}`: at most 20 000 characters.
    #[serde(rename = "evidence")]
    #[schema(value_type = Option<Object>, example = json!({"text": "Delivered to the cardholder, signed for."}))]
    pub text: Option<String>,
    /// Send the evidence to the provider now: the dispute moves to `under_review`.
    #[serde(default)]
    #[schema(default = false, nullable)]
    pub submit: bool,
}

impl DisputeEvidence {
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        let mut object = JsonObject::parse(body, &["evidence", "submit"])?;
        let text = match object.optional_object("evidence", &["text"])? {
            None => None,
            Some(mut evidence) => evidence
                .optional_string("text", MAX_EVIDENCE_CHARS)
                .map_err(|_| {
                    ApiError::invalid(
                        "evidence",
                        format!(
                            "`evidence.text` must be a string of at most {MAX_EVIDENCE_CHARS} characters"
                        ),
                    )
                })?,
        };
        let submit = object.optional_bool("submit")?.unwrap_or(false);
        Ok(Self { text, submit })
    }

    /// SHA-256 of the normalised request, bound to its dispute.
    pub fn fingerprint(&self, dispute_id: &str) -> String {
        fingerprint(&Canonical {
            endpoint: "POST /v1/disputes/{id}",
            dispute_id,
            text: self.text.as_deref(),
            submit: self.submit,
        })
    }
}

/// The fingerprint of a close: its dispute is all there is to it.
pub fn close_fingerprint(dispute_id: &str) -> String {
    fingerprint(&Canonical {
        endpoint: "POST /v1/disputes/{id}/close",
        dispute_id,
        text: None,
        submit: false,
    })
}

#[derive(Serialize)]
struct Canonical<'a> {
    endpoint: &'static str,
    dispute_id: &'a str,
    text: Option<&'a str>,
    submit: bool,
}

fn fingerprint(canonical: &Canonical<'_>) -> String {
    // A struct of strings and booleans always serialises.
    sha256_hex(&serde_json::to_vec(canonical).unwrap_or_default())
}

/// A close takes an empty object (or no body).
pub fn parse_close(body: &[u8]) -> Result<(), ApiError> {
    JsonObject::parse_or_empty(body, &[]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param_of(body: &str) -> Option<String> {
        match DisputeEvidence::parse(body.as_bytes()) {
            Err(ApiError::InvalidRequest { param, .. }) => param,
            other => panic!("{body}: expected invalid_request, got {other:?}"),
        }
    }

    #[test]
    fn evidence_is_text_of_bounded_length_and_submit_is_a_flag() {
        let saved = DisputeEvidence::parse(br#"{"evidence": {"text": "signed for"}}"#).unwrap();
        assert_eq!(saved.text.as_deref(), Some("signed for"));
        assert!(!saved.submit);
        let sent =
            DisputeEvidence::parse(br#"{"evidence": {"text": "x"}, "submit": true}"#).unwrap();
        assert!(sent.submit);
        let long = format!(r#"{{"evidence": {{"text": "{}"}}}}"#, "a".repeat(20_001));
        assert_eq!(param_of(&long).as_deref(), Some("evidence"));
        assert_eq!(
            param_of(r#"{"evidence": {"text": 5}}"#).as_deref(),
            Some("evidence")
        );
        assert_eq!(
            param_of(r#"{"evidence": {"photo": "x"}}"#).as_deref(),
            Some("evidence")
        );
        assert_eq!(
            param_of(r#"{"evidence": "x"}"#).as_deref(),
            Some("evidence")
        );
        assert_eq!(param_of(r#"{"submit": "yes"}"#).as_deref(), Some("submit"));
        assert_eq!(param_of(r#"{"amount": 1}"#).as_deref(), Some("amount"));
        assert!(parse_close(b"").is_ok() && parse_close(b"{}").is_ok());
        assert!(parse_close(br#"{"x": 1}"#).is_err());
    }

    #[test]
    fn the_same_request_for_the_same_dispute_has_the_same_fingerprint() {
        let a = DisputeEvidence::parse(br#"{"evidence": {"text": "x"}, "submit": true}"#).unwrap();
        let b = DisputeEvidence::parse(br#"{"submit": true, "evidence": {"text": "x"}}"#).unwrap();
        assert_eq!(a.fingerprint("dp_1"), b.fingerprint("dp_1"));
        assert_ne!(a.fingerprint("dp_1"), a.fingerprint("dp_2"));
        assert_ne!(close_fingerprint("dp_1"), a.fingerprint("dp_1"));
    }
}
