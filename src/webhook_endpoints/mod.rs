//! Merchants' webhook endpoints (docs/api.md): create, read, update, delete, rotate the
//! secret, list deliveries, replay, send a test event.
//!
//! Every POST takes an optional `Idempotency-Key` with the rules of every other request,
//! through the one idempotent-operation mechanism (`crate::operations`): the requests that
//! only write the database run in its database-only mode (claim, work and answer in one
//! transaction: `writes`), and the test delivery, which calls the merchant's endpoint, runs
//! as an ordinary operation whose claim holds a lease while it sends (`test_send`).

mod endpoint;
mod reads;
pub mod request;
mod test_send;
pub mod view;
mod writes;

pub use endpoint::REPLAY_LIMIT;
pub use reads::{get, list, list_deliveries};
pub use request::{EndpointUpdate, NewEndpoint, Replay, ReplayScope, Rotation, url_error};
pub use test_send::{SendTest, send_test};
pub use writes::{EndpointWrite, create, delete, replay, rotate_secret, update};
