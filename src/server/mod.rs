//! The server: [`Server`] and the wiring of one `serve` call, the state
//! its connections share and the parking lot they are registered with.
//!
//! - `builder`: [`Builder`], the settings and their checks;
//! - `serve`: the public futures of a `serve` call;
//! - `accept`: the accept loop (permit, backoff) and the drain at shutdown;
//! - `owner`: what the parking lot reports to: stats, and the connections
//!   it hands back.

mod accept;
mod builder;
mod handle;
mod owner;
mod serve;

use std::fmt;
use std::sync::Arc;

use http::{Request, Response};
use hyper::service::Service;

pub use builder::Builder;
pub use handle::Handle;
pub use serve::{Serve, ServeFuture, WithGracefulShutdown};

use crate::body::Body;
use crate::listener::Listener;
use crate::service::BoxError;
use crate::state::Shared;
use crate::stats::Stats;

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
    /// Returns a builder with default settings.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Returns a snapshot of this server's counters.
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
        S: Service<Request<Body>, Response = Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: http_body::Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        Serve::new(self.clone(), listener, service)
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
