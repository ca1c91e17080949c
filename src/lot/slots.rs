//! What the lot's lock guards ([`Synced`]): a slot per registered
//! connection, by what it is doing ([`Slot`]), and the deadlines the
//! driver acts on. The slot kinds are sized for the memory rows they serve
//! (BENCHMARKS.md, "Idle memory"): a plain task-less connection's slot is
//! its fd and a deadline; what a carrying connection or a sleeper keeps
//! beyond that is boxed, so that the slot stays small for the many that
//! keep nothing.
//!
//! The lock is held to look at a slot and change it, never across a
//! socket call: a connection whose socket must be read or written where it
//! sleeps (a keep-alive ping, bytes its protocol answers, a peek at the
//! peer's close, a message to a sleeper) is *lent* out of its slot
//! ([`Synced::lend`]), its slot marked [`Slot::Lent`] meanwhile, and given
//! back once the call returned ([`Synced::give_back`]). What comes for it
//! while it is away is noted in its place and acted on when it comes back:
//! an event ([`Lent::readable`]), a deadline ([`Synced::missed`]), the
//! lot's close.

use std::sync::Arc;
use std::task::Waker;

use tokio::time::Instant;

use super::contract::{Carry, Rung};
use super::queue::{Millis, Timer, Timers};
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
    /// Task-less or asleep, lent out for a socket call made without the
    /// lot's lock ([`Synced::lend`]).
    Lent(Lent),
}

/// What came for a connection lent out of its slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Lent {
    /// An event said it is readable (or its peer closed it), or a waker
    /// asked for it: it is woken once back.
    pub(super) readable: bool,
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
            Slot::Served(_) | Slot::Sleeping { .. } | Slot::Lent(_) => None,
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
            Slot::Served(_) | Slot::Sleeping { .. } | Slot::Lent(_) => None,
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

/// What the lot's lock guards: the slab of slots and the deadlines.
pub(super) struct Synced<D, W, C> {
    pub(super) slots: Slab<Slot<D, W, C>>,
    /// When the next sweep for ends is due, while a task-less connection
    /// has one.
    pub(super) next_sweep: Option<Millis>,
    pub(super) deadlines: Timers,
    /// Deadlines that came while their connection was lent out (see
    /// [`Slot::Lent`]): queued again, due, when it comes back. Almost
    /// always empty.
    pub(super) missed: Vec<(Timer, Millis, u32)>,
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
        self.deadlines.clear();
        self.missed = Vec::new();
    }

    /// Takes the task-less connection or sleeper at `key` out of its slot,
    /// for a socket call without the lock; its slot says [`Slot::Lent`]
    /// until [`give_back`](Self::give_back) or [`end_loan`](Self::end_loan).
    pub(super) fn lend(&mut self, key: u32) -> Option<Slot<D, W, C>> {
        let slot = self.slots.remove(key)?;
        self.slots.put_back(key, Slot::Lent(Lent::default()));
        Some(slot)
    }

    /// Puts a lent connection back in its slot: what came for it while it
    /// was away, for the lender to act on (and the lot's `closed`), and
    /// whether it missed a deadline, now due again at its queue's front
    /// (a new front for the driver).
    pub(super) fn give_back(&mut self, key: u32, slot: Slot<D, W, C>) -> (Lent, bool) {
        let Some(entry @ Slot::Lent(_)) = self.slots.get_mut(key) else {
            // Nothing but the lender takes a lent slot.
            unreachable!("a lent slot is the lender's");
        };
        let Slot::Lent(lent) = std::mem::replace(entry, slot) else {
            unreachable!("matched above");
        };
        let mut missed = false;
        let mut i = 0;
        while i < self.missed.len() {
            if self.missed[i].2 == key {
                let (timer, deadline, key) = self.missed.swap_remove(i);
                self.deadlines.push_front(timer, deadline, key);
                missed = true;
            } else {
                i += 1;
            }
        }
        (lent, missed)
    }

    /// Ends a loan whose connection leaves its slot (woken, closed): the
    /// slot is freed with [`Slab::remove`], so that it can be put back in
    /// another form, and the deadlines it missed are forgotten.
    pub(super) fn end_loan(&mut self, key: u32) {
        if let Some(Slot::Lent(_)) = self.slots.remove(key) {
            self.missed.retain(|&(_, _, k)| k != key);
        }
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
        let mut deadlines = Timers::default();
        let (back, _) = deadlines.push(Timer::Ping, Ping::due(10).at(), 1);
        let (moved, _) = deadlines.push(Timer::Ping, Ping::due(5).at(), 2);
        assert_eq!((back, moved), (10, 10));
    }
}
