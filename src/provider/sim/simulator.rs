//! The simulated provider's calls: charges by the test payment methods, captures, cancels
//! and refunds, each once per idempotency key (for the key window, retention.rs), and the
//! ledger of the money moved that tests can read.

use std::sync::{Arc, Mutex, MutexGuard};

use super::cards::{decide, declines_later, held_unless_captured};
use super::ledger::{ChargeMove, Ledger, Pending};
use super::retention::{Clock, wall_clock};
use super::settlements::Settlements;
use crate::domain::Timestamp;
use crate::provider::protocol::{
    Charge, ChargeRequest, ChargeUpdate, MovementKind, ProviderRefund, ProviderStatus,
    RefundRequest, SettlementPage, SettlementQuery,
};

/// The simulated payment provider: what it answers each call, and what it did (for as long
/// as it keeps it, retention.rs), for tests to read. Shared by the in-process provider and
/// the `provider-sim` server.
pub struct Simulator {
    ledger: Mutex<Ledger>,
    /// Payouts keep a book of their own.
    pub payouts: super::payouts::SimPayouts,
    /// So do disputes.
    pub disputes: super::disputes::SimDisputes,
    /// Every movement of money, whichever book made it: the settlement report.
    pub settlements: Arc<Settlements>,
    clock: Clock,
}

impl Default for Simulator {
    fn default() -> Self {
        Self::with_clock(wall_clock())
    }
}

impl Simulator {
    pub fn new() -> Self {
        Self::default()
    }

    /// A simulator that reads the time from `clock` (tests move it to see what is kept).
    pub fn with_clock(clock: Clock) -> Self {
        let settlements = Arc::new(Settlements::with_clock(clock.clone()));
        Self {
            ledger: Mutex::default(),
            payouts: super::payouts::SimPayouts::reporting_to(settlements.clone(), clock.clone()),
            disputes: super::disputes::SimDisputes::reporting_to(
                settlements.clone(),
                clock.clone(),
            ),
            settlements,
            clock,
        }
    }

    fn now(&self) -> Timestamp {
        (self.clock)()
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // A panic while holding the lock cannot leave the ledger half-written (every
        // mutation is a push or insert), so a poisoned lock is still safe to use.
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets go of what is older than the windows (at most once a second): the ledger keeps
    /// every charge a kept movement of the report shows.
    fn prune_ledger(&self, ledger: &mut Ledger, now: Timestamp) {
        ledger.prune(now, || self.settlements.prune(now));
    }

    /// Lets go of everything older than the windows now (each book does on its own writes,
    /// at most once a second).
    pub fn prune(&self) {
        let now = self.now();
        self.prune_ledger(&mut self.ledger(), now);
        self.payouts.prune(now);
        self.disputes.prune(now);
    }

    /// The bytes its books hold: every container's capacity (walks every kept record: for
    /// tests and diagnostics).
    pub fn memory_bytes(&self) -> usize {
        self.ledger().memory_bytes()
            + self.settlements.memory_bytes()
            + self.payouts.memory_bytes()
            + self.disputes.memory_bytes()
    }

    /// Completes a pending charge, once: returns the finished charge to announce by webhook,
    /// or `None` if it is unknown or was completed already.
    pub fn complete_pending(&self, charge_id: &str) -> Option<Charge> {
        let mut ledger = self.ledger();
        let position = ledger.complete_pending(charge_id)?;
        let charge = ledger.charge_at(position)?;
        if charge.status == ProviderStatus::Succeeded {
            self.settlements.record(
                MovementKind::Charge,
                &charge.reference,
                charge.amount,
                &charge.currency,
            );
        }
        Some(charge)
    }

    /// Charges once per idempotency key; the same key again (within the key window) returns
    /// the first result.
    pub fn charge(&self, idempotency_key: &str, request: &ChargeRequest) -> Charge {
        let now = self.now();
        let mut ledger = self.ledger();
        ledger.charge_calls += 1;
        // Before the lookup: a key past the window is new, however long since the last write.
        self.prune_ledger(&mut ledger, now);
        if let Some(first) = ledger
            .charges
            .position(idempotency_key)
            .and_then(|position| ledger.charge_at(position))
        {
            return first;
        }
        let (status, failure) = decide(&request.payment_method);
        let status = held_unless_captured(status, request.capture);
        let pending = (status == ProviderStatus::Pending).then(|| Pending {
            declines: declines_later(&request.payment_method),
            capture: request.capture,
        });
        let position =
            ledger.record_charge(idempotency_key, request, (status, failure), pending, now);
        if status == ProviderStatus::Succeeded {
            self.settlements.record_charge(position);
        }
        match ledger.charge_at(position) {
            Some(charge) => charge,
            None => unreachable!("the charge was just recorded"),
        }
    }

    /// Captures (part of) or cancels an authorized charge, once per idempotency key: the
    /// same key again returns the first answer, refusal included. Refused (as a provider's
    /// 409) when the charge is unknown, not authorized any more, or asked for more than it
    /// holds.
    pub fn update_charge(
        &self,
        idempotency_key: &str,
        charge_id: &str,
        change: ChargeMove,
    ) -> Result<ChargeUpdate, String> {
        let now = self.now();
        let mut ledger = self.ledger();
        match change {
            ChargeMove::Capture(_) => ledger.capture_calls += 1,
            ChargeMove::Cancel => ledger.cancel_calls += 1,
        }
        self.prune_ledger(&mut ledger, now);
        if let Some(first) = ledger
            .updates
            .position(idempotency_key)
            .and_then(|position| ledger.updates.at(position))
        {
            return first.clone();
        }
        let answer = ledger.move_charge(charge_id, change);
        if let (Ok(_), ChargeMove::Capture(amount)) = (&answer, change)
            && let Some(position) = ledger.charge_position(charge_id)
        {
            self.settlements.record(
                MovementKind::Capture,
                &ledger.reference(position),
                amount,
                ledger.currency(position),
            );
        }
        ledger.updates.record(idempotency_key, answer.clone(), now);
        answer
    }

    /// The captures and cancels that moved a charge, in order (one per idempotency key).
    fn moved(&self, status: ProviderStatus) -> Vec<ChargeUpdate> {
        let ledger = self.ledger();
        let moved = ledger
            .updates
            .values()
            .filter_map(|answer| answer.as_ref().ok());
        moved
            .filter(|update| update.status == status)
            .cloned()
            .collect()
    }

    /// Every capture that charged, in order (one per idempotency key).
    pub fn captures(&self) -> Vec<ChargeUpdate> {
        self.moved(ProviderStatus::Succeeded)
    }

    /// Every cancel that released an authorization, in order.
    pub fn cancels(&self) -> Vec<ChargeUpdate> {
        self.moved(ProviderStatus::Canceled)
    }

    /// How many capture and cancel calls arrived, replays and refusals included.
    pub fn capture_calls(&self) -> u64 {
        self.ledger().capture_calls
    }

    pub fn cancel_calls(&self) -> u64 {
        self.ledger().cancel_calls
    }

    /// Every charge made and still kept, in order (one per idempotency key).
    pub fn charges(&self) -> Vec<Charge> {
        let ledger = self.ledger();
        (ledger.charges.first()..ledger.charges.end())
            .filter_map(|at| ledger.charge_at(at))
            .collect()
    }

    /// How many charge calls arrived, replays included.
    pub fn charge_calls(&self) -> u64 {
        self.ledger().charge_calls
    }

    /// Refunds once per idempotency key (they always succeed); the same key again returns
    /// the first result.
    pub fn refund(&self, idempotency_key: &str, request: &RefundRequest) -> ProviderRefund {
        let now = self.now();
        let mut ledger = self.ledger();
        ledger.refund_calls += 1;
        self.prune_ledger(&mut ledger, now);
        if let Some(first) = ledger
            .refunds
            .position(idempotency_key)
            .and_then(|position| ledger.refunds.at(position))
        {
            return first.clone();
        }
        let failure = ledger.refusal_of(request);
        let refund = ProviderRefund {
            id: format!("pr_{}", uuid::Uuid::new_v4().simple()),
            status: if failure.is_some() {
                ProviderStatus::Failed
            } else {
                ProviderStatus::Succeeded
            },
            amount: request.amount,
            charge: request.charge.clone(),
            reference: request.reference.clone(),
            failure_code: failure.map(str::to_owned),
        };
        if failure.is_none()
            && let Some(position) = ledger.charge_position(&request.charge)
        {
            ledger.refund_from(position, request.amount);
            self.settlements.record(
                MovementKind::Refund,
                &request.reference,
                request.amount,
                ledger.currency(position),
            );
        }
        ledger.refunds.record(idempotency_key, refund.clone(), now);
        refund
    }

    /// Every refund answered and still kept, in order (one per idempotency key; failed
    /// ones included).
    pub fn refunds(&self) -> Vec<ProviderRefund> {
        self.ledger().refunds.values().cloned().collect()
    }

    /// How many refund calls arrived, replays included.
    pub fn refund_calls(&self) -> u64 {
        self.ledger().refund_calls
    }

    /// A page of the settlement report (see [`Settlements::page`]); `None`: `starting_after`
    /// is not an id of this report.
    pub fn settlement_page(&self, query: &SettlementQuery) -> Option<SettlementPage> {
        let ledger = self.ledger();
        self.settlements.page(query, |low| ledger.shared(low))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str) -> ChargeRequest {
        ChargeRequest {
            amount: 2000,
            currency: "usd".into(),
            payment_method: method.into(),
            reference: "pay_x".into(),
            capture: true,
        }
    }

    #[test]
    fn refunds_return_only_what_a_charge_took_once() {
        let sim = Simulator::new();
        let refund = |key: &str, charge: &str, amount: i64| {
            let request = RefundRequest {
                charge: charge.to_owned(),
                amount,
                reference: key.to_owned(),
            };
            let answer = sim.refund(key, &request);
            (answer.status, answer.failure_code)
        };
        let failed = |code: &str| (ProviderStatus::Failed, Some(code.to_owned()));
        let paid = sim.charge("pay_a", &request("pm_card_visa"));
        assert_eq!(
            refund("re_1", &paid.id, 1500),
            (ProviderStatus::Succeeded, None)
        );
        assert_eq!(refund("re_2", &paid.id, 501), failed("amount_too_large"));
        assert_eq!(
            refund("re_3", &paid.id, 500),
            (ProviderStatus::Succeeded, None)
        );
        assert_eq!(
            refund("re_1", &paid.id, 1500),
            (ProviderStatus::Succeeded, None),
            "the same key answers the same, and moves nothing"
        );
        assert_eq!(
            refund("re_4", "ch_nonexistent", 1),
            failed("charge_not_found")
        );
        let declined = sim.charge("pay_b", &request("pm_card_declined"));
        assert_eq!(
            refund("re_5", &declined.id, 1),
            failed("charge_not_captured")
        );
        let mut manual = request("pm_card_visa");
        manual.capture = false;
        let held = sim.charge("pay_c", &manual);
        assert_eq!(refund("re_6", &held.id, 1), failed("charge_not_captured"));
        sim.update_charge("cap_1", &held.id, ChargeMove::Capture(700))
            .unwrap();
        assert_eq!(refund("re_7", &held.id, 701), failed("amount_too_large"));
        assert_eq!(
            refund("re_8", &held.id, 700),
            (ProviderStatus::Succeeded, None)
        );
    }

    #[test]
    fn authorizations_are_captured_or_canceled_once() {
        let sim = Simulator::new();
        let mut manual = request("pm_card_visa");
        manual.capture = false;
        let held = sim.charge("pay_a", &manual);
        assert_eq!(held.status, ProviderStatus::RequiresCapture);
        let captured = sim
            .update_charge("cap_1", &held.id, ChargeMove::Capture(1500))
            .unwrap();
        assert_eq!(captured.amount_captured, Some(1500));
        assert_eq!(
            sim.update_charge("cap_1", &held.id, ChargeMove::Capture(1500)),
            Ok(captured),
            "the same key answers the same"
        );
        assert!(
            sim.update_charge("cnl_1", &held.id, ChargeMove::Cancel)
                .is_err(),
            "a captured charge cannot be canceled"
        );
        assert_eq!(sim.captures().len(), 1);
        assert_eq!(sim.capture_calls(), 2);

        let other = sim.charge("pay_b", &manual);
        assert!(
            sim.update_charge("cap_2", &other.id, ChargeMove::Capture(2001))
                .is_err(),
            "more than authorized"
        );
        assert!(
            sim.update_charge("cnl_2", &other.id, ChargeMove::Cancel)
                .is_ok()
        );
        assert_eq!(sim.cancels().len(), 1);
        let visa = sim.charge("pay_c", &request("pm_card_visa"));
        assert!(
            sim.update_charge("cap_3", &visa.id, ChargeMove::Capture(1))
                .is_err(),
            "an automatic charge is not capturable"
        );
    }

    #[test]
    fn the_same_key_charges_once() {
        let sim = Simulator::new();
        let first = sim.charge("pay_1", &request("pm_card_visa"));
        let again = sim.charge("pay_1", &request("pm_card_visa"));
        assert_eq!(first, again);
        assert_eq!(sim.charges().len(), 1);
        assert_eq!(sim.charge_calls(), 2);
        sim.charge("pay_2", &request("pm_card_visa"));
        assert_eq!(sim.charges().len(), 2);
    }

    /// Ids come from the charge's position and the ledger: each is found again by exactly
    /// that spelling, and another ledger (another process) gives out other ids.
    #[test]
    fn charge_ids_are_found_by_exactly_the_id_given_and_differ_between_ledgers() {
        let (one, two) = (Simulator::new(), Simulator::new());
        let mut manual = request("pm_card_visa");
        manual.capture = false;
        let charges: Vec<Charge> = (0..3)
            .map(|n| one.charge(&format!("pay_{n}"), &manual))
            .collect();
        let elsewhere = two.charge("pay_0", &manual);
        assert!(charges.iter().all(|c| c.id != elsewhere.id));
        assert!(
            two.update_charge("cnl_x", &charges[0].id, ChargeMove::Cancel)
                .is_err(),
            "another ledger's charge is unknown"
        );
        assert!(
            one.update_charge("cnl_u", &charges[1].id.to_uppercase(), ChargeMove::Cancel)
                .is_err(),
            "another spelling of an id is not that id"
        );
        let canceled = one
            .update_charge("cnl_1", &charges[1].id, ChargeMove::Cancel)
            .unwrap();
        assert_eq!(
            (canceled.id.as_str(), canceled.reference.as_str()),
            (charges[1].id.as_str(), "pay_x")
        );
        let statuses: Vec<_> = one.charges().into_iter().map(|c| c.status).collect();
        assert_eq!(
            statuses,
            [
                ProviderStatus::RequiresCapture,
                ProviderStatus::Canceled,
                ProviderStatus::RequiresCapture
            ]
        );
    }

    /// A reference the same as the key is kept once and read back whole, and one that differs
    /// is its own.
    #[test]
    fn references_are_answered_as_given() {
        let sim = Simulator::new();
        let mut same = request("pm_card_visa");
        same.reference = "pay_same".into();
        assert_eq!(sim.charge("pay_same", &same).reference, "pay_same");
        assert_eq!(
            sim.charge("pay_other", &request("pm_card_visa")).reference,
            "pay_x"
        );
        let references: Vec<_> = sim.charges().into_iter().map(|c| c.reference).collect();
        assert_eq!(references, ["pay_same", "pay_x"]);
    }

    #[test]
    fn the_same_key_refunds_once() {
        let sim = Simulator::new();
        let paid = sim.charge("pay_a", &request("pm_card_visa"));
        let request = RefundRequest {
            charge: paid.id,
            amount: 500,
            reference: "re_1".into(),
        };
        let first = sim.refund("re_1", &request);
        assert_eq!(first.status, ProviderStatus::Succeeded);
        assert!(first.id.starts_with("pr_"));
        assert_eq!(sim.refund("re_1", &request), first);
        assert_eq!(sim.refunds().len(), 1);
        assert_eq!(sim.refund_calls(), 2);
    }

    #[test]
    fn test_cards_decide_the_outcome() {
        let sim = Simulator::new();
        let cases = [
            ("pm_card_visa", ProviderStatus::Succeeded, None),
            ("pm_card_amex", ProviderStatus::Succeeded, None),
            (
                "pm_card_declined",
                ProviderStatus::Failed,
                Some("card_declined"),
            ),
            (
                "pm_card_insufficient_funds",
                ProviderStatus::Failed,
                Some("insufficient_funds"),
            ),
            ("pm_card_async", ProviderStatus::Pending, None),
            ("pm_card_async_declined", ProviderStatus::Pending, None),
            (
                "pm_bogus",
                ProviderStatus::Failed,
                Some("invalid_payment_method"),
            ),
        ];
        for (i, (method, status, code)) in cases.into_iter().enumerate() {
            let charge = sim.charge(&format!("k{i}"), &request(method));
            assert_eq!(charge.status, status, "{method}");
            assert_eq!(charge.failure_code.as_deref(), code, "{method}");
            assert!(charge.id.starts_with("ch_"));
        }
    }

    #[test]
    fn pending_charges_complete_once() {
        let sim = Simulator::new();
        let ok = sim.charge("a", &request("pm_card_async"));
        let declined = sim.charge("b", &request("pm_card_async_declined"));
        let done = sim.complete_pending(&ok.id).unwrap();
        assert_eq!(done.status, ProviderStatus::Succeeded);
        assert!(sim.complete_pending(&ok.id).is_none(), "completes once");
        let failed = sim.complete_pending(&declined.id).unwrap();
        assert_eq!(failed.status, ProviderStatus::Failed);
        assert_eq!(failed.failure_code.as_deref(), Some("card_declined"));
        let visa = sim.charge("c", &request("pm_card_visa"));
        assert!(sim.complete_pending(&visa.id).is_none());
        assert_eq!(sim.charges()[0].status, ProviderStatus::Succeeded);
    }
}
