//! The server: builder, accept loop, graceful shutdown.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response};
use hyper::server::conn::{http1, http2};
use hyper::service::Service;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tracing::{debug, error, trace};

use crate::body::Body;
use crate::conn;
use crate::error::Error;
use crate::lot::{self, Lot};
use crate::pool::Pool;
use crate::service::{BoxError, HttpService, ResBody};
use crate::shutdown::{Level, Signal};
use crate::stats::{Counters, Stats};
use crate::timeout::Timeouts;

/// hyper's own default for its read buffer limit, which bounds a request
/// head.
const DEFAULT_MAX_HEADER_BYTES: usize = 8192 + 4096 * 100;

/// hyper's own default header count limit.
const HYPER_MAX_HEADERS: usize = 100;

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
    pub(crate) park_after: Option<Duration>,
    pub(crate) dormant_after: Option<Duration>,
    pub(crate) timeouts: Timeouts,
    max_connections: Option<usize>,
    pub(crate) http2: bool,
    keep_alive: bool,
    max_header_bytes: usize,
    max_headers: usize,
    shutdown_grace: Option<Duration>,
    pub(crate) peer_addr: bool,
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
    /// Default is 10 ms.
    pub fn park_after(&mut self, after: impl Into<Option<Duration>>) -> &mut Self {
        self.park_after = after.into();
        self
    }

    /// How long a connection must stay PARKED before it leaves tokio for the
    /// parking lot (DORMANT): no task, no tokio registration, 8 bytes of
    /// slab plus the kernel's socket. Waking a dormant connection costs a
    /// new task and a few syscalls more than waking a parked one (see
    /// README, "Latency"). `None` keeps parked connections in tokio.
    ///
    /// A connection whose client pipelined part of a request stays PARKED
    /// (it holds those bytes), as do HTTP/2 connections (they never park).
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
        Ok(Server {
            shared: Arc::new(Shared {
                config: self.clone(),
                http1: h1,
                http2: h2,
                pool: Pool::default(),
                stats: Counters::default(),
            }),
        })
    }
}

/// What every connection of a server shares.
pub(crate) struct Shared {
    pub(crate) config: Builder,
    pub(crate) http1: http1::Builder,
    pub(crate) http2: http2::Builder<TokioExecutor>,
    pub(crate) pool: Pool,
    pub(crate) stats: Counters,
}

/// What the connections of one `serve` call share.
pub(crate) struct ServeState {
    pub(crate) shared: Arc<Shared>,
    pub(crate) signal: Signal,
    /// `None` only if the lot could not be made.
    pub(crate) lot: Option<Lot>,
    pub(crate) held: Held,
}

/// The connections a `serve` call holds, in a task or in the parking lot.
/// Shutdown waits for none to be left; the accept loop waits for fewer than
/// the maximum.
pub(crate) struct Held {
    count: AtomicUsize,
    max: usize,
    /// Notified when the count reaches zero, or drops below the maximum.
    released: Notify,
}

impl Held {
    fn new(max: Option<usize>) -> Self {
        Held {
            count: AtomicUsize::new(0),
            max: max.unwrap_or(usize::MAX),
            released: Notify::new(),
        }
    }

    /// `n` connections are closed.
    pub(crate) fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.count.fetch_sub(n, Ordering::AcqRel);
        // Only the release that crosses a threshold someone may wait on
        // takes the notifier's lock.
        if before == n || (before >= self.max && before - n < self.max) {
            self.released.notify_waiters();
        }
    }

    /// Waits until `ready(count)` holds.
    async fn wait(&self, ready: impl Fn(usize) -> bool) {
        loop {
            let mut notified = std::pin::pin!(self.released.notified());
            notified.as_mut().enable();
            if ready(self.count.load(Ordering::Acquire)) {
                return;
            }
            notified.await;
        }
    }

    async fn all_released(&self) {
        self.wait(|n| n == 0).await;
    }

    async fn below_max(&self) {
        self.wait(|n| n < self.max).await;
    }
}

/// A connection task's handle on its `serve` call. The connection counts as
/// held from accept until it is closed: when this handle drops, unless it
/// went into the parking lot, which then holds it.
pub(crate) struct Open {
    state: Arc<ServeState>,
    held: bool,
}

impl Open {
    /// A newly accepted connection.
    fn new(state: &Arc<ServeState>) -> Self {
        state.held.count.fetch_add(1, Ordering::AcqRel);
        Open {
            state: state.clone(),
            held: true,
        }
    }

    /// A connection the parking lot hands back; it is already counted.
    fn woken(state: &Arc<ServeState>) -> Self {
        Open {
            state: state.clone(),
            held: true,
        }
    }

    /// The connection moves into the parking lot, which holds it from now
    /// on: it stays counted until the lot closes it or hands it back.
    pub(crate) fn into_lot(mut self) {
        self.held = false;
    }
}

impl std::ops::Deref for Open {
    type Target = ServeState;
    fn deref(&self) -> &ServeState {
        &self.state
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if self.held {
            self.state.held.release(1);
        }
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
    /// The service is shared by all connections (hyper services take
    /// `&self`). A tower service, such as an axum `Router`, is served
    /// through [`TowerToHyperService`](crate::TowerToHyperService).
    ///
    /// Errors of single connections are logged (with `tracing`) and never
    /// end the server; nor do accept errors, which back off instead of
    /// spinning. Needs a tokio runtime with I/O and time enabled.
    pub fn serve<S, B>(&self, listener: TcpListener, service: S) -> Serve<S>
    where
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
pub struct Serve<S> {
    server: Server,
    listener: TcpListener,
    service: S,
}

impl<S> Serve<S> {
    /// Shuts down gracefully once `signal` completes: stops accepting,
    /// closes idle (parked) connections at once, lets requests in flight
    /// finish (up to [`Builder::shutdown_grace`]) and then closes their
    /// connections. The future resolves when every connection is gone.
    pub fn with_graceful_shutdown<F>(self, signal: F) -> WithGracefulShutdown<S, F>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        WithGracefulShutdown {
            serve: self,
            signal,
        }
    }
}

impl<S> fmt::Debug for Serve<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve")
            .field("server", &self.server)
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

/// The future of [`Serve::with_graceful_shutdown`].
#[must_use = "futures do nothing unless `.await`ed or polled"]
pub struct WithGracefulShutdown<S, F> {
    serve: Serve<S>,
    signal: F,
}

impl<S, F> fmt::Debug for WithGracefulShutdown<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithGracefulShutdown")
            .field("serve", &self.serve)
            .finish_non_exhaustive()
    }
}

/// The boxed future `Serve` and `WithGracefulShutdown` turn into.
pub type ServeFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

impl<S, B> IntoFuture for Serve<S>
where
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

impl<S, B, F> IntoFuture for WithGracefulShutdown<S, F>
where
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

async fn run<S, B, F>(serve: Serve<S>, signal: F) -> io::Result<()>
where
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
    // Also without `dormant_after`: upgraded streams may sleep there.
    let (lot, poll) = match Lot::new() {
        Ok((lot, poll)) => (Some(lot), Some(poll)),
        Err(error) => {
            error!(%error, "no parking lot: connections stay parked in tokio");
            (None, None)
        }
    };
    let state = Arc::new(ServeState {
        shared: server.shared.clone(),
        signal: Signal::default(),
        lot,
        held: Held::new(server.shared.config.max_connections),
    });
    if let Some(lot) = &state.lot {
        // Before the first connection may park.
        lot.set_on_wake(on_wake(&state, service.clone()));
    }
    if let Some(poll) = poll {
        tokio::spawn(drive_lot(state.clone(), poll, service.clone()));
    }
    let mut signal = std::pin::pin!(signal);
    let mut backoff = MIN_BACKOFF;
    loop {
        // The permit comes before accept: over the limit, connections wait
        // in the listen backlog.
        let accepted = tokio::select! {
            biased;
            () = &mut signal => break,
            accepted = async {
                state.held.below_max().await;
                listener.accept().await
            } => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = MIN_BACKOFF;
                if let Err(error) = stream.set_nodelay(true) {
                    debug!(%error, "setting TCP_NODELAY failed");
                }
                state.shared.stats.accepted.fetch_add(1, Ordering::Relaxed);
                let conn =
                    conn::serve(stream, Some(peer), service.clone(), Open::new(&state), true);
                tokio::spawn(conn);
            }
            Err(error) if is_connection_error(&error) => {
                trace!(%error, "accept: connection failed before it was accepted");
            }
            Err(error) => {
                // Out of file descriptors (EMFILE, ENFILE), buffers and the
                // like: the listener stays readable, so retrying at once
                // would spin.
                state
                    .shared
                    .stats
                    .accept_errors
                    .fetch_add(1, Ordering::Relaxed);
                error!(%error, retry_in = ?backoff, "accept failed");
                tokio::select! {
                    biased;
                    () = &mut signal => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }

    debug!("graceful shutdown: draining connections");
    drop(listener);
    state.signal.raise(Level::Draining);
    if let Some(lot) = &state.lot {
        lot.close_all(&state.shared.stats, &state.held);
    }
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
    Ok(())
}

/// Serves a connection the parking lot handed back with bytes waiting, in
/// a new task. It still counts as held.
fn spawn_woken<S, B>(state: &Arc<ServeState>, stream: tokio::net::TcpStream, service: &Arc<S>)
where
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
            debug!(%error, "woken connection is gone");
            return;
        }
    };
    tokio::spawn(conn::serve(stream, peer, service.clone(), open, false));
}

/// What the lot does with a task-less PARKED connection it woke. Holds the
/// state weakly: the lot keeps this, and the state keeps the lot.
fn on_wake<S, B>(state: &Arc<ServeState>, service: Arc<S>) -> lot::OnWake
where
    S: HttpService<B>,
    B: ResBody,
{
    let weak = Arc::downgrade(state);
    Box::new(move |stream, readable| {
        let Some(state) = weak.upgrade() else { return };
        state.shared.stats.parked.fetch_sub(1, Ordering::Relaxed);
        if readable {
            spawn_woken(&state, stream, &service);
        } else {
            // Closed before the count drops.
            drop(stream);
            state.held.release(1);
        }
    })
}

/// Drives the parking lot of one `serve` call until shutdown; DORMANT
/// connections that wake there get a new task.
async fn drive_lot<S, B>(state: Arc<ServeState>, poll: mio::Poll, service: Arc<S>)
where
    S: HttpService<B>,
    B: ResBody,
{
    let Some(lot) = &state.lot else { return };
    let stats = &state.shared.stats;
    let respawn = |stream| spawn_woken(&state, stream, &service);
    tokio::select! {
        biased;
        () = state.signal.reached(Level::Draining) => {}
        res = lot::drive(lot, poll, stats, &state.held, respawn) => {
            if let Err(error) = res {
                error!(%error, "parking lot failed; closing its connections");
            }
            lot.close_all(stats, &state.held);
        }
    }
}
