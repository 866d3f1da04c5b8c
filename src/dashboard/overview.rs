//! The overview: the last 30 days as a chart drawn on the server, open disputes by evidence
//! due date, the open reconciliation discrepancies of the merchant's money moves, the latest
//! failed webhook deliveries.

use actix_web::{HttpRequest, HttpResponse, web};
use maud::{Markup, html};

use super::format::money;
use super::layout::{self, page};
use super::session;
use crate::db::DbConnection;
use crate::domain::{PaymentId, PaymentStatus, Timestamp, format_timestamp, now};
use crate::state::AppState;

/// `GET /dashboard`: the sign-in form, or (signed in) the overview.
pub async fn overview(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    let session = match session::current(&req, &state).await {
        Ok(Some(session)) => session,
        Ok(None) => return layout::sign_in_page(None, 200),
        Err(response) => return response,
    };
    let merchant_id = session.merchant.id.clone();
    let loaded = state
        .db
        .run(move |conn| {
            let days = last_30_days(conn, &merchant_id)?;
            let failed = failed_deliveries(conn, &merchant_id)?;
            let open = crate::db::disputes::by_openness(conn, &merchant_id, true, 10)?;
            let discrepancies =
                crate::db::reconciliation::open_for_merchant(conn, &merchant_id, 10)?;
            Ok((days, failed, open, discrepancies))
        })
        .await;
    let (days, failed, open, discrepancies) = match loaded {
        Ok(loaded) => loaded,
        Err(_) => return layout::unavailable(),
    };
    let total: i64 = days.iter().map(|d| d.total).sum();
    let succeeded: i64 = days.iter().map(|d| d.succeeded).sum();
    let rate = if total > 0 {
        format!("{:.1} %", succeeded as f64 * 100.0 / total as f64)
    } else {
        "–".to_owned()
    };
    page(
        200,
        "Overview",
        Some(&session),
        html! {
            h1 { "Overview" }
            div.stats {
                div.card.stat { "Payments, 30 days" strong { (total) } }
                div.card.stat { "Succeeded" strong { (succeeded) } }
                div.card.stat { "Success rate" strong { (rate) } }
            }
            h2 { "Payments per day" }
            (chart(&days))
            h2 { "Open disputes, by evidence due date" }
            @if open.is_empty() { p { "None." } }
            ul {
                @for d in &open {
                    li {
                        a href="/dashboard/disputes" { (d.id) } " · " (money(d.amount, &d.currency))
                        " · " (d.status.as_str()) " · due " (format_timestamp(d.evidence_due_by))
                    }
                }
            }
            h2 { "Open reconciliation discrepancies" }
            @if discrepancies.is_empty() { p { "None." } }
            ul {
                @for d in &discrepancies {
                    li {
                        code { (d.kind) } " · " (d.movement_type) " "
                        @if d.reference.starts_with(PaymentId::PREFIX) {
                            a href={ "/dashboard/payments/" (d.reference) } { (d.reference) }
                        } @else { (d.reference) }
                        @if let (Some(amount), Some(currency)) = (d.expected_amount, &d.expected_currency) {
                            " · ours " (money(amount, currency))
                        }
                        @if let (Some(amount), Some(currency)) = (d.found_amount, &d.found_currency) {
                            " · provider's " (money(amount, currency))
                        }
                        " · since " (format_timestamp(d.first_seen_at))
                    }
                }
            }
            h2 { "Failed webhook deliveries" }
            @if failed.is_empty() { p { "None." } }
            ul {
                @for (event_type, endpoint, code, error, at) in &failed {
                    li {
                        (event_type) " to " (endpoint) " · "
                        (code.map_or("no answer".to_owned(), |c| format!("HTTP {c}")))
                        " " (error.as_deref().unwrap_or("")) " · " (format_timestamp(*at))
                    }
                }
            }
        },
    )
}

/// The merchant's latest deliveries that failed for good: (event type, endpoint URL, last
/// status code, last error, when).
type FailedDelivery = (String, String, Option<i32>, Option<String>, Timestamp);

fn failed_deliveries(
    conn: &mut DbConnection,
    merchant_id: &str,
) -> diesel::QueryResult<Vec<FailedDelivery>> {
    use crate::db::schema::{webhook_deliveries as d, webhook_endpoints as e};
    use crate::domain::DeliveryStatus;
    use diesel::prelude::*;
    d::table
        .inner_join(e::table)
        .filter(e::merchant_id.eq(merchant_id))
        .filter(d::status.eq(DeliveryStatus::Failed.as_str()))
        .order(d::created_at.desc())
        .limit(10)
        .select((
            d::event_type,
            e::url,
            d::last_status_code,
            d::last_error,
            d::created_at,
        ))
        .load(conn)
}

/// One day of the overview.
struct Day {
    start: Timestamp,
    total: i64,
    succeeded: i64,
}

/// Payments per day for the last 30 days, in one query: the counts by day (UTC) and status.
/// Ids are time-ordered (UUIDv7), so the 30 days are a range of ids on the `(merchant_id,
/// id)` index.
fn last_30_days(conn: &mut DbConnection, merchant_id: &str) -> diesel::QueryResult<Vec<Day>> {
    use crate::db::schema::payments;
    use diesel::dsl::sql;
    use diesel::prelude::*;
    use diesel::sql_types::{BigInt, Text};
    let today = now().date().and_hms_opt(0, 0, 0).unwrap_or_else(now);
    let first = today - chrono::Duration::days(29);
    let end = today + chrono::Duration::days(1);
    // `date()` is the day of a timestamp on both backends; as text, `YYYY-MM-DD`.
    const DAY_AND_STATUS: &str = "CAST(date(created_at) AS TEXT), status";
    let counts: Vec<(String, String, i64)> = payments::table
        .filter(payments::merchant_id.eq(merchant_id))
        .filter(payments::id.ge(PaymentId::first_at(first)))
        .filter(payments::id.lt(PaymentId::first_at(end)))
        .group_by(sql::<Text>(DAY_AND_STATUS))
        .select(sql::<(Text, Text, BigInt)>(&format!(
            "{DAY_AND_STATUS}, count(*)"
        )))
        .load(conn)?;
    let mut days: Vec<Day> = (0..30)
        .map(|n| Day {
            start: first + chrono::Duration::days(n),
            total: 0,
            succeeded: 0,
        })
        .collect();
    for (day, status, count) in counts {
        let Some(day) = chrono::NaiveDate::parse_from_str(&day, "%Y-%m-%d")
            .ok()
            .and_then(|date| usize::try_from((date - first.date()).num_days()).ok())
            .and_then(|index| days.get_mut(index))
        else {
            continue;
        };
        day.total += count;
        if status == PaymentStatus::Succeeded.as_str() {
            day.succeeded += count;
        }
    }
    Ok(days)
}

/// The days as an SVG bar chart drawn here (no script): all payments grey, succeeded blue.
/// Every SVG element is closed explicitly: in HTML, `<rect>` without a closing tag swallows
/// what follows it.
fn chart(days: &[Day]) -> Markup {
    let most = days.iter().map(|d| d.total).max().unwrap_or(0).max(1);
    let (width, height, bar) = (600, 160, 20);
    let scale = |n: i64| (n * (height - 20) / most).max(0);
    html! {
        svg.chart viewBox={ "0 0 " (width) " " (height) } role="img"
            aria-label="Payments per day over the last 30 days: all, and succeeded" {
            @for (i, day) in days.iter().enumerate() {
                @let x = i as i64 * bar;
                rect x=(x + 2) y=(height - scale(day.total)) width=(bar - 4) height=(scale(day.total)) fill="#c8ced8" {
                    title { (day.start.format("%Y-%m-%d")) ": " (day.total) " payments, " (day.succeeded) " succeeded" }
                }
                rect x=(x + 2) y=(height - scale(day.succeeded)) width=(bar - 4) height=(scale(day.succeeded)) fill="#1f5fbf" {}
            }
        }
    }
}
