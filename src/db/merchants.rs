//! Merchants and their API keys (stored only as SHA-256 hashes).

use diesel::prelude::*;

use super::schema::{api_keys, merchants};
use super::{DbConnection, DbError};
use crate::domain::{now, sha256_hex};

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = merchants)]
pub struct Merchant {
    pub id: String,
    pub name: String,
}

pub fn hash_api_key(key: &str) -> String {
    sha256_hex(key.as_bytes())
}

pub fn find_by_api_key(
    conn: &mut DbConnection,
    key_hash: &str,
) -> Result<Option<Merchant>, diesel::result::Error> {
    api_keys::table
        .inner_join(merchants::table)
        .filter(api_keys::key_hash.eq(key_hash))
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
    let id = format!("mer_{}", uuid::Uuid::now_v7().simple());
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

/// Makes `key` authenticate `merchant` (idempotent: an existing key is left as it is).
pub fn ensure_api_key(
    conn: &mut DbConnection,
    merchant: &Merchant,
    key: &str,
) -> Result<(), DbError> {
    let inserted = diesel::insert_into(api_keys::table)
        .values((
            api_keys::key_hash.eq(hash_api_key(key)),
            api_keys::merchant_id.eq(&merchant.id),
            api_keys::created_at.eq(now()),
        ))
        .execute(conn);
    match inserted.map_err(DbError::from) {
        Ok(_) | Err(DbError::UniqueViolation(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn api_keys_hash_to_lowercase_sha256_hex() {
        assert_eq!(
            super::hash_api_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
