//! What a request with an already-used key is told, and how duplicates wait for the first
//! request without querying the database in a loop.
//!
//! In one process, only the first request of an idempotency scope goes to the database
//! (it claims, or follows a claim made elsewhere): its duplicates here wait on it through
//! [`InFlight`] and wake the moment it answers, however many they are. The one request
//! following a claim made in another instance polls the row with a growing interval
//! ([`follow`], shared by every endpoint whose rows are their own idempotency records), so
//! a storm spread over instances costs each instance one poller, not one per request.

mod answer;
mod final_answers;
mod follow;
mod in_flight;
pub mod record;

pub use answer::{Answer, REPLAYED_HEADER, scope_key};
pub use final_answers::{FinalAnswers, Sent};
pub use follow::{Followed, follow, observe, store_when_possible};
pub use in_flight::{
    InFlight, InFlightGuard, Joined, RETRY_AFTER_SECS, Turn, lead_or_join, wait_for_outcome,
};
pub use record::IdempotentRecord;
pub(crate) use record::idempotent_record;
