//! The simulator's settlement report: every movement of money it made and still keeps
//! (retention.rs), in the order it made them, read in pages by time window
//! (`GET /v1/settlements`).
//!
//! A charge's movement made with the charge (an automatic charge that succeeded: most of
//! them) keeps no text of its own: it shows the charge as the ledger keeps it, whose
//! reference is its key's text. Such movements come in the order of the charges' positions,
//! so the oldest one kept says which charges the ledger must keep for the report.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use super::retention::{Clock, PruneTimer, RECORDS_KEPT, SEGMENT_LEN, SEGMENT_SPAN, wall_clock};
use crate::domain::Timestamp;
use crate::provider::{MovementKind, SettlementMovement, SettlementPage, SettlementQuery};

/// One movement as kept, in 12 bytes.
#[derive(Clone, Copy)]
struct Kept {
    /// Microseconds after its segment's start (a segment spans less than 2³² of them).
    after: u32,
    /// The low 32 bits of its charge's position in the ledger when it shows its charge,
    /// else where its own record is in the segment's `own`.
    of: u32,
    kind: MovementKind,
    shows_charge: bool,
}

/// A movement that keeps its own reference, amount and currency: 16 bytes and the text.
struct Own {
    amount: i64,
    /// Where its reference ends in the segment's `references` (it starts where the one
    /// before ends).
    reference_end: u32,
    currency: [u8; 3],
}

/// What a charge's movement shows of the charge, read from the ledger.
pub struct SharedCharge<'a> {
    pub reference: std::borrow::Cow<'a, str>,
    pub amount: i64,
    pub currency: &'a str,
}

/// Movements made one after another over at most [`SEGMENT_SPAN`].
struct Segment {
    /// The position of its first movement.
    first: u64,
    start: Timestamp,
    newest: Timestamp,
    moves: Vec<Kept>,
    own: Vec<Own>,
    references: String,
    /// The position of the charge its first charge-showing movement shows.
    first_shown: Option<u64>,
}

impl Segment {
    fn after(before: Option<&Segment>, first: u64, now: Timestamp) -> Self {
        let (moves, own, text) = before.map_or((0, 0, 0), |s| {
            (s.moves.len(), s.own.len(), s.references.len())
        });
        let size = |n: usize| n.next_power_of_two().clamp(16, SEGMENT_LEN);
        Self {
            first,
            start: now,
            newest: now,
            moves: Vec::with_capacity(size(moves)),
            own: Vec::with_capacity(if own == 0 { 0 } else { size(own) }),
            references: String::with_capacity(text),
            first_shown: None,
        }
    }

    fn is_full(&self, reference_len: usize, now: Timestamp) -> bool {
        self.moves.len() >= SEGMENT_LEN
            || now - self.start >= SEGMENT_SPAN
            || self.references.len() + reference_len > u32::MAX as usize
    }

    fn close(&mut self) {
        self.moves.shrink_to_fit();
        self.own.shrink_to_fit();
        self.references.shrink_to_fit();
    }

    fn end(&self) -> u64 {
        self.first + self.moves.len() as u64
    }

    fn at(&self, kept: &Kept) -> Timestamp {
        self.start + chrono::TimeDelta::microseconds(i64::from(kept.after))
    }

    /// The movement `kept` as the report shows it (`None`: a charge the ledger no longer
    /// keeps, which the ledger's pruning does not let happen).
    fn movement<'a>(
        &self,
        kept: &Kept,
        id: String,
        charges: &impl Fn(u32) -> Option<SharedCharge<'a>>,
    ) -> Option<SettlementMovement> {
        let created_at = self.at(kept);
        if kept.shows_charge {
            let charge = charges(kept.of)?;
            return Some(SettlementMovement {
                id,
                kind: kept.kind,
                reference: charge.reference.into_owned(),
                amount: charge.amount,
                currency: charge.currency.to_owned(),
                created_at,
            });
        }
        let at = kept.of as usize;
        let own = self.own.get(at)?;
        let start = match at {
            0 => 0,
            _ => self.own.get(at - 1)?.reference_end as usize,
        };
        Some(SettlementMovement {
            id,
            kind: kept.kind,
            reference: self
                .references
                .get(start..own.reference_end as usize)?
                .to_owned(),
            amount: own.amount,
            currency: String::from_utf8_lossy(&own.currency).trim().to_owned(),
            created_at,
        })
    }
}

#[derive(Default)]
struct Report {
    segments: VecDeque<Segment>,
    /// The position the next movement gets.
    next: u64,
    prune: PruneTimer,
}

impl Report {
    /// The segment of the next movement, made `now` (at the earliest, the newest one's
    /// time: the report is in time order even if the clock steps back).
    fn segment_for(&mut self, reference_len: usize, now: Timestamp) -> (&mut Segment, Timestamp) {
        let now = self.segments.back().map_or(now, |s| now.max(s.newest));
        if self.prune.due(now) {
            self.drop_before(now - RECORDS_KEPT);
        }
        if self
            .segments
            .back()
            .is_none_or(|s| s.is_full(reference_len, now))
        {
            if let Some(full) = self.segments.back_mut() {
                full.close();
            }
            let segment = Segment::after(self.segments.back(), self.next, now);
            self.segments.push_back(segment);
        }
        self.next += 1;
        let Some(segment) = self.segments.back_mut() else {
            unreachable!("a segment was just made");
        };
        segment.newest = now;
        (segment, now)
    }

    fn drop_before(&mut self, cutoff: Timestamp) {
        while self.segments.front().is_some_and(|s| s.newest < cutoff) {
            self.segments.pop_front();
        }
    }

    fn first(&self) -> u64 {
        self.segments.front().map_or(self.next, |s| s.first)
    }

    /// The position of the first movement made at or after `t`.
    fn first_since(&self, t: Timestamp) -> u64 {
        let which = self.segments.partition_point(|s| s.newest < t);
        match self.segments.get(which) {
            None => self.next,
            Some(s) => s.first + s.moves.partition_point(|m| s.at(m) < t) as u64,
        }
    }
}

/// Every movement the simulator made and keeps, oldest first (recorded under one lock, with
/// the time taken under it, so the order is the time order).
pub struct Settlements {
    report: Mutex<Report>,
    /// Random for each simulator, so that movement ids of another process never repeat.
    prefix: u32,
    clock: Clock,
}

impl Default for Settlements {
    fn default() -> Self {
        Self::with_clock(wall_clock())
    }
}

impl Settlements {
    /// A report that reads the time from `clock`.
    pub fn with_clock(clock: Clock) -> Self {
        Self {
            report: Mutex::default(),
            prefix: (uuid::Uuid::new_v4().as_u128() >> 96) as u32,
            clock,
        }
    }

    fn report(&self) -> MutexGuard<'_, Report> {
        // Every change is whole before the next can see it: a poisoned lock holds whole
        // movements.
        self.report.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one movement of money, now.
    pub fn record(&self, kind: MovementKind, reference: &str, amount: i64, currency: &str) {
        let mut code = [b' '; 3];
        for (slot, byte) in code.iter_mut().zip(currency.bytes()) {
            *slot = byte;
        }
        let mut report = self.report();
        let (segment, at) = report.segment_for(reference.len(), (self.clock)());
        segment.references.push_str(reference);
        let of = segment.own.len() as u32;
        segment.own.push(Own {
            amount,
            reference_end: segment.references.len() as u32,
            currency: code,
        });
        let after = (at - segment.start).num_microseconds().unwrap_or(0) as u32;
        segment.moves.push(Kept {
            after,
            of,
            kind,
            shows_charge: false,
        });
    }

    /// Records, now, the movement of the charge the ledger has at `position`, made with it:
    /// it shows the charge as the ledger keeps it. Such calls come in position order.
    pub(super) fn record_charge(&self, position: u64) {
        let mut report = self.report();
        let (segment, at) = report.segment_for(0, (self.clock)());
        segment.first_shown.get_or_insert(position);
        let after = (at - segment.start).num_microseconds().unwrap_or(0) as u32;
        segment.moves.push(Kept {
            after,
            of: position as u32,
            kind: MovementKind::Charge,
            shows_charge: true,
        });
    }

    /// Lets go of the movements older than [`RECORDS_KEPT`], a segment at a time; returns
    /// the position of the oldest charge a kept movement shows (`u64::MAX`: none).
    pub(super) fn prune(&self, now: Timestamp) -> u64 {
        let mut report = self.report();
        report.drop_before(now - RECORDS_KEPT);
        report
            .segments
            .iter()
            .find_map(|s| s.first_shown)
            .unwrap_or(u64::MAX)
    }

    fn id(&self, position: u64) -> String {
        format!("mv_{:08x}{position:012}", self.prefix)
    }

    fn position_of(&self, id: &str) -> Option<u64> {
        let rest = id.strip_prefix("mv_")?;
        let (prefix, position) = rest.split_at_checked(8)?;
        (u32::from_str_radix(prefix, 16).ok()? == self.prefix)
            .then(|| position.parse().ok())
            .flatten()
    }

    /// A page of the movements made in `[created_gte, created_lt)`, oldest first, after
    /// `starting_after` (a movement id of this report; one let go already reads from the
    /// oldest kept). `charges` shows the ledger's charge by the low 32 bits of its position.
    /// `None`: `starting_after` is not an id of this report.
    pub fn page<'a>(
        &self,
        query: &SettlementQuery,
        charges: impl Fn(u32) -> Option<SharedCharge<'a>>,
    ) -> Option<SettlementPage> {
        let report = self.report();
        let from = report.first_since(query.created_gte);
        let start = match &query.starting_after {
            None => from,
            Some(id) => (self.position_of(id)?.saturating_add(1)).max(from),
        };
        let limit = query.limit.clamp(1, 1000);
        let mut data = Vec::new();
        let which = report.segments.partition_point(|s| s.end() <= start);
        for segment in report.segments.range(which..) {
            let skip = start.saturating_sub(segment.first) as usize;
            for (at, kept) in segment.moves.iter().enumerate().skip(skip) {
                if segment.at(kept) >= query.created_lt {
                    return Some(SettlementPage {
                        data,
                        has_more: false,
                    });
                }
                if data.len() == limit {
                    return Some(SettlementPage {
                        data,
                        has_more: true,
                    });
                }
                let id = self.id(segment.first + at as u64);
                data.extend(segment.movement(kept, id, &charges));
            }
        }
        Some(SettlementPage {
            data,
            has_more: false,
        })
    }

    /// How many movements are kept.
    pub fn len(&self) -> usize {
        let report = self.report();
        (report.next - report.first()) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes it holds: every container's capacity.
    pub fn memory_bytes(&self) -> usize {
        let report = self.report();
        let segments = report.segments.iter().map(|s| {
            s.moves.capacity() * size_of::<Kept>()
                + s.own.capacity() * size_of::<Own>()
                + s.references.capacity()
        });
        report.segments.capacity() * size_of::<Segment>() + segments.sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::now;

    fn query(limit: usize, starting_after: Option<String>) -> SettlementQuery {
        SettlementQuery {
            created_gte: now() - chrono::Duration::hours(1),
            created_lt: now() + chrono::Duration::hours(1),
            limit,
            starting_after,
        }
    }

    fn no_charges(_: u32) -> Option<SharedCharge<'static>> {
        None
    }

    #[test]
    fn movements_are_read_oldest_first_in_pages_within_the_window() {
        let report = Settlements::default();
        for n in 0..5 {
            report.record(MovementKind::Charge, &format!("pay_{n}"), 100 + n, "usd");
        }
        let first = report.page(&query(2, None), no_charges).unwrap();
        assert!(first.has_more);
        assert_eq!(first.data[0].reference, "pay_0");
        assert_eq!(first.data[0].currency, "usd");
        let second = report
            .page(&query(2, Some(first.data[1].id.clone())), no_charges)
            .unwrap();
        assert_eq!(second.data[0].reference, "pay_2");
        let last = report
            .page(&query(10, Some(second.data[1].id.clone())), no_charges)
            .unwrap();
        assert_eq!((last.data.len(), last.has_more), (1, false));
        assert!(
            report
                .page(&query(2, Some("mv_x".into())), no_charges)
                .is_none()
        );
        assert!(
            Settlements::default()
                .page(&query(2, Some(first.data[0].id.clone())), no_charges)
                .is_none(),
            "another report's id"
        );
        let mut past = query(10, None);
        past.created_lt = past.created_gte;
        assert!(report.page(&past, no_charges).unwrap().data.is_empty());
    }
}
