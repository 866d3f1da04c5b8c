//! The simulated payment provider: the test payment methods of the contract, each call
//! answered once per idempotency key, a ledger of the money moved that tests can read, and
//! signed webhooks for the charges that finish later.
//!
//! ```text
//! Simulator ─── cards       the outcome of each test payment method
//!   │       ├── ledger      charges, refunds, captures and cancels, over a journal of the
//!   │       │               first answer to each key (journal; ids packed: kept_key)
//!   │       ├── settlements every movement of money, in order (a charge's shows the charge)
//!   │       └── retention   how long keys and records are kept, let go in old segments
//!   ├─ InProcessProvider    the service's PaymentProvider in its own process (the default)
//!   └─ server               the same over HTTP, with fault injection (`provider-sim`, tests)
//! webhooks                  the signed events it sends, retried until a 2xx
//! ```

mod cards;
mod disputes;
mod in_process;
mod journal;
mod kept_key;
mod ledger;
mod payouts;
mod retention;
pub mod server;
mod settlements;
mod simulator;
pub mod webhooks;

pub use disputes::{SimDispute, SimDisputes, WINNING_EVIDENCE};
pub use in_process::InProcessProvider;
pub use ledger::ChargeMove;
pub use payouts::{SimPayouts, SimulatedPayout};
pub use retention::{Clock, KEY_WINDOW, RECORDS_KEPT, wall_clock};
pub use server::Faults;
pub use settlements::Settlements;
pub use simulator::Simulator;
pub use webhooks::{RetryPolicy, WebhookDelivery};
