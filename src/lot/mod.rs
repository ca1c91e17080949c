//! The parking lot: every connection's one registration, and where idle
//! connections wait without a task.
//!
//! The lot is a mechanism. It holds connections of one transport type `T`
//! (a [`Parkable`]: a stream that can become its fd plus a small state, and
//! back), keeps their deadlines, and reports what happens to them to the
//! [`Owner`] it was made with. It knows nothing of HTTP, of the server's
//! accounting or of the upgrade API: the owner decides what a woken
//! connection becomes and counts what the lot closes.
//!
//! # One registration for a connection's life
//!
//! The lot has no thread of its own. Its `mio::Poll`'s epoll fd is
//! registered with tokio (`AsyncFd`), and one task per lot drives it
//! ([`ParkingLot::drive`], in `driver.rs`, with the handling of events and
//! deadlines). Every connection is registered in that poll once, at
//! accept ([`ParkingLot::register`]), edge-triggered for reading (and for writing
//! once a write finds the socket full), and stays there until it closes: a
//! connection never moves between tokio's epoll and the lot's, so parking
//! and waking make no system call. One slab holds a slot per registered
//! connection, whatever it is doing:
//!
//! ```text
//!  slots: Slab<Slot>   Served(cell)                 a task serves it: events
//!                                                   set its readiness cell
//!                      Parked { conn, cell }    task-less; the cell keeps
//!                                               its deadlines and when it
//!                                               parked
//!                      Dormant { conn, deadline }   task-less, cell freed
//!                      ParkedCarrying, DormantCarrying
//!                                   the same, with what their protocol
//!                                   keeps (a sleeping HTTP/2 connection's
//!                                   facts), boxed with the rung's field
//!                      Sleeping { conn, asleep }  an idle upgraded stream:
//!                                   its callback and deadline, boxed
//!                      Lent(noted)  task-less or asleep, away for a socket
//!                                   call made without the lock; what came
//!                                   meanwhile is noted (`slots.rs`)
//!  deadlines           (deadline, key) in FIFO order, a queue per Timer:
//!                      Parked, Dormant, Ping, Answer, and Sleeper per
//!                      delay (every entry of a queue has the same delay)
//! ```
//!
//! While a task serves a connection, its transport reads and writes
//! through a [`Registration`]: the events the driver collects set the
//! connection's readiness [`Cell`] and wake the task (`ready.rs`).
//!
//! A connection parks ([`ParkingLot::park`]) only if its cell says no byte came
//! since its last read found the socket empty; the check and the change of
//! its slot happen under the lot's lock, which the driver also holds while
//! it acts on events, so an event is either seen by the check (the
//! connection stays with its task) or finds the slot PARKED (the lot wakes
//! it). When an event reports bytes (or the peer's close) for a task-less
//! connection, the driver makes its slot `Served` again with both sides
//! ready, so the first read and write of whatever serves it next reach the
//! socket (the events it missed while task-less went nowhere), and hands it
//! to [`Owner::woken`], after the batch and without the lock, with how long
//! it slept ([`Slept`]: the owner parks a connection that slept long again
//! as soon as it is quiet). An event that only reports room to write (the
//! ACK of the last response) leaves it asleep. A connection that carries
//! something for its protocol may not need waking at all: the lot reads
//! what came, if its transport can read in its parked form
//! ([`Parkable::read_dormant`]), and offers it to the protocol
//! ([`Carry::answer`]: a sleeping HTTP/2 connection answers PINGs there);
//! answered, the connection sleeps on, the reply written; otherwise it
//! wakes with the bytes read ([`Woke::unread`]). An event that reports the
//! peer's close asks the transport whether bytes came before it
//! ([`Parkable::peer_closed`], a one-byte peek for TCP): none means the
//! peer closed, and the fd is closed. Those reads, writes and peeks (and a
//! keep-alive ping, a sleeper's deadline, a message to a sleeper) are made
//! on the connection lent out of its slot, without the lock: a socket call
//! never holds up the lock that every park, wake and event takes.
//!
//! PARKED and DORMANT differ only in what they keep: a PARKED connection
//! keeps its readiness cell, so a wake within `dormant_after` allocates
//! nothing; at its `due` time the driver frees the cell (DORMANT), or
//! closes the connection if its idle deadline passed. DORMANT connections
//! are closed at their idle deadline. Deadlines are acted on in batches by
//! the driver, sleeping until the front deadline, or at least the lot's
//! slack; there is no timer per connection.
//!
//! Events come edge-triggered, so every one is acted on; an fd that became
//! readable before it was registered is reported on registration. A slot's
//! key may be reused as soon as its connection closes, so an event
//! collected before the close may reach the next occupant: every event is
//! a hint, checked against the socket by whoever acts on it (a read that
//! finds nothing, a peek), and costs at most a spurious wake.
//!
//! # Ends
//!
//! What a task-less connection carries may say when the connection ends
//! ([`Carry::ends_at`]: the owner's connection age). Ends come in no
//! order (the owner jitters ages); rather than a heap, whose entries would
//! outlive every connection that woke, the driver sweeps the slab for
//! carrying connections whose end passed every so often (`sweep_every`)
//! and closes them (after their goodbye).
//!
//! # Sleepers
//!
//! An upgraded stream, which tokio serves, can also sleep here with a
//! callback ([`ParkingLot::sleep`]): it leaves tokio, is registered for reading
//! until it wakes, and goes back to tokio. The callback type `W` is the
//! lot's second parameter, so that its owner stores its own (boxed)
//! callbacks as they are. When one turns readable the lot asks the
//! transport as above and calls the callback, exactly once, with the
//! stream's parked form ([`Wakeup`]): readable, closed by the peer, or shut
//! down; or with the error when the socket failed. A sleeper may have a
//! deadline, given as a delay (a WebSocket's keep-alive): when it passes,
//! the driver asks the callback, without the lock, what to do where the
//! stream sleeps ([`Callback::due`]: write a ping, and sleep until the next
//! deadline), or wakes it ([`Wakeup::Due`]). Delays are few, so a FIFO
//! queue per delay keeps their order without a heap. At shutdown
//! ([`ParkingLot::close_all`]) sleepers are handed back with
//! [`Wakeup::Shutdown`]. If the lot is dropped without being closed (the
//! runtime shut down), sleeping streams are closed and their callbacks
//! dropped uncalled.

mod contract;
mod driver;
mod queue;
mod ready;
mod relief;
mod slab;
mod slots;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Token};
use tokio::time::Instant;

use queue::{Clock, Timer, Timers, earliest};
pub(crate) use ready::Direction;
#[expect(
    unreachable_pub,
    reason = "named by the sealed `Parkable` and `Register`, which `Transport` reaches"
)]
pub use ready::Registration;
use ready::Table;
use slab::Slab;
use slots::{Carried, Ping, SleeperSlot, Slot, Synced};

#[expect(
    unreachable_pub,
    reason = "a supertrait of the sealed `Transport`, which users reach"
)]
pub use contract::Parkable;
pub(crate) use contract::{
    Answered, Callback, Carry, Closed, Due, Owner, Pings, Register, Rung, Slept, Turn, Wakeup,
    Woke, Wrote,
};

impl<T: Parkable, W: Callback<T>, C: Carry> Register for ParkingLot<T, W, C> {
    fn register(&self, fd: BorrowedFd<'_>) -> io::Result<Registration> {
        ParkingLot::register(self, fd)
    }
}

/// The lot of one `serve` call. Cloning is cheap: clones share the lot.
pub(crate) struct ParkingLot<T: Parkable, W, C>(Arc<Core<T, W, C>>);

impl<T: Parkable, W, C> Clone for ParkingLot<T, W, C> {
    fn clone(&self) -> Self {
        ParkingLot(self.0.clone())
    }
}

struct Core<T: Parkable, W, C> {
    registry: mio::Registry,
    /// How late the lot may act on a deadline (see [`ParkingLot::drive`]).
    slack: Duration,
    /// Carrying connections' keep-alive pings.
    pings: Pings,
    /// How often carrying connections are looked at for their end; `None`
    /// if none has one.
    sweep_every: Option<Duration>,
    inner: Mutex<Synced<T::Dormant, W, C>>,
    clock: Clock,
    /// A deadline queue went from empty to non-empty since the driver
    /// last looked: its timer may be too late. Set under the lock, with
    /// the driver's waker woken; read without it. (A `Notify` cost the
    /// driver its lock twice per batch of events.)
    new_front: AtomicBool,
    owner: Box<dyn Owner<T, C>>,
}

impl<T: Parkable, W, C> Core<T, W, C> {
    fn lock(&self) -> MutexGuard<'_, Synced<T::Dormant, W, C>> {
        // A panic while holding the lock leaves the slab consistent (every
        // step is a single insert, remove or replacement), so poisoning is
        // ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Parkable, W: Send + 'static, C: Send + 'static> Table for Core<T, W, C> {
    fn release(&self, key: u32) {
        let mut inner = self.lock();
        if let Some(Slot::Served(_)) = inner.slots.get(key) {
            inner.remove(key);
        }
    }

    fn watch_writes(&self, key: u32, fd: BorrowedFd<'_>) -> io::Result<()> {
        let raw = fd.as_raw_fd();
        let interest = Interest::READABLE | Interest::WRITABLE;
        (self.registry).reregister(&mut SourceFd(&raw), Token(key as usize), interest)
    }

    fn deregister(&self, key: u32, fd: BorrowedFd<'_>) -> io::Result<()> {
        let res = self.registry.deregister(&mut SourceFd(&fd.as_raw_fd()));
        self.release(key);
        res
    }
}

impl<T: Parkable, W: Callback<T>, C: Carry> ParkingLot<T, W, C> {
    /// A lot that reports to `owner` and may act on a deadline up to
    /// `slack` late, to act on many at once, pings carrying connections as
    /// `pings` says, and looks for those past their end every
    /// `sweep_every`. `registry` is that of the poll its driver runs
    /// ([`ParkingLot::drive`]).
    pub(crate) fn new(
        owner: Box<dyn Owner<T, C>>,
        slack: Duration,
        pings: Pings,
        sweep_every: Option<Duration>,
        registry: mio::Registry,
    ) -> Self {
        ParkingLot(Arc::new(Core {
            slack,
            pings,
            sweep_every,
            registry,
            inner: Mutex::new(Synced {
                slots: Slab::default(),
                next_sweep: None,
                deadlines: Timers::default(),
                missed: Vec::new(),
                sleeping: 0,
                closed: false,
                driver: None,
                spare_cells: Vec::new(),
            }),
            clock: Clock::new(Instant::now()),
            new_front: AtomicBool::new(false),
            owner,
        }))
    }

    /// Registers a new connection's fd, for its whole life: its transport
    /// reads and writes with the registration it gets, and dropping that
    /// frees the slot.
    pub(crate) fn register(&self, fd: BorrowedFd<'_>) -> io::Result<Registration> {
        let shared = &self.0;
        let (key, cell) = {
            let mut inner = shared.lock();
            if inner.closed {
                return Err(io::Error::other("the server is shutting down"));
            }
            let cell = inner.new_cell();
            let key = (inner.slots.insert(Slot::Served(cell.clone())))
                .map_err(|_| io::Error::other("parking lot full"))?;
            (key, cell)
        };
        // Outside the lock: no event can name the key before this.
        cell.set_registered();
        let interest = Interest::READABLE | Interest::WRITABLE;
        let raw = fd.as_raw_fd();
        if let Err(error) =
            (shared.registry).register(&mut SourceFd(&raw), Token(key as usize), interest)
        {
            shared.release(key);
            return Err(error);
        }
        Ok(Registration::new(key, cell, shared.clone()))
    }

    /// PARKED without a task, from `now`: the lot keeps `stream`'s parked
    /// form and what it `carries`, and hands them to [`Owner::woken`] when
    /// bytes arrive, with how long it slept. When it is [`Due`]: at
    /// `dormant_at` the lot moves it to DORMANT, at `idle_at` (if earlier)
    /// closes it; at `ping_at` it pings it (see
    /// [`Carry::ping`]; only a connection that carries something); past
    /// the end of what it carries ([`Carry::ends_at`]), a sweep closes it.
    /// Gives the stream back if a read may find bytes already, if its
    /// transport holds some, or if the lot is closed. The caller keeps
    /// counting the connection as held and parked until this returns `Ok`;
    /// from then on the lot reports what becomes of it.
    pub(crate) fn park(
        &self,
        stream: T,
        carries: Option<C>,
        now: Instant,
        due: Due,
    ) -> Result<(), (T, Option<C>)> {
        let Due {
            dormant_at,
            idle_at,
            ping_at,
        } = due;
        let shared = &*self.0;
        let mut inner = shared.lock();
        // Checked under the lock the driver acts on events with: an event
        // either shows here, or finds the slot parked.
        if inner.closed || stream.read_ready() {
            return Err((stream, carries));
        }
        let (conn, registration) = match stream.into_dormant() {
            Ok(parts) => parts,
            Err(stream) => return Err((stream, carries)),
        };
        let (key, cell) = registration.into_slot();
        let ends = carries.as_ref().and_then(Carry::ends_at).is_some();
        let idle = idle_at.map(|at| shared.clock.millis(at));
        let due = earliest(dormant_at.map(|at| shared.clock.millis(at)), idle);
        let mut front = false;
        let mut push = |inner: &mut Synced<_, _, _>, timer, at| {
            let (at, first) = inner.deadlines.push(timer, at, key);
            front |= first;
            at
        };
        let due = due.map(|due| push(&mut inner, Timer::Parked, due));
        let ping = match ping_at {
            Some(at) if carries.is_some() => {
                let at = Ping::due(shared.clock.millis(at)).at();
                Ping(push(&mut inner, Timer::Ping, at))
            }
            _ => Ping::OFF,
        };
        match inner.slots.get_mut(key) {
            Some(slot @ Slot::Served(_)) => {
                cell.park(shared.clock.millis(now), due, idle);
                *slot = match carries {
                    None => Slot::Parked { conn, cell },
                    Some(value) => Slot::ParkedCarrying {
                        conn,
                        with: Box::new(Carried {
                            rung: cell,
                            ping,
                            value,
                        }),
                    },
                };
            }
            // A registration's slot is served until it parks or closes.
            _ => unreachable!("a served connection's slot is not served"),
        }
        let sweep = match shared.sweep_every {
            Some(every) if ends && inner.next_sweep.is_none() => {
                let at = shared.clock.millis(now + every);
                inner.next_sweep = Some(at);
                true
            }
            _ => false,
        };
        if front || sweep {
            shared.new_front.store(true, Ordering::Release);
            let driver = inner.driver.clone();
            drop(inner);
            if let Some(driver) = driver {
                driver.wake();
            }
        }
        Ok(())
    }

    /// Closes every parked and dormant connection, hands every sleeper back
    /// with [`Wakeup::Shutdown`], and refuses new ones (shutdown, or the
    /// driver failed). Served connections are their tasks'.
    pub(crate) fn close_all(&self) {
        let shared = &*self.0;
        let mut inner = shared.lock();
        inner.closed = true;
        let (mut parked, mut dormant, mut sleepers) = (Vec::new(), Vec::new(), Vec::new());
        for key in 0..inner.slots.end() {
            // A lent connection is closed by its lender, who finds the
            // lot closed when it gives it back.
            if let Some(Slot::Served(_) | Slot::Lent(_)) | None = inner.slots.get(key) {
                continue;
            }
            match inner.slots.remove(key) {
                Some(Slot::Sleeping { conn, asleep }) => sleepers.push((conn, asleep.callback)),
                Some(slot) => {
                    if let Some((conn, rung, goodbye)) = slot.into_goodbye() {
                        match rung {
                            Rung::Dormant => dormant.push((conn, goodbye)),
                            // Task-less: never ACTIVE.
                            Rung::Parked | Rung::Active => parked.push((conn, goodbye)),
                        }
                    }
                }
                None => {}
            }
        }
        inner.sleeping = 0;
        inner.clear_deadlines();
        drop(inner);
        let (n_parked, n_dormant) = (parked.len(), dormant.len());
        for (conn, goodbye) in parked.into_iter().chain(dormant) {
            T::close_dormant(conn, &goodbye);
        }
        shared
            .owner
            .closed(Rung::Parked, Closed::Shutdown, n_parked);
        shared
            .owner
            .closed(Rung::Dormant, Closed::Shutdown, n_dormant);
        for (conn, callback) in sleepers {
            self.wake_sleeper(callback, Wakeup::Shutdown(conn));
        }
    }

    /// Puts a stream that left tokio to sleep until it is readable, its
    /// peer closes it, or the lot closes; then calls `callback`, exactly
    /// once, with the stream out of the lot's poll (see [`Wakeup`]). With
    /// `after`, the callback is also asked, that long from now, what to do
    /// where the stream sleeps ([`Callback::due`]). Returns the sleeper's
    /// key, or `None` if `callback` was called at once (the lot is closed,
    /// or the stream could not sleep).
    pub(crate) fn sleep(
        &self,
        conn: T::Dormant,
        callback: W,
        after: Option<Duration>,
    ) -> Option<u32> {
        let mut inner = self.0.lock();
        if inner.closed {
            drop(inner);
            callback.call(Wakeup::Shutdown(conn));
            return None;
        }
        let raw = conn.as_fd().as_raw_fd();
        let Some(key) = inner.slots.vacant_key() else {
            drop(inner);
            callback.call(Wakeup::Failed(io::Error::other("parking lot full")));
            return None;
        };
        // Registered while the lock is held: the driver cannot see the
        // event before the slab holds the stream, nor `close_all` take it
        // before it is registered.
        let token = Token(key as usize);
        if let Err(error) =
            (self.0.registry).register(&mut SourceFd(&raw), token, Interest::READABLE)
        {
            drop(inner);
            callback.call(Wakeup::Failed(error));
            return None;
        }
        let mut first = false;
        let deadline = after.map(|after| {
            let now = self.0.clock.millis(Instant::now());
            let after = queue::millis(after);
            let timer = Timer::Sleeper(after);
            let (deadline, front) = inner.deadlines.push(timer, now.wrapping_add(after), key);
            first = front;
            deadline
        });
        let asleep = Box::new(SleeperSlot { callback, deadline });
        let _ = inner.slots.insert(Slot::Sleeping { conn, asleep });
        inner.sleeping += 1;
        if first {
            // A new front, which the driver's timer does not know.
            self.0.new_front.store(true, Ordering::Release);
            let driver = inner.driver.clone();
            drop(inner);
            if let Some(driver) = driver {
                driver.wake();
            }
        }
        Some(key)
    }

    /// Runs `f` with the stream of the sleeper at `key`, where it sleeps,
    /// if `f` recognizes it by its callback (a key is reused once its
    /// sleeper wakes): `f`'s answer, or `None` if no sleeper is at `key`,
    /// or if it is lent out for another call (it is woken once back, as
    /// by [`wake_sleeper_at`](Self::wake_sleeper_at)). `f` runs without
    /// the lot's lock, on the sleeper lent out of its slot.
    #[cfg(feature = "ws")]
    pub(crate) fn with_sleeper<R>(
        &self,
        key: u32,
        f: impl FnOnce(&mut T::Dormant, &W) -> Option<R>,
    ) -> Option<R> {
        let mut inner = self.0.lock();
        match inner.slots.get_mut(key) {
            Some(Slot::Sleeping { .. }) => {}
            Some(Slot::Lent(lent)) => {
                lent.readable = true;
                return None;
            }
            _ => return None,
        }
        let mut slot = inner.lend(key)?;
        drop(inner);
        let answer = match &mut slot {
            Slot::Sleeping { conn, asleep } => f(conn, &asleep.callback),
            _ => None,
        };
        let mut inner = self.0.lock();
        let (lent, missed) = inner.give_back(key, slot);
        let woken = if inner.closed || lent.readable {
            match inner.remove(key) {
                Some(Slot::Sleeping { conn, asleep }) => {
                    inner.sleeping -= 1;
                    let woken = match inner.closed {
                        true => Wakeup::Shutdown(conn),
                        false => Wakeup::Readable(conn),
                    };
                    Some((asleep.callback, woken))
                }
                _ => None,
            }
        } else {
            None
        };
        let driver = missed.then(|| inner.driver.clone()).flatten();
        drop(inner);
        if let Some(driver) = driver {
            // Deadlines it missed while lent: due, which the driver's
            // timer does not know.
            self.0.new_front.store(true, Ordering::Release);
            driver.wake();
        }
        if let Some((callback, woken)) = woken {
            self.wake_sleeper(callback, woken);
        }
        answer
    }

    /// Wakes the sleeper at `key` as if bytes had arrived, if `is`
    /// recognizes its callback; `false` if no such sleeper is there (it
    /// woke already). A sleeper lent out for a call is woken once back.
    #[cfg(feature = "ws")]
    pub(crate) fn wake_sleeper_at(&self, key: u32, is: impl FnOnce(&W) -> bool) -> bool {
        let mut inner = self.0.lock();
        match inner.slots.get_mut(key) {
            Some(Slot::Sleeping { asleep, .. }) if is(&asleep.callback) => {}
            Some(Slot::Lent(lent)) => {
                lent.readable = true;
                return true;
            }
            _ => return false,
        }
        let Some(Slot::Sleeping { conn, asleep }) = inner.remove(key) else {
            return false;
        };
        inner.sleeping -= 1;
        drop(inner);
        self.wake_sleeper(asleep.callback, Wakeup::Readable(conn));
        true
    }

    /// How many streams sleep in the lot.
    pub(crate) fn sleeping(&self) -> usize {
        self.0.lock().sleeping
    }

    /// Takes a sleeper's stream out of the lot's poll and calls it back.
    fn wake_sleeper(&self, callback: W, woken: Wakeup<T::Dormant>) {
        if let Wakeup::Readable(conn)
        | Wakeup::Eof(conn)
        | Wakeup::Shutdown(conn)
        | Wakeup::Due(conn) = &woken
        {
            let raw = conn.as_fd().as_raw_fd();
            if let Err(error) = self.0.registry.deregister(&mut SourceFd(&raw)) {
                return callback.call(Wakeup::Failed(error));
            }
        }
        callback.call(woken);
    }
}
