//! Authorize now, capture later: captures and cancels of a `requires_capture`
//! payment, and the expiry of authorizations nobody took in time.
//!
//! ```text
//! POST …/capture or …/cancel ─▶ 404 unless the merchant's payment exists (nothing stored)
//!   claim, ONE transaction: INSERT payment_operations (unique merchant+kind+key)
//!                           UPDATE payments SET operation_id = op
//!                             WHERE status='requires_capture' AND operation_id IS NULL
//!                               AND amount_capturable >= amount          ← one winner
//!     │ held ─▶ provider capture/cancel (Idempotency-Key = op id) ─▶ finish, ONE transaction:
//!     │          payment succeeded/canceled, the op's 200 answer (the payment) stored
//!     │          (a provider refusal lets the authorization go: 409 stored)
//!     └ not held ─▶ 409 payment_not_capturable / _cancelable, 422 amount_exceeds_capturable,
//!                   stored as the key's final answer
//! ```

mod expiry;
mod operate;
mod operation;
mod request;

pub use expiry::expire_authorizations;
pub use operate::{claim_and_run, operate};
pub use operation::{CaptureOrCancel, CaptureOutcome};
pub use request::{CancellationReason, NewCancel, NewCapture, Requested};
