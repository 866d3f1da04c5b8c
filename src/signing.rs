//! Standard Webhooks v1 signatures: `v1,<base64 HMAC-SHA256>` over
//! `{webhook-id}.{webhook-timestamp}.{raw body}`, keyed with the base64-decoded part of a
//! `whsec_…` secret. One implementation for everything that signs or verifies: inbound
//! provider webhooks, deliveries to merchants, the simulator and the tests, so they can never
//! disagree on the scheme. It depends on nothing else in the crate.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub const SECRET_PREFIX: &str = "whsec_";
/// Timestamps further than this from now, either way, are refused (replay window).
pub const TOLERANCE_SECS: i64 = 300;
/// Shorter keys are refused at start: 128 bits at least.
const MIN_KEY_BYTES: usize = 16;
/// The longest `webhook-id` accepted; the id is stored as the event's primary key.
pub const MAX_ID_LEN: usize = 255;

/// A signing key, parsed from `whsec_<base64>`. `Debug` shows no key material.
#[derive(Clone)]
pub struct WebhookSecret {
    key: Vec<u8>,
}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl WebhookSecret {
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        let encoded = text
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .ok_or("a webhook secret must start with whsec_")?;
        let key = STANDARD
            .decode(encoded)
            .map_err(|_| "a webhook secret must be whsec_ followed by standard base64")?;
        if key.len() < MIN_KEY_BYTES {
            return Err("a webhook secret must decode to at least 16 bytes");
        }
        Ok(Self { key })
    }

    /// A new random secret (24 bytes from the OS generator, through UUIDv4s).
    pub fn generate() -> String {
        let mut bytes = Vec::with_capacity(32);
        bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
        format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
    }

    /// The MAC state after the signed content; cloned to check each signature entry.
    fn mac(&self, id: &str, timestamp: &str, body: &[u8]) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail; `parse` guarantees a key.
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }
}

/// The `webhook-signature` entry for this content: `v1,<base64>`.
pub fn sign(secret: &WebhookSecret, id: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = secret
        .mac(id, &timestamp.to_string(), body)
        .finalize()
        .into_bytes();
    format!("v1,{}", STANDARD.encode(tag))
}

/// The `webhook-signature` header for this content signed with each of `secrets` (two
/// while an endpoint's secret is being rotated): one `v1` entry per secret, space-separated.
pub fn signature_header(
    secrets: &[WebhookSecret],
    id: &str,
    timestamp: i64,
    body: &[u8],
) -> String {
    secrets
        .iter()
        .map(|secret| sign(secret, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The three headers as received (`None` when absent).
#[derive(Debug, Clone, Copy)]
pub struct SignedHeaders<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
}

/// Why a delivery is not trusted. All of them answer 401 `invalid_signature`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.reason())]
pub enum SignatureError {
    NoSecret,
    BadId,
    BadTimestamp,
    StaleTimestamp,
    MissingSignature,
    NoMatch,
}

impl SignatureError {
    /// The reason as a fixed string, for the 401's `detail`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NoSecret => "no webhook secret is configured",
            Self::BadId => "the webhook-id header is missing or malformed",
            Self::BadTimestamp => "the webhook-timestamp header is missing or malformed",
            Self::StaleTimestamp => "the webhook-timestamp is more than 300 seconds away from now",
            Self::MissingSignature => "the webhook-signature header is missing",
            Self::NoMatch => "no webhook signature matches",
        }
    }
}

/// Verifies a delivery on its raw body bytes, before anything parses them. Valid when any
/// `v1` entry matches any secret; entries of other versions or that do not parse are
/// skipped. Returns the verified event id. `now` is Unix seconds.
pub fn verify<'a>(
    secrets: &[WebhookSecret],
    headers: SignedHeaders<'a>,
    body: &[u8],
    now: i64,
) -> Result<&'a str, SignatureError> {
    if secrets.is_empty() {
        return Err(SignatureError::NoSecret);
    }
    let id = headers
        .id
        .filter(|id| crate::domain::is_token(id.as_bytes(), MAX_ID_LEN))
        .ok_or(SignatureError::BadId)?;
    let timestamp_text = headers
        .timestamp
        .filter(|t| !t.is_empty() && t.len() <= 12 && t.bytes().all(|b| b.is_ascii_digit()))
        .ok_or(SignatureError::BadTimestamp)?;
    let timestamp: i64 = timestamp_text
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    if (now - timestamp).abs() > TOLERANCE_SECS {
        return Err(SignatureError::StaleTimestamp);
    }
    let signature = headers
        .signature
        .filter(|s| !s.trim().is_empty())
        .ok_or(SignatureError::MissingSignature)?;
    let candidates: Vec<Vec<u8>> = signature
        .split_ascii_whitespace()
        .filter_map(|entry| entry.split_once(','))
        .filter(|(version, _)| *version == "v1")
        .filter_map(|(_, encoded)| STANDARD.decode(encoded).ok())
        .collect();
    for secret in secrets {
        let mac = secret.mac(id, timestamp_text, body);
        // Constant-time comparison: hmac's verify_slice.
        if candidates
            .iter()
            .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
        {
            return Ok(id);
        }
    }
    Err(SignatureError::NoMatch)
}

/// Parses every configured secret, skipping none: `Settings` validated them at start.
pub fn parse_secrets(texts: &[String]) -> Vec<WebhookSecret> {
    texts
        .iter()
        .filter_map(|t| WebhookSecret::parse(t).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1614265330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const EXPECTED: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn secret() -> WebhookSecret {
        WebhookSecret::parse(SECRET).unwrap()
    }

    fn headers<'a>(sig: &'a str, ts: &'a str) -> SignedHeaders<'a> {
        SignedHeaders {
            id: Some(ID),
            timestamp: Some(ts),
            signature: Some(sig),
        }
    }

    #[test]
    fn the_standard_webhooks_known_answer() {
        assert_eq!(sign(&secret(), ID, TS, BODY), EXPECTED);
        let ts = TS.to_string();
        assert_eq!(
            verify(&[secret()], headers(EXPECTED, &ts), BODY, TS),
            Ok(ID)
        );
    }

    #[test]
    fn tampering_with_anything_signed_fails() {
        let ts = TS.to_string();
        let tampered = br#"{"test": 2432232315}"#;
        assert_eq!(
            verify(&[secret()], headers(EXPECTED, &ts), tampered, TS),
            Err(SignatureError::NoMatch)
        );
        let other_id = SignedHeaders {
            id: Some("msg_other"),
            ..headers(EXPECTED, &ts)
        };
        assert_eq!(
            verify(&[secret()], other_id, BODY, TS),
            Err(SignatureError::NoMatch)
        );
        let wrong = WebhookSecret::parse(&WebhookSecret::generate()).unwrap();
        assert_eq!(
            verify(&[wrong], headers(EXPECTED, &ts), BODY, TS),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn the_timestamp_window_is_300_seconds_either_way() {
        for (offset, ok) in [(-300, true), (300, true), (-301, false), (301, false)] {
            let ts = TS + offset;
            let sig = sign(&secret(), ID, ts, BODY);
            let text = ts.to_string();
            let result = verify(&[secret()], headers(&sig, &text), BODY, TS);
            assert_eq!(result.is_ok(), ok, "offset {offset}: {result:?}");
            if !ok {
                assert_eq!(result, Err(SignatureError::StaleTimestamp));
            }
        }
    }

    #[test]
    fn other_versions_and_garbage_entries_are_skipped() {
        let ts = TS.to_string();
        let header = format!("v2,abc v1,!!notbase64!! nocomma v1,AAAA {EXPECTED}");
        assert_eq!(verify(&[secret()], headers(&header, &ts), BODY, TS), Ok(ID));
        let only_garbage = "v1a,xyz v1,%%% v0,AAAA";
        assert_eq!(
            verify(&[secret()], headers(only_garbage, &ts), BODY, TS),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn one_entry_per_secret_and_each_verifies_alone() {
        let ts = TS.to_string();
        let new = WebhookSecret::parse(&WebhookSecret::generate()).unwrap();
        let header = signature_header(&[new.clone(), secret()], ID, TS, BODY);
        assert_eq!(header, format!("{} {EXPECTED}", sign(&new, ID, TS, BODY)));
        for only in [new, secret()] {
            assert_eq!(verify(&[only], headers(&header, &ts), BODY, TS), Ok(ID));
        }
    }

    #[test]
    fn any_configured_secret_may_match() {
        let ts = TS.to_string();
        let old = WebhookSecret::parse(&WebhookSecret::generate()).unwrap();
        assert_eq!(
            verify(&[old, secret()], headers(EXPECTED, &ts), BODY, TS),
            Ok(ID)
        );
    }

    #[test]
    fn missing_or_malformed_headers_and_no_secret_are_refused() {
        let ts = TS.to_string();
        let ok = headers(EXPECTED, &ts);
        assert_eq!(verify(&[], ok, BODY, TS), Err(SignatureError::NoSecret));
        for (h, err) in [
            (SignedHeaders { id: None, ..ok }, SignatureError::BadId),
            (SignedHeaders { id: Some(""), ..ok }, SignatureError::BadId),
            (
                SignedHeaders {
                    id: Some("a b"),
                    ..ok
                },
                SignatureError::BadId,
            ),
            (
                SignedHeaders {
                    timestamp: None,
                    ..ok
                },
                SignatureError::BadTimestamp,
            ),
            (
                SignedHeaders {
                    timestamp: Some("-5"),
                    ..ok
                },
                SignatureError::BadTimestamp,
            ),
            (
                SignedHeaders {
                    timestamp: Some("16142653.0"),
                    ..ok
                },
                SignatureError::BadTimestamp,
            ),
            (
                SignedHeaders {
                    timestamp: Some("99999999999999999999"),
                    ..ok
                },
                SignatureError::BadTimestamp,
            ),
            (
                SignedHeaders {
                    signature: None,
                    ..ok
                },
                SignatureError::MissingSignature,
            ),
            (
                SignedHeaders {
                    signature: Some("  "),
                    ..ok
                },
                SignatureError::MissingSignature,
            ),
        ] {
            assert_eq!(verify(&[secret()], h, BODY, TS), Err(err), "{h:?}");
        }
    }

    #[test]
    fn secrets_must_be_whsec_base64_of_16_bytes_or_more() {
        assert!(WebhookSecret::parse(SECRET).is_ok());
        assert!(WebhookSecret::parse(&WebhookSecret::generate()).is_ok());
        for bad in [
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "whsec_",
            "whsec_not base64!",
            "whsec_AAAA",
        ] {
            assert!(WebhookSecret::parse(bad).is_err(), "{bad}");
        }
    }
}
