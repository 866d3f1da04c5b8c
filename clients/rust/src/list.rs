//! Lists: one page as [`Page`], every page as a stream.

use serde::Deserialize;

/// One page of a list, newest first (the event feed: oldest first).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct Page<T> {
    pub data: Vec<T>,
    /// More items follow the last one of `data`.
    pub has_more: bool,
}

/// Paging and filters of a list request.
pub(crate) trait ListParams {
    /// The page size.
    fn limit(&self) -> Option<u32>;
    /// Where the list starts: after this id.
    fn starting_after(&self) -> Option<&str>;
    /// The filters, as query pairs.
    fn filters(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

/// Objects a list can continue after (its cursor is the last id of a page).
pub trait HasId {
    fn id(&self) -> &str;
}

macro_rules! has_id {
    ($($ty:ty),*) => {
        $(impl HasId for $ty {
            fn id(&self) -> &str {
                &self.id
            }
        })*
    };
}

has_id!(
    crate::Payment,
    crate::Refund,
    crate::Event,
    crate::WebhookEndpoint,
    crate::WebhookDelivery
);
