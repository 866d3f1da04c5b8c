//! The connections an instance holds at once (`MAX_CONNECTIONS`).
//!
//! Each HTTP/1 connection costs memory for as long as it is open: actix-http's read and
//! write buffers (16 KiB, made when it is accepted), and while a request is in flight its
//! head (7 KiB) and the flow's futures (9 KiB). 10 000 clients held at once took 388 MiB.
//! So the server holds at most `MAX_CONNECTIONS` (spread over its workers); clients past
//! that wait in the kernel's accept queue, where they cost the process nothing. For them to
//! get their turn while every held connection is kept alive, an answer given while the
//! server holds its maximum closes its connection (`Connection: close`): that client
//! connects again, behind those waiting. Below the maximum, connections stay alive as
//! usual.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The count of open connections, shared by the server's workers. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Connections {
    open: Arc<AtomicUsize>,
    max: usize,
}

/// One open connection, counted until it drops (kept in the connection's extensions, which
/// drop with it).
#[derive(Debug)]
pub struct Held(Arc<AtomicUsize>);

impl Connections {
    pub fn new(max: usize) -> Self {
        Self {
            open: Arc::default(),
            max,
        }
    }

    /// Counts a connection as open until the returned value drops.
    pub fn opened(&self) -> Held {
        self.open.fetch_add(1, Ordering::Relaxed);
        Held(self.open.clone())
    }

    /// Whether the server holds its maximum: an answer now closes its connection, so that
    /// a client waiting to be accepted gets a turn.
    pub fn full(&self) -> bool {
        self.open.load(Ordering::Relaxed) >= self.max
    }

    /// The most each of `workers` may hold (actix-server's limit is per worker).
    pub fn per_worker(&self, workers: usize) -> usize {
        self.max.div_ceil(workers.max(1))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_once_the_maximum_is_held_and_no_longer_once_one_closes() {
        let connections = Connections::new(2);
        let first = connections.opened();
        assert!(!connections.full());
        let second = connections.opened();
        assert!(connections.full());
        drop(first);
        assert!(!connections.full());
        drop(second);
        assert_eq!(connections.per_worker(2), 1);
        assert_eq!(Connections::new(5).per_worker(2), 3);
    }
}
