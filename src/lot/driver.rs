//! The lot's driver: the task that collects readiness events and acts on
//! them, and on the deadlines of task-less connections, in batches.
//!
//! Both work in two steps: under the lot's lock, what can be decided from
//! the slots alone (readiness handed to a served connection's cell, a
//! PARKED connection moved to DORMANT, a woken one made `Served` again);
//! what needs the connection's socket (a ping, an answer, a peek at the
//! peer's close) on connections lent out of their slots, after the lock
//! is released, then given back under it again (`slots.rs`).

use std::io;
use std::sync::Arc;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;
use std::task::{Poll as Ready, Waker};
use std::time::Duration;

use bytes::Bytes;
use mio::event::Event;
use mio::{Events, Poll};
use tokio::time::Instant;
use tracing::{debug, trace};

use super::queue::{Millis, Timer, before};
use super::ready::{Registration, Report};
use super::relief::{Relieve, Rouser};
use super::{
    Callback, Carried, Carry, Closed, Core, Parkable, ParkingLot, Ping, Rung, Slept, Slot, Synced,
    Turn, Wakeup, Woke,
};
use errands::{Errand, Found, Loan};

/// The most a task-less carrying connection's read takes, for its
/// protocol to answer where it sleeps ([`Carry::answer`]): a read that
/// fills it may have left more, and wakes the connection.
const ANSWER_READ: usize = 256;

/// The rouser of a lot's poll (`relief.rs`).
type LotRouser<T, W, C> = Rouser<Core<T, W, C>>;

/// The lot's lock, held.
type Locked<'a, T, W, C> = MutexGuard<'a, Synced<<T as Parkable>::Dormant, W, C>>;

/// What a batch of events (or of deadlines) asks for once the lot's lock
/// is released.
struct Batch<T: Parkable, W, C> {
    /// Tasks whose connection turned ready.
    wake: Vec<Waker>,
    /// Task-less connections to hand to the owner, with what they carry
    /// and the bytes the lot read for them.
    woken: Vec<(T, Option<C>, Slept, Bytes)>,
    /// Connections the peer closed (or that failed), to close.
    gone: Vec<(T::Dormant, Rung, Closed)>,
    /// Sleepers to take out of the poll and call back.
    sleepers: Vec<(W, Wakeup<T::Dormant>)>,
    /// Sleepers' sockets that failed, to close.
    failed: Vec<T::Dormant>,
    /// Connections lent out of their slots for a socket call.
    lent: Vec<Loan<T::Dormant, W, C>>,
    /// Lent connections whose lot closed meanwhile, to close for shutdown.
    shut: Aged<T::Dormant, W, C>,
}

/// What an event says of a task-less connection or a sleeper it takes
/// out of its slot.
struct Checked {
    /// The peer closed it, or it failed.
    gone: Option<Closed>,
    failure: Option<io::Error>,
    /// What its readiness cell is told of reading, once served again.
    read: Report,
    /// Bytes the lot read for its protocol (see [`Woke::unread`]).
    unread: Bytes,
}

impl Checked {
    fn readable(read: Report) -> Self {
        Checked {
            gone: None,
            failure: None,
            read,
            unread: Bytes::new(),
        }
    }
}

/// Slots taken out to be closed, by rung.
type Aged<D, W, C> = Vec<(Slot<D, W, C>, Rung)>;

/// What a pass over the deadlines took out of the slab, to act on once
/// the lock is released.
struct Passed<D, W, C> {
    /// Past their idle deadline.
    idle: Aged<D, W, C>,
    /// Their ping's answer is late.
    unanswered: Aged<D, W, C>,
    /// Carrying connections that declined to go DORMANT.
    refused: Vec<(D, C)>,
    /// How many went DORMANT.
    entered: usize,
}

impl<D, W, C> Default for Passed<D, W, C> {
    fn default() -> Self {
        Passed {
            idle: Vec::new(),
            unanswered: Vec::new(),
            refused: Vec::new(),
            entered: 0,
        }
    }
}

impl<T: Parkable, W, C> Default for Batch<T, W, C> {
    fn default() -> Self {
        Batch {
            wake: Vec::new(),
            woken: Vec::new(),
            gone: Vec::new(),
            sleepers: Vec::new(),
            failed: Vec::new(),
            lent: Vec::new(),
            shut: Vec::new(),
        }
    }
}

/// A relief acts on a batch as the lot's task does, except that every
/// connection it wakes is served in a task of its own (`relief.rs`).
impl<T: Parkable, W: Callback<T>, C: Carry> Relieve for Core<T, W, C> {
    fn relieve(self: Arc<Self>, rouser: &Rouser<Self>, waker: &Waker) -> Ready<io::Result<bool>> {
        let lot = ParkingLot(self);
        let mut batch = Batch::default();
        let collected = rouser.collect(waker, |events| lot.on_events(events, &mut batch));
        lot.hand_over(&mut batch, None);
        collected
    }
}

impl<T: Parkable, W: Callback<T>, C: Carry> ParkingLot<T, W, C> {
    /// Acts on a batch of events, leaving in `batch` what needs no lock
    /// ([`hand_over`](Self::hand_over)).
    fn on_events(&self, events: &Events, batch: &mut Batch<T, W, C>) {
        // Read once per batch, when a parked connection wakes.
        let mut now = None;
        let mut inner = self.0.lock();
        for event in events.iter() {
            if let Ok(key) = u32::try_from(event.token().0) {
                self.on_event(&mut inner, key, event, batch, &mut now);
            }
        }
        if batch.lent.is_empty() {
            inner.shrink_if_empty();
        } else {
            drop(self.run_errands(inner, batch, &mut now));
        }
    }

    /// Acts on one event of the connection at `key`: sets a served one's
    /// readiness, takes a task-less one or a sleeper out of its slot, or
    /// lends it out if its socket must be looked at first.
    fn on_event(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        key: u32,
        event: &Event,
        batch: &mut Batch<T, W, C>,
        now: &mut Option<Millis>,
    ) {
        let closing = event.is_read_closed() || event.is_error();
        let readable = event.is_readable() || closing;
        let read = match (readable, closing) {
            (_, true) => Report::Closed,
            (true, false) => Report::Ready,
            (false, false) => Report::Nothing,
        };
        match inner.slots.get_mut(key) {
            Some(Slot::Served(cell)) => {
                let write = if event.is_write_closed() || event.is_error() {
                    Report::Closed
                } else if event.is_writable() {
                    Report::Ready
                } else {
                    Report::Nothing
                };
                cell.set(read, write, &mut batch.wake);
            }
            Some(Slot::Lent(lent)) => lent.readable |= readable,
            // Room to write (the ACK of the last response) does not wake a
            // task-less connection.
            Some(_) if readable => self.on_readable(inner, key, closing, read, batch, now),
            _ => {}
        }
    }

    /// The task-less connection or sleeper at `key` turned readable (its
    /// peer closed it, if `closing`): out of its slot, or lent out if the
    /// peer's close needs a look or its protocol answers bytes where it
    /// sleeps. An event without the peer's close means bytes: no peek, the
    /// reader finds them.
    fn on_readable(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        key: u32,
        closing: bool,
        read: Report,
        batch: &mut Batch<T, W, C>,
        now: &mut Option<Millis>,
    ) {
        let answers = |slot: &mut Slot<_, _, C>| {
            slot.carrying()
                .is_some_and(|(_, _, _, value)| value.answers())
        };
        let lend = closing || inner.slots.get_mut(key).is_some_and(answers);
        if lend {
            if let Some(slot) = inner.lend(key) {
                let errand = Errand::Event { closing, read };
                batch.lent.push(Loan {
                    key,
                    slot,
                    errand,
                    found: Found::Nothing,
                });
            }
        } else if let Some(slot) = inner.slots.remove(key) {
            // Not `inner.remove`: a woken slot is put back under its key.
            self.take_out(inner, key, slot, Checked::readable(read), batch, now);
        }
    }

    /// A task-less connection or a sleeper, out of its slot at `key`, as
    /// its event says: served again (its slot `Served` again, both sides
    /// ready), closed, or called back.
    fn take_out(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        key: u32,
        slot: Slot<T::Dormant, W, C>,
        woke: Checked,
        batch: &mut Batch<T, W, C>,
        now: &mut Option<Millis>,
    ) {
        let (conn, cell, carried) = match slot {
            Slot::Sleeping { conn, asleep } => {
                inner.sleeping -= 1;
                let callback = asleep.callback;
                let woken =
                    match woke.gone {
                        None => Wakeup::Readable(conn),
                        Some(Closed::ByPeer) => Wakeup::Eof(conn),
                        Some(_) => {
                            // Closed once the lock is released, like a
                            // task-less connection that failed.
                            batch.failed.push(conn);
                            Wakeup::Failed(woke.failure.unwrap_or_else(|| {
                                io::Error::other("the socket failed while asleep")
                            }))
                        }
                    };
                batch.sleepers.push((callback, woken));
                return;
            }
            Slot::Served(_) | Slot::Lent(_) => return,
            Slot::Parked { conn, cell } => (conn, Some(cell), None),
            Slot::Dormant { conn, .. } => (conn, None, None),
            Slot::ParkedCarrying { conn, with } => {
                let Carried {
                    rung: cell, value, ..
                } = *with;
                (conn, Some(cell), Some(value))
            }
            Slot::DormantCarrying { conn, with } => (conn, None, Some(with.value)),
        };
        if let Some(why) = woke.gone {
            let from = if cell.is_some() {
                Rung::Parked
            } else {
                Rung::Dormant
            };
            batch.gone.push((conn, from, why));
            return;
        }
        let (cell, slept) = match cell {
            Some(cell) => {
                let parked_at = cell.set_woken(woke.read);
                let now = *now.get_or_insert_with(|| self.0.clock.millis(Instant::now()));
                let slept = Duration::from_millis(now.wrapping_sub(parked_at).into());
                (cell, Slept::Parked(slept))
            }
            None => {
                let cell = inner.new_cell();
                cell.set_woken(woke.read);
                (cell, Slept::Dormant)
            }
        };
        inner.slots.put_back(key, Slot::Served(cell.clone()));
        let registration = Registration::new(key, cell, self.0.clone());
        let conn = T::from_dormant(conn, registration);
        batch.woken.push((conn, carried, slept, woke.unread));
    }

    /// What a batch left to do without the lot's lock: wakes tasks,
    /// closes connections, calls sleepers back, and hands woken
    /// connections to the owner. With `rouser` (the lot's task), the last
    /// of them is handed over as [`Turn::Last`], which the owner may poll
    /// in place, while readiness goes to a relief (`relief.rs`); without
    /// (a relief, or deadlines), each is [`Turn::Before`].
    fn hand_over(&self, batch: &mut Batch<T, W, C>, rouser: Option<&Arc<LotRouser<T, W, C>>>) {
        let shared = &self.0;
        batch.wake.drain(..).for_each(Waker::wake);
        for (conn, from, why) in batch.gone.drain(..) {
            trace!(?from, ?why, "task-less connection closed");
            // Closed before the owner counts it.
            drop(conn);
            shared.owner.closed(from, why, 1);
        }
        batch.failed.clear();
        if !batch.shut.is_empty() {
            self.close(std::mem::take(&mut batch.shut), Closed::Shutdown);
        }
        for (callback, woken) in batch.sleepers.drain(..) {
            self.wake_sleeper(callback, woken);
        }
        // Last: the owner may serve the last one here, in the lot's task.
        let n = batch.woken.len();
        for (i, (conn, carried, slept, unread)) in batch.woken.drain(..).enumerate() {
            let woke = |turn| Woke {
                slept,
                turn,
                unread,
            };
            match rouser {
                Some(rouser) if i + 1 == n => {
                    rouser.in_place(|| shared.owner.woken(conn, carried, woke(Turn::Last)));
                }
                _ => shared.owner.woken(conn, carried, woke(Turn::Before)),
            }
        }
    }

    /// Acts on the deadlines that passed at `instant`: moves PARKED
    /// connections to DORMANT, closes those whose idle deadline passed,
    /// pings carrying connections whose ping is due and closes those whose
    /// answer is late, and those past their end; asks sleepers whose
    /// deadline passed what to do ([`Callback::due`]). Returns how long
    /// until the next deadline.
    fn expire(&self, instant: Instant) -> Option<Duration> {
        let shared = &*self.0;
        let now = shared.clock.millis(instant);
        let mut inner = shared.lock();
        let mut batch = Batch::default();
        let mut passed = Passed::default();
        // Lent out once every deadline was looked at: one that closes the
        // connection in the same pass needs no ping first.
        let mut errands = Vec::new();
        while let Some((timer, deadline, key)) = inner.deadlines.pop_due(now) {
            if let Some(Slot::Lent(_)) = inner.slots.get(key) {
                inner.missed.push((timer, deadline, key));
                continue;
            }
            // A key reused since has a deadline of its own, or none: an
            // entry is acted on only if its slot still has its deadline.
            match timer {
                Timer::Parked => self.expire_parked(&mut inner, now, deadline, key, &mut passed),
                Timer::Dormant => {
                    let current = match inner.slots.get(key) {
                        Some(Slot::Dormant { deadline: d, .. }) => *d == deadline,
                        Some(Slot::DormantCarrying { with, .. }) => with.rung == deadline,
                        _ => false,
                    };
                    if let Some(slot) = current.then(|| inner.remove(key)).flatten() {
                        passed.idle.push((slot, Rung::Dormant));
                    }
                }
                Timer::Answer => {
                    let late =
                        (inner.slots.get(key)).is_some_and(|slot| slot.pings(Ping(deadline)));
                    if let Some(slot) = late.then(|| inner.remove(key)).flatten() {
                        debug!("keep-alive ping unanswered");
                        // A slot that pings has a rung.
                        let rung = slot.rung().unwrap_or(Rung::Dormant);
                        passed.unanswered.push((slot, rung));
                    }
                }
                Timer::Ping => errands.push((key, deadline, Errand::Ping)),
                Timer::Sleeper(_) => errands.push((key, deadline, Errand::Due)),
            }
        }
        for (key, deadline, errand) in errands {
            let current = match (errand, inner.slots.get(key)) {
                (Errand::Ping, Some(slot)) => slot.pings(Ping(deadline)),
                (Errand::Due, Some(Slot::Sleeping { asleep, .. })) => {
                    asleep.deadline == Some(deadline)
                }
                _ => false,
            };
            if let Some(slot) = current.then(|| inner.lend(key)).flatten() {
                let found = Found::Nothing;
                batch.lent.push(Loan {
                    key,
                    slot,
                    errand,
                    found,
                });
            }
        }
        let aged = self.sweep(&mut inner, now, instant);
        let inner = self.run_errands(inner, &mut batch, &mut Some(now));
        let sweep = (inner.next_sweep).map(|at| Duration::from_millis(at.wrapping_sub(now).into()));
        let next = inner.deadlines.next_in(now).into_iter().chain(sweep).min();
        drop(inner);
        self.hand_over(&mut batch, None);
        self.close(passed.unanswered, Closed::Unanswered);
        self.close(passed.idle, Closed::Idle);
        let n_refused = passed.refused.len();
        for (conn, value) in passed.refused {
            T::close_dormant(conn, &value.goodbye());
        }
        shared.owner.closed(Rung::Parked, Closed::Failed, n_refused);
        shared.owner.went_dormant(passed.entered);
        self.close(aged, Closed::Age);
        next
    }

    /// Moves the PARKED connection at `key` to DORMANT if its due time
    /// `due` passed, or into `passed.idle` if its idle deadline passed
    /// too, or into `passed.refused` if it carries something that declines
    /// to go DORMANT ([`Carry::went_dormant`]).
    fn expire_parked(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        now: Millis,
        due: Millis,
        key: u32,
        passed: &mut Passed<T::Dormant, W, C>,
    ) {
        let cell = match inner.slots.get(key) {
            Some(Slot::Parked { cell, .. }) => cell,
            Some(Slot::ParkedCarrying { with, .. }) => &with.rung,
            _ => return,
        };
        let until = match cell.parked() {
            (Some(d), until) if d == due => until,
            _ => return,
        };
        if until.is_some_and(|until| !before(now, until)) {
            if let Some(slot) = inner.remove(key) {
                passed.idle.push((slot, Rung::Parked));
            }
            return;
        }
        // The cell goes: a DORMANT connection keeps its fd and state.
        let deadline = until.map_or(0, |until| {
            inner.deadlines.push(Timer::Dormant, until, key).0
        });
        let dormant = match inner.slots.remove(key) {
            Some(Slot::Parked { conn, .. }) => Slot::Dormant { conn, deadline },
            Some(Slot::ParkedCarrying { conn, with }) => {
                let Carried {
                    ping, mut value, ..
                } = *with;
                if !value.went_dormant() {
                    passed.refused.push((conn, value));
                    inner.shrink_if_empty();
                    return;
                }
                let with = Box::new(Carried {
                    rung: deadline,
                    ping,
                    value,
                });
                Slot::DormantCarrying { conn, with }
            }
            // Checked above: not reached.
            Some(slot) => slot,
            None => return,
        };
        inner.slots.put_back(key, dormant);
        passed.entered += 1;
    }

    /// Closes task-less connections taken out of the slab, each after its
    /// protocol's goodbye (an HTTP/2 GOAWAY) and its transport's (TLS:
    /// `close_notify`), and reports them closed for `why`. At the idle
    /// deadline, those that carry nothing are dropped, as hyper drops
    /// them.
    fn close(&self, slots: Aged<T::Dormant, W, C>, why: Closed) {
        let (mut n_parked, mut n_dormant) = (0, 0);
        for (slot, rung) in slots {
            match rung {
                Rung::Dormant => n_dormant += 1,
                // Task-less: never ACTIVE.
                Rung::Parked | Rung::Active => n_parked += 1,
            }
            match slot {
                // At its idle deadline, one that carries nothing is
                // dropped.
                Slot::Parked { .. } | Slot::Dormant { .. } if why == Closed::Idle => drop(slot),
                slot => {
                    if let Some((conn, _, goodbye)) = slot.into_goodbye() {
                        T::close_dormant(conn, &goodbye);
                    }
                }
            }
        }
        self.0.owner.closed(Rung::Dormant, why, n_dormant);
        self.0.owner.closed(Rung::Parked, why, n_parked);
    }

    /// Takes the task-less connections past their end out of the slab, if
    /// a sweep is due (see [`Carry::ends_at`]), and sets the next one
    /// while task-less connections with an end remain. `now` is `instant`
    /// on the lot's clock.
    fn sweep(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        now: Millis,
        instant: Instant,
    ) -> Aged<T::Dormant, W, C> {
        let (Some(every), Some(due)) = (self.0.sweep_every, inner.next_sweep) else {
            return Vec::new();
        };
        if before(now, due) {
            return Vec::new();
        }
        let mut aged = Vec::new();
        let mut left = false;
        for key in 0..inner.slots.end() {
            let slot = inner.slots.get(key);
            // Looked at again at the next sweep.
            left |= matches!(slot, Some(Slot::Lent(_)));
            let Some((rung, ends_at)) = slot.and_then(|slot| Some((slot.rung()?, slot.ends_at()?)))
            else {
                continue;
            };
            if instant < ends_at {
                left = true;
                continue;
            }
            if let Some(slot) = inner.slots.remove(key) {
                aged.push((slot, rung));
            }
        }
        inner.shrink_if_empty();
        // Entries left in the queues name vacant keys, as after a wake.
        let every = every.as_millis().min(i32::MAX as u128) as Millis;
        inner.next_sweep = left.then(|| now.wrapping_add(every));
        aged
    }

    /// Runs the lot until its poll fails: hands readiness to the tasks that
    /// wait for it and ready task-less connections to the owner, closes
    /// those the peer closed or whose idle deadline passed. The caller
    /// stops it by dropping the future, once no served connection is left
    /// to need it.
    ///
    /// Deadlines are acted on in batches: after a pass the lot sleeps at
    /// least the lot's `slack` (unless an event wakes it), so a deadline
    /// is acted on up to `slack` late. Every parked connection has a
    /// deadline (`dormant_after`), and most are stale by then (the
    /// connection woke): without the slack, a lot whose connections park
    /// a few thousand times a second woke its task and tokio's timer once
    /// for nearly every park (BENCHMARKS.md, "Instructions per request").
    pub(crate) async fn drive(&self, poll: Poll) -> io::Result<()> {
        let rouser = Rouser::new(&self.0, poll)?;
        let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
        let mut batch = Batch::default();
        let driver = std::future::poll_fn(|cx| Ready::Ready(cx.waker().clone())).await;
        self.0.lock().driver = Some(driver);
        let new_front = std::future::poll_fn(|_| {
            let shared = &self.0;
            if shared.new_front.load(Ordering::Acquire)
                && shared.new_front.swap(false, Ordering::AcqRel)
            {
                Ready::Ready(())
            } else {
                // The driver's waker is the lot's already.
                Ready::Pending
            }
        });
        let mut new_front = std::pin::pin!(new_front);
        // Readiness of the lot's poll wakes the rouser, which wakes this
        // task (or a relief, while this one polls in place: `relief.rs`).
        let events = std::future::poll_fn(|cx| {
            rouser.set_task(cx.waker());
            match rouser.collect(rouser.waker(), |events| self.on_events(events, &mut batch)) {
                Ready::Ready(Ok(true)) => {
                    self.hand_over(&mut batch, Some(&rouser));
                    Ready::Ready(Ok(()))
                }
                Ready::Ready(Err(error)) => Ready::Ready(Err(error)),
                // A relief collects now; it wakes this task when done.
                Ready::Ready(Ok(false)) | Ready::Pending => Ready::Pending,
            }
        });
        let mut events = std::pin::pin!(events);
        // Deadlines are looked at when the timer fires or a new front
        // comes, not after every batch of events: events add none (a park
        // that does signals `new_front`).
        let mut deadlines_due = true;
        let mut next = None;
        loop {
            if std::mem::take(&mut deadlines_due) {
                let now = Instant::now();
                next = self.expire(now);
                if let Some(next) = next {
                    // A timer already set within the slack of the deadline
                    // stays: moving it costs more than waking a little early.
                    let at = now + next.max(self.0.slack);
                    let set = timer.deadline();
                    if at < set || at > set + self.0.slack {
                        timer.as_mut().reset(at);
                    }
                }
            }
            tokio::select! {
                biased;
                res = events.as_mut() => res?,
                () = &mut timer, if next.is_some() => deadlines_due = true,
                // Also with a timer set: a task-less PARKED connection's
                // deadline may come before the dormant front.
                () = new_front.as_mut() => deadlines_due = true,
            }
        }
    }
}

mod errands;
#[cfg(test)]
mod tests;
