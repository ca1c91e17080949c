//! The parking lot: where idle connections wait without a task, and
//! long-idle ones outside tokio.
//!
//! A PARKED HTTP/1 connection that carries nothing (no partial request, no
//! header clock running) waits here *task-less*: its `TcpStream` stays
//! registered with tokio (tokio's 256-byte registration), its task ends, and
//! a waker that names its slot in the `parked` slab stands in for the task.
//! After [`dormant_after`] it leaves tokio too: its fd moves into the lot's
//! DORMANT slab of 8-byte slots watched by one `mio::Poll`.
//!
//! # Task-less PARKED connections
//!
//! ```text
//!  parked: Vec<Parked>          Parked { TcpStream, Arc<SlotWaker>, due, idle }
//!  parked_deadlines: VecDeque   (due, slot) in FIFO order: every parked
//!                               connection has the same dormant_after and
//!                               idle timeout
//!  free_parked: Vec<u32>        reusable slot numbers
//! ```
//!
//! [`Lot::park`] polls the stream's readiness (`poll_read_ready`: tokio's
//! readiness flag, no system call) with the slot's waker while the lot is
//! locked, so a wake cannot be acted on before the slot holds the stream; a
//! stream already readable is given back and its task goes on. The waker ([`SlotWaker`], made once per slot
//! and reused) names a slot, not a connection: a wake is a hint, and the
//! slot is polled again before anything is done, so a late wake for an
//! earlier occupant costs one poll. On a wake the waker itself, on the
//! thread that turned tokio's I/O driver, polls the slot and hands a ready
//! stream to the server's [`OnWake`] (a new connection task, whose first
//! read finds the bytes, or the peer's close), or closes one whose
//! registration failed; when it cannot (the lot is locked, which is
//! also the case for a wake from a poll refused for want of coop budget,
//! or it runs outside the runtime) it queues the slot for the lot's task.
//! At its `due` time the lot's task moves the connection to DORMANT
//! (`into_std`, mio), or closes it if its idle deadline passed. The lot
//! counts these connections as parked and held; shutdown closes them with
//! the dormant ones. A large parked slab is freed when its last connection
//! leaves.
//!
//! ```text
//!  slots: Vec<Slot>       Slot { fd (4 B), idle deadline (4 B) }
//!  deadlines: VecDeque    (deadline, slot) in FIFO order: every dormant
//!                         connection has the same idle timeout, so the
//!                         front is always the next to expire
//!  free: Vec<u32>         reusable slot numbers
//! ```
//!
//! The lot has no thread of its own. The mio poll's epoll fd is registered
//! with tokio (`AsyncFd`), and one task per `serve` call drives it: when the
//! epoll fd turns readable, the task collects the events without blocking
//! and, for each ready fd,
//!
//! - if the event reports the peer's close (or an error), peeks one byte:
//!   0 bytes means the peer closed, and the fd is closed right there, tokio
//!   never sees it again;
//! - otherwise (bytes: no peek needed) hands the fd back to tokio
//!   (`TcpStream::from_std`) in a new connection task, which finds it
//!   readable at once.
//!
//! mio registers edge-triggered, so every event is acted on; an fd that
//! became readable before it was registered is reported on registration.
//! The same task closes connections whose idle deadline passed, sleeping
//! until the front deadline; there is no timer per connection.
//!
//! # Upgraded streams
//!
//! A protocol handler can put an idle upgraded stream to sleep here too
//! ([`upgrade::Lot::sleep`]). Those sit in a second slab, so that
//! keep-alive slots stay 8 bytes:
//!
//! ```text
//!  sleepers: Vec<Option<Sleeper>>   Sleeper { fd (4 B), Box<dyn Callback> (16 B) }: 24 B
//!  free_sleepers: Vec<u32>          plus the handler's boxed state
//! ```
//!
//! Their tokens have the top bit set. When one turns readable the lot
//! peeks a byte as for keep-alive connections, and in every case calls the
//! handler's callback, exactly once, in a new task: with the stream back in
//! tokio when bytes arrived or the peer closed, with the error when the
//! socket failed. They have no idle deadline (the protocol owns its
//! timeouts). At shutdown ([`Lot::close_all`]) they are handed back to
//! their callbacks as well, with [`Woken::Shutdown`]: the server does not
//! close upgraded streams, and their handler decides what to say. If the
//! lot is dropped without being closed (the runtime shut down), the
//! sleeping streams are closed and their callbacks dropped uncalled.
//!
//! [`dormant_after`]: crate::Builder::dormant_after
//! [`upgrade::Lot::sleep`]: crate::upgrade::Lot::sleep

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll as Ready, Wake, Waker};
use std::time::Duration;

use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token};
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::task::unconstrained;
use tokio::time::Instant;
use tracing::{debug, trace};

use crate::server::Held;
use crate::stats::Counters;
use crate::upgrade::{Callback, Upgraded, Woken};

/// Events collected per `epoll_wait`.
const EVENTS: usize = 256;

/// The token bit that marks a sleeping upgraded stream.
const SLEEPER: usize = 1 << (usize::BITS - 1);

/// Deadlines are kept as wrapping 32-bit milliseconds since the lot's
/// epoch; comparisons are correct while deadlines are less than ~24 days
/// apart, which `Builder::build` guarantees by bounding the idle timeout.
type Millis = u32;

struct Slot {
    stream: Option<MioStream>,
    deadline: Millis,
}

/// An upgraded stream asleep, with the handler to call when it wakes.
struct Sleeper {
    stream: MioStream,
    callback: Box<dyn Callback>,
}

/// Why a sleeper is woken.
enum Reason {
    Readable,
    Eof,
    Shutdown,
}

impl Sleeper {
    /// Takes the stream out of the lot's poll and hands it back to its
    /// handler.
    fn wake(self, reason: Reason, registry: &mio::Registry) {
        let Sleeper {
            mut stream,
            callback,
        } = self;
        match registry.deregister(&mut stream) {
            Ok(()) => call_back(stream, reason, callback),
            Err(error) => callback.call(Woken::Failed(error)),
        }
    }
}

/// Hands a stream that is in no poll back to tokio and calls its handler
/// (in a new task).
fn call_back(stream: MioStream, reason: Reason, callback: Box<dyn Callback>) {
    let stream = match TcpStream::from_std(std::net::TcpStream::from(stream)) {
        Ok(stream) => Upgraded::new(stream, bytes::Bytes::new()),
        Err(error) => return callback.call(Woken::Failed(error)),
    };
    callback.call(match reason {
        Reason::Readable => Woken::Readable(stream),
        Reason::Eof => Woken::Eof(stream),
        Reason::Shutdown => Woken::Shutdown(stream),
    });
}

/// A task-less PARKED connection: still registered with tokio, waiting
/// for readiness with its slot's waker instead of a task.
struct Parked {
    stream: Option<TcpStream>,
    /// Made once per slot and kept while the slot is reused.
    waker: Arc<SlotWaker>,
    /// When the lot acts on it: moves it to DORMANT, or closes it (idle).
    due: Millis,
    /// The idle deadline, if there is an idle timeout.
    idle: Option<Millis>,
}

/// The waker a task-less PARKED connection leaves in tokio's registration.
/// It names a slot, not a connection: a wake is a hint, and the lot polls
/// the slot again before acting on it, so a wake meant for an earlier
/// occupant of the slot costs one poll and nothing else.
struct SlotWaker {
    lot: Weak<Shared>,
    slot: u32,
    /// The slot is in the ready list (or about to be).
    queued: AtomicBool,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.queued.swap(true, SeqCst) {
            return;
        }
        let Some(shared) = self.lot.upgrade() else {
            return;
        };
        // Fast path, without the hop through the lot's task: act right
        // here, usually on the thread that turned tokio's I/O driver. Only
        // inside the runtime (the wake spawns a task), and only if the lot
        // is not locked: a wake from a poll the lot makes itself (its
        // coop budget spent) finds it locked and is queued.
        if let Some(on_wake) = shared.on_wake.get() {
            if tokio::runtime::Handle::try_current().is_ok() {
                if let Ok(inner) = shared.inner.try_lock() {
                    if let Some((stream, readable)) = take_woken(inner, self.slot) {
                        on_wake(stream, readable);
                    }
                    return;
                }
            }
        }
        shared
            .ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.slot);
        shared.parked_ready.notify_one();
    }
}

/// What the server does with a task-less PARKED connection the lot takes
/// out on a wake: `true` if it is readable (serve it in a new task: bytes
/// wait, or the peer closed it, which the task's first read finds), `false`
/// if it failed (close it). The connection no longer counts as parked, and
/// still counts as held.
pub(crate) type OnWake = Box<dyn Fn(TcpStream, bool) + Send + Sync>;

/// Whether wrapping millisecond `a` is before `b`.
fn before(a: Millis, b: Millis) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[derive(Default)]
struct Inner {
    slots: Vec<Slot>,
    free: Vec<u32>,
    deadlines: VecDeque<(Millis, u32)>,
    parked: Vec<Parked>,
    free_parked: Vec<u32>,
    parked_deadlines: VecDeque<(Millis, u32)>,
    sleepers: Vec<Option<Sleeper>>,
    free_sleepers: Vec<u32>,
    closed: bool,
}

/// A parked slab at most this long is kept when it empties.
const PARKED_KEEP: usize = 64;

impl Inner {
    /// Frees a slot of the parked slab. When the last connection leaves a
    /// large slab, the slab, its wakers and its queue are freed: otherwise
    /// a burst of parked connections that went DORMANT would leave its
    /// high-water mark (~90 bytes a slot) behind. Wakes still queued for
    /// the old slots find no slot, or a new occupant that the lot polls
    /// again.
    fn free_parked_slot(&mut self, slot: u32) {
        self.free_parked.push(slot);
        if self.free_parked.len() == self.parked.len() && self.parked.len() > PARKED_KEEP {
            self.parked = Vec::new();
            self.free_parked = Vec::new();
            // Entries left in the queue name free slots: the lot skips
            // them, but they no longer exist.
            self.parked_deadlines = VecDeque::new();
        }
    }

    /// Closes the connection in `slot`, if any; returns whether there was
    /// one.
    fn close(&mut self, slot: u32) -> bool {
        // Dropping the fd closes it, which also removes it from the epoll
        // set.
        let had = self.slots[slot as usize].stream.take().is_some();
        if had {
            self.free.push(slot);
        }
        had
    }
}

/// The lot of one `serve` call. Cloning is cheap: clones share the lot
/// (upgraded streams' handlers hold one to sleep again).
#[derive(Clone)]
pub(crate) struct Lot(Arc<Shared>);

struct Shared {
    registry: mio::Registry,
    inner: Mutex<Inner>,
    epoch: Instant,
    /// Woken when a deadline queue goes from empty to non-empty.
    new_front: Notify,
    /// Slots of task-less PARKED connections whose waker was woken.
    ready: Mutex<Vec<u32>>,
    /// Woken when `ready` gets a slot.
    parked_ready: Notify,
    /// Set once by the server, before any connection parks task-less.
    on_wake: OnceLock<OnWake>,
}

impl Lot {
    /// A lot and the poll its driver runs.
    pub(crate) fn new() -> io::Result<(Lot, Poll)> {
        let poll = Poll::new()?;
        let lot = Lot(Arc::new(Shared {
            registry: poll.registry().try_clone()?,
            inner: Mutex::default(),
            epoch: Instant::now(),
            new_front: Notify::new(),
            ready: Mutex::default(),
            parked_ready: Notify::new(),
            on_wake: OnceLock::new(),
        }));
        Ok((lot, poll))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the slab consistent (every
        // step is a single push, pop or take), so poisoning is ignored.
        self.0.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn millis(&self, at: Instant) -> Millis {
        // Truncation is the wrapping clock.
        at.saturating_duration_since(self.0.epoch).as_millis() as Millis
    }

    /// Moves a task-less PARKED connection out of tokio into the lot's
    /// poll (DORMANT), to be closed at `deadline` if no byte arrives
    /// before. Returns false if the connection was closed instead: the lot
    /// is closed (shutdown).
    fn enter(
        &self,
        stream: TcpStream,
        deadline: Option<Millis>,
        stats: &Counters,
    ) -> io::Result<bool> {
        let mut stream = MioStream::from_std(stream.into_std()?);
        let mut inner = self.lock();
        if inner.closed {
            return Ok(false);
        }
        let slot = match inner.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(inner.slots.len())
                    .map_err(|_| io::Error::other("parking lot full"))?;
                inner.slots.push(Slot {
                    stream: None,
                    deadline: 0,
                });
                slot
            }
        };
        // Registered while the lock is held: the driver cannot see the
        // event before the slot holds the stream.
        if let Err(e) =
            self.0
                .registry
                .register(&mut stream, Token(slot as usize), Interest::READABLE)
        {
            inner.free.push(slot);
            return Err(e);
        }
        let deadline = deadline.map(|mut d| {
            // Keep the queue in order even if two connections raced here.
            if let Some(&(back, _)) = inner.deadlines.back() {
                if before(d, back) {
                    d = back;
                }
            }
            d
        });
        inner.slots[slot as usize] = Slot {
            stream: Some(stream),
            deadline: deadline.unwrap_or(0),
        };
        if let Some(d) = deadline {
            inner.deadlines.push_back((d, slot));
            if inner.deadlines.len() == 1 {
                self.0.new_front.notify_one();
            }
        }
        stats.dormant.fetch_add(1, Relaxed);
        stats.dormancies.fetch_add(1, Relaxed);
        Ok(true)
    }

    /// PARKED without a task: keeps `stream` in tokio, with a waker that
    /// tells the lot when it turns readable; the lot then hands it to a new
    /// connection task. At `dormant_at` the lot moves it to DORMANT, at
    /// `idle_at` (if earlier) closes it. Gives the stream back if it is
    /// readable already (or closed, or failed: the caller's task finds out)
    /// or the lot is closed. The caller keeps counting the connection as
    /// held and parked until this returns `Ok`; from then on the lot does.
    pub(crate) fn park(
        &self,
        stream: TcpStream,
        dormant_at: Option<Instant>,
        idle_at: Option<Instant>,
    ) -> Result<(), TcpStream> {
        if self.0.on_wake.get().is_none() {
            return Err(stream);
        }
        let mut inner = self.lock();
        if inner.closed {
            return Err(stream);
        }
        let slot = match inner.free_parked.pop() {
            Some(slot) => slot,
            None => {
                let Ok(slot) = u32::try_from(inner.parked.len()) else {
                    return Err(stream);
                };
                let waker = Arc::new(SlotWaker {
                    lot: Arc::downgrade(&self.0),
                    slot,
                    queued: AtomicBool::new(false),
                });
                inner.parked.push(Parked {
                    stream: None,
                    waker,
                    due: 0,
                    idle: None,
                });
                slot
            }
        };
        // Polled while the lock is held: a wake cannot be acted on before
        // the slot holds the stream. A poll refused for want of coop budget
        // wakes the waker at once, and the lot polls again.
        let waker = Waker::from(inner.parked[slot as usize].waker.clone());
        if poll_readable(&stream, &waker).is_ready() {
            inner.free_parked.push(slot);
            return Err(stream);
        }
        let idle = idle_at.map(|at| self.millis(at));
        let due = match (dormant_at.map(|at| self.millis(at)), idle) {
            (Some(d), Some(i)) => Some(if before(i, d) { i } else { d }),
            (d, i) => d.or(i),
        };
        let due = due.map(|mut d| {
            // Keep the queue in order even if two connections raced here.
            if let Some(&(back, _)) = inner.parked_deadlines.back() {
                if before(d, back) {
                    d = back;
                }
            }
            d
        });
        let entry = &mut inner.parked[slot as usize];
        entry.stream = Some(stream);
        entry.due = due.unwrap_or(0);
        entry.idle = idle;
        if let Some(d) = due {
            inner.parked_deadlines.push_back((d, slot));
            if inner.parked_deadlines.len() == 1 {
                self.0.new_front.notify_one();
            }
        }
        Ok(())
    }

    /// Sets what the server does with woken task-less PARKED connections;
    /// connections park task-less only once it is set.
    pub(crate) fn set_on_wake(&self, on_wake: OnWake) {
        let _ = self.0.on_wake.set(on_wake);
    }

    /// Acts on the queued wakes of task-less PARKED connections (see
    /// [`OnWake`]). `ready` is a buffer to swap with the shared list. Must
    /// run unconstrained by tokio's coop budget (see [`Lot::park`]).
    fn wake_parked(&self, ready: &mut Vec<u32>) {
        std::mem::swap(
            ready,
            &mut *self.0.ready.lock().unwrap_or_else(|e| e.into_inner()),
        );
        let Some(on_wake) = self.0.on_wake.get() else {
            return;
        };
        for slot in ready.drain(..) {
            if let Some((stream, readable)) = take_woken(self.lock(), slot) {
                on_wake(stream, readable);
            }
        }
    }

    /// Closes every dormant connection, hands every sleeping upgraded
    /// stream back to its handler with [`Woken::Shutdown`], and refuses new
    /// ones (shutdown, or the driver failed). Needs a tokio runtime.
    pub(crate) fn close_all(&self, stats: &Counters, held: &Held) {
        let mut inner = self.lock();
        inner.closed = true;
        let closed = inner.slots.iter().filter(|s| s.stream.is_some()).count();
        inner.slots.clear();
        inner.free.clear();
        inner.deadlines.clear();
        let parked = std::mem::take(&mut inner.parked);
        inner.free_parked.clear();
        inner.parked_deadlines.clear();
        let sleepers = std::mem::take(&mut inner.sleepers);
        inner.free_sleepers.clear();
        drop(inner);
        let closed_parked = parked.iter().filter(|p| p.stream.is_some()).count();
        // Dropping the streams closes them.
        drop(parked);
        stats.dormant.fetch_sub(closed, Relaxed);
        stats.parked.fetch_sub(closed_parked, Relaxed);
        held.release(closed + closed_parked);
        for sleeper in sleepers.into_iter().flatten() {
            sleeper.wake(Reason::Shutdown, &self.0.registry);
        }
    }

    /// Puts an upgraded stream to sleep until it is readable, its peer
    /// closes it, or the lot closes; then calls `callback`, exactly once, in
    /// a new task. Needs a tokio runtime.
    pub(crate) fn sleep(&self, stream: TcpStream, callback: Box<dyn Callback>) {
        let mut stream = match stream.into_std() {
            Ok(stream) => MioStream::from_std(stream),
            Err(error) => return callback.call(Woken::Failed(error)),
        };
        let mut inner = self.lock();
        if inner.closed {
            drop(inner);
            return call_back(stream, Reason::Shutdown, callback);
        }
        let slot = match inner.free_sleepers.pop() {
            Some(slot) => slot as usize,
            None => {
                inner.sleepers.push(None);
                inner.sleepers.len() - 1
            }
        };
        // Registered while the lock is held: the driver cannot see the
        // event before the slot holds the stream. Slot numbers stay below
        // `SLEEPER`: each one holds an open fd.
        let token = Token(SLEEPER | slot);
        if let Err(error) = self
            .0
            .registry
            .register(&mut stream, token, Interest::READABLE)
        {
            inner.free_sleepers.push(slot as u32);
            drop(inner);
            return callback.call(Woken::Failed(error));
        }
        inner.sleepers[slot] = Some(Sleeper { stream, callback });
    }

    /// How many upgraded streams sleep in the lot.
    pub(crate) fn sleeping(&self) -> usize {
        let inner = self.lock();
        inner.sleepers.len() - inner.free_sleepers.len()
    }

    /// Acts on one readiness event of a sleeping upgraded stream.
    fn wake_sleeper(&self, slot: usize) {
        let mut inner = self.lock();
        let Some(Some(sleeper)) = inner.sleepers.get(slot) else {
            return;
        };
        let reason = match sleeper.stream.peek(&mut [0u8; 1]) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Ok(0) => Reason::Eof,
            Ok(_) => Reason::Readable,
            Err(error) => {
                let Some(sleeper) = inner.sleepers[slot].take() else {
                    return;
                };
                inner.free_sleepers.push(slot as u32);
                drop(inner);
                // Dropping the stream closes it.
                return sleeper.callback.call(Woken::Failed(error));
            }
        };
        let Some(sleeper) = inner.sleepers[slot].take() else {
            return;
        };
        inner.free_sleepers.push(slot as u32);
        drop(inner);
        sleeper.wake(reason, &self.0.registry);
    }

    /// Acts on one readiness event; returns the stream if it is a
    /// keep-alive connection going back to tokio (still counted as held:
    /// the caller adopts it). `closing`: the event reports the peer's close
    /// or an error.
    fn on_ready(
        &self,
        token: usize,
        closing: bool,
        stats: &Counters,
        held: &Held,
    ) -> Option<TcpStream> {
        if token & SLEEPER != 0 {
            self.wake_sleeper(token & !SLEEPER);
            return None;
        }
        let slot = token;
        let mut inner = self.lock();
        let entry = inner.slots.get_mut(slot)?;
        let stream = entry.stream.as_ref()?;
        // An event without the peer's close means bytes: back to tokio
        // without a peek, the new task reads them. With the close, a peek
        // tells bytes sent before it (serve them) from none (close the fd
        // here, never registering it with tokio again).
        match closing.then(|| stream.peek(&mut [0u8; 1])) {
            None | Some(Ok(1..)) => {}
            Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Some(res) => {
                trace!(?res, "dormant connection closed by peer");
                inner.close(slot as u32);
                drop(inner);
                stats.dormant.fetch_sub(1, Relaxed);
                stats.lot_closes.fetch_add(1, Relaxed);
                held.release(1);
                return None;
            }
        }
        let mut stream = entry.stream.take()?;
        inner.free.push(slot as u32);
        drop(inner);
        stats.dormant.fetch_sub(1, Relaxed);
        stats.lot_wakes.fetch_add(1, Relaxed);
        if let Err(error) = self.0.registry.deregister(&mut stream) {
            debug!(%error, "leaving the lot failed");
            held.release(1);
            return None;
        }
        match TcpStream::from_std(std::net::TcpStream::from(stream)) {
            Ok(stream) => Some(stream),
            Err(error) => {
                debug!(%error, "back into tokio failed");
                held.release(1);
                None
            }
        }
    }

    /// Closes the connections whose deadline passed and moves task-less
    /// PARKED ones whose dormant deadline passed to DORMANT; returns how
    /// long until the next deadline.
    fn expire(&self, now: Instant, stats: &Counters, held: &Held) -> Option<Duration> {
        let now = self.millis(now);
        let mut closed = 0;
        let next = self.expire_locked(now, &mut closed);
        stats.dormant.fetch_sub(closed, Relaxed);
        stats.idle_timeouts.fetch_add(closed as u64, Relaxed);
        held.release(closed);
        let mut moves = Vec::new();
        let mut closes = Vec::new();
        let next_parked = self.expire_parked_locked(now, &mut moves, &mut closes);
        let (n_moves, n_closes) = (moves.len(), closes.len());
        stats.parked.fetch_sub(n_moves + n_closes, Relaxed);
        stats.idle_timeouts.fetch_add(n_closes as u64, Relaxed);
        // Dropping the streams closes them.
        drop(closes);
        let mut failed = n_closes;
        for (stream, idle) in moves {
            match self.enter(stream, idle, stats) {
                Ok(true) => {}
                Ok(false) => failed += 1,
                Err(error) => {
                    debug!(%error, "entering the parking lot failed");
                    failed += 1;
                }
            }
        }
        held.release(failed);
        // A move that made the dormant queue non-empty woke `new_front`, so
        // the driver looks again.
        match (next, next_parked) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn expire_locked(&self, now: Millis, closed: &mut usize) -> Option<Duration> {
        let mut inner = self.lock();
        while let Some(&(deadline, slot)) = inner.deadlines.front() {
            let left = deadline.wrapping_sub(now) as i32;
            if left > 0 {
                return Some(Duration::from_millis(left as u64));
            }
            inner.deadlines.pop_front();
            // A slot reused since has a later deadline of its own.
            let same = inner.slots[slot as usize].deadline == deadline;
            if same && inner.close(slot) {
                *closed += 1;
            }
        }
        None
    }

    /// Takes out the task-less PARKED connections whose deadline passed:
    /// into `closes` if their idle deadline passed, into `moves` (with
    /// their idle deadline) to go DORMANT otherwise.
    fn expire_parked_locked(
        &self,
        now: Millis,
        moves: &mut Vec<(TcpStream, Option<Millis>)>,
        closes: &mut Vec<TcpStream>,
    ) -> Option<Duration> {
        let mut inner = self.lock();
        while let Some(&(due, slot)) = inner.parked_deadlines.front() {
            let left = due.wrapping_sub(now) as i32;
            if left > 0 {
                return Some(Duration::from_millis(left as u64));
            }
            inner.parked_deadlines.pop_front();
            let Some(entry) = inner.parked.get_mut(slot as usize) else {
                continue;
            };
            // A slot reused since has a later deadline of its own (or the
            // same one, which has passed as well).
            if entry.due != due {
                continue;
            }
            let Some(stream) = entry.stream.take() else {
                continue;
            };
            let idle = entry.idle;
            inner.free_parked_slot(slot);
            if idle.is_some_and(|i| !before(now, i)) {
                closes.push(stream);
            } else {
                moves.push((stream, idle));
            }
        }
        None
    }
}

/// Polls the task-less PARKED connection in `slot` after a wake; takes it
/// out if it is readable (`true`) or failed (`false`).
fn take_woken(mut inner: MutexGuard<'_, Inner>, slot: u32) -> Option<(TcpStream, bool)> {
    let entry = inner.parked.get_mut(slot as usize)?;
    // Cleared before the poll: a wake from here on queues the slot again.
    entry.waker.queued.store(false, SeqCst);
    let stream = entry.stream.as_ref()?;
    let waker = Waker::from(entry.waker.clone());
    let Ready::Ready(res) = poll_readable(stream, &waker) else {
        return None;
    };
    let stream = entry.stream.take()?;
    inner.free_parked_slot(slot);
    drop(inner);
    if let Err(error) = &res {
        trace!(%error, "task-less parked connection failed");
    }
    Some((stream, res.is_ok()))
}

/// Polls the readiness of a task-less PARKED connection: tokio's flag, set
/// by its I/O driver when bytes or the peer's close arrive. Unlike a peek,
/// which made a system call on every wake to tell bytes from a close, it
/// leaves that to the new task's first read, which happens anyway.
/// `Pending` leaves `waker` in tokio's registration.
///
/// The flag is clear when a connection parks: it parks only after hyper's
/// last read found the socket empty, and tokio clears the flag on that
/// read. A flag set since then means bytes (or a close) arrived.
fn poll_readable(stream: &TcpStream, waker: &Waker) -> Ready<io::Result<()>> {
    stream.poll_read_ready(&mut Context::from_waker(waker))
}

/// Runs the lot until shutdown: hands ready connections to `respawn`,
/// closes those the peer closed or whose idle deadline passed.
pub(crate) async fn drive(
    lot: &Lot,
    poll: Poll,
    stats: &Counters,
    held: &Held,
    respawn: impl Fn(TcpStream),
) -> io::Result<()> {
    // Deprecated in tokio 1.54 because an arbitrary `AsRawFd` type might
    // close or swap its fd while registered; `mio::Poll` owns its epoll fd
    // for its whole life and always returns that one, which is the
    // condition the `unsafe` replacement asks callers to promise.
    #[allow(deprecated)]
    let mut poll = AsyncFd::with_interest(poll, tokio::io::Interest::READABLE)?;
    let mut events = Events::with_capacity(EVENTS);
    let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    let mut ready = Vec::new();
    loop {
        // Unconstrained: the readiness polls of task-less PARKED
        // connections must not be refused for want of coop budget (a
        // refused poll wakes the slot again, and this task would spin).
        let next = unconstrained(async { lot.expire(Instant::now(), stats, held) }).await;
        if let Some(next) = next {
            timer.as_mut().reset(Instant::now() + next);
        }
        tokio::select! {
            guard = poll.readable_mut() => {
                let mut guard = guard?;
                events.clear();
                match guard.get_inner_mut().poll(&mut events, Some(Duration::ZERO)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
                // A full batch may have left events behind: look again
                // before waiting for the next edge.
                if events.iter().count() < EVENTS {
                    guard.clear_ready();
                }
                for event in events.iter() {
                    let closing = event.is_read_closed() || event.is_error();
                    if let Some(stream) = lot.on_ready(event.token().0, closing, stats, held) {
                        respawn(stream);
                    }
                }
            }
            () = lot.0.parked_ready.notified() => {
                unconstrained(async { lot.wake_parked(&mut ready) }).await;
            }
            () = &mut timer, if next.is_some() => {}
            // Also with a timer set: a task-less PARKED connection's
            // deadline may come before the dormant front.
            () = lot.0.new_front.notified() => {}
        }
    }
}
