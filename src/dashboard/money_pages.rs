//! The pages about money held and money taken back: disputes (by evidence due date, with
//! evidence to submit or the loss to accept) and the balance (available and pending per
//! currency, its transactions, payouts, and a `Pay out` form).

use actix_web::{HttpRequest, HttpResponse, web};
use maud::html;

use super::format::money;
use super::layout::{self, done, guard, page};
use super::session::Session;
use crate::db::disputes::{self as dispute_rows, DisputeRow};
use crate::db::ledger::{self as ledger_rows, ListFilter};
use crate::db::payouts as payout_rows;
use crate::domain::{format_timestamp, now};
use crate::state::AppState;

/// `GET /dashboard/disputes`.
pub async fn disputes(
    state: web::Data<AppState>,
    req: HttpRequest,
    session: Session,
) -> HttpResponse {
    let notice = match done(&req).as_deref() {
        Some("evidence") => Some("Evidence submitted."),
        Some("accept") => Some("Dispute accepted."),
        _ => None,
    };
    render_disputes(&state, &session, 200, notice, None).await
}

/// The disputes page: every open one, the soonest evidence due date first, then the latest
/// closed ones.
pub async fn render_disputes(
    state: &AppState,
    session: &Session,
    status: u16,
    notice: Option<&str>,
    problem: Option<&str>,
) -> HttpResponse {
    let merchant_id = session.merchant.id.clone();
    let listed = state
        .db
        .run(move |conn| {
            let mut rows = dispute_rows::by_openness(conn, &merchant_id, true, 1000)?;
            rows.extend(dispute_rows::by_openness(conn, &merchant_id, false, 25)?);
            Ok(rows)
        })
        .await;
    let rows: Vec<DisputeRow> = match listed {
        Ok(rows) => rows,
        Err(_) => return layout::unavailable(),
    };
    page(
        status,
        "Disputes",
        Some(session),
        html! {
            h1 { "Disputes" }
            @if let Some(notice) = notice { p.notice role="status" { (notice) } }
            @if let Some(problem) = problem { p.error role="alert" { (problem) } }
            @if rows.is_empty() { p { "No disputes." } }
            @for d in &rows {
                section.card aria-label={ "Dispute " (d.id) } {
                    h2 { "Dispute " (d.id) }
                    dl.fields {
                        dt { "Payment" } dd { a href={ "/dashboard/payments/" (d.payment_id) } { (d.payment_id) } }
                        dt { "Amount" } dd { (money(d.amount, &d.currency)) }
                        dt { "Reason" } dd { (d.reason) }
                        dt { "Status" } dd { span class={ "status " (d.status.as_str()) } { (d.status.as_str()) } }
                        dt { "Evidence due by" } dd { (format_timestamp(d.evidence_due_by)) }
                        dt { "Evidence" } dd { (d.evidence_text.as_deref().unwrap_or("–")) }
                    }
                    @if d.status == crate::domain::DisputeStatus::NeedsResponse {
                        form.inline method="post" action={ "/dashboard/disputes/" (d.id) "/evidence" } {
                            (guard(session))
                            div {
                                label for={ "evidence_" (d.id) } { "Evidence" }
                                textarea id={ "evidence_" (d.id) } name="text" rows="3" maxlength="20000" required {
                                    (d.evidence_text.as_deref().unwrap_or(""))
                                }
                            }
                            button type="submit" { "Submit evidence" }
                        }
                        form.inline method="post" action={ "/dashboard/disputes/" (d.id) "/accept" } {
                            (guard(session))
                            button.secondary type="submit" { "Accept" }
                        }
                    }
                }
            }
        },
    )
}

/// `GET /dashboard/balance`.
pub async fn balance(
    state: web::Data<AppState>,
    req: HttpRequest,
    session: Session,
) -> HttpResponse {
    let notice = match done(&req).as_deref() {
        Some("payout_paid") => Some("Payout paid."),
        Some("payout_failed") => Some("Payout failed: nothing was paid out (see its row below)."),
        Some("payout_pending") => Some("Payout requested: the provider has not finished it yet."),
        _ => None,
    };
    render_balance(&state, &session, 200, notice, None).await
}

/// The balance page.
pub async fn render_balance(
    state: &AppState,
    session: &Session,
    status: u16,
    notice: Option<&str>,
    problem: Option<&str>,
) -> HttpResponse {
    let merchant_id = session.merchant.id.clone();
    let loaded = state
        .db
        // One snapshot: the balance and the lists beside it agree.
        .run(move |conn| {
            crate::db::read_snapshot(conn, |conn| {
                let at = now();
                let balances = ledger_rows::balance(conn, &merchant_id, at)?;
                let filter = ListFilter {
                    txn_type: None,
                    source_id: None,
                };
                let transactions =
                    ledger_rows::list(conn, &merchant_id, 25, None, &filter)?.unwrap_or_default();
                let payouts =
                    payout_rows::list(conn, &merchant_id, 25, None, None)?.unwrap_or_default();
                Ok((at, balances, transactions, payouts))
            })
        })
        .await;
    let (at, balances, transactions, payouts) = match loaded {
        Ok(loaded) => loaded,
        Err(_) => return layout::unavailable(),
    };
    let default_currency = balances
        .first()
        .map_or("usd".to_owned(), |b| b.currency.clone());
    page(
        status,
        "Balance",
        Some(session),
        html! {
            h1 { "Balance" }
            @if let Some(notice) = notice { p.notice role="status" { (notice) } }
            @if let Some(problem) = problem { p.error role="alert" { (problem) } }
            div.stats {
                @for b in &balances {
                    div.card.stat { "Available" strong { (money(b.available, &b.currency)) } }
                    div.card.stat { "Pending" strong { (money(b.pending, &b.currency)) } }
                }
                @if balances.is_empty() { p { "No money has moved yet." } }
            }
            h2 { "Pay out" }
            form.inline.card method="post" action="/dashboard/balance/payout" {
                (guard(session))
                div {
                    label for="payout_amount" { "Amount" }
                    input #payout_amount type="text" name="amount" inputmode="decimal" required;
                }
                div {
                    label for="payout_currency" { "Currency" }
                    input #payout_currency type="text" name="currency" value=(default_currency) size="4" required;
                }
                div {
                    label for="payout_destination" { "Destination" }
                    input #payout_destination type="text" name="destination" value="ba_test_instant";
                }
                button type="submit" { "Pay out" }
            }
            h2 { "Payouts" }
            div.table-wrap {
                table {
                    thead { tr { th { "Payout" } th { "Amount" } th { "Destination" } th { "Status" } th { "Created" } } }
                    tbody {
                        @for p in payouts.iter().take(25) {
                            tr {
                                td { (p.id) }
                                td { (money(p.amount, &p.currency)) }
                                td { (p.destination) }
                                td { span class={ "status " (p.status.as_str()) } { (p.status.as_str()) } " " (p.failure_code.as_deref().unwrap_or("")) }
                                td { (format_timestamp(p.created_at)) }
                            }
                        }
                    }
                }
            }
            h2 { "Balance transactions" }
            div.table-wrap {
                table {
                    thead { tr { th { "Type" } th { "Amount" } th { "Fee" } th { "Net" } th { "Status" } th { "Source" } th { "Created" } } }
                    tbody {
                        @for t in transactions.iter().take(25) {
                            tr {
                                td { (t.txn_type) }
                                td { (money(t.amount, &t.currency)) }
                                td { (money(t.fee, &t.currency)) }
                                td { (money(t.net, &t.currency)) }
                                td { @if t.is_available(at) { "available" } @else { "pending until " (format_timestamp(t.available_on)) } }
                                td { (t.source_id) }
                                td { (format_timestamp(t.created_at)) }
                            }
                        }
                    }
                }
            }
        },
    )
}
