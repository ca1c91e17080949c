//! What the lot's lock guards ([`Synced`]): a slot per registered
//! connection, by what it is doing ([`Slot`]), and the deadline queues the
//! driver acts on. The slot kinds are sized for the memory rows they serve
//! (BENCHMARKS.md, "Idle memory"): a plain task-less connection's slot is
//! its fd and a deadline; what a carrying connection or a sleeper keeps
//! beyond that is boxed, so that the slot stays small for the many that
//! keep nothing.

use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use tokio::time::Instant;

use super::contract::{Carry, Rung};
use super::queue::{self, Fifo, Millis};
use super::ready::Cell;
use super::slab::Slab;

/// A slab at most this long is kept when it empties.
const SLOTS_KEEP: usize = 64;

/// Readiness cells made at a time (see [`Synced::new_cell`]).
const CELL_RUN: usize = 64;

/// A sleeper in its slot: its callback, and its deadline if it has one
/// (boxed with the callback, so that a plain socket's slot stays small).
pub(super) struct SleeperSlot<W> {
    pub(super) callback: W,
    pub(super) deadline: Option<Millis>,
}

/// A registered connection, by what it is doing.
pub(super) enum Slot<D, W, C> {
    /// A task serves it: events set its cell.
    Served(Arc<Cell>),
    /// Task-less; woken by bytes, moved to DORMANT or closed at the `due`
    /// time its cell keeps ([`Cell::park`]).
    Parked { conn: D, cell: Arc<Cell> },
    /// Task-less, without a cell.
    Dormant {
        conn: D,
        /// The idle deadline; meaningless without an idle timeout.
        deadline: Millis,
    },
    /// An upgraded stream asleep, registered for reading only. The
    /// callback is boxed again (with the deadline) so that a plain
    /// socket's slot stays as small as its `Dormant` form: an fd and a
    /// deadline.
    Sleeping {
        conn: D,
        asleep: Box<SleeperSlot<W>>,
    },
    /// PARKED, carrying what its protocol keeps; boxed with its cell, so
    /// that a plain connection's slot stays small.
    ParkedCarrying {
        conn: D,
        with: Box<Carried<C, Arc<Cell>>>,
    },
    /// DORMANT, carrying what its protocol keeps; boxed with its idle
    /// deadline (see `Slot::Dormant`). The box is made anew when the
    /// connection goes DORMANT, without the cell: a carrying connection
    /// spends most of its wait here, so this box is the one kept small.
    DormantCarrying {
        conn: D,
        with: Box<Carried<C, Millis>>,
    },
}

/// What a carrying connection keeps on its rung `R`: its readiness cell
/// while PARKED, its idle deadline while DORMANT.
pub(super) struct Carried<C, R> {
    pub(super) rung: R,
    pub(super) ping: Ping,
    pub(super) value: C,
}

impl<D, W, C> Slot<D, W, C> {
    /// A task-less connection's rung.
    pub(super) fn rung(&self) -> Option<Rung> {
        match self {
            Slot::Parked { .. } | Slot::ParkedCarrying { .. } => Some(Rung::Parked),
            Slot::Dormant { .. } | Slot::DormantCarrying { .. } => Some(Rung::Dormant),
            Slot::Served(_) | Slot::Sleeping { .. } => None,
        }
    }

    /// Whether this is a carrying connection whose ping is `ping`.
    pub(super) fn pings(&self, ping: Ping) -> bool {
        match self {
            Slot::ParkedCarrying { with, .. } => with.ping == ping,
            Slot::DormantCarrying { with, .. } => with.ping == ping,
            _ => false,
        }
    }

    /// A carrying connection's fd, rung, ping and what it carries.
    pub(super) fn carrying(&mut self) -> Option<(&mut D, Rung, &mut Ping, &mut C)> {
        match self {
            Slot::ParkedCarrying { conn, with } => {
                Some((conn, Rung::Parked, &mut with.ping, &mut with.value))
            }
            Slot::DormantCarrying { conn, with } => {
                Some((conn, Rung::Dormant, &mut with.ping, &mut with.value))
            }
            _ => None,
        }
    }
}

impl<D, W, C: Carry> Slot<D, W, C> {
    /// A task-less connection's fd and rung, with what its protocol says
    /// before it is closed (nothing for one that carries nothing).
    pub(super) fn into_goodbye(self) -> Option<(D, Rung, Vec<u8>)> {
        match self {
            Slot::Parked { conn, .. } => Some((conn, Rung::Parked, Vec::new())),
            Slot::Dormant { conn, .. } => Some((conn, Rung::Dormant, Vec::new())),
            Slot::ParkedCarrying { conn, with } => Some((conn, Rung::Parked, with.value.goodbye())),
            Slot::DormantCarrying { conn, with } => {
                Some((conn, Rung::Dormant, with.value.goodbye()))
            }
            Slot::Served(_) | Slot::Sleeping { .. } => None,
        }
    }

    /// When a carrying connection ends, if what it carries has an end.
    pub(super) fn ends_at(&self) -> Option<Instant> {
        match self {
            Slot::ParkedCarrying { with, .. } => with.value.ends_at(),
            Slot::DormantCarrying { with, .. } => with.value.ends_at(),
            _ => None,
        }
    }
}

/// A carrying connection's keep-alive ping, in 4 bytes: `0` when none is
/// asked for; otherwise the time it is due (queued in `ping_deadlines`),
/// which is even, or the time by which it must be answered (queued in
/// `answer_deadlines`), which is odd. Each is rounded up to its parity
/// before it is queued, and a queue moves a deadline only to that of its
/// back entry, of the same parity: an entry of either queue matches the
/// state it was queued for, and no other. (An enum of the three took 8
/// bytes, and this one is in every DORMANT carrying connection's box.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ping(pub(super) Millis);

impl Ping {
    pub(super) const OFF: Ping = Ping(0);

    /// Due at `at`, or up to 3 ms later (the next even millisecond but 0).
    pub(super) fn due(at: Millis) -> Ping {
        match at.wrapping_add(1) & !1 {
            0 => Ping(2),
            at => Ping(at),
        }
    }

    /// Sent, to be answered by `by`, or 1 ms later.
    pub(super) fn sent(by: Millis) -> Ping {
        Ping(by | 1)
    }

    pub(super) fn at(self) -> Millis {
        self.0
    }
}

/// What the lot's lock guards: the slab of slots and the deadline queues.
pub(super) struct Synced<D, W, C> {
    pub(super) slots: Slab<Slot<D, W, C>>,
    /// When the next sweep for ends is due, while a task-less connection
    /// has one.
    pub(super) next_sweep: Option<Millis>,
    pub(super) parked_deadlines: Fifo,
    pub(super) dormant_deadlines: Fifo,
    /// (due, key) of carrying connections' pings, and (due, key) of their
    /// answers: in FIFO order too, as every connection has the same
    /// keep-alive interval and timeout.
    pub(super) ping_deadlines: Fifo,
    pub(super) answer_deadlines: Fifo,
    /// (deadline, key) of sleepers, a queue per delay (what
    /// [`ParkingLot::sleep`] and [`Callback::due`] were given: a few, one per
    /// keep-alive setting), each in FIFO order.
    pub(super) sleeper_deadlines: Vec<(Millis, Fifo)>,
    pub(super) sleeping: usize,
    pub(super) closed: bool,
    /// The waker of the task that drives the lot, told when a deadline
    /// queue goes from empty to non-empty (`Core::new_front`).
    pub(super) driver: Option<Waker>,
    /// Cells made ahead of need (see [`Synced::new_cell`]).
    pub(super) spare_cells: Vec<Arc<Cell>>,
}

impl<D, W, C> Synced<D, W, C> {
    /// A readiness cell for a connection being registered or woken.
    ///
    /// Made [`CELL_RUN`] at a time. A cell lives as long as its connection
    /// (or its PARKED spell), and a connection spends its first moments
    /// ACTIVE among short-lived blocks: hyper's two 8 KiB buffers, the
    /// phase's future, its task. Made one at a time, cells land among those
    /// blocks, and each keeps its page resident once they are freed; made
    /// in runs, they fill pages of their own, which lowers the resident
    /// memory of many PARKED connections (BENCHMARKS.md, "Idle memory").
    /// At most one run's worth of cells waits unused.
    pub(super) fn new_cell(&mut self) -> Arc<Cell> {
        if self.spare_cells.is_empty() {
            let run = (0..CELL_RUN).map(|_| Arc::new(Cell::default()));
            self.spare_cells.extend(run);
        }
        self.spare_cells.pop().unwrap_or_default()
    }

    /// Frees the slot at `key`. When the last connection leaves a large
    /// slab, the slab and its queues are freed: otherwise a burst would
    /// leave its high-water mark behind. Entries left in the queues would
    /// name vacant keys.
    pub(super) fn remove(&mut self, key: u32) -> Option<Slot<D, W, C>> {
        let slot = self.slots.remove(key)?;
        self.shrink_if_empty();
        Some(slot)
    }

    /// Frees a large slab once its last connection left (see `remove`).
    /// Not between a `Slab::remove` and its `Slab::put_back`: that would
    /// lose the entry put back.
    pub(super) fn shrink_if_empty(&mut self) {
        if self.slots.shrink_if_empty(SLOTS_KEEP) {
            self.clear_deadlines();
        }
    }

    pub(super) fn clear_deadlines(&mut self) {
        self.parked_deadlines.clear();
        self.dormant_deadlines.clear();
        self.ping_deadlines.clear();
        self.answer_deadlines.clear();
        self.sleeper_deadlines = Vec::new();
    }

    /// Queues a sleeper's deadline `after` from `now`: the deadline as
    /// queued, and whether its queue was empty (its front is new).
    pub(super) fn push_sleeper_deadline(
        &mut self,
        now: Millis,
        after: Duration,
        key: u32,
    ) -> (Millis, bool) {
        let after = queue::millis(after);
        let queues = &mut self.sleeper_deadlines;
        let i = match queues.iter().position(|(delay, _)| *delay == after) {
            Some(i) => i,
            None => {
                queues.push((after, Fifo::default()));
                queues.len() - 1
            }
        };
        let queue = &mut queues[i].1;
        let first = queue.len() == 0;
        (queue.push(now.wrapping_add(after), key), first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_socket_takes_16_bytes_of_slab() {
        // Every registered connection has a slot, whatever its rung: a
        // DORMANT one keeps nothing else.
        type Entry = Option<Slot<std::net::TcpStream, Box<dyn FnOnce() + Send>, [u64; 8]>>;
        assert_eq!(std::mem::size_of::<Entry>(), 16);
    }

    #[test]
    fn a_dormant_http2_connection_boxes_32_bytes() {
        // What a sleeping HTTP/2 connection carries (`kept::Stowed`: 24
        // bytes, 8-aligned, as this stand-in), boxed with its rung and
        // ping: most of its cost once DORMANT, beside its slot.
        type Stowed = [u64; 3];
        assert_eq!(std::mem::size_of::<Carried<Stowed, Millis>>(), 32);
        assert_eq!(std::mem::size_of::<Carried<Stowed, Arc<Cell>>>(), 40);
    }

    #[test]
    fn pings_due_and_sent_never_match_each_other_or_off() {
        for at in [0, 1, 2, 3, 1_000, 1_001, u32::MAX - 1, u32::MAX] {
            let (due, sent) = (Ping::due(at), Ping::sent(at));
            assert_eq!(due.at() % 2, 0, "{at}");
            assert_eq!(sent.at() % 2, 1, "{at}");
            assert_ne!(due, Ping::OFF, "{at}");
            assert!(due.at().wrapping_sub(at) <= 3 && sent.at().wrapping_sub(at) <= 1);
        }
        // A queue moves a deadline to its back entry's, of the same parity.
        let mut queue = Fifo::default();
        let back = queue.push(Ping::due(10).at(), 1);
        let moved = queue.push(Ping::due(5).at(), 2);
        assert_eq!((back, moved), (10, 10));
    }
}
