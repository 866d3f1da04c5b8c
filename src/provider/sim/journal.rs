//! The simulated provider's memory: the first answer to each idempotency key, kept in
//! segments of time that are let go whole once old (see `retention.rs` for how long).
//!
//! A key is kept in its segment's one buffer (packed, kept_key.rs), found again through one
//! table of 4-byte positions, so a charge's key costs its own bytes and about 4 more (not a
//! `String` per key). Positions count every entry ever recorded: an entry keeps its position
//! when the segments before it are let go, so ids made from positions stay valid.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use super::kept_key::{KeptKey, text_of};
use super::retention::{HeapBytes, SEGMENT_LEN, SEGMENT_SPAN};
use crate::domain::Timestamp;

/// Entries recorded one after another, over at most [`SEGMENT_SPAN`] of time.
struct Segment<T> {
    /// The position of its first entry.
    first: u64,
    opened: Timestamp,
    /// When its newest entry was recorded.
    newest: Timestamp,
    values: Vec<T>,
    /// Where each entry's key ends in `keys` (it starts where the one before ends).
    key_ends: Vec<u32>,
    /// The keys, each in the form it is kept in ([`KeptKey`]).
    keys: Vec<u8>,
}

impl<T> Segment<T> {
    /// A segment after `before`, sized as it ended (the next one is likely as big).
    fn after(before: Option<&Segment<T>>, first: u64, now: Timestamp) -> Self {
        let (len, text) = before.map_or((0, 0), |s| (s.values.len(), s.keys.len()));
        let len = len.next_power_of_two().clamp(16, SEGMENT_LEN);
        Self {
            first,
            opened: now,
            newest: now,
            values: Vec::with_capacity(len),
            key_ends: Vec::with_capacity(len),
            keys: Vec::with_capacity(text),
        }
    }

    fn end(&self) -> u64 {
        self.first + self.values.len() as u64
    }

    /// Whether an entry with a key of `key_len` bytes recorded `now` starts the next segment.
    fn is_full(&self, key_len: usize, now: Timestamp) -> bool {
        self.values.len() >= SEGMENT_LEN
            || now - self.opened >= SEGMENT_SPAN
            || now < self.opened
            || self.keys.len() + key_len > u32::MAX as usize
    }

    /// Gives back what it reserved and will not use (a full segment reserved nothing more).
    fn close(&mut self) {
        self.values.shrink_to_fit();
        self.key_ends.shrink_to_fit();
        self.keys.shrink_to_fit();
    }

    fn key(&self, at: usize) -> Option<&[u8]> {
        let start = match at {
            0 => 0,
            _ => *self.key_ends.get(at - 1)? as usize,
        };
        self.keys.get(start..*self.key_ends.get(at)? as usize)
    }
}

/// The first answer to each idempotency key, in the order they came, for as long as they
/// are kept.
pub struct Journal<T, S = RandomState> {
    segments: VecDeque<Segment<T>>,
    /// The position the next entry gets.
    next: u64,
    /// The entries before this position are still kept, but their keys were forgotten.
    remembered_from: u64,
    /// The remembered keys' positions (their low 32 bits: fewer than 2³² entries are ever
    /// remembered at once), by the hash of the key; a lookup compares the keys themselves.
    index: HashTable<u32>,
    hasher: S,
}

impl<T, S: Default> Default for Journal<T, S> {
    fn default() -> Self {
        Self {
            segments: VecDeque::new(),
            next: 0,
            remembered_from: 0,
            index: HashTable::new(),
            hasher: S::default(),
        }
    }
}

/// The segment of `position`, and where in it.
fn locate<T>(segments: &VecDeque<Segment<T>>, position: u64) -> Option<(usize, usize)> {
    let after = segments.partition_point(|s| s.first <= position);
    let which = after.checked_sub(1)?;
    let at = usize::try_from(position - segments[which].first).ok()?;
    (at < segments[which].values.len()).then_some((which, at))
}

fn key_in<T>(segments: &VecDeque<Segment<T>>, position: u64) -> Option<&[u8]> {
    let (which, at) = locate(segments, position)?;
    segments[which].key(at)
}

/// The remembered position whose low 32 bits are `low`.
fn widen(remembered_from: u64, low: u32) -> u64 {
    remembered_from + u64::from(low.wrapping_sub(remembered_from as u32))
}

impl<T, S: BuildHasher> Journal<T, S> {
    /// The position of the answer to `key`, if it is remembered.
    pub fn position(&self, key: &str) -> Option<u64> {
        let (from, key) = (self.remembered_from, KeptKey::of(key));
        let key = key.bytes();
        let low = self.index.find(self.hasher.hash_one(key), |&low| {
            key_in(&self.segments, widen(from, low)) == Some(key)
        })?;
        Some(widen(from, *low))
    }

    /// Records the answer to a key seen for the first time (see [`Journal::position`]),
    /// `now`; returns its position.
    pub fn record(&mut self, key: &str, value: T, now: Timestamp) -> u64 {
        let position = self.next;
        let key = KeptKey::of(key);
        let key = key.bytes();
        if self
            .segments
            .back()
            .is_none_or(|s| s.is_full(key.len(), now))
        {
            if let Some(full) = self.segments.back_mut() {
                full.close();
            }
            let segment = Segment::after(self.segments.back(), position, now);
            self.segments.push_back(segment);
        }
        let Self {
            segments,
            index,
            hasher,
            remembered_from,
            ..
        } = self;
        let Some(segment) = segments.back_mut() else {
            unreachable!("a segment was just made");
        };
        segment.keys.extend_from_slice(key);
        segment.key_ends.push(segment.keys.len() as u32);
        segment.values.push(value);
        segment.newest = segment.newest.max(now);
        let from = *remembered_from;
        index.insert_unique(hasher.hash_one(key), position as u32, |&low| {
            hasher.hash_one(key_in(segments, widen(from, low)).unwrap_or_default())
        });
        self.next += 1;
        position
    }

    pub fn at(&self, position: u64) -> Option<&T> {
        let (which, at) = locate(&self.segments, position)?;
        self.segments[which].values.get(at)
    }

    pub fn at_mut(&mut self, position: u64) -> Option<&mut T> {
        let (which, at) = locate(&self.segments, position)?;
        self.segments[which].values.get_mut(at)
    }

    /// The key of the entry at `position` (kept as long as the entry, remembered or not).
    pub fn key(&self, position: u64) -> Option<Cow<'_, str>> {
        text_of(key_in(&self.segments, position)?)
    }

    /// The oldest position still kept.
    pub fn first(&self) -> u64 {
        self.segments.front().map_or(self.next, |s| s.first)
    }

    /// The position the next entry will get.
    pub fn end(&self) -> u64 {
        self.next
    }

    /// A kept position whose low 32 bits are `low` (fewer than 2³² entries are kept).
    pub fn widen(&self, low: u32) -> u64 {
        widen(self.first(), low)
    }

    /// Every kept answer, in the order the keys came.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.segments.iter().flat_map(|s| s.values.iter())
    }

    /// Forgets the keys of the entries recorded before `cutoff`, a whole segment at a time:
    /// the same key again is then new. Their answers are kept.
    pub fn forget_keys_before(&mut self, cutoff: Timestamp) {
        let Some((first, _)) = locate(&self.segments, self.remembered_from) else {
            return;
        };
        let end = self
            .segments
            .iter()
            .skip(first)
            .take_while(|s| s.newest < cutoff)
            .last()
            .map(Segment::end);
        if let Some(end) = end {
            self.forget_keys_up_to(end);
        }
    }

    /// Forgets the keys of the positions before `end`.
    fn forget_keys_up_to(&mut self, end: u64) {
        while self.remembered_from < end {
            let position = self.remembered_from;
            if let Some(key) = key_in(&self.segments, position)
                && let Ok(entry) = self
                    .index
                    .find_entry(self.hasher.hash_one(key), |&low| low == position as u32)
            {
                entry.remove();
            }
            self.remembered_from += 1;
        }
        // The table does not shrink by itself: after a burst it would keep its size.
        if self.index.capacity() > 4 * self.index.len() + 64 {
            let Self {
                segments,
                index,
                hasher,
                remembered_from,
                ..
            } = self;
            let from = *remembered_from;
            index.shrink_to(0, |&low| {
                hasher.hash_one(key_in(segments, widen(from, low)).unwrap_or_default())
            });
        }
    }

    /// Lets go of the segments whose every entry was recorded before `cutoff` and lies
    /// before `keep_from` (someone else still refers to the entries from there on); returns
    /// the oldest position still kept.
    pub fn drop_before(&mut self, cutoff: Timestamp, keep_from: u64) -> u64 {
        while let Some(oldest) = self.segments.front() {
            let end = oldest.end();
            if oldest.newest >= cutoff || end > keep_from {
                break;
            }
            self.forget_keys_up_to(end);
            self.segments.pop_front();
        }
        self.first()
    }

    /// How many answers are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        (self.next - self.first()) as usize
    }

    /// How many keys are remembered.
    #[cfg(test)]
    pub fn remembered(&self) -> usize {
        self.index.len()
    }
}

impl<T: HeapBytes, S> Journal<T, S> {
    /// The bytes it holds: every container's capacity, the index's allocation and what its
    /// values own (walks every value: for tests and diagnostics).
    pub fn memory_bytes(&self) -> usize {
        let segments = self.segments.iter().map(|s| {
            s.values.capacity() * size_of::<T>()
                + s.values.iter().map(T::heap_bytes).sum::<usize>()
                + s.key_ends.capacity() * size_of::<u32>()
                + s.keys.capacity()
        });
        self.segments.capacity() * size_of::<Segment<T>>()
            + self.index.allocation_size()
            + segments.sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::now;

    impl HeapBytes for usize {
        fn heap_bytes(&self) -> usize {
            0
        }
    }

    #[test]
    fn answers_are_found_by_their_exact_key() {
        let mut journal = Journal::<usize>::default();
        let t = now();
        assert_eq!(journal.record("pay_a", 1, t), 0);
        assert_eq!(journal.record("pay_b", 2, t), 1);
        assert_eq!(journal.position("pay_a"), Some(0));
        assert_eq!(journal.position("pay_b"), Some(1));
        assert_eq!(journal.position("pay_"), None);
        assert_eq!(journal.position("pay_ab"), None);
        assert_eq!(journal.key(1).as_deref(), Some("pay_b"));
        assert_eq!(journal.values().copied().collect::<Vec<_>>(), [1, 2]);
    }

    /// Gives every key the same hash.
    #[derive(Default)]
    struct Collide;
    impl std::hash::Hasher for Collide {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    #[test]
    fn keys_with_the_same_hash_stay_apart() {
        let mut journal = Journal::<usize, std::hash::BuildHasherDefault<Collide>>::default();
        let t = now();
        for i in 0..50 {
            assert_eq!(journal.position(&format!("k{i}")), None);
            journal.record(&format!("k{i}"), i, t);
        }
        for i in 0..50 {
            let at = journal.position(&format!("k{i}"));
            assert_eq!(at.and_then(|at| journal.at(at)), Some(&i));
        }
        assert_eq!(journal.position("k50"), None);
    }

    /// Keys are forgotten and entries let go a segment at a time, oldest first; positions
    /// stay what they were.
    #[test]
    fn old_segments_forget_their_keys_then_go() {
        let mut journal = Journal::<usize>::default();
        let t0 = now();
        let hour = |h: i64| t0 + chrono::TimeDelta::hours(h);
        for i in 0..SEGMENT_LEN + 10 {
            journal.record(&format!("k{i}"), i, t0);
        }
        journal.record("later", 1, hour(2));
        assert_eq!(journal.segments.len(), 3, "full, then a new hour");

        journal.forget_keys_before(hour(1));
        assert_eq!(journal.position("k0"), None, "forgotten");
        assert_eq!(journal.position(&format!("k{SEGMENT_LEN}")), None);
        assert_eq!(journal.position("later"), Some(SEGMENT_LEN as u64 + 10));
        assert_eq!(journal.remembered(), 1);
        assert_eq!(journal.at(0), Some(&0), "answers are kept");
        assert_eq!(journal.key(5).as_deref(), Some("k5"));

        assert_eq!(
            journal.drop_before(hour(1), 100),
            0,
            "entry 100 is still used"
        );
        assert_eq!(
            journal.drop_before(hour(1), u64::MAX),
            SEGMENT_LEN as u64 + 10
        );
        assert_eq!((journal.at(0), journal.key(5)), (None, None));
        assert_eq!(journal.len(), 1);
        assert_eq!(journal.at(SEGMENT_LEN as u64 + 10), Some(&1));
        assert_eq!(journal.record("k0", 7, hour(2)), SEGMENT_LEN as u64 + 11);
        assert_eq!(journal.position("k0"), Some(SEGMENT_LEN as u64 + 11), "new");
    }

    /// A segment is let go whole: its memory with it.
    #[test]
    fn memory_goes_with_the_segments() {
        let mut journal = Journal::<usize>::default();
        let t0 = now();
        for i in 0..3 * SEGMENT_LEN {
            journal.record(&format!("pay_{i:032x}"), i, t0);
        }
        let full = journal.memory_bytes();
        let later = t0 + chrono::TimeDelta::hours(2);
        journal.record("pay_new", 0, later);
        journal.drop_before(later, u64::MAX);
        assert_eq!(journal.len(), 1);
        assert!(
            journal.memory_bytes() < full / 3,
            "{}",
            journal.memory_bytes()
        );
    }
}
