//! A socket's [`Link`]: what its [`Sender`]s and whoever serves it
//! share, and how a send reaches the socket wherever it is.
//!
//! Every socket has a link, shared by its senders and its task (or its
//! sleeper in the lot); its lock orders every write. While the socket
//! sleeps, the link knows its key in the lot and a send writes the frame to
//! the socket right there, through the lot ([`Lot::write_to`]): no task, no
//! buffer. A frame the socket does not take whole (the client stopped
//! reading) is queued and the socket woken, so that a task waits to write
//! it; while it is awake, sends queue and the task writes them before the
//! socket sleeps again. The queue is bounded (`max_queued`): past it, a
//! send fails, and by default the socket is closed (1008), so that one
//! client that stopped reading costs the others nothing and the server a
//! bounded amount.
//!
//! The lot's lock is taken under a link's lock (never the other way
//! round): the lot calls a woken sleeper's handler in a new task, without
//! its lock. A topic's lock is taken under a link's too (a socket joining
//! it), never the other way round.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::frame::Frame;
use super::message::CloseCode;
use super::reader::Rules;
use crate::lot::Wrote;
use crate::stats::WsCounters;
use crate::upgrade::Lot;

/// What a send does when the socket's queue is full (see [`Sender`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum WhenFull {
    /// The send fails with [`SendError::Full`], and the socket is closed
    /// (with 1008, if the client still reads): a client that stopped
    /// reading is let go.
    #[default]
    Close,
    /// The send fails with [`SendError::Full`]; the socket stays open, and
    /// later sends succeed once the client reads again.
    Refuse,
}

/// Why a send failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// The socket is closed or closing (a close frame was sent).
    Closed,
    /// The socket's queue is full: its client does not read.
    Full,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SendError::Closed => "the WebSocket is closed",
            SendError::Full => "the WebSocket's queue is full: its client does not read",
        })
    }
}

impl std::error::Error for SendError {}

/// A socket's settings, which its senders read under the link's lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SocketSettings {
    pub(crate) rules: Rules,
    pub(crate) max_queued: u32,
    /// Milliseconds (see `WebSocketUpgrade::close_timeout`).
    pub(crate) close_timeout: u32,
    pub(crate) when_full: WhenFull,
}

/// A socket's keep-alive: its settings and what the lot notes of it where
/// it sleeps. Atomics, read without the link's lock: the lot asks a
/// sleeper under its own lock, which a send takes under the link's.
#[derive(Debug, Default)]
pub(crate) struct SocketKeepAlive {
    /// Milliseconds, `0` for off; set before the socket first sleeps.
    ping_every: AtomicU32,
    ping_timeout: AtomicU32,
    idle: AtomicU32,
    /// When the client's last message came ([`clock`], in 4 ms steps),
    /// with [`PINGED`] and [`EXPIRED`] in the two low bits.
    mark: AtomicU32,
}

/// A ping went out where the socket sleeps, and no byte has come since.
const PINGED: u32 = 1;
/// The socket is to be closed: its ping went unanswered (or could not be
/// written), or its client was idle too long.
const EXPIRED: u32 = 2;

/// A ping with no payload.
const PING: [u8; 2] = [0x89, 0x00];

/// Milliseconds on a process-wide clock, wrapping (keep-alive durations
/// are at most 24 days).
fn clock() -> u32 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u32
}

/// A duration in milliseconds for [`SocketKeepAlive`]: `0` for none, else 1 ms
/// to 24 days.
pub(crate) fn keep_alive_millis(d: Option<Duration>) -> u32 {
    d.map_or(0, |d| d.as_millis().clamp(1, i32::MAX as u128) as u32)
}

impl SocketKeepAlive {
    pub(crate) fn set(&self, ping_every: u32, ping_timeout: u32, idle: u32) {
        self.ping_every.store(ping_every, Relaxed);
        self.ping_timeout.store(ping_timeout, Relaxed);
        self.idle.store(idle, Relaxed);
        self.mark.store(clock() & !3, Relaxed);
    }

    /// When a sleeping socket is next asked ([`Sleeper::due`]): every
    /// `ping_every`; without pings, a quarter of the idle timeout.
    pub(super) fn period(&self) -> Option<Duration> {
        match (self.ping_every.load(Relaxed), self.idle.load(Relaxed)) {
            (0, 0) => None,
            (0, idle) => Some(Duration::from_millis(u64::from(idle / 4).max(1))),
            (every, _) => Some(Duration::from_millis(every.into())),
        }
    }

    /// Bytes came from the client: it is alive.
    pub(super) fn heard(&self) {
        self.mark.fetch_and(!PINGED, Relaxed);
    }

    /// A message came from the client: it is not idle.
    pub(super) fn message(&self) {
        self.mark.store(clock() & !3, Relaxed);
    }

    /// What the lot does when the socket's deadline passes where it
    /// sleeps: a ping, or the socket's end (see [`Sleeper::due`]).
    pub(super) fn due(&self, write: &mut dyn FnMut(&[u8]) -> bool) -> Option<Duration> {
        let mark = self.mark.load(Relaxed);
        let idle = self.idle.load(Relaxed);
        let quiet = clock().wrapping_sub(mark & !3);
        let expired = (idle != 0 && quiet >= idle)
            || mark & PINGED != 0
            || (self.ping_every.load(Relaxed) != 0 && !write(&PING));
        if expired {
            self.mark.fetch_or(EXPIRED, Relaxed);
            return None;
        }
        match self.ping_every.load(Relaxed) {
            0 => self.period(),
            _ => {
                self.mark.fetch_or(PINGED, Relaxed);
                Some(Duration::from_millis(
                    self.ping_timeout.load(Relaxed).into(),
                ))
            }
        }
    }

    /// Why the lot woke the socket to be closed, if it did.
    pub(super) fn expired(&self) -> Option<&'static str> {
        let mark = self.mark.load(Relaxed);
        match (mark & EXPIRED != 0, mark & PINGED != 0) {
            (false, _) => None,
            (true, true) => Some("no answer to a ping"),
            (true, false) => Some("idle for too long"),
        }
    }
}

/// What a socket's senders and its server share.
#[derive(Debug)]
pub(crate) struct Link {
    /// The socket's number, unique in the process: its senders' identity.
    number: u64,
    state: Mutex<LinkState>,
    pub(crate) keep_alive: SocketKeepAlive,
    /// The socket negotiated compression for the server's messages: a
    /// send takes a [`Frame`]'s compressed bytes (compressing it first, if
    /// no socket did yet), before it takes the lock.
    send_compressed: AtomicBool,
}

/// What a link keeps behind its lock: where the socket is, its queue, and
/// how its sends went.
#[derive(Debug)]
pub(super) struct LinkState {
    pub(super) at: At,
    /// The lot the socket sleeps in, once upgraded.
    pub(super) lot: Option<Lot>,
    /// Frames waiting for the awake socket's task, and its waker; `None`
    /// while asleep.
    outbox: Option<Box<Outbox>>,
    /// A close frame was sent or queued: no more messages go out.
    pub(super) closing: bool,
    /// A send found the queue full, and the policy is to close.
    pub(super) overflowed: bool,
    /// A send woke the sleeping socket to write what it did not take.
    pub(super) woken_to_write: bool,
    pub(super) settings: SocketSettings,
    /// The topics the socket joined, and its slot in each: it leaves them
    /// when it closes.
    #[allow(
        clippy::box_collection,
        reason = "one pointer in every socket, where a Vec is three"
    )]
    topics: Option<Box<Vec<Membership>>>,
}

/// A set of sockets a socket can join (a topic, see
/// [`Topic`](super::Topic)): what the socket's link needs of it to leave
/// it when it closes.
pub(crate) trait Group: Send + Sync {
    /// Removes the member at `slot`, if it is the socket `id`.
    fn leave(&self, slot: u32, id: u64);
}

/// A socket's place in a topic.
struct Membership {
    topic: Weak<dyn Group>,
    slot: u32,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("slot", &self.slot)
            .finish_non_exhaustive()
    }
}

impl Membership {
    fn of(&self, group: &Arc<impl Group + 'static>) -> bool {
        std::ptr::addr_eq(self.topic.as_ptr(), Arc::as_ptr(group))
    }
}

/// What waits for an awake socket's task to write.
#[derive(Debug, Default)]
struct Outbox {
    frames: VecDeque<Bytes>,
    queued: usize,
    /// The task's waker while it waits to write.
    waker: Option<Waker>,
}

impl LinkState {
    pub(super) fn queued(&self) -> usize {
        self.outbox.as_ref().map_or(0, |outbox| outbox.queued)
    }

    /// The server's WebSocket gauges, once the socket is upgraded.
    pub(super) fn counters(&self) -> Option<&WsCounters> {
        self.lot.as_ref().map(Lot::ws_counters)
    }

    /// Moves the socket to `at`, keeping the server's gauges.
    pub(super) fn set_at(&mut self, at: At) {
        let was = std::mem::replace(&mut self.at, at);
        let Some(counters) = self.counters() else {
            return;
        };
        let open = |at: At| matches!(at, At::Awake | At::Asleep(_));
        let asleep = |at: At| matches!(at, At::Asleep(_));
        match (open(was), open(at)) {
            (false, true) => counters.open.fetch_add(1, Relaxed),
            (true, false) => counters.open.fetch_sub(1, Relaxed),
            _ => 0,
        };
        match (asleep(was), asleep(at)) {
            (false, true) => counters.asleep.fetch_add(1, Relaxed),
            (true, false) => counters.asleep.fetch_sub(1, Relaxed),
            _ => 0,
        };
    }

    pub(super) fn push(&mut self, frame: Bytes) {
        if let Some(counters) = self.counters() {
            counters.queued.fetch_add(frame.len(), Relaxed);
        }
        let outbox = self.outbox.get_or_insert_with(Box::default);
        outbox.queued += frame.len();
        outbox.frames.push_back(frame);
    }

    pub(super) fn pop(&mut self) -> Option<Bytes> {
        let outbox = self.outbox.as_mut()?;
        let frame = outbox.frames.pop_front()?;
        outbox.queued -= frame.len();
        if let Some(counters) = self.counters() {
            counters.queued.fetch_sub(frame.len(), Relaxed);
        }
        Some(frame)
    }

    /// Drops what waits to be written.
    pub(super) fn clear_outbox(&mut self) {
        let queued = self.queued();
        if let (Some(counters), true) = (self.counters(), queued > 0) {
            counters.queued.fetch_sub(queued, Relaxed);
        }
        self.outbox = None;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queued() == 0
    }

    pub(super) fn wake_task(&mut self) {
        if let Some(waker) = self.outbox.as_mut().and_then(|outbox| outbox.waker.take()) {
            waker.wake();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum At {
    Upgrading,
    Awake,
    Asleep(u32),
    Closed,
}

impl Link {
    pub(crate) fn new(settings: SocketSettings) -> Arc<Link> {
        static NUMBERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Arc::new(Link {
            number: NUMBERS.fetch_add(1, Relaxed),
            state: Mutex::new(LinkState {
                at: At::Upgrading,
                lot: None,
                outbox: None,
                closing: false,
                overflowed: false,
                woken_to_write: false,
                settings,
                topics: None,
            }),
            keep_alive: SocketKeepAlive::default(),
            send_compressed: AtomicBool::new(false),
        })
    }

    /// Ready once a send queued a frame, or the socket is closing; until
    /// then, the waker is the one a send wakes.
    pub(super) fn poll_sent(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.lock();
        if !state.is_empty() || state.closing {
            return Poll::Ready(());
        }
        state.outbox.get_or_insert_with(Box::default).waker = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Sets whether the server's messages go compressed (set at the
    /// upgrade, before the socket first sleeps).
    #[cfg(feature = "ws-deflate")]
    pub(crate) fn send_compressed(&self, on: bool) {
        self.send_compressed.store(on, Relaxed);
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, LinkState> {
        // Every step under the lock leaves the state whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Who the link's socket is to the lot ([`upgrade::Handler::sleeper`]).
    pub(super) fn id(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    pub(crate) fn set_settings(&self, settings: SocketSettings) {
        self.lock().settings = settings;
    }

    /// The socket ended: senders fail from now on, and it leaves its
    /// topics.
    pub(super) fn close(&self) {
        let topics = {
            let mut state = self.lock();
            state.set_at(At::Closed);
            state.closing = true;
            state.clear_outbox();
            state.topics.take()
        };
        for membership in topics.into_iter().flat_map(|topics| *topics) {
            if let Some(topic) = membership.topic.upgrade() {
                topic.leave(membership.slot, self.number);
            }
        }
    }
}

/// Sends messages to one WebSocket, from anywhere, whether its socket is
/// asleep or awake. Cloning is cheap (a reference count).
///
/// [`send`](Self::send) never waits: a message to a sleeping socket is
/// written to the socket at once, with no task and no buffer; one that
/// the socket cannot take now (its client does not read), or that comes
/// while the socket is awake, waits in the socket's queue, which its task
/// writes before the socket sleeps again. The queue holds at most
/// `max_queued` bytes ([`WebSocketUpgrade::max_queued`](super::WebSocketUpgrade::max_queued));
/// past it, what happens is the socket's [`WhenFull`] policy.
///
/// A handler's own sends (an answer to the message it handles) are queued
/// and written once it returns, in order with everyone else's.
///
/// Senders of one socket are equal, and hash alike: an app that keeps its
/// own map of sockets keys it by [`id`](Self::id), or by `Sender` (which
/// hashes that number alone; clippy's `mutable_key_type` cannot tell, and
/// may be allowed there).
#[derive(Clone, Debug)]
pub struct Sender(pub(super) Arc<Link>);

impl PartialEq for Sender {
    fn eq(&self, other: &Sender) -> bool {
        self.0.number == other.0.number
    }
}

impl Eq for Sender {}

impl std::hash::Hash for Sender {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.number.hash(state);
    }
}

impl Sender {
    pub(crate) fn new(link: Arc<Link>) -> Self {
        Sender(link)
    }

    /// Returns the socket's number: unique among the process's sockets,
    /// for as long as it runs (not reused after a socket closes).
    pub fn id(&self) -> u64 {
        self.0.number
    }

    /// Closes the socket's link, as its end does.
    #[cfg(test)]
    pub(crate) fn close_link(&self) {
        self.0.close();
    }

    /// Joins the topic `members` with the slot `insert` gives it, unless
    /// the socket is closed or a member already: whether it joined.
    pub(crate) fn join<G: Group + 'static>(
        &self,
        members: &Arc<G>,
        insert: impl FnOnce() -> u32,
    ) -> bool {
        let mut state = self.0.lock();
        if state.closing || state.at == At::Closed {
            return false;
        }
        let topics = state.topics.get_or_insert_with(Box::default);
        if topics.iter().any(|m| m.of(members)) {
            return false;
        }
        // The topic's lock under the link's, as everywhere.
        let slot = insert();
        let weak: Weak<G> = Arc::downgrade(members);
        // Room for one at first: most sockets join one topic, and a
        // `Vec`'s first push reserves four (a 112-byte chunk for 24-byte
        // memberships, where one takes a 32-byte one). Later pushes grow
        // it as usual.
        if topics.capacity() == 0 {
            topics.reserve_exact(1);
        }
        topics.push(Membership { topic: weak, slot });
        true
    }

    /// Leaves the topic `members`: the slot it had, if it was a member.
    pub(crate) fn leave<G: Group + 'static>(&self, members: &Arc<G>) -> Option<u32> {
        let mut state = self.0.lock();
        let topics = state.topics.as_mut()?;
        let at = topics.iter().position(|m| m.of(members))?;
        Some(topics.swap_remove(at).slot)
    }

    /// Sends a message: a [`Frame`], or what converts into one (`&str`,
    /// `String`, `Bytes`, `Vec<u8>`, [`Message`](super::Message)). A broadcast makes one
    /// [`Frame`] and sends a reference to it to every socket, so the
    /// message is encoded once.
    ///
    /// A close frame ([`Frame::close`], [`Message::Close`](super::Message::Close)) starts the
    /// closing handshake: nothing more can be sent, and the connection
    /// closes once the client answers.
    ///
    /// # Errors
    ///
    /// [`SendError::Closed`] if the socket is closed or closing;
    /// [`SendError::Full`] if its queue is full (see [`WhenFull`]).
    pub fn send(&self, frame: impl Into<Frame>) -> Result<(), SendError> {
        self.push(frame.into())
    }

    /// Starts the closing handshake with `code` and `reason` (see
    /// [`Frame::close`]).
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send).
    pub fn close(&self, code: CloseCode, reason: &str) -> Result<(), SendError> {
        self.push(Frame::close(code, reason))
    }

    /// Whether the socket is closed or closing: sends fail.
    pub fn is_closed(&self) -> bool {
        self.0.lock().closing
    }

    /// Whether the socket sleeps now: no task serves it.
    pub fn is_asleep(&self) -> bool {
        matches!(self.0.lock().at, At::Asleep(_))
    }

    /// How many bytes wait in the socket's queue.
    pub fn queued(&self) -> usize {
        self.0.lock().queued()
    }

    pub(super) fn push(&self, frame: Frame) -> Result<(), SendError> {
        let link = &self.0;
        let bytes = frame.bytes(link.send_compressed.load(Relaxed));
        let mut guard = link.lock();
        let state = &mut *guard;
        if state.closing {
            return Err(SendError::Closed);
        }
        if let (At::Asleep(key), Some(lot)) = (state.at, &state.lot) {
            let (wrote, id) = (lot.write_to(key, link.id(), bytes), link.id());
            let woken = |state: &LinkState| state.lot.as_ref().is_some_and(|lot| lot.wake(key, id));
            match wrote {
                Some(Ok(Wrote { taken, held })) => {
                    state.closing = frame.is_close();
                    // A close frame wakes the socket too: a task waits
                    // (bounded) for the client's answer.
                    if taken == bytes.len() && !held && !state.closing {
                        return Ok(());
                    }
                    // The client does not read: a task waits to write the
                    // rest.
                    if taken < bytes.len() {
                        state.push(bytes.slice(taken..));
                    }
                    state.set_at(At::Awake);
                    state.woken_to_write = woken(state);
                    return Ok(());
                }
                Some(Err(_)) => {
                    // The socket failed: its task finds out and ends it.
                    state.set_at(At::Awake);
                    state.woken_to_write = woken(state);
                    return Err(SendError::Closed);
                }
                // It woke meanwhile: its task takes the queue.
                None => state.set_at(At::Awake),
            }
        }
        // An empty queue takes a frame of any size: a message larger than
        // the bound can be sent, one at a time.
        let queued = state.queued();
        if queued > 0 && queued + bytes.len() > state.settings.max_queued as usize {
            if state.settings.when_full == WhenFull::Close {
                state.overflowed = true;
                state.closing = true;
                state.wake_task();
            }
            return Err(SendError::Full);
        }
        state.closing = frame.is_close();
        state.push(bytes.clone());
        // A task that waits for sends (a socket over HTTP/2) writes it.
        state.wake_task();
        Ok(())
    }
}

/// Waits for `io`, unless a send finds the queue full meanwhile and the
/// policy is to close (it wakes the task with the waker left here).
pub(super) async fn unless_overflowed(
    link: &Link,
    mut io: impl FnMut(&mut Context<'_>) -> Poll<io::Result<()>>,
) -> io::Result<()> {
    poll_fn(|cx| match io(cx) {
        Poll::Pending => {
            let mut state = link.lock();
            if state.overflowed {
                return Poll::Ready(Err(overflowed()));
            }
            state.outbox.get_or_insert_with(Box::default).waker = Some(cx.waker().clone());
            Poll::Pending
        }
        ready => ready,
    })
    .await
}

pub(super) fn overflowed() -> io::Error {
    io::Error::other("the WebSocket's queue overflowed: its client does not read")
}
