//! Webhook endpoints and their deliveries.

use chrono::{DateTime, Utc};
use futures_util::stream::BoxStream;
use reqwest::Method;
use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::error::Error;
use crate::events::EventType;
use crate::list::{ListParams, Page};
use crate::mutation::Mutation;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EndpointStatus {
    Enabled,
    Disabled,
    #[serde(other)]
    Unknown,
}

/// A `whsec_…` signing secret. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SigningSecret(String);

impl SigningSecret {
    /// The secret, for [`crate::WebhookVerifier::new`] or your secret store.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningSecret(..)")
    }
}

/// The webhook endpoint object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct WebhookEndpoint {
    /// `we_…`
    pub id: String,
    pub url: String,
    pub enabled_events: Vec<EventType>,
    pub description: Option<String>,
    pub status: EndpointStatus,
    /// Only in the answers of [`Client::create_webhook_endpoint`] and
    /// [`Client::rotate_webhook_secret`]: keep it, it is not shown again.
    #[serde(default)]
    pub secret: Option<SigningSecret>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `POST /v1/webhook_endpoints`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateWebhookEndpoint {
    /// `http(s)://…`, ≤ 2048 characters, a public address (unless the server allows
    /// private ones).
    pub url: String,
    /// Exact event types, or [`EventType::All`].
    pub enabled_events: Vec<EventType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `POST /v1/webhook_endpoints/{id}`: only the fields given change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UpdateWebhookEndpoint {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled_events: Option<Vec<EventType>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `enabled` again resumes delivery of what is pending.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<EndpointStatus>,
}

/// `POST /v1/webhook_endpoints/{id}/rotate_secret`: the old secret keeps signing (beside
/// the new) for `expire_current_in_s` seconds, 0…604800 (server default 86400).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RotateWebhookSecret {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expire_current_in_s: Option<u32>,
}

/// `DELETE /v1/webhook_endpoints/{id}`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct Deleted {
    pub id: String,
    pub deleted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DeliveryStatus {
    Pending,
    Succeeded,
    Failed,
    #[serde(other)]
    Unknown,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Unknown => "unknown",
        }
    }
}

/// One event on its way to one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct WebhookDelivery {
    /// `wd_…`
    pub id: String,
    pub endpoint_id: String,
    pub event_id: String,
    pub event_type: EventType,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_attempt: Option<DeliveryAttempt>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct DeliveryAttempt {
    pub at: DateTime<Utc>,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: Option<u64>,
}

/// Filters and paging of an endpoint's deliveries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListDeliveries {
    pub limit: Option<u32>,
    pub starting_after: Option<String>,
    pub status: Option<DeliveryStatus>,
}

/// Paging of `GET /v1/webhook_endpoints`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListWebhookEndpoints {
    pub limit: Option<u32>,
    pub starting_after: Option<String>,
}

/// Which events [`Client::replay_webhook_deliveries`] sends again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReplayScope {
    /// Those whose delivery failed (the server's default).
    Failed,
    All,
}

/// `POST /v1/webhook_endpoints/{id}/replay`: events created in `since … until`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayDeliveries {
    pub since: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ReplayScope>,
}

/// The replay's answer (202): how many deliveries were queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct Queued {
    pub queued: u64,
}

/// The test delivery's answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct TestDelivery {
    pub delivered: bool,
    pub status_code: Option<u16>,
    pub error: Option<String>,
    pub duration_ms: Option<u64>,
}

impl ListParams for ListWebhookEndpoints {
    fn limit(&self) -> Option<u32> {
        self.limit
    }

    fn starting_after(&self) -> Option<&str> {
        self.starting_after.as_deref()
    }
}

impl ListParams for ListDeliveries {
    fn limit(&self) -> Option<u32> {
        self.limit
    }

    fn starting_after(&self) -> Option<&str> {
        self.starting_after.as_deref()
    }

    fn filters(&self) -> Vec<(&'static str, String)> {
        let status = self.status.map(|s| ("status", s.as_str().to_owned()));
        status.into_iter().collect()
    }
}

impl Client {
    /// Registers an endpoint; the answer holds its `secret` (this once).
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{CreateWebhookEndpoint, EventType};
    ///
    /// let endpoint = client
    ///     .create_webhook_endpoint(&CreateWebhookEndpoint {
    ///         url: "https://shop.example/webhooks/payments".into(),
    ///         enabled_events: vec![EventType::PaymentSucceeded, EventType::RefundSucceeded],
    ///         description: Some("shop".into()),
    ///     })
    ///     .await?;
    /// let secret = endpoint.secret.expect("shown on creation");
    /// # Ok(()) }
    /// ```
    pub fn create_webhook_endpoint(
        &self,
        params: &CreateWebhookEndpoint,
    ) -> Mutation<WebhookEndpoint> {
        self.mutation(self.url(&["webhook_endpoints"]), params)
    }

    /// One endpoint (never its secret).
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let endpoint = client.get_webhook_endpoint("we_…").await?;
    /// # Ok(()) }
    /// ```
    pub async fn get_webhook_endpoint(&self, id: &str) -> Result<WebhookEndpoint, Error> {
        self.get(self.url(&["webhook_endpoints", id])).await
    }

    /// One page of endpoints.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let page = client.list_webhook_endpoints(&Default::default()).await?;
    /// # Ok(()) }
    /// ```
    pub async fn list_webhook_endpoints(
        &self,
        params: &ListWebhookEndpoints,
    ) -> Result<Page<WebhookEndpoint>, Error> {
        self.list(&["webhook_endpoints"], params).await
    }

    /// Every endpoint, page after page.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::TryStreamExt;
    ///
    /// let endpoints: Vec<_> = client.stream_webhook_endpoints(Default::default()).try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn stream_webhook_endpoints(
        &self,
        params: ListWebhookEndpoints,
    ) -> BoxStream<'static, Result<WebhookEndpoint, Error>> {
        self.list_all(&["webhook_endpoints"], &params)
    }

    /// Changes an endpoint's `url`, `enabled_events`, `description` or `status`.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{EndpointStatus, UpdateWebhookEndpoint};
    ///
    /// let update = UpdateWebhookEndpoint { status: Some(EndpointStatus::Disabled), ..Default::default() };
    /// let endpoint = client.update_webhook_endpoint("we_…", &update).await?;
    /// # Ok(()) }
    /// ```
    pub fn update_webhook_endpoint(
        &self,
        id: &str,
        params: &UpdateWebhookEndpoint,
    ) -> Mutation<WebhookEndpoint> {
        self.mutation(self.url(&["webhook_endpoints", id]), params)
    }

    /// Deletes an endpoint. `DELETE` carries no idempotency key: when an earlier attempt's
    /// answer was lost, the retry may answer 404 `not_found` because the endpoint is gone.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let deleted = client.delete_webhook_endpoint("we_…").await?;
    /// assert!(deleted.deleted);
    /// # Ok(()) }
    /// ```
    pub async fn delete_webhook_endpoint(&self, id: &str) -> Result<Deleted, Error> {
        self.fetch(Method::DELETE, self.url(&["webhook_endpoints", id]))
            .await
    }

    /// A new secret; the old one keeps signing beside it until it expires.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::RotateWebhookSecret;
    ///
    /// let endpoint = client
    ///     .rotate_webhook_secret("we_…", &RotateWebhookSecret { expire_current_in_s: Some(3600) })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn rotate_webhook_secret(
        &self,
        id: &str,
        params: &RotateWebhookSecret,
    ) -> Mutation<WebhookEndpoint> {
        self.mutation(
            self.url(&["webhook_endpoints", id, "rotate_secret"]),
            params,
        )
    }

    /// One page of an endpoint's deliveries, newest first.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::{DeliveryStatus, ListDeliveries};
    ///
    /// let failed = client
    ///     .list_webhook_deliveries("we_…", &ListDeliveries { status: Some(DeliveryStatus::Failed), ..Default::default() })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn list_webhook_deliveries(
        &self,
        endpoint_id: &str,
        params: &ListDeliveries,
    ) -> Result<Page<WebhookDelivery>, Error> {
        self.list(&["webhook_endpoints", endpoint_id, "deliveries"], params)
            .await
    }

    /// Every delivery of an endpoint that matches, page after page.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use payments_client::TryStreamExt;
    ///
    /// let all: Vec<_> = client.stream_webhook_deliveries("we_…", Default::default()).try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn stream_webhook_deliveries(
        &self,
        endpoint_id: &str,
        params: ListDeliveries,
    ) -> BoxStream<'static, Result<WebhookDelivery, Error>> {
        self.list_all(&["webhook_endpoints", endpoint_id, "deliveries"], &params)
    }

    /// Delivers the events created in a time range again (with their original
    /// `webhook-id`): 202 with how many were queued.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// use chrono::{Duration, Utc};
    /// use payments_client::ReplayDeliveries;
    ///
    /// let since = Utc::now() - Duration::hours(6);
    /// let queued = client
    ///     .replay_webhook_deliveries("we_…", &ReplayDeliveries { since, until: None, status: None })
    ///     .await?;
    /// println!("{} queued", queued.queued);
    /// # Ok(()) }
    /// ```
    pub fn replay_webhook_deliveries(
        &self,
        endpoint_id: &str,
        params: &ReplayDeliveries,
    ) -> Mutation<Queued> {
        self.mutation(
            self.url(&["webhook_endpoints", endpoint_id, "replay"]),
            params,
        )
    }

    /// Sends a signed `webhook_endpoint.test` event to the endpoint now.
    ///
    /// ```no_run
    /// # async fn run(client: payments_client::Client) -> Result<(), payments_client::Error> {
    /// let result = client.test_webhook_endpoint("we_…").await?;
    /// println!("delivered: {} ({:?})", result.delivered, result.status_code);
    /// # Ok(()) }
    /// ```
    pub fn test_webhook_endpoint(&self, id: &str) -> Mutation<TestDelivery> {
        self.mutation(
            self.url(&["webhook_endpoints", id, "test"]),
            &serde_json::json!({}),
        )
    }
}
