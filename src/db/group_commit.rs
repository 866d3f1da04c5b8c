//! Group commit: concurrent writes of one kind reach the database as one statement in one
//! transaction, so N requests share one round trip and one WAL flush instead of paying N.
//!
//! ```text
//! submit(item) ──▶ queue ──▶ lane: takes the first waiting item, and every item queued
//!                                  behind it (up to MAX_BATCH), no timer
//!                               ──▶ execute(conn, &items): one statement, or one
//!                                   transaction of its own (BEGIN … COMMIT)
//!                               ──▶ each caller gets its own result, once committed
//! ```
//!
//! A lane waits for nothing but the queue: at low load every item goes alone, as it would
//! without batching; under load the items that arrive while a batch is in flight form the
//! next one. Each kind of write has one lane, so one batch of it in flight at a time: a
//! busier instance makes larger batches rather than more of them, as PostgreSQL's own group
//! commit does with WAL flushes. Measured against four lanes per kind (docs/benchmark.md,
//! seventeenth sitting): batches of 15 claims and 27 finishes instead of 6 and 8, and 35 %
//! more new payments per second with a lower p99 (fewer statements, plans and WAL flushes
//! per payment).
//!
//! Failure keeps every promise of a single write:
//! - the statement fails (a constraint, a serialization failure): the transaction rolled
//!   back, nothing of the batch is written, and each item is run again alone, so one bad
//!   item fails only its own caller;
//! - the connection is lost (before or after COMMIT was sent): whether the batch committed
//!   is unknown, so every caller gets [`DbError::Unavailable`] (a 503); a retry finds the
//!   row if it was written and writes it if not, like after any lost single write.
//!
//! `execute` must be atomic (one statement, or its own transaction: a lane adds none, so a
//! lone item costs what it did without batching) and answer one result per item, in the
//! order of `items`, matching rows by key (never by the order a `RETURNING` gives them).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use diesel::result::Error as DieselError;
use tokio::sync::{mpsc, oneshot};

use super::Db;
use super::error::DbError;
use super::pool::DbConnection;

/// How one kind of write reaches the database, chosen once at start from the backend, so
/// that the flows that write never ask which it is.
pub enum WritePath<I> {
    /// Each write in its own transaction on a pooled connection: SQLite has one writer at a
    /// time and no network round trip to share.
    Alone { db: Db, execute: Execute<I, bool> },
    /// Coalesced with the concurrent writes of its kind: PostgreSQL.
    Grouped(GroupCommit<I, bool>),
}

impl<I> Clone for WritePath<I> {
    fn clone(&self) -> Self {
        match self {
            Self::Alone { db, execute } => Self::Alone {
                db: db.clone(),
                execute: *execute,
            },
            Self::Grouped(lane) => Self::Grouped(lane.clone()),
        }
    }
}

impl<I> WritePath<I>
where
    I: Send + Sync + 'static,
{
    /// The write path of `execute` on `db`: a group-commit lane named `name` on PostgreSQL,
    /// each write alone on SQLite.
    pub fn start(db: &Db, name: &'static str, execute: Execute<I, bool>) -> Self {
        if db.is_postgres() {
            Self::Grouped(GroupCommit::start(db.clone(), name, execute))
        } else {
            Self::Alone {
                db: db.clone(),
                execute,
            }
        }
    }

    /// Writes `item`: its one result once committed (see [`GroupCommit::submit`]).
    pub async fn submit(&self, item: I) -> Result<bool, DbError> {
        match self {
            Self::Alone { db, execute } => {
                let execute = *execute;
                db.run(move |conn| {
                    let results = checked(execute(conn, std::slice::from_ref(&item)), 1)?;
                    Ok(results.first().copied().unwrap_or(false))
                })
                .await
            }
            Self::Grouped(lane) => lane.submit(item).await,
        }
    }

    /// The group commit behind this path, if it has one (tests and the metrics).
    pub fn group_commit(&self) -> Option<&GroupCommit<I, bool>> {
        match self {
            Self::Alone { .. } => None,
            Self::Grouped(lane) => Some(lane),
        }
    }
}

/// Items per statement at most: bounds the statement's size and a batch's latency.
pub const MAX_BATCH: usize = 128;

type Reply<O> = oneshot::Sender<Result<O, DbError>>;
type Execute<I, O> = fn(&mut DbConnection, &[I]) -> diesel::QueryResult<Vec<O>>;

/// One kind of batched write. Cloning shares the queue.
pub struct GroupCommit<I, O> {
    queue: mpsc::UnboundedSender<(I, Reply<O>)>,
    stats: Arc<Stats>,
    /// Whose deadline a caller's wait for its write keeps to, queue included.
    db: Db,
}

impl<I, O> Clone for GroupCommit<I, O> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            stats: self.stats.clone(),
            db: self.db.clone(),
        }
    }
}

/// What the lane did (for tests and the metrics).
#[derive(Default)]
pub struct Stats {
    batches: AtomicUsize,
    items: AtomicUsize,
    largest: AtomicUsize,
    split: AtomicUsize,
}

impl Stats {
    pub fn batches(&self) -> usize {
        self.batches.load(Ordering::SeqCst)
    }

    pub fn items(&self) -> usize {
        self.items.load(Ordering::SeqCst)
    }

    /// The most items one statement carried.
    pub fn largest(&self) -> usize {
        self.largest.load(Ordering::SeqCst)
    }

    /// Batches that failed and were run again item by item.
    pub fn split(&self) -> usize {
        self.split.load(Ordering::SeqCst)
    }
}

impl<I, O> GroupCommit<I, O>
where
    I: Send + Sync + 'static,
    O: Send + 'static,
{
    /// Starts the lane on the current runtime. It stops when the last clone of the returned
    /// handle is dropped and the queue is empty.
    pub fn start(db: Db, name: &'static str, execute: Execute<I, O>) -> Self {
        let (queue, mut receiver) = mpsc::unbounded_channel::<(I, Reply<O>)>();
        let stats = Arc::new(Stats::default());
        let (lane_db, lane_stats) = (db.clone(), stats.clone());
        actix_web::rt::spawn(async move {
            while let Some(batch) = next_batch(&mut receiver).await {
                // Items whose callers have given up (see `submit`) are not written.
                let batch: Vec<_> = batch
                    .into_iter()
                    .filter(|(_, reply)| !reply.is_closed())
                    .collect();
                if batch.is_empty() {
                    continue;
                }
                lane_stats.record(name, batch.len());
                let started = std::time::Instant::now();
                run_batch(&lane_db, &lane_stats, execute, batch).await;
                crate::metrics::group_commit_duration(name, started.elapsed());
            }
        });
        Self { queue, stats, db }
    }

    /// Writes `item` with whatever else is waiting; answers once its batch committed.
    ///
    /// The caller waits no longer than the database's deadline counted from here, queue
    /// included: behind a batch stuck on a silent database, waiting for its own batch would
    /// stack a second deadline on the first. Given up, the item is skipped if its batch has
    /// not started, and may still be written if it has (as a write whose COMMIT was sent
    /// before the connection was lost): the caller answers 503 either way.
    pub async fn submit(&self, item: I) -> Result<O, DbError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((item, reply))
            .map_err(|_| DbError::Unavailable("the write lane has stopped".to_owned()))?;
        self.db.within_deadline(answer).await
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

impl Stats {
    fn record(&self, name: &'static str, size: usize) {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.items.fetch_add(size, Ordering::SeqCst);
        self.largest.fetch_max(size, Ordering::SeqCst);
        crate::metrics::group_commit_batch(name, size);
    }
}

/// The first item waiting (waiting for it if there is none) and every item behind it, up
/// to [`MAX_BATCH`]. `None` once every handle is gone and the queue is drained.
async fn next_batch<T>(receiver: &mut mpsc::UnboundedReceiver<T>) -> Option<Vec<T>> {
    let first = receiver.recv().await?;
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        match receiver.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
    Some(batch)
}

async fn run_batch<I, O>(db: &Db, stats: &Stats, execute: Execute<I, O>, batch: Vec<(I, Reply<O>)>)
where
    I: Send + Sync + 'static,
    O: Send + 'static,
{
    let (items, replies): (Vec<I>, Vec<Reply<O>>) = batch.into_iter().unzip();
    let items = Arc::new(items);
    let all = items.clone();
    let together = db
        .run(move |conn| checked(execute(conn, &all), all.len()))
        .await;
    match together {
        Ok(results) => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(Ok(result));
            }
        }
        // Whether it committed is unknown: every caller is told so.
        Err(DbError::Unavailable(cause)) => {
            for reply in replies {
                let _ = reply.send(Err(DbError::Unavailable(cause.clone())));
            }
        }
        // Rolled back: each item again, alone, so a bad one fails only its own caller.
        Err(e) if replies.len() > 1 => {
            tracing::warn!(error = %e, size = replies.len(), "group commit: batch failed, splitting it");
            stats.split.fetch_add(1, Ordering::SeqCst);
            for (index, reply) in replies.into_iter().enumerate() {
                let items = items.clone();
                let alone = db
                    .run(move |conn| {
                        checked(execute(conn, &items[index..=index]), 1)
                            .map(|mut results| results.remove(0))
                    })
                    .await;
                let _ = reply.send(alone);
            }
        }
        // One item: its error is its answer.
        Err(e) => {
            if let Some(reply) = replies.into_iter().next() {
                let _ = reply.send(Err(e));
            }
        }
    }
}

/// `execute` broke its promise of one result per item: a bug, answered as an error.
fn checked<O>(
    results: diesel::QueryResult<Vec<O>>,
    expected: usize,
) -> diesel::QueryResult<Vec<O>> {
    let results = results?;
    if results.len() != expected {
        return Err(DieselError::QueryBuilderError(
            format!(
                "group commit: {} results for {expected} items",
                results.len()
            )
            .into(),
        ));
    }
    Ok(results)
}
