//! How long the ids of provider events are kept (a redelivery within that time is
//! recognised), and the task that prunes older ones.

use std::time::Duration;

use crate::db::webhook_events as events;
use crate::db::{Db, DbError};
use crate::domain::{Timestamp, now};
use crate::state::AppState;

/// Event ids are kept at least this long: a redelivery within it is recognised.
pub const RETENTION: chrono::TimeDelta = chrono::TimeDelta::days(30);
/// How often expired event ids are pruned, and how many rows one statement deletes.
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);
pub const PRUNE_BATCH: i64 = 1000;
/// The first prune runs shortly after start, so frequent restarts still prune.
const PRUNE_FIRST_DELAY: Duration = Duration::from_secs(60);

/// Deletes event ids older than [`RETENTION`], [`PRUNE_BATCH`] rows at a time, so no
/// single statement holds locks for long. Returns how many went.
pub async fn prune_expired_events(db: &Db, now: Timestamp) -> Result<usize, DbError> {
    let cutoff = now - RETENTION;
    let mut total = 0;
    loop {
        let deleted = db
            .run(move |conn| events::delete_received_before(conn, cutoff, PRUNE_BATCH))
            .await?;
        total += deleted;
        if deleted < usize::try_from(PRUNE_BATCH).unwrap_or(usize::MAX) {
            return Ok(total);
        }
    }
}

/// Prunes the recorded webhook ids past [`RETENTION`] shortly after start, then every
/// [`PRUNE_INTERVAL`].
pub fn spawn_retention_task(state: &AppState) {
    let db = state.db.clone();
    state.shutdown.spawn_periodic(
        "webhook-retention",
        PRUNE_FIRST_DELAY,
        PRUNE_INTERVAL,
        move || {
            let db = db.clone();
            async move {
                match prune_expired_events(&db, now()).await {
                    Ok(0) => {}
                    Ok(deleted) => tracing::info!(deleted, "expired webhook event ids pruned"),
                    Err(e) => {
                        tracing::warn!(error = %e, "pruning webhook event ids failed; will retry")
                    }
                }
            }
        },
    );
}
