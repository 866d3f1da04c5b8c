//! Verifying the webhooks the service sends to merchants, per Standard
//! Webhooks v1: `webhook-signature` holds space-separated `v1,<base64 HMAC-SHA256>`
//! entries over `{webhook-id}.{webhook-timestamp}.{raw body}`, keyed with the
//! base64-decoded part of a `whsec_…` secret.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::events::Event;

type HmacSha256 = Hmac<Sha256>;

/// Deliveries whose timestamp is further than this from now, either way, are refused.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

/// Why a delivery is not trusted (or, once trusted, does not parse).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    #[error("a webhook secret must be whsec_ followed by standard base64")]
    InvalidSecret,
    #[error("no webhook secret was given")]
    NoSecret,
    #[error("the {0} header is missing or empty")]
    MissingHeader(&'static str),
    #[error("the webhook-timestamp header is not Unix seconds")]
    InvalidTimestamp,
    #[error("the webhook-timestamp is too far from now (replayed or clock skew)")]
    TimestampOutOfTolerance,
    #[error("no v1 signature matches any secret")]
    NoMatchingSignature,
    #[error("the verified body is not an event: {0}")]
    InvalidPayload(#[source] serde_json::Error),
}

/// The three headers of a delivery, as received.
#[derive(Debug, Clone, Copy)]
pub struct WebhookHeaders<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
}

impl<'a> WebhookHeaders<'a> {
    /// Reads `webhook-id`, `webhook-timestamp` and `webhook-signature` from any header map,
    /// through a lookup by lower-case name.
    ///
    /// ```
    /// use payments_client::WebhookHeaders;
    /// let pairs = [("webhook-id", "evt_1"), ("webhook-timestamp", "1700000000"), ("webhook-signature", "v1,abc=")];
    /// let headers = WebhookHeaders::from_fn(|name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v));
    /// assert_eq!(headers.id, Some("evt_1"));
    /// ```
    pub fn from_fn(mut lookup: impl FnMut(&str) -> Option<&'a str>) -> Self {
        Self {
            id: lookup("webhook-id"),
            timestamp: lookup("webhook-timestamp"),
            signature: lookup("webhook-signature"),
        }
    }
}

/// Checks deliveries against one or more endpoint secrets (several while a rotation runs).
///
/// ```no_run
/// use payments_client::{WebhookHeaders, WebhookVerifier};
///
/// # fn handle(header: impl Fn(&str) -> Option<&'static str>, raw_body: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
/// let verifier = WebhookVerifier::new(["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])?;
/// // In your HTTP handler, on the raw body bytes, before parsing anything:
/// let event = verifier.verify(WebhookHeaders::from_fn(|name| header(name)), raw_body)?;
/// // Dedupe on event.id (= webhook-id): deliveries are at least once.
/// if let Some(payment) = event.payment() {
///     println!("{} {} is now {:?}", event.event_type, payment.id, payment.status);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct WebhookVerifier {
    keys: Vec<Vec<u8>>,
    tolerance: Duration,
}

impl std::fmt::Debug for WebhookVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookVerifier")
            .field("secrets", &self.keys.len())
            .field("tolerance", &self.tolerance)
            .finish()
    }
}

impl WebhookVerifier {
    /// `secrets`: `whsec_<base64>` (the prefix may be left out).
    pub fn new<I, S>(secrets: I) -> Result<Self, WebhookError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let keys = secrets
            .into_iter()
            .map(|secret| {
                let secret = secret.as_ref().trim();
                let encoded = secret.strip_prefix("whsec_").unwrap_or(secret);
                STANDARD
                    .decode(encoded)
                    .ok()
                    .filter(|key| !key.is_empty())
                    .ok_or(WebhookError::InvalidSecret)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err(WebhookError::NoSecret);
        }
        Ok(Self {
            keys,
            tolerance: DEFAULT_TOLERANCE,
        })
    }

    /// Another replay window than ±300 s.
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Verifies the delivery on its raw body and returns the event it carries.
    pub fn verify(&self, headers: WebhookHeaders<'_>, body: &[u8]) -> Result<Event, WebhookError> {
        self.verify_at(headers, body, SystemTime::now())
    }

    /// [`WebhookVerifier::verify`] as if it were `now`.
    pub fn verify_at(
        &self,
        headers: WebhookHeaders<'_>,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Event, WebhookError> {
        self.verify_signature_at(headers, body, now)?;
        serde_json::from_slice(body).map_err(WebhookError::InvalidPayload)
    }

    /// Only the signature and timestamp, for a body you parse yourself.
    pub fn verify_signature_at(
        &self,
        headers: WebhookHeaders<'_>,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), WebhookError> {
        fn present<'h>(
            value: Option<&'h str>,
            name: &'static str,
        ) -> Result<&'h str, WebhookError> {
            value
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .ok_or(WebhookError::MissingHeader(name))
        }
        let id = present(headers.id, "webhook-id")?;
        let timestamp_text = present(headers.timestamp, "webhook-timestamp")?;
        let signature = present(headers.signature, "webhook-signature")?;

        let timestamp: u64 = timestamp_text
            .parse()
            .map_err(|_| WebhookError::InvalidTimestamp)?;
        let now = now
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs();
        if now.abs_diff(timestamp) > self.tolerance.as_secs() {
            return Err(WebhookError::TimestampOutOfTolerance);
        }

        // Entries of other versions, or that do not decode, are skipped: they never make a
        // matching entry fail.
        let candidates: Vec<Vec<u8>> = signature
            .split_ascii_whitespace()
            .filter_map(|entry| entry.split_once(','))
            .filter(|(version, _)| *version == "v1")
            .filter_map(|(_, encoded)| STANDARD.decode(encoded).ok())
            .collect();
        for key in &self.keys {
            let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
                continue;
            };
            mac.update(id.as_bytes());
            mac.update(b".");
            mac.update(timestamp_text.as_bytes());
            mac.update(b".");
            mac.update(body);
            // `verify_slice` compares in constant time.
            if candidates
                .iter()
                .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
            {
                return Ok(());
            }
        }
        Err(WebhookError::NoMatchingSignature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Standard Webhooks reference vector.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: &str = "1614265330";
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn headers(signature: &str) -> WebhookHeaders<'_> {
        WebhookHeaders {
            id: Some(ID),
            timestamp: Some(TIMESTAMP),
            signature: Some(signature),
        }
    }

    fn check(verifier: &WebhookVerifier, signature: &str, now: u64) -> Result<(), WebhookError> {
        verifier.verify_signature_at(headers(signature), BODY, at(now))
    }

    #[test]
    fn the_reference_vector_verifies() {
        let verifier = WebhookVerifier::new([SECRET]).expect("secret");
        check(&verifier, SIGNATURE, 1_614_265_330).expect("valid");
        // Without the prefix too.
        let bare = WebhookVerifier::new([SECRET.trim_start_matches("whsec_")]).expect("secret");
        check(&bare, SIGNATURE, 1_614_265_330).expect("valid");
    }

    #[test]
    fn any_v1_entry_may_match_and_other_entries_are_ignored() {
        let verifier = WebhookVerifier::new([SECRET]).expect("secret");
        let now = 1_614_265_330;
        let entries = format!("v2,abc v1,not-base64!! v1,AAAA {SIGNATURE} junk");
        check(&verifier, &entries, now).expect("one entry matches");
        let wrong = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA= v2,x";
        assert!(matches!(
            check(&verifier, wrong, now),
            Err(WebhookError::NoMatchingSignature)
        ));
        // The right MAC under another version does not count.
        let v2 = SIGNATURE.replacen("v1,", "v2,", 1);
        assert!(check(&verifier, &v2, now).is_err());
    }

    #[test]
    fn any_of_several_secrets_may_match() {
        let other = "whsec_cGF5bWVudHMtYXBpLWRlbW8td2ViaG9vay1zZWNyZXQ=";
        let verifier = WebhookVerifier::new([other, SECRET]).expect("secrets");
        check(&verifier, SIGNATURE, 1_614_265_330).expect("the second secret matches");
        let only_other = WebhookVerifier::new([other]).expect("secret");
        assert!(check(&only_other, SIGNATURE, 1_614_265_330).is_err());
    }

    #[test]
    fn the_timestamp_must_be_within_300_seconds_either_way() {
        let verifier = WebhookVerifier::new([SECRET]).expect("secret");
        let signed = 1_614_265_330;
        check(&verifier, SIGNATURE, signed + 300).expect("300 s late");
        check(&verifier, SIGNATURE, signed - 300).expect("300 s early");
        for now in [signed + 301, signed - 301] {
            assert!(matches!(
                check(&verifier, SIGNATURE, now),
                Err(WebhookError::TimestampOutOfTolerance)
            ));
        }
    }

    #[test]
    fn a_changed_body_id_or_timestamp_fails() {
        let verifier = WebhookVerifier::new([SECRET]).expect("secret");
        let now = at(1_614_265_330);
        let mut h = headers(SIGNATURE);
        assert!(
            verifier
                .verify_signature_at(h, br#"{"test": 2432232315}"#, now)
                .is_err()
        );
        h.id = Some("msg_other");
        assert!(verifier.verify_signature_at(h, BODY, now).is_err());
        let mut h = headers(SIGNATURE);
        h.timestamp = Some("1614265331");
        assert!(verifier.verify_signature_at(h, BODY, now).is_err());
    }

    #[test]
    fn missing_or_malformed_headers_and_secrets_are_refused() {
        let verifier = WebhookVerifier::new([SECRET]).expect("secret");
        let now = at(1_614_265_330);
        let mut h = headers(SIGNATURE);
        h.signature = None;
        assert!(matches!(
            verifier.verify_signature_at(h, BODY, now),
            Err(WebhookError::MissingHeader("webhook-signature"))
        ));
        let mut h = headers(SIGNATURE);
        h.timestamp = Some("16142653.30");
        assert!(matches!(
            verifier.verify_signature_at(h, BODY, now),
            Err(WebhookError::InvalidTimestamp)
        ));
        assert!(matches!(
            WebhookVerifier::new(["whsec_***"]),
            Err(WebhookError::InvalidSecret)
        ));
        assert!(matches!(
            WebhookVerifier::new(Vec::<String>::new()),
            Err(WebhookError::NoSecret)
        ));
    }

    #[test]
    fn a_verified_body_that_is_not_an_event_is_an_error() {
        let verifier = WebhookVerifier::new([SECRET]).expect("secret");
        assert!(matches!(
            verifier.verify_at(headers(SIGNATURE), BODY, at(1_614_265_330)),
            Err(WebhookError::InvalidPayload(_))
        ));
    }
}
