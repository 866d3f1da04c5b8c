//! The payments and a payment with its timeline and its actions, read through the same rows
//! the API reads.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};
use serde::Deserialize;

use super::format::money;
use super::layout::{self, done, guard, page};
use super::session::Session;
use crate::db::payments::{self as payment_rows, ListFilter, PaymentRow};
use crate::db::{self, DbConnection};
use crate::domain::{PaymentStatus, Timestamp, format_timestamp};
use crate::state::AppState;

#[derive(Deserialize)]
pub struct PaymentsQuery {
    status: Option<String>,
    customer: Option<String>,
    /// Made on or after this day (`YYYY-MM-DD`, UTC).
    from: Option<String>,
    /// Made on or before this day.
    to: Option<String>,
    q: Option<String>,
    starting_after: Option<String>,
}

/// Rows a list page shows.
pub(super) const PAGE_SIZE: i64 = 25;

/// `GET /dashboard/payments`: newest first; by status, customer and days (UTC, both
/// included); a search by payment id
/// or idempotency key goes straight to the payment.
pub async fn payments(
    state: web::Data<AppState>,
    session: Session,
    query: web::Query<PaymentsQuery>,
) -> HttpResponse {
    let query = query.into_inner();
    let non_empty = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let search = non_empty(&query.q);
    if let Some(search) = search {
        let merchant_id = session.merchant.id.clone();
        let found = state
            .db
            .run(move |conn| {
                Ok(match payment_rows::find(conn, &merchant_id, &search)? {
                    Some(p) => Some(p),
                    None => payment_rows::find_by_idempotency_key(conn, &merchant_id, &search)?,
                })
            })
            .await;
        return match found {
            Ok(Some(payment)) => layout::see_other(&format!("/dashboard/payments/{}", payment.id)),
            Ok(None) => page(
                404,
                "Payments",
                Some(&session),
                html! {
                    h1 { "Payments" }
                    p.error role="alert" { "No payment has that id or idempotency key." }
                    p { a href="/dashboard/payments" { "All payments" } }
                },
            ),
            Err(_) => layout::unavailable(),
        };
    }
    let status = match layout::known_filter("status", query.status.as_deref(), PaymentStatus::parse)
    {
        Ok(status) => status,
        Err(unknown) => return unknown.page(),
    };
    let customer = non_empty(&query.customer);
    let (from, to) = (non_empty(&query.from), non_empty(&query.to));
    let day = |text: &Option<String>| match text {
        Some(text) => chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(Some)
            .ok_or(()),
        None => Ok(None),
    };
    let (Ok(created_from), Ok(to_day)) = (day(&from), day(&to)) else {
        return page(
            400,
            "Payments",
            Some(&session),
            html! {
                h1 { "Payments" }
                p.error role="alert" { "Dates are written YYYY-MM-DD, for example 2026-11-28." }
                p { a href="/dashboard/payments" { "All payments" } }
            },
        );
    };
    // Written back as parsed: the links and the fields carry nothing but a date.
    let shown = |d: Option<Timestamp>| d.map(|d| d.format("%Y-%m-%d").to_string());
    let (from, to) = (shown(created_from), shown(to_day));
    let filter = ListFilter {
        limit: PAGE_SIZE,
        starting_after: non_empty(&query.starting_after),
        status,
        customer_id: customer.clone(),
        created_from,
        created_before: to_day.map(|d| d + chrono::Duration::days(1)),
    };
    let merchant_id = session.merchant.id.clone();
    let listed = state
        .db
        .run(move |conn| payment_rows::list(conn, &merchant_id, &filter))
        .await;
    let rows = match listed {
        Ok(Some(rows)) => rows,
        Ok(None) => return layout::not_found(&session, "payment to page from"),
        Err(_) => return layout::unavailable(),
    };
    let (rows, has_more) = db::page(rows, PAGE_SIZE);
    let next = has_more.then(|| {
        let mut link = format!(
            "/dashboard/payments?starting_after={}",
            rows.last().map(|p| p.id.as_str()).unwrap_or_default()
        );
        if let Some(status) = status {
            link.push_str(&format!("&status={}", status.as_str()));
        }
        if let Some(customer) = &customer {
            link.push_str("&customer=");
            link.extend(percent_encoding::utf8_percent_encode(
                customer,
                percent_encoding::NON_ALPHANUMERIC,
            ));
        }
        // Dates as parsed above: nothing to escape.
        for (name, value) in [("from", &from), ("to", &to)] {
            if let Some(value) = value {
                link.push_str(&format!("&{name}={value}"));
            }
        }
        link
    });
    page(
        200,
        "Payments",
        Some(&session),
        html! {
            h1 { "Payments" }
            form.card role="search" method="get" action="/dashboard/payments" {
                div {
                    label for="q" { "Payment id or idempotency key" }
                    input #q type="search" name="q";
                }
                button type="submit" { "Find" }
            }
            form.card method="get" action="/dashboard/payments" {
                div {
                    label for="status" { "Status" }
                    select #status name="status" {
                        option value="" { "any" }
                        @for s in PaymentStatus::ALL {
                            option value=(s.as_str()) selected[status == Some(*s)] { (s.as_str()) }
                        }
                    }
                }
                div {
                    label for="customer" { "Customer" }
                    input #customer type="text" name="customer" value=(customer.clone().unwrap_or_default());
                }
                div {
                    label for="from" { "From" }
                    input #from type="date" name="from" value=(from.clone().unwrap_or_default());
                }
                div {
                    label for="to" { "To" }
                    input #to type="date" name="to" value=(to.clone().unwrap_or_default());
                }
                button type="submit" { "Filter" }
            }
            div.table-wrap {
                table {
                    thead { tr { th { "Payment" } th { "Amount" } th { "Status" } th { "Customer" } th { "Created" } } }
                    tbody {
                        @for p in &rows {
                            tr {
                                td { a href={ "/dashboard/payments/" (p.id) } { (p.id) } }
                                td { (money(p.amount, &p.currency)) }
                                td { span class={ "status " (p.status.as_str()) } { (p.status.as_str()) } }
                                td { (p.customer_id.as_deref().unwrap_or("")) }
                                td { (format_timestamp(p.created_at)) }
                            }
                        }
                    }
                }
            }
            @if rows.is_empty() { p { "No payments." } }
            @if let Some(next) = next { p { a href=(next) { "Next page" } } }
        },
    )
}

/// One entry of a payment's timeline.
struct Entry {
    at: Timestamp,
    text: String,
}

/// `GET /dashboard/payments/{id}`.
pub async fn payment(
    state: web::Data<AppState>,
    req: HttpRequest,
    session: Session,
    path: web::Path<String>,
) -> HttpResponse {
    let notice = done(&req);
    render_payment(&state, &session, &path, 200, notice.as_deref(), None).await
}

/// The payment page, with a notice after an action or the problem an action met.
pub async fn render_payment(
    state: &AppState,
    session: &Session,
    id: &str,
    status: u16,
    notice: Option<&str>,
    problem: Option<&str>,
) -> HttpResponse {
    let (merchant_id, id) = (session.merchant.id.clone(), id.to_owned());
    let loaded = state
        .db
        .run(move |conn| {
            let Some(payment) = payment_rows::find(conn, &merchant_id, &id)? else {
                return Ok(None);
            };
            let timeline = timeline(conn, &merchant_id, &payment)?;
            Ok(Some((payment, timeline)))
        })
        .await;
    let (payment, timeline) = match loaded {
        Ok(Some(found)) => found,
        Ok(None) => return layout::not_found(session, "payment"),
        Err(_) => return layout::unavailable(),
    };
    let notice = notice.and_then(|done| match done {
        "refund" => Some("Refund requested."),
        "capture" => Some("Capture requested."),
        "cancel" => Some("Cancel requested."),
        _ => None,
    });
    page(
        status,
        &payment.id,
        Some(session),
        html! {
            h1 { "Payment " (payment.id) }
            @if let Some(notice) = notice { p.notice role="status" { (notice) } }
            @if let Some(problem) = problem { p.error role="alert" { (problem) } }
            (fields(&payment))
            (actions(session, &payment))
            h2 { "Timeline" }
            ol.timeline {
                @for entry in &timeline {
                    li { time { (format_timestamp(entry.at)) } (entry.text) }
                }
            }
        },
    )
}

fn fields(p: &PaymentRow) -> Markup {
    let metadata = p.metadata.as_str();
    html! {
        dl.fields.card {
            dt { "Amount" } dd { (money(p.amount, &p.currency)) }
            dt { "Status" } dd { span class={ "status " (p.status.as_str()) } { (p.status.as_str()) } }
            dt { "Capture method" } dd { (p.capture_method) }
            dt { "Capturable" } dd { (money(p.amount_capturable, &p.currency)) }
            dt { "Captured" } dd { (money(p.amount_captured, &p.currency)) }
            dt { "Refunded" } dd { (money(p.amount_refunded, &p.currency)) }
            dt { "Disputed" } dd { (money(p.amount_disputed, &p.currency)) }
            dt { "Payment method" } dd { (p.payment_method) }
            dt { "Customer" } dd { (p.customer_id.as_deref().unwrap_or("–")) }
            dt { "Description" } dd { (p.description.as_deref().unwrap_or("–")) }
            dt { "Metadata" } dd { code { (metadata) } }
            dt { "Idempotency key" } dd { code { (p.idempotency_key) } }
            dt { "Provider charge" } dd { (p.provider_charge_id.as_deref().unwrap_or("–")) }
            dt { "Failure" } dd { (p.failure_code.as_deref().unwrap_or("–")) " " (p.failure_message.as_deref().unwrap_or("")) }
            dt { "Cancellation reason" } dd { (p.cancellation_reason.as_deref().unwrap_or("–")) }
            dt { "Created" } dd { (format_timestamp(p.created_at)) }
            dt { "Updated" } dd { (format_timestamp(p.updated_at)) }
        }
    }
}

/// The forms of what can be done now, each with the key it will act with (made now, so
/// sending it again acts once) and the session's CSRF token.
fn actions(session: &Session, p: &PaymentRow) -> Markup {
    let action = |what: &str| format!("/dashboard/payments/{}/{what}", p.id);
    html! {
        @if p.status == PaymentStatus::Succeeded {
            h2 { "Refund" }
            form.inline.card method="post" action=(action("refund")) {
                (guard(session))
                div {
                    label for="refund_amount" { "Amount" }
                    input #refund_amount type="text" name="amount" inputmode="decimal"
                        placeholder={ "all that is left (" (p.currency.to_ascii_uppercase()) ")" };
                }
                button type="submit" { "Refund" }
            }
        }
        @if p.status == PaymentStatus::RequiresCapture {
            h2 { "Capture or cancel" }
            form.inline.card method="post" action=(action("capture")) {
                (guard(session))
                div {
                    label for="capture_amount" { "Amount" }
                    input #capture_amount type="text" name="amount" inputmode="decimal"
                        placeholder={ "all that is authorized (" (p.currency.to_ascii_uppercase()) ")" };
                }
                button type="submit" { "Capture" }
            }
            form.inline.card method="post" action=(action("cancel")) {
                (guard(session))
                button.secondary type="submit" { "Cancel payment" }
            }
        }
    }
}

/// Everything that happened to the payment, oldest first: its creation and outcome, its
/// refunds, disputes, captures and cancels (by their events), the deliveries of those events
/// to the merchant's endpoints, and its balance transactions.
fn timeline(
    conn: &mut DbConnection,
    merchant_id: &str,
    payment: &PaymentRow,
) -> diesel::QueryResult<Vec<Entry>> {
    use crate::db::{deliveries, disputes, events, ledger, refunds};
    let mut entries = vec![Entry {
        at: payment.created_at,
        text: format!(
            "Created: {} with {}",
            money(payment.amount, &payment.currency),
            payment.payment_method
        ),
    }];
    let mut sources = vec![payment.id.clone()];
    for refund in refunds::list_for_payment(conn, &payment.id, 100, None)?.unwrap_or_default() {
        entries.push(Entry {
            at: refund.created_at,
            text: format!(
                "Refund {} of {}: {}",
                refund.id,
                money(refund.amount, &refund.currency),
                refund.status
            ),
        });
        sources.push(refund.id);
    }
    for dispute in
        disputes::list(conn, merchant_id, 100, None, None, Some(&payment.id))?.unwrap_or_default()
    {
        entries.push(Entry {
            at: dispute.created_at,
            text: format!(
                "Dispute {} of {} ({}): {}",
                dispute.id,
                money(dispute.amount, &dispute.currency),
                dispute.reason,
                dispute.status
            ),
        });
        sources.push(dispute.id);
    }
    // Three queries whatever the payment's history: its objects' events, their deliveries,
    // its objects' balance transactions.
    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
    let events = events::for_objects(conn, &sources)?;
    let event_ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let deliveries = deliveries::for_events(conn, &event_ids)?;
    for event in &events {
        entries.push(Entry {
            at: event.created_at,
            text: format!("Event {}: {}", event.id, event.event_type),
        });
        let of_event = deliveries.iter().filter(|d| d.event_id == event.id);
        entries.extend(of_event.map(delivery_entry));
    }
    for txn in ledger::for_sources(conn, &sources)? {
        entries.push(Entry {
            at: txn.created_at,
            text: format!(
                "Balance transaction {}: {} {} (fee {}, net {})",
                txn.id,
                txn.txn_type,
                money(txn.amount, &txn.currency),
                money(txn.fee, &txn.currency),
                money(txn.net, &txn.currency)
            ),
        });
    }
    entries.sort_by_key(|e| e.at);
    Ok(entries)
}

/// A delivery of an event in the timeline: where it went, how it stands, its last attempt.
fn delivery_entry(d: &crate::db::deliveries::DeliveryRow) -> Entry {
    let last = match (d.last_status_code, d.last_error.as_deref()) {
        (Some(code), _) => format!(", last answer HTTP {code}"),
        (None, Some(error)) => format!(", last error: {error}"),
        (None, None) => String::new(),
    };
    let attempts = match d.attempts {
        1 => "1 attempt".to_owned(),
        n => format!("{n} attempts"),
    };
    Entry {
        at: d.last_attempt_at.unwrap_or(d.created_at),
        text: format!(
            "Delivery {} of {} to endpoint {}: {} after {attempts}{last}",
            d.id,
            d.event_type,
            d.endpoint_id,
            d.status.as_str()
        ),
    }
}
