//! One endpoint's page: its fields, its forms, its deliveries by status (paged).

use super::*;

/// The endpoint page's query: its deliveries by status, paged.
#[derive(Default)]
pub(super) struct Deliveries {
    /// The status filter, when it names one.
    status: Option<DeliveryStatus>,
    starting_after: Option<String>,
}

impl Deliveries {
    /// The query of `req`, unless its status names none.
    fn of(req: &HttpRequest) -> Result<Self, layout::UnknownFilter> {
        #[derive(Deserialize, Default)]
        struct Asked {
            status: Option<String>,
            starting_after: Option<String>,
        }
        let asked = web::Query::<Asked>::from_query(req.query_string())
            .map(web::Query::into_inner)
            .unwrap_or_default();
        Ok(Self {
            status: layout::known_filter("status", asked.status.as_deref(), DeliveryStatus::parse)?,
            starting_after: asked.starting_after,
        })
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
    session: Session,
    path: web::Path<String>,
) -> HttpResponse {
    let top = match done(&req).as_deref() {
        Some("updated") => notice("Endpoint saved."),
        Some("enabled") => notice("Endpoint enabled: what is pending is delivered again."),
        Some("disabled") => notice("Endpoint disabled: nothing is delivered to it."),
        _ => html! {},
    };
    let query = match Deliveries::of(&req) {
        Ok(query) => query,
        Err(unknown) => return unknown.page(),
    };
    render_endpoint(&state, &session, &path, &query, 200, top, None).await
}

/// The endpoint's page; `top` (notices, a secret, a result, a refusal) under its title;
/// `draft` fills the edit form instead of the stored values.
pub(super) async fn render_endpoint(
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
    let (filter, cursor) = (query.status, query.cursor());
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
            (deliveries_filter(&base, query.status))
            (deliveries_table(&deliveries))
            @if has_more {
                @if let Some(last) = deliveries.last() {
                    p {
                        a href={ (base) "?status=" (query.status.map_or("", DeliveryStatus::as_str)) "&starting_after=" (last.id) "#deliveries" } { "Older deliveries" }
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
