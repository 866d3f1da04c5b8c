//! API keys → merchants: the cache of keys that authenticated recently. The HTTP side (the
//! `Authenticated` extractor) is `routes::authenticate`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex as TurnLock, OwnedMutexGuard};

pub use crate::db::merchants::Merchant;

/// How long a key that authenticated is trusted without asking the database again.
///
/// A revoked key must answer 401 on every instance within 5 s (docs/settings.md). Instances
/// share nothing but the database, and SQLite has no way to push a change to them, so each
/// instance re-reads a key from the database at most this long after its last read: one
/// indexed lookup per key per 2 s per instance, while every other request of a busy key
/// costs only a map read. The freshness is counted from *before* the lookup was sent, so
/// an entry never outlives the database state it was read from by more than this, however
/// slow the lookup; 2 s leaves room under the 5 s promise for requests that had already
/// authenticated when the key was revoked.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(2);

struct CachedKey {
    merchant: Merchant,
    fresh_until: Instant,
}

/// The keys being looked up, each with the lock its lookups take turns on and how the last
/// of them missed.
type Lookups = Arc<Mutex<HashMap<String, Arc<TurnLock<Option<Miss>>>>>>;

/// Keys that authenticated recently, by hash (see [`KEY_CACHE_TTL`]).
#[derive(Default, Clone)]
pub struct ApiKeyCache {
    keys: Arc<RwLock<HashMap<String, CachedKey>>>,
    lookups: Lookups,
}

impl ApiKeyCache {
    const MAX_ENTRIES: usize = 10_000;

    /// The merchant of the key with this hash: from the cache while the entry is fresh, else
    /// from `look_up` (the database), cached if found.
    ///
    /// One lookup per key at a time: requests that miss together (a cold instance under
    /// load, a busy key's entry going stale) wait for the first lookup and take its answer,
    /// instead of each sending the same query and each holding a blocking thread while it
    /// waits for a connection; a storm on a cold instance started a hundred of them. Only a
    /// lookup that began after a request arrived answers it (the key may have been created
    /// or revoked before). A lookup that failed (the database away) fails every request
    /// that was waiting for it, at once: each asking again in turn would stack one
    /// checkout timeout on another (6–9 s to a 503 under a steady stream of requests, where
    /// the contract allows 5).
    pub async fn merchant<E, F, Fut>(
        &self,
        key_hash: &str,
        look_up: F,
    ) -> Result<Option<Merchant>, E>
    where
        E: From<LookupFailed>,
        F: FnOnce(String) -> Fut,
        Fut: Future<Output = Result<Option<Merchant>, E>>,
    {
        let arrived = Instant::now();
        if let Some(merchant) = self.get(key_hash, arrived) {
            return Ok(Some(merchant));
        }
        let mut turn = self.turn(key_hash).await;
        // Freshness counts from before the lookup is sent (see KEY_CACHE_TTL).
        let asked_at = Instant::now();
        if let Some(merchant) = self.get(key_hash, asked_at) {
            return Ok(Some(merchant));
        }
        match turn.last_miss() {
            Some(Miss::NotFound { asked_at }) if asked_at >= arrived => return Ok(None),
            Some(Miss::Failed { ended_at }) if ended_at >= arrived => {
                return Err(LookupFailed.into());
            }
            _ => {}
        }
        let found = look_up(key_hash.to_owned()).await;
        match &found {
            Ok(Some(merchant)) => {
                self.insert(
                    key_hash.to_owned(),
                    merchant.clone(),
                    asked_at + KEY_CACHE_TTL,
                );
            }
            Ok(None) => turn.missed(Miss::NotFound { asked_at }),
            Err(_) => turn.missed(Miss::Failed {
                ended_at: Instant::now(),
            }),
        }
        found
    }

    /// Waits until no other lookup of this key runs; the lookup is this caller's until the
    /// returned turn is dropped (also when the caller gives up waiting).
    async fn turn(&self, key_hash: &str) -> Turn {
        let lock = self
            .lookups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key_hash.to_owned())
            .or_default()
            .clone();
        let mut turn = Turn {
            lookups: self.lookups.clone(),
            key_hash: key_hash.to_owned(),
            lock,
            held: None,
        };
        turn.held = Some(turn.lock.clone().lock_owned().await);
        turn
    }

    fn get(&self, key_hash: &str, now: Instant) -> Option<Merchant> {
        let keys = self.keys.read().ok()?;
        let cached = keys.get(key_hash)?;
        (now < cached.fresh_until).then(|| cached.merchant.clone())
    }

    fn insert(&self, key_hash: String, merchant: Merchant, fresh_until: Instant) {
        if let Ok(mut keys) = self.keys.write() {
            if keys.len() >= Self::MAX_ENTRIES {
                let now = Instant::now();
                keys.retain(|_, cached| now < cached.fresh_until);
                if keys.len() >= Self::MAX_ENTRIES {
                    keys.clear();
                }
            }
            keys.insert(
                key_hash,
                CachedKey {
                    merchant,
                    fresh_until,
                },
            );
        }
    }
}

/// A lookup of a key that found no merchant.
#[derive(Clone, Copy)]
enum Miss {
    /// The key is unknown (or revoked) as of when the lookup was sent.
    NotFound { asked_at: Instant },
    /// The lookup failed (the database away) at this time.
    Failed { ended_at: Instant },
}

/// The key lookup a request waited for failed: it fails too (with the database away, a
/// 503).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the key lookup this request waited for failed")]
pub struct LookupFailed;

impl From<LookupFailed> for crate::db::DbError {
    fn from(failed: LookupFailed) -> Self {
        Self::Unavailable(failed.to_string())
    }
}

/// A caller's turn to look a key up, with how the previous turn's lookup missed; the last
/// one out forgets the key's lock.
struct Turn {
    lookups: Lookups,
    key_hash: String,
    lock: Arc<TurnLock<Option<Miss>>>,
    held: Option<OwnedMutexGuard<Option<Miss>>>,
}

impl Turn {
    fn last_miss(&self) -> Option<Miss> {
        self.held.as_deref().copied().flatten()
    }

    fn missed(&mut self, miss: Miss) {
        if let Some(held) = self.held.as_deref_mut() {
            *held = Some(miss);
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.held = None;
        let mut lookups = self.lookups.lock().unwrap_or_else(PoisonError::into_inner);
        // Clones are only taken under this lock: two left (the map's and this one) means
        // nobody else waits for this key.
        if Arc::strong_count(&self.lock) == 2 {
            lookups.remove(&self.key_hash);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures_util::future::join_all;

    use super::*;

    fn merchant() -> Merchant {
        Merchant {
            id: "mer_1".to_owned(),
            name: "one".to_owned(),
        }
    }

    /// What a failed test lookup answers.
    #[derive(Debug)]
    enum Failed {
        /// The lookup itself.
        Own,
        /// The one the caller waited for.
        Waited,
    }

    impl From<LookupFailed> for Failed {
        fn from(_: LookupFailed) -> Self {
            Self::Waited
        }
    }

    /// Counts lookups; each takes a while, as a database query waiting for a connection.
    async fn look_up(
        lookups: &AtomicUsize,
        answer: Result<Option<Merchant>, Failed>,
    ) -> Result<Option<Merchant>, Failed> {
        lookups.fetch_add(1, Ordering::SeqCst);
        actix_web::rt::time::sleep(Duration::from_millis(20)).await;
        answer
    }

    fn no_lookup_lock_left(cache: &ApiKeyCache) -> bool {
        let lookups = cache.lookups.lock().unwrap_or_else(PoisonError::into_inner);
        lookups.is_empty()
    }

    #[actix_web::test]
    async fn requests_that_miss_together_look_the_key_up_once() {
        let (cache, lookups) = (ApiKeyCache::default(), AtomicUsize::new(0));
        let answers = join_all(
            (0..200).map(|_| cache.merchant("hash_1", |_| look_up(&lookups, Ok(Some(merchant()))))),
        )
        .await;
        assert!(
            answers
                .iter()
                .all(|a| matches!(a, Ok(Some(m)) if m.id == "mer_1"))
        );
        assert_eq!(lookups.load(Ordering::SeqCst), 1);
        // Nobody waits any more: the key's lock is forgotten.
        assert!(no_lookup_lock_left(&cache));

        // Other keys are looked up on their own, not behind this one.
        let other = cache.merchant("hash_2", |_| look_up(&lookups, Ok(Some(merchant()))));
        assert!(other.await.is_ok_and(|m| m.is_some()));
        assert_eq!(lookups.load(Ordering::SeqCst), 2);
    }

    #[actix_web::test]
    async fn an_unknown_key_is_answered_by_a_lookup_that_began_after_the_request_arrived() {
        let (cache, lookups) = (ApiKeyCache::default(), AtomicUsize::new(0));
        let answers =
            join_all((0..6).map(|_| cache.merchant("nobody", |_| look_up(&lookups, Ok(None)))))
                .await;
        assert!(answers.iter().all(|a| matches!(a, Ok(None))));
        // The first lookup began before the others arrived (the key may have been created
        // since), so it answers only its own request; the second answers all the rest.
        let asked = lookups.load(Ordering::SeqCst);
        assert!((1..=2).contains(&asked), "{asked} lookups");
    }

    #[actix_web::test]
    async fn a_failed_lookup_fails_the_requests_that_waited_for_it_at_once() {
        let (cache, lookups) = (ApiKeyCache::default(), AtomicUsize::new(0));
        let answers = join_all(
            (0..10).map(|_| cache.merchant("hash_1", |_| look_up(&lookups, Err(Failed::Own)))),
        )
        .await;
        // One lookup's wait, not ten in turn (nor ten at once, each its own timeout).
        assert_eq!(lookups.load(Ordering::SeqCst), 1);
        assert!(matches!(answers[0], Err(Failed::Own)));
        assert!(
            answers[1..]
                .iter()
                .all(|a| matches!(a, Err(Failed::Waited)))
        );
        assert!(no_lookup_lock_left(&cache));

        // A request that arrives after the failure asks again.
        let later = cache.merchant("hash_1", |_| look_up(&lookups, Ok(Some(merchant()))));
        assert!(later.await.is_ok_and(|m| m.is_some()));
        assert_eq!(lookups.load(Ordering::SeqCst), 2);
    }

    #[actix_web::test]
    async fn a_caller_that_gives_up_frees_its_turn() {
        let (cache, lookups) = (ApiKeyCache::default(), AtomicUsize::new(0));
        // A caller dropped mid-lookup (its client hung up) neither blocks the next one nor
        // leaves its lock behind. Its lookup never ends, so it gives up however late the
        // runtime gets to it (a lookup that ended after 20 ms could beat the 5 ms timeout on
        // a busy machine).
        let gave_up = actix_web::rt::time::timeout(
            Duration::from_millis(5),
            cache.merchant("hash_1", |_| {
                std::future::pending::<Result<Option<Merchant>, Failed>>()
            }),
        )
        .await;
        assert!(gave_up.is_err());
        assert!(no_lookup_lock_left(&cache));
        let next = cache.merchant("hash_1", |_| look_up(&lookups, Ok(Some(merchant()))));
        assert!(next.await.is_ok_and(|m| m.is_some()));
    }
}
