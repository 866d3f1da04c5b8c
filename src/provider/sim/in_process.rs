//! The simulator as the service's [`PaymentProvider`] in its own process: the money moves
//! at once, the answer after an optional latency, and pending charges complete later with a
//! signed webhook.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::LocalBoxFuture;

use super::cards::DISPUTED;
use super::ledger::ChargeMove;
use super::payouts::payout_event;
use super::simulator::Simulator;
use super::webhooks::{OutboundEvent, WebhookDelivery, charge_event};
use crate::provider::attempts::{Attempt, attempts, no_answer_within};
use crate::provider::protocol::{
    CaptureRequest, Charge, ChargeRequest, ChargeUpdate, DisputeStepRequest, PaymentProvider,
    PayoutRequest, PayoutState, ProviderDispute, ProviderError, ProviderPayout, ProviderRefund,
    ProviderStatus, RefundRequest, SettlementPage, SettlementQuery,
};

/// The simulator inside the service's process, with an optional latency per call. With
/// webhooks configured, pending charges complete after `async_delay` and are announced by
/// a signed webhook, as a real provider would.
pub struct InProcessProvider {
    simulator: Arc<Simulator>,
    latency: Duration,
    /// Each attempt's timeout and the attempts per call, as the HTTP provider's.
    timeout: Duration,
    max_attempts: u32,
    webhooks: Option<(Arc<WebhookDelivery>, Duration)>,
}

impl InProcessProvider {
    /// Answers after `latency`, however long that is (provider-sim's own, which answers
    /// over HTTP: its callers time out).
    pub fn new(simulator: Arc<Simulator>, latency: Duration) -> Self {
        Self {
            simulator,
            latency,
            timeout: Duration::MAX,
            max_attempts: 1,
            webhooks: None,
        }
    }

    /// An answer later than `timeout` is none, as over HTTP: the money has moved, the call
    /// is attempted again (with the same key) up to `max_attempts` times, then its outcome is
    /// unknown (`PROVIDER_TIMEOUT_MS`, `PROVIDER_MAX_ATTEMPTS`).
    pub fn with_timeout(mut self, timeout: Duration, max_attempts: u32) -> Self {
        self.timeout = timeout;
        self.max_attempts = max_attempts;
        self
    }

    /// Waits the latency, in attempts that time out as the HTTP provider's do. Every
    /// attempt would get the same answer (the simulator keeps it under the key), so the
    /// money moves once, before.
    async fn answer_in_time(&self) -> Result<(), ProviderError> {
        if self.latency.is_zero() {
            return Ok(());
        }
        let (latency, timeout) = (self.latency, self.timeout);
        attempts("in-process", self.max_attempts, || async move {
            match actix_web::rt::time::timeout(timeout, actix_web::rt::time::sleep(latency)).await {
                Ok(()) => Attempt::Done(()),
                Err(_) => Attempt::Retry(no_answer_within(timeout)),
            }
        })
        .await
    }

    pub fn with_webhooks(mut self, delivery: WebhookDelivery, async_delay: Duration) -> Self {
        self.webhooks = Some((Arc::new(delivery), async_delay));
        self
    }

    /// Completes a pending charge after the delay and delivers its webhook. Every call for
    /// a pending charge schedules one, but only the first to complete it sends anything.
    fn complete_later(&self, charge_id: String) {
        self.announce_later(move |simulator| {
            simulator
                .complete_pending(&charge_id)
                .as_ref()
                .and_then(charge_event)
        });
    }

    /// After the delay, finishes what `complete` finishes and delivers its webhook (none if
    /// it was finished already).
    fn announce_later(&self, complete: impl FnOnce(&Simulator) -> Option<OutboundEvent> + 'static) {
        let Some((delivery, delay)) = self.webhooks.clone() else {
            return;
        };
        let simulator = self.simulator.clone();
        actix_web::rt::spawn(async move {
            actix_web::rt::time::sleep(delay).await;
            let Some(event) = complete(&simulator) else {
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
    ) -> LocalBoxFuture<'a, Result<Charge, ProviderError>> {
        Box::pin(async move {
            // The money moves first, the answer takes its time: a request that dies while
            // waiting has already charged, which is what recovery must cope with.
            let charge = self.simulator.charge(idempotency_key, request);
            if charge.status == ProviderStatus::Pending {
                self.complete_later(charge.id.clone());
            }
            if request.payment_method == DISPUTED {
                self.dispute_once_captured(&charge);
            }
            self.answer_in_time().await?;
            Ok(charge)
        })
    }

    fn create_refund<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a RefundRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderRefund, ProviderError>> {
        Box::pin(async move {
            // As for charges: the money moves first, then the answer takes its time.
            let refund = self.simulator.refund(idempotency_key, request);
            self.answer_in_time().await?;
            Ok(refund)
        })
    }

    fn capture_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        charge_id: &'a str,
        request: &'a CaptureRequest,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        Box::pin(async move {
            let captured = self
                .update_later(
                    idempotency_key,
                    charge_id,
                    ChargeMove::Capture(request.amount),
                )
                .await?;
            if let Some((reference, currency)) = self.simulator.disputes.captured(charge_id) {
                let (id, amount) = (captured.id.clone(), request.amount);
                self.announce_later(move |simulator| {
                    simulator.disputes.open(&id, &reference, amount, &currency)
                });
            }
            Ok(captured)
        })
    }

    fn cancel_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        charge_id: &'a str,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        self.update_later(idempotency_key, charge_id, ChargeMove::Cancel)
    }

    fn create_payout<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a PayoutRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderPayout, ProviderError>> {
        Box::pin(async move {
            // As for charges: the money moves first, then the answer takes its time.
            let payout = self.simulator.payouts.payout(idempotency_key, request);
            if payout.status == PayoutState::Pending {
                let id = payout.id.clone();
                self.announce_later(move |simulator| {
                    simulator
                        .payouts
                        .complete_pending(&id)
                        .as_ref()
                        .and_then(payout_event)
                });
            }
            self.answer_in_time().await?;
            Ok(payout)
        })
    }

    fn dispute_step<'a>(
        &'a self,
        idempotency_key: &'a str,
        dispute_id: &'a str,
        step: &'a DisputeStepRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderDispute, ProviderError>> {
        Box::pin(async move {
            let answer = self
                .simulator
                .disputes
                .step(idempotency_key, dispute_id, step);
            if answer.is_ok() {
                // Decided after the delay, and announced (once, however often asked).
                let id = dispute_id.to_owned();
                self.announce_later(move |simulator| simulator.disputes.decide(&id));
            }
            self.answer_in_time().await?;
            answer.map_err(ProviderError::Refused)
        })
    }

    fn settlements<'a>(
        &'a self,
        query: &'a SettlementQuery,
    ) -> LocalBoxFuture<'a, Result<SettlementPage, ProviderError>> {
        Box::pin(async move {
            self.simulator.settlement_page(query).ok_or_else(|| {
                ProviderError::Refused("`starting_after` is not a movement of this report".into())
            })
        })
    }
}

impl InProcessProvider {
    /// A charge of the disputed card is disputed, after the delay, once its money is
    /// captured: at once for an automatic one, at its capture for an authorization.
    fn dispute_once_captured(&self, charge: &Charge) {
        match charge.status {
            ProviderStatus::Succeeded => {
                let charge = charge.clone();
                self.announce_later(move |simulator| {
                    simulator.disputes.open(
                        &charge.id,
                        &charge.reference,
                        charge.amount,
                        &charge.currency,
                    )
                });
            }
            ProviderStatus::RequiresCapture => {
                self.simulator.disputes.await_capture(
                    &charge.id,
                    &charge.reference,
                    &charge.currency,
                );
            }
            _ => {}
        }
    }

    /// As for charges: the money moves first, then the answer takes its time.
    fn update_later<'a>(
        &'a self,
        idempotency_key: &'a str,
        charge_id: &'a str,
        change: ChargeMove,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        Box::pin(async move {
            let answer = self
                .simulator
                .update_charge(idempotency_key, charge_id, change);
            self.answer_in_time().await?;
            answer.map_err(ProviderError::Refused)
        })
    }
}
