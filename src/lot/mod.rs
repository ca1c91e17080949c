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
//! ([`Lot::drive`], in `driver.rs`, with the handling of events and
//! deadlines). Every connection is registered in that poll once, at
//! accept ([`Lot::register`]), edge-triggered for reading (and for writing
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
//!  parked_deadlines    (due, key) in FIFO order: every parked connection
//!                      has the same dormant_after and idle timeout
//!  dormant_deadlines   (deadline, key) in FIFO order
//!  sleeper_deadlines   a FIFO queue of (deadline, key) per delay: a few,
//!                      one per keep-alive setting of the sleepers'
//!                      protocol
//! ```
//!
//! While a task serves a connection, its transport reads and writes
//! through a [`Registration`]: the events the driver collects set the
//! connection's readiness [`Cell`] and wake the task (`ready.rs`).
//!
//! A connection parks ([`Lot::park`]) only if its cell says no byte came
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
//! peer closed, and the fd is closed right there.
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
//! callback ([`Lot::sleep`]): it leaves tokio, is registered for reading
//! until it wakes, and goes back to tokio. The callback type `W` is the
//! lot's second parameter, so that its owner stores its own (boxed)
//! callbacks as they are. When one turns readable the lot asks the
//! transport as above and calls the callback, exactly once, with the
//! stream's parked form ([`Wakeup`]): readable, closed by the peer, or shut
//! down; or with the error when the socket failed. A sleeper may have a
//! deadline, given as a delay (a WebSocket's keep-alive): when it passes,
//! the driver asks the callback, under the lock, what to do where the
//! stream sleeps ([`Callback::due`]: write a ping, and sleep until the next
//! deadline), or wakes it ([`Wakeup::Due`]). Delays are few, so a FIFO
//! queue per delay keeps their order without a heap. At shutdown
//! ([`Lot::close_all`]) sleepers are handed back with
//! [`Wakeup::Shutdown`]. If the lot is dropped without being closed (the
//! runtime shut down), sleeping streams are closed and their callbacks
//! dropped uncalled.

mod driver;
mod queue;
mod ready;
mod relief;
mod slab;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll as Ready, Waker};
use std::time::Duration;

use bytes::Bytes;
use mio::unix::SourceFd;
use mio::{Interest, Token};
use tokio::time::Instant;

use queue::{Clock, Deadlines, Millis, earliest};
pub(crate) use ready::Direction;
#[expect(
    unreachable_pub,
    reason = "named by the sealed `Parkable` and `Register`, which `Transport` reaches"
)]
pub use ready::Registration;
use ready::{Cell, Table};
use slab::Slab;

/// A slab at most this long is kept when it empties.
const SLOTS_KEEP: usize = 64;

/// Readiness cells made at a time (see [`Inner::new_cell`]).
const CELL_RUN: usize = 64;

/// What the lot needs of the connections it holds: a transport's stream,
/// registered with the lot while a task serves it.
pub trait Parkable: Send + Sync + Sized + 'static {
    /// The connection without a task: its fd and whatever state the
    /// transport keeps beside it (nothing, for plain sockets).
    type Dormant: AsFd + Send + 'static;

    /// `Ready` once bytes (or the peer's close) may have arrived since
    /// the last read found none; `Pending` keeps the waker. No system call.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Ready<io::Result<()>>;

    /// Whether a read may find bytes: readiness came since the last read
    /// found none, or the transport holds bytes of its own.
    fn read_ready(&self) -> bool;

    /// Gives up the task: the parked form and the registration, or the
    /// stream back if it holds something that cannot wait for the socket.
    fn into_dormant(self) -> Result<(Self::Dormant, Registration), Self>;

    /// Back with a task.
    fn from_dormant(dormant: Self::Dormant, registration: Registration) -> Self;

    /// After an event that may report the peer's close: `Ok(true)` if the
    /// peer closed with nothing left to read, `Ok(false)` if bytes wait,
    /// `Err(WouldBlock)` if nothing happened after all. `None` if the
    /// transport cannot tell without reading.
    fn peer_closed(dormant: &Self::Dormant) -> Option<io::Result<bool>>;

    /// Closes a connection at shutdown (or a carrying one at its idle
    /// deadline), saying `goodbye` first (its protocol's last words, such
    /// as an HTTP/2 GOAWAY; often empty), then the transport's own if it
    /// has one (TLS: `close_notify`). Best effort, never waits.
    fn close_dormant(dormant: Self::Dormant, goodbye: &[u8]);

    /// Writes `bytes` (a keep-alive PING of its protocol) to a task-less
    /// connection, whole and without blocking; `Err` if the socket does
    /// not take them at once (the peer reads nothing) or the transport
    /// cannot write from its parked form.
    fn send_dormant(dormant: &mut Self::Dormant, bytes: &[u8]) -> io::Result<()>;

    /// Writes `bytes` to a task-less connection without blocking, as many
    /// as its socket takes now (a message to a sleeping upgraded stream).
    /// A transport that frames what it writes (TLS) takes all of `bytes`
    /// and holds what the socket did not take of its frames, for its
    /// stream's first write once it is served again ([`Wrote::held`]).
    fn write_dormant(dormant: &mut Self::Dormant, bytes: &[u8]) -> io::Result<Wrote>;

    /// Reads bytes that arrived for a task-less connection into `buf`,
    /// without blocking (`Err(WouldBlock)` if none had); `None` if the
    /// transport cannot read in its parked form (TLS: the records are the
    /// session's to decrypt).
    fn read_dormant(dormant: &mut Self::Dormant, buf: &mut [u8]) -> Option<io::Result<usize>>;

    /// [`close_dormant`](Self::close_dormant) for a served connection,
    /// without a goodbye of its protocol.
    fn close(self) {
        drop(self);
    }
}

/// What [`Parkable::write_dormant`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wrote {
    /// How many of the bytes the transport took.
    pub taken: usize,
    /// Whether the transport holds bytes the socket did not take yet: the
    /// connection must be served (its stream flushed) before it can sleep.
    pub held: bool,
}

/// Registers a new connection with a lot: what a transport sees of it
/// when dormant starts serving a connection.
pub(crate) trait Register: Sync {
    /// See [`Lot::register`].
    fn register(&self, fd: BorrowedFd<'_>) -> io::Result<Registration>;
}

impl<T: Parkable, W: Callback<T>, C: Carry> Register for Lot<T, W, C> {
    fn register(&self, fd: BorrowedFd<'_>) -> io::Result<Registration> {
        Lot::register(self, fd)
    }
}

/// When the lot acts on a connection that parks (see [`Lot::park`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Due {
    /// It goes DORMANT.
    pub(crate) dormant_at: Option<Instant>,
    /// It is closed.
    pub(crate) idle_at: Option<Instant>,
    /// It is pinged (a carrying connection).
    pub(crate) ping_at: Option<Instant>,
}

/// Where a connection waited in the lot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rung {
    /// Task-less, with its readiness cell.
    Parked,
    /// Task-less, its cell freed.
    Dormant,
}

/// How long a woken connection waited without its task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slept {
    /// PARKED, for this long (to the lot clock's millisecond).
    Parked(Duration),
    /// DORMANT: longer than any connection stays PARKED.
    Dormant,
}

/// Why the lot closed connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// The peer closed the connection (or reset it).
    ByPeer,
    /// The idle deadline passed.
    Idle,
    /// A keep-alive ping was not answered in time ([`Carry::ping`]).
    Unanswered,
    /// The socket failed.
    Failed,
    /// [`Lot::close_all`].
    Shutdown,
    /// Its end passed ([`Carry::ends_at`]).
    Age,
}

/// What the lot reports to whoever made it. Called without the lot's lock
/// held, from the lot's task.
pub(crate) trait Owner<T, C>: Send + Sync + 'static {
    /// A task-less connection turned readable (bytes, or the peer's close,
    /// which its first read finds): it is served again, with what it
    /// carried, and how it woke ([`Woke`]: the owner may serve the last of
    /// a batch of events in the lot's task, see `server::owner`).
    fn woken(&self, conn: T, carried: Option<C>, woke: Woke);
    /// The lot closed `n` connections that waited on `from`.
    fn closed(&self, from: Rung, why: Closed, n: usize);
    /// `n` connections moved from PARKED to DORMANT.
    fn went_dormant(&self, n: usize);
}

/// How a task-less connection woke ([`Owner::woken`]).
#[derive(Debug)]
pub(crate) struct Woke {
    /// How long it slept.
    pub(crate) slept: Slept,
    /// Where it comes in its batch of events.
    pub(crate) turn: Turn,
    /// Bytes the lot read for its protocol, which did not answer them
    /// ([`Carry::answer`]): the connection's next bytes, before the
    /// socket's. Usually none.
    pub(crate) unread: Bytes,
}

/// Where a woken connection comes in its batch of events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Others of the same batch come after it.
    Before,
    /// The last of its batch.
    Last,
}

/// Why a sleeper's callback is called; carries the stream's parked form,
/// out of the lot's poll (the lot's side of `upgrade::Woken`).
#[derive(Debug)]
pub(crate) enum Wakeup<D> {
    /// Bytes arrived.
    Readable(D),
    /// The peer closed its side, with nothing left to read.
    Eof(D),
    /// The lot closed ([`Lot::close_all`]), or was closed when the stream
    /// came.
    Shutdown(D),
    /// Its deadline passed, and its callback asked to be woken
    /// ([`Callback::due`]).
    Due(D),
    /// The socket failed, or the stream could not sleep; it is closed.
    Failed(io::Error),
}

/// A sleeper's callback, called exactly once.
pub(crate) trait Callback<T: Parkable>: Send + 'static {
    fn call(self, woken: Wakeup<T::Dormant>);

    /// The sleeper's deadline passed ([`Lot::sleep`]'s `after`): acts
    /// where it sleeps, under the lot's lock (a keep-alive ping written to
    /// `conn`), and returns when its next deadline is, from now; `None`
    /// wakes it ([`Wakeup::Due`]).
    fn due(&mut self, conn: &mut T::Dormant) -> Option<Duration>;
}

/// A sleeper in its slot: its callback, and its deadline if it has one
/// (boxed with the callback, so that a plain socket's slot stays small).
struct Asleep<W> {
    callback: W,
    deadline: Option<Millis>,
}

/// What a task-less connection carries beside its transport across its
/// wait, for its protocol (a sleeping HTTP/2 connection's facts): handed
/// back when it wakes.
pub(crate) trait Carry: Send + 'static {
    /// What to say before the lot closes the connection (at its idle
    /// deadline, at shutdown): see [`Parkable::close_dormant`].
    fn goodbye(&self) -> Vec<u8>;

    /// A keep-alive ping for the client, noted as sent: the lot writes it
    /// at the time [`Lot::park`] was given, and closes the connection
    /// (after its goodbye) if it does not turn readable within the lot's
    /// `answer_within`. The answer wakes the connection, whose protocol
    /// takes it from there.
    fn ping(&mut self) -> Vec<u8>;

    /// The connection went DORMANT; `false` closes it (after its goodbye).
    fn went_dormant(&mut self) -> bool;

    /// Bytes arrived for the task-less connection (`read`, all that had):
    /// `Some` if its protocol answers all of them where it sleeps (such as
    /// HTTP/2 PINGs, and the ACKs of the lot's pings), with what it says in
    /// answer appended to `reply`, for the lot to write; nothing of it is
    /// noted until [`answered`](Self::answered). `None` wakes the
    /// connection, which is handed the bytes.
    fn answer(&self, read: &[u8], reply: &mut Vec<u8>) -> Option<Answered>;

    /// Whether its protocol may answer bytes where it sleeps: if not, the
    /// lot does not read them, and they wake the connection.
    fn answers(&self) -> bool;

    /// The lot wrote the reply of [`answer`](Self::answer)'s `answered`.
    fn answered(&mut self, answered: Answered);

    /// When the connection ends, if it has an end: past it, the lot's
    /// sweep closes the connection (after its goodbye).
    fn ends_at(&self) -> Option<Instant>;
}

/// What a task-less connection's protocol answered where it sleeps
/// ([`Carry::answer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answered {
    /// Answers to the lot's keep-alive pings among the bytes.
    pub(crate) pongs: u32,
}

/// A registered connection, by what it is doing.
enum Slot<D, W, C> {
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
    Sleeping { conn: D, asleep: Box<Asleep<W>> },
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
struct Carried<C, R> {
    rung: R,
    ping: Ping,
    value: C,
}

impl<D, W, C> Slot<D, W, C> {
    /// A task-less connection's rung.
    fn rung(&self) -> Option<Rung> {
        match self {
            Slot::Parked { .. } | Slot::ParkedCarrying { .. } => Some(Rung::Parked),
            Slot::Dormant { .. } | Slot::DormantCarrying { .. } => Some(Rung::Dormant),
            Slot::Served(_) | Slot::Sleeping { .. } => None,
        }
    }

    /// Whether this is a carrying connection whose ping is `ping`.
    fn pings(&self, ping: Ping) -> bool {
        match self {
            Slot::ParkedCarrying { with, .. } => with.ping == ping,
            Slot::DormantCarrying { with, .. } => with.ping == ping,
            _ => false,
        }
    }

    /// A carrying connection's fd, rung, ping and what it carries.
    fn carrying(&mut self) -> Option<(&mut D, Rung, &mut Ping, &mut C)> {
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
    fn into_goodbye(self) -> Option<(D, Rung, Vec<u8>)> {
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
    fn ends_at(&self) -> Option<Instant> {
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
struct Ping(Millis);

impl Ping {
    const OFF: Ping = Ping(0);

    /// Due at `at`, or up to 3 ms later (the next even millisecond but 0).
    fn due(at: Millis) -> Ping {
        match at.wrapping_add(1) & !1 {
            0 => Ping(2),
            at => Ping(at),
        }
    }

    /// Sent, to be answered by `by`, or 1 ms later.
    fn sent(by: Millis) -> Ping {
        Ping(by | 1)
    }

    fn at(self) -> Millis {
        self.0
    }
}

/// How the lot pings carrying connections ([`Carry::ping`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pings {
    /// From an answer (or any bytes the protocol answers in the lot) to
    /// the next ping; the first is due when [`Lot::park`] says.
    pub(crate) every: Duration,
    /// How long a ping waits for its answer before the lot closes the
    /// connection.
    pub(crate) answer_within: Duration,
}

struct Inner<D, W, C> {
    slots: Slab<Slot<D, W, C>>,
    /// When the next sweep for ends is due, while a task-less connection
    /// has one.
    next_sweep: Option<Millis>,
    parked_deadlines: Deadlines,
    dormant_deadlines: Deadlines,
    /// (due, key) of carrying connections' pings, and (due, key) of their
    /// answers: in FIFO order too, as every connection has the same
    /// keep-alive interval and timeout.
    ping_deadlines: Deadlines,
    answer_deadlines: Deadlines,
    /// (deadline, key) of sleepers, a queue per delay (what
    /// [`Lot::sleep`] and [`Callback::due`] were given: a few, one per
    /// keep-alive setting), each in FIFO order.
    sleeper_deadlines: Vec<(Millis, Deadlines)>,
    sleeping: usize,
    closed: bool,
    /// The waker of the task that drives the lot, told when a deadline
    /// queue goes from empty to non-empty (`Shared::new_front`).
    driver: Option<Waker>,
    /// Cells made ahead of need (see [`Inner::new_cell`]).
    spare_cells: Vec<Arc<Cell>>,
}

impl<D, W, C> Inner<D, W, C> {
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
    fn new_cell(&mut self) -> Arc<Cell> {
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
    fn remove(&mut self, key: u32) -> Option<Slot<D, W, C>> {
        let slot = self.slots.remove(key)?;
        self.shrink_if_empty();
        Some(slot)
    }

    /// Frees a large slab once its last connection left (see `remove`).
    /// Not between a `Slab::remove` and its `Slab::put_back`: that would
    /// lose the entry put back.
    fn shrink_if_empty(&mut self) {
        if self.slots.shrink_if_empty(SLOTS_KEEP) {
            self.clear_deadlines();
        }
    }

    fn clear_deadlines(&mut self) {
        self.parked_deadlines.clear();
        self.dormant_deadlines.clear();
        self.ping_deadlines.clear();
        self.answer_deadlines.clear();
        self.sleeper_deadlines = Vec::new();
    }

    /// Queues a sleeper's deadline `after` from `now`: the deadline as
    /// queued, and whether its queue was empty (its front is new).
    fn push_sleeper_deadline(&mut self, now: Millis, after: Duration, key: u32) -> (Millis, bool) {
        let after = queue::millis(after);
        let queues = &mut self.sleeper_deadlines;
        let i = match queues.iter().position(|(delay, _)| *delay == after) {
            Some(i) => i,
            None => {
                queues.push((after, Deadlines::default()));
                queues.len() - 1
            }
        };
        let queue = &mut queues[i].1;
        let first = queue.len() == 0;
        (queue.push(now.wrapping_add(after), key), first)
    }
}

/// The lot of one `serve` call. Cloning is cheap: clones share the lot.
pub(crate) struct Lot<T: Parkable, W, C>(Arc<Shared<T, W, C>>);

impl<T: Parkable, W, C> Clone for Lot<T, W, C> {
    fn clone(&self) -> Self {
        Lot(self.0.clone())
    }
}

struct Shared<T: Parkable, W, C> {
    registry: mio::Registry,
    /// How late the lot may act on a deadline (see [`Lot::drive`]).
    slack: Duration,
    /// Carrying connections' keep-alive pings.
    pings: Pings,
    /// How often carrying connections are looked at for their end; `None`
    /// if none has one.
    sweep_every: Option<Duration>,
    inner: Mutex<Inner<T::Dormant, W, C>>,
    clock: Clock,
    /// A deadline queue went from empty to non-empty since the driver
    /// last looked: its timer may be too late. Set under the lock, with
    /// the driver's waker woken; read without it. (A `Notify` cost the
    /// driver its lock twice per batch of events.)
    new_front: AtomicBool,
    owner: Box<dyn Owner<T, C>>,
}

impl<T: Parkable, W, C> Shared<T, W, C> {
    fn lock(&self) -> MutexGuard<'_, Inner<T::Dormant, W, C>> {
        // A panic while holding the lock leaves the slab consistent (every
        // step is a single insert, remove or replacement), so poisoning is
        // ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Parkable, W: Send + 'static, C: Send + 'static> Table for Shared<T, W, C> {
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

impl<T: Parkable, W: Callback<T>, C: Carry> Lot<T, W, C> {
    /// A lot that reports to `owner` and may act on a deadline up to
    /// `slack` late, to act on many at once, pings carrying connections as
    /// `pings` says, and looks for those past their end every
    /// `sweep_every`. `registry` is that of the poll its driver runs
    /// ([`Lot::drive`]).
    pub(crate) fn new(
        owner: Box<dyn Owner<T, C>>,
        slack: Duration,
        pings: Pings,
        sweep_every: Option<Duration>,
        registry: mio::Registry,
    ) -> Self {
        Lot(Arc::new(Shared {
            slack,
            pings,
            sweep_every,
            registry,
            inner: Mutex::new(Inner {
                slots: Slab::default(),
                next_sweep: None,
                parked_deadlines: Deadlines::default(),
                dormant_deadlines: Deadlines::default(),
                ping_deadlines: Deadlines::default(),
                answer_deadlines: Deadlines::default(),
                sleeper_deadlines: Vec::new(),
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
        let due = due.map(|due| inner.parked_deadlines.push(due, key));
        let ping = match ping_at {
            Some(at) if carries.is_some() => {
                let at = Ping::due(shared.clock.millis(at)).at();
                Ping(inner.ping_deadlines.push(at, key))
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
        let first = |queue: &Deadlines, queued: bool| queued && queue.len() == 1;
        let sweep = match shared.sweep_every {
            Some(every) if ends && inner.next_sweep.is_none() => {
                let at = shared.clock.millis(now + every);
                inner.next_sweep = Some(at);
                true
            }
            _ => false,
        };
        if first(&inner.parked_deadlines, due.is_some())
            || first(&inner.ping_deadlines, ping != Ping::OFF)
            || sweep
        {
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
            if let Some(Slot::Served(_)) | None = inner.slots.get(key) {
                continue;
            }
            match inner.slots.remove(key) {
                Some(Slot::Sleeping { conn, asleep }) => sleepers.push((conn, asleep.callback)),
                Some(slot) => {
                    if let Some((conn, rung, goodbye)) = slot.into_goodbye() {
                        match rung {
                            Rung::Parked => parked.push((conn, goodbye)),
                            Rung::Dormant => dormant.push((conn, goodbye)),
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
            let (deadline, front) = inner.push_sleeper_deadline(now, after, key);
            first = front;
            deadline
        });
        let asleep = Box::new(Asleep { callback, deadline });
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
    /// sleeper wakes): `f`'s answer, or `None` if no sleeper is at `key`.
    /// Holds the lot's lock: `f` must not block.
    #[cfg(feature = "ws")]
    pub(crate) fn with_sleeper<R>(
        &self,
        key: u32,
        f: impl FnOnce(&mut T::Dormant, &W) -> Option<R>,
    ) -> Option<R> {
        match self.0.lock().slots.get_mut(key) {
            Some(Slot::Sleeping { conn, asleep }) => f(conn, &asleep.callback),
            _ => None,
        }
    }

    /// Wakes the sleeper at `key` as if bytes had arrived, if `is`
    /// recognizes its callback; `false` if no such sleeper is there (it
    /// woke already).
    #[cfg(feature = "ws")]
    pub(crate) fn wake_sleeper_at(&self, key: u32, is: impl FnOnce(&W) -> bool) -> bool {
        let mut inner = self.0.lock();
        match inner.slots.get(key) {
            Some(Slot::Sleeping { asleep, .. }) if is(&asleep.callback) => {}
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
        let mut queue = Deadlines::default();
        let back = queue.push(Ping::due(10).at(), 1);
        let moved = queue.push(Ping::due(5).at(), 2);
        assert_eq!((back, moved), (10, 10));
    }
}
