//! The server: [`Server`] and the wiring of one `serve` call, the state
//! its connections share and the parking lot they are registered with.
//!
//! - `builder`: [`Builder`], the settings and their checks
//!   ([`Server::builder`]);
//! - `serve`: the public futures of a `serve` call ([`Server::serve`]);
//! - `handle`: [`Handle`], a `serve` call steered from outside its future
//!   (where it listens, its shutdown, its connection count);
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

pub use builder::Builder;
pub use handle::Handle;
pub use serve::{Serve, ServeFuture, WithGracefulShutdown};

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
    /// Returns a snapshot of this server's counters.
    pub fn stats(&self) -> Stats {
        self.shared.stats.snapshot(self.shared.pool.stats())
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
