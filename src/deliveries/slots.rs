//! How many attempts this instance has in flight, per endpoint and in total: a hanging
//! endpoint holds its own slots, never everyone's.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use tokio::sync::Notify;

/// Attempts in flight to one endpoint, per instance. The first is every endpoint's own, so
/// no number of slow endpoints can keep another waiting; the others (up to
/// [`MAX_IN_FLIGHT_PER_ENDPOINT`] - 1 each, to work off a backlog faster) come from
/// [`MAX_EXTRA_IN_FLIGHT`] shared by all endpoints.
pub const MAX_IN_FLIGHT_PER_ENDPOINT: usize = 4;
/// Attempts in flight beyond each endpoint's first, per instance.
pub const MAX_EXTRA_IN_FLIGHT: usize = 64;
/// This instance's attempts in flight, per endpoint. The worker and its attempts share one
/// thread (awc's client is not `Send`), hence `Rc`.
#[derive(Clone, Default)]
pub(super) struct Slots {
    pub(super) per_endpoint: Rc<RefCell<HashMap<String, usize>>>,
    pub(super) wake: Rc<Notify>,
}

/// One attempt's place; given back (and the worker woken) when dropped.
pub(super) struct Slot {
    slots: Slots,
    endpoint_id: String,
}

impl Slots {
    /// Attempts in flight beyond their endpoint's first.
    pub(super) fn extra(&self) -> usize {
        self.per_endpoint
            .borrow()
            .values()
            .map(|n| n.saturating_sub(1))
            .sum()
    }

    /// Endpoints that can take no attempt now: at their limit, or holding their first
    /// while the shared extra slots are all taken.
    pub(super) fn busy(&self) -> Vec<String> {
        let extras_left = self.extra() < MAX_EXTRA_IN_FLIGHT;
        self.per_endpoint
            .borrow()
            .iter()
            .filter(|(_, n)| **n >= MAX_IN_FLIGHT_PER_ENDPOINT || !extras_left)
            .map(|(id, _)| id.clone())
            .collect()
    }

    pub(super) fn take(&self, endpoint_id: &str) -> Option<Slot> {
        let used = self
            .per_endpoint
            .borrow()
            .get(endpoint_id)
            .copied()
            .unwrap_or(0);
        let room =
            used == 0 || (used < MAX_IN_FLIGHT_PER_ENDPOINT && self.extra() < MAX_EXTRA_IN_FLIGHT);
        if !room {
            return None;
        }
        *self
            .per_endpoint
            .borrow_mut()
            .entry(endpoint_id.to_owned())
            .or_default() += 1;
        Some(Slot {
            slots: self.clone(),
            endpoint_id: endpoint_id.to_owned(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = self.slots.per_endpoint.borrow_mut();
        if let Some(n) = map.get_mut(&self.endpoint_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                map.remove(&self.endpoint_id);
            }
        }
        self.slots.wake.notify_one();
    }
}
