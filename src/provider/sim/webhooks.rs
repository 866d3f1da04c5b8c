//! The simulated provider's side of webhooks: building a signed event and POSTing it until
//! the receiver answers 2xx (exponential backoff, bounded). Used by the in-process simulator
//! and by the `provider-sim` HTTP server alike.

use std::time::Duration;

use serde::Serialize;

use crate::domain::format_timestamp;
use crate::provider::protocol::{Charge, ProviderStatus};
use crate::signing::{WebhookSecret, sign};

/// One event as sent: its id (`webhook-id`) and its exact body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundEvent {
    pub id: String,
    pub event_type: &'static str,
    pub body: String,
}

#[derive(Serialize)]
struct EventBody<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    timestamp: String,
    data: T,
}

#[derive(Serialize)]
struct ChargeEventData<'a> {
    charge_id: &'a str,
    reference: &'a str,
    amount: i64,
    currency: &'a str,
    failure_code: Option<&'a str>,
    failure_message: Option<&'a str>,
}

/// `charge.succeeded` / `charge.failed` / `charge.requires_capture` for a finished charge;
/// `None` while it is pending.
pub fn charge_event(charge: &Charge) -> Option<OutboundEvent> {
    let event_type = match charge.status {
        ProviderStatus::Succeeded => "charge.succeeded",
        ProviderStatus::Failed => "charge.failed",
        ProviderStatus::RequiresCapture => "charge.requires_capture",
        ProviderStatus::Pending | ProviderStatus::Canceled => return None,
    };
    event(
        event_type,
        ChargeEventData {
            charge_id: &charge.id,
            reference: &charge.reference,
            amount: charge.amount,
            currency: &charge.currency,
            failure_code: charge.failure_code.as_deref(),
            failure_message: charge.failure_message.as_deref(),
        },
    )
}

/// A signed-to-be event of `event_type` carrying `data`, with a new id.
pub fn event<T: Serialize>(event_type: &'static str, data: T) -> Option<OutboundEvent> {
    let body = EventBody {
        kind: event_type,
        timestamp: format_timestamp(crate::domain::now()),
        data,
    };
    // Strings, integers and JSON values always serialise.
    let body = serde_json::to_string(&body).ok()?;
    Some(OutboundEvent {
        id: crate::domain::EventId::generate().into_string(),
        event_type,
        body,
    })
}

/// How often and how patiently a delivery is retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub first_backoff: Duration,
    pub max_backoff: Duration,
    /// Timeout of one POST.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    /// About 13 minutes of retries: 12 attempts, 0.5 s, 1 s, 2 s, … apart, at most 5 min.
    fn default() -> Self {
        Self {
            max_attempts: 12,
            first_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("webhook {event_id} not delivered after {attempts} attempts: {last_error}")]
pub struct DeliveryFailed {
    pub event_id: String,
    pub attempts: u32,
    pub last_error: String,
}

/// Where webhooks go and the secret that signs them. `Debug` hides the secret.
#[derive(Debug, Clone)]
pub struct WebhookDelivery {
    url: String,
    secret: WebhookSecret,
    policy: RetryPolicy,
}

impl WebhookDelivery {
    pub fn new(url: impl Into<String>, secret: WebhookSecret, policy: RetryPolicy) -> Self {
        Self {
            url: url.into(),
            secret,
            policy,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// POSTs the event until a 2xx, re-signing each attempt with the current time (a
    /// retry minutes later must still fall inside the receiver's 300 s window). The same
    /// `webhook-id` every time, so the receiver applies it once. Returns the attempts used.
    pub async fn deliver(&self, event: &OutboundEvent) -> Result<u32, DeliveryFailed> {
        // awc's client is not `Send`: one per delivery, on the task that sends it. A 3xx is
        // not a 2xx to the POST: redelivered, never followed.
        let client = awc::Client::builder()
            .disable_redirects()
            .timeout(self.policy.timeout)
            .finish();
        let mut backoff = self.policy.first_backoff;
        let mut last_error = String::from("no attempt made");
        for attempt in 1..=self.policy.max_attempts.max(1) {
            let timestamp = chrono::Utc::now().timestamp();
            let signature = sign(&self.secret, &event.id, timestamp, event.body.as_bytes());
            let sent = client
                .post(&self.url)
                .insert_header(("content-type", "application/json"))
                .insert_header(("webhook-id", event.id.as_str()))
                .insert_header(("webhook-timestamp", timestamp.to_string()))
                .insert_header(("webhook-signature", signature))
                .send_body(event.body.clone())
                .await;
            match sent {
                Ok(response) if response.status().is_success() => {
                    tracing::info!(event_id = %event.id, event_type = event.event_type, attempt, "webhook delivered");
                    return Ok(attempt);
                }
                Ok(response) => last_error = format!("answered {}", response.status()),
                Err(e) => last_error = e.to_string(),
            }
            tracing::warn!(event_id = %event.id, event_type = event.event_type, attempt, error = %last_error, "webhook delivery failed");
            if attempt < self.policy.max_attempts {
                actix_web::rt::time::sleep(backoff).await;
                backoff = (backoff * 2).min(self.policy.max_backoff);
            }
        }
        Err(DeliveryFailed {
            event_id: event.id.clone(),
            attempts: self.policy.max_attempts.max(1),
            last_error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(status: ProviderStatus) -> Charge {
        Charge {
            id: "ch_1".into(),
            status,
            amount: 2000,
            currency: "usd".into(),
            reference: "pay_1".into(),
            failure_code: None,
            failure_message: None,
        }
    }

    #[test]
    fn finished_charges_become_events_pending_ones_do_not() {
        let event = charge_event(&charge(ProviderStatus::Succeeded)).unwrap();
        assert_eq!(event.event_type, "charge.succeeded");
        assert!(event.id.starts_with("evt_"));
        let body: serde_json::Value = serde_json::from_str(&event.body).unwrap();
        assert_eq!(body["type"], "charge.succeeded");
        assert_eq!(body["data"]["reference"], "pay_1");
        assert_eq!(body["data"]["charge_id"], "ch_1");
        assert_eq!(body["data"]["amount"], 2000);
        assert!(body["timestamp"].as_str().unwrap().ends_with('Z'));
        assert_eq!(
            charge_event(&charge(ProviderStatus::Failed))
                .unwrap()
                .event_type,
            "charge.failed"
        );
        assert!(charge_event(&charge(ProviderStatus::Pending)).is_none());
    }
}
