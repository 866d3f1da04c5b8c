//! The simulated provider: the test payment methods of the contract, deduplication by
//! idempotency key, and a ledger of the money it moved that tests can read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::future::LocalBoxFuture;

use super::webhook_delivery::{WebhookDelivery, charge_event};
use super::{
    Charge, ChargeRequest, OutcomeUnknown, PaymentProvider, ProviderRefund, ProviderStatus,
    RefundRequest,
};

#[derive(Default)]
struct Ledger {
    charges: Vec<Charge>,
    charge_by_key: HashMap<String, usize>,
    /// Every charge call, including those answered from the idempotency record.
    charge_calls: u64,
    /// Payment method of each pending charge, by charge id: decides how it completes.
    pending_methods: HashMap<String, String>,
    refunds: Vec<ProviderRefund>,
    refund_by_key: HashMap<String, usize>,
    /// Every refund call, including those answered from the idempotency record.
    refund_calls: u64,
}

#[derive(Default)]
pub struct Simulator {
    ledger: Mutex<Ledger>,
}

impl Simulator {
    pub fn new() -> Self {
        Self::default()
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        // A panic while holding the lock cannot leave the ledger half-written (every
        // mutation is a push or insert), so a poisoned lock is still safe to use.
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The outcome the simulator gives a payment method: (status, failure code, message).
    pub fn decide(
        payment_method: &str,
    ) -> (ProviderStatus, Option<&'static str>, Option<&'static str>) {
        match payment_method {
            "pm_card_visa" | "pm_card_mastercard" | "pm_card_amex" => {
                (ProviderStatus::Succeeded, None, None)
            }
            "pm_card_declined" => (
                ProviderStatus::Failed,
                Some("card_declined"),
                Some("Your card was declined."),
            ),
            "pm_card_insufficient_funds" => (
                ProviderStatus::Failed,
                Some("insufficient_funds"),
                Some("Your card has insufficient funds."),
            ),
            "pm_card_async" | "pm_card_async_declined" => (ProviderStatus::Pending, None, None),
            _ => (
                ProviderStatus::Failed,
                Some("invalid_payment_method"),
                Some("The payment method is not valid."),
            ),
        }
    }

    /// How a pending (async) charge completes: `pm_card_async_declined` fails, others succeed.
    pub fn decide_async(
        payment_method: &str,
    ) -> (ProviderStatus, Option<&'static str>, Option<&'static str>) {
        match payment_method {
            "pm_card_async_declined" => (
                ProviderStatus::Failed,
                Some("card_declined"),
                Some("Your card was declined."),
            ),
            _ => (ProviderStatus::Succeeded, None, None),
        }
    }

    /// Completes a pending charge, once: returns the finished charge to announce by webhook,
    /// or `None` if it is unknown or was completed already.
    pub fn complete_pending(&self, charge_id: &str) -> Option<Charge> {
        let mut ledger = self.ledger();
        let method = ledger.pending_methods.remove(charge_id)?;
        let (status, failure_code, failure_message) = Self::decide_async(&method);
        let charge = ledger.charges.iter_mut().find(|c| c.id == charge_id)?;
        charge.status = status;
        charge.failure_code = failure_code.map(str::to_owned);
        charge.failure_message = failure_message.map(str::to_owned);
        Some(charge.clone())
    }

    /// Charges once per idempotency key; the same key again returns the first result.
    pub fn charge(&self, idempotency_key: &str, request: &ChargeRequest) -> Charge {
        let mut ledger = self.ledger();
        ledger.charge_calls += 1;
        if let Some(&index) = ledger.charge_by_key.get(idempotency_key) {
            return ledger.charges[index].clone();
        }
        let (status, failure_code, failure_message) = Self::decide(&request.payment_method);
        let charge = Charge {
            id: format!("ch_{}", uuid::Uuid::new_v4().simple()),
            status,
            amount: request.amount,
            currency: request.currency.clone(),
            reference: request.reference.clone(),
            failure_code: failure_code.map(str::to_owned),
            failure_message: failure_message.map(str::to_owned),
        };
        if status == ProviderStatus::Pending {
            ledger
                .pending_methods
                .insert(charge.id.clone(), request.payment_method.clone());
        }
        let index = ledger.charges.len();
        ledger.charges.push(charge.clone());
        ledger
            .charge_by_key
            .insert(idempotency_key.to_owned(), index);
        charge
    }

    /// Every charge made, in order (one per idempotency key).
    pub fn charges(&self) -> Vec<Charge> {
        self.ledger().charges.clone()
    }

    /// How many charge calls arrived, replays included.
    pub fn charge_calls(&self) -> u64 {
        self.ledger().charge_calls
    }

    /// Refunds once per idempotency key (they always succeed); the same key again returns
    /// the first result.
    pub fn refund(&self, idempotency_key: &str, request: &RefundRequest) -> ProviderRefund {
        let mut ledger = self.ledger();
        ledger.refund_calls += 1;
        if let Some(&index) = ledger.refund_by_key.get(idempotency_key) {
            return ledger.refunds[index].clone();
        }
        let refund = ProviderRefund {
            id: format!("pr_{}", uuid::Uuid::new_v4().simple()),
            status: ProviderStatus::Succeeded,
            amount: request.amount,
            charge: request.charge.clone(),
            reference: request.reference.clone(),
            failure_code: None,
        };
        let index = ledger.refunds.len();
        ledger.refunds.push(refund.clone());
        ledger
            .refund_by_key
            .insert(idempotency_key.to_owned(), index);
        refund
    }

    /// Every refund made, in order (one per idempotency key).
    pub fn refunds(&self) -> Vec<ProviderRefund> {
        self.ledger().refunds.clone()
    }

    /// How many refund calls arrived, replays included.
    pub fn refund_calls(&self) -> u64 {
        self.ledger().refund_calls
    }
}

/// The simulator inside the service's process, with an optional latency per call. With
/// webhooks configured, pending charges complete after `async_delay` and are announced by
/// a signed webhook, as a real provider would.
pub struct InProcessProvider {
    simulator: Arc<Simulator>,
    latency: Duration,
    webhooks: Option<(Arc<WebhookDelivery>, Duration)>,
}

impl InProcessProvider {
    pub fn new(simulator: Arc<Simulator>, latency: Duration) -> Self {
        Self {
            simulator,
            latency,
            webhooks: None,
        }
    }

    pub fn with_webhooks(mut self, delivery: WebhookDelivery, async_delay: Duration) -> Self {
        self.webhooks = Some((Arc::new(delivery), async_delay));
        self
    }

    /// Completes a pending charge after the delay and delivers its webhook. Every call for
    /// a pending charge schedules one, but only the first to complete it sends anything.
    fn complete_later(&self, charge_id: String) {
        let Some((delivery, delay)) = self.webhooks.clone() else {
            return;
        };
        let simulator = self.simulator.clone();
        actix_web::rt::spawn(async move {
            actix_web::rt::time::sleep(delay).await;
            let Some(event) = simulator
                .complete_pending(&charge_id)
                .as_ref()
                .and_then(charge_event)
            else {
                return;
            };
            if let Err(e) = delivery.deliver(&event).await {
                tracing::error!(error = %e, "simulator gave up delivering a webhook");
            }
        });
    }
}

impl PaymentProvider for InProcessProvider {
    fn create_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a ChargeRequest,
    ) -> LocalBoxFuture<'a, Result<Charge, OutcomeUnknown>> {
        Box::pin(async move {
            // The money moves first, the answer takes its time: a request that dies while
            // waiting has already charged, which is what recovery must cope with.
            let charge = self.simulator.charge(idempotency_key, request);
            if charge.status == ProviderStatus::Pending {
                self.complete_later(charge.id.clone());
            }
            if !self.latency.is_zero() {
                actix_web::rt::time::sleep(self.latency).await;
            }
            Ok(charge)
        })
    }

    fn create_refund<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a RefundRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderRefund, OutcomeUnknown>> {
        Box::pin(async move {
            // As for charges: the money moves first, then the answer takes its time.
            let refund = self.simulator.refund(idempotency_key, request);
            if !self.latency.is_zero() {
                actix_web::rt::time::sleep(self.latency).await;
            }
            Ok(refund)
        })
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
        }
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

    #[test]
    fn the_same_key_refunds_once() {
        let sim = Simulator::new();
        let request = RefundRequest {
            charge: "ch_1".into(),
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
