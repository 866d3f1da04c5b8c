//! The payment page's actions: the API's own operations, with the `Idempotency-Key` the form
//! was drawn with and the session's CSRF token. A refusal shows the problem's `detail` on the
//! payment page; success goes back to it (303, so a reload does not post again).

use actix_web::{HttpResponse, web};
use serde::Deserialize;

use super::format::{money, parse_major};
use super::layout;
use super::pages::render_payment;
use super::session::{self, Session};
use crate::disputes::request::DisputeEvidence;
use crate::disputes::step::{close_dispute, update_dispute};
use crate::domain::{Amount, DisputeId, IdempotencyKey, PaymentId};
use crate::error::ApiError;
use crate::idempotency::Answer;
use crate::payments::authorization::{self, NewCancel, NewCapture, Requested};
use crate::payouts::{self, NewPayout};
use crate::refunds::{self, NewRefund};
use crate::state::AppState;

#[derive(Deserialize)]
pub struct ActionForm {
    csrf_token: Option<String>,
    idempotency_key: Option<String>,
    #[serde(default)]
    amount: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    destination: String,
    #[serde(default)]
    currency: String,
}

/// How an action ended.
pub(super) enum Acted {
    /// Done (or accepted, still running), with the operation's answer: most pages go back
    /// to where they were; some show what the answer says.
    Done(Session, Answer),
    /// Refused: the page again, with the problem's status and `detail`.
    Refused(Session, u16, String),
    /// No session, a forged form, the database away: this answer.
    Answered(HttpResponse),
}

/// The two hidden fields of every action form (see [`layout::guard`]).
pub(super) trait Guarded {
    fn csrf_token(&self) -> Option<&str>;
    fn idempotency_key(&self) -> Option<&str>;
}

impl Guarded for ActionForm {
    fn csrf_token(&self) -> Option<&str> {
        self.csrf_token.as_deref()
    }
    fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }
}

/// Runs one action of a signed-in session (the handler's [`Session`] argument): the CSRF
/// token checked, the form's key parsed, then `perform` (the API's operation with that key).
pub(super) async fn run_action<F, Fut>(session: Session, form: &impl Guarded, perform: F) -> Acted
where
    F: FnOnce(Session, IdempotencyKey) -> Fut,
    Fut: std::future::Future<Output = Result<Answer, ApiError>>,
{
    if !session::csrf_ok(&session, form.csrf_token()) {
        return Acted::Answered(layout::csrf_failed());
    }
    let key = match form
        .idempotency_key()
        .ok_or(ApiError::IdempotencyKeyMissing)
        .and_then(|k| IdempotencyKey::parse(k.as_bytes()).map_err(ApiError::IdempotencyKeyInvalid))
    {
        Ok(key) => key,
        Err(e) => return refused(session, &e),
    };
    match perform(session.clone(), key).await {
        Ok(answer) if answer.status < 300 => Acted::Done(session, answer),
        Ok(answer) => {
            let detail = serde_json::from_str::<serde_json::Value>(&answer.body)
                .ok()
                .and_then(|p| p["detail"].as_str().map(str::to_owned))
                .unwrap_or_else(|| "the action was refused".to_owned());
            Acted::Refused(session, answer.status, detail)
        }
        Err(e) => refused(session, &e),
    }
}

fn refused(session: Session, e: &ApiError) -> Acted {
    let status = actix_web::ResponseError::status_code(e).as_u16();
    Acted::Refused(session, status, e.to_string())
}

pub async fn refund(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<String>,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    on_payment(&state, session, &path, form.into_inner(), "refund").await
}

pub async fn capture(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<String>,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    on_payment(&state, session, &path, form.into_inner(), "capture").await
}

pub async fn cancel(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<String>,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    on_payment(&state, session, &path, form.into_inner(), "cancel").await
}

async fn on_payment(
    state: &AppState,
    session: Session,
    id: &str,
    form: ActionForm,
    what: &'static str,
) -> HttpResponse {
    let form = &form;
    let acted = run_action(session, form, |session, key| async move {
        perform(state, &session, id, form, key, what).await
    })
    .await;
    match acted {
        Acted::Done(..) => layout::see_other(&format!("/dashboard/payments/{id}?done={what}")),
        Acted::Refused(session, status, detail) => {
            render_payment(state, &session, id, status, None, Some(&detail)).await
        }
        Acted::Answered(response) => response,
    }
}

/// Runs the payment's action as the API would (the same parse, the same operation).
async fn perform(
    state: &AppState,
    session: &Session,
    id: &str,
    form: &ActionForm,
    key: IdempotencyKey,
    what: &'static str,
) -> Result<Answer, ApiError> {
    let payment_id =
        PaymentId::parse(id).ok_or_else(|| ApiError::NotFound("no such payment".to_owned()))?;
    let currency = {
        let (merchant_id, id) = (session.merchant.id.clone(), id.to_owned());
        state
            .db
            .run(move |conn| crate::db::payments::find(conn, &merchant_id, &id))
            .await?
            .ok_or_else(|| ApiError::NotFound("no such payment".to_owned()))?
            .currency
    };
    let body = amount_body(&form.amount, &currency)?;
    let (merchant, request_id) = (&session.merchant, session.request_id.clone());
    match what {
        "refund" => {
            let request = NewRefund::parse(body.as_bytes())?;
            refunds::create_refund(state, merchant, payment_id, key, request, request_id, None)
                .await
        }
        "capture" => {
            let requested = Requested::Capture(NewCapture::parse(body.as_bytes())?);
            authorization::operate(state, merchant, payment_id, key, requested, request_id).await
        }
        _ => {
            let requested = Requested::Cancel(NewCancel::parse(b"{}")?);
            authorization::operate(state, merchant, payment_id, key, requested, request_id).await
        }
    }
}

/// `{"amount": <minor units>}` from the form's major units, or `{}` when empty. An amount
/// out of what a payment moves is refused here, in the units the person typed.
fn amount_body(amount: &str, currency: &str) -> Result<String, ApiError> {
    let amount = parse_major(amount, currency).map_err(|e| ApiError::invalid("amount", e))?;
    if amount.is_some_and(|minor| Amount::parse(minor).is_err()) {
        return Err(ApiError::invalid(
            "amount",
            format!(
                "the amount must be from {} to {}",
                money(Amount::MIN, currency),
                money(Amount::MAX, currency)
            ),
        ));
    }
    Ok(match amount {
        Some(amount) => serde_json::json!({"amount": amount}),
        None => serde_json::json!({}),
    }
    .to_string())
}

/// `POST /dashboard/disputes/{id}/evidence`: saves and submits the evidence.
pub async fn submit_evidence(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<String>,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let acted = run_action(session, &form, |session, key| {
        let state = &state;
        let body = serde_json::json!({"evidence": {"text": form.text}, "submit": true}).to_string();
        async move {
            let id = DisputeId::parse(&path)
                .ok_or_else(|| ApiError::NotFound("no such dispute".to_owned()))?;
            let evidence = DisputeEvidence::parse(body.as_bytes())?;
            update_dispute(
                state,
                &session.merchant,
                id,
                key,
                evidence,
                session.request_id,
            )
            .await
        }
    })
    .await;
    after_dispute(&state, acted, "evidence").await
}

/// `POST /dashboard/disputes/{id}/accept`: accepts the loss.
pub async fn accept_dispute(
    state: web::Data<AppState>,
    session: Session,
    path: web::Path<String>,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let acted = run_action(session, &form, |session, key| {
        let state = &state;
        async move {
            let id = DisputeId::parse(&path)
                .ok_or_else(|| ApiError::NotFound("no such dispute".to_owned()))?;
            close_dispute(state, &session.merchant, id, key, session.request_id).await
        }
    })
    .await;
    after_dispute(&state, acted, "accept").await
}

async fn after_dispute(state: &AppState, acted: Acted, what: &str) -> HttpResponse {
    match acted {
        Acted::Done(..) => layout::see_other(&format!("/dashboard/disputes?done={what}")),
        Acted::Refused(session, status, detail) => {
            super::money_pages::render_disputes(state, &session, status, None, Some(&detail)).await
        }
        Acted::Answered(response) => response,
    }
}

/// `POST /dashboard/balance/payout`: a payout from the available balance.
pub async fn pay_out(
    state: web::Data<AppState>,
    session: Session,
    form: web::Form<ActionForm>,
) -> HttpResponse {
    let form = form.into_inner();
    let acted = run_action(session, &form, |session, key| {
        let state = &state;
        let form = &form;
        async move {
            let currency = form.currency.trim().to_ascii_lowercase();
            let amount = parse_major(&form.amount, &currency)
                .map_err(|e| ApiError::invalid("amount", e))?
                .ok_or_else(|| ApiError::invalid("amount", "`amount` is required"))?;
            let mut body = serde_json::json!({"amount": amount, "currency": currency});
            if !form.destination.trim().is_empty() {
                body["destination"] = serde_json::json!(form.destination.trim());
            }
            let request = NewPayout::parse(body.to_string().as_bytes())?;
            payouts::create_payout(
                state,
                &session.merchant,
                key,
                request,
                session.request_id,
                None,
            )
            .await
        }
    })
    .await;
    match acted {
        // The page says what became of it: a payout can fail at once (a closed account).
        Acted::Done(_, answer) => {
            let status = serde_json::from_str::<serde_json::Value>(&answer.body)
                .ok()
                .and_then(|payout| payout["status"].as_str().map(str::to_owned));
            let done = match status.as_deref() {
                Some("paid") => "payout_paid",
                Some("failed") => "payout_failed",
                _ => "payout_pending",
            };
            layout::see_other(&format!("/dashboard/balance?done={done}"))
        }
        Acted::Refused(session, status, detail) => {
            super::money_pages::render_balance(&state, &session, status, None, Some(&detail)).await
        }
        Acted::Answered(response) => response,
    }
}

#[cfg(test)]
mod tests {
    use super::amount_body;

    #[test]
    fn a_form_amount_is_read_and_bounded_in_major_units() {
        assert_eq!(
            amount_body("12.50", "usd").ok().as_deref(),
            Some(r#"{"amount":1250}"#)
        );
        assert_eq!(amount_body("", "usd").ok().as_deref(), Some("{}"));
        for (typed, currency, range) in [
            ("999999999999.99", "usd", "from 0.01 USD to 999999.99 USD"),
            ("0", "usd", "from 0.01 USD to 999999.99 USD"),
            ("100000000", "jpy", "from 1 JPY to 99999999 JPY"),
        ] {
            let refused = amount_body(typed, currency).expect_err("out of range");
            assert!(refused.to_string().contains(range), "{typed}: {refused}");
        }
    }
}
