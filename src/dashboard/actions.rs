//! The payment page's actions: the API's own operations, with the `Idempotency-Key` the form
//! was drawn with and the session's CSRF token. A refusal shows the problem's `detail` on the
//! payment page; success goes back to it (303, so a reload does not post again).

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::format::parse_major;
use super::layout;
use super::pages::render_payment;
use super::session::{self, Session};
use crate::domain::{IdempotencyKey, PaymentId};
use crate::error::ApiError;
use crate::idempotency::Answer;
use crate::payments::authorization::{self, NewCancel, NewCapture, Requested};
use crate::refunds::{self, NewRefund};
use crate::state::AppState;

#[derive(Deserialize)]
pub struct ActionForm {
    csrf_token: Option<String>,
    idempotency_key: Option<String>,
    #[serde(default)]
    amount: String,
}

pub async fn refund(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    act(&state, &req, &path, form.into_inner(), "refund").await
}

pub async fn capture(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    act(&state, &req, &path, form.into_inner(), "capture").await
}

pub async fn cancel(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<String>,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    act(&state, &req, &path, form.into_inner(), "cancel").await
}

async fn act(
    state: &AppState,
    req: &HttpRequest,
    id: &str,
    form: ActionForm,
    what: &'static str,
) -> HttpResponse {
    let session = match session::require(req, state).await {
        Ok(session) => session,
        Err(response) => return response,
    };
    if !session::csrf_ok(&session, form.csrf_token.as_deref()) {
        return layout::csrf_failed();
    }
    match perform(state, &session, id, &form, what).await {
        Ok(answer) if answer.status < 300 => {
            layout::see_other(&format!("/dashboard/payments/{id}?done={what}"))
        }
        Ok(answer) => {
            let detail = serde_json::from_str::<serde_json::Value>(&answer.body)
                .ok()
                .and_then(|p| p["detail"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "the action was refused".to_owned());
            render_payment(state, &session, id, answer.status, None, Some(&detail)).await
        }
        Err(ApiError::NotFound(_)) => layout::not_found(&session, "payment"),
        Err(e) => {
            let status = actix_web::ResponseError::status_code(&e).as_u16();
            render_payment(state, &session, id, status, None, Some(&e.to_string())).await
        }
    }
}

/// Runs the action as the API would (the same parse, the same operation).
async fn perform(
    state: &AppState,
    session: &Session,
    id: &str,
    form: &ActionForm,
    what: &'static str,
) -> Result<Answer, ApiError> {
    let payment_id =
        PaymentId::parse(id).ok_or_else(|| ApiError::NotFound("no such payment".to_owned()))?;
    let key = form
        .idempotency_key
        .as_deref()
        .ok_or(ApiError::IdempotencyKeyMissing)
        .and_then(|k| {
            IdempotencyKey::parse(k.as_bytes()).map_err(ApiError::IdempotencyKeyInvalid)
        })?;
    let currency = {
        let (merchant_id, id) = (session.merchant.id.clone(), id.to_owned());
        state
            .db
            .run(move |conn| crate::db::payments::find(conn, &merchant_id, &id))
            .await?
            .ok_or_else(|| ApiError::NotFound("no such payment".to_owned()))?
            .currency
    };
    let amount =
        parse_major(&form.amount, &currency).map_err(|e| ApiError::invalid("amount", e))?;
    let body = match amount {
        Some(amount) => serde_json::json!({"amount": amount}),
        None => serde_json::json!({}),
    }
    .to_string();
    let merchant = &session.merchant;
    match what {
        "refund" => {
            let request = NewRefund::parse(body.as_bytes())?;
            refunds::create_refund(state, merchant, payment_id, key, request, None).await
        }
        "capture" => {
            let requested = Requested::Capture(NewCapture::parse(body.as_bytes())?);
            authorization::operate(state, merchant, payment_id, key, requested, None).await
        }
        _ => {
            let requested = Requested::Cancel(NewCancel::parse(b"{}")?);
            authorization::operate(state, merchant, payment_id, key, requested, None).await
        }
    }
}
