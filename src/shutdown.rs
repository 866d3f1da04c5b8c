//! Stopping cleanly. On SIGTERM ([`StopSignals`]) the server stops accepting and lets
//! in-flight requests finish (bounded by `shutdown_timeout`); then [`Shutdown`] tells
//! background tasks to stop and waits a bounded time for them, so a worker never holds the
//! process open or is cut off half-way through a step.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::rt::task::JoinHandle;
use tokio::sync::watch;

/// The process's stop signals, listened to from the moment they are made, so that a stop
/// asked for while the service is still starting (waiting for its database, say) ends the
/// start, and one asked for later stops the server: SIGTERM gracefully (in-flight requests
/// finish), SIGINT and SIGQUIT at once. The server listens to nothing else (actix-server's own
/// listening is off), so no signal falls between the two.
pub struct StopSignals(Vec<(Stop, tokio::signal::unix::Signal)>);

/// How a stop signal asks the server to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: stop accepting, finish what is in flight.
    Graceful,
    /// SIGINT, SIGQUIT.
    AtOnce,
}

impl StopSignals {
    /// Starts listening; needs the runtime.
    pub fn listen() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self(vec![
            (Stop::Graceful, signal(SignalKind::terminate())?),
            (Stop::AtOnce, signal(SignalKind::interrupt())?),
            (Stop::AtOnce, signal(SignalKind::quit())?),
        ]))
    }

    /// Resolves at the first stop signal (since [`StopSignals::listen`]).
    pub async fn asked(&mut self) -> Stop {
        let received = self
            .0
            .iter_mut()
            .map(|(stop, signal)| Box::pin(async move { signal.recv().await.map(|_| *stop) }));
        match futures_util::future::select_all(received).await {
            (Some(stop), _, _) => stop,
            // A signal stream never ends while the runtime runs; wait for another one.
            (None, _, _) => std::future::pending().await,
        }
    }
}

/// How long stopped workers get to finish the step they are in.
pub const WORKER_GRACE: Duration = Duration::from_secs(10);

/// A running background task and its name (for the log).
type Worker = (&'static str, JoinHandle<()>);

/// The stop signal and the background tasks that listen to it. Cheap to clone.
#[derive(Clone)]
pub struct Shutdown {
    signal: Arc<watch::Sender<bool>>,
    workers: Arc<Mutex<Vec<Worker>>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self {
            signal: Arc::new(watch::Sender::new(false)),
            workers: Arc::default(),
        }
    }
}

impl Shutdown {
    /// Runs a background task (recovery worker, prune job, …) on the current runtime.
    /// `task` gets a clone of the signal and should return soon after
    /// [`Shutdown::requested`] resolves, typically by `select!`ing on it between steps:
    ///
    /// A task that runs a step at fixed intervals uses [`Shutdown::spawn_periodic`].
    pub fn spawn<F, Fut>(&self, name: &'static str, task: F)
    where
        F: FnOnce(Shutdown) -> Fut,
        Fut: Future<Output = ()> + 'static,
    {
        let handle = actix_web::rt::spawn(task(self.clone()));
        if let Ok(mut workers) = self.workers.lock() {
            workers.push((name, handle));
        }
    }

    /// Runs `pass` every `every`, the first time after `first`, until a stop is asked for:
    /// the one loop of every periodic background task (recovery, retention). A pass in
    /// progress is finished, never cut off half-way.
    pub fn spawn_periodic<F, Fut>(
        &self,
        name: &'static str,
        first: Duration,
        every: Duration,
        pass: F,
    ) where
        F: Fn() -> Fut + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        self.spawn(name, move |stop| async move {
            let mut wait = first;
            loop {
                tokio::select! {
                    _ = stop.requested() => break,
                    _ = actix_web::rt::time::sleep(wait) => {}
                }
                wait = every;
                pass().await;
            }
        });
    }

    /// Resolves once a stop was asked for (at once if it already was).
    pub async fn requested(&self) {
        let mut rx = self.signal.subscribe();
        // Err only if the sender is gone, which cannot happen while `self` holds it.
        let _ = rx.wait_for(|stopping| *stopping).await;
    }

    pub fn is_requested(&self) -> bool {
        *self.signal.borrow()
    }

    /// Asks every task to stop; does not wait.
    pub fn trigger(&self) {
        self.signal.send_replace(true);
    }

    /// Asks every task to stop and waits up to `grace` for them; a task still running then
    /// is aborted (and named in the log).
    pub async fn stop_workers(&self, grace: Duration) {
        self.trigger();
        let workers = match self.workers.lock() {
            Ok(mut workers) => std::mem::take(&mut *workers),
            Err(_) => return,
        };
        let deadline = tokio::time::Instant::now() + grace;
        for (name, handle) in workers {
            let abort = handle.abort_handle();
            match tokio::time::timeout_at(deadline, handle).await {
                Ok(_) => tracing::info!(worker = name, "background task stopped"),
                Err(_) => {
                    tracing::warn!(
                        worker = name,
                        "background task did not stop in time; aborted"
                    );
                    abort.abort();
                }
            }
        }
    }
}
