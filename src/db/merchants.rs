//! Merchants and their API keys (stored only as SHA-256 hashes).
//!
//! A merchant may hold several keys (rotation: create, switch, revoke). Each key has an id
//! (`key_…`, what operators list and revoke by), an optional label, the key's last 4
//! characters, and a revocation time; a revoked key stays in the table so it is listed,
//! and never authenticates again.

use diesel::prelude::*;

use super::error::DbError;
use super::pool::DbConnection;
use super::schema::{api_keys, merchants};
use crate::domain::{ApiKeyId, MerchantId, Timestamp, now, sha256_hex};

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = merchants)]
pub struct Merchant {
    pub id: String,
    pub name: String,
}

/// An API key as stored: everything but the key itself, which is not recoverable.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = api_keys)]
pub struct ApiKey {
    pub id: String,
    pub merchant_id: String,
    pub label: Option<String>,
    /// `None` for keys created before keys had ids: only their hash was ever stored.
    pub last4: Option<String>,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

pub fn hash_api_key(key: &str) -> String {
    sha256_hex(key.as_bytes())
}

/// The last 4 characters of a key, kept to tell keys apart in a listing. A short key would
/// give away too much of itself, so none is kept for keys under 16 characters (shorter
/// ones are refused as `BOOTSTRAP_API_KEY` anyway).
fn last4(key: &str) -> Option<String> {
    let chars: Vec<char> = key.chars().collect();
    (chars.len() >= 16).then(|| chars[chars.len() - 4..].iter().collect())
}

/// The merchant a key authenticates; `None` for an unknown or revoked key.
pub fn find_by_api_key(
    conn: &mut DbConnection,
    key_hash: &str,
) -> Result<Option<Merchant>, diesel::result::Error> {
    api_keys::table
        .inner_join(merchants::table)
        .filter(api_keys::key_hash.eq(key_hash))
        .filter(api_keys::revoked_at.is_null())
        .select(Merchant::as_select())
        .first(conn)
        .optional()
}

pub fn find_by_name(
    conn: &mut DbConnection,
    name: &str,
) -> Result<Option<Merchant>, diesel::result::Error> {
    merchants::table
        .filter(merchants::name.eq(name))
        .select(Merchant::as_select())
        .first(conn)
        .optional()
}

/// Finds or creates the merchant called `name`. Safe when several instances start at once:
/// a lost insert race is a unique violation, after which the winner's row is read.
pub fn ensure_merchant(conn: &mut DbConnection, name: &str) -> Result<Merchant, DbError> {
    if let Some(m) = find_by_name(conn, name)? {
        return Ok(m);
    }
    let id = MerchantId::generate().into_string();
    let inserted = diesel::insert_into(merchants::table)
        .values((
            merchants::id.eq(&id),
            merchants::name.eq(name),
            merchants::created_at.eq(now()),
        ))
        .execute(conn);
    match inserted.map_err(DbError::from) {
        Ok(_) => Ok(Merchant {
            id,
            name: name.to_owned(),
        }),
        Err(DbError::UniqueViolation(_)) => {
            find_by_name(conn, name)?.ok_or_else(|| DbError::Query(diesel::result::Error::NotFound))
        }
        Err(e) => Err(e),
    }
}

/// What is stored of a new key: everything but the key itself.
#[derive(Debug, Clone)]
pub struct StoredKey {
    pub id: String,
    pub key_hash: String,
    pub last4: Option<String>,
}

impl StoredKey {
    /// The stored form of `key`, with a new id.
    pub fn of(key: &str) -> Self {
        Self {
            id: ApiKeyId::generate().into_string(),
            key_hash: hash_api_key(key),
            last4: last4(key),
        }
    }
}

/// Stores a new key for `merchant` (its hash, a new id, its last 4 characters).
pub fn create_api_key(
    conn: &mut DbConnection,
    merchant: &Merchant,
    key: &str,
    label: Option<&str>,
) -> Result<ApiKey, DbError> {
    insert_api_key(conn, &merchant.id, &StoredKey::of(key), label).map_err(DbError::from)
}

/// Inserts the row of a key whose hash, id and last 4 characters are already known.
pub fn insert_api_key(
    conn: &mut DbConnection,
    merchant_id: &str,
    stored: &StoredKey,
    label: Option<&str>,
) -> QueryResult<ApiKey> {
    let row = ApiKey {
        id: stored.id.clone(),
        merchant_id: merchant_id.to_owned(),
        label: label.map(str::to_owned),
        last4: stored.last4.clone(),
        created_at: now(),
        revoked_at: None,
    };
    diesel::insert_into(api_keys::table)
        .values((
            api_keys::key_hash.eq(&stored.key_hash),
            api_keys::id.eq(&row.id),
            api_keys::merchant_id.eq(&row.merchant_id),
            api_keys::label.eq(&row.label),
            api_keys::last4.eq(&row.last4),
            api_keys::created_at.eq(row.created_at),
        ))
        .execute(conn)?;
    Ok(row)
}

/// What a start's bootstrap key is, once [`ensure_bootstrap_key`] has run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootstrapKey {
    /// It authenticates merchant `default`.
    Ready,
    /// It was revoked, and stays so: it authenticates nothing.
    Revoked,
    /// It is a key of another merchant (by name), which it goes on authenticating.
    OfAnotherMerchant(String),
}

/// The bootstrap key of a start (`BOOTSTRAP_API_KEY`, or the demo key): makes sure merchant
/// `default` exists and that `key` authenticates it (idempotent, see [`ensure_api_key`]),
/// and says what the key turned out to be when it was there already.
pub fn ensure_bootstrap_key(conn: &mut DbConnection, key: &str) -> Result<BootstrapKey, DbError> {
    let merchant = ensure_merchant(conn, "default")?;
    ensure_api_key(conn, &merchant, key)?;
    let (owner, name, revoked_at): (String, String, Option<Timestamp>) = api_keys::table
        .inner_join(merchants::table)
        .filter(api_keys::key_hash.eq(hash_api_key(key)))
        .select((merchants::id, merchants::name, api_keys::revoked_at))
        .first(conn)?;
    Ok(if owner != merchant.id {
        BootstrapKey::OfAnotherMerchant(name)
    } else if revoked_at.is_some() {
        BootstrapKey::Revoked
    } else {
        BootstrapKey::Ready
    })
}

/// Makes `key` authenticate `merchant` (idempotent: an existing key is left as it is, so a
/// revoked `BOOTSTRAP_API_KEY` stays revoked across restarts).
pub fn ensure_api_key(
    conn: &mut DbConnection,
    merchant: &Merchant,
    key: &str,
) -> Result<(), DbError> {
    match create_api_key(conn, merchant, key, None) {
        Ok(_) | Err(DbError::UniqueViolation(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Every key (of one merchant, when named), oldest first, with its merchant's name.
pub fn list_api_keys(
    conn: &mut DbConnection,
    merchant_name: Option<&str>,
) -> Result<Vec<(ApiKey, String)>, diesel::result::Error> {
    let mut query = api_keys::table
        .inner_join(merchants::table)
        .select((ApiKey::as_select(), merchants::name))
        .order((api_keys::created_at, api_keys::id))
        .into_boxed();
    if let Some(name) = merchant_name {
        query = query.filter(merchants::name.eq(name.to_owned()));
    }
    query.load(conn)
}

/// One merchant's keys, newest first.
pub fn merchant_api_keys(
    conn: &mut DbConnection,
    merchant_id: &str,
) -> Result<Vec<ApiKey>, diesel::result::Error> {
    api_keys::table
        .filter(api_keys::merchant_id.eq(merchant_id))
        .select(ApiKey::as_select())
        .order((api_keys::created_at.desc(), api_keys::id.desc()))
        .load(conn)
}

/// The id of the key with this hash (revoked or not).
pub fn api_key_id_by_hash(
    conn: &mut DbConnection,
    key_hash: &str,
) -> Result<Option<String>, diesel::result::Error> {
    api_keys::table
        .filter(api_keys::key_hash.eq(key_hash))
        .select(api_keys::id)
        .first(conn)
        .optional()
}

#[derive(Debug)]
pub enum Revocation {
    /// Revoked now.
    Revoked(ApiKey),
    /// It had been revoked before; nothing changed.
    AlreadyRevoked(ApiKey),
    NotFound,
}

/// Revokes the key with this id, whoever's it is (the operator's CLI).
pub fn revoke_api_key(conn: &mut DbConnection, key_id: &str) -> Result<Revocation, DbError> {
    revoke_api_key_of(conn, None, key_id).map_err(DbError::from)
}

/// Revokes the key with this id; with `owner`, only if it is that merchant's (another
/// merchant's key is [`Revocation::NotFound`] and stays as it is). The guarded update makes
/// a repeated or concurrent revocation keep the first revocation time.
pub fn revoke_api_key_of(
    conn: &mut DbConnection,
    owner: Option<&str>,
    key_id: &str,
) -> QueryResult<Revocation> {
    let key: Option<ApiKey> = api_keys::table
        .filter(api_keys::id.eq(key_id))
        .select(ApiKey::as_select())
        .first(conn)
        .optional()?;
    let Some(key) = key.filter(|k| owner.is_none_or(|owner| k.merchant_id == owner)) else {
        return Ok(Revocation::NotFound);
    };
    let revoked = diesel::update(
        api_keys::table
            .filter(api_keys::id.eq(key_id))
            .filter(api_keys::merchant_id.eq(&key.merchant_id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set(api_keys::revoked_at.eq(now()))
    .execute(conn)?;
    let key = api_keys::table
        .filter(api_keys::id.eq(key_id))
        .select(ApiKey::as_select())
        .first(conn)
        .optional()?;
    Ok(match key {
        Some(key) if revoked == 1 => Revocation::Revoked(key),
        Some(key) => Revocation::AlreadyRevoked(key),
        None => Revocation::NotFound,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_hash_to_lowercase_sha256_hex() {
        assert_eq!(
            hash_api_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn last4_is_kept_only_for_long_keys() {
        assert_eq!(
            last4("sk_test_0123456789abcdefWXYZ").as_deref(),
            Some("WXYZ")
        );
        assert_eq!(last4("short-key-abc"), None);
    }

    #[test]
    fn key_ids_have_one_shape() {
        let id = ApiKeyId::generate().into_string();
        assert!(ApiKeyId::is_valid(&id), "{id}");
        for bad in [
            "",
            "key_",
            "key_0190",
            "KEY_0190a0b0c0d0e0f00000000000000000",
            "key_0190A0B0C0D0E0F00000000000000000",
            "sk_test_0190a0b0c0d0e0f00000000000000000",
        ] {
            assert!(!ApiKeyId::is_valid(bad), "{bad:?}");
        }
    }
}
