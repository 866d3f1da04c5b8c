//! One delivery attempt, the same for the worker and for `POST …/test`: check the
//! destination where the connection goes, sign (Standard Webhooks v1, one entry per
//! secret), POST without following redirects, and say how it went.

use std::time::{Duration, Instant, SystemTime};

use actix_web::http::header;

use crate::domain::EndpointUrl;
use crate::signing::{WebhookSecret, signature_header};
use crate::tls::ClientTls;

pub const USER_AGENT: &str = concat!("payments-api/", env!("CARGO_PKG_VERSION"));
/// The longest `Retry-After` honoured; a receiver asking for more is retried after this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);
/// Error texts kept per attempt are cut to this many characters.
const MAX_ERROR_CHARS: usize = 500;

/// What to send: the event's exact body under its id, to `url`, signed with `secrets`.
pub struct Outgoing<'a> {
    pub url: &'a str,
    pub webhook_id: &'a str,
    pub body: &'a str,
    pub secrets: &'a [WebhookSecret],
}

/// How one attempt went.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The receiver's status; `None` when no answer came (refused, timeout, bad destination).
    pub status_code: Option<u16>,
    pub error: Option<String>,
    /// The receiver's `Retry-After` on a 429 or 503, capped at [`MAX_RETRY_AFTER`].
    pub retry_after: Option<Duration>,
    pub duration: Duration,
}

impl Attempt {
    pub fn succeeded(&self) -> bool {
        self.status_code.is_some_and(|s| (200..300).contains(&s))
    }

    /// 410 Gone: the receiver asks never to be sent to again.
    pub fn gone(&self) -> bool {
        self.status_code == Some(410)
    }
}

/// The client attempts go through: no redirects followed (a 3xx is a failure), at most
/// `timeout` per request, `https` verified with `tls`.
pub fn client(timeout: Duration, max_connections: usize, tls: &ClientTls) -> awc::Client {
    awc::Client::builder()
        .disable_redirects()
        .no_default_headers()
        .timeout(timeout)
        .connector(
            awc::Connector::new()
                .rustls_0_23(tls.clone())
                .timeout(timeout)
                .limit(max_connections),
        )
        .finish()
}

/// One attempt, all of it (lookup, connect, request, response head) within `timeout`.
pub async fn send(
    client: &awc::Client,
    out: &Outgoing<'_>,
    timeout: Duration,
    allow_private: bool,
) -> Attempt {
    let started = Instant::now();
    let outcome = actix_web::rt::time::timeout(timeout, post(client, out, allow_private)).await;
    let duration = started.elapsed();
    let (status_code, retry_after, error) = match outcome {
        Err(_) => (
            None,
            None,
            Some(format!("timed out after {} ms", timeout.as_millis())),
        ),
        Ok(Err(error)) => (None, None, Some(error)),
        Ok(Ok((status, retry_after))) if (200..300).contains(&status) => {
            (Some(status), retry_after, None)
        }
        Ok(Ok((status, retry_after))) => (
            Some(status),
            retry_after,
            Some(format!("answered {status}")),
        ),
    };
    Attempt {
        status_code,
        error: error.map(|e| e.chars().take(MAX_ERROR_CHARS).collect()),
        retry_after,
        duration,
    }
}

async fn post(
    client: &awc::Client,
    out: &Outgoing<'_>,
    allow_private: bool,
) -> Result<(u16, Option<Duration>), String> {
    let url = EndpointUrl::parse(out.url).map_err(|e| e.to_string())?;
    // The connection goes to exactly the address that was checked.
    let address = url
        .resolve(allow_private)
        .await
        .map_err(|e| format!("destination refused: {e}"))?;
    let timestamp = crate::domain::now().and_utc().timestamp();
    let signature = signature_header(out.secrets, out.webhook_id, timestamp, out.body.as_bytes());
    let response = client
        .post(url.as_str())
        .address(address)
        .insert_header((header::CONTENT_TYPE, "application/json"))
        .insert_header((header::USER_AGENT, USER_AGENT))
        .insert_header(("webhook-id", out.webhook_id))
        .insert_header(("webhook-timestamp", timestamp.to_string()))
        .insert_header(("webhook-signature", signature))
        .send_body(out.body.to_owned())
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let retry_after = if matches!(status, 429 | 503) {
        response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, SystemTime::now()))
    } else {
        None
    };
    Ok((status, retry_after))
}

/// `Retry-After` as seconds or an HTTP date, capped at [`MAX_RETRY_AFTER`].
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => {
            let at = SystemTime::from(value.parse::<header::HttpDate>().ok()?);
            at.duration_since(now).unwrap_or(Duration::ZERO)
        }
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_seconds_or_a_date_and_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(
            retry_after("Tue, 14 Nov 2023 22:13:50 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("999999999", now), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after("soon", now), None);
    }
}
