//! The parking lot: where idle connections wait without a task, and
//! long-idle ones outside tokio.
//!
//! The lot is a mechanism. It holds connections of one transport type `T`
//! (a [`Parkable`]: a tokio-registered stream that can leave tokio as an fd
//! plus a small state, and come back), keeps their deadlines, and reports
//! what happens to them to the [`Owner`] it was made with. It knows nothing
//! of HTTP, of the server's accounting or of the upgrade API: the owner
//! decides what a woken connection becomes and counts what the lot closes.
//!
//! # Task-less PARKED connections
//!
//! ```text
//!  parked: Slab<Parked>       Parked { T, due, idle }: still registered with tokio
//!  wakers: Vec<Arc<SlotWaker>> one per key, made once and reused
//!  parked_deadlines           (due, key) in FIFO order: every parked connection
//!                             has the same dormant_after and idle timeout
//! ```
//!
//! [`Lot::park`] polls the stream's readiness (`poll_read_ready`: tokio's
//! readiness flag, no system call) with the key's waker while the lot is
//! locked, so a wake cannot be acted on before the slab holds the stream; a
//! stream already readable is given back and its task goes on. The waker
//! ([`SlotWaker`]) names a key, not a connection: a wake is a hint, and the
//! key is polled again before anything is done, so a late wake for an
//! earlier occupant costs one poll. On a wake the waker itself, on the
//! thread that turned tokio's I/O driver, polls the key and hands a ready
//! stream to [`Owner::woken`]; when it cannot (the lot is locked, which is
//! also the case for a wake from a poll refused for want of coop budget,
//! or it runs outside the runtime) it queues the key for the lot's task.
//! At its `due` time the lot's task moves the connection to DORMANT, or
//! closes it if its idle deadline passed. A large parked slab is freed when
//! its last connection leaves.
//!
//! # DORMANT connections
//!
//! ```text
//!  dormant: Slab<Dormant>     Dormant { T::Dormant (an fd, 4 B for TCP and Unix
//!                             sockets), deadline (4 B) }: 8 B a connection
//!  dormant_deadlines          (deadline, key) in FIFO order
//! ```
//!
//! The lot has no thread of its own. Its `mio::Poll`'s epoll fd is
//! registered with tokio (`AsyncFd`), and one task per lot drives it
//! ([`Lot::drive`]): when the epoll fd turns readable, the task collects
//! the events without blocking and, for each ready fd,
//!
//! - if the event reports the peer's close (or an error), asks the
//!   transport whether bytes came before the close ([`Parkable::peer_closed`],
//!   a one-byte peek for TCP); none means the peer closed, and the fd is
//!   closed right there, tokio never sees it again. A transport that cannot
//!   tell without reading is handed back, and its first read finds out;
//! - otherwise (bytes: no peek needed) hands the connection back to tokio
//!   ([`Parkable::from_dormant`]) through [`Owner::woken`].
//!
//! mio registers edge-triggered, so every event is acted on; an fd that
//! became readable before it was registered is reported on registration.
//! The same task closes connections whose idle deadline passed, sleeping
//! until the front deadline, or at least the lot's slack (deadlines are
//! acted on in batches, see [`Lot::drive`]); there is no timer per
//! connection.
//!
//! # Sleepers
//!
//! A stream can also sleep here with a callback ([`Lot::sleep`]), as idle
//! upgraded streams do; the callback type `W` is the lot's second
//! parameter, so that its owner stores its own (boxed) callbacks as they
//! are. Those sit in a third slab, so that keep-alive slots
//! stay 8 bytes:
//!
//! ```text
//!  sleepers: Slab<Sleeper>    Sleeper { T::Dormant, W }: 24 B for TCP with a boxed callback
//! ```
//!
//! Their tokens have the top bit set. When one turns readable the lot
//! asks the transport as above and calls the callback, exactly once, with
//! the stream back in tokio ([`Woke`]): readable, closed by the peer, or
//! shut down; or with the error when the socket failed. They have no
//! deadline. At shutdown ([`Lot::close_all`]) they are handed back with
//! [`Woke::Shutdown`]. If the lot is dropped without being closed (the
//! runtime shut down), sleeping streams are closed and their callbacks
//! dropped uncalled.

mod deadlines;
mod slab;

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll as Ready, Wake, Waker};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use tokio::task::unconstrained;
use tokio::time::Instant;
use tracing::{debug, trace};

use deadlines::{Clock, Deadlines, Millis, before, earliest};
use slab::Slab;

/// Events collected per `epoll_wait`.
const EVENTS: usize = 256;

/// The token bit that marks a sleeper.
const SLEEPER: usize = 1 << (usize::BITS - 1);

/// A parked slab at most this long is kept when it empties.
const PARKED_KEEP: usize = 64;

/// What the lot needs of the connections it holds: a transport's stream.
pub trait Parkable: Send + Sync + Sized + 'static {
    /// The connection outside tokio: its fd and whatever state the
    /// transport keeps beside it (nothing, for plain sockets).
    type Dormant: AsFd + Send + 'static;

    /// tokio's readiness flag: `Ready` once bytes (or the peer's close)
    /// arrived; `Pending` leaves the waker in tokio's registration. No
    /// system call.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Ready<io::Result<()>>;

    /// Leaves tokio.
    fn into_dormant(self) -> io::Result<Self::Dormant>;

    /// Comes back into tokio.
    fn from_dormant(dormant: Self::Dormant) -> io::Result<Self>;

    /// After an event that may report the peer's close: `Ok(true)` if the
    /// peer closed with nothing left to read, `Ok(false)` if bytes wait,
    /// `Err(WouldBlock)` if nothing happened after all. `None` if the
    /// transport cannot tell without reading.
    fn peer_closed(dormant: &Self::Dormant) -> Option<io::Result<bool>>;

    /// Closes a connection at shutdown, saying goodbye if the transport
    /// has a way to (TLS: `close_notify`). Best effort, never waits.
    fn close_dormant(dormant: Self::Dormant) {
        drop(dormant);
    }

    /// [`close_dormant`](Self::close_dormant) for a connection still in
    /// tokio.
    fn close(self) {
        drop(self);
    }
}

/// Where a connection waited in the lot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rung {
    /// Task-less, still registered with tokio.
    Parked,
    /// Outside tokio.
    Dormant,
}

/// Why the lot closed connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// The peer closed the connection (or reset it).
    ByPeer,
    /// The idle deadline passed.
    Idle,
    /// The socket, or moving it between tokio and the lot, failed.
    Failed,
    /// [`Lot::close_all`], or the lot was closed when the connection came.
    Shutdown,
}

/// What the lot reports to whoever made it. Called without the lot's lock
/// held, from the lot's task or from the thread that woke a connection.
pub(crate) trait Owner<T>: Send + Sync + 'static {
    /// A connection turned readable (bytes, or the peer's close, which its
    /// first read finds): the lot no longer holds it.
    fn woken(&self, conn: T, from: Rung);
    /// The lot closed `n` connections that waited on `from`.
    fn closed(&self, from: Rung, why: Closed, n: usize);
    /// `n` connections moved from PARKED to DORMANT.
    fn went_dormant(&self, n: usize);
}

/// Why a sleeper's callback is called; carries the stream back into tokio.
#[derive(Debug)]
pub(crate) enum Woke<T> {
    Readable(T),
    /// The peer closed its side, with nothing left to read.
    Eof(T),
    Shutdown(T),
    Failed(io::Error),
}

/// A sleeper's callback, called exactly once.
pub(crate) trait Wakeup<T>: Send + 'static {
    fn call(self, woke: Woke<T>);
}

/// A task-less PARKED connection.
struct Parked<T> {
    stream: T,
    /// When the lot acts on it: moves it to DORMANT, or closes it (idle).
    due: Option<Millis>,
    /// The idle deadline, if there is an idle timeout.
    idle: Option<Millis>,
}

/// A DORMANT connection: 8 bytes for a plain socket.
struct Dormant<D> {
    fd: D,
    /// The idle deadline; meaningless without an idle timeout.
    deadline: Millis,
}

/// A stream asleep, with the callback to call when it wakes.
struct Sleeper<T: Parkable, W> {
    fd: T::Dormant,
    callback: W,
}

/// The waker a task-less PARKED connection leaves in tokio's registration.
/// It names a key, not a connection: a wake is a hint, and the lot polls
/// the key again before acting on it, so a wake meant for an earlier
/// occupant costs one poll and nothing else.
struct SlotWaker<T: Parkable, W> {
    lot: Weak<Shared<T, W>>,
    key: u32,
    /// The key is in the ready list (or about to be).
    queued: AtomicBool,
}

impl<T: Parkable, W: Wakeup<T>> Wake for SlotWaker<T, W> {
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
        // inside the runtime (the owner spawns a task), and only if the lot
        // is not locked: a wake from a poll the lot makes itself (its coop
        // budget spent) finds it locked and is queued.
        if tokio::runtime::Handle::try_current().is_ok() {
            if let Ok(inner) = shared.inner.try_lock() {
                shared.take_woken(inner, self.key);
                return;
            }
        }
        shared
            .ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.key);
        shared.parked_ready.notify_one();
    }
}

struct Inner<T: Parkable, W> {
    parked: Slab<Parked<T>>,
    /// `wakers[key]` is the waker of parked key `key`.
    wakers: Vec<Arc<SlotWaker<T, W>>>,
    parked_deadlines: Deadlines,
    dormant: Slab<Dormant<T::Dormant>>,
    dormant_deadlines: Deadlines,
    sleepers: Slab<Sleeper<T, W>>,
    closed: bool,
}

impl<T: Parkable, W> Inner<T, W> {
    /// Takes out the parked connection at `key`. When the last connection
    /// leaves a large slab, the slab, its wakers and its queue are freed:
    /// otherwise a burst of parked connections that went DORMANT would
    /// leave its high-water mark (~90 bytes a key) behind. Wakes still
    /// queued for the old keys find nothing, or a new occupant that the
    /// lot polls again.
    fn remove_parked(&mut self, key: u32) -> Option<Parked<T>> {
        let parked = self.parked.remove(key)?;
        if self.parked.shrink_if_empty(PARKED_KEEP) {
            self.wakers = Vec::new();
            // Entries left in the queue name vacant keys.
            self.parked_deadlines.clear();
        }
        Some(parked)
    }
}

/// The lot of one `serve` call. Cloning is cheap: clones share the lot.
pub(crate) struct Lot<T: Parkable, W>(Arc<Shared<T, W>>);

impl<T: Parkable, W> Clone for Lot<T, W> {
    fn clone(&self) -> Self {
        Lot(self.0.clone())
    }
}

struct Shared<T: Parkable, W> {
    registry: mio::Registry,
    /// How late the lot may act on a deadline (see [`Lot::drive`]).
    slack: Duration,
    inner: Mutex<Inner<T, W>>,
    clock: Clock,
    /// Woken when a deadline queue goes from empty to non-empty.
    new_front: Notify,
    /// Keys of task-less PARKED connections whose waker was woken.
    ready: Mutex<Vec<u32>>,
    /// Woken when `ready` gets a key.
    parked_ready: Notify,
    owner: Box<dyn Owner<T>>,
}

impl<T: Parkable, W: Wakeup<T>> Shared<T, W> {
    fn lock(&self) -> MutexGuard<'_, Inner<T, W>> {
        // A panic while holding the lock leaves the slabs consistent (every
        // step is a single insert, remove or push), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Polls the task-less PARKED connection at `key` after a wake, and
    /// hands it to the owner if it is readable, or closes it if it failed.
    fn take_woken(&self, mut inner: MutexGuard<'_, Inner<T, W>>, key: u32) {
        let Some(waker) = inner.wakers.get(key as usize) else {
            return;
        };
        // Cleared before the poll: a wake from here on queues the key again.
        waker.queued.store(false, SeqCst);
        let waker = Waker::from(waker.clone());
        let Some(parked) = inner.parked.get(key) else {
            return;
        };
        let Ready::Ready(res) = poll_readable(&parked.stream, &waker) else {
            return;
        };
        let Some(parked) = inner.remove_parked(key) else {
            return;
        };
        drop(inner);
        match res {
            Ok(()) => self.owner.woken(parked.stream, Rung::Parked),
            Err(error) => {
                trace!(%error, "parked connection failed");
                // Closed before the owner counts it.
                drop(parked);
                self.owner.closed(Rung::Parked, Closed::Failed, 1);
            }
        }
    }
}

/// Polls the readiness of a task-less PARKED connection with the waker of
/// its key. Unlike a peek, which would make a system call on every wake to
/// tell bytes from a close, it leaves that to the new task's first read,
/// which happens anyway.
///
/// The flag is clear when a connection parks: it parks only after its last
/// read found the socket empty, which clears the flag. A flag set since
/// then means bytes (or a close) arrived.
fn poll_readable<T: Parkable>(stream: &T, waker: &Waker) -> Ready<io::Result<()>> {
    stream.poll_read_ready(&mut Context::from_waker(waker))
}

fn token_source<D: AsFd>(fd: &D) -> std::os::fd::RawFd {
    fd.as_fd().as_raw_fd()
}

impl<T: Parkable, W: Wakeup<T>> Lot<T, W> {
    /// A lot that reports to `owner` and may act on a deadline up to
    /// `slack` late, to act on many at once; and the poll its driver runs
    /// ([`Lot::drive`]).
    pub(crate) fn new(owner: Box<dyn Owner<T>>, slack: Duration) -> io::Result<(Self, Poll)> {
        let poll = Poll::new()?;
        let lot = Lot(Arc::new(Shared {
            slack,
            registry: poll.registry().try_clone()?,
            inner: Mutex::new(Inner {
                parked: Slab::default(),
                wakers: Vec::new(),
                parked_deadlines: Deadlines::default(),
                dormant: Slab::default(),
                dormant_deadlines: Deadlines::default(),
                sleepers: Slab::default(),
                closed: false,
            }),
            clock: Clock::new(Instant::now()),
            new_front: Notify::new(),
            ready: Mutex::default(),
            parked_ready: Notify::new(),
            owner,
        }));
        Ok((lot, poll))
    }

    /// PARKED without a task: keeps `stream` in tokio, with a waker that
    /// tells the lot when it turns readable; the lot then hands it to
    /// [`Owner::woken`]. At `dormant_at` the lot moves it to DORMANT, at
    /// `idle_at` (if earlier) closes it. Gives the stream back if it is
    /// readable already (or closed, or failed: the caller's task finds out)
    /// or the lot is closed. The caller keeps counting the connection as
    /// held and parked until this returns `Ok`; from then on the lot
    /// reports what becomes of it.
    pub(crate) fn park(
        &self,
        stream: T,
        dormant_at: Option<Instant>,
        idle_at: Option<Instant>,
    ) -> Result<(), T> {
        let shared = &*self.0;
        let mut inner = shared.lock();
        let Some(key) = inner.parked.vacant_key().filter(|_| !inner.closed) else {
            return Err(stream);
        };
        if inner.wakers.len() == key as usize {
            let waker = Arc::new(SlotWaker {
                lot: Arc::downgrade(&self.0),
                key,
                queued: AtomicBool::new(false),
            });
            inner.wakers.push(waker);
        }
        // Polled while the lock is held: a wake cannot be acted on before
        // the slab holds the stream. A poll refused for want of coop budget
        // wakes the waker at once, and the lot polls again.
        let waker = Waker::from(inner.wakers[key as usize].clone());
        if poll_readable(&stream, &waker).is_ready() {
            return Err(stream);
        }
        let idle = idle_at.map(|at| shared.clock.millis(at));
        let due = earliest(dormant_at.map(|at| shared.clock.millis(at)), idle);
        let due = due.map(|due| inner.parked_deadlines.push(due, key));
        let parked = Parked { stream, due, idle };
        if let Err(parked) = inner.parked.insert(parked) {
            // `vacant_key` said there was room.
            return Err(parked.stream);
        }
        if due.is_some() && inner.parked_deadlines.len() == 1 {
            shared.new_front.notify_one();
        }
        Ok(())
    }

    /// Moves a connection that left the parked slab out of tokio into the
    /// lot's poll (DORMANT), to be closed at `deadline` if no byte arrives
    /// before.
    fn enter(&self, stream: T, deadline: Option<Millis>) -> Result<(), Closed> {
        let fd = stream.into_dormant().map_err(|error| {
            debug!(%error, "leaving tokio failed");
            Closed::Failed
        })?;
        let mut inner = self.0.lock();
        if inner.closed {
            return Err(Closed::Shutdown);
        }
        let key = inner.dormant.vacant_key().ok_or(Closed::Failed)?;
        // Registered while the lock is held: the driver cannot see the
        // event before the slab holds the fd.
        let raw = token_source(&fd);
        if let Err(error) =
            self.0
                .registry
                .register(&mut SourceFd(&raw), Token(key as usize), Interest::READABLE)
        {
            debug!(%error, "entering the parking lot failed");
            return Err(Closed::Failed);
        }
        let deadline = deadline.map(|d| inner.dormant_deadlines.push(d, key));
        let dormant = Dormant {
            fd,
            deadline: deadline.unwrap_or(0),
        };
        if inner.dormant.insert(dormant).is_err() {
            return Err(Closed::Failed);
        }
        if deadline.is_some() && inner.dormant_deadlines.len() == 1 {
            self.0.new_front.notify_one();
        }
        Ok(())
    }

    /// Closes every parked and dormant connection, hands every sleeper back
    /// with [`Woke::Shutdown`], and refuses new ones (shutdown, or the
    /// driver failed). Needs a tokio runtime.
    pub(crate) fn close_all(&self) {
        let shared = &*self.0;
        let mut inner = shared.lock();
        inner.closed = true;
        let dormant: Vec<_> = inner.dormant.take_all().collect();
        inner.dormant_deadlines.clear();
        let parked: Vec<_> = inner.parked.take_all().collect();
        inner.wakers = Vec::new();
        inner.parked_deadlines.clear();
        let sleepers: Vec<_> = inner.sleepers.take_all().collect();
        drop(inner);
        let (n_dormant, n_parked) = (dormant.len(), parked.len());
        for Dormant { fd, .. } in dormant {
            T::close_dormant(fd);
        }
        for Parked { stream, .. } in parked {
            stream.close();
        }
        shared
            .owner
            .closed(Rung::Dormant, Closed::Shutdown, n_dormant);
        shared
            .owner
            .closed(Rung::Parked, Closed::Shutdown, n_parked);
        for sleeper in sleepers {
            self.wake_sleeper(sleeper, Reason::Shutdown);
        }
    }

    /// Puts `stream` to sleep until it is readable, its peer closes it, or
    /// the lot closes; then calls `callback`, exactly once, with the stream
    /// back in tokio (see [`Woke`]). Needs a tokio runtime.
    pub(crate) fn sleep(&self, stream: T, callback: W) {
        let fd = match stream.into_dormant() {
            Ok(fd) => fd,
            Err(error) => return callback.call(Woke::Failed(error)),
        };
        let mut inner = self.0.lock();
        if inner.closed {
            drop(inner);
            return call_back(fd, Reason::Shutdown, callback);
        }
        // Keys stay below `SLEEPER`: each one holds an open fd.
        let Some(key) = inner.sleepers.vacant_key() else {
            drop(inner);
            return callback.call(Woke::Failed(io::Error::other("parking lot full")));
        };
        // Registered while the lock is held: the driver cannot see the
        // event before the slab holds the fd.
        let raw = token_source(&fd);
        let token = Token(SLEEPER | key as usize);
        if let Err(error) = self
            .0
            .registry
            .register(&mut SourceFd(&raw), token, Interest::READABLE)
        {
            drop(inner);
            return callback.call(Woke::Failed(error));
        }
        let _ = inner.sleepers.insert(Sleeper { fd, callback });
    }

    /// How many streams sleep in the lot.
    pub(crate) fn sleeping(&self) -> usize {
        self.0.lock().sleepers.len()
    }

    /// Takes a sleeper out of the lot's poll and hands its stream back.
    fn wake_sleeper(&self, sleeper: Sleeper<T, W>, reason: Reason) {
        let Sleeper { fd, callback } = sleeper;
        let raw = token_source(&fd);
        match self.0.registry.deregister(&mut SourceFd(&raw)) {
            Ok(()) => call_back(fd, reason, callback),
            Err(error) => callback.call(Woke::Failed(error)),
        }
    }

    /// Acts on one readiness event of a sleeper.
    fn on_sleeper_ready(&self, key: u32) {
        let mut inner = self.0.lock();
        let Some(sleeper) = inner.sleepers.get(key) else {
            return;
        };
        let reason = match T::peer_closed(&sleeper.fd) {
            Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
            Some(Ok(true)) => Reason::Eof,
            // Bytes, or a transport that cannot tell: its reader finds out.
            Some(Ok(false)) | None => Reason::Readable,
            Some(Err(error)) => {
                let sleeper = inner.sleepers.remove(key);
                drop(inner);
                // Dropping the fd closes it.
                if let Some(sleeper) = sleeper {
                    sleeper.callback.call(Woke::Failed(error));
                }
                return;
            }
        };
        let Some(sleeper) = inner.sleepers.remove(key) else {
            return;
        };
        drop(inner);
        self.wake_sleeper(sleeper, reason);
    }

    /// Acts on one readiness event of a DORMANT connection. `closing`: the
    /// event reports the peer's close or an error.
    fn on_dormant_ready(&self, key: u32, closing: bool) {
        let shared = &*self.0;
        let mut inner = shared.lock();
        let Some(dormant) = inner.dormant.get(key) else {
            return;
        };
        // An event without the peer's close means bytes: back to tokio
        // without a peek, the new task reads them. With the close, the
        // transport tells bytes sent before it (serve them) from none
        // (close the fd here, never registering it with tokio again).
        match closing.then(|| T::peer_closed(&dormant.fd)).flatten() {
            None | Some(Ok(false)) => {}
            Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
            Some(res) => {
                trace!(?res, rung = "dormant", "connection closed by the peer");
                let closed = inner.dormant.remove(key);
                drop(inner);
                drop(closed);
                shared.owner.closed(Rung::Dormant, Closed::ByPeer, 1);
                return;
            }
        }
        let Some(Dormant { fd, .. }) = inner.dormant.remove(key) else {
            return;
        };
        drop(inner);
        let raw = token_source(&fd);
        let back = match shared.registry.deregister(&mut SourceFd(&raw)) {
            Ok(()) => T::from_dormant(fd),
            Err(error) => Err(error),
        };
        match back {
            Ok(stream) => shared.owner.woken(stream, Rung::Dormant),
            Err(error) => {
                debug!(%error, "back into tokio failed");
                shared.owner.closed(Rung::Dormant, Closed::Failed, 1);
            }
        }
    }

    /// Acts on the queued wakes of task-less PARKED connections. `ready`
    /// is a buffer to swap with the shared list. Must run unconstrained by
    /// tokio's coop budget (see [`Lot::park`]).
    fn wake_parked(&self, ready: &mut Vec<u32>) {
        let shared = &*self.0;
        std::mem::swap(
            ready,
            &mut *shared.ready.lock().unwrap_or_else(|e| e.into_inner()),
        );
        for key in ready.drain(..) {
            shared.take_woken(shared.lock(), key);
        }
    }

    /// Closes the connections whose idle deadline passed and moves
    /// task-less PARKED ones whose dormant deadline passed to DORMANT;
    /// returns how long until the next deadline.
    fn expire(&self, now: Instant) -> Option<Duration> {
        let shared = &*self.0;
        let now = shared.clock.millis(now);
        let mut inner = shared.lock();
        let mut idle_dormant = Vec::new();
        while let Some((deadline, key)) = inner.dormant_deadlines.pop_due(now) {
            // A key reused since has a later deadline of its own.
            if inner
                .dormant
                .get(key)
                .is_some_and(|d| d.deadline == deadline)
            {
                idle_dormant.extend(inner.dormant.remove(key));
            }
        }
        let mut moves = Vec::new();
        let mut idle_parked = Vec::new();
        while let Some((due, key)) = inner.parked_deadlines.pop_due(now) {
            // A key reused since has a later deadline of its own (or the
            // same one, which has passed as well).
            if inner.parked.get(key).is_none_or(|p| p.due != Some(due)) {
                continue;
            }
            let Some(parked) = inner.remove_parked(key) else {
                continue;
            };
            if parked.idle.is_some_and(|idle| !before(now, idle)) {
                idle_parked.push(parked.stream);
            } else {
                moves.push((parked.stream, parked.idle));
            }
        }
        let next = match (
            inner.dormant_deadlines.next_in(now),
            inner.parked_deadlines.next_in(now),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        drop(inner);
        let (n_dormant, n_parked) = (idle_dormant.len(), idle_parked.len());
        // Dropping them closes them.
        drop((idle_dormant, idle_parked));
        shared.owner.closed(Rung::Dormant, Closed::Idle, n_dormant);
        shared.owner.closed(Rung::Parked, Closed::Idle, n_parked);
        let (mut entered, mut failed, mut refused) = (0, 0, 0);
        for (stream, idle) in moves {
            match self.enter(stream, idle) {
                Ok(()) => entered += 1,
                Err(Closed::Shutdown) => refused += 1,
                Err(_) => failed += 1,
            }
        }
        shared.owner.went_dormant(entered);
        shared.owner.closed(Rung::Parked, Closed::Failed, failed);
        shared.owner.closed(Rung::Parked, Closed::Shutdown, refused);
        // A move that made the dormant queue non-empty woke `new_front`, so
        // the driver looks again.
        next
    }

    /// Runs the lot until its poll fails: hands ready connections to the
    /// owner, closes those the peer closed or whose idle deadline passed.
    /// The caller stops it at shutdown by dropping the future.
    ///
    /// Deadlines are acted on in batches: after a pass the lot sleeps at
    /// least the lot's `slack` (unless an event wakes it), so a deadline
    /// is acted on up to `slack` late. Every parked connection has a
    /// deadline (`dormant_after`), and most are stale by then (the
    /// connection woke): without the slack, a lot whose connections park
    /// a few thousand times a second woke its task and tokio's timer once
    /// for nearly every park (`benches/wake_instructions.sh`).
    pub(crate) async fn drive(&self, poll: Poll) -> io::Result<()> {
        // Deprecated in tokio 1.54 because an arbitrary `AsRawFd` type might
        // close or swap its fd while registered; `mio::Poll` owns its epoll
        // fd for its whole life and always returns that one, which is the
        // condition the `unsafe` replacement asks callers to promise.
        #[allow(deprecated)]
        let mut poll = AsyncFd::with_interest(poll, tokio::io::Interest::READABLE)?;
        let mut events = Events::with_capacity(EVENTS);
        let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
        let mut ready = Vec::new();
        loop {
            // Unconstrained: the readiness polls of task-less PARKED
            // connections must not be refused for want of coop budget (a
            // refused poll wakes the key again, and this task would spin).
            let now = Instant::now();
            let next = unconstrained(async { self.expire(now) }).await;
            if let Some(next) = next {
                // A timer already set within the slack of the deadline
                // stays: moving it costs more than waking a little early.
                let at = now + next.max(self.0.slack);
                let set = timer.deadline();
                if at < set || at > set + self.0.slack {
                    timer.as_mut().reset(at);
                }
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
                        let token = event.token().0;
                        if token & SLEEPER != 0 {
                            self.on_sleeper_ready((token & !SLEEPER) as u32);
                        } else {
                            let closing = event.is_read_closed() || event.is_error();
                            self.on_dormant_ready(token as u32, closing);
                        }
                    }
                }
                () = self.0.parked_ready.notified() => {
                    unconstrained(async { self.wake_parked(&mut ready) }).await;
                }
                () = &mut timer, if next.is_some() => {}
                // Also with a timer set: a task-less PARKED connection's
                // deadline may come before the dormant front.
                () = self.0.new_front.notified() => {}
            }
        }
    }
}

/// Why a sleeper is woken.
enum Reason {
    Readable,
    Eof,
    Shutdown,
}

/// Hands a stream that is in no poll back to tokio and to its callback.
fn call_back<T: Parkable>(fd: T::Dormant, reason: Reason, callback: impl Wakeup<T>) {
    let stream = match T::from_dormant(fd) {
        Ok(stream) => stream,
        Err(error) => return callback.call(Woke::Failed(error)),
    };
    callback.call(match reason {
        Reason::Readable => Woke::Readable(stream),
        Reason::Eof => Woke::Eof(stream),
        Reason::Shutdown => Woke::Shutdown(stream),
    });
}
