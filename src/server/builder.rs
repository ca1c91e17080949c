//! [`Builder`]: a server's settings, their defaults, and the checks
//! `build` makes before a [`Server`] exists.

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::Server;
use crate::config::{Config, H2Sleep, KeepAlive};
use crate::error::Error;
use crate::life::Limits;
use crate::pool::Pool;
use crate::state::Shared;
use crate::stats::Counters;
use crate::timeout::Timeouts;

/// hyper's own default for its read buffer limit, which bounds a request
/// head.
const DEFAULT_MAX_HEADER_BYTES: usize = 8192 + 4096 * 100;

/// hyper's own default header count limit.
const HYPER_MAX_HEADERS: usize = 100;

/// axum-server's: long enough for a slow mobile client, short enough that
/// stalled handshakes do not pile up.
const DEFAULT_TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// hyper's default header read timeout (when it is given a timer).
const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest timeout or interval the server counts: the parking lot's
/// deadlines are correct up to about 24 days apart (`lot::deadlines`).
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 24 * 3600);

/// The longest `max_connection_age`: with its jitter, within the lot's
/// range.
const MAX_AGE: Duration = Duration::from_secs(20 * 24 * 3600);

/// Configures and builds a [`Server`].
///
/// ```
/// use std::time::Duration;
///
/// let server = dormant::Server::builder()
///     .park_after(Duration::from_millis(10))
///     .shutdown_grace(Duration::from_secs(30))
///     .build()?;
/// # Ok::<(), dormant::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    park_after: Option<Duration>,
    dormant_after: Option<Duration>,
    timeouts: Timeouts,
    max_connections: Option<usize>,
    http2: bool,
    keep_alive: bool,
    max_header_bytes: usize,
    max_headers: usize,
    shutdown_grace: Option<Duration>,
    peer_addr: bool,
    #[cfg(feature = "tls-no-provider")]
    tls_info: bool,
    handshake_timeout: Option<Duration>,
    h2: Http2,
    limits: Limits,
}

impl Server {
    /// Returns a builder with default settings.
    pub fn builder() -> Builder {
        Builder::default()
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            park_after: Some(Duration::from_millis(10)),
            dormant_after: Some(Duration::from_secs(1)),
            timeouts: Timeouts {
                header_read: Some(DEFAULT_HEADER_READ_TIMEOUT),
                read: None,
                write: None,
                idle: None,
            },
            max_connections: None,
            http2: true,
            keep_alive: true,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_headers: HYPER_MAX_HEADERS,
            shutdown_grace: None,
            peer_addr: false,
            #[cfg(feature = "tls-no-provider")]
            tls_info: false,
            handshake_timeout: Some(DEFAULT_TLS_HANDSHAKE_TIMEOUT),
            h2: Http2::default(),
            limits: Limits::default(),
        }
    }
}

impl Builder {
    /// Sets how long a connection must sit idle between requests before its
    /// hyper state and buffers are dropped (an HTTP/1 connection *parks*;
    /// an HTTP/2 connection with no stream open *sleeps*, see
    /// [`Stats::h2_sleep_declines`](crate::Stats::h2_sleep_declines) for
    /// when it cannot).
    /// `None` never parks: connections then cost what they cost on hyper.
    ///
    /// Parking after every response would rebuild hyper for each request of
    /// a busy connection; a short delay keeps busy connections ACTIVE and
    /// costs no throughput (BENCHMARKS.md, "Throughput").
    ///
    /// A connection's pauses predict its next one: a connection woken
    /// after sleeping at least this long parks again as soon as its
    /// response is written, instead of keeping hyper for this long once
    /// more (a timer and a second wake-up of its task, for nothing if its
    /// client pauses again). If its client then comes back sooner than
    /// this, the new ACTIVE phase waits this long again, so a burst that
    /// follows a pause costs one extra wake, not one per request.
    ///
    /// Default is 10 ms.
    pub fn park_after(&mut self, after: impl Into<Option<Duration>>) -> &mut Self {
        self.park_after = after.into();
        self
    }

    /// Sets how long a task-less PARKED connection keeps its readiness
    /// cell before the parking lot frees it. A DORMANT connection keeps
    /// its fd and deadline in the slot every connection has, plus the
    /// kernel's socket. Every connection is registered with the lot once,
    /// at accept, so going DORMANT and waking from it make no system call;
    /// a dormant wake allocates the cell again (BENCHMARKS.md, "Idle
    /// memory" and "Load"). `None` keeps parked connections' cells.
    ///
    /// A connection whose client pipelined part of a request stays PARKED
    /// (it holds those bytes). A sleeping HTTP/2 connection goes DORMANT
    /// too, keeping what it needs to wake beside its fd.
    ///
    /// The lot acts on its deadlines (this one, and the idle timeout of
    /// the connections it holds) in batches, up to a sixteenth of the
    /// shorter of the two late (at least 1 ms, at most 100 ms): a sixteenth
    /// of a second with the default.
    ///
    /// Default is 1 s.
    pub fn dormant_after(&mut self, after: impl Into<Option<Duration>>) -> &mut Self {
        self.dormant_after = after.into();
        self
    }

    /// Sets how long a keep-alive connection may wait for the next request
    /// before the server closes it, counted from when its last response was
    /// written (Go's `IdleTimeout`). A new connection waits for its first
    /// request under [`header_read_timeout`](Self::header_read_timeout)
    /// instead, or under this one if that is `None`. DORMANT connections are
    /// closed by the parking lot, which keeps their deadlines in one queue
    /// instead of a timer each. An HTTP/2 connection with no stream open for
    /// this long is shut down gracefully (GOAWAY). At most 24 days. `None`
    /// keeps idle connections open until the peer closes them.
    ///
    /// Default is `None`, like Go's `net/http` and hyper: idle connections
    /// are cheap here, and the right bound depends on the clients.
    pub fn idle_timeout(&mut self, timeout: impl Into<Option<Duration>>) -> &mut Self {
        self.timeouts.idle = timeout.into();
        self
    }

    /// Sets how long a client may take to send a request head (request line
    /// and headers), counted from the first byte of the request after an idle
    /// wait, or from accept for a connection's first request (Go's
    /// `ReadHeaderTimeout`). On expiry the connection is closed without a
    /// response, as Go and hyper do. This is what stops a slowloris client
    /// from holding a connection with a head that never ends.
    ///
    /// A connection that has not sent its first request stays PARKED (it
    /// does not go dormant) until this deadline. It also bounds a PROXY
    /// header before the first request (feature `proxy-protocol`), with
    /// [`handshake_timeout`](Self::handshake_timeout).
    ///
    /// Default is 30 s (hyper's default when it has a timer): long enough
    /// for any real client, short enough that trickled heads cannot pile
    /// up. `None` disables it.
    pub fn header_read_timeout(&mut self, timeout: impl Into<Option<Duration>>) -> &mut Self {
        self.timeouts.header_read = timeout.into();
        self
    }

    /// Sets how long a client may take to send a whole request, head and
    /// body, counted like [`header_read_timeout`](Self::header_read_timeout) (Go's
    /// `ReadTimeout`). It applies while the handler still reads the body; a
    /// handler that answers without reading the body stops it. On expiry
    /// the connection is closed and a handler still reading gets an error
    /// from the body. A handler may choose its own request's deadline
    /// instead ([`Deadlines`](crate::Deadlines)). HTTP/1 only: HTTP/2
    /// streams have no read timeout.
    ///
    /// Default is `None`: uploads take as long as they take, as in Go.
    pub fn read_timeout(&mut self, timeout: impl Into<Option<Duration>>) -> &mut Self {
        self.timeouts.read = timeout.into();
        self
    }

    /// Sets how long writing a response may take, from when the handler returns
    /// it until its last byte is flushed to the socket. On expiry the
    /// connection is closed: this is what frees a connection whose client
    /// stopped reading. Unlike Go's `WriteTimeout`, the time the handler
    /// takes to produce the response is not counted, so long polls need no
    /// special case; a streaming response body counts in full, unless its
    /// handler lifts or moves its own request's deadline
    /// ([`Deadlines`](crate::Deadlines): a server-sent events stream, a long
    /// download). HTTP/1 only: HTTP/2 streams have no write timeout.
    ///
    /// Default is `None`, as in Go: responses may stream for as long as
    /// they like.
    pub fn write_timeout(&mut self, timeout: impl Into<Option<Duration>>) -> &mut Self {
        self.timeouts.write = timeout.into();
        self
    }

    /// Sets the most connections the server holds at once: ACTIVE, PARKED and
    /// DORMANT ones all count, since each holds a file descriptor and
    /// kernel socket memory. At the limit the server stops accepting; new
    /// connections wait in the kernel's listen backlog until one closes.
    /// Upgraded connections stop counting when they are handed to the
    /// handler. HTTP/2 connections count once, whatever their streams.
    ///
    /// Default is `None`: no limit beyond the process's file descriptor
    /// limit (running out of descriptors pauses accepting; see
    /// [`Stats::accept_errors`](crate::Stats::accept_errors)).
    pub fn max_connections(&mut self, max: impl Into<Option<usize>>) -> &mut Self {
        self.max_connections = max.into();
        self
    }

    /// Sets whether connections that open with the HTTP/2 preface (h2c, "prior
    /// knowledge") are served with HTTP/2. When off, hyper's HTTP/1 parser
    /// rejects the preface and the connection is closed without a response,
    /// as on a plain hyper HTTP/1 server.
    ///
    /// Default is `true`.
    pub fn http2(&mut self, enabled: bool) -> &mut Self {
        self.http2 = enabled;
        self
    }

    /// Sets the most requests (streams) a client may have open at once on
    /// one HTTP/2 connection, advertised as `SETTINGS_MAX_CONCURRENT_STREAMS`.
    /// hyper refuses a stream beyond it with `REFUSED_STREAM`, which a
    /// client may retry. `None` advertises no limit. Must be at least 1.
    ///
    /// The `http2_*` settings are hyper 1.x's `http2::Builder` settings
    /// under the names hyper 0.14's server builder gave them: the prefix
    /// keeps them apart from the HTTP/1 settings beside them (hyper-util's
    /// `auto::Builder` reaches the same ones through `.http2()`; tonic's
    /// `Server` prefixes some, as in `http2_keepalive_interval`, spelled
    /// `keep_alive` here as in hyper and [`keep_alive`](Self::keep_alive)).
    /// They apply to h2c and to HTTP/2 over TLS (ALPN `h2`) alike.
    ///
    /// Default is 200 (hyper's default).
    pub fn http2_max_concurrent_streams(&mut self, max: impl Into<Option<u32>>) -> &mut Self {
        self.h2.max_concurrent_streams = max.into();
        self
    }

    /// Sets how many bytes of a request body a client may send on one
    /// HTTP/2 stream before the handler reads them, advertised as
    /// `SETTINGS_INITIAL_WINDOW_SIZE`: the server's buffer per request body.
    /// At most 2,147,483,647 (2^31 − 1). Not used with
    /// [`http2_adaptive_window`](Self::http2_adaptive_window).
    ///
    /// Default is 1,048,576 (1 MiB, hyper's default; the protocol's own is
    /// 65,535).
    pub fn http2_initial_stream_window_size(&mut self, size: u32) -> &mut Self {
        self.h2.initial_stream_window_size = size;
        self
    }

    /// Sets how many bytes of request bodies a client may send on one
    /// HTTP/2 connection, all streams together, before handlers read them:
    /// the server grants it with a `WINDOW_UPDATE` on stream 0 beyond the
    /// 65,535 bytes every connection starts with. A smaller value grants
    /// nothing more, and holds back the client's later windows until the
    /// bytes in flight drop below it. At most 2,147,483,647 (2^31 − 1).
    /// Not used with [`http2_adaptive_window`](Self::http2_adaptive_window).
    ///
    /// Default is 1,048,576 (1 MiB, hyper's default).
    pub fn http2_initial_connection_window_size(&mut self, size: u32) -> &mut Self {
        self.h2.initial_connection_window_size = size;
        self
    }

    /// Sets whether HTTP/2 flow control windows adapt to the connection:
    /// they start at 65,535 bytes and grow with the bandwidth-delay product
    /// the server estimates with `PING`s while request bodies arrive. When on,
    /// the two initial window settings are not used, whichever was set
    /// last.
    ///
    /// Default is `false` (hyper's default).
    pub fn http2_adaptive_window(&mut self, enabled: bool) -> &mut Self {
        self.h2.adaptive_window = enabled;
        self
    }

    /// Sets whether HTTP/2 clients may open tunnels with the extended
    /// `CONNECT` method (RFC 8441, advertised as
    /// `SETTINGS_ENABLE_CONNECT_PROTOCOL`): WebSockets over HTTP/2, which
    /// axum's `WebSocketUpgrade` accepts and Chromium uses. A handler gets
    /// the tunnel from `hyper::upgrade::on` (dormant's
    /// [`upgrade::on`](crate::upgrade::on) is HTTP/1's). The connection
    /// stays awake while a tunnel is open, as while any stream is.
    ///
    /// Default is `false` (hyper's default).
    pub fn http2_enable_connect_protocol(&mut self, enabled: bool) -> &mut Self {
        self.h2.enable_connect_protocol = enabled;
        self
    }

    /// Sets the largest HTTP/2 frame payload the server accepts, advertised
    /// as `SETTINGS_MAX_FRAME_SIZE`; larger frames are a protocol error. The
    /// frames the server sends follow the client's setting instead. Must be
    /// between 16,384 and 16,777,215, the protocol's bounds.
    ///
    /// Default is 16,384 (hyper's default, the protocol's smallest).
    pub fn http2_max_frame_size(&mut self, size: u32) -> &mut Self {
        self.h2.max_frame_size = size;
        self
    }

    /// Sets the largest request header list accepted on HTTP/2, advertised
    /// as `SETTINGS_MAX_HEADER_LIST_SIZE`, and the most the server buffers
    /// to decode one. It counts as HTTP/2 does: each field's name and value
    /// (decompressed) plus 32 bytes. A larger request is answered with `431
    /// Request Header Fields Too Large` and its stream reset. The
    /// HTTP/2 counterpart of [`max_header_bytes`](Self::max_header_bytes).
    /// Must be at least 1.
    ///
    /// Default is 16,384 (hyper's default).
    pub fn http2_max_header_list_size(&mut self, max: u32) -> &mut Self {
        self.h2.max_header_list_size = max;
        self
    }

    /// Sets how long an HTTP/2 connection may go without receiving a frame
    /// before the server sends a `PING`, also while no request is open; a
    /// client that does not answer within
    /// [`http2_keep_alive_timeout`](Self::http2_keep_alive_timeout) is
    /// closed. This finds dead peers and keeps NAT and proxy mappings open,
    /// as gRPC servers do. At most 24 days. `None` sends no keep-alive
    /// `PING`.
    ///
    /// A connection asleep is pinged by the parking lot, on the same
    /// schedule, without waking; the client's answer wakes it (and it
    /// sleeps again once quiet), and one that does not answer in time is
    /// sent a `GOAWAY` and closed (counted in
    /// [`Stats::keep_alive_timeouts`](crate::Stats::keep_alive_timeouts)).
    /// Awake, hyper sends them.
    ///
    /// Default is `None` (hyper's default).
    pub fn http2_keep_alive_interval(
        &mut self,
        interval: impl Into<Option<Duration>>,
    ) -> &mut Self {
        self.h2.keep_alive_interval = interval.into();
        self
    }

    /// Sets how long the server waits for the answer to a keep-alive `PING`
    /// (see [`http2_keep_alive_interval`](Self::http2_keep_alive_interval),
    /// without which it does nothing) before it closes the connection. At
    /// most 24 days.
    ///
    /// Default is 20 s (hyper's default).
    pub fn http2_keep_alive_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.h2.keep_alive_timeout = timeout;
        self
    }

    /// Sets whether HTTP/1 connections are kept alive between requests.
    ///
    /// Default is `true`.
    pub fn keep_alive(&mut self, enabled: bool) -> &mut Self {
        self.keep_alive = enabled;
        self
    }

    /// Sets the largest HTTP/1 request head (request line and headers)
    /// accepted, in bytes; a larger one is answered with `431 Request Header
    /// Fields Too Large` and the connection is closed. Must be at least 8192.
    /// HTTP/2 has [`http2_max_header_list_size`](Self::http2_max_header_list_size).
    ///
    /// Default is 417,792 (hyper's default).
    pub fn max_header_bytes(&mut self, max: usize) -> &mut Self {
        self.max_header_bytes = max;
        self
    }

    /// Sets the most headers an HTTP/1 request may have; more are answered
    /// with `431`.
    ///
    /// Default is 100 (hyper's default).
    pub fn max_headers(&mut self, max: usize) -> &mut Self {
        self.max_headers = max;
        self
    }

    /// Sets whether every request carries the client's address as a
    /// [`PeerAddr`](crate::PeerAddr) extension.
    ///
    /// Off by default, like axum's `ConnectInfo`, because it is not free:
    /// an extension is the only way an `http::Request` can carry the
    /// address, and the first extension of a request costs three
    /// allocations (`http`'s map, its table and the boxed value), which a
    /// hello-world server feels in its throughput (BENCHMARKS.md,
    /// "Throughput"). Turn it on when handlers need the address.
    ///
    /// Default is `false`.
    pub fn peer_addr(&mut self, enabled: bool) -> &mut Self {
        self.peer_addr = enabled;
        self
    }

    /// Sets whether every request on a TLS connection carries what its handshake
    /// negotiated as a [`TlsInfo`](crate::tls::TlsInfo) extension: the
    /// server name the client asked for, the ALPN protocol, the TLS version
    /// and cipher suite, and the client's certificates (mutual TLS).
    ///
    /// Off by default, like [`peer_addr`](Self::peer_addr): when on, a
    /// connection keeps the facts from its handshake on (a small
    /// allocation, plus a copy of the client's certificate chain if it
    /// sent one, held while it is idle too), and every request gets an
    /// extension.
    ///
    /// Default is `false`.
    #[cfg(feature = "tls-no-provider")]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
    )]
    pub fn tls_info(&mut self, enabled: bool) -> &mut Self {
        self.tls_info = enabled;
        self
    }

    /// Sets how long a client may take to complete its transport's
    /// handshake, counted from accept: a TLS handshake (TLS listeners only;
    /// see [`tls`](crate)), and a PROXY header (feature `proxy-protocol`),
    /// or both, one after the other, within it. A connection still
    /// handshaking then is closed and counted in
    /// [`Stats::tls_handshake_timeouts`](crate::Stats::tls_handshake_timeouts)
    /// (a cut PROXY header, in `Stats::proxy_header_failures`). The
    /// `header_read_timeout` also counts from accept and bounds the
    /// handshake and the first request head together. `None` leaves only
    /// that one.
    ///
    /// Default is 10 s (as axum-server's).
    pub fn handshake_timeout(&mut self, timeout: impl Into<Option<Duration>>) -> &mut Self {
        self.handshake_timeout = timeout.into();
        self
    }

    /// Sets how long a connection may live, counted from accept and moved
    /// by up to ±10% at random per connection, so that connections
    /// accepted together are not closed together (grpc-go's
    /// `MaxConnectionAge`). Bounding connections' lives lets a load
    /// balancer spread long-lived clients over new instances.
    ///
    /// When its age passes, an HTTP/1.1 connection finishes the request in
    /// flight, whose response says `Connection: close`, and closes; an
    /// HTTP/2 connection sends GOAWAY and closes once its streams end.
    /// Either has [`max_connection_age_grace`](Self::max_connection_age_grace)
    /// to finish. A PARKED or DORMANT connection is closed where it waits
    /// (HTTP/2: after a GOAWAY), by the parking lot, which looks for
    /// connections past their age every thirty-second of it (at least every
    /// 10 ms, at most every minute) rather than keeping a timer for each.
    /// Each one counts in [`Stats::age_closes`](crate::Stats::age_closes).
    /// Upgraded streams are their handlers' and live on. At most 20 days.
    ///
    /// Default is `None`: a connection lives as long as its client keeps it.
    pub fn max_connection_age(&mut self, age: impl Into<Option<Duration>>) -> &mut Self {
        self.limits.max_age = age.into();
        self
    }

    /// Sets how long a connection past its
    /// [`max_connection_age`](Self::max_connection_age) may take to finish
    /// the requests in flight before it is closed anyway (grpc-go's
    /// `MaxConnectionAgeGrace`). At most 24 days.
    ///
    /// Default is `None`: requests in flight take as long as they take.
    pub fn max_connection_age_grace(&mut self, grace: impl Into<Option<Duration>>) -> &mut Self {
        self.limits.age_grace = grace.into();
        self
    }

    /// Sets how many requests a connection serves before it closes (nginx's
    /// `keepalive_requests`). The last one's response says `Connection:
    /// close` on HTTP/1.1; on HTTP/2 the connection sends GOAWAY once its
    /// last stream started, and refuses streams the client opened before it
    /// saw the GOAWAY with `REFUSED_STREAM`, which clients retry on a new
    /// connection. The count holds across parks and dormancy.
    ///
    /// Default is `None`: no limit.
    pub fn max_requests_per_connection(&mut self, max: impl Into<Option<u32>>) -> &mut Self {
        self.limits.max_requests = max.into();
        self
    }

    /// Sets how long a graceful shutdown waits for requests in flight before it
    /// closes their connections anyway. `None` waits as long as they take.
    ///
    /// Default is `None`, as Go's `Server.Shutdown` with a background
    /// context.
    pub fn shutdown_grace(&mut self, grace: impl Into<Option<Duration>>) -> &mut Self {
        self.shutdown_grace = grace.into();
        self
    }

    /// Checks the configuration and builds the server.
    ///
    /// # Errors
    ///
    /// A configuration error ([`Error::is_config`]) names the setting that
    /// is out of range: `max_header_bytes` below 8192, an `idle_timeout`
    /// over 24 days, a zero `header_read_timeout`, `read_timeout`,
    /// `write_timeout` or `handshake_timeout` (`None` disables them),
    /// a zero `max_connections`, `max_headers`, `max_connection_age` or
    /// `max_requests_per_connection`, a `max_connection_age` over 20 days or
    /// its grace over 24 days, or an `http2_*` setting
    /// out of the range its setter states (HTTP/2's bounds on windows and
    /// frame sizes, which would otherwise panic in `h2` when a connection
    /// starts).
    pub fn build(&self) -> Result<Server, Error> {
        if self.max_header_bytes < 8192 {
            return Err(Error::config("max_header_bytes must be at least 8192"));
        }
        if self.timeouts.idle.is_some_and(|t| t > MAX_TIMEOUT) {
            return Err(Error::config("idle_timeout must be at most 24 days"));
        }
        for (timeout, message) in [
            (
                self.timeouts.header_read,
                "header_read_timeout must be longer than zero (None disables it)",
            ),
            (
                self.timeouts.read,
                "read_timeout must be longer than zero (None disables it)",
            ),
            (
                self.timeouts.write,
                "write_timeout must be longer than zero (None disables it)",
            ),
            (
                self.handshake_timeout,
                "handshake_timeout must be longer than zero (None disables it)",
            ),
        ] {
            if timeout == Some(Duration::ZERO) {
                return Err(Error::config(message));
            }
        }
        if self.max_connections == Some(0) {
            return Err(Error::config("max_connections must be at least 1"));
        }
        if self.limits.max_age == Some(Duration::ZERO) {
            return Err(Error::config(
                "max_connection_age must be longer than zero (None disables it)",
            ));
        }
        if self.limits.max_age.is_some_and(|t| t > MAX_AGE) {
            return Err(Error::config("max_connection_age must be at most 20 days"));
        }
        if self.limits.age_grace.is_some_and(|t| t > MAX_TIMEOUT) {
            return Err(Error::config(
                "max_connection_age_grace must be at most 24 days",
            ));
        }
        if self.limits.max_requests == Some(0) {
            return Err(Error::config(
                "max_requests_per_connection must be at least 1 (None disables it)",
            ));
        }
        if self.max_headers == 0 {
            return Err(Error::config("max_headers must be at least 1"));
        }
        let mut h1 = http1::Builder::new();
        // hyper does not read while a request is answered: `ConnIo` looks
        // for the client's close instead, without costing hyper a new read
        // buffer per request (see `conn::h1::io`).
        h1.half_close(true)
            .keep_alive(self.keep_alive)
            .max_buf_size(self.max_header_bytes);
        if self.max_headers != HYPER_MAX_HEADERS {
            // Only when needed: an explicit limit sends hyper down a slower
            // path that initialises a header array per request.
            h1.max_headers(self.max_headers);
        }
        let h2 = self.h2.hyper()?;
        let config = Config {
            h2_sleep: self.h2.sleep(),
            park_after: self.park_after,
            dormant_after: self.dormant_after,
            timeouts: self.timeouts,
            max_connections: self.max_connections,
            http2: self.http2,
            peer_addr: self.peer_addr,
            #[cfg(feature = "tls-no-provider")]
            tls_info: self.tls_info,
            shutdown_grace: self.shutdown_grace,
            handshake_timeout: self.handshake_timeout,
            limits: self.limits,
        };
        Ok(Server {
            shared: Arc::new(Shared {
                config,
                http1: h1,
                http2: h2,
                pool: Pool::default(),
                stats: Counters::default(),
                h2_settings: Default::default(),
            }),
        })
    }
}

/// The HTTP/2 settings, as `Builder`'s `http2_*` setters take them.
#[derive(Clone, Debug)]
struct Http2 {
    max_concurrent_streams: Option<u32>,
    initial_stream_window_size: u32,
    initial_connection_window_size: u32,
    adaptive_window: bool,
    enable_connect_protocol: bool,
    max_frame_size: u32,
    max_header_list_size: u32,
    keep_alive_interval: Option<Duration>,
    keep_alive_timeout: Duration,
}

/// HTTP/2's initial flow control window (RFC 9113, 6.9.2).
const INITIAL_WINDOW_SIZE: u32 = 65_535;

/// HTTP/2's largest flow control window (RFC 9113, 6.9.1).
const MAX_WINDOW_SIZE: u32 = (1 << 31) - 1;

/// HTTP/2's bounds on `SETTINGS_MAX_FRAME_SIZE` (RFC 9113, 6.5.2).
const FRAME_SIZES: std::ops::RangeInclusive<u32> = 16_384..=16_777_215;

impl Default for Http2 {
    /// hyper 1.12's defaults (`proto::h2::server::Config`), spelled out so
    /// that the setters' docs can state them.
    fn default() -> Self {
        Http2 {
            max_concurrent_streams: Some(200),
            initial_stream_window_size: 1024 * 1024,
            initial_connection_window_size: 1024 * 1024,
            adaptive_window: false,
            enable_connect_protocol: false,
            max_frame_size: 16_384,
            max_header_list_size: 16_384,
            keep_alive_interval: None,
            keep_alive_timeout: Duration::from_secs(20),
        }
    }
}

impl Http2 {
    /// Checks the settings and makes hyper's builder with them. One
    /// builder serves h2c and HTTP/2 over TLS.
    fn hyper(&self) -> Result<http2::Builder<TokioExecutor>, Error> {
        self.check()?;
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        // hyper's keep-alive PING sleeps on this timer; without one the
        // connection task panics ("You must supply a timer") when it
        // schedules its first PING.
        h2.timer(TokioTimer::new())
            .max_concurrent_streams(self.max_concurrent_streams)
            .max_frame_size(self.max_frame_size)
            .max_header_list_size(self.max_header_list_size)
            .keep_alive_interval(self.keep_alive_interval)
            .keep_alive_timeout(self.keep_alive_timeout);
        if self.enable_connect_protocol {
            h2.enable_connect_protocol();
        }
        // In hyper the last of these calls wins: an explicit window turns
        // the adaptive window off, and turning it on resets the windows.
        // Here the adaptive window wins whatever order the setters ran in.
        if self.adaptive_window {
            h2.adaptive_window(true);
        } else {
            h2.initial_stream_window_size(self.initial_stream_window_size)
                .initial_connection_window_size(self.initial_connection_window_size);
        }
        Ok(h2)
    }

    /// Whether idle connections may sleep, and the connection window a
    /// fresh h2 connection grants the client: its configured window, once
    /// it has sent the WINDOW_UPDATE that opens it. h2 sends it only when
    /// the window grows by at least half the initial 65,535 bytes
    /// (`proto/streams/flow_control.rs`); a smaller window stays at the
    /// initial one. A wake checks what the fresh connection actually grants
    /// (`wire::Asleep::settle`).
    fn sleep(&self) -> H2Sleep {
        let window = if self.adaptive_window {
            INITIAL_WINDOW_SIZE
        } else {
            self.initial_connection_window_size
        };
        let opened = window.saturating_sub(INITIAL_WINDOW_SIZE) >= INITIAL_WINDOW_SIZE / 2;
        H2Sleep {
            fresh_window: if opened { window } else { INITIAL_WINDOW_SIZE },
            keep_alive: self.keep_alive_interval.map(|interval| KeepAlive {
                interval,
                timeout: self.keep_alive_timeout,
            }),
        }
    }

    /// Rejects what hyper or h2 would panic on when a connection starts
    /// (a frame size out of HTTP/2's bounds, a connection window over
    /// 2^31 − 1, a keep-alive deadline past `Instant`'s range), and what
    /// could serve no request (a zero stream limit or header list size).
    fn check(&self) -> Result<(), Error> {
        if self.max_concurrent_streams == Some(0) {
            return Err(Error::config(
                "http2_max_concurrent_streams must be at least 1 (None removes the limit)",
            ));
        }
        if self.initial_stream_window_size > MAX_WINDOW_SIZE {
            return Err(Error::config(
                "http2_initial_stream_window_size must be at most 2,147,483,647 (2^31 - 1)",
            ));
        }
        if self.initial_connection_window_size > MAX_WINDOW_SIZE {
            return Err(Error::config(
                "http2_initial_connection_window_size must be at most 2,147,483,647 (2^31 - 1)",
            ));
        }
        if !FRAME_SIZES.contains(&self.max_frame_size) {
            return Err(Error::config(
                "http2_max_frame_size must be between 16,384 and 16,777,215",
            ));
        }
        if self.max_header_list_size == 0 {
            return Err(Error::config(
                "http2_max_header_list_size must be at least 1",
            ));
        }
        if self.keep_alive_interval == Some(Duration::ZERO) {
            return Err(Error::config(
                "http2_keep_alive_interval must be longer than zero (None disables it)",
            ));
        }
        if self.keep_alive_interval.is_some_and(|t| t > MAX_TIMEOUT) {
            return Err(Error::config(
                "http2_keep_alive_interval must be at most 24 days",
            ));
        }
        if self.keep_alive_timeout == Duration::ZERO {
            return Err(Error::config(
                "http2_keep_alive_timeout must be longer than zero",
            ));
        }
        if self.keep_alive_timeout > MAX_TIMEOUT {
            return Err(Error::config(
                "http2_keep_alive_timeout must be at most 24 days",
            ));
        }
        Ok(())
    }
}
