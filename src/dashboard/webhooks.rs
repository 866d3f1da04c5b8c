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

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::{Value, json};

use super::actions::{Acted, Guarded, run_action};
use super::layout::{self, done, guard, page};
use super::session::{self, Session};
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

/// The answer to an action whose result the endpoint's page shows (200, not a redirect):
/// `top` made from the operation's answer above the page, or the refusal on the page.
async fn shown_on_endpoint(
    state: &AppState,
    id: &str,
    acted: Acted,
    top: impl FnOnce(&Answer) -> Option<Markup>,
) -> HttpResponse {
    match acted {
        Acted::Done(session, answer) => match top(&answer) {
            Some(top) => {
                let deliveries = Deliveries::default();
                render_endpoint(state, &session, id, &deliveries, 200, top, None).await
            }
            None => layout::unavailable(),
        },
        Acted::Refused(session, status, detail) => {
            refused_on_endpoint(state, &session, id, status, &detail, None).await
        }
        Acted::Answered(response) => response,
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
pub async fn list(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    let session = match session::require(&req, &state).await {
        Ok(session) => session,
        Err(response) => return response,
    };
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
    req: HttpRequest,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(&state, &req, &form, |session, key| {
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

// ---------------------------------------------------------------------------------------
// One endpoint.

/// The endpoint page's query: its deliveries by status, paged.
#[derive(Deserialize, Default)]
struct Deliveries {
    status: Option<String>,
    starting_after: Option<String>,
}

impl Deliveries {
    fn of(req: &HttpRequest) -> Self {
        web::Query::<Self>::from_query(req.query_string())
            .map(web::Query::into_inner)
            .unwrap_or_default()
    }

    /// The status filter, when it names one.
    fn status(&self) -> Option<DeliveryStatus> {
        self.status.as_deref().and_then(DeliveryStatus::parse)
    }

    /// The cursor, when it is a delivery id.
    fn cursor(&self) -> Option<String> {
        self.starting_after
            .clone()
            .filter(|id| DeliveryId::is_valid(id))
    }
}

/// `GET /dashboard/webhooks/{id}`.
pub async fn endpoint(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
) -> HttpResponse {
    let session = match session::require(&req, &state).await {
        Ok(session) => session,
        Err(response) => return response,
    };
    let top = match done(&req).as_deref() {
        Some("updated") => notice("Endpoint saved."),
        Some("enabled") => notice("Endpoint enabled: what is pending is delivered again."),
        Some("disabled") => notice("Endpoint disabled: nothing is delivered to it."),
        _ => html! {},
    };
    let query = Deliveries::of(&req);
    render_endpoint(&state, &session, &path, &query, 200, top, None).await
}

/// The endpoint's page; `top` (notices, a secret, a result, a refusal) under its title;
/// `draft` fills the edit form instead of the stored values.
async fn render_endpoint(
    state: &AppState,
    session: &Session,
    id: &str,
    query: &Deliveries,
    status: u16,
    top: Markup,
    draft: Option<&Draft>,
) -> HttpResponse {
    if !EndpointId::is_valid(id) {
        return layout::not_found(session, "webhook endpoint");
    }
    let (merchant_id, id) = (session.merchant.id.clone(), id.to_owned());
    let (filter, cursor) = (query.status(), query.cursor());
    let loaded = state
        .db
        .run(move |conn| {
            let Some(endpoint) = endpoint_rows::find(conn, &merchant_id, &id)? else {
                return Ok(None);
            };
            let deliveries = delivery_rows::list_for_endpoint(
                conn,
                &id,
                filter,
                cursor.as_deref(),
                DELIVERIES_PAGE,
            )?;
            Ok(Some((endpoint, deliveries)))
        })
        .await;
    let (endpoint, deliveries) = match loaded {
        Ok(Some((endpoint, Some(deliveries)))) => (endpoint, deliveries),
        Ok(Some((_, None))) => return layout::not_found(session, "delivery to page from"),
        Ok(None) => return layout::not_found(session, "webhook endpoint"),
        Err(_) => return layout::unavailable(),
    };
    let (deliveries, has_more) = crate::db::page(deliveries, DELIVERIES_PAGE);
    let stored = Draft::of(&endpoint);
    let draft = draft.unwrap_or(&stored);
    let base = format!("/dashboard/webhooks/{}", endpoint.id);
    let action = |what: &str| format!("{base}/{what}");
    let since_default = (now() - chrono::Duration::hours(REPLAY_DEFAULT_HOURS))
        .format(SINCE_FORMAT)
        .to_string();
    let enabled = endpoint.status == EndpointStatus::Enabled;
    page(
        status,
        "Webhook endpoint",
        Some(session),
        html! {
            p { a href="/dashboard/webhooks" { "← Webhooks" } }
            h1 { "Webhook endpoint " (endpoint.id) }
            (top)
            dl.fields.card {
                dt { "URL" } dd { (endpoint.url) }
                dt { "Description" } dd { (endpoint.description.as_deref().unwrap_or("–")) }
                dt { "Status" } dd { span class={ "status " (endpoint.status.as_str()) } { (endpoint.status.as_str()) } }
                dt { "Events" } dd { (events_text(&endpoint.enabled_events)) }
                @if let Some(until) = endpoint.previous_secret_expires_at.filter(|u| *u > now()) {
                    dt { "Previous secret" } dd { "still signs until " (format_timestamp(until)) }
                }
                dt { "Created" } dd { (format_timestamp(endpoint.created_at)) }
                dt { "Updated" } dd { (format_timestamp(endpoint.updated_at)) }
            }
            div.actions {
                form.inline method="post" action=(action("status")) {
                    (guard(session))
                    @if enabled {
                        input type="hidden" name="status" value="disabled";
                        button.secondary type="submit" { "Disable" }
                    } @else {
                        input type="hidden" name="status" value="enabled";
                        button type="submit" { "Enable" }
                    }
                }
                form.inline method="post" action=(action("test")) {
                    (guard(session))
                    button type="submit" { "Send test event" }
                }
            }
            h2 { "Edit" }
            form.card method="post" action=(base) {
                (guard(session))
                (endpoint_fields("edit", draft))
                button type="submit" { "Save" }
            }
            h2 { "Rotate secret" }
            form.card method="post" action=(action("rotate")) {
                (guard(session))
                div {
                    label for="rotate_expire" { "Current secret keeps signing for" }
                    select #rotate_expire name="expire_current_in_s" {
                        option value="0" { "no time (stops at once)" }
                        option value="3600" { "1 hour" }
                        option value="86400" selected { "24 hours" }
                        option value="604800" { "7 days" }
                    }
                }
                button type="submit" { "Rotate secret" }
            }
            h2 { "Replay failed deliveries" }
            form.card method="post" action=(action("replay")) {
                (guard(session))
                div {
                    label for="replay_since" { "Events since (UTC)" }
                    input #replay_since type="datetime-local" name="since" value=(since_default) required;
                }
                button type="submit" { "Replay failed deliveries" }
            }
            h2 #deliveries { "Deliveries" }
            (deliveries_filter(&base, query.status()))
            (deliveries_table(&deliveries))
            @if has_more {
                @if let Some(last) = deliveries.last() {
                    p {
                        a href={ (base) "?status=" (query.status().map_or("", DeliveryStatus::as_str)) "&starting_after=" (last.id) "#deliveries" } { "Older deliveries" }
                    }
                }
            }
            h2 { "Delete" }
            form.card method="post" action=(action("delete")) {
                (guard(session))
                div.check {
                    input #confirm_delete type="checkbox" name="confirm" value="yes" required;
                    label for="confirm_delete" { "Yes, delete this endpoint and its deliveries" }
                }
                button.danger type="submit" { "Delete endpoint" }
            }
        },
    )
}

fn deliveries_filter(base: &str, current: Option<DeliveryStatus>) -> Markup {
    html! {
        form.inline method="get" action=(base) {
            div {
                label for="delivery_status" { "Status" }
                select #delivery_status name="status" {
                    option value="" { "any" }
                    @for s in DeliveryStatus::ALL {
                        option value=(s.as_str()) selected[current == Some(*s)] { (s.as_str()) }
                    }
                }
            }
            button.secondary type="submit" { "Filter" }
        }
    }
}

fn deliveries_table(rows: &[DeliveryRow]) -> Markup {
    let when = |t: Option<Timestamp>| t.map_or("–".to_owned(), format_timestamp);
    html! {
        @if rows.is_empty() { p { "No deliveries." } }
        @else {
            div.table-wrap {
                table.deliveries {
                    thead { tr { th { "Event" } th { "Status" } th { "Attempts" } th { "Last attempt" } th { "Next attempt" } } }
                    tbody {
                        @for d in rows {
                            tr {
                                td { (d.event_type) br; small { (d.event_id) } }
                                td { span class={ "status " (d.status.as_str()) } { (d.status.as_str()) } }
                                td { (d.attempts) }
                                td {
                                    @if d.last_attempt_at.is_some() {
                                        (d.last_status_code.map_or("no answer".to_owned(), |c| format!("HTTP {c}")))
                                        @if let Some(error) = &d.last_error { " · " (error) }
                                        @if let Some(ms) = d.last_duration_ms { " · " (ms) " ms" }
                                        br; small { (when(d.last_attempt_at)) }
                                    } @else { "–" }
                                }
                                td { (when(d.next_attempt_at)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// An endpoint's actions.

/// The page again after a refusal, with the problem's `detail`.
async fn refused_on_endpoint(
    state: &AppState,
    session: &Session,
    id: &str,
    status: u16,
    detail: &str,
    draft: Option<&Draft>,
) -> HttpResponse {
    render_endpoint(
        state,
        session,
        id,
        &Deliveries::default(),
        status,
        problem(detail),
        draft,
    )
    .await
}

/// `POST /dashboard/webhooks/{id}`: saves the edit form (URL, description, events).
pub async fn update(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(&state, &req, &form, |session, key| {
        let (state, form, id) = (&state, &form, path.as_str().to_owned());
        async move {
            let body = json!({"url": form.url.trim(), "enabled_events": form.enabled_events(),
                "description": form.description.trim()});
            let update = EndpointUpdate::parse(body.to_string().as_bytes())?;
            endpoints::update(state, &session.merchant, id, Some(key), update).await
        }
    })
    .await;
    match ran {
        Acted::Done(..) => layout::see_other(&format!(
            "/dashboard/webhooks/{}?done=updated",
            path.as_str()
        )),
        Acted::Refused(session, status, detail) => {
            let draft = form.draft();
            refused_on_endpoint(&state, &session, &path, status, &detail, Some(&draft)).await
        }
        Acted::Answered(response) => response,
    }
}

/// `POST /dashboard/webhooks/{id}/status`: `Disable` or `Enable`.
pub async fn set_status(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(&state, &req, &form, |session, key| {
        let (state, form, id) = (&state, &form, path.as_str().to_owned());
        async move {
            let body = json!({"status": form.status.trim()});
            let update = EndpointUpdate::parse(body.to_string().as_bytes())?;
            endpoints::update(state, &session.merchant, id, Some(key), update).await
        }
    })
    .await;
    match ran {
        Acted::Done(_, answer) => {
            let done = match answer_json(&answer)["status"].as_str() {
                Some("enabled") => "enabled",
                _ => "disabled",
            };
            layout::see_other(&format!(
                "/dashboard/webhooks/{}?done={done}",
                path.as_str()
            ))
        }
        Acted::Refused(session, status, detail) => {
            refused_on_endpoint(&state, &session, &path, status, &detail, None).await
        }
        Acted::Answered(response) => response,
    }
}

/// `POST /dashboard/webhooks/{id}/rotate`: a new secret, shown on the page this answers.
pub async fn rotate(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(&state, &req, &form, |session, key| {
        let (state, form, id) = (&state, &form, path.as_str().to_owned());
        async move {
            let seconds = form.expire_current_in_s.trim();
            let body = if seconds.is_empty() {
                json!({})
            } else {
                let seconds: i64 = seconds.parse().map_err(|_| {
                    ApiError::invalid(
                        "expire_current_in_s",
                        "`expire_current_in_s` must be a number of seconds",
                    )
                })?;
                json!({ "expire_current_in_s": seconds })
            };
            let rotation = Rotation::parse(body.to_string().as_bytes())?;
            endpoints::rotate_secret(state, &session.merchant, id, Some(key), rotation).await
        }
    })
    .await;
    shown_on_endpoint(&state, &path, ran, |answer| {
        let rotated = answer_json(answer);
        let secret = rotated["secret"].as_str()?;
        Some(html! {
            (notice("Secret rotated."))
            (secret_shown(secret, answer))
        })
    })
    .await
}

/// `POST /dashboard/webhooks/{id}/test`: one signed test event now; how it went.
pub async fn test(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(&state, &req, &form, |session, key| {
        let (state, req, id) = (&state, &req, path.as_str().to_owned());
        async move {
            let made_by = crate::routes::events::request_ref(req, Some(&key));
            endpoints::send_test(state, &session.merchant, id, Some(key), made_by).await
        }
    })
    .await;
    shown_on_endpoint(&state, &path, ran, |answer| {
        let result = answer_json(answer);
        let delivered = result["delivered"].as_bool() == Some(true);
        Some(html! {
                section.card aria-labelledby="test_title" role="status" {
                    h2 #test_title { "Test event" }
                    dl.fields {
                        dt { "Delivered" } dd { @if delivered { "yes" } @else { "no" } }
                        dt { "Status code" } dd {
                            @if let Some(code) = result["status_code"].as_u64() { (code) } @else { "no answer" }
                        }
                        dt { "Error" } dd { (result["error"].as_str().unwrap_or("–")) }
                        dt { "Duration" } dd { (result["duration_ms"].as_u64().unwrap_or(0)) " ms" }
                    }
                    (replayed_note(answer))
                }
        })
    })
    .await
}

/// The `Events since` field as RFC 3339: a `datetime-local` value (no offset) is UTC;
/// anything else goes to the API as written (and is refused there if it is no time).
fn since_rfc3339(text: &str) -> String {
    let text = text.trim();
    if chrono::DateTime::parse_from_rfc3339(text).is_ok() {
        return text.to_owned();
    }
    [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M:%S%.f",
    ]
    .iter()
    .find_map(|format| chrono::NaiveDateTime::parse_from_str(text, format).ok())
    .map_or_else(|| text.to_owned(), format_timestamp)
}

/// `POST /dashboard/webhooks/{id}/replay`: the events since the given time whose delivery
/// to this endpoint failed are queued again; how many.
pub async fn replay(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(&state, &req, &form, |session, key| {
        let (state, form, id) = (&state, &form, path.as_str().to_owned());
        async move {
            let body = json!({"since": since_rfc3339(&form.since), "status": "failed"});
            let replay = Replay::parse(body.to_string().as_bytes())?;
            endpoints::replay(state, &session.merchant, id, Some(key), replay).await
        }
    })
    .await;
    shown_on_endpoint(&state, &path, ran, |answer| {
        let queued = answer_json(answer)["queued"].as_u64().unwrap_or(0);
        let said = match queued {
            1 => "Queued 1 failed delivery to be sent again.".to_owned(),
            n => format!("Queued {n} failed deliveries to be sent again."),
        };
        Some(html! {
            (notice(&said))
            (replayed_note(answer))
        })
    })
    .await
}

/// `POST /dashboard/webhooks/{id}/delete`: the API's delete (which takes no
/// `Idempotency-Key`: a second submit finds nothing to delete and says so), once the
/// confirmation box is ticked.
pub async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(&state, &req, &form, |session, _key| {
        let (state, form, id) = (&state, &form, path.as_str().to_owned());
        async move {
            if form.confirm != "yes" {
                return Err(ApiError::invalid(
                    "confirm",
                    "tick \u{201c}Yes, delete this endpoint and its deliveries\u{201d} to delete it",
                ));
            }
            let body = endpoints::delete(state, &session.merchant, id).await?;
            Ok(Answer::new(200, body))
        }
    })
    .await;
    match ran {
        Acted::Done(..) => layout::see_other("/dashboard/webhooks?done=deleted"),
        Acted::Refused(session, 404, _) => {
            let detail = no_such_endpoint().to_string();
            let top = problem(&format!("{detail} (deleted already?)"));
            render_list(&state, &session, 404, top, &Draft::new_endpoint()).await
        }
        Acted::Refused(session, status, detail) => {
            refused_on_endpoint(&state, &session, &path, status, &detail, None).await
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
            since_rfc3339("2026-03-01T12:30"),
            "2026-03-01T12:30:00.000000Z"
        );
        assert_eq!(
            since_rfc3339("2026-03-01T12:30:05+02:00"),
            "2026-03-01T12:30:05+02:00"
        );
        assert_eq!(since_rfc3339(" yesterday "), "yesterday");
    }
}
