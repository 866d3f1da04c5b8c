//! `Authorization: Bearer <api key>` → the merchant the key belongs to (through the key
//! cache of [`crate::auth`]), then that merchant's rate limit (see [`crate::rate_limit`]).

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use futures_util::future::LocalBoxFuture;

use super::input::header_once;
use crate::auth::Merchant;
use crate::db::merchants::{find_by_api_key, hash_api_key};
use crate::error::ApiError;
use crate::state::AppState;

/// The authenticated merchant's id, left in the request's extensions for the request log.
#[derive(Clone, Debug)]
pub struct MerchantId(pub String);

/// Extractor: the request's merchant, or 401; or 429 when the merchant is over its rate
/// limit. Handlers take it before the body, so a refused request reads and stores nothing.
pub struct Authenticated(pub Merchant);

/// The request's one bearer token. Two `Authorization` headers name no one key: none (401),
/// as two `Idempotency-Key` headers name no key (400).
fn bearer_token(req: &HttpRequest) -> Option<String> {
    let value = header_once(req, header::AUTHORIZATION.as_str())
        .ok()??
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
}

/// The merchant `token` authenticates, from the cache while it is fresh, else from the
/// database.
async fn merchant_for(state: &AppState, token: &str) -> Result<Merchant, ApiError> {
    let db = &state.db;
    state
        .api_keys
        .merchant(&hash_api_key(token), |key_hash| {
            db.run(move |conn| find_by_api_key(conn, &key_hash))
        })
        .await?
        .ok_or(ApiError::Unauthorized)
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
            let merchant = merchant_for(&state, &token).await?;
            req.extensions_mut().insert(MerchantId(merchant.id.clone()));
            state.rate_limits.check(&merchant)?;
            Ok(Self(merchant))
        })
    }
}
