//! API keys → merchants: the cache of keys that authenticated recently. The HTTP side (the
//! `Authenticated` extractor) is `routes::authenticate`.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub use crate::db::merchants::Merchant;

/// How long a key that authenticated is trusted without asking the database again.
///
/// A revoked key must answer 401 on every instance within 5 s (CONTRACT §11). Instances
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

/// Keys that authenticated recently, by hash (see [`KEY_CACHE_TTL`]).
#[derive(Default, Clone)]
pub struct ApiKeyCache {
    keys: Arc<RwLock<HashMap<String, CachedKey>>>,
}

impl ApiKeyCache {
    const MAX_ENTRIES: usize = 10_000;

    pub(crate) fn get(&self, key_hash: &str, now: Instant) -> Option<Merchant> {
        let keys = self.keys.read().ok()?;
        let cached = keys.get(key_hash)?;
        (now < cached.fresh_until).then(|| cached.merchant.clone())
    }

    pub(crate) fn insert(&self, key_hash: String, merchant: Merchant, fresh_until: Instant) {
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
