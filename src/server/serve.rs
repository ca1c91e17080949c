//! The public futures of a `serve` call: [`Serve`], and
//! [`WithGracefulShutdown`] once it has a shutdown signal. Both turn into
//! one boxed [`ServeFuture`], which starts the call's parking lot, runs the
//! accept loop and drains the connections.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use http::Response;

use tracing::debug;

use super::Server;
use super::accept::{accept_until, drain};
use super::handle::{Announcer, Command, Count, Handle};
use super::owner::start;
use crate::hooks::{Admit, ConnState, Hooks};
use crate::listener::{Addr, Listener};
use crate::service::{HttpService, ResBody, SharedService};
use crate::state::ServeState;
use crate::transport::Seam;

impl Server {
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
    /// The service need only be `Clone + Send`, as hyper-util's and
    /// axum's servers take it: a connection serves a clone of it while
    /// ACTIVE, taken again each time it wakes (cheap for an axum `Router`
    /// or a `service_fn`, which clone a reference count; a
    /// `tower::util::BoxCloneService` allocates). A service that is `Sync`
    /// but not `Clone` is served as `Arc::new(service)`. An axum `Router`
    /// is served by [`dormant::axum`](crate#serving) (feature `axum`),
    /// other tower services through
    /// [`TowerToHyperService`](crate::TowerToHyperService).
    ///
    /// Errors of single connections are logged (with `tracing`) and never
    /// end the server; nor do accept errors, which back off instead of
    /// spinning.
    ///
    /// # Errors
    ///
    /// The future fails only at its start, if the parking lot's poll cannot
    /// be created (the process is out of file descriptors).
    ///
    /// # Panics
    ///
    /// The future panics if it is polled outside a tokio runtime with I/O
    /// and time enabled.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting and drops the listener; it does
    /// not close the connections already accepted. To end them too, serve
    /// [`with_graceful_shutdown`](Serve::with_graceful_shutdown).
    pub fn serve<L, S, B>(&self, listener: L, service: S) -> Serve<L, S>
    where
        L: Listener,
        S: HttpService<B>,
        B: ResBody,
    {
        Serve::new(self.clone(), listener, service)
    }
}

/// What [`Server::serve`] returns: the `serve` call, configured with its
/// `with_*` methods, then awaited. It is [`IntoFuture`], as `axum::serve`'s
/// is: `.await` it, or spawn its future:
///
/// ```no_run
/// # use std::convert::Infallible;
/// # use std::future::IntoFuture;
/// # use http::{Request, Response};
/// # use http_body_util::Full;
/// # use hyper::body::Bytes;
/// # async fn run(server: dormant::Server, listener: tokio::net::TcpListener) {
/// let service = hyper::service::service_fn(|_req: Request<dormant::Body>| async {
///     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
/// });
/// let serving = tokio::spawn(server.serve(listener, service).into_future());
/// # }
/// ```
///
/// The future runs until dropped, or until its [`Handle`] or shutdown
/// signal ends it. Its error is an `io::Error`, as `axum::serve`'s: the
/// only one it can have is the operating system's, when the call's parking
/// lot cannot be created; settings are checked before, by
/// [`Builder::build`](crate::Builder::build), whose error is
/// [`Error`](crate::Error).
#[must_use = "futures do nothing unless `.await`ed or polled"]
pub struct Serve<L: Listener, S> {
    server: Server,
    listener: L,
    service: S,
    handle: Option<Handle<Addr<L>>>,
    hooks: Hooks<Addr<L>>,
}

impl<L: Listener, S> Serve<L, S> {
    pub(super) fn new(server: Server, listener: L, service: S) -> Self {
        Serve {
            server,
            listener,
            service,
            handle: None,
            hooks: Hooks::default(),
        }
    }

    /// Decides, for each accepted connection, whether to serve it, by its
    /// peer's address, before a byte is read: a rejected connection is
    /// closed at once and counted in [`Stats::rejected`](crate::Stats::rejected)
    /// (Go's listeners wrapped for admission, actix-web's `on_connect`).
    /// For example, a limit of connections per client address, with
    /// [`on_conn_state`](Serve::on_conn_state) counting closes; see
    /// `examples/admission.rs`.
    ///
    /// It runs in the accept loop, so it must be quick; one that panics
    /// rejects that connection. Without it, accepting costs nothing more.
    ///
    /// Behind a `ProxyProtocol` listener (feature `proxy-protocol`), the peer is the client its PROXY header names:
    /// the hook then runs in the connection's task once the header is read
    /// (and, under TLS, the handshake done), before its first request is
    /// served; [`ConnState::New`] is reported then too.
    pub fn on_accept<F>(mut self, admit: F) -> Self
    where
        F: Fn(&Addr<L>) -> Admit + Send + Sync + 'static,
    {
        self.hooks.accept = Some(Box::new(admit));
        self
    }

    /// Calls `hook` with a connection's peer address each time the
    /// connection changes [`ConnState`], on every transport and rung: `New`
    /// at accept, `On(Rung::Active)` when a request's bytes arrive,
    /// `On(Rung::Parked)` when it waits between requests without hyper's
    /// state, `On(Rung::Dormant)`, and last `Closed` (or `Upgraded`). Go's
    /// `Server.ConnState`, for metrics.
    ///
    /// A busy connection reports ACTIVE once, and PARKED only when it
    /// pauses for `park_after`: a hook costs an indirect call per state
    /// change, not per request. It runs on the connection's task, or on the
    /// parking lot's (for DORMANT, and `Closed` where the lot closes a
    /// connection), so it must be quick. One that panics closes that
    /// connection only. Each connection then carries the hook and its peer
    /// address (one allocation per connection), also while it sleeps in
    /// the parking lot (BENCHMARKS.md has what it costs). Without a hook,
    /// connections carry nothing more.
    pub fn on_conn_state<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Addr<L>, ConnState) + Send + Sync + 'static,
    {
        self.hooks.state = Some(Arc::new(Box::new(hook)));
        self
    }

    /// Steers this call with `handle`, from outside its future: the
    /// address it listens on, its connection count, graceful or immediate
    /// shutdown (see [`Handle`]). Works with or without
    /// [`with_graceful_shutdown`](Serve::with_graceful_shutdown): the
    /// first shutdown asked for starts it.
    pub fn with_handle(mut self, handle: Handle<Addr<L>>) -> Self {
        self.handle = Some(handle);
        self
    }

    /// Shuts down gracefully once `signal` completes: stops accepting,
    /// closes idle (parked) connections at once, lets requests in flight
    /// finish (up to [`Builder::shutdown_grace`](crate::Builder::shutdown_grace)) and then closes their
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

impl<L: Listener + fmt::Debug, S> fmt::Debug for Serve<L, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serve")
            .field("server", &self.server)
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

/// The future of [`Serve::with_graceful_shutdown`].
#[must_use = "futures do nothing unless `.await`ed or polled"]
pub struct WithGracefulShutdown<L: Listener, S, F> {
    serve: Serve<L, S>,
    signal: F,
}

impl<L: Listener, S, F> WithGracefulShutdown<L, S, F> {
    /// [`Serve::with_handle`], after the signal was given.
    pub fn with_handle(mut self, handle: Handle<Addr<L>>) -> Self {
        self.serve.handle = Some(handle);
        self
    }

    /// [`Serve::on_accept`], after the signal was given.
    pub fn on_accept<A>(mut self, admit: A) -> Self
    where
        A: Fn(&Addr<L>) -> Admit + Send + Sync + 'static,
    {
        self.serve = self.serve.on_accept(admit);
        self
    }

    /// [`Serve::on_conn_state`], after the signal was given.
    pub fn on_conn_state<H>(mut self, hook: H) -> Self
    where
        H: Fn(&Addr<L>, ConnState) + Send + Sync + 'static,
    {
        self.serve = self.serve.on_conn_state(hook);
        self
    }
}

impl<L: Listener + fmt::Debug, S, F> fmt::Debug for WithGracefulShutdown<L, S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithGracefulShutdown")
            .field("serve", &self.serve)
            .finish_non_exhaustive()
    }
}

/// The boxed future `Serve` and `WithGracefulShutdown` turn into.
pub type ServeFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

// `Response = Response<B>` ties `B` to the service, as an impl's
// parameters must be tied (`HttpService`'s parameter alone does not).
impl<L, S, B> IntoFuture for Serve<L, S>
where
    L: Listener,
    S: HttpService<B, Response = Response<B>>,
    B: ResBody,
{
    type Output = io::Result<()>;
    type IntoFuture = ServeFuture;

    fn into_future(self) -> ServeFuture {
        run(self, std::future::pending())
    }
}

impl<L, S, B, F> IntoFuture for WithGracefulShutdown<L, S, F>
where
    L: Listener,
    S: HttpService<B, Response = Response<B>>,
    B: ResBody,
    F: Future<Output = ()> + Send + 'static,
{
    type Output = io::Result<()>;
    type IntoFuture = ServeFuture;

    fn into_future(self) -> ServeFuture {
        run(self.serve, self.signal)
    }
}

/// Serves until `signal` (or the handle asks), then shuts down gracefully.
fn run<L, S, B, F>(serve: Serve<L, S>, signal: F) -> ServeFuture
where
    L: Listener,
    S: HttpService<B>,
    B: ResBody,
    F: Future<Output = ()> + Send + 'static,
{
    // Dropped before the call listens (it failed to start, or its future
    // was dropped, polled or not), it tells the handle.
    let announcer = serve.handle.as_ref().map(Handle::announcer);
    Box::pin(serve_until(serve, signal, announcer))
}

async fn serve_until<L, S, B, F>(
    serve: Serve<L, S>,
    signal: F,
    announcer: Option<Announcer<Addr<L>>>,
) -> io::Result<()>
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
        handle,
        hooks,
    } = serve;
    let service = Arc::new(SharedService::new(service));
    let state = start(&server.shared, &service, hooks)?;
    if let Some(announcer) = &announcer {
        let addr = listener.local_addr();
        if let Err(error) = &addr {
            debug!(%error, "the listener's address is unknown");
        }
        announcer.listening(addr.ok(), Arc::downgrade(&state) as _);
    }
    let asked = handle.as_ref().map(Handle::shutdown_asked);
    let stop = async move {
        match asked {
            Some(asked) => tokio::select! {
                () = signal => {}
                () = asked => {}
            },
            None => signal.await,
        }
    };
    accept_until(listener, stop, &state, &service).await;
    let grace = match handle.as_ref().map(Handle::command) {
        Some(Command::Graceful(Some(grace))) => Some(grace),
        _ => state.shared.config.shutdown_grace,
    };
    let now = handle.as_ref().map(Handle::shutdown_now);
    drain(&state, grace, async move {
        match now {
            Some(now) => now.await,
            None => std::future::pending().await,
        }
    })
    .await;
    Ok(())
}

impl<T: Seam> Count for ServeState<T> {
    fn count(&self) -> usize {
        self.held.count()
    }
}
