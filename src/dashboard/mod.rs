//! The dashboard (CONTRACT §15): pages for a merchant's people, served by the same binary,
//! with no asset from elsewhere and no JavaScript needed.
//!
//! ```text
//! GET  /dashboard                  sign-in form, or (signed in) the overview
//! POST /dashboard/sign-in          API key → a server-side session (cookie: a random token)
//! POST /dashboard/sign-out
//! GET  /dashboard/payments         newest first, by status, search by id
//! GET  /dashboard/payments/{id}    every field, the timeline, the actions
//! POST /dashboard/payments/{id}/refund|capture|cancel
//! GET  /dashboard/disputes         open first, by evidence due date
//! POST /dashboard/disputes/{id}/evidence|accept
//! GET  /dashboard/balance          available and pending, transactions, payouts
//! POST /dashboard/balance/payout
//! GET  /dashboard/webhooks         the endpoints; a form to add one
//! POST /dashboard/webhooks         adds one: its page with the secret (shown this once)
//! GET  /dashboard/webhooks/{id}    the endpoint, its forms, its deliveries by status
//! POST /dashboard/webhooks/{id}    saves URL, description, events
//! POST /dashboard/webhooks/{id}/status|delete
//! POST /dashboard/webhooks/{id}/rotate|test|replay   (the answer shown on the page)
//! GET  /dashboard/events           newest first, by type, each event's JSON
//! GET  /dashboard/api-keys         the merchant's keys (never a key)
//! POST /dashboard/api-keys         a new key, shown once on the answer page
//! POST /dashboard/api-keys/{id}/revoke
//! GET  /dashboard/assets/app.css
//! ```
//!
//! Reading and acting go through the same functions as the API: an action is the API's
//! operation with the `Idempotency-Key` its form was drawn with, so a double click, a second
//! submit or a reload acts once. Every form that changes something carries the session's
//! CSRF token; every page is sent with a Content-Security-Policy that allows no inline
//! script and no framing, and maud escapes every value it renders.

mod actions;
mod events;
mod format;
mod keys;
mod layout;
mod money_pages;
mod overview;
mod pages;
mod session;
mod webhooks;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::{Next, from_fn};
use actix_web::{ResponseError, web};

pub use session::SESSION_COOKIE;

/// The largest form a page sends: dispute evidence of 20 000 characters, each up to 12 bytes
/// once URL-encoded, with the form's other fields.
const FORM_LIMIT: usize = 256 * 1024;

/// Drops expired dashboard sessions every ten minutes (they are refused anyway; this keeps
/// the table small).
pub fn spawn_session_cleanup(state: &crate::state::AppState) {
    let worker = state.clone();
    let every = std::time::Duration::from_secs(600);
    state
        .shutdown
        .spawn_periodic("dashboard sessions", every, every, move || {
            let state = worker.clone();
            async move {
                let at = crate::domain::now();
                let dropped = state
                    .db
                    .run(move |conn| crate::db::dashboard_sessions::delete_expired(conn, at))
                    .await;
                if let Err(e) = dropped {
                    tracing::debug!(error = %e, "could not drop expired dashboard sessions");
                }
            }
        });
}

/// The dashboard's routes (under `/dashboard`).
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/dashboard")
            .app_data(
                web::FormConfig::default()
                    .limit(FORM_LIMIT)
                    .error_handler(|e, _| refused(e)),
            )
            .app_data(web::QueryConfig::default().error_handler(|e, _| refused(e)))
            .wrap(from_fn(refuse_unreadable))
            .route("", page().to(overview::overview))
            .route("/", page().to(overview::overview))
            .route("/sign-in", web::post().to(session::sign_in))
            .route("/sign-out", web::post().to(session::sign_out))
            .route("/payments", page().to(pages::payments))
            .route("/payments/{id}", page().to(pages::payment))
            .route("/payments/{id}/refund", web::post().to(actions::refund))
            .route("/payments/{id}/capture", web::post().to(actions::capture))
            .route("/payments/{id}/cancel", web::post().to(actions::cancel))
            .route("/disputes", page().to(money_pages::disputes))
            .route(
                "/disputes/{id}/evidence",
                web::post().to(actions::submit_evidence),
            )
            .route(
                "/disputes/{id}/accept",
                web::post().to(actions::accept_dispute),
            )
            .route("/balance", page().to(money_pages::balance))
            .route("/webhooks", page().to(webhooks::list))
            .route("/webhooks", web::post().to(webhooks::create))
            .route("/webhooks/{id}", page().to(webhooks::endpoint))
            .route("/webhooks/{id}", web::post().to(webhooks::update))
            .route(
                "/webhooks/{id}/status",
                web::post().to(webhooks::set_status),
            )
            .route("/webhooks/{id}/rotate", web::post().to(webhooks::rotate))
            .route("/webhooks/{id}/test", web::post().to(webhooks::test))
            .route("/webhooks/{id}/replay", web::post().to(webhooks::replay))
            .route("/webhooks/{id}/delete", web::post().to(webhooks::delete))
            .route("/events", page().to(events::events))
            .route("/balance/payout", web::post().to(actions::pay_out))
            .route("/api-keys", page().to(keys::list))
            .route("/api-keys", web::post().to(keys::create))
            .route("/api-keys/{id}/revoke", web::post().to(keys::revoke))
            .route("/assets/app.css", page().to(layout::stylesheet))
            // Any other address under /dashboard (or method of one) is the dashboard's own
            // 404 page, with its headers, not the API's problem.
            .default_service(web::to(no_such_page)),
    );
}

/// A page's route: GET, and HEAD as every GET route of ours (`routes::get_or_head`).
fn page() -> actix_web::Route {
    web::route().guard(crate::routes::get_or_head())
}

async fn no_such_page() -> actix_web::HttpResponse {
    layout::no_such_page()
}

/// A form or query that does not parse: the dashboard's page saying so, not actix's text.
fn refused(e: impl ResponseError + 'static) -> actix_web::Error {
    let response = layout::refused_input(e.status_code().as_u16(), &e.to_string());
    actix_web::error::InternalError::from_response(e, response).into()
}

/// Input no page can read, refused before any page reads it: an address holding a NUL
/// (`%00`; no database column holds the character, and PostgreSQL refusing it in text would
/// look like an outage), and a form sent compressed (`Content-Encoding`: it would be read as
/// if it were not, as the API refuses it with 415).
async fn refuse_unreadable(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let holds_nul = |raw: &str| raw.as_bytes().windows(3).any(|w| w == b"%00");
    if holds_nul(req.path()) || holds_nul(req.query_string()) {
        let response = layout::refused_input(400, "The address holds a NUL character");
        return Ok(req.into_response(response).map_into_right_body());
    }
    if crate::routes::input::content_encoded(req.request()) {
        let response = layout::refused_input(415, "The form was sent compressed");
        return Ok(req.into_response(response).map_into_right_body());
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}
