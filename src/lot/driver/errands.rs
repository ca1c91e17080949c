//! Errands: what the driver does on a connection lent out of its slot
//! (`slots.rs`), without the lot's lock: a peek at the peer's close, bytes
//! read for a protocol that answers them where it sleeps, a keep-alive
//! ping, a sleeper's deadline; then the connection given back under the
//! lock, as the errand found, and what came for it meanwhile acted on.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::{debug, trace};

use super::super::queue::{Millis, Timer, millis};
use super::super::ready::Report;
use super::{ANSWER_READ, Batch, Checked, Locked};
use crate::lot::{Callback, Carry, Closed, Parkable, ParkingLot, Ping, Slot, Synced, Wakeup};

/// A connection lent out of its slot at `key` (see `slots.rs`), for
/// `errand`, and what the errand found.
pub(super) struct Loan<D, W, C> {
    pub(super) key: u32,
    pub(super) slot: Slot<D, W, C>,
    pub(super) errand: Errand,
    pub(super) found: Found,
}

/// Why a connection is lent out of its slot.
#[derive(Clone, Copy, Debug)]
pub(super) enum Errand {
    /// An event: its peer may have closed it (`closing`: the transport
    /// tells bytes sent before the close from none), or bytes arrived for
    /// a protocol that answers them where it sleeps. `read` is what its
    /// cell is told if it wakes.
    Event { closing: bool, read: Report },
    /// Its keep-alive ping is due.
    Ping,
    /// A sleeper's deadline passed ([`Callback::due`]).
    Due,
}

/// What a lent connection's socket call found.
pub(super) enum Found {
    /// Not made yet.
    Nothing,
    /// Its protocol answered the bytes read: it sleeps on, its ping
    /// moved on if `ping_moves`.
    Answered { ping_moves: bool },
    /// It wakes, with the bytes read (none if the lot read nothing).
    Wake(Bytes),
    /// The peer closed it, or it failed.
    Gone(Closed, Option<io::Error>),
    /// Its ping was sent.
    Pinged,
    /// A sleeper's callback asks to be asked again after this long.
    Again(Duration),
    /// A sleeper's callback asks to be woken.
    Woken,
}

impl<T: Parkable, W: Callback<T>, C: Carry> ParkingLot<T, W, C> {
    /// Runs the errands of the connections lent out in `batch`, with the
    /// lock released, and gives them back; repeats while a connection
    /// given back has an event to look at. Returns the lock.
    pub(super) fn run_errands<'a>(
        &'a self,
        mut inner: Locked<'a, T, W, C>,
        batch: &mut Batch<T, W, C>,
        now: &mut Option<Millis>,
    ) -> Locked<'a, T, W, C> {
        let mut loans = Vec::new();
        while !batch.lent.is_empty() {
            drop(inner);
            std::mem::swap(&mut loans, &mut batch.lent);
            for loan in &mut loans {
                loan.found = Self::run_errand(&mut loan.slot, loan.errand);
            }
            inner = self.0.lock();
            for loan in loans.drain(..) {
                self.give_back(&mut inner, loan, batch, now);
            }
        }
        inner.shrink_if_empty();
        inner
    }

    /// What a lent connection's socket says, without the lock.
    fn run_errand(slot: &mut Slot<T::Dormant, W, C>, errand: Errand) -> Found {
        match (errand, slot) {
            (Errand::Event { closing: true, .. }, slot) => {
                let conn = match slot {
                    Slot::Parked { conn, .. }
                    | Slot::Dormant { conn, .. }
                    | Slot::ParkedCarrying { conn, .. }
                    | Slot::DormantCarrying { conn, .. }
                    | Slot::Sleeping { conn, .. } => conn,
                    Slot::Served(_) | Slot::Lent(_) => return Found::Nothing,
                };
                match T::peer_closed(conn) {
                    // Bytes sent before the close: served (a carrying
                    // connection's protocol does not answer them here).
                    None | Some(Ok(false)) => Found::Wake(Bytes::new()),
                    Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => Found::Nothing,
                    Some(Ok(true)) => Found::Gone(Closed::ByPeer, None),
                    Some(Err(error)) => {
                        trace!(%error, "a task-less connection failed");
                        Found::Gone(Closed::Failed, Some(error))
                    }
                }
            }
            (Errand::Event { .. }, slot) => Self::answer(slot),
            (Errand::Ping, slot) => match slot.carrying() {
                Some((conn, _, _, value)) => match T::send_dormant(conn, &value.ping()) {
                    Ok(()) => Found::Pinged,
                    Err(error) => {
                        debug!(%error, "keep-alive ping failed");
                        Found::Gone(Closed::Failed, Some(error))
                    }
                },
                None => Found::Nothing,
            },
            (Errand::Due, Slot::Sleeping { conn, asleep }) => match asleep.callback.due(conn) {
                Some(after) => Found::Again(after),
                None => Found::Woken,
            },
            (Errand::Due, _) => Found::Nothing,
        }
    }

    /// Reads what arrived for a lent carrying connection, for its protocol
    /// to answer where it sleeps ([`Carry::answer`]): an answered read
    /// leaves it asleep, its reply written and its keep-alive ping to be
    /// moved on as hyper's timer would be (the next ping `every` after the
    /// client's bytes; an answer to a ping in flight ends its wait).
    fn answer(slot: &mut Slot<T::Dormant, W, C>) -> Found {
        let Some((conn, _, ping, value)) = slot.carrying() else {
            return Found::Wake(Bytes::new());
        };
        let mut buf = [0; ANSWER_READ];
        let n = match T::read_dormant(conn, &mut buf) {
            None => return Found::Wake(Bytes::new()),
            Some(Ok(0)) => return Found::Gone(Closed::ByPeer, None),
            Some(Ok(n)) => n,
            Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => return Found::Nothing,
            Some(Err(error)) => {
                trace!(%error, "a task-less connection failed");
                return Found::Gone(Closed::Failed, Some(error));
            }
        };
        let read = &buf[..n];
        let mut reply = Vec::new();
        let answered = match value.answer(read, &mut reply) {
            // A full read may have left bytes, which no event would report.
            Some(answered) if n < ANSWER_READ => answered,
            _ => return Found::Wake(Bytes::copy_from_slice(read)),
        };
        if !reply.is_empty() && T::send_dormant(conn, &reply).is_err() {
            return Found::Wake(Bytes::copy_from_slice(read));
        }
        value.answered(answered);
        // Even when due, odd when sent (see `Ping`).
        let due = ping.at() % 2 == 0;
        Found::Answered {
            ping_moves: *ping != Ping::OFF && (answered.pongs > 0 || due),
        }
    }

    /// Gives a lent connection back, as its errand found: to its slot,
    /// with the deadlines its errand set, or out of the lot (woken,
    /// closed, called back).
    fn give_back(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        loan: Loan<T::Dormant, W, C>,
        batch: &mut Batch<T, W, C>,
        now: &mut Option<Millis>,
    ) {
        let Loan {
            key,
            mut slot,
            errand,
            found,
        } = loan;
        let woke = match found {
            Found::Wake(unread) => {
                let mut read = match errand {
                    Errand::Event { read, .. } => read,
                    Errand::Ping | Errand::Due => Report::Ready,
                };
                if !unread.is_empty() && unread.len() < ANSWER_READ {
                    // Read empty: the next read waits for an event.
                    read = Report::Nothing;
                }
                Checked {
                    unread,
                    ..Checked::readable(read)
                }
            }
            Found::Gone(why, failure) => Checked {
                gone: Some(why),
                failure,
                ..Checked::readable(Report::Closed)
            },
            Found::Woken => {
                inner.end_loan(key);
                if let Slot::Sleeping { conn, asleep } = slot {
                    inner.sleeping -= 1;
                    batch.sleepers.push((asleep.callback, Wakeup::Due(conn)));
                }
                return;
            }
            stays => {
                let clock = &self.0.clock;
                let now = *now.get_or_insert_with(|| clock.millis(Instant::now()));
                self.stay(inner, key, &mut slot, stays, now);
                let (lent, missed) = inner.give_back(key, slot);
                if missed {
                    // Due again: the driver looks after this batch.
                    self.0.new_front.store(true, Ordering::Release);
                }
                if inner.closed {
                    if let Some(slot) = inner.slots.remove(key) {
                        self.shut(inner, slot, batch);
                    }
                } else if lent.readable {
                    let read = Report::Ready;
                    self.on_readable(inner, key, false, read, batch, &mut Some(now));
                }
                return;
            }
        };
        inner.end_loan(key);
        self.take_out(inner, key, slot, woke, batch, now);
    }

    /// What an errand that leaves a connection in its slot changed: the
    /// deadline it set, queued.
    fn stay(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        key: u32,
        slot: &mut Slot<T::Dormant, W, C>,
        found: Found,
        now: Millis,
    ) {
        let pings = &self.0.pings;
        let (timer, at) = match found {
            Found::Answered { ping_moves: true } => (
                Timer::Ping,
                Ping::due(now.wrapping_add(millis(pings.every))).at(),
            ),
            // At most 24 days (`Builder::http2_keep_alive_timeout`).
            Found::Pinged => (
                Timer::Answer,
                Ping::sent(now.wrapping_add(millis(pings.answer_within))).at(),
            ),
            Found::Again(after) => (
                Timer::Sleeper(millis(after)),
                now.wrapping_add(millis(after)),
            ),
            _ => return,
        };
        let (at, first) = inner.deadlines.push(timer, at, key);
        if first {
            // A new front, which the driver's timer does not know: it
            // looks at the deadlines after this batch (`drive`).
            self.0.new_front.store(true, Ordering::Release);
        }
        match slot {
            Slot::Sleeping { asleep, .. } => asleep.deadline = Some(at),
            slot => {
                if let Some((_, _, ping, _)) = slot.carrying() {
                    *ping = Ping(at);
                }
            }
        }
    }

    /// A connection out of its slot because the lot closed while it was
    /// lent: closed (after its goodbye), or called back.
    fn shut(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        slot: Slot<T::Dormant, W, C>,
        batch: &mut Batch<T, W, C>,
    ) {
        match slot {
            Slot::Sleeping { conn, asleep } => {
                inner.sleeping -= 1;
                batch
                    .sleepers
                    .push((asleep.callback, Wakeup::Shutdown(conn)));
            }
            slot => {
                if let Some(rung) = slot.rung() {
                    batch.shut.push((slot, rung));
                }
            }
        }
    }
}
