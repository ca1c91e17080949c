//! The per-connection driver: the idle ladder ACTIVE ⇄ PARKED.
//!
//! ```text
//! accept ─► PARKED ── readable ─► try_read into a pool buffer
//!             ▲                     │ 0 bytes: the peer closed → done, no hyper state built
//!             │                     ▼
//!             │                   ACTIVE: hyper over ConnIo (replays the bytes first)
//!             │                     │ HTTP/2 preface → hyper's http2 server (never parks)
//!             └── idle for ─────────┘
//!                 `park_after`: into_parts, copy the unparsed bytes, drop the rest
//! ```
//!
//! A PARKED connection is one small task holding its `TcpStream`, a
//! reference to the service, and (only if the client pipelined part of a
//! request) the bytes hyper had read but not parsed. It owns no hyper
//! connection and no buffer (invariants I1 and I4 of the design). A parked
//! HTTP/1 connection that carries no bytes and has no request head on the
//! clock does not even keep its task: its `TcpStream` waits in the parking
//! lot (`Lot::park`), which spawns a new task for it when bytes arrive
//! (see `lot`), and moves it to DORMANT after `dormant_after`. A new
//! connection waiting for its first request, and one holding part of a
//! request, wait in their task, under their header or idle deadline; they
//! never go dormant (the lot keeps one idle timeout for all).
//!
//! # When is hyper between messages?
//!
//! hyper does not say, so the driver watches from the outside. After the
//! hyper connection future returns `Pending`, the connection is *idle* when
//! all of these hold:
//!
//! - the last read hyper issued reached the socket and found nothing
//!   (`WouldBlock`), and no replayed byte is left: hyper has every byte the
//!   client sent so far, and is waiting for more;
//! - no request is in flight: every service future has completed and every
//!   response body has been written to its end and dropped by hyper;
//! - every write was flushed: hyper's write buffer is empty;
//! - every request body was read to its end, or dropped and hyper has been
//!   polled since. A body still alive (a handler may answer first and read
//!   the body later, in another task) keeps hyper in the middle of the
//!   message. When a body is dropped unread, hyper's next poll drains the
//!   rest if it has already arrived, or stops reading and closes the
//!   connection after the response (`poll_drain_or_close_read`); parking
//!   before that poll could cut a body in two and let its tail be parsed as
//!   a request (request smuggling).
//!
//! With nothing in flight and nothing buffered on either side, hyper's only
//! state is its keep-alive `Init` state plus, possibly, the first bytes of a
//! request head it could not yet parse. `into_parts` hands those back; the
//! driver copies them out (a slice would pin hyper's whole read buffer) and
//! replays them to the next hyper connection (invariant I2).
//!
//! Parking right after each response would rebuild hyper for every request
//! of a busy connection, so the driver waits until the connection has been
//! idle for `park_after`. The same timer enforces the timeouts (see
//! `timeout`).

use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tracing::{Instrument, debug, debug_span, trace};

use crate::io::{ConnIo, Replay};
use crate::server::{Open, ServeState};
use crate::service::{ConnService, HttpService, ResBody};
use crate::shutdown::{Level, Watch};
use crate::stats::Gauge;
use crate::timeout::{Expiry, Observed, Timeouts, Watchdog};
use crate::upgrade::{self, HandOff};

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the driver, the service wrapper, the request bodies and `ConnIo`
/// share about one ACTIVE connection.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    /// Requests in flight (low 32 bits) and, of those, requests whose
    /// response is being written (high 32 bits).
    in_flight: AtomicU64,
    /// Request bodies handed to the service and not yet at their end.
    open_bodies: AtomicUsize,
    /// Request bodies dropped before their end, ever. The driver compares
    /// it with the count hyper has seen (see [`Tracker::observe`]).
    abandons: AtomicU64,
    /// The latest request's body was dropped before its end: hyper may have
    /// stopped reading (see [`Tracker::awaits_response`]).
    abandoned: AtomicBool,
    read_blocked: AtomicBool,
    unflushed: AtomicBool,
    /// Bytes arrived after the last request ended and before the next one
    /// began: hyper holds part of a request head.
    head_pending: AtomicBool,
    requests: AtomicU64,
    /// An upgrade the handler accepted, waiting for hyper to finish.
    pub(crate) upgrade: HandOff,
}

const RESPONDING: u64 = 1 << 32;

impl Tracker {
    pub(crate) fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        self.requests.fetch_add(1, Relaxed);
        self.head_pending.store(false, Relaxed);
        self.abandoned.store(false, Relaxed);
        InFlight {
            tracker: self.clone(),
            responding: false,
        }
    }

    pub(crate) fn body_opened(&self) {
        self.open_bodies.fetch_add(1, Relaxed);
    }

    /// A body reached its end (`complete`) or was dropped before it.
    pub(crate) fn body_closed(&self, complete: bool) {
        self.open_bodies.fetch_sub(1, Relaxed);
        if !complete {
            self.abandons.fetch_add(1, Relaxed);
            self.abandoned.store(true, Relaxed);
        }
    }

    /// A request is in flight and hyper reads nothing until it is answered:
    /// its body was read to the end, or it had none. Only then does
    /// `ConnIo` look for the peer's close (see `io`). Not after a body was
    /// dropped before its end: hyper then drains it or stops reading, and a
    /// hyper that stops reading does not look for the close either.
    pub(crate) fn awaits_response(&self) -> bool {
        self.in_flight.load(Relaxed) & (RESPONDING - 1) != 0
            && self.open_bodies.load(Relaxed) == 0
            && !self.abandoned.load(Relaxed)
    }

    pub(crate) fn set_read_blocked(&self, blocked: bool) {
        self.read_blocked.store(blocked, Relaxed);
    }

    pub(crate) fn set_unflushed(&self, unflushed: bool) {
        self.unflushed.store(unflushed, Relaxed);
    }

    /// hyper read bytes from the client.
    pub(crate) fn bytes_read(&self) {
        if self.in_flight.load(Relaxed) == 0 && self.open_bodies.load(Relaxed) == 0 {
            self.head_pending.store(true, Relaxed);
        }
    }

    /// What the connection is doing (see module docs). `acked` is the
    /// number of abandoned bodies hyper has reacted to.
    ///
    /// When a handler drops a body before its end, the next poll of hyper
    /// either drains the rest of the body, if it is already readable, or
    /// stops reading and closes the connection once the response is written
    /// (`poll_drain_or_close_read` in hyper's `proto/h1/conn.rs`). An
    /// abandoned body therefore counts as unread until hyper has been
    /// polled after the drop; after that, a connection still open is
    /// between messages.
    fn observe(&self, acked: u64) -> Observed {
        let flight = self.in_flight.load(Relaxed);
        let in_flight = flight & (RESPONDING - 1);
        let unflushed = self.unflushed.load(Relaxed);
        let body = self.open_bodies.load(Relaxed) > 0 || self.abandons.load(Relaxed) != acked;
        let between = in_flight == 0 && !unflushed && !body;
        let head = between && self.head_pending.load(Relaxed);
        Observed {
            requests: self.requests.load(Relaxed),
            quiet: between && self.read_blocked.load(Relaxed),
            head,
            body,
            writing: flight >= RESPONDING || (in_flight == 0 && unflushed),
        }
    }
}

impl Tracker {
    /// What an HTTP/2 connection is doing: it is quiet when no stream is
    /// open, whatever hyper buffers (its streams are independent).
    fn observe_streams(&self) -> Observed {
        Observed {
            requests: self.requests.load(Relaxed),
            quiet: self.in_flight.load(Relaxed) == 0 && self.open_bodies.load(Relaxed) == 0,
            ..Observed::default()
        }
    }
}

/// Marks one request as in flight until dropped.
#[derive(Debug)]
pub(crate) struct InFlight {
    tracker: Arc<Tracker>,
    responding: bool,
}

impl InFlight {
    /// The service answered: the response is being written from now on.
    pub(crate) fn responded(&mut self) {
        if !self.responding {
            self.responding = true;
            self.tracker.in_flight.fetch_add(RESPONDING, Relaxed);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut done = 1;
        if self.responding {
            done += RESPONDING;
        }
        self.tracker.in_flight.fetch_sub(done, Relaxed);
    }
}

/// How an ACTIVE phase ended.
enum Active {
    /// Quiet long enough: back to PARKED with the socket and unparsed bytes.
    Parked(TcpStream, Bytes, Clocks),
    /// The connection is finished (closed by either side, an error, a
    /// timeout, or shutdown).
    Closed,
}

/// The clocks a connection keeps while PARKED.
#[derive(Clone, Copy, Debug)]
struct Clocks {
    /// When the connection last became quiet (the idle timeout counts from
    /// here).
    quiet_since: Instant,
    /// When the request head the connection is receiving began: at accept
    /// until the first request, then while it holds part of a pipelined
    /// request head.
    head_since: Option<Instant>,
}

/// How a PARKED wait ended.
enum Wake {
    /// Bytes arrived: serve them.
    Read(Replay),
    /// The connection is finished: the peer closed it, it failed, a timeout
    /// passed, or the server is shutting down.
    Closed,
}

/// The peer of a connection span: a connection woken in the lot has its
/// address looked up only when something will show it (see
/// `server::spawn_woken`).
struct ShowPeer(Option<SocketAddr>);

impl std::fmt::Display for ShowPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(peer) => peer.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// Serves one connection until it closes or parks without its task (in
/// the lot, which later moves it to DORMANT). `fresh` is true
/// for a newly accepted connection, false for one woken in the lot.
///
/// The future's size is what a PARKED connection costs, so it is written
/// with care: an `async` block that uses its captured variables in place (an
/// `async fn` would keep its arguments twice, as arguments and as locals),
/// and nothing kept across the PARKED wait that can be recomputed.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice in the PARKED task"
)]
pub(crate) fn serve<S, B>(
    mut stream: TcpStream,
    peer: Option<SocketAddr>,
    service: Arc<S>,
    state: Open,
    fresh: bool,
) -> impl Future<Output = ()> + Send
where
    S: HttpService<B>,
    B: ResBody,
{
    async move {
        let mut gauge = Gauge::parked(&state.shared.stats);
        let mut carried = Bytes::new();
        let accepted = Instant::now();
        let mut clocks = Clocks {
            quiet_since: accepted,
            // Like Go's, the header read timeout of a new connection counts
            // from accept.
            head_since: fresh.then_some(accepted),
        };
        let mut first = fresh;
        loop {
            // PARKED: no hyper state, no buffer. Whatever is not needed
            // across the wait is computed inside it, so the task does not
            // keep it.
            let active: Pin<Box<dyn Future<Output = Active> + Send + '_>> = {
                let wait = ParkedWait::new(&mut stream, &state, carried, &clocks);
                let replay = match wait.await {
                    Wake::Read(replay) => replay,
                    Wake::Closed => return,
                };
                let shared = &state.shared;
                // The span covers ACTIVE phases only: in a PARKED task it
                // would cost its size for every waiting connection.
                let span = debug_span!("conn", peer = %ShowPeer(peer));
                let h2 = first && shared.config.http2 && replay.starts_with(H2_PREFACE);
                if first {
                    if replay.len() < H2_PREFACE.len()
                        && replay.starts_with(&H2_PREFACE[..replay.len()])
                    {
                        // A prefix of the HTTP/2 preface: wait for the rest.
                        carried = replay.into_carried();
                        continue;
                    }
                    first = false;
                } else {
                    shared.stats.wakes.fetch_add(1, Relaxed);
                }
                gauge.set_active();
                if h2 {
                    let service = service.clone();
                    let state = &*state;
                    Box::pin(
                        async move {
                            serve_h2(stream, replay, peer, service, state).await;
                            Active::Closed
                        }
                        .instrument(span),
                    )
                } else {
                    // The bytes that woke the connection begin a request
                    // head, unless an earlier part of it is already on the
                    // clock.
                    let head_since = clocks.head_since.unwrap_or_else(Instant::now);
                    let active = serve_h1(stream, replay, peer, &service, &state, head_since);
                    if span.is_disabled() {
                        // Entering a disabled span still costs every poll.
                        Box::pin(active)
                    } else {
                        Box::pin(active.instrument(span))
                    }
                }
            };
            match active.await {
                Active::Parked(mut s, c, k) => {
                    trace!(carried = c.len(), "parked");
                    state.shared.stats.parks.fetch_add(1, Relaxed);
                    gauge.set_parked();
                    // Nothing carried and no request head on the clock: the
                    // connection waits in the lot without its task.
                    if c.is_empty() && k.head_since.is_none() {
                        if let Some(lot) = &state.lot {
                            let config = &state.shared.config;
                            let dormant_at = config.dormant_after.map(|d| Instant::now() + d);
                            let idle_at = config.timeouts.idle_deadline(k.quiet_since);
                            match lot.park(s, dormant_at, idle_at.map(|(at, _)| at)) {
                                Ok(()) => {
                                    // The lot counts it as parked and held
                                    // from here on.
                                    gauge.into_lot();
                                    state.into_lot();
                                    return;
                                }
                                Err(back) => s = back,
                            }
                        }
                    }
                    stream = s;
                    carried = c;
                    clocks = k;
                }
                Active::Closed => return,
            }
        }
    }
}

pin_project! {
    /// PARKED in the connection's task: waits until the socket is readable,
    /// then reads into a pool buffer; or until `deadline` (closes), or
    /// shutdown. Written out by hand because it is most of
    /// a PARKED connection's task: an `async` block would keep more.
    struct ParkedWait<'a> {
        stream: &'a mut TcpStream,
        state: &'a ServeState,
        carried: Bytes,
        // What closes the connection, unpacked: the task's size is counted
        // in bytes.
        why: Expiry,
        expired: bool,
        #[pin]
        timer: Option<Sleep>,
        #[pin]
        watch: Watch<'a>,
    }
}

impl<'a> ParkedWait<'a> {
    fn new(
        stream: &'a mut TcpStream,
        state: &'a ServeState,
        carried: Bytes,
        clocks: &Clocks,
    ) -> Self {
        let config = &state.shared.config;
        let deadline = match clocks.head_since {
            Some(since) => config
                .timeouts
                .head_deadline(since)
                .or_else(|| config.timeouts.idle_deadline(since)),
            None => config.timeouts.idle_deadline(clocks.quiet_since),
        };
        ParkedWait {
            stream,
            state,
            carried,
            why: deadline.map_or(Expiry::Idle, |(_, why)| why),
            // A zero delay acts at once: the timer wheel would round it up
            // to its next tick.
            expired: deadline.is_some_and(|(at, _)| at <= Instant::now()),
            timer: deadline.map(|(at, _)| tokio::time::sleep_until(at)),
            watch: state.signal.watch(),
        }
    }
}

/// The deadline of a PARKED wait passed.
fn timed_out(why: Expiry, state: &ServeState) -> Wake {
    debug!(?why, "timeout while parked");
    why.count(&state.shared.stats);
    Wake::Closed
}

impl Future for ParkedWait<'_> {
    type Output = Wake;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Wake> {
        let mut this = self.project();
        if *this.expired {
            return Poll::Ready(timed_out(*this.why, this.state));
        }
        if this.watch.as_mut().poll_level(cx) >= Level::Draining {
            return Poll::Ready(Wake::Closed);
        }
        // `poll_read_ready` keeps its waker in tokio's per-socket state; a
        // `readable()` future would add a waiter node to this task.
        if let Poll::Ready(ready) = this.stream.poll_read_ready(cx) {
            if let Err(error) = ready {
                debug!(%error, "readiness failed");
                return Poll::Ready(Wake::Closed);
            }
            // The buffer is taken only now, after readiness (I4).
            let mut buf = this.state.shared.pool.take();
            // `poll_read`, not `try_read`: after a short read it clears
            // tokio's readiness flag, so hyper's next read does not make a
            // system call to find the socket empty.
            let mut read = ReadBuf::new(&mut buf);
            match Pin::new(&mut **this.stream).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        // EOF. Bytes of an incomplete request die with the
                        // connection, as they would on plain hyper.
                        trace!("peer closed while parked");
                        return Poll::Ready(Wake::Closed);
                    }
                    return Poll::Ready(Wake::Read(Replay {
                        carried: std::mem::take(this.carried),
                        fresh: Some((buf, 0..n)),
                    }));
                }
                Poll::Ready(Err(error)) => {
                    debug!(%error, "read failed while parked");
                    return Poll::Ready(Wake::Closed);
                }
                // Spurious readiness: cleared, and the waker registered;
                // the buffer goes back to the pool.
                Poll::Pending => {}
            }
        }
        if let Some(timer) = this.timer.as_pin_mut() {
            if timer.poll(cx).is_ready() {
                return Poll::Ready(timed_out(*this.why, this.state));
            }
        }
        Poll::Pending
    }
}

/// ACTIVE on HTTP/1.1: runs hyper until the connection closes, a timeout
/// passes, or it has been quiet for `park_after`. `head_since` is when the
/// bytes about to be replayed began to arrive.
async fn serve_h1<S, B>(
    stream: TcpStream,
    replay: Replay,
    peer: Option<SocketAddr>,
    service: &Arc<S>,
    state: &ServeState,
    head_since: Instant,
) -> Active
where
    S: HttpService<B>,
    B: ResBody,
{
    let shared = &state.shared;
    let tracker = Arc::new(Tracker::default());
    let io = ConnIo::new(stream, replay, tracker.clone(), true);
    let svc = ConnService {
        inner: service.clone(),
        peer: peer.filter(|_| shared.config.peer_addr),
        tracker: tracker.clone(),
    };
    let mut conn = Some(shared.http1.serve_connection(io, svc));
    let mut watchdog = Watchdog::new(
        shared.config.timeouts,
        shared.config.park_after,
        Some(head_since),
    );
    // One timer for parking and every timeout (see `timeout`).
    let mut timer = pin!(tokio::time::sleep_until(head_since));
    // Abandoned request bodies hyper has been polled after.
    let mut acked = 0;
    let mut watch = pin!(state.signal.watch());
    let mut draining = false;
    // hyper's future completed without error: after an accepted upgrade,
    // that means the response was flushed and the socket left open.
    let mut finished = false;

    let ended = poll_fn(|cx| {
        let Some(c) = conn.as_mut() else {
            return Poll::Ready(None);
        };
        match watch.as_mut().poll_level(cx) {
            Level::Running => {}
            Level::Draining if draining => {}
            Level::Draining => {
                draining = true;
                watchdog.stop_parking();
                Pin::new(&mut *c).graceful_shutdown();
            }
            Level::Forced => return Poll::Ready(None),
        }
        let abandons = tracker.abandons.load(Relaxed);
        match Pin::new(&mut *c).poll(cx) {
            Poll::Ready(Ok(())) => {
                finished = true;
                return Poll::Ready(None);
            }
            Poll::Ready(Err(error)) => {
                debug!(%error, "connection error");
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        if abandons != acked {
            // hyper has drained or given up on the abandoned body (see
            // `Tracker::observe`); bytes it drained are not a request head.
            acked = abandons;
            tracker.head_pending.store(false, Relaxed);
        }
        watchdog
            .poll(cx, timer.as_mut(), tracker.observe(acked))
            .map(Some)
    })
    .await;

    shared
        .stats
        .requests
        .fetch_add(tracker.requests.load(Relaxed), Relaxed);
    let c = conn.take();
    match ended {
        Some(Expiry::Park) => {}
        Some(why) => {
            debug!(?why, "timeout");
            why.count(&shared.stats);
            return Active::Closed;
        }
        None => {
            if let (Some(c), Some(tx)) = (c, tracker.upgrade.take().filter(|_| finished)) {
                upgrade::hand_off(c.into_parts(), tx, state);
            }
            return Active::Closed;
        }
    }
    let Some(c) = c else { return Active::Closed };
    let parts = c.into_parts();
    let (stream, replay) = parts.io.into_inner();
    debug_assert!(replay.is_empty(), "quiet implies the replay was consumed");
    // Copy: `read_buf` is a view into hyper's whole read allocation.
    let carried = Bytes::copy_from_slice(&parts.read_buf);
    let (quiet_since, head_since) = watchdog.parked_clocks(!carried.is_empty());
    Active::Parked(
        stream,
        carried,
        Clocks {
            quiet_since,
            head_since,
        },
    )
}

/// ACTIVE on HTTP/2: h2 connections never park. With an idle timeout, a
/// connection with no request open for that long is shut down gracefully
/// (GOAWAY).
async fn serve_h2<S, B>(
    stream: TcpStream,
    replay: Replay,
    peer: Option<SocketAddr>,
    service: Arc<S>,
    state: &ServeState,
) where
    S: HttpService<B>,
    B: ResBody,
{
    let tracker = Arc::new(Tracker::default());
    // h2 reads all the time and sees the close itself.
    let io = ConnIo::new(stream, replay, tracker.clone(), false);
    let svc = ConnService {
        inner: service,
        peer: peer.filter(|_| state.shared.config.peer_addr),
        tracker: tracker.clone(),
    };
    let mut conn = pin!(state.shared.http2.serve_connection(io, svc));
    let idle_only = Timeouts {
        idle: state.shared.config.timeouts.idle,
        ..Timeouts::default()
    };
    let mut watchdog = Watchdog::new(idle_only, None, None);
    let mut timer = pin!(tokio::time::sleep(Duration::ZERO));
    let mut watch = pin!(state.signal.watch());
    let mut closing = false;
    poll_fn(|cx| {
        match watch.as_mut().poll_level(cx) {
            Level::Running => {}
            Level::Draining if closing => {}
            Level::Draining => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            Level::Forced => return Poll::Ready(()),
        }
        match conn.as_mut().poll(cx) {
            Poll::Ready(Ok(())) => return Poll::Ready(()),
            Poll::Ready(Err(error)) => {
                debug!(%error, "h2 connection error");
                return Poll::Ready(());
            }
            Poll::Pending => {}
        }
        if closing {
            return Poll::Pending;
        }
        if let Poll::Ready(why) = watchdog.poll(cx, timer.as_mut(), tracker.observe_streams()) {
            debug!(?why, "h2 idle timeout");
            why.count(&state.shared.stats);
            closing = true;
            conn.as_mut().graceful_shutdown();
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    })
    .await;
    state
        .shared
        .stats
        .requests
        .fetch_add(tracker.requests.load(Relaxed), Relaxed);
}
