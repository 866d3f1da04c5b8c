//! The port to the payment provider. The service only sees [`PaymentProvider`]; behind it
//! sit the in-process simulator (the default, in [`sim`]) and, with `PROVIDER_URL`, the HTTP
//! client, either one counted and timed by [`MeteredProvider`].

pub(crate) mod attempts;
mod http;
mod metered;
mod protocol;
pub mod sim;

pub use http::HttpProvider;
pub use metered::MeteredProvider;
pub use protocol::{
    CaptureRequest, Charge, ChargeRequest, ChargeUpdate, DisputeState, DisputeStepRequest,
    OutcomeUnknown, PROVIDER_REFUSED, PaymentProvider, PayoutRequest, PayoutState, ProviderDispute,
    ProviderError, ProviderPayout, ProviderRefund, ProviderStatus, RefundRequest,
};
pub use protocol::{MovementKind, SettlementMovement, SettlementPage, SettlementQuery};
