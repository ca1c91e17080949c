//! The public futures of a `serve` call: [`Serve`], and
//! [`WithGracefulShutdown`] once it has a shutdown signal. Both turn into
//! one boxed [`ServeFuture`], which starts the call's parking lot, runs the
//! accept loop and drains the connections.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use http::{Request, Response};
use hyper::service::Service;

use super::Server;
use super::accept::{accept_until, drain};
use super::start;
use crate::body::Body;
use crate::listener::Listener;
use crate::service::{BoxError, HttpService, ResBody};

/// The future of [`Server::serve`]: runs until dropped.
#[must_use = "futures do nothing unless `.await`ed or polled"]
pub struct Serve<L, S> {
    server: Server,
    listener: L,
    service: S,
}

impl<L, S> Serve<L, S> {
    pub(super) fn new(server: Server, listener: L, service: S) -> Self {
        Serve {
            server,
            listener,
            service,
        }
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
