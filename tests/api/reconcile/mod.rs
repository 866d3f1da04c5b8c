//! Reconciliation (CONTRACT §14): our records against the provider's settlement report.

mod command;
mod honest;

use std::sync::Mutex;

use futures_util::future::LocalBoxFuture;
use payments_api::domain::{Timestamp, now};
use payments_api::provider::{
    CaptureRequest, Charge, ChargeRequest, ChargeUpdate, DisputeStepRequest, MovementKind,
    OutcomeUnknown, PaymentProvider, PayoutRequest, ProviderDispute, ProviderError, ProviderPayout,
    ProviderRefund, RefundRequest, SettlementMovement, SettlementPage, SettlementQuery,
};
use payments_api::reconcile::{self, Found, Report, Window};
use serde_json::json;

use crate::support::{TestApp, spawn_app, visa};

/// `payments-api reconcile` over the last hour against `provider_url`: exit code, stdout
/// (and stderr, if any, marked). Run off the test's thread, which may serve the provider.
pub(super) async fn reconcile_command(database_url: &str, provider_url: &str) -> (i32, String) {
    let (database_url, provider_url) = (database_url.to_owned(), provider_url.to_owned());
    actix_web::rt::task::spawn_blocking(move || {
        let at = |t: chrono::NaiveDateTime| t.and_utc().to_rfc3339();
        let now = chrono::Utc::now().naive_utc();
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_payments-api"));
        command
            .args([
                "reconcile",
                "--from",
                &at(now - chrono::Duration::hours(1)),
                "--to",
                &at(now + chrono::Duration::minutes(1)),
            ])
            .env_clear()
            .env("DATABASE_URL", &database_url)
            .env("PROVIDER_URL", &provider_url);
        crate::support::pass_database_settings(&mut command);
        let output = command.output().expect("run payments-api reconcile");
        let out = String::from_utf8_lossy(&output.stdout).into_owned();
        let err = String::from_utf8_lossy(&output.stderr);
        let err = if err.is_empty() {
            String::new()
        } else {
            format!("[stderr] {err}")
        };
        (output.status.code().unwrap_or(-1), format!("{out}{err}"))
    })
    .await
    .expect("the command ran")
}

/// A provider whose settlement report is a script (served two movements a page, to cross
/// pages); it moves no money.
#[derive(Default)]
struct ScriptedReport {
    movements: Mutex<Vec<SettlementMovement>>,
    /// Serves the first page again whatever `starting_after` asks for.
    stuck: std::sync::atomic::AtomicBool,
}

impl ScriptedReport {
    fn set(&self, movements: Vec<SettlementMovement>) {
        *self.movements.lock().unwrap() = movements;
    }
}

fn unknown<T>() -> LocalBoxFuture<'static, Result<T, ProviderError>> {
    Box::pin(async { Err(OutcomeUnknown("a report, not a provider".into()).into()) })
}

impl PaymentProvider for ScriptedReport {
    fn create_charge<'a>(
        &'a self,
        _: &'a str,
        _: &'a ChargeRequest,
    ) -> LocalBoxFuture<'a, Result<Charge, ProviderError>> {
        unknown()
    }
    fn create_refund<'a>(
        &'a self,
        _: &'a str,
        _: &'a RefundRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderRefund, ProviderError>> {
        unknown()
    }
    fn capture_charge<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a CaptureRequest,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        unknown()
    }
    fn cancel_charge<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> LocalBoxFuture<'a, Result<ChargeUpdate, ProviderError>> {
        unknown()
    }
    fn create_payout<'a>(
        &'a self,
        _: &'a str,
        _: &'a PayoutRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderPayout, ProviderError>> {
        unknown()
    }
    fn dispute_step<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a DisputeStepRequest,
    ) -> LocalBoxFuture<'a, Result<ProviderDispute, ProviderError>> {
        unknown()
    }
    fn settlements<'a>(
        &'a self,
        query: &'a SettlementQuery,
    ) -> LocalBoxFuture<'a, Result<SettlementPage, ProviderError>> {
        let all = self.movements.lock().unwrap().clone();
        let stuck = self.stuck.load(std::sync::atomic::Ordering::SeqCst);
        let start = match &query.starting_after {
            _ if stuck => 0,
            None => 0,
            Some(id) => all
                .iter()
                .position(|m| &m.id == id)
                .map_or(all.len(), |p| p + 1),
        };
        let in_window: Vec<SettlementMovement> = all[start..]
            .iter()
            .filter(|m| m.created_at >= query.created_gte && m.created_at < query.created_lt)
            .cloned()
            .collect();
        let page: Vec<SettlementMovement> = in_window.iter().take(2).cloned().collect();
        let has_more = in_window.len() > page.len();
        Box::pin(async move {
            Ok(SettlementPage {
                data: page,
                has_more,
            })
        })
    }
}

fn movement(
    n: usize,
    kind: MovementKind,
    reference: &str,
    amount: i64,
    currency: &str,
) -> SettlementMovement {
    SettlementMovement {
        id: format!("mv_script_{n}"),
        kind,
        reference: reference.to_owned(),
        amount,
        currency: currency.to_owned(),
        created_at: now(),
    }
}

/// A window around now.
fn recent() -> Window {
    Window {
        from: now() - chrono::Duration::hours(1),
        to: now() + chrono::Duration::minutes(1),
    }
}

async fn run(app: &TestApp, provider: &dyn PaymentProvider) -> (Report, Vec<Found>) {
    let mut found = Vec::new();
    let report = reconcile::reconcile(&app.state.db, provider, recent(), &mut |f: &Found| {
        found.push(f.clone())
    })
    .await
    .expect("the run finishes");
    (report, found)
}

/// (kind, reference) of each finding, sorted.
fn kinds(found: &[Found]) -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = found
        .iter()
        .map(|f| {
            (
                f.discrepancy.kind.as_str().to_owned(),
                f.discrepancy.reference.clone(),
            )
        })
        .collect();
    all.sort();
    all
}

async fn stored_discrepancies(app: &TestApp) -> Vec<(String, Option<Timestamp>, Timestamp)> {
    use diesel::prelude::*;
    use payments_api::db::schema::reconciliation_discrepancies as d;
    let mut rows: Vec<(String, Option<Timestamp>, Timestamp)> = app
        .state
        .db
        .run(|conn| {
            d::table
                .select((d::fingerprint, d::resolved_at, d::first_seen_at))
                .load(conn)
        })
        .await
        .unwrap();
    rows.sort();
    rows
}

#[actix_web::test]
async fn each_kind_of_discrepancy_is_found_once_and_resolved_when_the_report_is_corrected() {
    let app = spawn_app().await;
    let ok = app.paid_payment(2000).await;
    let refund = app
        .post_refund(&ok, "re-ok", &json!({"amount": 500}))
        .await
        .json();
    let refund_id = refund["id"].as_str().unwrap().to_owned();
    let failed = app
        .post_payment(
            "declined",
            &json!({"amount": 1000, "currency": "usd", "payment_method": "pm_card_declined"}),
        )
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let wrong_amount = app.paid_payment(3000).await;
    let wrong_currency = app.paid_payment(1500).await;
    let twice = app.post_payment("twice", &visa(700)).await.json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let unknown = "pay_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f";

    let report = ScriptedReport::default();
    use MovementKind::{Charge, Refund};
    report.set(vec![
        movement(1, Charge, &ok, 2000, "usd"),
        movement(2, Charge, &failed, 1000, "usd"),
        movement(3, Charge, unknown, 10, "usd"),
        movement(4, Charge, &wrong_amount, 2999, "usd"),
        movement(5, Charge, &wrong_currency, 1500, "eur"),
        movement(6, Charge, &twice, 700, "usd"),
        movement(7, Charge, &twice, 700, "usd"),
    ]);
    let (first, found) = run(&app, &report).await;
    let expected = {
        let mut e = vec![
            ("amount_mismatch".to_owned(), wrong_amount.clone()),
            ("currency_mismatch".to_owned(), wrong_currency.clone()),
            ("duplicate_at_provider".to_owned(), twice.clone()),
            ("missing_at_provider".to_owned(), refund_id.clone()),
            ("missing_here".to_owned(), failed.clone()),
            ("missing_here".to_owned(), unknown.to_owned()),
        ];
        e.sort();
        e
    };
    assert_eq!(kinds(&found), expected);
    assert_eq!(first.matched, 2, "the good charge and the first of the two");
    assert_eq!(first.open_total(), 6);
    assert_eq!(
        first.summary(),
        "reconciled: 2 matched, 6 discrepancies (amount_mismatch: 1, currency_mismatch: 1, \
         duplicate_at_provider: 1, missing_at_provider: 1, missing_here: 2)"
    );
    let raw = found
        .iter()
        .find(|f| f.discrepancy.reference == wrong_amount)
        .unwrap()
        .json_line();
    let at = |name: &str| raw.find(&format!("\"{name}\":")).expect(name);
    let names = [
        "kind",
        "reference",
        "provider_movement_id",
        "expected",
        "found",
        "first_seen_at",
    ];
    assert!(
        names.windows(2).all(|w| at(w[0]) < at(w[1])) && raw.starts_with("{\"kind\":"),
        "the contract's order of fields: {raw}"
    );
    let line: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(line["kind"], "amount_mismatch");
    assert_eq!(line["provider_movement_id"], "mv_script_4");
    assert_eq!(line["expected"], json!({"amount": 3000, "currency": "usd"}));
    assert_eq!(line["found"], json!({"amount": 2999, "currency": "usd"}));
    assert!(line["first_seen_at"].is_string());
    let missing: serde_json::Value = serde_json::from_str(
        &found
            .iter()
            .find(|f| f.discrepancy.reference == refund_id)
            .unwrap()
            .json_line(),
    )
    .unwrap();
    assert_eq!(missing["found"], serde_json::Value::Null);
    assert_eq!(missing["provider_movement_id"], serde_json::Value::Null);
    assert_eq!(
        missing["expected"],
        json!({"amount": 500, "currency": "usd"})
    );

    // Again: the same findings, stored once, first seen when they first were.
    let stored = stored_discrepancies(&app).await;
    assert_eq!(stored.len(), 6);
    let (second, again) = run(&app, &report).await;
    assert_eq!(kinds(&again), expected);
    assert_eq!(second.open_total(), 6);
    assert_eq!(
        stored_discrepancies(&app).await,
        stored,
        "nothing stored twice"
    );

    // The provider corrects its report: every discrepancy is resolved.
    report.set(vec![
        movement(1, Charge, &ok, 2000, "usd"),
        movement(8, Refund, &refund_id, 500, "usd"),
        movement(9, Charge, &wrong_amount, 3000, "usd"),
        movement(10, Charge, &wrong_currency, 1500, "usd"),
        movement(6, Charge, &twice, 700, "usd"),
    ]);
    let (corrected, none) = run(&app, &report).await;
    assert!(none.is_empty(), "{:?}", kinds(&none));
    assert_eq!(corrected.matched, 5);
    assert_eq!(corrected.open_total(), 0);
    assert_eq!(
        corrected.summary(),
        "reconciled: 5 matched, 0 discrepancies"
    );
    let resolved = stored_discrepancies(&app).await;
    assert_eq!(resolved.len(), 6);
    assert!(
        resolved
            .iter()
            .all(|(_, resolved_at, _)| resolved_at.is_some())
    );
}

/// The provider's clock and ours differ: a charge that became final just before the window's
/// end by our clock, whose movement the provider's clock put just after it, matches (it was
/// `missing_at_provider`, as long as the window ended between the two); and a movement
/// after the window is not judged (its unknown reference is no discrepancy of this window).
#[actix_web::test]
async fn a_movement_just_after_the_window_by_the_providers_clock_matches_a_charge_in_it() {
    let app = spawn_app().await;
    let paid = app.paid_payment(2000).await;
    let window = Window {
        from: now() - chrono::Duration::hours(1),
        to: now() + chrono::Duration::seconds(1),
    };
    let after_the_window = |mut m: SettlementMovement| {
        m.created_at = window.to + chrono::Duration::seconds(2);
        m
    };
    let report = ScriptedReport::default();
    report.set(vec![
        after_the_window(movement(1, MovementKind::Charge, &paid, 2000, "usd")),
        after_the_window(movement(
            2,
            MovementKind::Charge,
            "pay_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f",
            10,
            "usd",
        )),
    ]);
    let mut found = Vec::new();
    let report = reconcile::reconcile(&app.state.db, &report, window, &mut |f: &Found| {
        found.push(f.clone())
    })
    .await
    .expect("the run finishes");
    assert!(found.is_empty(), "{:?}", kinds(&found));
    assert_eq!(report.open_total(), 0);
}

/// A movement whose reference is longer than any index entry may be (the provider's, of any
/// length) is found, stored once and found again like any other: it stopped the run on
/// PostgreSQL ("index row size exceeds maximum").
#[actix_web::test]
async fn a_movement_with_a_reference_of_any_length_is_one_discrepancy() {
    let app = spawn_app().await;
    let long = format!("pay_{}", "x".repeat(3000));
    let report = ScriptedReport::default();
    report.set(vec![movement(1, MovementKind::Charge, &long, 10, "usd")]);
    let (first, found) = run(&app, &report).await;
    assert_eq!(kinds(&found), [("missing_here".to_owned(), long.clone())]);
    assert_eq!(first.open_total(), 1);
    let stored = stored_discrepancies(&app).await;
    assert_eq!(stored.len(), 1);
    assert!(stored[0].0.len() <= 255, "{}", stored[0].0);
    let (second, again) = run(&app, &report).await;
    assert_eq!(kinds(&again), kinds(&found));
    assert_eq!(second.open_total(), 1);
    assert_eq!(stored_discrepancies(&app).await, stored, "stored once");
}

/// A report whose pages do not move forward (the provider ignores `starting_after`) stops
/// the run: read for ever it would hammer the provider, hold the lease, and judge its own
/// movements again as duplicates.
#[actix_web::test]
async fn a_report_that_does_not_move_forward_stops_the_run() {
    let app = spawn_app().await;
    let report = ScriptedReport::default();
    report.set(
        (1..=3)
            .map(|n| {
                movement(
                    n,
                    MovementKind::Charge,
                    &format!("pay_nobody_{n}"),
                    10,
                    "usd",
                )
            })
            .collect(),
    );
    report
        .stuck
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let mut found = Vec::new();
    let outcome = reconcile::reconcile(&app.state.db, &report, recent(), &mut |f: &Found| {
        found.push(f.clone())
    })
    .await;
    let error = outcome.expect_err("the run stops").to_string();
    assert!(error.contains("does not move forward"), "{error}");
    // The first page's two movements, found once; never their duplicates.
    assert_eq!(
        kinds(&found),
        [
            ("missing_here".to_owned(), "pay_nobody_1".to_owned()),
            ("missing_here".to_owned(), "pay_nobody_2".to_owned())
        ]
    );
    // The lease is given back: the next run can start, and reads the report whole.
    report
        .stuck
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let (after, _) = run(&app, &report).await;
    assert_eq!(after.open_total(), 3);
}

/// A dispute's movement names its payment, which may have several disputes: each movement
/// is one of them, a missing one is found (and stored) on its own, and a third movement
/// for two disputes is a duplicate.
#[actix_web::test]
async fn each_of_a_payments_disputes_has_its_own_movement() {
    use MovementKind::{Charge, Dispute};
    let app = spawn_app().await;
    let paid = app.post_payment("two-disputes", &visa(1000)).await.json();
    let payment = paid["id"].as_str().unwrap().to_owned();
    for (id, amount) in [("du_six", 600), ("du_four", 400)] {
        let data = crate::disputes::opening(id, &paid, amount);
        app.provider_event("charge.dispute.created", data).await;
    }
    let report = ScriptedReport::default();
    let charge = movement(1, Charge, &payment, 1000, "usd");

    report.set(vec![
        charge.clone(),
        movement(2, Dispute, &payment, 400, "usd"),
        movement(3, Dispute, &payment, 600, "usd"),
    ]);
    let (agreed, found) = run(&app, &report).await;
    assert_eq!(kinds(&found), [], "each dispute has its movement");
    assert_eq!(agreed.matched, 3);

    report.set(vec![charge.clone()]);
    let (_, found) = run(&app, &report).await;
    assert_eq!(
        kinds(&found),
        [
            ("missing_at_provider".to_owned(), payment.clone()),
            ("missing_at_provider".to_owned(), payment.clone())
        ]
    );
    let open = stored_discrepancies(&app)
        .await
        .into_iter()
        .filter(|(_, resolved, _)| resolved.is_none())
        .count();
    assert_eq!(open, 2, "stored once each, not one over the other");

    report.set(vec![
        charge,
        movement(2, Dispute, &payment, 600, "usd"),
        movement(3, Dispute, &payment, 400, "usd"),
        movement(4, Dispute, &payment, 400, "usd"),
    ]);
    let (_, found) = run(&app, &report).await;
    assert_eq!(
        kinds(&found),
        [("duplicate_at_provider".to_owned(), payment.clone())]
    );
}

#[actix_web::test]
async fn one_run_at_a_time_and_each_scheduled_run_to_one_instance() {
    use futures_util::future::join_all;
    use payments_api::db::reconciliation as rows;
    // No scheduled check of its own in the way.
    let app = crate::support::spawn_app_with(|s| s.reconcile_interval = None).await;
    // Another run holds the lease: this one does not start.
    let held = app
        .state
        .db
        .run(|conn| {
            rows::take_lease(
                conn,
                "other-run",
                now(),
                now() + chrono::Duration::minutes(5),
            )
        })
        .await
        .unwrap();
    assert!(held);
    let busy = reconcile::reconcile(
        &app.state.db,
        &ScriptedReport::default(),
        recent(),
        &mut |_: &Found| {},
    )
    .await;
    assert!(
        matches!(busy, Err(reconcile::ReconcileError::Busy)),
        "{busy:?}"
    );
    app.state
        .db
        .run(|conn| rows::release_lease(conn, "other-run"))
        .await
        .unwrap();
    assert!(
        reconcile::reconcile(
            &app.state.db,
            &ScriptedReport::default(),
            recent(),
            &mut |_: &Found| {}
        )
        .await
        .is_ok()
    );

    // The schedule: the first claim only schedules; once due, of many at once one runs.
    let every = chrono::Duration::milliseconds(200);
    let claim = |at: Timestamp| {
        app.state
            .db
            .run(move |conn| rows::claim_scheduled(conn, at, every))
    };
    assert!(!claim(now()).await.unwrap(), "the first claim schedules");
    assert!(!claim(now()).await.unwrap(), "not due yet");
    let later = now() + chrono::Duration::seconds(1);
    let claims = join_all((0..6).map(|_| claim(later))).await;
    let won = claims.into_iter().filter(|c| *c.as_ref().unwrap()).count();
    assert_eq!(won, 1, "one instance gets the due run");
}

/// The dashboard's overview lists the open discrepancies about the signed-in merchant's own
/// money moves (its payments, refunds, payouts), not another merchant's nor a movement that
/// names nothing of ours, and drops them once resolved.
#[actix_web::test]
async fn the_overview_shows_a_merchants_own_open_discrepancies() {
    use crate::dashboard::Visitor;
    let app = spawn_app().await;
    let mine = app.paid_payment(3000).await;
    let refund = app
        .post_refund(&mine, "re-mine", &json!({"amount": 500}))
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let other_key = app.create_merchant("reconcile-other").await;
    let theirs = app
        .post_json("/v1/payments", &other_key, Some("theirs"), &visa(4000))
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let nobodys = "pay_0193f0c2a9b87c3e8e1f6a2b3c4d5e6f";
    let report = ScriptedReport::default();
    report.set(vec![
        movement(1, MovementKind::Charge, &mine, 2999, "usd"),
        movement(2, MovementKind::Charge, &theirs, 3999, "usd"),
        movement(3, MovementKind::Charge, nobodys, 10, "usd"),
    ]);
    let (first, _) = run(&app, &report).await;
    assert_eq!(
        first.open_total(),
        4,
        "three mismatches and the missing refund"
    );

    let mut visitor = Visitor::new(&app);
    visitor.sign_in(&app.api_key).await;
    let overview = visitor.get("/dashboard").await.text();
    assert!(overview.contains("Open reconciliation discrepancies"));
    assert!(
        overview.contains(&format!(
            "amount_mismatch</code> · charge <a href=\"/dashboard/payments/{mine}\">{mine}</a> · ours 30.00 USD · provider's 29.99 USD"
        )),
        "{overview}"
    );
    assert!(overview.contains(&format!("missing_at_provider</code> · refund {refund}")));
    assert!(!overview.contains(&theirs), "another merchant's");
    assert!(!overview.contains(nobodys), "nobody's");

    // The corrected report resolves them: the overview has none.
    report.set(vec![
        movement(1, MovementKind::Charge, &mine, 3000, "usd"),
        movement(2, MovementKind::Charge, &theirs, 4000, "usd"),
        movement(4, MovementKind::Refund, &refund, 500, "usd"),
    ]);
    let (second, _) = run(&app, &report).await;
    assert_eq!(second.open_total(), 0);
    let overview = visitor.get("/dashboard").await.text();
    assert!(!overview.contains("amount_mismatch") && !overview.contains(&refund));
}
