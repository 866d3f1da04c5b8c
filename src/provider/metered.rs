//! Every call through the [`PaymentProvider`] port, counted and timed for the metrics.

use std::time::Instant;

use futures_util::future::LocalBoxFuture;

use super::protocol::{
    CaptureRequest, Charge, ChargeRequest, ChargeUpdate, DisputeStepRequest, PaymentProvider,
    PayoutRequest, ProviderDispute, ProviderError, ProviderPayout, ProviderRefund, RefundRequest,
    SettlementPage, SettlementQuery,
};

/// Counts and times every call through the [`PaymentProvider`] port, whichever flow makes
/// it (a request, a retry taking over, the recovery worker) and whichever provider sits
/// behind it (simulator or HTTP).
pub struct MeteredProvider {
    inner: std::sync::Arc<dyn PaymentProvider>,
}

impl MeteredProvider {
    pub fn new(inner: std::sync::Arc<dyn PaymentProvider>) -> Self {
        Self { inner }
    }
}

/// Times one provider call and counts it by the provider's status (or `unknown`, or
/// `refused` for a final 4xx refusal).
async fn metered<T>(
    operation: &'static str,
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
    status: impl Fn(&T) -> &'static str,
) -> Result<T, ProviderError> {
    let started = Instant::now();
    let result = call.await;
    let outcome = match &result {
        Ok(answer) => status(answer),
        Err(ProviderError::Unknown(_)) => "unknown",
        Err(ProviderError::Refused(_)) => "refused",
    };
    crate::metrics::provider_call(operation, outcome, started.elapsed());
    result
}

impl PaymentProvider for MeteredProvider {
    fn create_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a ChargeRequest,
    ) -> LocalBoxFuture<'a, Result<Charge, ProviderError>> {
        Box::pin(metered(
            "charge",
            self.inner.create_charge(idempotency_key, request),
            |charge| charge.status.as_str(),
        ))
    }

    fn create_refund<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a RefundRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderRefund, ProviderError>> {
        Box::pin(metered(
            "refund",
            self.inner.create_refund(idempotency_key, request),
            |refund| refund.status.as_str(),
        ))
    }

    fn capture_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        charge_id: &'a str,
        request: &'a CaptureRequest,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        Box::pin(metered(
            "capture",
            self.inner
                .capture_charge(idempotency_key, charge_id, request),
            |update| update.status.as_str(),
        ))
    }

    fn cancel_charge<'a>(
        &'a self,
        idempotency_key: &'a str,
        charge_id: &'a str,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        Box::pin(metered(
            "cancel",
            self.inner.cancel_charge(idempotency_key, charge_id),
            |update| update.status.as_str(),
        ))
    }

    fn create_payout<'a>(
        &'a self,
        idempotency_key: &'a str,
        request: &'a PayoutRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderPayout, ProviderError>> {
        Box::pin(metered(
            "payout",
            self.inner.create_payout(idempotency_key, request),
            |payout| payout.status.as_str(),
        ))
    }

    fn dispute_step<'a>(
        &'a self,
        idempotency_key: &'a str,
        dispute_id: &'a str,
        step: &'a DisputeStepRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderDispute, ProviderError>> {
        let operation = match step {
            DisputeStepRequest::Evidence { .. } => "dispute_evidence",
            DisputeStepRequest::Close => "dispute_close",
        };
        Box::pin(metered(
            operation,
            self.inner.dispute_step(idempotency_key, dispute_id, step),
            |dispute| dispute.status.as_str(),
        ))
    }

    fn settlements<'a>(
        &'a self,
        query: &'a SettlementQuery,
    ) -> LocalBoxFuture<'a, Result<SettlementPage, ProviderError>> {
        Box::pin(metered(
            "settlements",
            self.inner.settlements(query),
            |_| "read",
        ))
    }
}
