//! What the lot asks of the connections it holds ([`Parkable`], and
//! [`Carry`] for what one carries), of its owner ([`Owner`]) and of a
//! sleeper's callback ([`Callback`]), and what it tells them: the lot's
//! whole face, apart from the lot itself, so that its parts (the slots,
//! the driver) and the crate name the same words.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::task::{Context, Poll as Ready};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use super::ready::Registration;
/// Where a connection waited in the lot: [`Rung::Parked`] (task-less, with
/// its readiness cell) or [`Rung::Dormant`] (its cell freed); never
/// [`Rung::Active`].
pub(crate) use crate::ladder::Rung;

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
    /// See [`ParkingLot::register`].
    fn register(&self, fd: BorrowedFd<'_>) -> io::Result<Registration>;
}

/// When the lot acts on a connection that parks (see [`ParkingLot::park`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Due {
    /// It goes DORMANT.
    pub(crate) dormant_at: Option<Instant>,
    /// It is closed.
    pub(crate) idle_at: Option<Instant>,
    /// It is pinged (a carrying connection).
    pub(crate) ping_at: Option<Instant>,
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
    /// [`ParkingLot::close_all`].
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
    /// The lot closed ([`ParkingLot::close_all`]), or was closed when the stream
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

    /// The sleeper's deadline passed ([`ParkingLot::sleep`]'s `after`): acts
    /// where it sleeps (a keep-alive ping written to `conn`, lent out of
    /// its slot, without the lot's lock), and returns when its next
    /// deadline is, from now; `None` wakes it ([`Wakeup::Due`]).
    fn due(&mut self, conn: &mut T::Dormant) -> Option<Duration>;
}

/// What a task-less connection carries beside its transport across its
/// wait, for its protocol (a sleeping HTTP/2 connection's facts): handed
/// back when it wakes.
pub(crate) trait Carry: Send + 'static {
    /// What to say before the lot closes the connection (at its idle
    /// deadline, at shutdown): see [`Parkable::close_dormant`].
    fn goodbye(&self) -> Vec<u8>;

    /// A keep-alive ping for the client, noted as sent: the lot writes it
    /// at the time [`ParkingLot::park`] was given, and closes the connection
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

/// How the lot pings carrying connections ([`Carry::ping`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pings {
    /// From an answer (or any bytes the protocol answers in the lot) to
    /// the next ping; the first is due when [`ParkingLot::park`] says.
    pub(crate) every: Duration,
    /// How long a ping waits for its answer before the lot closes the
    /// connection.
    pub(crate) answer_within: Duration,
}
