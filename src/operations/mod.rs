//! The one idempotent-operation mechanism. Every request that takes an `Idempotency-Key`
//! runs on it: payments, refunds, captures and cancels (which call the provider), and the
//! webhook-endpoint requests (which only write the database, or send one test delivery).
//! Each kind implements [`Operation`] (its row, its guard, its call, its final state) and
//! gets the idempotency rules (docs/idempotency.md) from [`execute`]; abandoned work is finished by [`Recovery`].
//!
//! ```text
//! route ───▶ these exact bytes answered here under this key? ─▶ replay (before parsing)
//! execute ─▶ known final answer here? ─▶ replay / 422
//!         ─▶ same key led here?         ─▶ wait for its leader (replay, or its 202)
//!         ─▶ lead the key here (one request per key and instance goes on below)
//!         ─▶ claim: Operation::claim in one transaction (the insert decides the winner,
//!                   then the operation's own guard, e.g. money reserved)
//!               │ won ─────▶ drive: Operation::call (the provider, with our row id as
//!               │                   its idempotency key; no DB connection held)
//!               │                     final   ─▶ finish: Operation::finish (guarded, stores
//!               │                                the answer every retry replays)
//!               │                     unknown ─▶ release: lease given up, 202
//!               │ answered ─▶ the answer stored by the claim itself: a 409/422 refusal,
//!               │             or the whole work of a database-only operation
//!               └ lost ────▶ follow: 422 if another request, replay if final, wait or
//!                            take over a free lease ─▶ drive
//! recover ─▶ abandoned rows (Leased::find_abandoned) ─▶ take over ─▶ drive
//! ```
//!
//! What every kind shares (reading a row again, taking over, giving up a lease, finding
//! abandoned rows) is the row's lease protocol, [`Leased`](crate::db::lease::Leased), written once in `db`: no
//! operation restates it.

mod execute;
pub mod keyed;
mod operation;
mod recovery;
mod settle;

pub use execute::{execute, execute_sent};
pub use operation::{Called, Claimed, Lease, Operation, lease_duration};
pub use recovery::{Recovery, recover};
pub(crate) use settle::settled_row;
pub use settle::{Settle, Settled, SettledRow, settle};
