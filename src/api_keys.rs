//! Creating and revoking API keys (CONTRACT §11, §15): the one implementation behind the
//! `payments-api api-keys` commands and the dashboard's API keys page.
//!
//! A key is made here ([`NewKey`]), shown once by whoever asked for it (the CLI on stdout,
//! the dashboard on the answer page to its create form), and never stored: the row holds
//! its SHA-256 hash, its id and its last 4 characters. Revoking sets the row's
//! `revoked_at`; every instance refuses the key within 5 s (see
//! [`crate::auth::KEY_CACHE_TTL`]) and the dashboard's sessions opened with it end at once
//! (every page checks the key in the database).
//!
//! From the dashboard both run once per form through the one idempotent-operation
//! mechanism ([`crate::operations::keyed::write_once`]). A create's stored answer is only
//! `{"id": "key_…"}`: the key itself is made before the operation and only its hash goes
//! into it, so a replay knows which key was made but cannot show it again.

use std::fmt;

use diesel::QueryResult;
use serde_json::json;

use crate::auth::Merchant;
use crate::db::DbConnection;
use crate::db::merchants::{self, ApiKey, Revocation, StoredKey};
use crate::domain::{ApiKeyId, IdempotencyKey, new_api_key, sha256_hex};
use crate::error::ApiError;
use crate::idempotency::Answer;
use crate::operations::keyed::{DbWork, Refusal, write_once};
use crate::state::AppState;

/// A label tells keys apart in a listing.
pub const MAX_LABEL_CHARS: usize = 200;
pub const MAX_MERCHANT_NAME_CHARS: usize = 255;

/// A key's scope in `idempotency_keys`: the dashboard's own operations, apart from every
/// API route.
const CREATE: &str = "dashboard: create API key";
const REVOKE: &str = "dashboard: revoke API key";

/// Trimmed, 1 to `max` characters, none of them control characters (a tab or a newline
/// would break the one-line-per-key listing).
fn one_line(raw: &str, max: usize) -> Result<String, String> {
    let text = raw.trim();
    if !(1..=max).contains(&text.chars().count()) || text.chars().any(char::is_control) {
        return Err(format!(
            "expected 1 to {max} characters, no control characters"
        ));
    }
    Ok(text.to_owned())
}

/// A merchant's name as the CLI takes it.
pub fn merchant_name(raw: &str) -> Result<String, String> {
    one_line(raw, MAX_MERCHANT_NAME_CHARS)
}

/// A key's label.
pub fn label(raw: &str) -> Result<String, String> {
    one_line(raw, MAX_LABEL_CHARS)
}

/// A key just made: the key itself, to be shown once, and what is stored of it.
pub struct NewKey {
    key: String,
    stored: StoredKey,
}

impl NewKey {
    pub fn generate() -> Self {
        let key = new_api_key();
        let stored = StoredKey::of(&key);
        Self { key, stored }
    }

    /// The key itself: shown once, to whoever asked for it, and nowhere else.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Its id, `key_…`.
    pub fn id(&self) -> &str {
        &self.stored.id
    }
}

/// Never the key (a `{:?}` must not put it in a log).
impl fmt::Debug for NewKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewKey")
            .field("id", &self.stored.id)
            .finish_non_exhaustive()
    }
}

/// Stores a made key for a merchant: the one way a key is created.
pub fn create(
    conn: &mut DbConnection,
    merchant_id: &str,
    key: &StoredKey,
    label: Option<&str>,
) -> QueryResult<ApiKey> {
    let row = merchants::insert_api_key(conn, merchant_id, key, label)?;
    tracing::info!(key_id = %row.id, merchant = %merchant_id, "API key created");
    Ok(row)
}

/// Revokes the key with this id; with `owner`, only that merchant's key (another
/// merchant's is not found and stays as it is): the one way a key is revoked. Revoking a
/// revoked key changes nothing.
pub fn revoke(
    conn: &mut DbConnection,
    owner: Option<&str>,
    key_id: &str,
) -> QueryResult<Revocation> {
    if !ApiKeyId::is_valid(key_id) {
        return Ok(Revocation::NotFound);
    }
    let revocation = merchants::revoke_api_key_of(conn, owner, key_id)?;
    if let Revocation::Revoked(key) = &revocation {
        tracing::info!(key_id = %key.id, merchant = %key.merchant_id, "API key revoked");
    }
    Ok(revocation)
}

/// What `api-keys create` made.
#[derive(Debug)]
pub struct Created {
    pub key: NewKey,
    pub row: ApiKey,
    pub merchant: Merchant,
    /// The merchant did not exist before.
    pub new_merchant: bool,
}

/// `api-keys create`: a key for the merchant called `name`, made first when there is none.
pub fn create_for_merchant_named(
    conn: &mut DbConnection,
    name: &str,
    label: Option<&str>,
) -> Result<Created, crate::db::DbError> {
    let existed = merchants::find_by_name(conn, name)?.is_some();
    let merchant = merchants::ensure_merchant(conn, name)?;
    let key = NewKey::generate();
    let row = create(conn, &merchant.id, &key.stored, label)?;
    Ok(Created {
        key,
        row,
        merchant,
        new_merchant: !existed,
    })
}

/// A key operation of the dashboard, run once per `Idempotency-Key`.
#[derive(Clone)]
pub enum KeyWrite {
    /// Stores a key made before the operation (its hash: never the key).
    Create {
        key: StoredKey,
        label: Option<String>,
    },
    Revoke {
        key_id: String,
    },
}

fn no_such_key() -> ApiError {
    ApiError::NotFound("no such API key".to_owned())
}

impl DbWork for KeyWrite {
    const RESOURCE: &'static str = "api_key";

    fn run(&self, conn: &mut DbConnection, merchant_id: &str) -> Result<Answer, Refusal> {
        match self {
            Self::Create { key, label } => {
                let row = create(conn, merchant_id, key, label.as_deref())?;
                Ok(Answer::new(201, json!({"id": row.id}).to_string()))
            }
            Self::Revoke { key_id } => match revoke(conn, Some(merchant_id), key_id)? {
                Revocation::Revoked(key) => Ok(Answer::new(
                    200,
                    json!({"id": key.id, "revoked": "now"}).to_string(),
                )),
                Revocation::AlreadyRevoked(key) => Ok(Answer::new(
                    200,
                    json!({"id": key.id, "revoked": "before"}).to_string(),
                )),
                // Not stored: the key stays free, nothing changed.
                Revocation::NotFound => Err(Refusal::Api(no_such_key())),
            },
        }
    }
}

/// The label as a form gives it: empty is none.
fn form_label(raw: &str) -> Result<Option<String>, ApiError> {
    if raw.trim().is_empty() {
        return Ok(None);
    }
    label(raw)
        .map(Some)
        .map_err(|e| ApiError::invalid("label", format!("`label`: {e}")))
}

/// Creates `key` for `merchant` once per `idempotency_key` (the dashboard's create form).
/// The answer is `201 {"id": …}`: the id of `key` when this call created it, the id of the
/// key an earlier call with the same `idempotency_key` created otherwise (then `key` was
/// stored nowhere).
pub async fn create_once(
    state: &AppState,
    merchant: &Merchant,
    idempotency_key: IdempotencyKey,
    label: &str,
    key: &NewKey,
) -> Result<Answer, ApiError> {
    let label = form_label(label)?;
    let fingerprint = sha256_hex(format!("{CREATE}\n{}", json!(label)).as_bytes());
    let work = KeyWrite::Create {
        key: key.stored.clone(),
        label,
    };
    write_once(
        state,
        merchant,
        Some(idempotency_key),
        CREATE,
        fingerprint,
        work,
    )
    .await
}

/// Revokes the merchant's key `key_id` once per `idempotency_key` (the dashboard's revoke
/// button): `200 {"id": …, "revoked": "now" | "before"}`, or 404 for a key that is not the
/// merchant's.
pub async fn revoke_once(
    state: &AppState,
    merchant: &Merchant,
    idempotency_key: IdempotencyKey,
    key_id: &str,
) -> Result<Answer, ApiError> {
    if !ApiKeyId::is_valid(key_id) {
        return Err(no_such_key());
    }
    let fingerprint = sha256_hex(format!("{REVOKE}\n{key_id}").as_bytes());
    let work = KeyWrite::Revoke {
        key_id: key_id.to_owned(),
    };
    write_once(
        state,
        merchant,
        Some(idempotency_key),
        REVOKE,
        fingerprint,
        work,
    )
    .await
}

/// The `id` of a key operation's answer.
pub fn answered_id(answer: &Answer) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|body| body["id"].as_str().map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_is_never_in_its_debug_form() {
        let key = NewKey::generate();
        let shown = format!("{key:?}");
        assert!(shown.contains(key.id()), "{shown}");
        assert!(!shown.contains(key.key()), "{shown}");
        assert!(ApiKeyId::is_valid(key.id()));
        assert_eq!(key.stored.key_hash, merchants::hash_api_key(key.key()));
    }

    #[test]
    fn labels_are_one_line() {
        assert_eq!(label("  web  ").as_deref(), Ok("web"));
        assert!(label("a\nb").is_err());
        assert!(label("").is_err());
        assert!(label(&"x".repeat(201)).is_err());
        assert_eq!(form_label(" ").ok(), Some(None));
        assert!(form_label("a\tb").is_err());
    }
}
