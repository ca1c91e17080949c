//! Counters a user can read at any time, with [`Server::stats`].
//!
//! [`Server::stats`]: crate::Server::stats

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::ladder::PerRung;
use crate::pool::PoolStats;

/// A snapshot of a server's counters.
///
/// Gauges (`connections`, and `websockets`) are current values; the others
/// count since the server was built. Each value is read on its own, so a
/// snapshot taken while connections change state may be off by one between
/// values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Connections accepted.
    pub accepted: u64,
    /// Accepted connections an admission hook
    /// ([`Serve::on_accept`](crate::Serve::on_accept)) rejected.
    pub rejected: u64,
    /// Open connections on each [`Rung`](crate::Rung) of the idle ladder
    /// right now:
    /// `connections[Rung::Active]` served by hyper (HTTP/2 included),
    /// `connections[Rung::Parked]` waiting for bytes with no hyper state,
    /// `connections[Rung::Dormant]` task-less in the parking lot, their
    /// readiness cell freed after `dormant_after`. Upgraded connections
    /// are their handlers', on no rung.
    pub connections: PerRung<usize>,
    /// ACTIVE → PARKED transitions.
    pub parks: u64,
    /// PARKED → ACTIVE transitions after the first request.
    pub wakes: u64,
    /// PARKED → DORMANT transitions.
    pub dormancies: u64,
    /// DORMANT connections served again because bytes arrived.
    pub lot_wakes: u64,
    /// DORMANT connections closed because the peer closed them. TCP only: a
    /// Unix socket cannot be peeked, so a closed one is handed back like a
    /// readable one (counted in `lot_wakes`) and closed by its first read.
    pub lot_closes: u64,
    /// Connections closed by the idle timeout (ACTIVE, PARKED or DORMANT;
    /// HTTP/2 connections are shut down gracefully).
    pub idle_timeouts: u64,
    /// Sleeping HTTP/2 connections closed because the client did not
    /// answer a keep-alive `PING` in time
    /// ([`http2_keep_alive_timeout`](crate::Builder::http2_keep_alive_timeout)).
    /// (hyper closes awake ones itself, uncounted.)
    pub keep_alive_timeouts: u64,
    /// Connections closed because a request head took longer than the
    /// header read timeout.
    pub header_read_timeouts: u64,
    /// Connections closed because a request took longer than the read
    /// timeout to arrive, or than the read deadline its handler chose
    /// ([`Deadlines`](crate::Deadlines)).
    pub read_timeouts: u64,
    /// Connections closed because a response took longer than the write
    /// timeout to be written, or than the write deadline its handler chose
    /// ([`Deadlines`](crate::Deadlines)).
    pub write_timeouts: u64,
    /// TLS handshakes completed.
    pub tls_handshakes: u64,
    /// TLS connections that closed before their handshake completed: the
    /// client sent something that is not TLS, failed the handshake, left,
    /// or took too long (those are also in `tls_handshake_timeouts`).
    pub tls_handshake_failures: u64,
    /// TLS handshakes cut short by the listener's handshake timeout.
    pub tls_handshake_timeouts: u64,
    /// TLS connections whose session stayed in rustls after the handshake,
    /// because their crypto provider does not hand out the negotiated
    /// suite's keys (the providers rustls ships all do): each keeps
    /// rustls's session, a few KB, while it waits. Every other TLS
    /// connection moves to dormant's record layer (see `docs/tls.md`).
    pub tls_kept_by_rustls: u64,
    /// Connections of a `ProxyProtocol` listener (feature `proxy-protocol`)
    /// closed before their PROXY header was read: the header was malformed
    /// or missing (the client sent something else), the client left in the
    /// middle of it, or took too long (cut by the handshake timeout, or by
    /// a header read or idle timeout, which counts it too). A client that
    /// closes without sending a byte (a TCP health check) is not counted.
    pub proxy_header_failures: u64,
    /// Accept errors that were not about one connection (running out of
    /// file descriptors and the like); each one pauses accepting.
    pub accept_errors: u64,
    /// Requests served. A connection adds its requests when it parks or
    /// closes, so a busy connection's requests show up with a delay.
    pub requests: u64,
    /// Connections whose [`max_connection_age`](crate::Builder::max_connection_age)
    /// passed: closed where they waited, or told to close after the
    /// requests in flight.
    pub age_closes: u64,
    /// Connections that served their
    /// [`max_requests_per_connection`](crate::Builder::max_requests_per_connection).
    pub request_limit_closes: u64,
    /// Connections handed off to a handler in an upgrade
    /// ([`upgrade::on`](crate::upgrade::on)). From then on they are the
    /// handler's, and no longer counted as active, parked or dormant.
    pub upgrades: u64,
    /// Idle HTTP/2 connections that stayed awake, by reason (see
    /// [`H2SleepDeclines`]).
    pub h2_sleep_declines: H2SleepDeclines,
    /// The read buffer pool.
    pub pool: PoolStats,
    /// The server's WebSockets (`dormant::ws`, feature `ws`).
    #[cfg(feature = "ws")]
    pub websockets: WebSocketStats,
}

/// What a server's WebSockets (`dormant::ws`) are doing: gauges.
#[cfg(feature = "ws")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WebSocketStats {
    /// Sockets open (upgraded, not closed yet).
    pub open: usize,
    /// Open sockets that sleep in the parking lot: no task serves them.
    /// The others are awake.
    pub asleep: usize,
    /// Bytes waiting in the sockets' queues, for clients that do not read
    /// as fast as they are sent to.
    pub queued_bytes: usize,
}

/// The counters behind [`WebSocketStats`], shared with the parking lot's
/// sockets.
#[cfg(feature = "ws")]
#[derive(Debug, Default)]
pub(crate) struct WsCounters {
    pub(crate) open: AtomicUsize,
    pub(crate) asleep: AtomicUsize,
    pub(crate) queued: AtomicUsize,
}

/// Why idle HTTP/2 connections stayed awake when they could have slept
/// (quiet for `park_after`). Each quiet spell counts once. A connection
/// that declines is served as hyper serves it, only not smaller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct H2SleepDeclines {
    /// The connection's flow-control windows were not ones a fresh
    /// connection can take over: the client could send more than a fresh
    /// connection accepts (the adaptive window grew the connection's
    /// window, or the streams').
    pub window: u64,
    /// The client did not acknowledge the SETTINGS frame a connection sends
    /// before it sleeps.
    pub unacknowledged: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) accepted: AtomicU64,
    pub(crate) rejected: AtomicU64,
    /// The gauges of the ladder.
    pub(crate) connections: PerRung<AtomicUsize>,
    pub(crate) parks: AtomicU64,
    pub(crate) wakes: AtomicU64,
    pub(crate) dormancies: AtomicU64,
    pub(crate) lot_wakes: AtomicU64,
    pub(crate) lot_closes: AtomicU64,
    pub(crate) idle_timeouts: AtomicU64,
    pub(crate) keep_alive_timeouts: AtomicU64,
    pub(crate) header_read_timeouts: AtomicU64,
    pub(crate) read_timeouts: AtomicU64,
    pub(crate) write_timeouts: AtomicU64,
    pub(crate) tls_handshakes: AtomicU64,
    pub(crate) tls_handshake_failures: AtomicU64,
    pub(crate) tls_handshake_timeouts: AtomicU64,
    pub(crate) tls_kept_by_rustls: AtomicU64,
    pub(crate) proxy_header_failures: AtomicU64,
    pub(crate) accept_errors: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) upgrades: AtomicU64,
    pub(crate) age_closes: AtomicU64,
    pub(crate) request_limit_closes: AtomicU64,
    pub(crate) h2_declines_window: AtomicU64,
    pub(crate) h2_declines_unacknowledged: AtomicU64,
    #[cfg(feature = "ws")]
    pub(crate) ws: std::sync::Arc<WsCounters>,
}

impl Counters {
    pub(crate) fn snapshot(&self, pool: PoolStats) -> Stats {
        Stats {
            accepted: self.accepted.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            connections: self.connections.read(),
            parks: self.parks.load(Relaxed),
            wakes: self.wakes.load(Relaxed),
            dormancies: self.dormancies.load(Relaxed),
            lot_wakes: self.lot_wakes.load(Relaxed),
            lot_closes: self.lot_closes.load(Relaxed),
            idle_timeouts: self.idle_timeouts.load(Relaxed),
            keep_alive_timeouts: self.keep_alive_timeouts.load(Relaxed),
            header_read_timeouts: self.header_read_timeouts.load(Relaxed),
            read_timeouts: self.read_timeouts.load(Relaxed),
            write_timeouts: self.write_timeouts.load(Relaxed),
            tls_handshakes: self.tls_handshakes.load(Relaxed),
            tls_handshake_failures: self.tls_handshake_failures.load(Relaxed),
            tls_handshake_timeouts: self.tls_handshake_timeouts.load(Relaxed),
            tls_kept_by_rustls: self.tls_kept_by_rustls.load(Relaxed),
            proxy_header_failures: self.proxy_header_failures.load(Relaxed),
            accept_errors: self.accept_errors.load(Relaxed),
            requests: self.requests.load(Relaxed),
            upgrades: self.upgrades.load(Relaxed),
            age_closes: self.age_closes.load(Relaxed),
            request_limit_closes: self.request_limit_closes.load(Relaxed),
            h2_sleep_declines: H2SleepDeclines {
                window: self.h2_declines_window.load(Relaxed),
                unacknowledged: self.h2_declines_unacknowledged.load(Relaxed),
            },
            pool,
            #[cfg(feature = "ws")]
            websockets: WebSocketStats {
                open: self.ws.open.load(Relaxed),
                asleep: self.ws.asleep.load(Relaxed),
                queued_bytes: self.ws.queued.load(Relaxed),
            },
        }
    }
}
