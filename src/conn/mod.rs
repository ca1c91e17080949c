//! The per-connection driver: the idle ladder ACTIVE ⇄ PARKED, for every
//! transport.
//!
//! ```text
//! accept ─► PARKED ── readable ─► read into a pool buffer
//!             ▲                     │ 0 bytes: the peer closed → done, no hyper state built
//!             │                     ▼
//!             │                   ACTIVE: hyper over ConnIo (replays the bytes first)
//!             │                     │ HTTP/2 (preface or ALPN): hyper's http2 server (`h2`)
//!             └── idle for ─────────┘
//!                 `park_after`: into_parts, copy the unparsed bytes, drop the rest;
//!                 HTTP/2: fenced, hyper dropped, the facts kept (`wire::Asleep`)
//!                 (0 for the first phase after a wake from a sleep ≥ `park_after`)
//! ```
//!
//! A PARKED connection is one small task holding its transport, a
//! reference to the service, and (only if the client pipelined part of a
//! request) the bytes hyper had read but not parsed (`parked`). It owns no
//! hyper connection and no buffer (invariants I1 and I4, see `h1`). A
//! parked HTTP/1 connection that carries no bytes and has no request head
//! on the clock does not even keep its task: it waits in the parking lot
//! (`Lot::park`), which hands it back through the server when bytes
//! arrive, and moves it to DORMANT after `dormant_after`. A new connection
//! waiting for its first request, and one holding part of a request, wait
//! in their task, under their header or idle deadline; they never go
//! dormant (the lot keeps one idle timeout for all).
//!
//! The driver is generic over the transport `T`; what it asks of one is
//! the `Seam` trait, so TCP, Unix sockets and TLS take the same path.
//! What a transport's own handshake settled (TLS: whether it is under way,
//! the ALPN protocol, the TLS info for handlers) comes as one `Connected`
//! value; the transport counts its handshakes itself.
//! `h1` is the hyper seam for HTTP/1.1; `h2` serves HTTP/2 and puts an
//! idle connection to sleep, which then waits in the lot like a parked
//! HTTP/1 connection, carrying its `wire::Asleep`.

mod h1;
mod h2;
mod parked;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;
use tracing::{Instrument, debug_span, trace};

use crate::config::Config;
use crate::hooks::{Admitted, ConnState, Kept, Watched};
use crate::io::Replay;
use crate::life::Life;
use crate::lot::Due;
use crate::service::{HttpService, ResBody, SharedService};
use crate::state::{Open, ServeState};
use crate::stats::Gauge;
use crate::transport::{Alpn, Seam};
use crate::wire::Asleep;
pub(crate) use parked::closed_while_idle;
use parked::{Clocks, ParkedWait, Woken};

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Where a connection the driver starts on comes from.
#[derive(Debug)]
pub(crate) enum Origin<A> {
    /// Just accepted: its first request is on the header clock from now.
    Accepted(Admission<A>),
    /// Handed back by the parking lot, with bytes waiting (or a close),
    /// after a pause of its client, with what it carried there, what it
    /// used of its limits, and the bytes the lot read for it (usually
    /// none: see `lot::Woke`), which it serves first.
    Woken(Pause, Option<Kept<A>>, Life, Bytes),
}

/// Where a new connection is with the connection hooks.
#[derive(Debug)]
pub(crate) enum Admission<A> {
    /// Admitted at accept, and reported `New` to the state hook, which it
    /// carries if there is one.
    Done(Option<Box<Watched<A>>>),
    /// Its peer's address comes in a PROXY header: the hooks see it once
    /// the header is read, before the connection's first request is
    /// served.
    InHeader,
}

/// How long a woken connection's client paused, against `park_after`: a
/// connection's pauses predict its next one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pause {
    /// Shorter: its ACTIVE phase waits `park_after` before parking again.
    Short,
    /// At least `park_after`: its ACTIVE phase parks again as soon as it is
    /// quiet (see [`serve`]).
    Long,
}

/// How an ACTIVE phase ended.
enum Active<T> {
    /// Quiet long enough: back to PARKED with the transport and unparsed
    /// bytes.
    Parked(T, Bytes, Clocks),
    /// An HTTP/2 connection quiet long enough: asleep, with the transport
    /// and what a fresh connection needs.
    Asleep(T, Box<Asleep>, Clocks),
    /// The connection is finished (closed by either side, an error, a
    /// timeout, or shutdown).
    Closed,
    /// The connection was handed to an upgrade's handler.
    Upgraded,
}

/// What the first bytes of a connection say it speaks.
enum Protocol {
    Http1,
    Http2,
    /// A prefix of the HTTP/2 preface: wait for the rest.
    Undecided,
}

/// Tells a connection's protocol: from ALPN when the transport has it
/// (TLS), else from its first bytes (when the server serves HTTP/2, the
/// HTTP/2 preface means h2c with prior knowledge).
fn detect(replay: &Replay, config: &Config, alpn: Alpn) -> Protocol {
    let http2 = config.http2;
    match alpn {
        Alpn::H2 if http2 => return Protocol::Http2,
        Alpn::H2 | Alpn::Http1 => return Protocol::Http1,
        Alpn::Unchosen => {}
    }
    if replay.len() < H2_PREFACE.len() && replay.starts_with(&H2_PREFACE[..replay.len()]) {
        Protocol::Undecided
    } else if http2 && replay.starts_with(H2_PREFACE) {
        Protocol::Http2
    } else {
        Protocol::Http1
    }
}

/// The peer of a connection span: a connection woken in the lot has its
/// address looked up only when something will show it (see
/// `server::owner`).
struct ShowPeer<'a, A>(&'a Option<A>);

impl<A: fmt::Debug> fmt::Debug for ShowPeer<'_, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(peer) => peer.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// The connection hooks of a connection whose peer's address came in a
/// PROXY header, now read ([`Hooks::open`](crate::hooks::Hooks::open)),
/// with the header's address (the socket's, for a header without one).
fn admit_late<T: Seam>(
    stream: &T,
    peer: &Option<T::Addr>,
    state: &ServeState<T>,
) -> Admitted<T::Addr> {
    let Some(hooks) = &state.hooks else {
        return Admitted::Serve(None);
    };
    let peer = match peer {
        Some(peer) => peer.clone(),
        None => match stream.peer_addr() {
            Ok(peer) => peer,
            // The peer reset the connection.
            Err(_) => return Admitted::Close,
        },
    };
    hooks.open(&peer, &state.shared.stats.rejected)
}

/// Reports `state` to the connection's state hook, if it has one; `false`
/// if the hook panicked: the connection is then closed.
fn report<A>(watched: &Option<Box<Watched<A>>>, state: ConnState) -> bool {
    watched.as_ref().is_none_or(|w| w.report(state))
}

/// An ACTIVE phase, boxed: its future is large, and a PARKED task must not
/// keep its room.
type ActiveFuture<'a, T> = Pin<Box<dyn Future<Output = Active<T>> + Send + 'a>>;

/// Serves one connection until it closes or parks without its task (in
/// the lot, which later moves it to DORMANT).
///
/// The future's size is what a PARKED connection costs, so it is written
/// with care: an `async` block that uses its captured variables in place (an
/// `async fn` would keep its arguments twice, as arguments and as locals),
/// and nothing kept across the PARKED wait that can be recomputed.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice in the PARKED task"
)]
pub(crate) fn serve<T, S, B>(
    mut stream: T,
    #[cfg_attr(not(feature = "proxy-protocol"), allow(unused_mut))] mut peer: Option<T::Addr>,
    service: Arc<SharedService<S>>,
    state: Open<T>,
    origin: Origin<T::Addr>,
) -> impl Future<Output = ()> + Send
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    async move {
        let mut gauge = Gauge::parked(&state.shared.stats);
        let mut carried = Bytes::new();
        let accepted = Instant::now();
        let mut first = matches!(origin, Origin::Accepted(_));
        let mut clocks = Clocks {
            quiet_since: accepted,
            // Like Go's, the header read timeout of a new connection counts
            // from accept.
            head_since: first.then_some(accepted),
        };
        // Bytes the lot read for a woken connection, in `carried`: served
        // at once, with no wait for the socket.
        let mut read_ahead = false;
        let (mut park_at_once, mut asleep, mut watched, mut life) = match origin {
            Origin::Accepted(admission) => {
                let life = state.shared.config.limits.born(accepted);
                let watched = match admission {
                    Admission::Done(watched) => watched,
                    Admission::InHeader => None,
                };
                (false, None, watched, life)
            }
            Origin::Woken(pause, kept, life, unread) => {
                read_ahead = !unread.is_empty();
                carried = unread;
                let (asleep, watched) = Kept::split(kept);
                (pause == Pause::Long, asleep, watched, life)
            }
        };
        loop {
            // PARKED: no hyper state, no buffer. Whatever is not needed
            // across the wait is computed inside it, so the task does not
            // keep it.
            let active: ActiveFuture<'_, T> = {
                let wait = ParkedWait::new(&mut stream, &state, carried, &clocks, &life);
                let woken = match std::mem::take(&mut read_ahead) {
                    true => Woken::Readable(wait.into_replay()),
                    false => wait.await,
                };
                let replay = match woken {
                    Woken::Readable(replay) => replay,
                    Woken::Shutdown => {
                        match asleep.as_deref().map(Asleep::goaway) {
                            // A sleeping HTTP/2 connection says GOAWAY.
                            Some(goaway) => match stream.into_dormant() {
                                Ok((dormant, _)) => T::close_dormant(dormant, &goaway),
                                Err(stream) => stream.close(),
                            },
                            None => stream.close(),
                        }
                        return;
                    }
                    Woken::Quiet => {
                        let kept = Kept::new(asleep, watched);
                        match park_taskless(stream, kept, &Bytes::new(), &clocks, life, &state) {
                            Ok(()) => {
                                gauge.into_lot();
                                state.into_lot();
                                return;
                            }
                            Err((s, k)) => {
                                stream = s;
                                (asleep, watched) = Kept::split(k);
                                carried = Bytes::new();
                                continue;
                            }
                        }
                    }
                    Woken::Closed => return,
                };
                let shared = &state.shared;
                let protocol = if first {
                    // Past a PROXY header now: its client is the peer.
                    #[cfg(feature = "proxy-protocol")]
                    if let Some(client) = stream.proxied_peer() {
                        peer = Some(client);
                    }
                    if T::PEER_IN_HEADER {
                        match admit_late(&stream, &peer, &state) {
                            Admitted::Serve(w) => watched = w,
                            Admitted::Close => return,
                        }
                    }
                    detect(&replay, &shared.config, stream.connected().alpn)
                } else if asleep.is_some() {
                    Protocol::Http2
                } else {
                    Protocol::Http1
                };
                if let Protocol::Undecided = protocol {
                    carried = replay.into_carried();
                    continue;
                }
                gauge.set_active();
                // Counted once out of the parked gauge: whoever saw the
                // connection parked sees its wake counted after.
                if !first {
                    shared.stats.wakes.fetch_add(1, Relaxed);
                }
                first = false;
                if !report(&watched, ConnState::Active) {
                    return;
                }
                let timing = h1::Timing {
                    head_since: clocks.head_since,
                    park_after: if park_at_once {
                        Some(Duration::ZERO)
                    } else {
                        shared.config.park_after
                    },
                };
                let asleep = asleep.take();
                activate(
                    stream, replay, protocol, asleep, &peer, &service, &state, timing, &mut life,
                )
            };
            match active.await {
                Active::Parked(s, c, k) => {
                    trace!(carried = c.len(), "parked");
                    // A phase that parks holding part of a request (a head
                    // that came in pieces) hands parking at once on to the
                    // phase that finishes the request: the client paused
                    // mid-request, not after one.
                    park_at_once &= !c.is_empty();
                    state.shared.stats.parks.fetch_add(1, Relaxed);
                    gauge.set_parked();
                    if !report(&watched, ConnState::Parked) {
                        return;
                    }
                    match park_taskless(s, Kept::new(None, watched), &c, &k, life, &state) {
                        Ok(()) => {
                            // The lot counts it as parked and held from
                            // here on.
                            gauge.into_lot();
                            state.into_lot();
                            return;
                        }
                        Err((s, k)) => {
                            stream = s;
                            (_, watched) = Kept::split(k);
                        }
                    }
                    carried = c;
                    clocks = k;
                }
                Active::Asleep(s, a, k) => {
                    trace!("asleep");
                    park_at_once = false;
                    state.shared.stats.parks.fetch_add(1, Relaxed);
                    gauge.set_parked();
                    if !report(&watched, ConnState::Parked) {
                        return;
                    }
                    let kept = Kept::new(Some(a), watched);
                    match park_taskless(s, kept, &Bytes::new(), &k, life, &state) {
                        Ok(()) => {
                            gauge.into_lot();
                            state.into_lot();
                            return;
                        }
                        Err((s, k)) => {
                            stream = s;
                            (asleep, watched) = Kept::split(k);
                        }
                    }
                    carried = Bytes::new();
                    clocks = k;
                }
                Active::Closed => return,
                Active::Upgraded => {
                    if let Some(watched) = &mut watched {
                        watched.upgraded();
                    }
                    return;
                }
            }
        }
    }
}

/// Starts the ACTIVE phase of `protocol` on bytes that just arrived (an
/// HTTP/2 connection woken from a sleep with what it kept), which counts
/// its requests in `life`.
#[allow(clippy::too_many_arguments)]
fn activate<'a, T, S, B>(
    stream: T,
    replay: Replay,
    protocol: Protocol,
    asleep: Option<Box<Asleep>>,
    peer: &Option<T::Addr>,
    service: &'a Arc<SharedService<S>>,
    state: &'a ServeState<T>,
    timing: h1::Timing,
    life: &'a mut Life,
) -> ActiveFuture<'a, T>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    // The span covers ACTIVE phases only: in a PARKED task it would cost
    // its size for every waiting connection.
    let span = debug_span!("conn", peer = ?ShowPeer(peer));
    let peer = peer.clone().filter(|_| state.shared.config.peer_addr);
    if let Protocol::Http2 = protocol {
        let service = service.clone();
        return Box::pin(
            async move {
                match h2::serve(
                    stream,
                    replay,
                    asleep,
                    peer,
                    service,
                    state,
                    timing.park_after,
                    life,
                )
                .await
                {
                    h2::Ended::Closed => Active::Closed,
                    h2::Ended::Asleep(stream, asleep, clocks) => {
                        Active::Asleep(stream, asleep, clocks)
                    }
                }
            }
            .instrument(span),
        );
    }
    let active = h1::serve(stream, replay, peer, service, state, timing, life);
    if span.is_disabled() {
        // Entering a disabled span still costs every poll.
        Box::pin(active)
    } else {
        Box::pin(active.instrument(span))
    }
}

/// A connection the lot did not take, with what it would have kept.
type Refused<T> = (T, Option<Kept<<T as Seam>::Addr>>);

/// Puts a parked connection in the lot without its task (with what a
/// sleeping HTTP/2 connection keeps), if it carries no bytes and has no
/// request head on the clock; gives it back otherwise, or if the lot
/// refuses it. The lot keeps its `life`.
fn park_taskless<T: Seam>(
    stream: T,
    kept: Option<Kept<T::Addr>>,
    carried: &Bytes,
    clocks: &Clocks,
    life: Life,
    state: &ServeState<T>,
) -> Result<(), Refused<T>> {
    let lot = &state.lot;
    if !carried.is_empty() || clocks.head_since.is_some() {
        return Err((stream, kept));
    }
    let config = &state.shared.config;
    let now = Instant::now();
    let dormant_at = config.dormant_after.map(|d| now + d);
    let idle_at = config.timeouts.idle_deadline(clocks.quiet_since);
    let idle_at = idle_at.map(|(at, _)| at);
    // As hyper times it: from the client's last frame; HTTP/2 only.
    let asleep = kept.as_ref().and_then(Kept::asleep).is_some();
    let ping_at = (config.h2_sleep.keep_alive)
        .filter(|_| asleep)
        .map(|k| clocks.quiet_since + k.interval);
    let due = Due {
        dormant_at,
        idle_at,
        ping_at,
    };
    lot.park(stream, kept, life, now, due)
}
