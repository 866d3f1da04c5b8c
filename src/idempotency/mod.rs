//! What a request with an already-used key is told, and how duplicates wait for the first
//! request without querying the database in a loop.
//!
//! Duplicates in this process subscribe to the running request's outcome through
//! [`InFlight`] and wake the moment it settles. Duplicates whose first request runs in
//! another instance poll the row with a growing interval instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use actix_web::HttpResponse;
use actix_web::http::{StatusCode, header};
use tokio::sync::watch;

pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// A response as sent: status and exact body bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: Arc<str>,
    /// Set on replays of a stored final response.
    pub replayed: bool,
}

impl Answer {
    pub fn new(status: u16, body: impl Into<Arc<str>>) -> Self {
        Self {
            status,
            body: body.into(),
            replayed: false,
        }
    }

    pub fn replayed(mut self) -> Self {
        self.replayed = true;
        self
    }

    /// Final answers (201/200) are fixed; 202 ("still processing") is not.
    pub fn is_final(&self) -> bool {
        self.status != 202
    }

    pub fn into_response(self) -> HttpResponse {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = HttpResponse::build(status);
        response.insert_header((header::CONTENT_TYPE, "application/json"));
        if self.replayed {
            response.insert_header((REPLAYED_HEADER, "true"));
        }
        response.body(self.body.to_string())
    }
}

type Outcome = Option<Answer>;

/// The requests running in this process, by object id, each with a channel its duplicates
/// can wait on.
#[derive(Default, Clone)]
pub struct InFlight {
    running: Arc<Mutex<HashMap<String, watch::Receiver<Outcome>>>>,
}

impl InFlight {
    fn running(&self) -> MutexGuard<'_, HashMap<String, watch::Receiver<Outcome>>> {
        // Only inserts and removes happen under the lock; a poisoned map is still consistent.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Announces that this request now works on `id`. The guard must be settled with the
    /// outcome; dropped unsettled (an error), its waiters fall back to reading the row.
    pub fn register(&self, id: &str) -> InFlightGuard {
        let (sender, receiver) = watch::channel(None);
        self.running().insert(id.to_owned(), receiver);
        InFlightGuard {
            registry: self.clone(),
            id: id.to_owned(),
            sender,
        }
    }

    pub fn subscribe(&self, id: &str) -> Option<watch::Receiver<Outcome>> {
        self.running().get(id).cloned()
    }
}

pub struct InFlightGuard {
    registry: InFlight,
    id: String,
    sender: watch::Sender<Outcome>,
}

impl InFlightGuard {
    pub fn settle(self, answer: &Answer) {
        self.sender.send_replace(Some(answer.clone()));
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        let mut running = self.registry.running();
        // A later request may have registered the same id after a takeover: leave its entry.
        if running
            .get(&self.id)
            .is_some_and(|r| r.same_channel(&self.sender.subscribe()))
        {
            running.remove(&self.id);
        }
    }
}

/// Waits for the outcome of the request running `id` in this process, for at most `wait`.
/// `None`: nothing runs it here, it ended without an outcome, or time ran out.
pub async fn wait_for_outcome(
    registry: &InFlight,
    id: &str,
    wait: std::time::Duration,
) -> Option<Answer> {
    let mut receiver = registry.subscribe(id)?;
    let settled = actix_web::rt::time::timeout(wait, receiver.wait_for(Option::is_some)).await;
    match settled {
        Ok(Ok(outcome)) => outcome.clone(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[actix_web::test]
    async fn waiters_receive_the_outcome_once_settled() {
        let registry = InFlight::default();
        let guard = registry.register("pay_1");
        let waiter = {
            let registry = registry.clone();
            actix_web::rt::spawn(async move {
                wait_for_outcome(&registry, "pay_1", Duration::from_secs(5)).await
            })
        };
        actix_web::rt::task::yield_now().await;
        guard.settle(&Answer::new(201, "{}"));
        assert_eq!(waiter.await.unwrap(), Some(Answer::new(201, "{}")));
        assert!(
            registry.subscribe("pay_1").is_none(),
            "settled entries are removed"
        );
    }

    #[actix_web::test]
    async fn an_unsettled_guard_releases_its_waiters() {
        let registry = InFlight::default();
        let guard = registry.register("pay_2");
        let waiter = {
            let registry = registry.clone();
            actix_web::rt::spawn(async move {
                wait_for_outcome(&registry, "pay_2", Duration::from_secs(5)).await
            })
        };
        actix_web::rt::task::yield_now().await;
        drop(guard);
        assert_eq!(waiter.await.unwrap(), None);
    }
}
