//! One reconciliation run (see the module docs for its steps), the command's report, and the
//! scheduled runs.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::judge::{Judgement, Ours, Seen, judge};
use super::{Discrepancy, DiscrepancyKind, Money, Window};
use crate::db::reconciliation::{self as rows, DiscrepancyRow, OurMove, SeenRow};
use crate::db::{Db, DbConnection, DbError};
use crate::domain::{Timestamp, format_timestamp, now};
use crate::provider::{MovementKind, PaymentProvider, SettlementMovement, SettlementQuery};
use crate::state::AppState;

/// How far before the window provider movements are read, to match our moves that became
/// final just inside it (the provider moves money first; we record it after, sometimes
/// after a recovery).
pub(super) const LOOKBACK: chrono::Duration = chrono::Duration::hours(1);
/// How far after the window provider movements are read, to match our moves that became
/// final just before its end by our clock though the provider's clock put its movement just
/// after (two hosts' clocks differ). The scheduled window ends ten minutes ago, so these
/// movements are already in the report.
pub(super) const LOOKAHEAD: chrono::Duration = chrono::Duration::minutes(5);
/// Movements per page of the report, and our moves per page of each query.
const PAGE: usize = 1000;
/// How long a run holds the lease without renewing it (it renews on every page).
const LEASE: chrono::Duration = chrono::Duration::minutes(5);

/// Why a run did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("another reconciliation is running")]
    Busy,
    #[error("the provider's settlement report could not be read: {0}")]
    Provider(String),
    #[error(transparent)]
    Database(#[from] DbError),
    #[error("the lease was lost mid-run (another run took over)")]
    LeaseLost,
}

/// A discrepancy found by a run, as stored.
#[derive(Debug, Clone)]
pub struct Found {
    pub discrepancy: Discrepancy,
    pub first_seen_at: Timestamp,
}

impl Found {
    /// One JSON line: `{"kind", "reference", "provider_movement_id", "expected", "found",
    /// "first_seen_at"}`.
    /// Its fields in the contract's order (a struct, not a map, keeps it).
    pub fn json_line(&self) -> String {
        #[derive(serde::Serialize)]
        struct Line<'a> {
            kind: &'a str,
            reference: &'a str,
            provider_movement_id: Option<&'a str>,
            expected: Option<MoneyJson<'a>>,
            found: Option<MoneyJson<'a>>,
            first_seen_at: String,
        }
        #[derive(serde::Serialize)]
        struct MoneyJson<'a> {
            amount: i64,
            currency: &'a str,
        }
        fn money(m: &Option<Money>) -> Option<MoneyJson<'_>> {
            m.as_ref().map(|m| MoneyJson {
                amount: m.amount,
                currency: &m.currency,
            })
        }
        let d = &self.discrepancy;
        let line = Line {
            kind: d.kind.as_str(),
            reference: &d.reference,
            provider_movement_id: d.provider_movement_id.as_deref(),
            expected: money(&d.expected),
            found: money(&d.found),
            first_seen_at: format_timestamp(self.first_seen_at),
        };
        // A struct of strings and integers always serialises.
        serde_json::to_string(&line).unwrap_or_default()
    }
}

/// What a run ends with.
#[derive(Debug, Clone)]
pub struct Report {
    /// Provider movements of the window matched to one of our money moves.
    pub matched: u64,
    /// Discrepancies found by this run.
    pub found: u64,
    /// Open discrepancies after the run (all windows), by kind.
    pub open: Vec<(String, i64)>,
}

impl Report {
    pub fn open_total(&self) -> i64 {
        self.open.iter().map(|(_, n)| n).sum()
    }

    /// `reconciled: N matched, M discrepancies (kind: n, …)`.
    pub fn summary(&self) -> String {
        let mut by_kind: Vec<String> = self
            .open
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(kind, n)| format!("{kind}: {n}"))
            .collect();
        by_kind.sort();
        let detail = if by_kind.is_empty() {
            String::new()
        } else {
            format!(" ({})", by_kind.join(", "))
        };
        format!(
            "reconciled: {} matched, {} discrepancies{detail}",
            self.matched,
            self.open_total()
        )
    }
}

/// Reconciles `window`: one run at a time across instances (else [`ReconcileError::Busy`]).
/// Each discrepancy found is handed to `on_found` as it is stored.
pub async fn reconcile(
    db: &Db,
    provider: &dyn PaymentProvider,
    window: Window,
    on_found: &mut dyn FnMut(&Found),
) -> Result<Report, ReconcileError> {
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let taken = {
        let run_id = run_id.clone();
        db.run(move |conn| rows::take_lease(conn, &run_id, now(), now() + LEASE))
            .await?
    };
    if !taken {
        return Err(ReconcileError::Busy);
    }
    let result = run(db, provider, &run_id, window, on_found).await;
    let cleanup = {
        let run_id = run_id.clone();
        db.run(move |conn| {
            rows::forget_run(conn, &run_id)?;
            rows::release_lease(conn, &run_id)
        })
        .await
    };
    let report = result?;
    cleanup?;
    Ok(report)
}

async fn run(
    db: &Db,
    provider: &dyn PaymentProvider,
    run_id: &str,
    window: Window,
    on_found: &mut dyn FnMut(&Found),
) -> Result<Report, ReconcileError> {
    let mut matched = 0;
    let mut found = 0;
    let mut report = |stored: Vec<Found>| {
        found += stored.len() as u64;
        stored.iter().for_each(&mut *on_found);
    };

    // 1. The provider's movements, page by page.
    let mut after: Option<String> = None;
    // The last movement of each page read: a page that ends where one before it did means
    // the report does not move forward (it would be read for ever, its movements judged
    // again as duplicates). One id per page, however long the report.
    let mut cursors = HashSet::new();
    loop {
        let query = SettlementQuery {
            created_gte: window.from - LOOKBACK,
            created_lt: window.to + LOOKAHEAD,
            limit: PAGE,
            starting_after: after.clone(),
        };
        let page = provider
            .settlements(&query)
            .await
            .map_err(|e| ReconcileError::Provider(e.to_string()))?;
        after = page.data.last().map(|m| m.id.clone());
        if let Some(last) = &after
            && !cursors.insert(last.clone())
        {
            return Err(ReconcileError::Provider(format!(
                "the settlement report does not move forward: a second page ends with \
                 movement `{last}`"
            )));
        }
        let has_more = page.has_more && after.is_some();
        let run_id_owned = run_id.to_owned();
        let (page_matched, stored) = db
            .run(move |conn| {
                let judged = judge_page(conn, &run_id_owned, &page.data, window)?;
                if !rows::renew_lease(conn, &run_id_owned, now() + LEASE)? {
                    return Err(diesel::result::Error::RollbackTransaction);
                }
                Ok(judged)
            })
            .await
            .map_err(lease_or_database)?;
        matched += page_matched;
        report(stored);
        if !has_more {
            break;
        }
    }

    // 2. Our money moves of the window that no movement matched.
    for source in [
        Source::Charges,
        Source::Refunds,
        Source::Payouts,
        Source::Disputes,
    ] {
        let mut after = String::new();
        loop {
            let (run_id_owned, cursor) = (run_id.to_owned(), after.clone());
            let (last, stored) = db
                .run(move |conn| {
                    let span = (window.from, window.to);
                    let limit = PAGE as i64;
                    let page: Vec<(String, OurMove)> = match source {
                        Source::Charges => keyed(rows::unmatched_charges(
                            conn,
                            &run_id_owned,
                            span,
                            &cursor,
                            limit,
                        )?),
                        Source::Refunds => keyed(rows::unmatched_refunds(
                            conn,
                            &run_id_owned,
                            span,
                            &cursor,
                            limit,
                        )?),
                        Source::Payouts => keyed(rows::unmatched_payouts(
                            conn,
                            &run_id_owned,
                            span,
                            &cursor,
                            limit,
                        )?),
                        Source::Disputes => {
                            rows::unmatched_disputes(conn, &run_id_owned, span, &cursor, limit)?
                        }
                    };
                    let last = (page.len() == PAGE)
                        .then(|| page.last().map(|(k, _)| k.clone()))
                        .flatten();
                    let mut stored = Vec::with_capacity(page.len());
                    for (_, ours) in page {
                        let discrepancy = Discrepancy {
                            kind: DiscrepancyKind::MissingAtProvider,
                            movement_type: ours.movement_type,
                            reference: ours.reference,
                            provider_movement_id: None,
                            dispute: ours.dispute,
                            expected: Some(Money {
                                amount: ours.amount.abs(),
                                currency: ours.currency,
                            }),
                            found: None,
                            occurred_at: ours.at,
                        };
                        stored.push(store(conn, &run_id_owned, discrepancy)?);
                    }
                    if !rows::renew_lease(conn, &run_id_owned, now() + LEASE)? {
                        return Err(diesel::result::Error::RollbackTransaction);
                    }
                    Ok((last, stored))
                })
                .await
                .map_err(lease_or_database)?;
            report(stored);
            match last {
                Some(last) => after = last,
                None => break,
            }
        }
    }

    // 3. What no longer holds is resolved; the counts after.
    let run_id_owned = run_id.to_owned();
    let open = db
        .run(move |conn| {
            rows::resolve_unseen(conn, &run_id_owned, (window.from, window.to), now())?;
            rows::open_by_kind(conn)
        })
        .await?;
    crate::metrics::reconciliation_discrepancies(&open);
    Ok(Report {
        matched,
        found,
        open,
    })
}

#[derive(Debug, Clone, Copy)]
enum Source {
    Charges,
    Refunds,
    Payouts,
    Disputes,
}

/// Pages keyed by the reference they are ordered by.
fn keyed(moves: Vec<OurMove>) -> Vec<(String, OurMove)> {
    moves
        .into_iter()
        .map(|m| (m.reference.clone(), m))
        .collect()
}

fn lease_or_database(e: DbError) -> ReconcileError {
    match e {
        DbError::Query(diesel::result::Error::RollbackTransaction) => ReconcileError::LeaseLost,
        other => ReconcileError::Database(other),
    }
}

/// Judges one page of movements: returns how many of the window matched, and the
/// discrepancies found, stored.
fn judge_page(
    conn: &mut DbConnection,
    run_id: &str,
    movements: &[SettlementMovement],
    window: Window,
) -> diesel::QueryResult<(u64, Vec<Found>)> {
    let ours = our_records(conn, movements)?;
    // What this run matched already, in earlier pages (in the table) or in this one: by
    // reference, or for a dispute's movements by the dispute (a payment may have several).
    let mut seen = Seen::new();
    for kind in MovementKind::ALL {
        if !movements.iter().any(|m| m.kind == kind) {
            continue;
        }
        let references: Vec<&str> = match kind {
            MovementKind::Dispute | MovementKind::DisputeReversal => ours
                .disputes
                .values()
                .flatten()
                .map(|d| d.id.as_str())
                .collect(),
            _ => movements
                .iter()
                .filter(|m| m.kind == kind)
                .map(|m| m.reference.as_str())
                .collect(),
        };
        if references.is_empty() {
            continue;
        }
        for (reference, _) in rows::seen(conn, run_id, kind.as_str(), &references)? {
            seen.insert((kind, reference));
        }
    }
    let mut matched = 0;
    let mut marks = Vec::new();
    let mut found = Vec::new();
    for movement in movements {
        let in_window = movement.created_at >= window.from && movement.created_at < window.to;
        let as_found = || {
            Some(Money {
                amount: movement.amount,
                currency: movement.currency.clone(),
            })
        };
        let discrepancy = |kind, expected| Discrepancy {
            kind,
            movement_type: movement.kind.as_str(),
            reference: movement.reference.clone(),
            provider_movement_id: Some(movement.id.clone()),
            dispute: None,
            expected,
            found: as_found(),
            occurred_at: movement.created_at,
        };
        match judge(movement, &ours, &seen) {
            Judgement::NotFinal => {}
            Judgement::MissingHere => {
                if in_window {
                    found.push(discrepancy(DiscrepancyKind::MissingHere, None));
                }
            }
            Judgement::Ours {
                expected,
                disagreement,
                dispute,
            } => {
                let key = (
                    movement.kind,
                    dispute.unwrap_or_else(|| movement.reference.clone()),
                );
                if seen.contains(&key) {
                    if in_window {
                        found.push(discrepancy(
                            DiscrepancyKind::DuplicateAtProvider,
                            Some(expected),
                        ));
                    }
                    continue;
                }
                marks.push(SeenRow {
                    run_id: run_id.to_owned(),
                    movement_type: movement.kind.as_str().to_owned(),
                    reference: key.1.clone(),
                    movement_id: movement.id.clone(),
                });
                seen.insert(key);
                if in_window {
                    match disagreement {
                        None => matched += 1,
                        Some(kind) => found.push(discrepancy(kind, Some(expected))),
                    }
                }
            }
        }
    }
    rows::mark_seen(conn, &marks)?;
    let stored = found
        .into_iter()
        .map(|d| store(conn, run_id, d))
        .collect::<diesel::QueryResult<Vec<_>>>()?;
    Ok((matched, stored))
}

/// Our records of the references of a page: one query per kind of record.
fn our_records(
    conn: &mut DbConnection,
    movements: &[SettlementMovement],
) -> diesel::QueryResult<Ours> {
    let of = |kinds: &[MovementKind]| -> Vec<&str> {
        let unique: HashSet<&str> = movements
            .iter()
            .filter(|m| kinds.contains(&m.kind))
            .map(|m| m.reference.as_str())
            .collect();
        unique.into_iter().collect()
    };
    let payment_ids = of(&[
        MovementKind::Charge,
        MovementKind::Capture,
        MovementKind::Dispute,
        MovementKind::DisputeReversal,
    ]);
    let mut ours = Ours::default();
    if !payment_ids.is_empty() {
        ours.payments = rows::payments_by_id(conn, &payment_ids)?
            .into_iter()
            .map(|p| (p.id.clone(), p))
            .collect();
        let mut disputes: HashMap<String, Vec<_>> = HashMap::new();
        for d in rows::disputes_of(conn, &payment_ids)? {
            disputes.entry(d.payment_id.clone()).or_default().push(d);
        }
        ours.disputes = disputes;
    }
    let refund_ids = of(&[MovementKind::Refund]);
    if !refund_ids.is_empty() {
        ours.refunds = rows::refunds_by_id(conn, &refund_ids)?
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
    }
    let payout_ids = of(&[MovementKind::Payout]);
    if !payout_ids.is_empty() {
        ours.payouts = rows::payouts_by_id(conn, &payout_ids)?
            .into_iter()
            .map(|p| (p.id.clone(), p))
            .collect();
    }
    Ok(ours)
}

fn store(
    conn: &mut DbConnection,
    run_id: &str,
    discrepancy: Discrepancy,
) -> diesel::QueryResult<Found> {
    let at = now();
    let money = |m: &Option<Money>| {
        (
            m.as_ref().map(|m| m.amount),
            m.as_ref().map(|m| m.currency.clone()),
        )
    };
    let (expected_amount, expected_currency) = money(&discrepancy.expected);
    let (found_amount, found_currency) = money(&discrepancy.found);
    let stored = rows::store(
        conn,
        &DiscrepancyRow {
            id: format!("rd_{}", crate::domain::v7_now().simple()),
            fingerprint: discrepancy.fingerprint(),
            kind: discrepancy.kind.as_str().to_owned(),
            movement_type: discrepancy.movement_type.to_owned(),
            reference: discrepancy.reference.clone(),
            provider_movement_id: discrepancy.provider_movement_id.clone(),
            expected_amount,
            expected_currency,
            found_amount,
            found_currency,
            occurred_at: discrepancy.occurred_at,
            first_seen_at: at,
            last_seen_at: at,
            last_run_id: run_id.to_owned(),
            resolved_at: None,
        },
    )?;
    Ok(Found {
        discrepancy,
        first_seen_at: stored.first_seen_at,
    })
}

/// The scheduled run, if one is due for this instance (of all instances, one gets each due
/// run): the default window, its summary logged.
pub async fn run_scheduled(state: &AppState, every: Duration) {
    let every = chrono::Duration::from_std(every).unwrap_or(chrono::Duration::MAX);
    let due = state
        .db
        .run(move |conn| rows::claim_scheduled(conn, now(), every))
        .await;
    match due {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(error = %e, "could not check the reconciliation schedule");
            return;
        }
    }
    let window = Window::ending_before(now());
    let mut log = |found: &Found| tracing::warn!(discrepancy = %found.json_line(), "reconciliation discrepancy");
    match reconcile(&state.db, state.provider.as_ref(), window, &mut log).await {
        Ok(report) => tracing::info!(summary = %report.summary(), "scheduled reconciliation"),
        Err(e) => tracing::warn!(error = %e, "scheduled reconciliation did not finish"),
    }
}

/// With `RECONCILE_INTERVAL_MS` set, checks every few seconds whether the scheduled run is
/// due (see [`run_scheduled`]).
pub fn spawn_scheduled(state: &AppState) {
    let Some(every) = state.settings.reconcile_interval else {
        return;
    };
    let check = every.min(Duration::from_secs(5));
    let worker = state.clone();
    state
        .shutdown
        .spawn_periodic("reconcile", check, check, move || {
            let state = worker.clone();
            async move { run_scheduled(&state, every).await }
        });
}

/// Keeps `reconciliation_discrepancies` at the stored open counts on this instance, every
/// 5 seconds (so every instance shows what any run stored).
pub fn spawn_metrics(state: &AppState) {
    let worker = state.clone();
    let every = Duration::from_secs(5);
    state
        .shutdown
        .spawn_periodic("reconciliation metrics", Duration::ZERO, every, move || {
            let state = worker.clone();
            async move {
                match state.db.run(rows::open_by_kind).await {
                    Ok(open) => crate::metrics::reconciliation_discrepancies(&open),
                    Err(e) => tracing::debug!(error = %e, "could not count discrepancies"),
                }
            }
        });
}
