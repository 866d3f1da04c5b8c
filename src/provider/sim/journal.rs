//! The simulated provider's memory: the first answer to each idempotency key, kept in a
//! handful of large allocations.
//!
//! A provider keeps every charge forever. Kept as one `String` per key and per field, a
//! simulator that took a few hundred thousand calls holds millions of small allocations
//! spread over the allocator's arenas, made between the short-lived ones of the requests
//! that caused them: the arenas then cannot give pages back, and the in-process provider
//! was most of the service's peak memory in the benchmark. Here the keys and every string of
//! the answers live in one growing text, the answers in one vector and the index in one
//! table, which grow by doubling.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

/// Where a string lives in a [`Journal`]'s text, in 8 bytes (a charge keeps three): the
/// start in the low 40 bits (1 TiB of text), the length in the high 24 (16 MiB; the strings
/// come from request bodies of at most 64 KiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Text(u64);

impl Text {
    const START_BITS: u32 = 40;
    const MAX_LEN: usize = (1 << (64 - Self::START_BITS)) - 1;

    fn new(start: usize, len: usize) -> Self {
        Self(((len as u64) << Self::START_BITS) | start as u64)
    }

    fn start(self) -> usize {
        (self.0 & ((1 << Self::START_BITS) - 1)) as usize
    }

    fn len(self) -> usize {
        (self.0 >> Self::START_BITS) as usize
    }
}

struct Entry<T> {
    key: Text,
    /// The entry recorded before this one whose key has the same hash.
    same_hash: Option<usize>,
    value: T,
}

/// The first answer to each idempotency key, in the order they came.
pub struct Journal<T, S = RandomState> {
    entries: Vec<Entry<T>>,
    text: String,
    /// Hash of a key → the newest entry with that hash; older ones are chained through
    /// [`Entry::same_hash`], and a lookup compares the keys themselves.
    index: HashMap<u64, usize>,
    hasher: S,
}

impl<T, S: Default> Default for Journal<T, S> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            text: String::new(),
            index: HashMap::new(),
            hasher: S::default(),
        }
    }
}

impl<T, S: BuildHasher> Journal<T, S> {
    /// Keeps `s` in the journal's text, for a value to refer to.
    pub fn keep(&mut self, s: &str) -> Text {
        debug_assert!(
            s.len() <= Text::MAX_LEN,
            "a string longer than a request body"
        );
        let start = self.text.len();
        self.text.push_str(s);
        Text::new(start, s.len())
    }

    pub fn text(&self, text: Text) -> &str {
        // Every `Text` was made by `keep` on this journal, whose text only grows.
        self.text
            .get(text.start()..text.start() + text.len())
            .unwrap_or("")
    }

    /// The position of the answer to `key`.
    pub fn position(&self, key: &str) -> Option<usize> {
        let mut at = self.index.get(&self.hasher.hash_one(key)).copied();
        while let Some(i) = at {
            let entry = &self.entries[i];
            if self.text(entry.key) == key {
                return Some(i);
            }
            at = entry.same_hash;
        }
        None
    }

    /// Records the answer to a key seen for the first time (see [`Journal::position`]);
    /// returns its position.
    pub fn record(&mut self, key: &str, value: T) -> usize {
        let key = self.keep(key);
        self.record_kept(key, value)
    }

    /// [`Journal::record`] for a key already kept (with [`Journal::keep`]), so that the value
    /// can refer to the same text.
    pub fn record_kept(&mut self, key: Text, value: T) -> usize {
        let hash = self.hasher.hash_one(self.text(key));
        let at = self.entries.len();
        let same_hash = self.index.insert(hash, at);
        self.entries.push(Entry {
            key,
            same_hash,
            value,
        });
        at
    }

    pub fn at(&self, position: usize) -> &T {
        &self.entries[position].value
    }

    pub fn at_mut(&mut self, position: usize) -> &mut T {
        &mut self.entries[position].value
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every answer, in the order the keys came.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|e| &e.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_found_by_their_exact_key() {
        let mut journal = Journal::<_>::default();
        let note = journal.keep("first");
        assert_eq!(journal.record("pay_a", (1, note)), 0);
        assert_eq!(journal.record("pay_b", (2, note)), 1);
        assert_eq!(journal.position("pay_a"), Some(0));
        assert_eq!(journal.position("pay_b"), Some(1));
        assert_eq!(journal.position("pay_"), None);
        assert_eq!(journal.position("pay_ab"), None);
        assert_eq!(journal.text(journal.at(1).1), "first");
        assert_eq!(journal.values().map(|v| v.0).collect::<Vec<_>>(), [1, 2]);
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
        for i in 0..50 {
            assert_eq!(journal.position(&format!("k{i}")), None);
            journal.record(&format!("k{i}"), i);
        }
        assert_eq!(journal.index.len(), 1, "all in one chain");
        for i in 0..50 {
            let at = journal.position(&format!("k{i}"));
            assert_eq!(at.map(|at| *journal.at(at)), Some(i));
        }
        assert_eq!(journal.position("k50"), None);
    }
}
