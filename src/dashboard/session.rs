//! Signing in and out, and the session every other page needs: server-side (a row in the
//! database, so every instance knows it), found by the hash of a random token in an
//! `HttpOnly`, `SameSite=Strict` cookie; never the API key. It ends with `Sign out`, the
//! key's revocation, or `DASHBOARD_SESSION_TTL_MS` without a request.

use actix_web::cookie::{Cookie, SameSite};
use actix_web::dev::Payload;
use actix_web::error::InternalError;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use futures_util::future::LocalBoxFuture;
use serde::Deserialize;

use super::layout;
use crate::auth::Merchant;
use crate::db::dashboard_sessions::{self as rows, SessionRow};
use crate::db::merchants::{find_by_api_key, hash_api_key};
use crate::domain::{now, sha256_hex};
use crate::state::AppState;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "pa_session";

/// A signed-in browser.
#[derive(Debug, Clone)]
pub struct Session {
    pub merchant: Merchant,
    /// Every form that changes something carries it.
    pub csrf_token: String,
    token_hash: String,
    /// The hash of the API key it was opened with (revoking that key ends it).
    api_key_hash: String,
    /// The `X-Request-Id` of the request it acts in: the events of its actions name it,
    /// with the form's key, as they name an API request.
    pub request_id: Option<String>,
}

impl Session {
    /// The hash of the API key this session was opened with.
    pub fn api_key_hash(&self) -> &str {
        &self.api_key_hash
    }
}

fn random_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The request's live session, if it has one (its expiry slides).
pub async fn current(req: &HttpRequest, state: &AppState) -> Result<Option<Session>, HttpResponse> {
    let Some(token) = req.cookie(SESSION_COOKIE).map(|c| c.value().to_owned()) else {
        return Ok(None);
    };
    let token_hash = sha256_hex(token.as_bytes());
    let ttl = chrono::Duration::from_std(state.settings.dashboard_session_ttl)
        .unwrap_or(chrono::Duration::hours(12));
    let lookup = token_hash.clone();
    let found = state
        .db
        .run(move |conn| rows::touch(conn, &lookup, now(), ttl))
        .await
        .map_err(|_| layout::unavailable())?;
    Ok(found.map(|(row, merchant)| Session {
        merchant,
        csrf_token: row.csrf_token,
        token_hash,
        api_key_hash: row.api_key_hash,
        request_id: crate::routes::input::request_id(req),
    }))
}

/// A page or action that needs a signed-in browser takes a `Session` argument: without a
/// live session the request is answered with the way to the sign-in page (or 503 when the
/// database cannot say), and the handler does not run.
impl FromRequest for Session {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move {
            let answered = |response: HttpResponse| {
                actix_web::Error::from(InternalError::from_response("dashboard session", response))
            };
            let state = req
                .app_data::<web::Data<AppState>>()
                .ok_or_else(layout::unavailable)
                .map_err(answered)?;
            current(&req, state)
                .await
                .map_err(answered)?
                .ok_or_else(|| answered(layout::see_other("/dashboard")))
        })
    }
}

/// Whether a form's `csrf_token` is the session's (else the caller answers
/// [`layout::csrf_failed`] and does nothing).
pub fn csrf_ok(session: &Session, given: Option<&str>) -> bool {
    let expected = session.csrf_token.as_bytes();
    given.is_some_and(|given| {
        let given = given.as_bytes();
        given.len() == expected.len()
            && given
                .iter()
                .zip(expected)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    })
}

/// Whether the browser says this request came from a page of another site
/// (`Sec-Fetch-Site: cross-site` or `same-site`, as a current browser sends with a form
/// another site posts). The sign-in form has no session to bind a `csrf_token` to, so this
/// is what keeps another site from signing a browser in with a key of its choosing (login
/// CSRF). The header names the page's site, not a host, so it holds behind a proxy that
/// rewrites `Host`; clients that are not browsers do not send it.
fn sent_from_another_site(req: &HttpRequest) -> bool {
    req.headers()
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok())
        .is_some_and(|site| {
            site.eq_ignore_ascii_case("cross-site") || site.eq_ignore_ascii_case("same-site")
        })
}

#[derive(Deserialize)]
pub struct SignIn {
    api_key: String,
}

/// `POST /dashboard/sign-in`: a valid key opens a session; a wrong one opens nothing and is
/// not shown again.
pub async fn sign_in(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: web::Form<SignIn>,
) -> HttpResponse {
    if sent_from_another_site(&req) {
        tracing::info!("dashboard sign-in from another site refused");
        return layout::csrf_failed();
    }
    let client = req.peer_addr().map(|a| a.ip());
    if state.rate_limits.wrong_keys_exceeded(client, false) {
        return layout::too_many_attempts();
    }
    let key_hash = hash_api_key(form.api_key.trim());
    let lookup = key_hash.clone();
    let merchant = match state
        .db
        .run(move |conn| find_by_api_key(conn, &lookup))
        .await
    {
        Ok(found) => found,
        Err(_) => return layout::unavailable(),
    };
    let Some(merchant) = merchant else {
        tracing::info!("dashboard sign-in refused");
        if state.rate_limits.wrong_keys_exceeded(client, true) {
            return layout::too_many_attempts();
        }
        return layout::sign_in_page(Some("That API key was not accepted."), 401);
    };
    let token = random_token();
    let at = now();
    let ttl = chrono::Duration::from_std(state.settings.dashboard_session_ttl)
        .unwrap_or(chrono::Duration::hours(12));
    let row = SessionRow {
        token_hash: sha256_hex(token.as_bytes()),
        api_key_hash: key_hash,
        merchant_id: merchant.id.clone(),
        csrf_token: random_token(),
        created_at: at,
        expires_at: at + ttl,
    };
    if state
        .db
        .run(move |conn| rows::insert(conn, &row))
        .await
        .is_err()
    {
        return layout::unavailable();
    }
    tracing::info!(merchant = %merchant.id, "dashboard session opened");
    // The scheme as the client or a proxy in front named it (`X-Forwarded-Proto: HTTPS` too).
    let secure = req.connection_info().scheme().eq_ignore_ascii_case("https");
    let cookie = Cookie::build(SESSION_COOKIE, token)
        .path("/dashboard")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .finish();
    let mut response = layout::see_other("/dashboard");
    if let Ok(value) = header::HeaderValue::from_str(&cookie.to_string()) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

#[derive(Deserialize)]
pub struct CsrfOnly {
    csrf_token: Option<String>,
}

/// `POST /dashboard/sign-out`: the session ends on every instance at once.
pub async fn sign_out(
    state: web::Data<AppState>,
    session: Session,
    form: web::Form<CsrfOnly>,
) -> HttpResponse {
    if !csrf_ok(&session, form.csrf_token.as_deref()) {
        return layout::csrf_failed();
    }
    let token_hash = session.token_hash.clone();
    if state
        .db
        .run(move |conn| rows::delete(conn, &token_hash))
        .await
        .is_err()
    {
        return layout::unavailable();
    }
    let mut response = layout::see_other("/dashboard");
    let gone = Cookie::build(SESSION_COOKIE, "")
        .path("/dashboard")
        .http_only(true)
        .same_site(SameSite::Strict)
        .max_age(actix_web::cookie::time::Duration::ZERO)
        .finish();
    if let Ok(value) = header::HeaderValue::from_str(&gone.to_string()) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}
