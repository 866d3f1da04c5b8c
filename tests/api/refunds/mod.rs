use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{LocalBoxFuture, join, join_all};
use payments_api::auth::Merchant;
use payments_api::domain::{Amount, IdempotencyKey, PaymentId};
use payments_api::provider::{
    CaptureRequest, Charge, ChargeRequest, ChargeUpdate, OutcomeUnknown, PaymentProvider,
    PayoutRequest, ProviderError, ProviderPayout, ProviderRefund, RefundRequest,
};

use payments_api::refunds::{self, NewRefund, OutcomeApplied, RefundOutcome};
use serde_json::json;

use crate::support::{TestApp, spawn_app, spawn_app_with, wait_until};

mod concurrency;
mod outcomes;

pub(crate) use outcomes::refund_through_unreachable_provider;
mod requests;
