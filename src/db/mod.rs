//! One database layer for PostgreSQL and SQLite: a diesel `MultiConnection` behind an r2d2
//! pool, the backend chosen from the `DATABASE_URL` scheme. The pool is in [`pool`], the
//! migrations in [`migrate`], the errors in [`error`]; [`Db`] runs queries off the HTTP
//! workers.

mod array;
pub mod captures;
pub mod clock;
pub mod conninfo;
pub mod dashboard_sessions;
pub mod deliveries;
pub mod dispute_steps;
pub mod disputes;
pub mod error;
pub mod events;
pub mod group_commit;
pub mod idempotency_keys;
mod insert;
pub mod lease;
pub mod ledger;
pub mod merchants;
pub mod migrate;
pub mod payments;
pub mod payouts;
pub mod pool;
pub mod reconciliation;
pub mod refunds;
pub mod schema;
pub mod statistics;
pub mod webhook_endpoints;
pub mod webhook_events;

pub use error::DbError;
pub(crate) use insert::insert_rows;
pub use pool::DbConnection;

use std::time::Duration;

use diesel::result::Error as DieselError;

use pool::{DatabaseTarget, Pool, connection_lost};

/// Runs `read` in one read-only transaction that sees one snapshot of the database: several
/// statements (a balance's sums, a page beside them, the ledger's checks) agree with each
/// other however many writes commit meanwhile. REPEATABLE READ on PostgreSQL, where each
/// statement of a READ COMMITTED transaction would take its own snapshot; SQLite's read
/// transaction is a snapshot already (WAL). Not for use inside another transaction.
pub fn read_snapshot<T>(
    conn: &mut DbConnection,
    read: impl FnOnce(&mut DbConnection) -> diesel::QueryResult<T>,
) -> diesel::QueryResult<T> {
    use diesel::Connection;
    use diesel::connection::SimpleConnection;
    conn.transaction(|conn| {
        if matches!(conn, DbConnection::Postgres(_)) {
            conn.batch_execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")?;
        }
        read(conn)
    })
}

/// Serialises, until the end of the caller's transaction and on every instance, the
/// transactions that take the lock named `name`. PostgreSQL: a transaction-scoped advisory
/// lock on the name's hash (it holds behind a pooler in transaction mode too; two names that
/// share a hash only wait for each other). SQLite: nothing, for the caller's transaction
/// holds the database's one write lock already (it has written before it reads what the
/// lock guards).
pub fn lock_until_commit(conn: &mut DbConnection, name: &str) -> diesel::QueryResult<()> {
    use diesel::RunQueryDsl;
    if let DbConnection::Postgres(pg) = conn {
        diesel::sql_query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
            .bind::<diesel::sql_types::Text, _>(name)
            .execute(pg)?;
    }
    Ok(())
}

/// Lists are read newest first, `limit + 1` rows: the one past the page says whether more
/// follow. Returns the page and `has_more`.
pub fn page<T>(mut rows: Vec<T>, limit: i64) -> (Vec<T>, bool) {
    let limit = usize::try_from(limit).unwrap_or(0);
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    (rows, has_more)
}

/// A text value the query planner is not shown: `(SELECT $1)` instead of `$1`.
///
/// For the idempotency-key lookups' merchant. PostgreSQL plans a statement's first five runs
/// with its parameters' values, and a merchant its statistics have not seen yet (new since
/// the last ANALYZE, or too small then to be counted) looks like a handful of rows: a scan of
/// that merchant's rows by `(merchant_id, id)`, filtered by key, then costs the same as the
/// unique `(merchant_id, idempotency_key)` index, and it was chosen — 0.6 s per replay once
/// the merchant had 190 000 payments. Behind a subquery the value is unknown when planning,
/// so the estimate is an average merchant's and the unique index wins whatever the
/// statistics say; the index is still used with the value (docs/benchmark-history.md,
/// sixth sitting).
pub(crate) fn unplanned(
    value: &str,
) -> diesel::expression::SqlLiteral<
    diesel::sql_types::Text,
    diesel::expression::UncheckedBind<
        diesel::expression::SqlLiteral<diesel::sql_types::Text>,
        diesel::dsl::AsExprOf<&str, diesel::sql_types::Text>,
    >,
> {
    diesel::dsl::sql::<diesel::sql_types::Text>("(SELECT ")
        .bind::<diesel::sql_types::Text, _>(value)
        .sql(")")
}

/// The pool, and the one way to use it from async code: on the blocking thread pool, so a
/// slow query never stalls an HTTP worker.
#[derive(Clone)]
pub struct Db {
    pool: Pool,
    /// One permit per pooled connection: a call waits for one here, as a small future,
    /// before it takes a blocking thread. Without it every waiting call held a blocking
    /// thread of its own, parked on the pool (up to 512 per worker): with 10 000 requests in
    /// flight, hundreds of threads, each with its stack and its share of the allocator's
    /// arenas, were most of the service's memory (docs/benchmark.md). Fair: first come, first
    /// served, where the pool's own wait wakes an arbitrary thread.
    permits: std::sync::Arc<tokio::sync::Semaphore>,
    /// How long a caller waits for [`Db::run`]: none on SQLite (a local file, whose waits
    /// are bounded by its busy timeout), [`SERVER_DEADLINE`] on PostgreSQL.
    deadline: Option<Duration>,
    postgres: bool,
}

/// How long a caller waits for a PostgreSQL server (a pooled connection, then its
/// statements) before answering 503 (docs/api.md: within 5 s, never a hang). The network
/// settings of `pool::PG_NETWORK_DEFAULTS` end a connection whose packets go unanswered, but not
/// one to a server (or a pooler) that accepts them and never answers; that connection's
/// thread waits on, the request does not. What it was writing may still commit: the caller
/// has answered 503, as for a connection lost after COMMIT, and a retry finds the row.
pub const SERVER_DEADLINE: Duration = Duration::from_secs(4);

impl Db {
    /// The database of `target`: PostgreSQL calls give up after [`SERVER_DEADLINE`].
    pub fn new(pool: Pool, target: &DatabaseTarget) -> Self {
        let postgres = matches!(target, DatabaseTarget::Postgres(_));
        let deadline = postgres.then_some(SERVER_DEADLINE);
        let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(pool.max_size() as usize));
        Self {
            pool,
            permits,
            deadline,
            postgres,
        }
    }

    /// PostgreSQL (a server, shared by instances), or SQLite (a local file).
    pub fn is_postgres(&self) -> bool {
        self.postgres
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub async fn run<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut DbConnection) -> Result<T, DieselError> + Send + 'static,
        T: Send + 'static,
    {
        let pool = self.pool.clone();
        let permits = self.permits.clone();
        let task = async move {
            // The semaphore is never closed; were it, the database would be unavailable.
            let Ok(permit) = permits.acquire_owned().await else {
                return Ok(Err(DbError::Unavailable("no database permits".to_owned())));
            };
            actix_web::rt::task::spawn_blocking(move || {
                // Held until the work is done, even by a caller that gave up.
                let _permit = permit;
                let mut conn = pool
                    .get()
                    .map_err(|e| DbError::Unavailable(e.to_string()))?;
                let result = f(&mut conn);
                if let Err(e) = &result
                    && connection_lost(e)
                {
                    conn.lose();
                }
                result.map_err(DbError::from)
            })
            .await
        };
        // Given up, the task runs on, on its thread, with its connection.
        self.within_deadline(task).await
    }

    /// Waits for `answer` from the database for at most the deadline, if there is one: past
    /// it, the database counts as unavailable (503). What was sent may still apply, as after
    /// a connection lost after COMMIT.
    pub async fn within_deadline<T, E>(
        &self,
        answer: impl Future<Output = Result<Result<T, DbError>, E>>,
    ) -> Result<T, DbError> {
        let answered = match self.deadline {
            None => answer.await,
            Some(deadline) => actix_web::rt::time::timeout(deadline, answer)
                .await
                .map_err(|_| {
                    DbError::Unavailable(format!("no answer within {} ms", deadline.as_millis()))
                })?,
        };
        answered.map_err(|_| DbError::TaskFailed)?
    }
}

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::{Connection, PgConnection, QueryResult, RunQueryDsl};

    use super::*;
    use crate::db::migrate::tests::{Schema, test_postgres};
    use crate::db::pool::build_pool;

    fn backend_pid(conn: &mut DbConnection) -> QueryResult<i32> {
        let DbConnection::Postgres(pg) = conn else {
            panic!("not PostgreSQL")
        };
        diesel::select(diesel::dsl::sql::<diesel::sql_types::Integer>(
            "pg_backend_pid()",
        ))
        .get_result(pg)
    }

    fn postgres_pool(url: &str, size: u32, prepared_statements: bool) -> Pool {
        build_pool(
            DatabaseTarget::parse(url).unwrap(),
            size,
            prepared_statements,
        )
        .unwrap()
    }

    fn postgres_db(url: &str, size: u32) -> Db {
        Db::new(
            postgres_pool(url, size, true),
            &DatabaseTarget::parse(url).unwrap(),
        )
    }

    /// What a primary that died does to a pool: every connection it holds leads nowhere.
    /// The first request to find out answers 503; none after it may meet another of them.
    #[actix_web::test]
    async fn one_lost_connection_drops_every_connection_opened_before_it() {
        let Some(url) = test_postgres() else { return };
        let db = postgres_db(&url, 4);
        let pids: Vec<i32> = {
            let mut held: Vec<_> = (0..4).map(|_| db.pool().get().unwrap()).collect();
            held.iter_mut().map(|c| backend_pid(c).unwrap()).collect()
        };
        assert_eq!(db.pool().state().idle_connections, 4);

        let mut admin = PgConnection::establish(&url).unwrap();
        let list = pids
            .iter()
            .map(i32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        admin
            .batch_execute(&format!(
                "SELECT pg_terminate_backend(pid) FROM unnest(ARRAY[{list}]) AS pid"
            ))
            .unwrap();
        let gone = diesel::dsl::sql::<diesel::sql_types::BigInt>(&format!(
            "(SELECT count(*) FROM pg_stat_activity WHERE pid IN ({list}))"
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while diesel::select(gone.clone())
            .get_result::<i64>(&mut admin)
            .unwrap()
            > 0
        {
            assert!(std::time::Instant::now() < deadline, "backends still alive");
            std::thread::sleep(Duration::from_millis(20));
        }

        let first = db.run(|c| c.batch_execute("SELECT 1")).await;
        assert!(
            matches!(first, Err(DbError::Unavailable(_))),
            "the first query meets a dead connection: {first:?}"
        );
        for i in 0..8 {
            let pid = db.run(backend_pid).await;
            let pid = pid.unwrap_or_else(|e| panic!("query {i} after the loss failed: {e}"));
            assert!(!pids.contains(&pid), "query {i} ran on an old connection");
        }
    }

    /// A server that turned standby under an open connection refuses writes as read-only:
    /// the primary is elsewhere, so that is a 503 and a new connection, not a 500.
    #[actix_web::test]
    async fn a_read_only_refusal_is_unavailable_and_drops_the_connection() {
        let Some(base_url) = test_postgres() else {
            return;
        };
        let (_schema, url) = Schema::create(&base_url);
        let db = postgres_db(&url, 1);
        let before = db.run(backend_pid).await.unwrap();
        db.run(|c| c.batch_execute("SET default_transaction_read_only = on"))
            .await
            .unwrap();
        let refused = db
            .run(|c| c.batch_execute("CREATE TABLE read_only_probe (i int)"))
            .await;
        assert!(
            matches!(refused, Err(DbError::Unavailable(_))),
            "{refused:?}"
        );
        let after = db.run(backend_pid).await.unwrap();
        assert_ne!(before, after, "the read-only connection was used again");
    }
}
