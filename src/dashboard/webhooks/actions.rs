//! An endpoint's actions: save, disable or enable, rotate the secret, send a test event,
//! replay failed deliveries, delete. Each is the API's own function with the form's key.

use super::*;

/// The page again after a refusal, with the problem's `detail`.
pub(super) async fn refused_on_endpoint(
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

/// The API's update of endpoint `id` with `body`, as `PATCH` would send it.
async fn save_update(
    state: &AppState,
    session: &Session,
    id: String,
    key: crate::domain::IdempotencyKey,
    body: &serde_json::Value,
) -> Result<Answer, ApiError> {
    let update = EndpointUpdate::parse(body.to_string().as_bytes())?;
    endpoints::update(state, &session.merchant, id, Some(key), update).await
}

/// `POST /dashboard/webhooks/{id}`: saves the edit form (URL, description, events).
pub async fn update(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(session, &form, |session, key| {
        let (state, form, id) = (&state, &form, path.as_str().to_owned());
        async move {
            let body = json!({"url": form.url.trim(), "enabled_events": form.enabled_events(),
                "description": form.description.trim()});
            save_update(state, &session, id, key, &body).await
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
    session: Session,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(session, &form, |session, key| {
        let (state, form, id) = (&state, &form, path.as_str().to_owned());
        async move {
            let body = json!({"status": form.status.trim()});
            save_update(state, &session, id, key, &body).await
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
    session: Session,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(session, &form, |session, key| {
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
    session: Session,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(session, &form, |session, key| {
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
pub(super) fn since_rfc3339(text: &str) -> String {
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
    session: Session,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(session, &form, |session, key| {
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

/// `POST /dashboard/webhooks/{id}/delete`: the API's delete, under the form's key (a second
/// submit of the form replays the first one's result), once the confirmation box is ticked.
pub async fn delete(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<String>,
    form: web::Form<WebhookForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(session, &form, |session, key| {
        let (state, form, id) = (&state, &form, path.as_str().to_owned());
        async move {
            if form.confirm != "yes" {
                return Err(ApiError::invalid(
                    "confirm",
                    "tick \u{201c}Yes, delete this endpoint and its deliveries\u{201d} to delete it",
                ));
            }
            endpoints::delete(state, &session.merchant, id, Some(key)).await
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
