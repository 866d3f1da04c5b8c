//! The frame every page shares, the security headers every answer carries, the stylesheet,
//! and the pages that are not about anything (sign in, refusals).

use actix_web::http::{StatusCode, header};
use actix_web::{HttpResponse, HttpResponseBuilder};
use maud::{DOCTYPE, Markup, html};

use super::session::Session;

/// No script at all for now (the pages are plain forms), styles only from here, no framing,
/// forms only to here.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
     script-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

fn secured(status: StatusCode) -> HttpResponseBuilder {
    let mut builder = HttpResponse::build(status);
    builder
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::CACHE_CONTROL, "no-store"));
    builder
}

/// A page: the frame (navigation, sign out) around `body`.
pub fn page(status: u16, title: &str, session: Option<&Session>, body: Markup) -> HttpResponse {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · payments-api" }
                link rel="stylesheet" href="/dashboard/assets/app.css";
            }
            body {
                header {
                    a.brand href="/dashboard" { "payments-api" }
                    @if let Some(session) = session {
                        nav aria-label="Main" {
                            a href="/dashboard" { "Overview" }
                            a href="/dashboard/payments" { "Payments" }
                            a href="/dashboard/disputes" { "Disputes" }
                            a href="/dashboard/balance" { "Balance" }
                            a href="/dashboard/webhooks" { "Webhooks" }
                            a href="/dashboard/events" { "Events" }
                            a href="/dashboard/api-keys" { "API keys" }
                        }
                        form.sign-out method="post" action="/dashboard/sign-out" {
                            input type="hidden" name="csrf_token" value=(session.csrf_token);
                            span.merchant { (session.merchant.name) }
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    };
    secured(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .content_type("text/html; charset=utf-8")
        .body(markup.into_string())
}

/// The hidden fields every action form carries: the session's CSRF token and the
/// `Idempotency-Key` it will act with, made now (so sending the form again acts once).
pub fn guard(session: &Session) -> Markup {
    html! {
        input type="hidden" name="csrf_token" value=(session.csrf_token);
        input type="hidden" name="idempotency_key" value=(uuid::Uuid::new_v4().simple().to_string());
    }
}

#[derive(serde::Deserialize)]
struct Done {
    done: Option<String>,
}

/// The `?done=` a successful action redirects with (which notice to show).
pub fn done(req: &actix_web::HttpRequest) -> Option<String> {
    actix_web::web::Query::<Done>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.into_inner().done)
}

/// `303 See Other` to `location` (after a form, so a reload does not post again).
pub fn see_other(location: &str) -> HttpResponse {
    secured(StatusCode::SEE_OTHER)
        .insert_header((header::LOCATION, location))
        .finish()
}

/// The sign-in form, with a message after a refused key (never the key itself).
pub fn sign_in_page(message: Option<&str>, status: u16) -> HttpResponse {
    page(
        status,
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(message) = message {
                p.error role="alert" { (message) }
            }
            form.card method="post" action="/dashboard/sign-in" {
                label for="api_key" { "API key" }
                input #api_key type="password" name="api_key" autocomplete="off" required;
                button type="submit" { "Sign in" }
            }
        },
    )
}

/// Too many wrong keys from one address this second: 429, try again in a second.
pub fn too_many_attempts() -> HttpResponse {
    let mut response = page(
        429,
        "Too many attempts",
        None,
        html! {
            h1 { "Too many attempts" }
            p.error role="alert" { "Too many wrong API keys from here; wait a second and try again." }
            p { a href="/dashboard" { "Sign in" } }
        },
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    response
}

/// A form whose CSRF token is missing or wrong: 403, nothing done.
pub fn csrf_failed() -> HttpResponse {
    page(
        403,
        "Refused",
        None,
        html! {
            h1 { "Refused" }
            p.error role="alert" { "csrf_failed: this form was not sent from this dashboard's own page; nothing was done." }
            p { a href="/dashboard" { "Back to the dashboard" } }
        },
    )
}

pub fn not_found(session: &Session, what: &str) -> HttpResponse {
    page(
        404,
        "Not found",
        Some(session),
        html! {
            h1 { "Not found" }
            p { "No such " (what) " of yours." }
        },
    )
}

/// An address under /dashboard that is no page of it.
pub fn no_such_page() -> HttpResponse {
    page(
        404,
        "Not found",
        None,
        html! {
            h1 { "Not found" }
            p { "The dashboard has no such page." }
            p { a href="/dashboard" { "Back to the dashboard" } }
        },
    )
}

/// A request no page can take (a form or query that does not parse, an address holding a
/// NUL): its status, what was wrong, nothing done.
pub fn refused_input(status: u16, detail: &str) -> HttpResponse {
    page(
        status,
        "Refused",
        None,
        html! {
            h1 { "Refused" }
            p.error role="alert" { (detail) "; nothing was done." }
            p { a href="/dashboard" { "Back to the dashboard" } }
        },
    )
}

/// A list's filter `name` as the address gives it: `None` when absent or empty (the form's
/// "any"), the value when `parse` knows it, and [`UnknownFilter`] when it names nothing the
/// list can hold (an address edited by hand).
pub fn known_filter<T>(
    name: &str,
    raw: Option<&str>,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<Option<T>, UnknownFilter> {
    match raw.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(value) => parse(value).map(Some).ok_or_else(|| UnknownFilter {
            detail: format!("{name} {value:?} is not one this list can be filtered by"),
        }),
    }
}

/// A filter value that names nothing its list can hold.
pub struct UnknownFilter {
    detail: String,
}

impl UnknownFilter {
    /// 400, rather than the whole list as if no filter had been asked for.
    pub fn page(&self) -> HttpResponse {
        refused_input(400, &self.detail)
    }
}

/// The database cannot be reached.
pub fn unavailable() -> HttpResponse {
    page(
        503,
        "Unavailable",
        None,
        html! {
            h1 { "Unavailable" }
            p { "The database cannot be reached right now; try again in a moment." }
        },
    )
}

/// `GET /dashboard/assets/app.css`.
pub async fn stylesheet() -> HttpResponse {
    secured(StatusCode::OK)
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .content_type("text/css; charset=utf-8")
        .body(include_str!("app.css"))
}
