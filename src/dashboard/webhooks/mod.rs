//! The webhooks pages: the merchant's endpoints and a form to add one; an endpoint's page
//! with its edit form, `Disable`/`Enable`, `Send test event`, `Rotate secret`,
//! `Replay failed deliveries`, its deliveries (newest first, by status) and `Delete`.
//!
//! Every action is the API's own operation (`crate::webhook_endpoints`) run through
//! [`run_action`]: the session's CSRF token checked, the form's `Idempotency-Key` given to
//! the operation. The answers that hold something to read (the new endpoint's secret, the
//! rotated secret, the test's result, how many deliveries a replay queued) are shown on the
//! page the POST answers (200), never put in a URL; a second submit of the same form is
//! the operation's replay and shows that same first answer. The others (edit, enable,
//! disable, delete) go back to the page with 303.
//!
//! Here: the list, adding an endpoint, and what the pages share (the form, notices, the
//! secret shown once); `endpoint.rs` draws one endpoint's page, `actions.rs` acts on it.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::actions::{Acted, Guarded, run_action};
use super::layout::{self, done, guard, page};
use super::session::Session;
use crate::db::deliveries::{self as delivery_rows, DeliveryRow};
use crate::db::webhook_endpoints::{self as endpoint_rows, EndpointRow};
use crate::domain::{
    DeliveryId, DeliveryStatus, EndpointId, EndpointStatus, Timestamp, format_timestamp, now,
};
use crate::error::ApiError;
use crate::events::{EnabledEvents, EventType};
use crate::idempotency::Answer;
use crate::state::AppState;
use crate::webhook_endpoints::{self as endpoints, EndpointUpdate, NewEndpoint, Replay, Rotation};

/// Endpoints shown on the list (a merchant has a handful).
mod actions;
mod endpoint;

pub use actions::{delete, replay, rotate, set_status, test, update};
pub use endpoint::endpoint;
use endpoint::{Deliveries, render_endpoint};

const ENDPOINTS_SHOWN: i64 = 100;
/// Deliveries a page.
const DELIVERIES_PAGE: i64 = 25;
/// How far back `Replay failed deliveries` looks unless told otherwise.
const REPLAY_DEFAULT_HOURS: i64 = 24;
/// How `since` is written in its field (`datetime-local`, read as UTC).
const SINCE_FORMAT: &str = "%Y-%m-%dT%H:%M";

/// Every field any webhooks form sends; each action reads the ones it has.
#[derive(Deserialize)]
pub struct WebhookForm {
    csrf_token: Option<String>,
    idempotency_key: Option<String>,
    #[serde(default)]
    url: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    events: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    expire_current_in_s: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    confirm: String,
}

impl Guarded for WebhookForm {
    fn csrf_token(&self) -> Option<&str> {
        self.csrf_token.as_deref()
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }
}

impl WebhookForm {
    /// The `Events` field as the API's list: types or `*`, separated by commas or spaces.
    fn enabled_events(&self) -> Vec<&str> {
        self.events
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|item| !item.is_empty())
            .collect()
    }

    fn draft(&self) -> Draft {
        Draft {
            url: self.url.clone(),
            description: self.description.clone(),
            events: self.events.clone(),
        }
    }
}

/// What an endpoint form shows: the stored values, or what was typed before a refusal.
struct Draft {
    url: String,
    description: String,
    events: String,
}

impl Draft {
    fn new_endpoint() -> Self {
        Self {
            url: String::new(),
            description: String::new(),
            events: EnabledEvents::WILDCARD.to_owned(),
        }
    }

    fn of(row: &EndpointRow) -> Self {
        Self {
            url: row.url.clone(),
            description: row.description.clone().unwrap_or_default(),
            events: events_text(&row.enabled_events),
        }
    }
}

/// The stored `enabled_events` as the `Events` field shows them: `*`, or the types
/// separated by `, `.
fn events_text(stored: &str) -> String {
    match EnabledEvents::from_stored(stored) {
        EnabledEvents::All => EnabledEvents::WILDCARD.to_owned(),
        EnabledEvents::Only(types) => types
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

fn answer_json(answer: &Answer) -> Value {
    serde_json::from_str(&answer.body).unwrap_or(Value::Null)
}

fn no_such_endpoint() -> ApiError {
    ApiError::NotFound("no such webhook endpoint".to_owned())
}

fn problem(detail: &str) -> Markup {
    html! { p.error role="alert" { (detail) } }
}

fn notice(text: &str) -> Markup {
    html! { p.notice role="status" { (text) } }
}

/// Said on the page a second submit of the same form draws.
fn replayed_note(answer: &Answer) -> Markup {
    html! {
        @if answer.replayed {
            p.notice role="status" {
                "This form was sent before: this is its first answer again; nothing new was done."
            }
        }
    }
}

/// The secret of a create or a rotation, on the page that answers it (and nowhere else).
fn secret_shown(secret: &str, answer: &Answer) -> Markup {
    html! {
        section.card.secret aria-labelledby="secret_title" {
            h2 #secret_title { "Signing secret" }
            p { "Copy it now: it is shown this once. Deliveries are signed with it (Standard Webhooks)." }
            code id="secret" class="secret-value" { (secret) }
            (replayed_note(answer))
        }
    }
}

// ---------------------------------------------------------------------------------------
// The list.

/// `GET /dashboard/webhooks`.
pub async fn list(state: web::Data<AppState>, req: HttpRequest, session: Session) -> HttpResponse {
    let top = match done(&req).as_deref() {
        Some("deleted") => notice("Endpoint deleted."),
        _ => html! {},
    };
    render_list(&state, &session, 200, top, &Draft::new_endpoint()).await
}

/// The endpoints and the form to add one (`draft` fills it).
async fn render_list(
    state: &AppState,
    session: &Session,
    status: u16,
    top: Markup,
    draft: &Draft,
) -> HttpResponse {
    let merchant_id = session.merchant.id.clone();
    let listed = state
        .db
        .run(move |conn| endpoint_rows::list(conn, &merchant_id, None, ENDPOINTS_SHOWN))
        .await;
    let rows = match listed {
        Ok(rows) => rows.unwrap_or_default(),
        Err(_) => return layout::unavailable(),
    };
    let (rows, has_more) = crate::db::page(rows, ENDPOINTS_SHOWN);
    page(
        status,
        "Webhooks",
        Some(session),
        html! {
            h1 { "Webhooks" }
            (top)
            h2 { "Endpoints" }
            @if rows.is_empty() { p { "No endpoints yet: add one below." } }
            @else {
                div.table-wrap {
                    table {
                        thead { tr { th { "URL" } th { "Description" } th { "Status" } th { "Events" } th { "Created" } } }
                        tbody {
                            @for e in &rows {
                                tr {
                                    td { a href={ "/dashboard/webhooks/" (e.id) } { (e.url) } }
                                    td { (e.description.as_deref().unwrap_or("–")) }
                                    td { span class={ "status " (e.status.as_str()) } { (e.status.as_str()) } }
                                    td { (events_text(&e.enabled_events)) }
                                    td { (format_timestamp(e.created_at)) }
                                }
                            }
                        }
                    }
                }
                @if has_more { p { "Only the newest " (ENDPOINTS_SHOWN) " are shown." } }
            }
            h2 { "Add an endpoint" }
            form.card method="post" action="/dashboard/webhooks" {
                (guard(session))
                (endpoint_fields("new", draft))
                button type="submit" { "Add endpoint" }
            }
        },
    )
}

/// URL, description and events, with ids prefixed by `form` (one page has two such forms
/// at most: add, edit).
fn endpoint_fields(form: &str, draft: &Draft) -> Markup {
    let id = |field: &str| format!("{form}_{field}");
    html! {
        div.wide {
            label for=(id("url")) { "URL" }
            input id=(id("url")) type="url" name="url" value=(draft.url) required maxlength="2048"
                placeholder="https://example.com/webhooks" autocomplete="off";
        }
        div.wide {
            label for=(id("description")) { "Description" }
            input id=(id("description")) type="text" name="description" value=(draft.description) maxlength="1000";
        }
        div.wide {
            label for=(id("events")) { "Events" }
            input id=(id("events")) type="text" name="events" value=(draft.events) required
                aria-describedby=(id("events_help")) autocomplete="off" spellcheck="false";
            small.hint id=(id("events_help")) {
                "* for every event, or types separated by commas or spaces: "
                @for (i, t) in EventType::ALL.iter().enumerate() {
                    @if i > 0 { ", " }
                    code { (t.as_str()) }
                }
            }
        }
    }
}

/// `POST /dashboard/webhooks`: adds an endpoint and shows its page with the secret (this
/// answer only).
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(session, &form, |session, key| {
        let (state, form) = (&state, &form);
        async move {
            let mut body = json!({"url": form.url.trim(), "enabled_events": form.enabled_events()});
            if !form.description.trim().is_empty() {
                body["description"] = json!(form.description.trim());
            }
            let request = NewEndpoint::parse(body.to_string().as_bytes())?;
            endpoints::create(state, &session.merchant, Some(key), request).await
        }
    })
    .await;
    match ran {
        Acted::Done(session, answer) => {
            let created = answer_json(&answer);
            let (Some(id), Some(secret)) = (created["id"].as_str(), created["secret"].as_str())
            else {
                return layout::unavailable();
            };
            let top = html! {
                (notice("Endpoint added."))
                (secret_shown(secret, &answer))
            };
            render_endpoint(&state, &session, id, &Deliveries::default(), 200, top, None).await
        }
        Acted::Refused(session, status, detail) => {
            render_list(&state, &session, status, problem(&detail), &form.draft()).await
        }
        Acted::Answered(response) => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_and_times_are_read_as_people_write_them() {
        let form = |events: &str| WebhookForm {
            csrf_token: None,
            idempotency_key: None,
            url: String::new(),
            description: String::new(),
            events: events.to_owned(),
            status: String::new(),
            expire_current_in_s: String::new(),
            since: String::new(),
            confirm: String::new(),
        };
        assert_eq!(form("*").enabled_events(), ["*"]);
        assert_eq!(
            form(" payment.succeeded,refund.failed\n dispute.created ,").enabled_events(),
            ["payment.succeeded", "refund.failed", "dispute.created"]
        );
        assert!(form(" , ").enabled_events().is_empty());
        assert_eq!(
            events_text(r#"["payment.succeeded","refund.failed"]"#),
            "payment.succeeded, refund.failed"
        );
        assert_eq!(events_text(r#"["*"]"#), "*");
        assert_eq!(
            actions::since_rfc3339("2026-03-01T12:30"),
            "2026-03-01T12:30:00.000000Z"
        );
        assert_eq!(
            actions::since_rfc3339("2026-03-01T12:30:05+02:00"),
            "2026-03-01T12:30:05+02:00"
        );
        assert_eq!(actions::since_rfc3339(" yesterday "), "yesterday");
    }
}
