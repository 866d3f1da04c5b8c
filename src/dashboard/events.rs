//! The events page: the feed, newest first, by type, each event's JSON shown as text.

use actix_web::{HttpResponse, web};
use maud::html;
use serde::Deserialize;

use super::layout::{self, page};
use super::pages::PAGE_SIZE;
use super::session::Session;
use crate::db;
use crate::domain::format_timestamp;
use crate::state::AppState;

#[derive(Deserialize)]
pub struct EventsQuery {
    #[serde(rename = "type")]
    event_type: Option<String>,
    starting_after: Option<String>,
}

/// `GET /dashboard/events`: the feed, newest first, by type; each event's JSON.
pub async fn events(
    state: web::Data<AppState>,
    session: Session,
    query: web::Query<EventsQuery>,
) -> HttpResponse {
    use crate::events::EventType;
    let query = query.into_inner();
    let kind = match layout::known_filter("type", query.event_type.as_deref(), EventType::parse) {
        Ok(kind) => kind,
        Err(unknown) => return unknown.page(),
    };
    let after = query.starting_after.filter(|a| !a.is_empty());
    // As text for the query and the next page's link.
    let wanted = kind.map(EventType::as_str);
    let (merchant_id, cursor) = (session.merchant.id.clone(), after);
    let listed = state
        .db
        .run(move |conn| {
            crate::db::events::list_newest_first(
                conn,
                &merchant_id,
                wanted,
                cursor.as_deref(),
                PAGE_SIZE,
            )
        })
        .await;
    let rows = match listed {
        Ok(Some(rows)) => rows,
        Ok(None) => return layout::not_found(&session, "event to page from"),
        Err(_) => return layout::unavailable(),
    };
    let (rows, has_more) = db::page(rows, PAGE_SIZE);
    page(
        200,
        "Events",
        Some(&session),
        html! {
            h1 { "Events" }
            form.card method="get" action="/dashboard/events" {
                div {
                    label for="type" { "Type" }
                    select #type name="type" {
                        option value="" { "any" }
                        @for t in EventType::ALL {
                            option value=(t.as_str()) selected[kind == Some(t)] { (t.as_str()) }
                        }
                    }
                }
                button type="submit" { "Filter" }
            }
            @if rows.is_empty() { p { "No events." } }
            @for event in &rows {
                details.card {
                    summary { (event.event_type) " · " (event.object_id) " · " (format_timestamp(event.created_at)) }
                    pre { code { (event.body) } }
                }
            }
            @if has_more {
                @if let Some(last) = rows.last() {
                    p {
                        a href={ "/dashboard/events?starting_after=" (last.id) "&type=" (wanted.unwrap_or_default()) } { "Next page" }
                    }
                }
            }
        },
    )
}
