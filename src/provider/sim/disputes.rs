//! The simulator's disputes: a charge paid with `pm_card_dispute` is disputed for its whole
//! captured amount (reason `fraudulent`) once its money is captured; evidence whose text
//! contains `winning_evidence` wins, any other loses, and closing accepts the loss. Each
//! step is answered once per idempotency key; each change is announced by webhook.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use super::journal::Journal;
use super::retention::{
    Clock, HeapBytes, KEY_WINDOW, PruneTimer, RECORDS_KEPT, hash_map_bytes, wall_clock,
};
use super::settlements::Settlements;
use super::webhooks::OutboundEvent;
use crate::domain::{Timestamp, format_timestamp};
use crate::provider::{DisputeState, DisputeStepRequest, MovementKind, ProviderDispute};

/// The text that wins a dispute.
pub const WINNING_EVIDENCE: &str = "winning_evidence";

/// How long a merchant has to answer.
const RESPONSE_WINDOW_DAYS: i64 = 7;

/// A dispute as the simulator keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimDispute {
    pub id: String,
    pub charge_id: String,
    /// Our payment id.
    pub reference: String,
    pub amount: i64,
    pub currency: String,
    pub status: DisputeState,
    /// How it ends once under review.
    decided: Option<DisputeState>,
}

#[derive(Default)]
struct Book {
    /// By provider dispute id.
    disputes: HashMap<String, SimDispute>,
    /// The charges already disputed: each once.
    disputed_charges: HashMap<String, String>,
    /// Charges paid with the disputed card but only authorized: disputed at their capture.
    /// By charge id: (reference, currency).
    awaiting_capture: HashMap<String, (String, String)>,
    /// The first answer to each step's key, refusals included.
    steps: Journal<Result<ProviderDispute, String>>,
    /// Every step call, replays included.
    calls: u64,
    /// The disputes and the awaited authorizations (their charge ids) in the order they
    /// came, to let go of them once old.
    opened: VecDeque<(Timestamp, String)>,
    awaited: VecDeque<(Timestamp, String)>,
    prune: PruneTimer,
}

impl Book {
    /// Lets go of what is older than the windows (retention.rs), at most once a second: a
    /// dispute older than [`RECORDS_KEPT`] is unknown (its evidence was due in 7 days).
    fn prune(&mut self, now: Timestamp) {
        if !self.prune.due(now) {
            return;
        }
        self.steps.forget_keys_before(now - KEY_WINDOW);
        let cutoff = now - RECORDS_KEPT;
        self.steps.drop_before(cutoff, u64::MAX);
        while let Some((_, id)) = self.opened.front().filter(|(at, _)| *at < cutoff) {
            if let Some(dispute) = self.disputes.remove(id) {
                self.disputed_charges.remove(&dispute.charge_id);
            }
            self.opened.pop_front();
        }
        while let Some((_, charge_id)) = self.awaited.front().filter(|(at, _)| *at < cutoff) {
            self.awaiting_capture.remove(charge_id);
            self.awaited.pop_front();
        }
    }
}

impl HeapBytes for SimDispute {
    fn heap_bytes(&self) -> usize {
        self.id.heap_bytes()
            + self.charge_id.heap_bytes()
            + self.reference.heap_bytes()
            + self.currency.heap_bytes()
    }
}

/// The simulated provider's disputes.
pub struct SimDisputes {
    book: Mutex<Book>,
    /// Where the money disputes take and give back is reported.
    report: Arc<Settlements>,
    clock: Clock,
}

impl Default for SimDisputes {
    fn default() -> Self {
        Self::reporting_to(Arc::default(), wall_clock())
    }
}

impl SimDisputes {
    /// Disputes whose money movements go to `report`, at the times `clock` reads.
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

    /// The bytes its book holds: every container's capacity and the strings in them.
    pub fn memory_bytes(&self) -> usize {
        let book = self.book();
        let strings = |map: &HashMap<String, String>| -> usize {
            map.iter().map(|(k, v)| k.capacity() + v.capacity()).sum()
        };
        let queued = |queue: &VecDeque<(Timestamp, String)>| -> usize {
            queue.capacity() * size_of::<(Timestamp, String)>()
                + queue.iter().map(|(_, id)| id.capacity()).sum::<usize>()
        };
        hash_map_bytes(&book.disputes)
            + book
                .disputes
                .iter()
                .map(|(id, d)| id.capacity() + d.heap_bytes())
                .sum::<usize>()
            + hash_map_bytes(&book.disputed_charges)
            + strings(&book.disputed_charges)
            + hash_map_bytes(&book.awaiting_capture)
            + book
                .awaiting_capture
                .iter()
                .map(|(id, (r, c))| id.capacity() + r.capacity() + c.capacity())
                .sum::<usize>()
            + book.steps.memory_bytes()
            + queued(&book.opened)
            + queued(&book.awaited)
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        // Every change is one insert or assignment: a poisoned lock holds no half-change.
        self.book
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Remembers an authorization of the disputed card, to dispute it once captured.
    pub fn await_capture(&self, charge_id: &str, reference: &str, currency: &str) {
        let now = (self.clock)();
        let mut book = self.book();
        book.prune(now);
        book.awaiting_capture.insert(
            charge_id.to_owned(),
            (reference.to_owned(), currency.to_owned()),
        );
        book.awaited.push_back((now, charge_id.to_owned()));
    }

    /// The authorization `charge_id` of the disputed card was captured: (reference,
    /// currency) to open its dispute with, once.
    pub fn captured(&self, charge_id: &str) -> Option<(String, String)> {
        self.book().awaiting_capture.remove(charge_id)
    }

    /// Opens the dispute of a captured charge, once per charge: its
    /// `charge.dispute.created`.
    pub fn open(
        &self,
        charge_id: &str,
        reference: &str,
        amount: i64,
        currency: &str,
    ) -> Option<OutboundEvent> {
        let now = (self.clock)();
        let mut book = self.book();
        if book.disputed_charges.contains_key(charge_id) {
            return None;
        }
        book.prune(now);
        let dispute = SimDispute {
            id: format!("du_{}", uuid::Uuid::new_v4().simple()),
            charge_id: charge_id.to_owned(),
            reference: reference.to_owned(),
            amount,
            currency: currency.to_owned(),
            status: DisputeState::NeedsResponse,
            decided: None,
        };
        book.disputed_charges
            .insert(charge_id.to_owned(), dispute.id.clone());
        book.disputes.insert(dispute.id.clone(), dispute.clone());
        book.opened.push_back((now, dispute.id.clone()));
        self.report.record(
            MovementKind::Dispute,
            &dispute.reference,
            dispute.amount,
            &dispute.currency,
        );
        let due_by = now + chrono::Duration::days(RESPONSE_WINDOW_DAYS);
        super::webhooks::event(
            "charge.dispute.created",
            serde_json::json!({
                "dispute_id": dispute.id,
                "charge_id": dispute.charge_id,
                "reference": dispute.reference,
                "amount": dispute.amount,
                "currency": dispute.currency,
                "reason": "fraudulent",
                "evidence_due_by": format_timestamp(due_by),
            }),
        )
    }

    /// Takes a step once per idempotency key; the same key again answers the first answer.
    /// Refused (a provider's 409) unless the dispute is `needs_response`.
    pub fn step(
        &self,
        idempotency_key: &str,
        dispute_id: &str,
        step: &DisputeStepRequest,
    ) -> Result<ProviderDispute, String> {
        let now = (self.clock)();
        let mut book = self.book();
        book.calls += 1;
        book.prune(now);
        if let Some(first) = book
            .steps
            .position(idempotency_key)
            .and_then(|position| book.steps.at(position))
        {
            return first.clone();
        }
        let answer = match book.disputes.get_mut(dispute_id) {
            None => Err(format!("no dispute {dispute_id}")),
            Some(d) if d.status != DisputeState::NeedsResponse => Err(format!(
                "dispute {dispute_id} is {} and takes no more steps",
                d.status.as_str()
            )),
            Some(d) => {
                match step {
                    DisputeStepRequest::Evidence { text } => {
                        let wins = text
                            .as_deref()
                            .is_some_and(|t| t.contains(WINNING_EVIDENCE));
                        d.status = DisputeState::UnderReview;
                        d.decided = Some(if wins {
                            DisputeState::Won
                        } else {
                            DisputeState::Lost
                        });
                    }
                    DisputeStepRequest::Close => {
                        d.status = DisputeState::Lost;
                        d.decided = Some(DisputeState::Lost);
                    }
                }
                Ok(ProviderDispute {
                    id: d.id.clone(),
                    status: d.status,
                })
            }
        };
        book.steps.record(idempotency_key, answer.clone(), now);
        answer
    }

    /// Closes a dispute as decided by its step, once: its `charge.dispute.closed`. A
    /// dispute closed by its merchant is announced too (it is `lost` already).
    pub fn decide(&self, dispute_id: &str) -> Option<OutboundEvent> {
        let mut book = self.book();
        let dispute = book.disputes.get_mut(dispute_id)?;
        let outcome = dispute.decided.take()?;
        dispute.status = outcome;
        if outcome == DisputeState::Won {
            self.report.record(
                MovementKind::DisputeReversal,
                &dispute.reference,
                dispute.amount,
                &dispute.currency,
            );
        }
        super::webhooks::event(
            "charge.dispute.closed",
            serde_json::json!({"dispute_id": dispute.id, "status": outcome.as_str()}),
        )
    }

    /// Every dispute still kept, as it is now.
    pub fn all(&self) -> Vec<SimDispute> {
        self.book().disputes.values().cloned().collect()
    }

    /// How many step calls arrived, replays and refusals included.
    pub fn calls(&self) -> u64 {
        self.book().calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(text: &str) -> DisputeStepRequest {
        DisputeStepRequest::Evidence {
            text: Some(text.to_owned()),
        }
    }

    #[test]
    fn a_charge_is_disputed_once_and_evidence_decides_the_outcome() {
        let sim = SimDisputes::default();
        let created = sim.open("ch_1", "pay_1", 2000, "usd").unwrap();
        assert_eq!(created.event_type, "charge.dispute.created");
        assert!(sim.open("ch_1", "pay_1", 2000, "usd").is_none(), "once");
        let id = sim.all()[0].id.clone();
        assert!(sim.decide(&id).is_none(), "nothing decided before a step");

        let first = sim
            .step("dps_1", &id, &evidence("has winning_evidence"))
            .unwrap();
        assert_eq!(first.status, DisputeState::UnderReview);
        assert_eq!(sim.step("dps_1", &id, &evidence("other")), Ok(first));
        assert!(
            sim.step("dps_2", &id, &DisputeStepRequest::Close).is_err(),
            "under review takes no more steps"
        );
        let closed = sim.decide(&id).unwrap();
        assert!(closed.body.contains(r#""status":"won""#), "{}", closed.body);
        assert!(sim.decide(&id).is_none(), "closed once");
        assert_eq!(sim.calls(), 3);

        sim.open("ch_2", "pay_2", 500, "usd").unwrap();
        let other = sim
            .all()
            .into_iter()
            .find(|d| d.charge_id == "ch_2")
            .unwrap();
        let lost = sim.step("dps_3", &other.id, &evidence("weak")).unwrap();
        assert_eq!(lost.status, DisputeState::UnderReview);
        assert!(sim.decide(&other.id).unwrap().body.contains("lost"));
    }

    #[test]
    fn closing_accepts_the_loss_and_an_authorization_is_disputed_at_its_capture() {
        let sim = SimDisputes::default();
        sim.open("ch_1", "pay_1", 2000, "usd").unwrap();
        let id = sim.all()[0].id.clone();
        let closed = sim.step("dps_1", &id, &DisputeStepRequest::Close).unwrap();
        assert_eq!(closed.status, DisputeState::Lost);
        assert!(
            sim.step("dps_2", "du_unknown", &DisputeStepRequest::Close)
                .is_err()
        );

        sim.await_capture("ch_9", "pay_9", "eur");
        assert_eq!(sim.captured("ch_9"), Some(("pay_9".into(), "eur".into())));
        assert_eq!(sim.captured("ch_9"), None, "once");
    }
}
