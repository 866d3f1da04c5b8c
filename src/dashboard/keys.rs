//! The API keys page: the merchant's keys (id, label, created, last 4 characters, active or
//! revoked; never a key), a form to create one and a button to revoke each active one.
//!
//! A new key is shown once, on the answer page to its create form (200, never in a URL or a
//! redirect), and never again: only its hash is stored, in `api_keys`; the form's
//! operation stores `{"id": …}` as its answer. The key is made before the operation, so a
//! second submit of the same form (a double click, a reload) creates nothing and is told
//! which key its earlier submit created. Both actions are [`crate::api_keys`]'s, the CLI's
//! own, run once per form's `Idempotency-Key`. Revoking the key this session was opened
//! with ends the session: the next page asks to sign in.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::html;
use serde::Deserialize;

use super::actions::{Acted, Guarded, run_action};
use super::layout::{self, done, guard, page};
use super::session::Session;
use crate::api_keys::{self, NewKey};
use crate::db::merchants::{self as key_rows, ApiKey};
use crate::domain::format_timestamp;
use crate::state::AppState;

#[derive(Deserialize)]
pub struct KeyForm {
    csrf_token: Option<String>,
    idempotency_key: Option<String>,
    #[serde(default)]
    label: String,
}

impl Guarded for KeyForm {
    fn csrf_token(&self) -> Option<&str> {
        self.csrf_token.as_deref()
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }
}

/// What the page says above the list.
enum Shown<'a> {
    Nothing,
    Notice(&'a str),
    /// The key this request created: shown this once.
    NewKey(&'a NewKey),
    /// The form had been sent before: the key its first submit created (by id).
    CreatedEarlier(&'a str),
    Problem(&'a str),
}

/// `GET /dashboard/api-keys`.
pub async fn list(state: web::Data<AppState>, req: HttpRequest, session: Session) -> HttpResponse {
    let shown = match done(&req).as_deref() {
        Some("revoked") => Shown::Notice("API key revoked."),
        Some("already-revoked") => {
            Shown::Notice("That API key had already been revoked; nothing changed.")
        }
        _ => Shown::Nothing,
    };
    render_keys(&state, &session, 200, shown).await
}

/// `POST /dashboard/api-keys`: a new key, shown on the answer page, once.
pub async fn create(
    state: web::Data<AppState>,
    session: Session,
    form: web::Form<KeyForm>,
) -> HttpResponse {
    let form = form.into_inner();
    // Made before the operation: the operation stores only its hash, and its answer only
    // its id, so the key can be shown by this request alone, if it is the one that
    // created it.
    let new_key = NewKey::generate();
    let ran = run_action(session, &form, |session, key| {
        let (state, label, new_key) = (&state, &form.label, &new_key);
        async move { api_keys::create_once(state, &session.merchant, key, label, new_key).await }
    })
    .await;
    match ran {
        Acted::Done(session, answer) => {
            let id = api_keys::answered_id(&answer).unwrap_or_default();
            let shown = if id == new_key.id() {
                Shown::NewKey(&new_key)
            } else {
                Shown::CreatedEarlier(&id)
            };
            render_keys(&state, &session, 200, shown).await
        }
        Acted::Refused(session, status, detail) => {
            render_keys(&state, &session, status, Shown::Problem(&detail)).await
        }
        Acted::Answered(response) => response,
    }
}

/// `POST /dashboard/api-keys/{id}/revoke`.
pub async fn revoke(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<String>,
    form: web::Form<KeyForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let ran = run_action(session, &form, |session, key| {
        let (state, key_id) = (&state, path.as_str());
        async move { api_keys::revoke_once(state, &session.merchant, key, key_id).await }
    })
    .await;
    match ran {
        Acted::Done(_, answer) => {
            let before = serde_json::from_str::<serde_json::Value>(&answer.body)
                .is_ok_and(|body| body["revoked"] == "before");
            // Revoking this session's own key ended the session: that page asks to sign in.
            layout::see_other(if before {
                "/dashboard/api-keys?done=already-revoked"
            } else {
                "/dashboard/api-keys?done=revoked"
            })
        }
        Acted::Refused(session, status, detail) => {
            render_keys(&state, &session, status, Shown::Problem(&detail)).await
        }
        Acted::Answered(response) => response,
    }
}

/// The page: what to say first, the create form, the keys.
async fn render_keys(
    state: &AppState,
    session: &Session,
    status: u16,
    shown: Shown<'_>,
) -> HttpResponse {
    let (merchant_id, key_hash) = (
        session.merchant.id.clone(),
        session.api_key_hash().to_owned(),
    );
    let loaded = state
        .db
        .run(move |conn| {
            let keys = key_rows::merchant_api_keys(conn, &merchant_id)?;
            let current = key_rows::api_key_id_by_hash(conn, &key_hash)?;
            Ok((keys, current))
        })
        .await;
    let (keys, current): (Vec<ApiKey>, Option<String>) = match loaded {
        Ok(loaded) => loaded,
        Err(_) => return layout::unavailable(),
    };
    page(
        status,
        "API keys",
        Some(session),
        html! {
            h1 { "API keys" }
            @match shown {
                Shown::Nothing => {}
                Shown::Notice(notice) => { p.notice role="status" { (notice) } }
                Shown::Problem(problem) => { p.error role="alert" { (problem) } }
                Shown::NewKey(new_key) => {
                    section.card.new-key aria-labelledby="new-key-title" {
                        h2 #new-key-title { "Your new API key " (new_key.id()) }
                        p { "Copy it now: it is shown this once. Only its hash is kept, so it cannot be shown again." }
                        p { code #new-key { (new_key.key()) } }
                    }
                }
                Shown::CreatedEarlier(id) => {
                    p.notice role="status" {
                        "This form was sent before: the key " (id) " was created by your earlier submit. It was shown once, then, and cannot be shown again; nothing new was created."
                    }
                }
            }
            h2 { "Create an API key" }
            form.card method="post" action="/dashboard/api-keys" {
                (guard(session))
                div {
                    label for="key_label" { "Label" }
                    input #key_label type="text" name="label" maxlength=(api_keys::MAX_LABEL_CHARS) placeholder="e.g. checkout servers";
                }
                button type="submit" { "Create API key" }
            }
            h2 { "Keys" }
            @if keys.is_empty() { p { "No API keys." } }
            @else {
                div.table-wrap {
                    table {
                        thead { tr { th { "Key" } th { "Label" } th { "Created" } th { "Last 4" } th { "Status" } th { "Action" } } }
                        tbody {
                            @for key in &keys {
                                @let own = current.as_deref() == Some(key.id.as_str());
                                tr {
                                    td {
                                        (key.id)
                                        @if own { " " span.status.own { "this session's key" } }
                                    }
                                    td { (key.label.as_deref().unwrap_or("–")) }
                                    td { (format_timestamp(key.created_at)) }
                                    td { code { (key.last4.as_deref().unwrap_or("????")) } }
                                    td {
                                        @match key.revoked_at {
                                            Some(at) => { span.status.revoked { "revoked" } " " (format_timestamp(at)) }
                                            None => { span.status.active { "active" } }
                                        }
                                    }
                                    td {
                                        @if key.revoked_at.is_none() {
                                            form.inline method="post" action={ "/dashboard/api-keys/" (key.id) "/revoke" } {
                                                (guard(session))
                                                @if own {
                                                    button.secondary type="submit" aria-label={ "Revoke " (key.id) " and sign out" } { "Revoke and sign out" }
                                                } @else {
                                                    button.secondary type="submit" aria-label={ "Revoke " (key.id) } { "Revoke" }
                                                }
                                            }
                                            @if own { p.hint { "You signed in with this key: revoking it ends this session." } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}
