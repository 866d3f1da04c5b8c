use actix_web::{HttpRequest, HttpResponse, web};

use super::authenticate::Authenticated;
use super::input::{NoQuery, Query};
use crate::domain::RequestRef;
use crate::domain::{EventId, IdempotencyKey};
use crate::error::ApiError;
use crate::events::{self, EventPage, EventType};
use crate::state::AppState;

/// The API request about to make a change, as its event will name it.
pub fn request_ref(req: &HttpRequest, key: Option<&IdempotencyKey>) -> RequestRef {
    RequestRef {
        id: super::input::request_id(req).unwrap_or_default(),
        idempotency_key: key.map(|k| k.as_str().to_owned()),
    }
}

/// Events, newest first; or with `order=asc` the feed, which never skips: ask again with
/// `after` = the last id you got and you see every event exactly once, in the order they
/// became visible, however many changes commit at once.
#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "list_events",
    tag = "events",
    security(("api_key" = [])),
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "Page size, 1 to 100 (default 10)"),
        ("type" = Option<EventType>, Query, description = "Only events of this type"),
        ("order" = Option<String>, Query, pattern = "^(asc|desc)$", description = "`desc` (default): newest first; `asc`: the feed, oldest kept event first"),
        ("starting_after" = Option<String>, Query, description = "With `order=desc`: an event id; the page starts after it"),
        ("after" = Option<String>, Query, description = "With `order=asc`: the last event id you got; the page holds what became visible after it"),
    ),
    responses(
        (status = 200, description = "A page of events", body = crate::events::view::EventList),
        (status = 404, description = "`not_found`: `after` or `starting_after` names no event of yours (it may have been pruned: start again without it)", body = crate::error::Problem, content_type = "application/problem+json"),
        super::problems::ListProblems,
    )
)]
pub async fn list(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req, &["limit", "type", "order", "starting_after", "after"])?;
    let limit = query.limit()?;
    let kind = query
        .get("type")
        .map(|v| {
            EventType::parse(v).ok_or_else(|| {
                ApiError::invalid(
                    "type",
                    "`type` must be an event type, e.g. payment.succeeded",
                )
            })
        })
        .transpose()?;
    let event_id = |name: &str| -> Result<Option<String>, ApiError> {
        match query.get(name) {
            None => Ok(None),
            Some(v) if EventId::is_valid(v) => Ok(Some(v.to_owned())),
            Some(_) => Err(ApiError::invalid(
                name,
                format!("`{name}` must be an event id"),
            )),
        }
    };
    let page = match query.get("order") {
        None | Some("desc") => {
            if query.get("after").is_some() {
                return Err(ApiError::invalid("after", "`after` goes with `order=asc`"));
            }
            EventPage::NewestFirst {
                starting_after: event_id("starting_after")?,
            }
        }
        Some("asc") => {
            if query.get("starting_after").is_some() {
                return Err(ApiError::invalid(
                    "starting_after",
                    "`starting_after` goes with `order=desc`; with `order=asc`, continue with `after`",
                ));
            }
            EventPage::Feed {
                after: event_id("after")?,
            }
        }
        Some(_) => return Err(ApiError::invalid("order", "`order` must be asc or desc")),
    };
    let body = events::list_events(&state, &merchant, page, kind, limit).await?;
    Ok(json(body))
}

/// One event.
#[utoipa::path(
    get,
    path = "/v1/events/{id}",
    operation_id = "get_event",
    tag = "events",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Event id (`evt_…`)")),
    responses(
        (status = 200, description = "The event", body = crate::events::view::EventObject),
        super::problems::EventNotFoundProblems,
    )
)]
pub async fn get(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    _: NoQuery,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let body = events::get_event(&state, &merchant, path.into_inner()).await?;
    Ok(json(body))
}

pub(super) fn json(body: String) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(body)
}
