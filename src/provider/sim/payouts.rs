//! The simulator's payouts: once per idempotency key, decided by the destination
//! ([`SimulatedPayout`]); a pending one is finished once, and announced by webhook.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::journal::Journal;
use super::retention::{Clock, KEY_WINDOW, PruneTimer, RECORDS_KEPT, hash_map_bytes, wall_clock};
use super::settlements::Settlements;
use super::webhooks::OutboundEvent;
use crate::domain::Timestamp;
use crate::provider::{MovementKind, PayoutRequest, PayoutState, ProviderPayout};

/// How the simulator treats a payout, by its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulatedPayout {
    /// Where it ends.
    pub outcome: PayoutState,
    pub failure_code: Option<&'static str>,
    /// Answered `pending` first, and finished by a webhook.
    pub delayed: bool,
}

impl SimulatedPayout {
    /// `ba_test_instant` is paid at once; `ba_test_async` pending, then paid;
    /// `ba_test_closed` pending, then failed (`account_closed`); `ba_test_declined` failed
    /// at once (`account_frozen`); anything else failed at once (`invalid_destination`).
    pub fn of(destination: &str) -> Self {
        let (outcome, failure_code, delayed) = match destination {
            "ba_test_instant" => (PayoutState::Paid, None, false),
            "ba_test_async" => (PayoutState::Paid, None, true),
            "ba_test_closed" => (PayoutState::Failed, Some("account_closed"), true),
            "ba_test_declined" => (PayoutState::Failed, Some("account_frozen"), false),
            _ => (PayoutState::Failed, Some("invalid_destination"), false),
        };
        Self {
            outcome,
            failure_code,
            delayed,
        }
    }

    /// The first answer's status.
    pub fn answered(&self) -> PayoutState {
        if self.delayed {
            PayoutState::Pending
        } else {
            self.outcome
        }
    }
}

#[derive(Default)]
struct Book {
    payouts: Journal<ProviderPayout>,
    /// Every payout call, including those answered from the idempotency record.
    calls: u64,
    /// Pending payouts (by provider id): their position and how they will end.
    pending: HashMap<String, (u64, SimulatedPayout)>,
    prune: PruneTimer,
}

impl Book {
    /// Lets go of what is older than the windows (retention.rs), at most once a second.
    fn prune(&mut self, now: Timestamp) {
        if !self.prune.due(now) {
            return;
        }
        self.payouts.forget_keys_before(now - KEY_WINDOW);
        let first = self.payouts.first();
        if self.payouts.drop_before(now - RECORDS_KEPT, u64::MAX) != first {
            // Payouts still pending when let go (no webhooks to finish them): a few.
            let first = self.payouts.first();
            self.pending.retain(|_, (position, _)| *position >= first);
        }
    }
}

/// The simulated provider's payouts.
pub struct SimPayouts {
    book: Mutex<Book>,
    /// Where paid payouts are reported.
    report: Arc<Settlements>,
    clock: Clock,
}

impl Default for SimPayouts {
    fn default() -> Self {
        Self::reporting_to(Arc::default(), wall_clock())
    }
}

impl SimPayouts {
    /// Payouts whose money movements go to `report`, at the times `clock` reads.
    pub fn reporting_to(report: Arc<Settlements>, clock: Clock) -> Self {
        Self {
            book: Mutex::default(),
            report,
            clock,
        }
    }

    /// Lets go of what is older than the windows (retention.rs).
    pub fn prune(&self, now: Timestamp) {
        self.book().prune(now);
    }

    /// The bytes its book holds (payouts and the pending ones' ids).
    pub fn memory_bytes(&self) -> usize {
        let book = self.book();
        let pending = hash_map_bytes(&book.pending)
            + book.pending.keys().map(String::capacity).sum::<usize>();
        book.payouts.memory_bytes() + pending
    }

    fn paid(&self, payout: &ProviderPayout) {
        if payout.status == PayoutState::Paid {
            self.report.record(
                MovementKind::Payout,
                &payout.reference,
                payout.amount,
                &payout.currency,
            );
        }
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        // A panic while holding the lock cannot leave a half-written entry: every change
        // is one push or one assignment.
        self.book
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Pays out once per idempotency key; the same key again returns the answer as it is
    /// now (a pending payout that has been finished answers finished).
    pub fn payout(&self, idempotency_key: &str, request: &PayoutRequest) -> ProviderPayout {
        let now = (self.clock)();
        let mut book = self.book();
        book.calls += 1;
        book.prune(now);
        if let Some(first) = book
            .payouts
            .position(idempotency_key)
            .and_then(|position| book.payouts.at(position))
        {
            return first.clone();
        }
        let simulated = SimulatedPayout::of(&request.destination);
        let payout = ProviderPayout {
            id: format!("tr_{}", uuid::Uuid::new_v4().simple()),
            status: simulated.answered(),
            amount: request.amount,
            currency: request.currency.clone(),
            reference: request.reference.clone(),
            failure_code: (!simulated.delayed)
                .then_some(simulated.failure_code)
                .flatten()
                .map(str::to_owned),
        };
        let position = book.payouts.record(idempotency_key, payout.clone(), now);
        if simulated.delayed {
            book.pending
                .insert(payout.id.clone(), (position, simulated));
        }
        self.paid(&payout);
        payout
    }

    /// Finishes a pending payout, once: the payout as it ends, to announce by webhook.
    pub fn complete_pending(&self, payout_id: &str) -> Option<ProviderPayout> {
        let mut book = self.book();
        let (position, simulated) = book.pending.remove(payout_id)?;
        let payout = book.payouts.at_mut(position)?;
        payout.status = simulated.outcome;
        payout.failure_code = simulated.failure_code.map(str::to_owned);
        let payout = payout.clone();
        self.paid(&payout);
        Some(payout)
    }

    /// Every payout answered and still kept, as it is now (one per idempotency key).
    pub fn all(&self) -> Vec<ProviderPayout> {
        self.book().payouts.values().cloned().collect()
    }

    /// How many payout calls arrived, replays included.
    pub fn calls(&self) -> u64 {
        self.book().calls
    }
}

/// `payout.paid` / `payout.failed` for a finished payout; `None` while it is pending.
pub fn payout_event(payout: &ProviderPayout) -> Option<OutboundEvent> {
    let event_type = match payout.status {
        PayoutState::Paid => "payout.paid",
        PayoutState::Failed => "payout.failed",
        PayoutState::Pending => return None,
    };
    super::webhooks::event(
        event_type,
        serde_json::json!({
            "payout_id": payout.id,
            "reference": payout.reference,
            "amount": payout.amount,
            "currency": payout.currency,
            "failure_code": payout.failure_code,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(destination: &str) -> PayoutRequest {
        PayoutRequest {
            amount: 700,
            currency: "usd".to_owned(),
            destination: destination.to_owned(),
            reference: "po_1".to_owned(),
        }
    }

    #[test]
    fn test_destinations_decide_the_outcome() {
        let of = SimulatedPayout::of;
        assert_eq!(of("ba_test_instant").answered(), PayoutState::Paid);
        assert_eq!(of("ba_test_async").answered(), PayoutState::Pending);
        assert_eq!(of("ba_test_async").outcome, PayoutState::Paid);
        assert_eq!(of("ba_test_closed").outcome, PayoutState::Failed);
        assert_eq!(of("ba_test_closed").failure_code, Some("account_closed"));
        assert_eq!(of("ba_test_declined").answered(), PayoutState::Failed);
        assert_eq!(of("ba_test_declined").failure_code, Some("account_frozen"));
        assert_eq!(of("ba_other").failure_code, Some("invalid_destination"));
    }

    #[test]
    fn the_same_key_pays_out_once_and_a_pending_payout_finishes_once() {
        let sim = SimPayouts::default();
        let first = sim.payout("po_1", &request("ba_test_instant"));
        assert_eq!(first.status, PayoutState::Paid);
        assert_eq!(sim.payout("po_1", &request("ba_test_instant")), first);
        assert_eq!((sim.all().len(), sim.calls()), (1, 2));

        let pending = sim.payout("po_2", &request("ba_test_closed"));
        assert_eq!(pending.status, PayoutState::Pending);
        assert_eq!(pending.failure_code, None);
        let done = sim.complete_pending(&pending.id).unwrap();
        assert_eq!(done.status, PayoutState::Failed);
        assert_eq!(done.failure_code.as_deref(), Some("account_closed"));
        assert!(sim.complete_pending(&pending.id).is_none());
        assert_eq!(sim.payout("po_2", &request("ba_test_closed")), done);
        let event = payout_event(&done).unwrap();
        assert_eq!(event.event_type, "payout.failed");
        assert!(event.body.contains(r#""reference":"po_1""#) || event.body.contains("po_1"));
    }
}
