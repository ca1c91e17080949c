//! The lot's driver: the task that collects readiness events and acts on
//! them, and on the deadlines of task-less connections, in batches.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Poll as Ready, Waker};
use std::time::Duration;

use bytes::Bytes;
use mio::event::Event;
use mio::{Events, Poll};
use tokio::time::Instant;
use tracing::{debug, trace};

use super::queue::{Millis, before, millis};
use super::ready::{Registration, Report};
use super::relief::{Relieve, Rouser};
use super::{
    Callback, Carried, Carry, Closed, Core, Parkable, ParkingLot, Ping, Rung, Slept, Slot, Synced,
    Turn, Wakeup, Woke,
};

/// The most a task-less carrying connection's read takes, for its
/// protocol to answer where it sleeps ([`Carry::answer`]): a read that
/// fills it may have left more, and wakes the connection.
const ANSWER_READ: usize = 256;

/// The rouser of a lot's poll (`relief.rs`).
type LotRouser<T, W, C> = Rouser<Core<T, W, C>>;

/// What a batch of events asks for once the lot's lock is released.
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
}

/// What became of a task-less connection's bytes read in the lot
/// ([`ParkingLot::answer_in_place`]).
enum InPlace {
    /// Its protocol answered them: it sleeps on.
    Answered,
    /// None had come after all.
    Nothing,
    /// It wakes, with the bytes read (none if the lot read nothing: it
    /// carries nothing, or its transport cannot read in its parked form).
    Wake(Bytes),
    /// The peer closed it, or it failed.
    Gone(Closed, Option<io::Error>),
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

/// Slots taken out to be closed, by rung.
type Aged<D, W, C> = Vec<(Slot<D, W, C>, Rung)>;

impl<T: Parkable, W, C> Default for Batch<T, W, C> {
    fn default() -> Self {
        Batch {
            wake: Vec::new(),
            woken: Vec::new(),
            gone: Vec::new(),
            sleepers: Vec::new(),
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
    /// Acts on a batch of events under the lot's lock, leaving in `batch`
    /// what needs no lock ([`hand_over`](Self::hand_over)).
    fn on_events(&self, events: &Events, batch: &mut Batch<T, W, C>) {
        // Read once per batch, when a parked connection wakes.
        let mut now = None;
        let mut inner = self.0.lock();
        for event in events.iter() {
            if let Ok(key) = u32::try_from(event.token().0) {
                self.on_event(&mut inner, key, event, batch, &mut now);
            }
        }
        inner.shrink_if_empty();
    }

    /// Acts on one event of the connection at `key`: sets a served one's
    /// readiness, or takes a task-less one or a sleeper out of its slot
    /// (unless its protocol answers its bytes where it sleeps).
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
        let conn = match inner.slots.get_mut(key) {
            Some(Slot::Served(cell)) => {
                let write = if event.is_write_closed() || event.is_error() {
                    Report::Closed
                } else if event.is_writable() {
                    Report::Ready
                } else {
                    Report::Nothing
                };
                cell.set(read, write, &mut batch.wake);
                return;
            }
            // Room to write (the ACK of the last response) does not wake a
            // task-less connection.
            Some(
                Slot::Parked { conn, .. }
                | Slot::Dormant { conn, .. }
                | Slot::ParkedCarrying { conn, .. }
                | Slot::DormantCarrying { conn, .. }
                | Slot::Sleeping { conn, .. },
            ) if readable => conn,
            _ => return,
        };
        // An event without the peer's close means bytes: no peek, the
        // reader finds them. With the close, the transport tells bytes sent
        // before it (serve them) from none (close the fd here).
        let mut woke = Checked {
            gone: None,
            failure: None,
            read,
            unread: Bytes::new(),
        };
        match closing.then(|| T::peer_closed(conn)).flatten() {
            None | Some(Ok(false)) => {}
            Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
            Some(Ok(true)) => woke.gone = Some(Closed::ByPeer),
            Some(Err(error)) => {
                trace!(%error, "a task-less connection failed");
                (woke.gone, woke.failure) = (Some(Closed::Failed), Some(error));
            }
        }
        // A carrying connection's protocol may answer the bytes where it
        // sleeps.
        if !closing {
            match self.answer_in_place(inner, key, now) {
                InPlace::Answered | InPlace::Nothing => return,
                InPlace::Wake(bytes) => {
                    if !bytes.is_empty() && bytes.len() < ANSWER_READ {
                        // Read empty: the next read waits for an event.
                        woke.read = Report::Nothing;
                    }
                    woke.unread = bytes;
                }
                InPlace::Gone(why, error) => (woke.gone, woke.failure) = (Some(why), error),
            }
        }
        // Not `inner.remove`: a woken slot is put back under its key.
        if let Some(slot) = inner.slots.remove(key) {
            self.take_out(inner, key, slot, woke, batch, now);
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
                            // Closed here, under the lock, like a task-less
                            // connection that failed.
                            drop(conn);
                            Wakeup::Failed(woke.failure.unwrap_or_else(|| {
                                io::Error::other("the socket failed while asleep")
                            }))
                        }
                    };
                batch.sleepers.push((callback, woken));
                return;
            }
            Slot::Served(_) => return,
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

    /// What a batch of events left to do without the lot's lock: wakes
    /// tasks, closes connections, calls sleepers back, and hands woken
    /// connections to the owner. With `rouser` (the lot's task), the last
    /// of them is handed over as [`Turn::Last`], which the owner may poll
    /// in place, while readiness goes to a relief (`relief.rs`); without
    /// (a relief), each is [`Turn::Before`].
    fn hand_over(&self, batch: &mut Batch<T, W, C>, rouser: Option<&Arc<LotRouser<T, W, C>>>) {
        let shared = &self.0;
        batch.wake.drain(..).for_each(Waker::wake);
        for (conn, from, why) in batch.gone.drain(..) {
            trace!(?from, ?why, "task-less connection closed");
            // Closed before the owner counts it.
            drop(conn);
            shared.owner.closed(from, why, 1);
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

    /// Reads what arrived for the task-less connection at `key`, if it
    /// carries something, for its protocol to answer where it sleeps
    /// ([`Carry::answer`]): an answered read leaves it asleep, its reply
    /// written and its keep-alive ping moved on as hyper's timer would be
    /// (the next ping `every` after the client's bytes; an answer to a
    /// ping in flight ends its wait).
    fn answer_in_place(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        key: u32,
        now: &mut Option<Millis>,
    ) -> InPlace {
        let Some((conn, _, ping, value)) = inner.slots.get_mut(key).and_then(Slot::carrying) else {
            return InPlace::Wake(Bytes::new());
        };
        if !value.answers() {
            return InPlace::Wake(Bytes::new());
        }
        let mut buf = [0; ANSWER_READ];
        let n = match T::read_dormant(conn, &mut buf) {
            None => return InPlace::Wake(Bytes::new()),
            Some(Ok(0)) => return InPlace::Gone(Closed::ByPeer, None),
            Some(Ok(n)) => n,
            Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => return InPlace::Nothing,
            Some(Err(error)) => {
                trace!(%error, "a task-less connection failed");
                return InPlace::Gone(Closed::Failed, Some(error));
            }
        };
        let read = &buf[..n];
        let mut reply = Vec::new();
        let answered = match value.answer(read, &mut reply) {
            // A full read may have left bytes, which no event would report.
            Some(answered) if n < ANSWER_READ => answered,
            _ => return InPlace::Wake(Bytes::copy_from_slice(read)),
        };
        if !reply.is_empty() && T::send_dormant(conn, &reply).is_err() {
            return InPlace::Wake(Bytes::copy_from_slice(read));
        }
        value.answered(answered);
        // Even when due, odd when sent (see `Ping`).
        let due = ping.at() % 2 == 0;
        let moved = *ping != Ping::OFF && (answered.pongs > 0 || due);
        if moved {
            let now = *now.get_or_insert_with(|| self.0.clock.millis(Instant::now()));
            let at = Ping::due(now.wrapping_add(millis(self.0.pings.every))).at();
            let at = inner.ping_deadlines.push(at, key);
            if let Some((_, _, ping, _)) = inner.slots.get_mut(key).and_then(Slot::carrying) {
                *ping = Ping(at);
            }
            if inner.ping_deadlines.len() == 1 {
                // A new front, which the driver's timer does not know: it
                // looks at the deadlines after this batch (`drive`).
                self.0.new_front.store(true, Ordering::Release);
            }
        }
        InPlace::Answered
    }

    /// Closes the connections whose idle deadline passed and moves
    /// task-less PARKED ones whose dormant deadline passed to DORMANT;
    /// pings carrying connections whose ping is due and closes those whose
    /// answer is late, and those past their end; returns how long until
    /// the next deadline.
    fn expire(&self, instant: Instant) -> Option<Duration> {
        let shared = &*self.0;
        let now = shared.clock.millis(instant);
        let mut inner = shared.lock();
        let mut idle = Vec::new();
        self.expire_dormant(&mut inner, now, &mut idle);
        let (entered, refused) = self.expire_parked(&mut inner, now, &mut idle);
        let mut unanswered = Vec::new();
        self.ping(&mut inner, now, &mut unanswered);
        let due_sleepers = self.expire_sleepers(&mut inner, now);
        let aged = self.sweep(&mut inner, now, instant);
        let next = [
            inner.dormant_deadlines.next_in(now),
            inner.parked_deadlines.next_in(now),
            inner.ping_deadlines.next_in(now),
            inner.answer_deadlines.next_in(now),
            (inner.next_sweep).map(|at| Duration::from_millis(at.wrapping_sub(now).into())),
        ]
        .into_iter()
        .chain(inner.sleeper_deadlines.iter().map(|(_, q)| q.next_in(now)))
        .flatten()
        .min();
        drop(inner);
        for (callback, conn) in due_sleepers {
            self.wake_sleeper(callback, Wakeup::Due(conn));
        }
        for (rung, why, n) in unanswered {
            shared.owner.closed(rung, why, n);
        }
        self.close(idle, Closed::Idle);
        let n_refused = refused.len();
        for (conn, value) in refused {
            T::close_dormant(conn, &value.goodbye());
        }
        shared.owner.closed(Rung::Parked, Closed::Failed, n_refused);
        shared.owner.went_dormant(entered);
        self.close(aged, Closed::Age);
        next
    }

    /// Asks the sleepers whose deadline passed what to do where they sleep
    /// ([`Callback::due`]): queues their next deadline, or takes them out
    /// of the slab to be woken (returned).
    fn expire_sleepers(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        now: Millis,
    ) -> Vec<(W, T::Dormant)> {
        let mut due = Vec::new();
        for i in 0..inner.sleeper_deadlines.len() {
            while let Some((deadline, key)) = inner.sleeper_deadlines[i].1.pop_due(now) {
                // A key reused since has a deadline of its own, or none.
                let Some(Slot::Sleeping { conn, asleep }) = inner.slots.get_mut(key) else {
                    continue;
                };
                if asleep.deadline != Some(deadline) {
                    continue;
                }
                match asleep.callback.due(conn) {
                    Some(after) => {
                        let (next, _) = inner.push_sleeper_deadline(now, after, key);
                        if let Some(Slot::Sleeping { asleep, .. }) = inner.slots.get_mut(key) {
                            asleep.deadline = Some(next);
                        }
                    }
                    None => {
                        if let Some(Slot::Sleeping { conn, asleep }) = inner.slots.remove(key) {
                            inner.sleeping -= 1;
                            due.push((asleep.callback, conn));
                        }
                    }
                }
            }
        }
        if !due.is_empty() {
            inner.shrink_if_empty();
        }
        due
    }

    /// Takes the DORMANT connections whose idle deadline passed out of the
    /// slab, into `idle`.
    fn expire_dormant(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        now: Millis,
        idle: &mut Aged<T::Dormant, W, C>,
    ) {
        while let Some((deadline, key)) = inner.dormant_deadlines.pop_due(now) {
            // A key reused since has a later deadline of its own.
            let current = match inner.slots.get(key) {
                Some(Slot::Dormant { deadline: d, .. }) => *d == deadline,
                Some(Slot::DormantCarrying { with, .. }) => with.rung == deadline,
                _ => false,
            };
            if current {
                if let Some(slot) = inner.remove(key) {
                    idle.push((slot, Rung::Dormant));
                }
            }
        }
    }

    /// Moves the PARKED connections whose due time passed to DORMANT, or
    /// into `idle` if their idle deadline passed too; returns how many
    /// went DORMANT, and the carrying ones that declined to
    /// ([`Carry::went_dormant`]), out of the slab.
    fn expire_parked(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        now: Millis,
        idle: &mut Aged<T::Dormant, W, C>,
    ) -> (usize, Vec<(T::Dormant, C)>) {
        let mut entered = 0;
        let mut refused = Vec::new();
        while let Some((due, key)) = inner.parked_deadlines.pop_due(now) {
            // A key reused since has a later deadline of its own (or the
            // same one, which has passed as well).
            let cell = match inner.slots.get(key) {
                Some(Slot::Parked { cell, .. }) => cell,
                Some(Slot::ParkedCarrying { with, .. }) => &with.rung,
                _ => continue,
            };
            let until = match cell.parked() {
                (Some(d), until) if d == due => until,
                _ => continue,
            };
            if until.is_some_and(|until| !before(now, until)) {
                if let Some(slot) = inner.remove(key) {
                    idle.push((slot, Rung::Parked));
                }
                continue;
            }
            // The cell goes: a DORMANT connection keeps its fd and state.
            let deadline = until.map_or(0, |until| inner.dormant_deadlines.push(until, key));
            let dormant = match inner.slots.remove(key) {
                Some(Slot::Parked { conn, .. }) => Slot::Dormant { conn, deadline },
                Some(Slot::ParkedCarrying { conn, with }) => {
                    let Carried {
                        ping, mut value, ..
                    } = *with;
                    if !value.went_dormant() {
                        refused.push((conn, value));
                        continue;
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
                None => continue,
            };
            inner.slots.put_back(key, dormant);
            entered += 1;
        }
        if !refused.is_empty() {
            inner.shrink_if_empty();
        }
        (entered, refused)
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
                Rung::Parked => n_parked += 1,
                Rung::Dormant => n_dormant += 1,
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
            let Some((rung, ends_at)) = inner
                .slots
                .get(key)
                .and_then(|slot| Some((slot.rung()?, slot.ends_at()?)))
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

    /// Writes the pings that are due (a small write, non-blocking, under
    /// the lock: the connection stays in its slot) and closes the
    /// connections whose answer is late, or whose socket did not take the
    /// ping; says what it closed in `closed`.
    fn ping(
        &self,
        inner: &mut Synced<T::Dormant, W, C>,
        now: Millis,
        closed: &mut Vec<(Rung, Closed, usize)>,
    ) {
        // At most 24 days (`Builder::http2_keep_alive_timeout`).
        let answer_within = millis(self.0.pings.answer_within);
        while let Some((due, key)) = inner.ping_deadlines.pop_due(now) {
            let Some((conn, rung, ping, value)) = inner.slots.get_mut(key).and_then(Slot::carrying)
            else {
                continue;
            };
            if *ping != Ping(due) {
                continue;
            }
            match T::send_dormant(conn, &value.ping()) {
                Ok(()) => {
                    let by = Ping::sent(now.wrapping_add(answer_within)).at();
                    *ping = Ping(inner.answer_deadlines.push(by, key));
                }
                Err(error) => {
                    debug!(%error, "keep-alive ping failed");
                    drop(inner.remove(key));
                    closed.push((rung, Closed::Failed, 1));
                }
            }
        }
        while let Some((by, key)) = inner.answer_deadlines.pop_due(now) {
            if !inner
                .slots
                .get(key)
                .is_some_and(|slot| slot.pings(Ping(by)))
            {
                continue;
            }
            if let Some((conn, rung, goodbye)) = inner.remove(key).and_then(Slot::into_goodbye) {
                debug!("keep-alive ping unanswered");
                closed.push((rung, Closed::Unanswered, 1));
                T::close_dormant(conn, &goodbye);
            }
        }
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

#[cfg(test)]
mod tests;
