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
//! In its task a connection is in one [`State`] at a time (`Parked`,
//! `Active`, `Closing`, `Gone`), and what goes with it from state to state
//! is one `Conn`: its hold on the server (`Open`), its peer, what it keeps
//! across phases (`Kept`: its life, an HTTP/2 connection's facts, its state
//! hook), how far it came and its client's last pause. A quiet spell ends
//! in one park step, `Conn::park`. docs/architecture.md draws the states.
//!
//! The driver is generic over the transport `T`; what it asks of one is
//! the `Seam` trait, so TCP, Unix sockets and TLS take the same path.
//! What a transport's own handshake settled (TLS: whether it is under way,
//! the ALPN protocol, the TLS info for handlers; a PROXY header: the
//! client's address) comes as one `Connected` value; the transport counts
//! its handshakes itself. `phase` is what an ACTIVE phase starts and ends
//! with, and the rules both protocols share; `h1` is the hyper seam for
//! HTTP/1.1; `h2` serves HTTP/2 and puts an idle connection to sleep,
//! which then waits in the lot like a parked HTTP/1 connection, carrying
//! its `wire::Asleep`.

mod h1;
mod h2;
mod parked;
mod phase;
mod woken;

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
use crate::hooks::{Admitted, ConnState, Watched};
use crate::kept::{Kept, Stowed};
use crate::ladder::Rung;
use crate::lot::Due;
use crate::rewind::Replay;
use crate::service::{HttpService, ResBody, SharedService};
use crate::state::{Open, ServeState};
use crate::transport::{Alpn, ClientAddr, Seam};
pub(crate) use parked::closed_while_idle;
use parked::{ParkedWait, Waited};
use phase::{Clocks, Ended, Quiet, Timing};
pub(crate) use woken::{FirstPoll, serve_woken};

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Where a connection the driver starts on comes from.
#[derive(Debug)]
pub(crate) enum Origin<A> {
    /// Just accepted: its first request is on the header clock from now.
    Accepted(Admission<A>),
    /// Handed back by the parking lot, with bytes waiting (or a close),
    /// after a pause of its client, with what it kept there and the bytes
    /// the lot read for it (usually none: see `lot::Woke`), which it
    /// serves first.
    Woken(Pause, Option<Stowed<A>>, Bytes),
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

/// A connection its task serves, between two steps of [`serve`]: what goes
/// with it from state to state, but its transport, which the states hold.
struct Conn<T: Seam> {
    /// The task's hold on its `serve` call: the connection counts as held,
    /// and in its gauge, until this drops or it goes into the lot.
    open: Open<T>,
    /// The peer's address: from accept, or the PROXY header's; for a
    /// woken connection, only if something will show it (see
    /// `server::owner`).
    peer: Option<T::Addr>,
    kept: Kept<T::Addr>,
    progress: Progress,
    /// Its client's last pause (see [`Pause`]).
    pause: Pause,
}

/// How far a connection has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// Accepted, nothing served: its first bytes say its protocol.
    New,
    /// As `New`, behind a PROXY header: the connection hooks see it once
    /// the header named its client.
    NewInHeader,
    /// Served before: bytes that arrive wake it.
    Served,
}

/// A connection's state in its task: where it is on the ladder, with its
/// transport.
enum State<T> {
    /// PARKED in its task: a new connection, one holding part of a
    /// request head (`carried`), or one the lot did not take. It waits for
    /// bytes under its clocks' deadline; with `ready`, `carried` are bytes
    /// the lot read for it, served without a wait.
    Parked {
        stream: T,
        carried: Bytes,
        clocks: Clocks,
        ready: bool,
    },
    /// Bytes arrived: an ACTIVE phase of `protocol` serves them.
    Active {
        stream: T,
        replay: Replay,
        protocol: Protocol,
        head_since: Option<Instant>,
    },
    /// Shutdown, or its age passed, while it waited: closed, after its
    /// protocol's goodbye.
    Closing(T),
    /// Closed, handed to an upgrade, or in the lot: the task ends.
    Gone,
}

/// Serves one connection until it closes or parks without its task (in
/// the lot, which later moves it to DORMANT): the [`State`]s, one step at
/// a time.
///
/// The future's size is what a PARKED connection costs in its task, and
/// part of what an ACTIVE one does, so it is written with care: an `async`
/// block that holds the connection and its state once (an `async fn`, or
/// values moved out of what the block captured, would keep their room
/// twice), and keeps nothing across the PARKED wait that can be
/// recomputed.
pub(crate) fn serve<T, S, B>(
    stream: T,
    peer: Option<T::Addr>,
    service: Arc<SharedService<S>>,
    open: Open<T>,
    origin: Origin<T::Addr>,
) -> impl Future<Output = ()> + Send
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    // Made before the `async` block, which then holds them once: values
    // moved out of its captures would keep their room twice.
    let (mut conn, mut state) = Conn::start(stream, peer, open, origin);
    async move {
        loop {
            state = match state {
                State::Parked {
                    mut stream,
                    carried,
                    clocks,
                    ready,
                } => {
                    // No hyper state, no buffer: whatever is not needed
                    // across the wait is computed inside it.
                    let life = &conn.kept.life;
                    let wait =
                        ParkedWait::new(&mut stream, conn.open.state(), carried, &clocks, life);
                    let waited = match ready {
                        true => Waited::Readable(wait.into_replay()),
                        false => wait.await,
                    };
                    conn.waited(stream, waited, clocks)
                }
                State::Active {
                    stream,
                    replay,
                    protocol,
                    head_since,
                } => {
                    let active = conn.activate(stream, replay, protocol, head_since, &service);
                    let ended = active.await;
                    conn.ended(ended)
                }
                State::Closing(stream) => {
                    conn.close(stream);
                    State::Gone
                }
                State::Gone => return,
            };
        }
    }
}

/// An ACTIVE phase, boxed: its future is large, and a PARKED task must not
/// keep its room.
type ActiveFuture<'a, T> = Pin<Box<dyn Future<Output = Ended<T>> + Send + 'a>>;

impl<T: Seam> Conn<T> {
    /// A connection from `origin`, and its first state.
    #[inline]
    fn start(
        stream: T,
        peer: Option<T::Addr>,
        open: Open<T>,
        origin: Origin<T::Addr>,
    ) -> (Self, State<T>) {
        let now = Instant::now();
        let (progress, pause, kept, carried) = match origin {
            Origin::Accepted(admission) => {
                let life = open.state().shared.config.limits.born(now);
                let (progress, watched) = match admission {
                    Admission::Done(watched) => (Progress::New, watched),
                    Admission::InHeader => (Progress::NewInHeader, None),
                };
                (
                    progress,
                    Pause::Short,
                    Kept::new(life, watched),
                    Bytes::new(),
                )
            }
            Origin::Woken(pause, stowed, unread) => {
                (Progress::Served, pause, Kept::unstow(stowed), unread)
            }
        };
        let clocks = Clocks {
            quiet_since: now,
            // Like Go's, the header read timeout of a new connection counts
            // from accept.
            head_since: (progress != Progress::Served).then_some(now),
        };
        let conn = Conn {
            open,
            peer,
            kept,
            progress,
            pause,
        };
        let state = State::Parked {
            stream,
            ready: !carried.is_empty(),
            carried,
            clocks,
        };
        (conn, state)
    }

    /// PARKED in its task → what its wait ended with.
    #[inline]
    fn waited(&mut self, stream: T, waited: Waited, clocks: Clocks) -> State<T> {
        match waited {
            Waited::Readable(replay) => self.readable(stream, replay, clocks),
            Waited::Quiet => self.park(stream, Bytes::new(), clocks),
            Waited::Shutdown => State::Closing(stream),
            Waited::Ended => {
                stream.close();
                State::Gone
            }
            Waited::Closed => State::Gone,
        }
    }

    /// Bytes arrived: ACTIVE on them, in the protocol they (or the
    /// connection's past) say; PARKED again while they do not say yet.
    #[inline]
    fn readable(&mut self, stream: T, replay: Replay, clocks: Clocks) -> State<T> {
        let protocol = match self.progress {
            Progress::Served if self.kept.asleep.is_some() => Protocol::Http2,
            Progress::Served => Protocol::Http1,
            Progress::New | Progress::NewInHeader => {
                let connected = stream.connected();
                // Past a PROXY header now: its client is the peer.
                if let ClientAddr::Named(client) = connected.client {
                    self.peer = Some(client);
                }
                if self.progress == Progress::NewInHeader {
                    match self.admit_named(&stream) {
                        Admitted::Serve(watched) => self.kept.watched = watched,
                        Admitted::Close => return State::Gone,
                    }
                    self.progress = Progress::New;
                }
                detect(&replay, &self.open.state().shared.config, connected.alpn)
            }
        };
        if let Protocol::Undecided = protocol {
            let carried = replay.into_carried();
            return State::Parked {
                stream,
                carried,
                clocks,
                ready: false,
            };
        }
        self.open.set_rung(Rung::Active);
        // Counted once out of the parked gauge: whoever saw the connection
        // parked sees its wake counted after.
        if self.progress == Progress::Served {
            self.open.state().shared.stats.wakes.fetch_add(1, Relaxed);
        }
        self.progress = Progress::Served;
        if !self.kept.report(ConnState::On(Rung::Active)) {
            return State::Gone;
        }
        State::Active {
            stream,
            replay,
            protocol,
            head_since: clocks.head_since,
        }
    }

    /// The connection hooks' decision on a connection whose PROXY header
    /// was just read, with the address it named (the socket's, for a
    /// header without one).
    fn admit_named(&self, stream: &T) -> Admitted<T::Addr> {
        let peer = match &self.peer {
            Some(peer) => peer.clone(),
            None => match stream.peer_addr() {
                Ok(peer) => peer,
                // The peer reset the connection.
                Err(_) => return Admitted::Close,
            },
        };
        self.open.state().admit(&peer)
    }

    /// Starts the ACTIVE phase of `protocol` on bytes that just arrived (an
    /// HTTP/2 connection woken from a sleep with what it kept), which counts
    /// its requests in the connection's life.
    fn activate<'a, S, B>(
        &'a mut self,
        stream: T,
        replay: Replay,
        protocol: Protocol,
        head_since: Option<Instant>,
        service: &'a SharedService<S>,
    ) -> ActiveFuture<'a, T>
    where
        S: HttpService<B>,
        B: ResBody,
    {
        let state: &'a ServeState<T> = self.open.state();
        let config = &state.shared.config;
        // The span covers ACTIVE phases only: in a PARKED task it would
        // cost its size for every waiting connection.
        let span = debug_span!("conn", peer = ?ShowPeer(&self.peer));
        let peer = self.peer.clone().filter(|_| config.peer_addr);
        let start = phase::Start {
            stream,
            replay,
            peer,
            service,
            state,
            timing: Timing {
                head_since,
                park_after: match self.pause {
                    Pause::Long => Some(Duration::ZERO),
                    Pause::Short => config.park_after,
                },
            },
            life: &mut self.kept.life,
        };
        if let Protocol::Http2 = protocol {
            let asleep = self.kept.asleep.take();
            return Box::pin(h2::serve(start, asleep).instrument(span));
        }
        let active = h1::serve(start);
        if span.is_disabled() {
            // Entering a disabled span still costs every poll.
            Box::pin(active)
        } else {
            Box::pin(active.instrument(span))
        }
    }

    /// ACTIVE → what its phase ended with.
    #[inline]
    fn ended(&mut self, ended: Ended<T>) -> State<T> {
        let Quiet {
            stream,
            carried,
            clocks,
            asleep,
        } = match ended {
            Ended::Quiet(quiet) => quiet,
            Ended::Closed => return State::Gone,
            Ended::Upgraded => {
                if let Some(watched) = &mut self.kept.watched {
                    watched.upgraded();
                }
                return State::Gone;
            }
        };
        trace!(carried = carried.len(), asleep = asleep.is_some(), "parked");
        // A phase that parks holding part of a request (a head that came
        // in pieces) hands parking at once on to the phase that finishes
        // the request: the client paused mid-request, not after one.
        if carried.is_empty() {
            self.pause = Pause::Short;
        }
        self.kept.asleep = asleep;
        self.open.state().shared.stats.parks.fetch_add(1, Relaxed);
        self.open.set_rung(Rung::Parked);
        if !self.kept.report(ConnState::On(Rung::Parked)) {
            return State::Gone;
        }
        self.park(stream, carried, clocks)
    }

    /// The one park step, for a connection quiet between requests (after an
    /// ACTIVE phase, or a wait that brought nothing for the protocol): into
    /// the lot without its task, with what it keeps, if it carries no
    /// bytes and has no request head on the clock, and the lot takes it
    /// (`Gone` from the task); PARKED in its task otherwise.
    #[inline]
    fn park(&mut self, stream: T, carried: Bytes, clocks: Clocks) -> State<T> {
        if !carried.is_empty() || clocks.head_since.is_some() {
            return State::Parked {
                stream,
                carried,
                clocks,
                ready: false,
            };
        }
        let config = &self.open.state().shared.config;
        let now = Instant::now();
        // As hyper times it: from the client's last frame; HTTP/2 only.
        let ping_at = (config.h2_sleep.keep_alive)
            .filter(|_| self.kept.asleep.is_some())
            .map(|k| clocks.quiet_since + k.interval);
        let due = Due {
            dormant_at: config.dormant_after.map(|d| now + d),
            idle_at: (config.timeouts.idle_deadline(clocks.quiet_since)).map(|(at, _)| at),
            ping_at,
        };
        let kept = std::mem::replace(&mut self.kept, Kept::new(Default::default(), None));
        let stowed = kept.stow(config.limits.any());
        match self.open.state().lot.park(stream, stowed, now, due) {
            Ok(()) => {
                // The lot counts it as parked and held from here on.
                self.open.moved_to_lot();
                State::Gone
            }
            Err((stream, stowed)) => {
                self.kept = Kept::unstow(stowed);
                State::Parked {
                    stream,
                    carried,
                    clocks,
                    ready: false,
                }
            }
        }
    }

    /// Closes a connection at shutdown, or past its age, while it waits:
    /// a sleeping HTTP/2 connection says GOAWAY first.
    fn close(&self, stream: T) {
        match self.kept.asleep.as_deref().map(crate::wire::Asleep::goaway) {
            Some(goaway) => match stream.into_dormant() {
                Ok((dormant, _)) => T::close_dormant(dormant, &goaway),
                Err(stream) => stream.close(),
            },
            None => stream.close(),
        }
    }
}
