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
//!
//! "Holds its maximum" has two thresholds. A connection closed at the maximum leaves a
//! free place until the server's accept loop has taken the next client in, and with one
//! threshold every answer given in that moment kept its connection: at 10 000 clients and
//! 8 000 answers a second, one answer in eighty closed, the 3 072 held clients were served
//! over and over, and the 6 928 waiting were not served at all until the load ended. So
//! answers close from the moment the server holds its maximum until it holds fewer than
//! seven eighths of it (`Connections::low_water`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The count of open connections, shared by the server's workers. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Connections {
    shared: Arc<Shared>,
    max: usize,
}

#[derive(Debug, Default)]
struct Shared {
    open: AtomicUsize,
    /// Whether answers close their connections now (between the two thresholds it is what
    /// it was).
    closing: AtomicBool,
}

/// One open connection, counted until it drops (kept in the connection's extensions, which
/// drop with it).
#[derive(Debug)]
pub struct Held(Arc<Shared>);

impl Connections {
    pub fn new(max: usize) -> Self {
        Self {
            shared: Arc::default(),
            max,
        }
    }

    /// Counts a connection as open until the returned value drops.
    pub fn opened(&self) -> Held {
        self.shared.open.fetch_add(1, Ordering::Relaxed);
        Held(self.shared.clone())
    }

    /// Whether an answer given now closes its connection, so that a client waiting to be
    /// accepted gets a turn: from the moment the server holds its maximum until it holds
    /// fewer than `low_water` (the module's note says why not at the maximum alone).
    pub fn closing(&self) -> bool {
        let open = self.shared.open.load(Ordering::Relaxed);
        let closing = self.shared.closing.load(Ordering::Relaxed);
        let now = if open >= self.max {
            true
        } else if open < self.low_water() {
            false
        } else {
            closing
        };
        if now != closing {
            self.shared.closing.store(now, Ordering::Relaxed);
        }
        now
    }

    /// Below this many open connections answers keep their connections again: seven eighths
    /// of the maximum.
    fn low_water(&self) -> usize {
        self.max - self.max / 8
    }

    /// The most each of `workers` may hold (actix-server's limit is per worker).
    pub fn per_worker(&self, workers: usize) -> usize {
        self.max.div_ceil(workers.max(1))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_close_from_the_maximum_until_fewer_than_seven_eighths_are_held() {
        let connections = Connections::new(16);
        let mut held: Vec<Held> = (0..15).map(|_| connections.opened()).collect();
        assert!(!connections.closing(), "below the maximum, on the way up");
        held.push(connections.opened());
        assert!(connections.closing(), "at the maximum");
        // One closed: until the accept loop takes the next client in, answers still close.
        held.pop();
        assert!(
            connections.closing(),
            "just below the maximum, on the way down"
        );
        held.truncate(14);
        assert!(connections.closing(), "at seven eighths");
        held.pop();
        assert!(!connections.closing(), "below seven eighths");
        held.push(connections.opened());
        assert!(
            !connections.closing(),
            "below the maximum, on the way up again"
        );
    }

    #[test]
    fn a_maximum_of_one_closes_every_answer() {
        let connections = Connections::new(1);
        let one = connections.opened();
        assert!(connections.closing());
        drop(one);
        assert!(!connections.closing());
    }

    #[test]
    fn each_worker_holds_its_share_rounded_up() {
        assert_eq!(Connections::new(2).per_worker(2), 1);
        assert_eq!(Connections::new(5).per_worker(2), 3);
    }
}
