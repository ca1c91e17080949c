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
//! connection and no buffer (invariants I1 and I4 of the design).
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
//! - every request body was read to its end, or dropped and a later request
//!   began. A body still alive (a handler may answer first and read the body
//!   later, in another task) keeps hyper in the middle of the message. A
//!   body the handler dropped unread is drained (or the connection
//!   closed) by hyper, but only the next request proves it was drained;
//!   parking before that could cut a body in two and let its tail be parsed
//!   as a request (request smuggling), so such a connection stays ACTIVE
//!   until its next request.
//!
//! With nothing in flight and nothing buffered on either side, hyper's only
//! state is its keep-alive `Init` state plus, possibly, the first bytes of a
//! request head it could not yet parse. `into_parts` hands those back; the
//! driver copies them out (a slice would pin hyper's whole read buffer) and
//! replays them to the next hyper connection (invariant I2).
//!
//! Parking right after each response would rebuild hyper for every request
//! of a busy connection, so the driver waits until the connection has been
//! idle for `park_after` (one timer per activation, only moved forward).

use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::task::Poll;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::{debug, trace};

use crate::io::{ConnIo, Replay};
use crate::server::{Open, ServeState};
use crate::service::{ConnService, HttpService, ResBody};
use crate::shutdown::Level;
use crate::stats::Gauge;
use crate::upgrade::{self, HandOff};

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the driver, the service wrapper, the request bodies and `ConnIo`
/// share about one ACTIVE connection.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    in_flight: AtomicUsize,
    /// Request bodies handed to the service and not yet at their end.
    open_bodies: AtomicUsize,
    body_abandoned: AtomicBool,
    read_blocked: AtomicBool,
    unflushed: AtomicBool,
    requests: AtomicU64,
    /// An upgrade the handler accepted, waiting for hyper to finish.
    pub(crate) upgrade: HandOff,
}

impl Tracker {
    pub(crate) fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        self.requests.fetch_add(1, Relaxed);
        // hyper parses a request head only once the previous body has been
        // read or drained to its end.
        self.body_abandoned.store(false, Relaxed);
        InFlight(self.clone())
    }

    pub(crate) fn body_opened(&self) {
        self.open_bodies.fetch_add(1, Relaxed);
    }

    /// A body reached its end (`complete`) or was dropped before it.
    pub(crate) fn body_closed(&self, complete: bool) {
        self.open_bodies.fetch_sub(1, Relaxed);
        if !complete {
            self.body_abandoned.store(true, Relaxed);
        }
    }

    pub(crate) fn set_read_blocked(&self, blocked: bool) {
        self.read_blocked.store(blocked, Relaxed);
    }

    pub(crate) fn set_unflushed(&self, unflushed: bool) {
        self.unflushed.store(unflushed, Relaxed);
    }

    /// hyper sits between messages with nothing buffered (see module docs).
    fn is_idle(&self) -> bool {
        self.read_blocked.load(Relaxed)
            && !self.unflushed.load(Relaxed)
            && self.in_flight.load(Relaxed) == 0
            && self.open_bodies.load(Relaxed) == 0
            && !self.body_abandoned.load(Relaxed)
    }
}

/// Marks one request as in flight until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Tracker>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// How an ACTIVE phase ended.
enum Active {
    /// Idle long enough: back to PARKED with the socket and unparsed bytes.
    Parked(TcpStream, Bytes),
    /// The connection is finished (closed by either side, an error, or
    /// shutdown).
    Closed,
}

/// How a PARKED wait ended.
enum Wake {
    /// Bytes arrived: serve them.
    Read(Replay),
    /// Parked for `dormant_after`: move to the lot.
    Dormant,
    /// The connection is finished: the peer closed it, it failed, it was
    /// idle too long, or the server is shutting down.
    Closed,
}

/// Serves one connection until it closes or goes dormant. `fresh` is true
/// for a newly accepted connection, false for one woken in the lot.
pub(crate) async fn serve<S, B>(
    stream: TcpStream,
    peer: SocketAddr,
    service: Arc<S>,
    state: Open,
    fresh: bool,
) where
    S: HttpService<B>,
    B: ResBody,
{
    let shared = &state.shared;
    let mut gauge = Gauge::parked(&shared.stats);
    let mut stream = stream;
    let mut carried = Bytes::new();
    let mut first = fresh;
    // The lot hands a connection back only when a byte is waiting: read it
    // before the connection may go dormant again, or it would bounce.
    let mut may_sleep = fresh;
    loop {
        // PARKED: no hyper state, no buffer.
        let parked_at = Instant::now();
        let woken = wake(&stream, carried, &state, parked_at, may_sleep).await;
        may_sleep = true;
        let replay = match woken {
            Wake::Read(replay) => replay,
            Wake::Closed => return,
            Wake::Dormant => {
                let Some(lot) = &state.lot else { return };
                let idle_deadline = shared.config.idle_timeout.map(|t| parked_at + t);
                drop(gauge);
                if let Err(error) = lot.enter(stream, idle_deadline, &shared.stats) {
                    debug!(%error, "entering the parking lot failed");
                }
                return;
            }
        };
        if first {
            if replay.len() < H2_PREFACE.len() && replay.starts_with(&H2_PREFACE[..replay.len()]) {
                // A prefix of the HTTP/2 preface: wait for the rest.
                carried = replay.into_carried();
                continue;
            }
            first = false;
            if shared.config.http2 && replay.starts_with(H2_PREFACE) {
                gauge.set_active();
                Box::pin(serve_h2(stream, replay, peer, service, &state)).await;
                return;
            }
        } else {
            shared.stats.wakes.fetch_add(1, Relaxed);
        }
        gauge.set_active();
        match Box::pin(serve_h1(stream, replay, peer, &service, &state)).await {
            Active::Parked(s, c) => {
                trace!(carried = c.len(), "parked");
                shared.stats.parks.fetch_add(1, Relaxed);
                gauge.set_parked();
                stream = s;
                carried = c;
            }
            Active::Closed => return,
        }
    }
}

/// What ended one wait of a PARKED connection.
enum Parked {
    Shutdown,
    Readable(std::io::Result<()>),
    Timer,
}

/// PARKED: waits until the socket is readable, then reads into a pool
/// buffer; or until it is time to go dormant or to close the idle
/// connection.
async fn wake(
    stream: &TcpStream,
    carried: Bytes,
    state: &ServeState,
    parked_at: Instant,
    may_sleep: bool,
) -> Wake {
    let config = &state.shared.config;
    let idle_deadline = config.idle_timeout.map(|t| parked_at + t);
    // Bytes of a pipelined request stay with their task.
    let dormant_deadline = config
        .dormant_after
        .filter(|_| may_sleep && carried.is_empty())
        .filter(|_| state.lot.as_ref().is_some_and(|l| l.is_open()))
        .map(|t| parked_at + t);
    let deadline = match (idle_deadline, dormant_deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let timed_out = || {
        if idle_deadline.is_some_and(|d| d <= Instant::now()) {
            debug!("idle timeout");
            state.shared.stats.idle_timeouts.fetch_add(1, Relaxed);
            return Wake::Closed;
        }
        Wake::Dormant
    };
    // A zero delay acts at once: the timer wheel would round it up to its
    // next tick.
    if deadline.is_some_and(|d| d <= parked_at) {
        return timed_out();
    }
    let mut timer = pin!(async {
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    });
    let mut watch = pin!(state.signal.watch());
    loop {
        // `poll_read_ready` keeps its waker in tokio's per-socket state; a
        // `readable()` future would add a waiter node to this task.
        let ready = poll_fn(|cx| {
            if watch.as_mut().poll_level(cx) >= Level::Draining {
                return Poll::Ready(Parked::Shutdown);
            }
            if let Poll::Ready(res) = stream.poll_read_ready(cx) {
                return Poll::Ready(Parked::Readable(res));
            }
            if timer.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Parked::Timer);
            }
            Poll::Pending
        })
        .await;
        match ready {
            Parked::Shutdown => return Wake::Closed,
            Parked::Timer => return timed_out(),
            Parked::Readable(Ok(())) => {}
            Parked::Readable(Err(error)) => {
                debug!(%error, "readiness failed");
                return Wake::Closed;
            }
        }
        // The buffer is taken only now, after the await (I4).
        let mut buf = state.shared.pool.take();
        match stream.try_read(&mut buf) {
            Ok(0) => {
                // EOF. Bytes of an incomplete request die with the
                // connection, as they would on plain hyper.
                trace!("peer closed while parked");
                return Wake::Closed;
            }
            Ok(n) => {
                return Wake::Read(Replay {
                    carried,
                    fresh: Some((buf, 0..n)),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(error) => {
                debug!(%error, "read failed while parked");
                return Wake::Closed;
            }
        }
    }
}

/// ACTIVE on HTTP/1.1: runs hyper until the connection closes or has been
/// idle for `park_after`.
async fn serve_h1<S, B>(
    stream: TcpStream,
    replay: Replay,
    peer: SocketAddr,
    service: &Arc<S>,
    state: &ServeState,
) -> Active
where
    S: HttpService<B>,
    B: ResBody,
{
    let shared = &state.shared;
    let tracker = Arc::new(Tracker::default());
    let io = ConnIo::new(stream, replay, tracker.clone());
    let svc = ConnService {
        inner: service.clone(),
        peer,
        tracker: tracker.clone(),
    };
    let mut conn = Some(shared.http1.serve_connection(io, svc));
    let park_after = shared.config.park_after;
    let mut park_timer = pin!(tokio::time::sleep(park_after.unwrap_or_default()));
    // The request count when the park timer was last armed. A keep-alive
    // request often starts and ends within one poll, so "busy" is never
    // seen between two idle polls: the connection parks only if the timer
    // fires with no request since it was armed. A busy connection re-arms
    // once per `park_after`, not once per request.
    let mut armed: Option<u64> = None;
    let mut watch = pin!(state.signal.watch());
    let mut draining = false;
    // hyper's future completed without error: after an accepted upgrade,
    // that means the response was flushed and the socket left open.
    let mut finished = false;

    let park = poll_fn(|cx| {
        let Some(c) = conn.as_mut() else {
            return Poll::Ready(false);
        };
        match watch.as_mut().poll_level(cx) {
            Level::Running => {}
            Level::Draining if draining => {}
            Level::Draining => {
                draining = true;
                Pin::new(&mut *c).graceful_shutdown();
            }
            Level::Forced => return Poll::Ready(false),
        }
        match Pin::new(&mut *c).poll(cx) {
            Poll::Ready(Ok(())) => {
                finished = true;
                return Poll::Ready(false);
            }
            Poll::Ready(Err(error)) => {
                debug!(%error, "connection error");
                return Poll::Ready(false);
            }
            Poll::Pending => {}
        }
        let Some(park_after) = park_after else {
            return Poll::Pending;
        };
        if draining || !tracker.is_idle() {
            return Poll::Pending;
        }
        let requests = tracker.requests.load(Relaxed);
        if armed.is_none() {
            armed = Some(requests);
            park_timer.as_mut().reset(Instant::now() + park_after);
        }
        while park_timer.as_mut().poll(cx).is_ready() {
            if armed == Some(requests) {
                return Poll::Ready(true);
            }
            armed = Some(requests);
            // Always later than the previous deadline: tokio moves it
            // without taking the timer lock.
            park_timer.as_mut().reset(Instant::now() + park_after);
        }
        Poll::Pending
    })
    .await;

    shared
        .stats
        .requests
        .fetch_add(tracker.requests.load(Relaxed), Relaxed);
    let Some(c) = conn.take() else {
        return Active::Closed;
    };
    if !park {
        if let Some(tx) = tracker.upgrade.take().filter(|_| finished) {
            upgrade::hand_off(c.into_parts(), tx, state);
        }
        return Active::Closed;
    }
    let parts = c.into_parts();
    let (stream, replay) = parts.io.into_inner();
    debug_assert!(replay.is_empty(), "idle implies the replay was consumed");
    // Copy: `read_buf` is a view into hyper's whole read allocation.
    let carried = Bytes::copy_from_slice(&parts.read_buf);
    Active::Parked(stream, carried)
}

/// ACTIVE on HTTP/2: h2 connections never park.
async fn serve_h2<S, B>(
    stream: TcpStream,
    replay: Replay,
    peer: SocketAddr,
    service: Arc<S>,
    state: &ServeState,
) where
    S: HttpService<B>,
    B: ResBody,
{
    let tracker = Arc::new(Tracker::default());
    let io = ConnIo::new(stream, replay, tracker.clone());
    let svc = ConnService {
        inner: service,
        peer,
        tracker: tracker.clone(),
    };
    let mut conn = pin!(state.shared.http2.serve_connection(io, svc));
    let mut watch = pin!(state.signal.watch());
    let mut draining = false;
    poll_fn(|cx| {
        match watch.as_mut().poll_level(cx) {
            Level::Running => {}
            Level::Draining if draining => {}
            Level::Draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            Level::Forced => return Poll::Ready(()),
        }
        match conn.as_mut().poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(()),
            Poll::Ready(Err(error)) => {
                debug!(%error, "h2 connection error");
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    state
        .shared
        .stats
        .requests
        .fetch_add(tracker.requests.load(Relaxed), Relaxed);
}
