//! `Authorization: Bearer <api key>` → the merchant the key belongs to.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use futures_util::future::LocalBoxFuture;

pub use crate::db::merchants::Merchant;
use crate::db::merchants::{find_by_api_key, hash_api_key};
use crate::error::ApiError;
use crate::startup::AppState;

/// Keys that authenticated once, by hash. Keys are never revoked or reassigned, so a hit
/// can be trusted; it saves a database round trip on every request.
#[derive(Default, Clone)]
pub struct ApiKeyCache {
    merchants: Arc<RwLock<HashMap<String, Merchant>>>,
}

impl ApiKeyCache {
    const MAX_ENTRIES: usize = 10_000;

    fn get(&self, key_hash: &str) -> Option<Merchant> {
        self.merchants.read().ok()?.get(key_hash).cloned()
    }

    fn insert(&self, key_hash: String, merchant: Merchant) {
        if let Ok(mut map) = self.merchants.write() {
            if map.len() >= Self::MAX_ENTRIES {
                map.clear();
            }
            map.insert(key_hash, merchant);
        }
    }
}

/// The authenticated merchant's id, left in the request's extensions for the request log.
#[derive(Clone, Debug)]
pub struct MerchantId(pub String);

/// Extractor: the request's merchant, or 401.
pub struct Authenticated(pub Merchant);

fn bearer_token(req: &HttpRequest) -> Option<String> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

impl FromRequest for Authenticated {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let token = bearer_token(req);
        let req = req.clone();
        Box::pin(async move {
            let state = state.ok_or_else(|| ApiError::internal("application state missing"))?;
            let token = token.ok_or(ApiError::Unauthorized)?;
            let key_hash = hash_api_key(&token);
            if let Some(merchant) = state.api_keys.get(&key_hash) {
                req.extensions_mut().insert(MerchantId(merchant.id.clone()));
                return Ok(Self(merchant));
            }
            let lookup = key_hash.clone();
            let merchant = state
                .db
                .run(move |conn| find_by_api_key(conn, &lookup))
                .await?
                .ok_or(ApiError::Unauthorized)?;
            state.api_keys.insert(key_hash, merchant.clone());
            req.extensions_mut().insert(MerchantId(merchant.id.clone()));
            Ok(Self(merchant))
        })
    }
}
