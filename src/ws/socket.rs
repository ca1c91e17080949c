//! A WebSocket between messages: asleep in the parking lot with its state,
//! woken by its client's next frame or by a write that found its socket
//! full; and the [`Sender`] that writes to it wherever it is.
//!
//! # Where a socket is
//!
//! ```text
//!             101 written                 read found nothing, queue empty
//!  Upgrading ───────────► Awake (a task) ─────────────────────────────► Asleep(key)
//!     │ sends queue          │ ▲  sends queue; the task runs the           │ │
//!     │                      │ │  handler per message, answers pings,      │ │ sends write
//!     │                      │ │  flushes the queue                        │ │ to the socket
//!     │                      │ └──────── bytes arrived; or a send ─────────┘ │ at once
//!     │                      │           found the socket full               │
//!     └──────────────────────┴──► Closed ◄── the peer vanished, shutdown ────┘
//! ```
//!
//! Every socket has a [`Link`], shared by its [`Sender`]s and whoever
//! serves it; its lock orders every write. While the socket sleeps, the
//! link knows its key in the lot and a send writes the frame to the socket
//! right there, through the lot ([`Lot::write_to`]): no task, no buffer.
//! A frame the socket does not take whole (the client stopped reading)
//! is queued and the socket woken, so that a task waits to write it; while
//! it is awake, sends queue and the task writes them before the socket
//! sleeps again. The queue is bounded (`max_queued`): past it, a send
//! fails, and by default the socket is closed (1008), so that one client
//! that stopped reading costs the others nothing and the server a bounded
//! amount.
//!
//! The lot's lock is taken under a link's lock (never the other way
//! round): the lot calls a woken sleeper's handler in a new task, without
//! its lock.
//!
//! An awake socket's reads make progress or end: the reader takes every
//! byte it is fed (a header byte by byte, a payload as it comes), and a
//! read that found less than a buffer puts the socket back to sleep,
//! with the part of a frame it holds kept in the reader, not counted as
//! bytes to read; the lot's registration reports the next ones (tests:
//! tests/ws_sleep.rs, `a_frame_in_pieces_does_not_stop_another_socket`).

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Poll, Waker, ready};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::frame::Frame;
use super::message::{CloseCode, CloseFrame, Message};
use super::reader::{Event, Reader, Refused, Rules};
use super::topic::Members;
use crate::lot::Wrote;
use crate::stats::WsCounters;
use crate::upgrade::{self, Drain, Lot, Upgraded, Woken};

/// What a closing socket reads at most beyond its limits: its client's
/// close frame comes after the rest of the frame in flight (a message it
/// refused), which may be as large as the limits, and after what the client
/// sent before it saw the server's close frame.
const CLOSING_READ: usize = 1 << 20;

/// The most a closing socket reads: its limits (at most 64 MiB) and
/// [`CLOSING_READ`].
fn closing_budget(rules: Rules) -> usize {
    let limits = rules.frame.max(rules.message) as usize;
    limits.min(64 << 20) + CLOSING_READ
}

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
pub(crate) struct Settings {
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
pub(crate) struct KeepAlive {
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

/// A duration in milliseconds for [`KeepAlive`]: `0` for none, else 1 ms
/// to 24 days.
pub(crate) fn keep_alive_millis(d: Option<Duration>) -> u32 {
    d.map_or(0, |d| d.as_millis().clamp(1, i32::MAX as u128) as u32)
}

impl KeepAlive {
    pub(crate) fn set(&self, ping_every: u32, ping_timeout: u32, idle: u32) {
        self.ping_every.store(ping_every, Relaxed);
        self.ping_timeout.store(ping_timeout, Relaxed);
        self.idle.store(idle, Relaxed);
        self.mark.store(clock() & !3, Relaxed);
    }

    /// When a sleeping socket is next asked ([`Sleeper::due`]): every
    /// `ping_every`; without pings, a quarter of the idle timeout.
    fn period(&self) -> Option<Duration> {
        match (self.ping_every.load(Relaxed), self.idle.load(Relaxed)) {
            (0, 0) => None,
            (0, idle) => Some(Duration::from_millis(u64::from(idle / 4).max(1))),
            (every, _) => Some(Duration::from_millis(every.into())),
        }
    }

    /// Bytes came from the client: it is alive.
    fn heard(&self) {
        self.mark.fetch_and(!PINGED, Relaxed);
    }

    /// A message came from the client: it is not idle.
    fn message(&self) {
        self.mark.store(clock() & !3, Relaxed);
    }

    /// What the lot does when the socket's deadline passes where it
    /// sleeps: a ping, or the socket's end (see [`Sleeper::due`]).
    fn due(&self, write: &mut dyn FnMut(&[u8]) -> bool) -> Option<Duration> {
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
    fn expired(&self) -> Option<&'static str> {
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
    state: Mutex<State>,
    pub(crate) keep_alive: KeepAlive,
    /// The socket negotiated compression for the server's messages: a
    /// send takes a [`Frame`]'s compressed bytes (compressing it first, if
    /// no socket did yet), before it takes the lock.
    send_compressed: AtomicBool,
}

#[derive(Debug)]
struct State {
    at: At,
    /// The lot the socket sleeps in, once upgraded.
    lot: Option<Lot>,
    /// Frames waiting for the awake socket's task, and its waker; `None`
    /// while asleep.
    outbox: Option<Box<Outbox>>,
    /// A close frame was sent or queued: no more messages go out.
    closing: bool,
    /// A send found the queue full, and the policy is to close.
    overflowed: bool,
    /// A send woke the sleeping socket to write what it did not take.
    woken_to_write: bool,
    settings: Settings,
    /// The topics the socket joined, and its slot in each: it leaves them
    /// when it closes.
    #[allow(
        clippy::box_collection,
        reason = "one pointer in every socket, where a Vec is three"
    )]
    topics: Option<Box<Vec<Membership>>>,
}

/// A socket's place in a topic.
#[derive(Debug)]
struct Membership {
    topic: Weak<Members>,
    slot: u32,
}

/// What waits for an awake socket's task to write.
#[derive(Debug, Default)]
struct Outbox {
    frames: VecDeque<Bytes>,
    queued: usize,
    /// The task's waker while it waits to write.
    waker: Option<Waker>,
}

impl State {
    fn queued(&self) -> usize {
        self.outbox.as_ref().map_or(0, |outbox| outbox.queued)
    }

    /// The server's WebSocket gauges, once the socket is upgraded.
    fn counters(&self) -> Option<&WsCounters> {
        self.lot.as_ref().map(Lot::ws_counters)
    }

    /// Moves the socket to `at`, keeping the server's gauges.
    fn set_at(&mut self, at: At) {
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

    fn push(&mut self, frame: Bytes) {
        if let Some(counters) = self.counters() {
            counters.queued.fetch_add(frame.len(), Relaxed);
        }
        let outbox = self.outbox.get_or_insert_with(Box::default);
        outbox.queued += frame.len();
        outbox.frames.push_back(frame);
    }

    fn pop(&mut self) -> Option<Bytes> {
        let outbox = self.outbox.as_mut()?;
        let frame = outbox.frames.pop_front()?;
        outbox.queued -= frame.len();
        if let Some(counters) = self.counters() {
            counters.queued.fetch_sub(frame.len(), Relaxed);
        }
        Some(frame)
    }

    /// Drops what waits to be written.
    fn clear_outbox(&mut self) {
        let queued = self.queued();
        if let (Some(counters), true) = (self.counters(), queued > 0) {
            counters.queued.fetch_sub(queued, Relaxed);
        }
        self.outbox = None;
    }

    fn is_empty(&self) -> bool {
        self.queued() == 0
    }

    fn wake_task(&mut self) {
        if let Some(waker) = self.outbox.as_mut().and_then(|outbox| outbox.waker.take()) {
            waker.wake();
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    Upgrading,
    Awake,
    Asleep(u32),
    Closed,
}

impl Link {
    pub(crate) fn new(settings: Settings) -> Arc<Link> {
        static NUMBERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Arc::new(Link {
            number: NUMBERS.fetch_add(1, Relaxed),
            state: Mutex::new(State {
                at: At::Upgrading,
                lot: None,
                outbox: None,
                closing: false,
                overflowed: false,
                woken_to_write: false,
                settings,
                topics: None,
            }),
            keep_alive: KeepAlive::default(),
            send_compressed: AtomicBool::new(false),
        })
    }

    /// Sets whether the server's messages go compressed (set at the
    /// upgrade, before the socket first sleeps).
    #[cfg(feature = "ws-deflate")]
    pub(crate) fn send_compressed(&self, on: bool) {
        self.send_compressed.store(on, Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Every step under the lock leaves the state whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Who the link's socket is to the lot ([`upgrade::Handler::sleeper`]).
    fn id(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    pub(crate) fn set_settings(&self, settings: Settings) {
        self.lock().settings = settings;
    }

    /// The socket ended: senders fail from now on, and it leaves its
    /// topics.
    fn close(&self) {
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
pub struct Sender(Arc<Link>);

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
    pub(crate) fn join(&self, members: &Arc<Members>, insert: impl FnOnce() -> u32) -> bool {
        let mut state = self.0.lock();
        if state.closing || state.at == At::Closed {
            return false;
        }
        let topics = state.topics.get_or_insert_with(Box::default);
        let member = |m: &Membership| std::ptr::eq(m.topic.as_ptr(), Arc::as_ptr(members));
        if topics.iter().any(member) {
            return false;
        }
        // The topic's lock under the link's, as everywhere.
        let slot = insert();
        topics.push(Membership {
            topic: Arc::downgrade(members),
            slot,
        });
        true
    }

    /// Leaves the topic `members`: the slot it had, if it was a member.
    pub(crate) fn leave(&self, members: &Arc<Members>) -> Option<u32> {
        let mut state = self.0.lock();
        let topics = state.topics.as_mut()?;
        let at = topics
            .iter()
            .position(|m| std::ptr::eq(m.topic.as_ptr(), Arc::as_ptr(members)))?;
        Some(topics.swap_remove(at).slot)
    }

    /// Sends a message: a [`Frame`], or what converts into one (`&str`,
    /// `String`, `Bytes`, `Vec<u8>`, [`Message`]). A broadcast makes one
    /// [`Frame`] and sends a reference to it to every socket, so the
    /// message is encoded once.
    ///
    /// A close frame ([`Frame::close`], [`Message::Close`]) starts the
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

    fn push(&self, frame: Frame) -> Result<(), SendError> {
        let link = &self.0;
        let bytes = frame.bytes(link.send_compressed.load(Relaxed));
        let mut guard = link.lock();
        let state = &mut *guard;
        if state.closing {
            return Err(SendError::Closed);
        }
        if let (At::Asleep(key), Some(lot)) = (state.at, &state.lot) {
            let (wrote, id) = (lot.write_to(key, link.id(), bytes), link.id());
            let woken = |state: &State| state.lot.as_ref().is_some_and(|lot| lot.wake(key, id));
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
        Ok(())
    }
}

/// A sleeping socket: what it keeps, boxed in the lot as its handler.
pub(crate) struct Sleeper<S, F> {
    link: Arc<Link>,
    /// The lot it sleeps in (for a drain at shutdown, without the link's
    /// lock, which may be held where the lot calls back at once).
    lot: Lot,
    state: S,
    handler: F,
    reader: Reader,
}

/// Serves a socket once its upgrade completes: it sleeps at once (or reads
/// the bytes that came with the upgrade first).
pub(crate) async fn upgraded<S, F, Fut>(
    link: Arc<Link>,
    state: S,
    mut handler: F,
    upgrade: upgrade::OnUpgrade,
) where
    S: Send + 'static,
    F: FnMut(S, Message, Sender) -> Fut + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    let parts = match upgrade.await {
        Ok(parts) => parts,
        Err(_) => {
            link.close();
            handler(state, Message::Close(None), Sender(link)).await;
            return;
        }
    };
    {
        let mut link = link.lock();
        link.lot = Some(parts.lot.clone());
        // What was sent before the upgrade counts from now on.
        let queued = link.queued();
        if let Some(counters) = link.counters() {
            counters.queued.fetch_add(queued, Relaxed);
        }
        link.set_at(At::Awake);
    }
    let sleeper = Sleeper {
        link,
        lot: parts.lot.clone(),
        state,
        handler,
        reader: Reader::default(),
    };
    Awake::from(sleeper).sleep(Upgraded::from(parts)).await;
}

impl<S, F, Fut> upgrade::Handler for Sleeper<S, F>
where
    S: Send + 'static,
    F: FnMut(S, Message, Sender) -> Fut + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    fn run(self: Box<Self>, woken: Woken) {
        // Taken before the task starts: the drain must not find the
        // server's connections all gone while a goodbye is on its way.
        let drain = match woken {
            Woken::Shutdown(_) => Some(self.lot.drain()),
            _ => None,
        };
        // The sleeper becomes a task's only once the task runs: a runtime
        // that shuts down drops the task at once, maybe under the link's
        // lock (a send that woke the socket), and only an `Awake` closes
        // the link when dropped.
        let sleeper = *self;
        tokio::spawn(async move { Awake::from(sleeper).woken(woken, drain).await });
    }

    fn sleeper(&self) -> usize {
        self.link.id()
    }

    fn due(&mut self, write: &mut dyn FnMut(&[u8]) -> bool) -> Option<Duration> {
        self.link.keep_alive.due(write)
    }
}

/// A socket with a task: what its sleeper kept.
struct Awake<S, F> {
    link: Arc<Link>,
    lot: Lot,
    /// `None` only while the handler runs.
    state: Option<S>,
    handler: F,
    reader: Reader,
    /// Closes the link if the task unwinds (a handler's panic).
    _closer: Closer,
}

/// Closes a link when dropped, unless disarmed.
struct Closer(Option<Arc<Link>>);

impl Drop for Closer {
    fn drop(&mut self) {
        if let Some(link) = self.0.take() {
            link.close();
        }
    }
}

impl<S, F> From<Sleeper<S, F>> for Awake<S, F> {
    fn from(sleeper: Sleeper<S, F>) -> Self {
        let Sleeper {
            link,
            lot,
            state,
            handler,
            reader,
        } = sleeper;
        Awake {
            _closer: Closer(Some(link.clone())),
            link,
            lot,
            state: Some(state),
            handler,
            reader,
        }
    }
}

/// How far a closing socket goes.
struct Bounds {
    deadline: tokio::time::Instant,
    /// Bytes it may still read.
    budget: usize,
}

impl Bounds {
    /// Takes `n` bytes read from the budget: false if they were more.
    fn take(&mut self, n: usize) -> bool {
        match self.budget.checked_sub(n) {
            Some(left) => {
                self.budget = left;
                true
            }
            None => false,
        }
    }
}

/// How a socket's connection ended, and the goodbye still owed to it.
struct Ended {
    end: End,
    goodbye: Option<Goodbye>,
}

impl From<End> for Ended {
    /// An end that owes no goodbye: the connection is gone.
    fn from(end: End) -> Ended {
        Ended { end, goodbye: None }
    }
}

/// A connection's last words, said after the handler heard of its end
/// (see [`Goodbye::say`]).
struct Goodbye {
    stream: Upgraded,
    bounds: Bounds,
    /// The client's close frame did not come (and will not be read): read
    /// until the client closes its side.
    until_eof: bool,
}

impl Goodbye {
    /// The transport's own goodbye (TLS: `close_notify`) and the end of
    /// the stream (the server closes the connection first, RFC 6455,
    /// 7.1.1); then what the client sent is read and dropped, so that the
    /// socket is not closed with bytes unread (the kernel would answer
    /// with a reset, which can destroy the close frame on its way): what
    /// is there, once the client's close frame came (nothing should follow
    /// it); else everything until the client, which now has the server's
    /// close frame and end, closes its side. Within the bounds, not until
    /// a pause: a client still sending a large message pauses as it likes.
    async fn say(mut self) {
        let deadline = self.bounds.deadline;
        let bounds = &mut self.bounds;
        let stream = &mut self.stream;
        let until_eof = self.until_eof;
        let goodbye = async {
            stream.shutdown().await?;
            loop {
                let read = match until_eof {
                    true => stream.read_pooled().await?,
                    false => stream.read_pooled_now().await?,
                };
                match read {
                    Some(bytes) if bounds.take(bytes.len()) => {}
                    _ => break,
                }
            }
            io::Result::Ok(())
        };
        let _ = tokio::time::timeout_at(deadline, goodbye).await;
    }
}

/// How a socket's connection ends.
enum End {
    /// The client sent its close frame (the server answered it, if it had
    /// not sent its own first).
    Closed(Option<CloseFrame>),
    /// The connection ended without a close frame from the client.
    Lost,
}

impl<S, F, Fut> Awake<S, F>
where
    S: Send + 'static,
    F: FnMut(S, Message, Sender) -> Fut + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    /// Serves a socket the lot woke; at shutdown, the drain waits for its
    /// goodbye.
    async fn woken(mut self, woken: Woken, drain: Option<Drain>) {
        let to_write = {
            let mut state = self.link.lock();
            state.set_at(At::Awake);
            std::mem::take(&mut state.woken_to_write)
        };
        let expired = self.link.keep_alive.expired();
        let ended = match woken {
            Woken::Readable(stream) | Woken::Eof(stream) if expired.is_some() => {
                let reason = expired.unwrap_or_default();
                // A client that stopped answering may not answer this
                // either: the handler hears of the end at once, and the
                // goodbye waits (bounded) for the client to close.
                self.push_control(Frame::close(CloseCode::GOING_AWAY, reason));
                self.hang_up(stream).await
            }
            Woken::Readable(mut stream) | Woken::Eof(mut stream) => {
                let served = if to_write {
                    // Woken by a send, not by bytes: write, then sleep (the
                    // lot wakes it at once if bytes came meanwhile).
                    match self.write_queue(&mut stream).await {
                        Ok(()) => Ok(stream),
                        Err(_) => Err(End::Lost.into()),
                    }
                } else {
                    self.serve(stream).await
                };
                match served {
                    Ok(stream) => return self.sleep(stream).await,
                    Err(ended) => ended,
                }
            }
            Woken::Shutdown(stream) => self.shut_down(stream, drain.as_ref()).await,
            Woken::Failed(_) => End::Lost.into(),
        };
        self.end(ended).await;
    }

    /// Reads and handles what arrived until a read finds nothing: the
    /// stream, to sleep again; or how the connection ended.
    async fn serve(&mut self, mut stream: Upgraded) -> Result<Upgraded, Ended> {
        // The first read waits for the readiness that woke the socket: its
        // stream was just registered with tokio, which has not seen it yet.
        let mut read = stream.read_pooled().await;
        // Set before the socket first slept: read once a wake.
        let rules = self.link.lock().settings.rules;
        loop {
            let bytes = match read {
                Ok(Some(bytes)) => bytes,
                Ok(None) | Err(_) => return Err(End::Lost.into()),
            };
            self.link.keep_alive.heard();
            let mut input = &bytes[..];
            loop {
                match self.reader.read(&mut input, rules) {
                    Ok(Some(Event::Close(frame))) => return Err(self.closed(frame, stream).await),
                    Ok(Some(event)) => self.handle(event).await,
                    Ok(None) => break,
                    Err(refused) => return Err(self.refuse(refused, stream, input).await),
                }
            }
            let full = bytes.is_full();
            drop(bytes);
            if self.write_queue(&mut stream).await.is_err() {
                return Err(End::Lost.into());
            }
            if !full {
                // Likely all there was: the lot's registration reports
                // bytes that came meanwhile at once, and a TLS session's
                // buffered records wake it again (`Lot::sleep`).
                return Ok(stream);
            }
            read = match stream.read_pooled_now().await {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(stream),
                read => read,
            };
        }
    }

    /// Acts on a message, a ping or a pong.
    async fn handle(&mut self, event: Event) {
        let closing = self.link.lock().closing;
        match event {
            // After its close frame, the server discards what comes.
            Event::Message(_) if closing => {}
            Event::Message(message) => {
                self.link.keep_alive.message();
                self.call(message).await;
            }
            Event::Ping(payload) => {
                if !closing {
                    self.push_control(Frame::pong(&payload));
                }
            }
            Event::Pong | Event::Close(_) => {}
        }
    }

    /// The client's close frame came: the server answers it (unless it
    /// sent its own first), and says goodbye.
    async fn closed(&mut self, frame: Option<CloseFrame>, mut stream: Upgraded) -> Ended {
        if !self.link.lock().closing {
            // The answer echoes the code (RFC 6455, 5.5.1).
            let code = frame.as_ref().map_or(CloseCode::NONE, |f| f.code);
            self.push_control(Frame::close(code, ""));
        }
        let bounds = self.bounds();
        let _ = tokio::time::timeout_at(bounds.deadline, self.write_queue(&mut stream)).await;
        Ended {
            end: End::Closed(frame),
            goodbye: Some(Goodbye {
                stream,
                bounds,
                until_eof: false,
            }),
        }
    }

    /// Runs the handler on a message: the state moves through it.
    async fn call(&mut self, message: Message) {
        if let Some(state) = self.state.take() {
            let sender = Sender(self.link.clone());
            self.state = Some((self.handler)(state, message, sender).await);
        }
    }

    /// Answers a client that broke the protocol or a limit with the close
    /// code for it (RFC 6455, 7.1.7), then waits for its close frame (the
    /// rest of this read, `rest`, first), as [`await_close`](Self::await_close).
    async fn refuse(&mut self, refused: Refused, stream: Upgraded, rest: &[u8]) -> Ended {
        if !self.link.lock().closing {
            self.push_control(Frame::close(refused.code, refused.reason));
        }
        self.await_close(stream, rest, Some(refused)).await
    }

    /// Queues a control frame the protocol owes (a pong, a close), past
    /// the queue's limit: it is small, and bounded by what the client sent.
    fn push_control(&self, frame: Frame) {
        let mut state = self.link.lock();
        state.closing |= frame.is_close();
        state.push(frame.bytes(false).clone());
    }

    /// The server shuts down: a close frame (1001) after what is queued,
    /// and a wait for the client's answer, cut short when the server's
    /// grace period is over (then no goodbye either).
    async fn shut_down(&mut self, mut stream: Upgraded, drain: Option<&Drain>) -> Ended {
        if !self.link.lock().closing {
            self.push_control(Frame::close(
                CloseCode::GOING_AWAY,
                "the server is shutting down",
            ));
        }
        self.reader.closing(None);
        let mut bounds = self.bounds();
        let deadline = bounds.deadline;
        let answer = async {
            if self.write_queue(&mut stream).await.is_err() {
                return End::Lost;
            }
            self.client_close(&mut stream, &mut bounds).await
        };
        let forced = async {
            match drain {
                Some(drain) => drain.forced().await,
                None => std::future::pending().await,
            }
        };
        let end = tokio::select! {
            answered = tokio::time::timeout_at(deadline, answer) => answered.unwrap_or(End::Lost),
            () = forced => End::Lost,
        };
        // The transport's goodbye (TLS: `close_notify`), unless the grace
        // period is over.
        let goodbye = drain
            .is_none_or(|drain| !drain.is_forced())
            .then_some(Goodbye {
                stream,
                bounds,
                until_eof: false,
            });
        Ended { end, goodbye }
    }

    /// How far a closing socket goes: until its close timeout
    /// (`WebSocketUpgrade::close_timeout`), reading at most its
    /// [`closing_budget`].
    fn bounds(&self) -> Bounds {
        let settings = self.link.lock().settings;
        let within = Duration::from_millis(settings.close_timeout.into());
        Bounds {
            deadline: tokio::time::Instant::now() + within,
            budget: closing_budget(settings.rules),
        }
    }

    /// The server sent (or queued) its close frame, maybe refusing what
    /// the client sent (`refused`): writes what is queued, then reads and
    /// drops what the client still sends (`rest` first: the rest of a
    /// refused message, what the client sent before it saw the close
    /// frame) until its close frame, within the close timeout and the
    /// closing budget. After a refusal of the client's framing itself
    /// (1002), its close frame cannot be found: the server hangs up at
    /// once ([`hang_up`](Self::hang_up)).
    async fn await_close(
        &mut self,
        mut stream: Upgraded,
        rest: &[u8],
        refused: Option<Refused>,
    ) -> Ended {
        self.reader.closing(refused);
        if self.reader.is_dropping() {
            return self.hang_up(stream).await;
        }
        let mut bounds = self.bounds();
        let end = match self.close_frame_in(rest) {
            Some(end) => {
                let _ =
                    tokio::time::timeout_at(bounds.deadline, self.write_queue(&mut stream)).await;
                end
            }
            None => {
                let deadline = bounds.deadline;
                let answer = async {
                    if self.write_queue(&mut stream).await.is_err() {
                        return End::Lost;
                    }
                    self.client_close(&mut stream, &mut bounds).await
                };
                tokio::time::timeout_at(deadline, answer)
                    .await
                    .unwrap_or(End::Lost)
            }
        };
        Ended {
            end,
            goodbye: Some(Goodbye {
                stream,
                bounds,
                until_eof: false,
            }),
        }
    }

    /// Writes the close frame queued, and ends the socket without waiting
    /// for the client's: the goodbye reads until the client closes its
    /// side.
    async fn hang_up(&mut self, mut stream: Upgraded) -> Ended {
        let bounds = self.bounds();
        let _ = tokio::time::timeout_at(bounds.deadline, self.write_queue(&mut stream)).await;
        Ended {
            end: End::Lost,
            goodbye: Some(Goodbye {
                stream,
                bounds,
                until_eof: true,
            }),
        }
    }

    /// Reads (and drops) what the client sends until its close frame, the
    /// reader closing.
    async fn client_close(&mut self, stream: &mut Upgraded, bounds: &mut Bounds) -> End {
        loop {
            let Ok(Some(bytes)) = stream.read_pooled().await else {
                return End::Lost;
            };
            if !bounds.take(bytes.len()) {
                return End::Lost;
            }
            if let Some(end) = self.close_frame_in(&bytes) {
                return end;
            }
        }
    }

    /// The client's close frame, if `input` completes it (the reader
    /// closing); `Some(End::Lost)` if the client broke even that.
    fn close_frame_in(&mut self, mut input: &[u8]) -> Option<End> {
        let rules = self.link.lock().settings.rules;
        loop {
            match self.reader.read(&mut input, rules) {
                Ok(Some(Event::Close(frame))) => return Some(End::Closed(frame)),
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(_) => return Some(End::Lost),
            }
        }
    }

    /// Writes the queue until it is empty.
    ///
    /// # Errors
    ///
    /// When the socket fails, or a send found the queue full and the
    /// policy is to close.
    async fn write_queue(&mut self, stream: &mut Upgraded) -> io::Result<()> {
        let link = &self.link;
        loop {
            let next = {
                let mut state = link.lock();
                if state.overflowed {
                    return Err(overflowed());
                }
                match state.pop() {
                    Some(next) => next,
                    None => break,
                }
            };
            let mut written = 0;
            unless_overflowed(link, |cx| {
                while written < next.len() {
                    match ready!(Pin::new(&mut *stream).poll_write(cx, &next[written..]))? {
                        0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                        n => written += n,
                    }
                }
                Poll::Ready(Ok(()))
            })
            .await?;
        }
        // What the transport holds (TLS records) goes out too.
        unless_overflowed(link, |cx| Pin::new(&mut *stream).poll_flush(cx)).await?;
        // Written: a socket that sleeps keeps no queue.
        link.lock().clear_outbox();
        Ok(())
    }

    /// Puts the socket to sleep, unless sends came meanwhile (it writes
    /// them first).
    async fn sleep(mut self, mut stream: Upgraded) {
        loop {
            if self.write_queue(&mut stream).await.is_err() {
                return self.end(End::Lost.into()).await;
            }
            if self.link.lock().closing {
                // Its close frame went out: it waits for the client's
                // answer rather than sleep (a client that never answers
                // would keep it forever).
                let ended = self.await_close(stream, &[], None).await;
                return self.end(ended).await;
            }
            let link = self.link.clone();
            {
                let mut state = link.lock();
                if !state.is_empty() {
                    continue;
                }
                let Some(user) = self.state.take() else {
                    // A handler that panicked.
                    break;
                };
                {
                    let Awake {
                        lot,
                        handler,
                        reader,
                        mut _closer,
                        ..
                    } = self;
                    _closer.0 = None;
                    let sleeper = Box::new(Sleeper {
                        link: link.clone(),
                        lot: lot.clone(),
                        state: user,
                        handler,
                        reader,
                    });
                    // Under the link's lock: a send finds the socket awake,
                    // or asleep at its key.
                    let after = link.keep_alive.period();
                    let at = match lot.sleep_boxed(stream, sleeper, after) {
                        Some(key) => At::Asleep(key),
                        None => At::Awake,
                    };
                    state.set_at(at);
                    return;
                }
            }
        }
        self.end(End::Lost.into()).await;
    }

    /// The socket ended: the link closes, the connection is let go, and
    /// the handler gets its last message.
    async fn end(mut self, ended: Ended) {
        self.link.close();
        let frame = match ended.end {
            End::Closed(frame) => frame,
            End::Lost => None,
        };
        self.call(Message::Close(frame)).await;
        if let Some(goodbye) = ended.goodbye {
            goodbye.say().await;
        }
    }
}

/// Waits for `io`, unless a send finds the queue full meanwhile and the
/// policy is to close (it wakes the task with the waker left here).
async fn unless_overflowed(
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

fn overflowed() -> io::Error {
    io::Error::other("the WebSocket's queue overflowed: its client does not read")
}
