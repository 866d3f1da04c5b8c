//! What the simulator keeps, and for how long (docs/provider.md, "What the simulator keeps,
//! and for how long").
//!
//! A real provider forgets an idempotency key after a day and does not keep the whole record
//! of every charge in memory; nor does the simulator, so that a long run (the demo, a
//! `provider-sim` left up for weeks) holds a bounded amount, not one record per call ever
//! made. Its books are kept in segments of time, and whole old segments are let go:
//!
//! - a key is answered as the first time for at least [`KEY_WINDOW`] (at most a segment and a
//!   pruning later), then treated as new;
//! - charges stay refundable and capturable, refunds and payouts readable and movements in
//!   the settlement report for at least [`RECORDS_KEPT`].

use std::sync::Arc;

use chrono::TimeDelta;

use crate::domain::Timestamp;

/// How long the first answer to an idempotency key is kept, like a real provider's 24 hours.
///
/// The service sends a provider key again only while its operation is unfinished: its own
/// attempts (seconds), a retry, or the recovery worker, every `RECOVERY_INTERVAL_MS` once a
/// lease of `PROCESSING_LEASE_MS` (30 s) has run out; a pending charge is finished by its
/// webhook (redelivered for about 13 minutes) or the next recovery pass after it. With the
/// provider answering, that is minutes at most, a small fraction of the window. A finished
/// operation is replayed from the service's own database and never reaches the provider.
/// Only an outage longer than the window, after a call that moved money and lost its answer,
/// could send a key the simulator has forgotten (so would it with a real provider); the
/// in-process simulator cannot lose an answer, and forgets everything at a restart anyway.
pub const KEY_WINDOW: TimeDelta = TimeDelta::hours(24);

/// How long charges, refunds, captures, payouts, disputes and settlement movements are kept:
/// a day past the 7 days an authorization stays capturable (`AUTHORIZATION_EXPIRY_MS`'s
/// default, and a real provider's), and a week of reports beyond the day a reconciliation
/// reads by default. A charge older than this is unknown: a refund of it fails
/// `charge_not_found`, a capture or cancel is refused (409), as an expired authorization is.
pub const RECORDS_KEPT: TimeDelta = TimeDelta::days(8);

/// The longest time one segment of a book covers: keys and records are let go a segment at
/// a time, so at most this much later than their time (and a movement's time fits in 32 bits
/// of microseconds after its segment's start).
pub const SEGMENT_SPAN: TimeDelta = TimeDelta::hours(1);

/// Entries per segment at most: big enough that a segment's own few fields weigh nothing
/// per entry, small enough that the newest (growing) segment wastes little.
pub const SEGMENT_LEN: usize = 4096;

/// How often a book looks for segments to let go (on its next call): a look with nothing to
/// do costs a comparison or two, and letting a segment go costs its entries once; looking
/// often keeps each look's work (under the book's lock) to about a second's worth of calls.
pub const PRUNE_EVERY: TimeDelta = TimeDelta::seconds(1);

/// Where the simulator reads the time: the wall clock, or a test's.
pub type Clock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

pub fn wall_clock() -> Clock {
    Arc::new(crate::domain::now)
}

/// When a book last looked for segments to let go.
#[derive(Default)]
pub struct PruneTimer {
    last: Option<Timestamp>,
}

impl PruneTimer {
    /// Whether it is time to look again (the first call: yes); if so, counts this look.
    pub fn due(&mut self, now: Timestamp) -> bool {
        let due = self
            .last
            .is_none_or(|last| now - last >= PRUNE_EVERY || now < last);
        if due {
            self.last = Some(now);
        }
        due
    }
}

/// The heap bytes a kept value owns besides its own size (its strings' capacities).
pub trait HeapBytes {
    fn heap_bytes(&self) -> usize;
}

impl HeapBytes for String {
    fn heap_bytes(&self) -> usize {
        self.capacity()
    }
}

impl<T: HeapBytes> HeapBytes for Option<T> {
    fn heap_bytes(&self) -> usize {
        self.as_ref().map_or(0, T::heap_bytes)
    }
}

impl<T: HeapBytes, E: HeapBytes> HeapBytes for Result<T, E> {
    fn heap_bytes(&self) -> usize {
        match self {
            Ok(value) => value.heap_bytes(),
            Err(e) => e.heap_bytes(),
        }
    }
}

impl HeapBytes for crate::provider::ChargeUpdate {
    fn heap_bytes(&self) -> usize {
        self.id.heap_bytes() + self.reference.heap_bytes()
    }
}

impl HeapBytes for crate::provider::ProviderRefund {
    fn heap_bytes(&self) -> usize {
        self.id.heap_bytes()
            + self.charge.heap_bytes()
            + self.reference.heap_bytes()
            + self.failure_code.heap_bytes()
    }
}

impl HeapBytes for crate::provider::ProviderPayout {
    fn heap_bytes(&self) -> usize {
        self.id.heap_bytes()
            + self.currency.heap_bytes()
            + self.reference.heap_bytes()
            + self.failure_code.heap_bytes()
    }
}

impl HeapBytes for crate::provider::ProviderDispute {
    fn heap_bytes(&self) -> usize {
        self.id.heap_bytes()
    }
}

/// An upper estimate of the bytes a `BTreeMap` holds (its nodes are not visible): every
/// node at least 5 of its 11 entries full (with two words of links and counts), and inner
/// nodes (12 edges more) at most a quarter as many as the leaves.
pub fn btree_bytes<K, V>(map: &std::collections::BTreeMap<K, V>) -> usize {
    if map.is_empty() {
        return 0;
    }
    let leaves = map.len().div_ceil(5);
    let leaf = 16 + 11 * (size_of::<K>() + size_of::<V>());
    leaves * leaf + leaves.div_ceil(4) * (leaf + 12 * size_of::<usize>())
}

/// The bytes of a `HashMap`'s table (its own entries; what they point to is the caller's):
/// a power of two of buckets, at most 7/8 of them full, a control byte each and a group's
/// worth more.
pub fn hash_map_bytes<K, V, S>(map: &std::collections::HashMap<K, V, S>) -> usize {
    match map.capacity() {
        0 => 0,
        capacity => {
            let buckets = (capacity * 8 / 7).next_power_of_two();
            buckets * (size_of::<(K, V)>() + 1) + 16
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::provider::sim::{ChargeMove, Simulator};
    use crate::provider::{ChargeRequest, ProviderStatus, RefundRequest, SettlementQuery};

    /// A clock the test moves, and a simulator reading it.
    fn simulator() -> (Simulator, impl Fn(TimeDelta)) {
        let time = Arc::new(Mutex::new(crate::domain::now()));
        let read = time.clone();
        let clock: Clock = Arc::new(move || *read.lock().unwrap());
        let advance = move |by: TimeDelta| *time.lock().unwrap() += by;
        (Simulator::with_clock(clock), advance)
    }

    /// A charge as the service asks for one: its payment id is the key and the reference.
    fn charge(
        sim: &Simulator,
        key: &str,
        payment_method: &str,
        capture: bool,
    ) -> crate::provider::Charge {
        let request = ChargeRequest {
            amount: 5000,
            currency: "usd".into(),
            payment_method: payment_method.into(),
            reference: key.into(),
            capture,
        };
        sim.charge(key, &request)
    }

    fn payment_id() -> String {
        format!("pay_{}", uuid::Uuid::new_v4().simple())
    }

    fn refund(sim: &Simulator, key: &str, charge_id: &str) -> (ProviderStatus, Option<String>) {
        let request = RefundRequest {
            charge: charge_id.to_owned(),
            amount: 1,
            reference: key.to_owned(),
        };
        let refund = sim.refund(key, &request);
        (refund.status, refund.failure_code)
    }

    /// The references of every movement the report keeps, oldest first.
    fn report(sim: &Simulator) -> Vec<String> {
        let query = SettlementQuery {
            created_gte: crate::domain::now() - TimeDelta::days(365),
            created_lt: crate::domain::now() + TimeDelta::days(365),
            limit: 1000,
            starting_after: None,
        };
        let page = sim.settlement_page(&query).unwrap();
        assert!(!page.has_more);
        page.data.into_iter().map(|m| m.reference).collect()
    }

    /// What the simulator holds for an automatic charge that succeeded, as the service
    /// makes them: its record, its key (also its reference), the key's slot in the index and
    /// its movement in the settlement report, every container counted at its capacity
    /// (about 61 bytes: 21 of key, 4 of its end, 16 of record, 12 of movement, 6.5 of
    /// index; the index alone swings by 5 with how full its table is). The layout before (a
    /// 64-byte journal entry, the key and currency text, a 16-byte index slot, a 40-byte
    /// movement and its own copy of the reference) measured 242 bytes in this test.
    #[test]
    fn a_charge_costs_at_most_70_bytes() {
        let sim = Simulator::new();
        let empty = sim.memory_bytes();
        const CHARGES: usize = 100_000;
        for _ in 0..CHARGES {
            charge(&sim, &payment_id(), "pm_card_visa", true);
        }
        assert_eq!(sim.settlements.len(), CHARGES);
        let per_charge = (sim.memory_bytes() - empty) as f64 / CHARGES as f64;
        println!("{per_charge:.1} bytes per charge");
        assert!(per_charge <= 70.0, "{per_charge:.1} bytes per charge");
    }

    /// A key answers its first answer for the key window, then is new; the first charge is
    /// still kept (refundable by its id).
    #[test]
    fn a_key_is_answered_the_same_for_the_key_window_then_is_new() {
        let (sim, advance) = simulator();
        let first = charge(&sim, "pay_a", "pm_card_visa", true);
        advance(KEY_WINDOW - TimeDelta::minutes(1));
        assert_eq!(charge(&sim, "pay_a", "pm_card_visa", true), first);
        advance(SEGMENT_SPAN + PRUNE_EVERY + TimeDelta::minutes(1));
        let again = charge(&sim, "pay_a", "pm_card_visa", true);
        assert_ne!(
            again.id, first.id,
            "past the window the key is new: a second charge"
        );
        assert_eq!(sim.charges().len(), 2);
        assert_eq!(
            refund(&sim, "re_1", &first.id),
            (ProviderStatus::Succeeded, None)
        );
        assert_eq!(report(&sim), ["pay_a", "pay_a", "re_1"]);
    }

    /// Charges stay capturable and refundable, and movements in the report, for the
    /// retention; then they are unknown, and the charges kept keep their ids.
    #[test]
    fn records_are_kept_for_the_retention_then_let_go() {
        let (sim, advance) = simulator();
        let old = charge(&sim, "pay_old", "pm_card_visa", true);
        let held = charge(&sim, "pay_held", "pm_card_visa", false);
        let late = charge(&sim, "pay_late", "pm_card_visa", false);
        advance(RECORDS_KEPT - TimeDelta::hours(2));
        let recent = charge(&sim, "pay_recent", "pm_card_visa", true);
        let captured = sim.update_charge("cap_late", &late.id, ChargeMove::Capture(100));
        assert_eq!(captured.map(|c| c.reference), Ok("pay_late".to_owned()));
        assert_eq!(
            refund(&sim, "re_old", &old.id),
            (ProviderStatus::Succeeded, None)
        );
        assert_eq!(
            report(&sim),
            ["pay_old", "pay_recent", "pay_late", "re_old"]
        );

        advance(TimeDelta::hours(2) + SEGMENT_SPAN + PRUNE_EVERY);
        sim.prune();
        let gone = (ProviderStatus::Failed, Some("charge_not_found".to_owned()));
        assert_eq!(refund(&sim, "re_old_2", &old.id), gone);
        assert!(
            sim.update_charge("cap_held", &held.id, ChargeMove::Capture(1))
                .is_err()
        );
        assert_eq!(
            refund(&sim, "re_recent", &recent.id),
            (ProviderStatus::Succeeded, None)
        );
        let kept: Vec<_> = sim.charges().into_iter().map(|c| c.id).collect();
        assert_eq!(kept, [recent.id]);
        assert_eq!(
            report(&sim),
            ["pay_recent", "pay_late", "re_old", "re_recent"]
        );
    }

    /// A movement kept in the report keeps the charge it shows, even when the charge's own
    /// segment is old enough to go.
    #[test]
    fn the_report_keeps_the_charges_it_shows() {
        let (sim, advance) = simulator();
        charge(&sim, "pay_0", "pm_card_visa", true);
        for n in 1..SEGMENT_LEN {
            charge(&sim, &format!("pay_{n}"), "pm_card_declined", true);
        }
        advance(TimeDelta::minutes(50));
        charge(&sim, "pay_next", "pm_card_visa", true);
        advance(RECORDS_KEPT - TimeDelta::minutes(20));
        sim.prune();
        assert_eq!(
            report(&sim),
            ["pay_0", "pay_next"],
            "both movements in one segment"
        );
        assert_eq!(sim.charges().len(), SEGMENT_LEN + 1);
        advance(SEGMENT_SPAN);
        sim.prune();
        assert!(report(&sim).is_empty());
        assert!(sim.charges().is_empty());
    }

    /// Under a steady load the books stop growing once the retention is full.
    #[test]
    fn memory_stops_growing() {
        let (sim, advance) = simulator();
        let mut per_day = Vec::new();
        for _day in 0..14 {
            for _hour in 0..24 {
                for _ in 0..50 {
                    let key = payment_id();
                    let paid = charge(&sim, &key, "pm_card_visa", true);
                    refund(&sim, &key.replace("pay_", "re_"), &paid.id);
                }
                advance(TimeDelta::hours(1));
            }
            per_day.push(sim.memory_bytes());
        }
        let full = per_day[RECORDS_KEPT.num_days() as usize + 1];
        for (day, bytes) in per_day.iter().enumerate().skip(10) {
            let ratio = *bytes as f64 / full as f64;
            assert!(
                (0.9..1.1).contains(&ratio),
                "day {day}: {bytes} bytes, {full} when full"
            );
        }
        let kept = sim.charges().len();
        assert!(
            kept <= (RECORDS_KEPT.num_hours() as usize + 2) * 50,
            "{kept} charges kept"
        );
    }
}
