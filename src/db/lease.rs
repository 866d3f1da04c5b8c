//! The lease protocol, written once for every table whose rows a request owns while they
//! are unfinished (payments while `processing`, refunds while `pending`).
//!
//! A lease names who works on a row (`lease_token`) and until when (`lease_expires_at`).
//! Every move is one guarded update, so of any number of requests, retries, instances and
//! recovery workers exactly one owns a row at a time.
//!
//! A guard on the status of a row found by its id, where a partial index is defined by that
//! status (`WHERE status = 'pending'`: the unfinished rows of each table, the payments that
//! wait for a capture), is written `still!``(status, value)`: `status || '' = value`, the
//! same test, but one PostgreSQL cannot answer through that index. Once a table has
//! statistics, the planner takes the index for nearly empty (few rows are in that status
//! when it is analyzed) and scans all of it for the one id, entries of rows that left the
//! status since the last vacuum included (docs/benchmark.md, eighteenth sitting); by
//! primary key the row is one lookup. Only the queries that look for rows in that status
//! (`find_abandoned`, the expiry of authorizations) read the index. The payments' finish in
//! `payments/prepared.rs` writes the same test in its SQL.

use super::pool::DbConnection;
use crate::domain::Timestamp;

/// A row that a request owns while it is unfinished, through a lease: what the one
/// idempotent-operation mechanism needs of every operation's table, whatever the table.
pub trait Leased: Sized {
    /// The row as it is now (`None`: gone).
    fn reload(&self, conn: &mut DbConnection) -> diesel::QueryResult<Option<Self>>;

    /// Takes over the unfinished row if its lease is free (guarded update; true if won:
    /// of many callers at once exactly one wins).
    fn take_over(
        &self,
        conn: &mut DbConnection,
        token: &str,
        now: Timestamp,
        lease: chrono::Duration,
    ) -> diesel::QueryResult<bool>;

    /// Gives up the lease `token` holds (outcome unknown, or pending at the provider),
    /// keeping the provider's reference if one is given, so that a retry can take the row
    /// over at once. Leaves `self` as released; true if the lease was still ours.
    fn release(
        &mut self,
        conn: &mut DbConnection,
        token: &str,
        provider_ref: Option<&str>,
        now: Timestamp,
    ) -> diesel::QueryResult<bool>;
}

/// A [`Leased`] row that the recovery worker finishes when its request is gone.
pub trait Recoverable: Leased {
    /// Unfinished rows nobody owns, untouched since `untouched_since`: their request died,
    /// or answered 202 and was never retried. Oldest first.
    fn find_abandoned(
        conn: &mut DbConnection,
        now: Timestamp,
        untouched_since: Timestamp,
        limit: i64,
    ) -> diesel::QueryResult<Vec<Self>>;
}

/// Defines, in the calling module, `find_by_id`, `lock_unfinished`, `take_over`, `release`
/// and `find_abandoned`, and implements [`Leased`] for `$row`, for the
/// table `$table` (its schema module in scope), whose rows load as `$row`, are unfinished
/// while `status = $unfinished`, and name the provider's object in `$provider_id`.
macro_rules! lease_protocol {
    ($table:ident, $row:ty, $unfinished:expr, $provider_id:ident) => {
        /// Takes over an unfinished row whose lease is free. Returns whether this caller
        /// won; of many callers at once exactly one does.
        fn take_over(
            conn: &mut $crate::db::pool::DbConnection,
            id: &str,
            token: &str,
            now: $crate::domain::Timestamp,
            lease: chrono::Duration,
        ) -> diesel::QueryResult<bool> {
            diesel::update(
                $table::table
                    .filter($table::id.eq(id))
                    .filter($crate::db::lease::still!($table::status, $unfinished))
                    .filter(
                        $table::lease_expires_at
                            .is_null()
                            .or($table::lease_expires_at.le(now)),
                    ),
            )
            .set((
                $table::lease_token.eq(token),
                $table::lease_expires_at.eq(now + lease),
                $table::provider_attempts.eq($table::provider_attempts + 1),
            ))
            .execute(conn)
            .map(|n| n == 1)
        }

        /// Gives up the lease of an unfinished row (outcome unknown, or pending at the
        /// provider), so a retry can take it over at once. Only the owner can give it up.
        fn release(
            conn: &mut $crate::db::pool::DbConnection,
            id: &str,
            token: &str,
            provider_id: Option<&str>,
            now: $crate::domain::Timestamp,
        ) -> diesel::QueryResult<bool> {
            diesel::update(
                $table::table
                    .filter($table::id.eq(id))
                    .filter($crate::db::lease::still!($table::status, $unfinished))
                    .filter($table::lease_token.eq(token)),
            )
            .set((
                $table::$provider_id.eq(provider_id),
                $table::lease_token.eq(None::<String>),
                $table::lease_expires_at.eq(None::<$crate::domain::Timestamp>),
                $table::updated_at.eq(now),
            ))
            .execute(conn)
            .map(|n| n == 1)
        }

        /// A row by id alone, whatever its merchant (workers, webhooks, the mechanism).
        pub fn find_by_id(
            conn: &mut $crate::db::pool::DbConnection,
            id: &str,
        ) -> diesel::QueryResult<Option<$row>> {
            $table::table
                .filter($table::id.eq(id))
                .select(<$row>::as_select())
                .first(conn)
                .optional()
        }

        /// Marks the `unfinished → final` move as ours: the first write of the transaction
        /// that applies an outcome (on SQLite a transaction must write before it reads), and
        /// the guard that lets exactly one of several concurrent finishers through.
        pub fn lock_unfinished(
            conn: &mut $crate::db::pool::DbConnection,
            id: &str,
            now: $crate::domain::Timestamp,
        ) -> diesel::QueryResult<bool> {
            diesel::update(
                $table::table
                    .filter($table::id.eq(id))
                    .filter($crate::db::lease::still!($table::status, $unfinished)),
            )
            .set($table::updated_at.eq(now))
            .execute(conn)
            .map(|n| n == 1)
        }

        /// Unfinished rows nobody owns and nobody has touched since `untouched_since`:
        /// their request died, or answered 202 and was never retried. Oldest first.
        fn find_abandoned(
            conn: &mut $crate::db::pool::DbConnection,
            now: $crate::domain::Timestamp,
            untouched_since: $crate::domain::Timestamp,
            limit: i64,
        ) -> diesel::QueryResult<Vec<$row>> {
            $table::table
                .filter($table::status.eq($unfinished))
                .filter($table::updated_at.le(untouched_since))
                .filter(
                    $table::lease_expires_at
                        .is_null()
                        .or($table::lease_expires_at.le(now)),
                )
                .order($table::updated_at.asc())
                .limit(limit)
                .select(<$row>::as_select())
                .load(conn)
        }

        impl $crate::db::lease::Leased for $row {
            fn reload(
                &self,
                conn: &mut $crate::db::pool::DbConnection,
            ) -> diesel::QueryResult<Option<Self>> {
                find_by_id(conn, &self.id)
            }

            fn take_over(
                &self,
                conn: &mut $crate::db::pool::DbConnection,
                token: &str,
                now: $crate::domain::Timestamp,
                lease: chrono::Duration,
            ) -> diesel::QueryResult<bool> {
                take_over(conn, &self.id, token, now, lease)
            }

            fn release(
                &mut self,
                conn: &mut $crate::db::pool::DbConnection,
                token: &str,
                provider_ref: Option<&str>,
                now: $crate::domain::Timestamp,
            ) -> diesel::QueryResult<bool> {
                if let Some(provider_ref) = provider_ref {
                    self.$provider_id = Some(provider_ref.to_owned());
                }
                self.lease_token = None;
                self.lease_expires_at = None;
                self.updated_at = now;
                release(conn, &self.id, token, self.$provider_id.as_deref(), now)
            }
        }

        impl $crate::db::lease::Recoverable for $row {
            fn find_abandoned(
                conn: &mut $crate::db::pool::DbConnection,
                now: $crate::domain::Timestamp,
                untouched_since: $crate::domain::Timestamp,
                limit: i64,
            ) -> diesel::QueryResult<Vec<Self>> {
                find_abandoned(conn, now, untouched_since, limit)
            }
        }
    };
}

pub(crate) use lease_protocol;

/// `$column = $value` as the guard of an update of one row found by its id, written so that
/// PostgreSQL never answers it through a partial index defined by `$column` (see the module
/// documentation): `$column || '' = $value`.
macro_rules! still {
    ($column:expr, $value:expr) => {
        diesel::ExpressionMethods::eq(diesel::TextExpressionMethods::concat($column, ""), $value)
    };
}

pub(crate) use still;
