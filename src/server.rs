//! The server: builder, accept loop, graceful shutdown, and the wiring
//! between the parking lot and the connection driver.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::io;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response};
use hyper::server::conn::{http1, http2};
use hyper::service::Service;
use hyper_util::rt::TokioExecutor;
use tracing::{debug, error, trace};

use crate::accounting::Held;
use crate::body::Body;
use crate::config::Config;
use crate::conn::{self, Origin};
use crate::error::Error;
use crate::listener::Listener;
use crate::lot::{self, Closed, Rung, Slept};
use crate::pool::Pool;
use crate::service::{BoxError, HttpService, ResBody};
use crate::shutdown::{Level, Signal};
use crate::state::{Open, ServeState, Shared};
use crate::stats::{Counters, Stats};
use crate::timeout::Timeouts;
use crate::transport::{Seam, Transport};

/// How a listener's connections are served.
type Served<L> = <<L as Listener>::Io as Transport>::Served;
use crate::upgrade::{self, StreamLot};

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
    tls_handshake_timeout: Option<Duration>,
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
            tls_handshake_timeout: Some(DEFAULT_TLS_HANDSHAKE_TIMEOUT),
        }
    }
}

impl Builder {
    /// How long an HTTP/1 connection must sit idle between requests before
    /// its hyper state and buffers are dropped (the connection *parks*).
    /// `None` never parks: connections then cost what they cost on hyper.
    ///
    /// Parking after every response would rebuild hyper for each request of
    /// a busy connection; a short delay keeps busy connections ACTIVE and
    /// costs nothing measurable (see README, "Throughput").
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

    /// How long a task-less PARKED connection keeps its readiness cell
    /// (104 bytes) before the parking lot frees it (DORMANT: the 16-byte
    /// slot every connection has, plus the kernel's socket). Every
    /// connection is registered with the lot once, at accept, so going
    /// DORMANT and waking from it make no system call; a dormant wake
    /// allocates the cell again (see README, "Load" and "Tuning
    /// `dormant_after`"). `None` keeps parked connections' cells.
    ///
    /// A connection whose client pipelined part of a request stays PARKED
    /// (it holds those bytes), as do HTTP/2 connections (they never park).
    ///
    /// The lot acts on its deadlines (this one, and the idle timeout of
    /// the connections it holds) in batches, up to a sixteenth of the
    /// shorter of the two late (at least 1 ms, at most 100 ms): 62 ms with
    /// the default.
    ///
    /// Default is 1 s.
    pub fn dormant_after(&mut self, after: impl Into<Option<Duration>>) -> &mut Self {
        self.dormant_after = after.into();
        self
    }

    /// How long a keep-alive connection may wait for the next request
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

    /// How long a client may take to send a request head (request line and
    /// headers), counted from the first byte of the request after an idle
    /// wait, or from accept for a connection's first request (Go's
    /// `ReadHeaderTimeout`). On expiry the connection is closed without a
    /// response, as Go and hyper do. This is what stops a slowloris client
    /// from holding a connection with a head that never ends.
    ///
    /// A connection that has not sent its first request stays PARKED (it
    /// does not go dormant) until this deadline.
    ///
    /// Default is 30 s (hyper's default when it has a timer): long enough
    /// for any real client, short enough that trickled heads cannot pile
    /// up. `None` disables it.
    pub fn header_read_timeout(&mut self, timeout: impl Into<Option<Duration>>) -> &mut Self {
        self.timeouts.header_read = timeout.into();
        self
    }

    /// How long a client may take to send a whole request, head and body,
    /// counted like [`header_read_timeout`](Self::header_read_timeout) (Go's
    /// `ReadTimeout`). It applies while the handler still reads the body; a
    /// handler that answers without reading the body stops it. On expiry
    /// the connection is closed and a handler still reading gets an error
    /// from the body.
    ///
    /// Default is `None`: uploads take as long as they take, as in Go.
    pub fn read_timeout(&mut self, timeout: impl Into<Option<Duration>>) -> &mut Self {
        self.timeouts.read = timeout.into();
        self
    }

    /// How long writing a response may take, from when the handler returns
    /// it until its last byte is flushed to the socket. On expiry the
    /// connection is closed: this is what frees a connection whose client
    /// stopped reading. Unlike Go's `WriteTimeout`, the time the handler
    /// takes to produce the response is not counted, so long polls need no
    /// special case; a streaming response body counts in full.
    ///
    /// Default is `None`, as in Go: responses may stream for as long as
    /// they like.
    pub fn write_timeout(&mut self, timeout: impl Into<Option<Duration>>) -> &mut Self {
        self.timeouts.write = timeout.into();
        self
    }

    /// The most connections the server holds at once: ACTIVE, PARKED and
    /// DORMANT ones all count, since each holds a file descriptor and
    /// kernel socket memory. At the limit the server stops accepting; new
    /// connections wait in the kernel's listen backlog until one closes.
    /// Upgraded connections stop counting when they are handed to the
    /// handler. HTTP/2 connections count once, whatever their streams.
    ///
    /// Default is `None`: no limit beyond the process's file descriptor
    /// limit (running out of descriptors pauses accepting; see
    /// [`Stats::accept_errors`]).
    pub fn max_connections(&mut self, max: impl Into<Option<usize>>) -> &mut Self {
        self.max_connections = max.into();
        self
    }

    /// Whether connections that open with the HTTP/2 preface (h2c, "prior
    /// knowledge") are served with HTTP/2. When off, hyper's HTTP/1 parser
    /// rejects the preface and the connection is closed without a response,
    /// as on a plain hyper HTTP/1 server.
    ///
    /// Default is `true`.
    pub fn http2(&mut self, enabled: bool) -> &mut Self {
        self.http2 = enabled;
        self
    }

    /// Whether HTTP/1 connections are kept alive between requests.
    ///
    /// Default is `true`.
    pub fn keep_alive(&mut self, enabled: bool) -> &mut Self {
        self.keep_alive = enabled;
        self
    }

    /// The largest request head (request line and headers) accepted, in
    /// bytes; a larger one is answered with `431 Request Header Fields Too
    /// Large` and the connection is closed. Must be at least 8192.
    ///
    /// Default is 417,792 (hyper's default).
    pub fn max_header_bytes(&mut self, max: usize) -> &mut Self {
        self.max_header_bytes = max;
        self
    }

    /// The most headers a request may have; more are answered with `431`.
    ///
    /// Default is 100 (hyper's default).
    pub fn max_headers(&mut self, max: usize) -> &mut Self {
        self.max_headers = max;
        self
    }

    /// Whether every request carries the client's address as a
    /// [`PeerAddr`](crate::PeerAddr) extension.
    ///
    /// Off by default, like axum's `ConnectInfo`, because it is not free:
    /// an extension is the only way an `http::Request` can carry the
    /// address, and the first extension of a request costs three
    /// allocations (`http`'s map, its table and the boxed value) and ~750
    /// instructions. On a hello-world server that is 1.5–3% of throughput
    /// (README, "Throughput"). Turn it on when handlers need the address.
    ///
    /// Default is `false`.
    pub fn peer_addr(&mut self, enabled: bool) -> &mut Self {
        self.peer_addr = enabled;
        self
    }

    /// Whether every request on a TLS connection carries what its handshake
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
    pub fn tls_info(&mut self, enabled: bool) -> &mut Self {
        self.tls_info = enabled;
        self
    }

    /// How long a client may take to complete a TLS handshake, counted from
    /// accept (TLS listeners only; see [`tls`](crate)). A connection still
    /// handshaking then is closed and counted in
    /// [`Stats::tls_handshake_timeouts`]. The `header_read_timeout` also
    /// counts from accept and bounds the handshake and the first request
    /// head together. `None` leaves only that one.
    ///
    /// Default is 10 s (as axum-server's).
    pub fn tls_handshake_timeout(&mut self, timeout: impl Into<Option<Duration>>) -> &mut Self {
        self.tls_handshake_timeout = timeout.into();
        self
    }

    /// How long a graceful shutdown waits for requests in flight before it
    /// closes their connections anyway. `None` waits as long as they take.
    ///
    /// Default is `None`, as Go's `Server.Shutdown` with a background
    /// context.
    pub fn shutdown_grace(&mut self, grace: impl Into<Option<Duration>>) -> &mut Self {
        self.shutdown_grace = grace.into();
        self
    }

    /// Checks the configuration and builds the server.
    pub fn build(&self) -> Result<Server, Error> {
        if self.max_header_bytes < 8192 {
            return Err(Error::config("max_header_bytes must be at least 8192"));
        }
        if self
            .timeouts
            .idle
            .is_some_and(|t| t > Duration::from_secs(24 * 24 * 3600))
        {
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
                self.tls_handshake_timeout,
                "tls_handshake_timeout must be longer than zero (None disables it)",
            ),
        ] {
            if timeout == Some(Duration::ZERO) {
                return Err(Error::config(message));
            }
        }
        if self.max_connections == Some(0) {
            return Err(Error::config("max_connections must be at least 1"));
        }
        if self.max_headers == 0 {
            return Err(Error::config("max_headers must be at least 1"));
        }
        let mut h1 = http1::Builder::new();
        // hyper does not read while a request is answered: `ConnIo` looks
        // for the client's close instead, without costing hyper a new read
        // buffer per request (see `io`).
        h1.half_close(true)
            .keep_alive(self.keep_alive)
            .max_buf_size(self.max_header_bytes);
        if self.max_headers != HYPER_MAX_HEADERS {
            // Only when needed: an explicit limit sends hyper down a slower
            // path that initialises a header array per request.
            h1.max_headers(self.max_headers);
        }
        let h2 = http2::Builder::new(TokioExecutor::new());
        let config = Config {
            park_after: self.park_after,
            dormant_after: self.dormant_after,
            timeouts: self.timeouts,
            max_connections: self.max_connections,
            http2: self.http2,
            peer_addr: self.peer_addr,
            #[cfg(feature = "tls-no-provider")]
            tls_info: self.tls_info,
            shutdown_grace: self.shutdown_grace,
            tls_handshake_timeout: self.tls_handshake_timeout,
        };
        Ok(Server {
            shared: Arc::new(Shared {
                config,
                http1: h1,
                http2: h2,
                pool: Pool::default(),
                stats: Counters::default(),
            }),
        })
    }
}

/// An HTTP/1.1 and HTTP/2 server whose idle connections hold no hyper state
/// and no buffers.
///
/// Cloning is cheap; clones share configuration and statistics.
///
/// ```no_run
/// use std::convert::Infallible;
/// use http::{Request, Response};
/// use http_body_util::Full;
/// use hyper::body::Bytes;
/// use hyper::service::service_fn;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// let server = dormant::Server::builder().build()?;
/// server
///     .serve(listener, service_fn(|_req: Request<dormant::Body>| async {
///         Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("Hello, World!"))))
///     }))
///     .with_graceful_shutdown(async { tokio::signal::ctrl_c().await.unwrap() })
///     .await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
}

impl Server {
    /// A builder with default settings.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A snapshot of this server's counters.
    pub fn stats(&self) -> Stats {
        self.shared.stats.snapshot(self.shared.pool.stats())
    }

    /// Serves connections accepted from `listener` with `service` until the
    /// returned future is dropped, or, with
    /// [`with_graceful_shutdown`](Serve::with_graceful_shutdown), until
    /// shutdown completes.
    ///
    /// `listener` is anything that implements [`Listener`]: tokio's
    /// `TcpListener` or `UnixListener`, or dormant's
    /// [`UnixListener`](crate::UnixListener). Every connection gets the
    /// whole idle ladder, whatever the transport.
    ///
    /// The service is shared by all connections (hyper services take
    /// `&self`). A tower service, such as an axum `Router`, is served
    /// through [`TowerToHyperService`](crate::TowerToHyperService).
    ///
    /// Errors of single connections are logged (with `tracing`) and never
    /// end the server; nor do accept errors, which back off instead of
    /// spinning. Needs a tokio runtime with I/O and time enabled.
    pub fn serve<L, S, B>(&self, listener: L, service: S) -> Serve<L, S>
    where
        L: Listener,
        S: Service<Request<Body>, Response = Response<B>> + Send + Sync + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: http_body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        Serve {
            server: self.clone(),
            listener,
            service,
        }
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.shared.config)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The future of [`Server::serve`]: runs until dropped.
#[must_use = "futures do nothing unless `.await`ed or polled"]
pub struct Serve<L, S> {
    server: Server,
    listener: L,
    service: S,
}

impl<L, S> Serve<L, S> {
    /// Shuts down gracefully once `signal` completes: stops accepting,
    /// closes idle (parked) connections at once, lets requests in flight
    /// finish (up to [`Builder::shutdown_grace`]) and then closes their
    /// connections. The future resolves when every connection is gone.
    pub fn with_graceful_shutdown<F>(self, signal: F) -> WithGracefulShutdown<L, S, F>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        WithGracefulShutdown {
            serve: self,
            signal,
        }
    }
}

impl<L: fmt::Debug, S> fmt::Debug for Serve<L, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve")
            .field("server", &self.server)
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

/// The future of [`Serve::with_graceful_shutdown`].
#[must_use = "futures do nothing unless `.await`ed or polled"]
pub struct WithGracefulShutdown<L, S, F> {
    serve: Serve<L, S>,
    signal: F,
}

impl<L: fmt::Debug, S, F> fmt::Debug for WithGracefulShutdown<L, S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithGracefulShutdown")
            .field("serve", &self.serve)
            .finish_non_exhaustive()
    }
}

/// The boxed future `Serve` and `WithGracefulShutdown` turn into.
pub type ServeFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

impl<L, S, B> IntoFuture for Serve<L, S>
where
    L: Listener,
    S: Service<Request<Body>, Response = Response<B>> + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Output = io::Result<()>;
    type IntoFuture = ServeFuture;

    fn into_future(self) -> ServeFuture {
        Box::pin(run(self, std::future::pending()))
    }
}

impl<L, S, B, F> IntoFuture for WithGracefulShutdown<L, S, F>
where
    L: Listener,
    S: Service<Request<Body>, Response = Response<B>> + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    F: Future<Output = ()> + Send + 'static,
{
    type Output = io::Result<()>;
    type IntoFuture = ServeFuture;

    fn into_future(self) -> ServeFuture {
        Box::pin(run(self.serve, self.signal))
    }
}

/// First pause after an accept error that is not about one connection
/// (EMFILE and the like); doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Errors that concern one connection only: accept the next one at once.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves until `signal`, then shuts down gracefully.
async fn run<L, S, B, F>(serve: Serve<L, S>, signal: F) -> io::Result<()>
where
    L: Listener,
    S: HttpService<B>,
    B: ResBody,
    F: Future<Output = ()> + Send + 'static,
{
    let Serve {
        server,
        listener,
        service,
    } = serve;
    let service = Arc::new(service);
    let state = start(&server.shared, &service)?;
    accept_until(listener, signal, &state, &service).await;
    drain(&state).await;
    Ok(())
}

/// Makes the state of a `serve` call and starts its parking lot, which
/// every connection is registered with: without it nothing is served.
fn start<T, S, B>(shared: &Arc<Shared>, service: &Arc<S>) -> io::Result<Arc<ServeState<T>>>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    let poll = mio::Poll::new()?;
    let registry = poll.registry().try_clone()?;
    let state = Arc::new_cyclic(|weak: &Weak<ServeState<T>>| {
        // The lot reports to the state it belongs to, weakly: the state
        // keeps the lot.
        let owner = LotOwner {
            state: weak.clone(),
            service: service.clone(),
            one_worker: tokio::runtime::Handle::current().metrics().num_workers() == 1,
            body: PhantomData,
        };
        let lot = StreamLot::new(Box::new(owner), shared.config.lot_slack(), registry);
        ServeState {
            shared: shared.clone(),
            signal: Signal::default(),
            upgrade_lot: upgrade::Lot::new(lot.clone()),
            lot,
            held: Held::new(shared.config.max_connections),
        }
    });
    tokio::spawn(drive_lot(state.clone(), poll));
    Ok(state)
}

/// Accepts and serves connections until `signal` completes.
async fn accept_until<L, S, B, F>(
    mut listener: L,
    signal: F,
    state: &Arc<ServeState<Served<L>>>,
    service: &Arc<S>,
) where
    L: Listener,
    S: HttpService<B>,
    B: ResBody,
    F: Future<Output = ()> + Send + 'static,
{
    listener.set_http2(state.shared.config.http2);
    let mut signal = std::pin::pin!(signal);
    let mut backoff = MIN_BACKOFF;
    loop {
        // The permit comes before accept: over the limit, connections wait
        // in the listen backlog.
        let accepted = tokio::select! {
            biased;
            () = &mut signal => return,
            accepted = async {
                state.held.below_max().await;
                listener.accept().await
            } => accepted,
        };
        let error = match accepted {
            Ok((stream, peer)) => {
                backoff = MIN_BACKOFF;
                state.shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
                let stream = match stream.serve_in(&state.lot) {
                    Ok(stream) => stream,
                    Err(error) => {
                        // Out of memory, or of epoll watches: the socket
                        // is closed.
                        error!(%error, "registering an accepted connection failed");
                        continue;
                    }
                };
                let open = Open::accepted(state);
                tokio::spawn(conn::serve(
                    stream,
                    Some(peer),
                    service.clone(),
                    open,
                    Origin::Accepted,
                ));
                continue;
            }
            Err(error) => error,
        };
        if is_connection_error(&error) {
            trace!(%error, "accept: connection failed before it was accepted");
            continue;
        }
        // Out of file descriptors (EMFILE, ENFILE), buffers and the like:
        // the listener stays readable, so retrying at once would spin.
        state
            .shared
            .stats
            .accept_errors
            .fetch_add(1, Ordering::Relaxed);
        error!(%error, retry_in = ?backoff, "accept failed");
        tokio::select! {
            biased;
            () = &mut signal => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    // The listener drops here: no connection waits in its backlog for a
    // server that stopped accepting.
}

/// Graceful shutdown: closes idle connections, lets requests in flight
/// finish (within the grace period), and waits for every connection to
/// be gone.
async fn drain<T: Seam>(state: &ServeState<T>) {
    debug!("graceful shutdown: draining connections");
    state.signal.raise(Level::Draining);
    state.lot.close_all();
    match state.shared.config.shutdown_grace {
        Some(grace) => {
            if tokio::time::timeout(grace, state.held.all_released())
                .await
                .is_err()
            {
                debug!("graceful shutdown: grace period over, closing connections");
                state.signal.raise(Level::Forced);
                state.held.all_released().await;
            }
        }
        None => state.held.all_released().await,
    }
}

/// Serves a connection the parking lot handed back with bytes waiting (or
/// the peer's close). It still counts as held.
///
/// With `in_place`, the connection is first polled right here, in the
/// lot's task, which the readiness that woke it has just woken: what
/// hyper-util's connection task does in its own. Most wakes end in that
/// poll (the request answered, the connection parked again), with no task
/// spawned; one that does not (a service that waits, a response larger than
/// the socket's buffer) goes on in a task of its own, whose first poll
/// registers its wakers again. The owner asks for `in_place` for every
/// connection on a runtime with one worker, where a spawned task would run
/// on this thread right after the lot's anyway; with more, only for the
/// last of a batch of events, which tokio would run next on this worker
/// too (the task spawned last takes the worker's LIFO slot, out of other
/// workers' reach), while the others are spawned first for idle workers to
/// take.
fn serve_woken<T, S, B>(
    state: &Arc<ServeState<T>>,
    stream: T,
    service: &Arc<S>,
    slept_long: bool,
    in_place: bool,
) where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    let open = Open::woken(state);
    // `getpeername` is a system call on every wake: made only for the
    // `PeerAddr` extension or a connection span that will show it.
    let wanted = state.shared.config.peer_addr
        || tracing::enabled!(target: "dormant::conn", tracing::Level::DEBUG);
    let peer = match wanted.then(|| stream.peer_addr()).transpose() {
        Ok(peer) => peer,
        Err(error) => {
            // The peer reset the connection while it waited.
            conn::closed_while_idle("woken", Some(&error));
            return;
        }
    };
    let origin = Origin::Woken { slept_long };
    let serve = conn::serve(stream, peer, service.clone(), open, origin);
    if !in_place {
        tokio::spawn(serve);
        return;
    }
    let mut serve = Box::pin(serve);
    // Wakers registered in this poll go nowhere: the task spawned if it is
    // pending polls it again at once, registering its own.
    let mut cx = Context::from_waker(Waker::noop());
    match panic::catch_unwind(AssertUnwindSafe(|| serve.as_mut().poll(&mut cx))) {
        Ok(Poll::Ready(())) => {}
        Ok(Poll::Pending) => {
            tokio::spawn(serve);
        }
        Err(_) => {
            // As tokio does with a task that panics: the connection is
            // dropped (closed, released), the lot's task goes on.
            error!("a woken connection's service panicked; connection closed");
        }
    }
}

/// What the parking lot of a `serve` call reports to: connections it hands
/// back are served again (see `serve_woken`), and what it closes is
/// counted. Holds the state weakly: the state keeps the lot, which keeps
/// this.
struct LotOwner<T: Seam, S, B> {
    state: Weak<ServeState<T>>,
    service: Arc<S>,
    /// The runtime has one worker: every woken connection is first polled
    /// in the lot's task, not only the last of a batch (see `serve_woken`).
    one_worker: bool,
    body: PhantomData<fn() -> B>,
}

impl<T, S, B> lot::Owner<T> for LotOwner<T, S, B>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    fn woken(&self, conn: T, slept: Slept, last: bool) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let stats = &state.shared.stats;
        let slept_long = match slept {
            Slept::Parked(slept) => {
                stats.parked.fetch_sub(1, Ordering::Relaxed);
                state.shared.config.park_after.is_some_and(|p| slept >= p)
            }
            Slept::Dormant => {
                stats.lot_wakes.fetch_add(1, Ordering::Relaxed);
                stats.dormant.fetch_sub(1, Ordering::Relaxed);
                // It slept at least `dormant_after`.
                let config = &state.shared.config;
                matches!((config.park_after, config.dormant_after), (Some(p), Some(d)) if p <= d)
            }
        };
        let in_place = self.one_worker || last;
        serve_woken(&state, conn, &self.service, slept_long, in_place);
    }

    fn closed(&self, from: Rung, why: Closed, n: usize) {
        let Some(state) = self.state.upgrade().filter(|_| n > 0) else {
            return;
        };
        let stats = &state.shared.stats;
        match from {
            Rung::Parked => stats.parked.fetch_sub(n, Ordering::Relaxed),
            Rung::Dormant => stats.dormant.fetch_sub(n, Ordering::Relaxed),
        };
        match why {
            Closed::ByPeer if from == Rung::Dormant => {
                stats.lot_closes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Closed::Idle => {
                stats.idle_timeouts.fetch_add(n as u64, Ordering::Relaxed);
            }
            Closed::ByPeer | Closed::Failed | Closed::Shutdown => {}
        }
        state.held.release(n);
    }

    fn went_dormant(&self, n: usize) {
        let Some(state) = self.state.upgrade().filter(|_| n > 0) else {
            return;
        };
        let stats = &state.shared.stats;
        stats.parked.fetch_sub(n, Ordering::Relaxed);
        stats.dormant.fetch_add(n, Ordering::Relaxed);
        stats.dormancies.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Drives the parking lot of one `serve` call until shutdown.
async fn drive_lot<T: Seam>(state: Arc<ServeState<T>>, poll: mio::Poll) {
    let lot = &state.lot;
    // Every connection reads and writes through the lot: it runs until the
    // last one is gone after shutdown began.
    let done = async {
        // Polled on every wake of the lot's task: a `Watch` is one atomic
        // load per poll, where `reached` takes the signal's lock.
        let mut watch = std::pin::pin!(state.signal.watch());
        std::future::poll_fn(|cx| match watch.as_mut().poll_level(cx) {
            Level::Running => std::task::Poll::Pending,
            Level::Draining | Level::Forced => std::task::Poll::Ready(()),
        })
        .await;
        state.held.all_released().await;
    };
    tokio::select! {
        biased;
        () = done => {}
        res = lot.drive(poll) => {
            if let Err(error) = res {
                error!(%error, "parking lot failed; closing every connection");
            }
            // No connection can make progress without it.
            lot.close_all();
            state.signal.raise(Level::Forced);
        }
    }
}
