//! The idle ladder as one word: [`Rung`], where a connection is between
//! its accept and its close (ACTIVE → PARKED → DORMANT, and back up when
//! bytes come), and [`PerRung`], one value for each rung.
//!
//! The driver moves a connection between rungs, the server's gauges count
//! connections by rung (`Stats::connections`), and the state hook sees
//! each step (`ConnState::On`): one enum, so that a rung is named the same
//! way wherever it is counted or reported. The parking lot holds
//! connections on two of them, PARKED and DORMANT, and says which.
//!
//! It imports nothing: it is a word, not a mechanism, and every module may
//! speak it, the lot included.

use std::fmt;
use std::ops::Index;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// A rung of the idle ladder: what a connection holds while it is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rung {
    /// hyper serves the connection (its buffers, its state, a task).
    Active,
    /// It waits for bytes without hyper: in its task, or task-less in the
    /// parking lot with its readiness cell.
    Parked,
    /// It waits task-less, its readiness cell freed: its slot in the lot
    /// (the fd and a deadline; a TLS session, a sleeping HTTP/2
    /// connection's few facts) and the kernel's socket.
    Dormant,
}

impl Rung {
    /// Every rung, down the ladder.
    pub const ALL: [Rung; 3] = [Rung::Active, Rung::Parked, Rung::Dormant];
}

/// One `T` for each [`Rung`], indexed by it:
/// `stats.connections[Rung::Parked]`.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct PerRung<T>([T; 3]);

impl<T> Index<Rung> for PerRung<T> {
    type Output = T;

    fn index(&self, rung: Rung) -> &T {
        &self.0[rung as usize]
    }
}

impl PerRung<usize> {
    /// Returns the sum over every rung: for the gauges, the connections
    /// on the ladder.
    pub fn total(&self) -> usize {
        self.0.iter().sum()
    }
}

impl<T: fmt::Debug> fmt::Debug for PerRung<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(Rung::ALL.iter().map(|&rung| (rung, &self[rung])))
            .finish()
    }
}

/// Gauges: how many connections are on each rung, moved with relaxed
/// atomics (each is read on its own, see `Stats`).
impl PerRung<AtomicUsize> {
    /// `n` connections came onto `rung`.
    pub(crate) fn add(&self, rung: Rung, n: usize) {
        self[rung].fetch_add(n, Relaxed);
    }

    /// `n` connections left `rung`.
    pub(crate) fn sub(&self, rung: Rung, n: usize) {
        self[rung].fetch_sub(n, Relaxed);
    }

    /// What the gauges read now.
    pub(crate) fn read(&self) -> PerRung<usize> {
        PerRung(Rung::ALL.map(|rung| self[rung].load(Relaxed)))
    }
}
