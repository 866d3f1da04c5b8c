//! Settling: moving an unfinished row to its final outcome, whichever path reports it (the
//! request itself, a retry, the recovery worker, the provider's webhook), written once for
//! every kind whose outcome may arrive by more than one path (refunds, payouts).
//!
//! One transaction (a savepoint inside a caller's, e.g. a webhook's that records its event
//! id alongside): the guarded write that takes the unfinished row (of concurrent callers
//! exactly one gets it, and on SQLite it takes the write lock before any read), the kind's
//! own move of status and money ([`Settle::settle`]), the answer every retry replays, and
//! the change's event. A row that was final already is left as it is: an outcome that
//! disagrees would have moved it backwards or sideways.

use crate::db::DbConnection;
use crate::domain::{RequestRef, Timestamp, now};
use crate::events::{self, EventType, NewEvent};

/// The columns every settled row shares, written the same way for each kind (by
/// `settled_row!`).
pub trait SettledRow {
    /// The row finished at `at`: its lease given up, `updated_at` set.
    fn close(&mut self, at: Timestamp);
    /// The final answer every retry replays.
    fn store_answer(&mut self, status: i32, body: &str);
}

/// Implements [`SettledRow`] for a row with `lease_token`, `lease_expires_at`, `updated_at`,
/// `response_status` and `response_body`.
macro_rules! settled_row {
    ($row:ty) => {
        impl $crate::operations::SettledRow for $row {
            fn close(&mut self, at: $crate::domain::Timestamp) {
                self.lease_token = None;
                self.lease_expires_at = None;
                self.updated_at = at;
            }
            fn store_answer(&mut self, status: i32, body: &str) {
                self.response_status = Some(status);
                self.response_body = Some(body.to_owned());
            }
        }
    };
}
pub(crate) use settled_row;

/// What [`settle`] did.
#[derive(Debug, Clone)]
pub enum Settled<Row> {
    /// This call moved the row from unfinished to final.
    Applied(Row),
    /// It was final already (or a stored refusal): nothing changed.
    AlreadyFinal(Row),
    /// No row has this id.
    Unknown,
}

impl<Row> Settled<Row> {
    /// What a guarded finish that found the row final already reads back: the row another
    /// path finished first (its answer stands), or [`Settled::Unknown`] if it is gone.
    pub fn already_final(found: Option<Row>) -> Self {
        found.map_or(Self::Unknown, Self::AlreadyFinal)
    }
}

/// A kind whose unfinished rows are settled by [`settle`].
pub trait Settle {
    type Row: SettledRow;
    type Outcome;

    /// The guarded write that takes the row if it is still unfinished (true), in the
    /// caller's transaction.
    fn lock_unfinished(
        conn: &mut DbConnection,
        id: &str,
        at: Timestamp,
    ) -> diesel::QueryResult<bool>;

    fn find(conn: &mut DbConnection, id: &str) -> diesel::QueryResult<Option<Self::Row>>;

    /// Moves the row to the outcome's final status, and the money that goes with it.
    fn settle(
        conn: &mut DbConnection,
        row: &mut Self::Row,
        outcome: &Self::Outcome,
        at: Timestamp,
    ) -> diesel::QueryResult<()>;

    /// Writes the final row (its answer stored on it); guarded by the row still being
    /// unfinished (false: nothing written).
    fn finish(conn: &mut DbConnection, row: &Self::Row) -> diesel::QueryResult<bool>;

    /// The object as the API shows it.
    fn render(row: &Self::Row) -> serde_json::Result<String>;

    /// The event of the row's final state, with its merchant and id.
    fn event(row: &Self::Row) -> Option<(EventType, &str, &str)>;
}

/// Settles the unfinished row `id` of kind `S` with `outcome` (see the module docs).
pub fn settle<S: Settle>(
    conn: &mut DbConnection,
    id: &str,
    outcome: &S::Outcome,
    made_by: Option<&RequestRef>,
) -> diesel::QueryResult<Settled<S::Row>> {
    use diesel::Connection;
    conn.transaction(|conn| {
        let at = now();
        // Write first: it is the guard.
        let ours = S::lock_unfinished(conn, id, at)?;
        let Some(mut row) = S::find(conn, id)? else {
            return Ok(Settled::Unknown);
        };
        if !ours {
            return Ok(Settled::AlreadyFinal(row));
        }
        S::settle(conn, &mut row, outcome, at)?;
        row.close(at);
        let body =
            S::render(&row).map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
        row.store_answer(201, &body);
        if !S::finish(conn, &row)? {
            // Cannot happen while this transaction holds the unfinished row; never
            // half-apply.
            return Err(diesel::result::Error::RollbackTransaction);
        }
        if let Some((kind, merchant_id, object_id)) = S::event(&row) {
            events::record(
                conn,
                NewEvent {
                    merchant_id,
                    kind,
                    object_id,
                    object: &body,
                    request: made_by,
                },
            )?;
        }
        Ok(Settled::Applied(row))
    })
}
