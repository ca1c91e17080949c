//! Serving an axum [`Router`] (feature `axum`): [`serve`] is
//! `axum::serve` with dormant's idle ladder, and [`App`] is the router as a
//! service of dormant's, for a server built with [`Builder`](crate::Builder).
//!
//! ```no_run
//! use axum::{Router, routing::get};
//!
//! #[tokio::main]
//! async fn main() -> std::io::Result<()> {
//!     let app = Router::new().route("/", get(|| async { "hello" }));
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     dormant::axum::serve(listener, app).await
//! }
//! ```
//!
//! What an axum application expects of the server it runs on, it finds:
//!
//! - **[`ConnectInfo`]** of the listener's address type: `SocketAddr` for
//!   TCP (and TLS or PROXY protocol over it: the client's address), and
//!   `tokio::net::unix::SocketAddr` for a Unix socket, as `axum::serve`
//!   gives with `into_make_service_with_connect_info`. It comes from the
//!   [`PeerAddr`] extension, so a server built with a
//!   [`Builder`](crate::Builder) needs
//!   [`peer_addr(true)`](crate::Builder::peer_addr) for it; [`serve`]
//!   turns it on.
//! - **Upgrades**: axum's `WebSocketUpgrade` (and `hyper::upgrade::on`)
//!   work as on `axum::serve`, on every transport (see
//!   [`upgrade`](crate::upgrade) for streams that sleep instead); [`serve`]
//!   turns on HTTP/2's extended CONNECT, as `axum::serve` does, so that
//!   WebSockets work over HTTP/2 too (RFC 8441).
//! - **[`Deadlines`]**: [`Deadlines::of`] finds the request's handle in a
//!   handler, though axum replaced dormant's [`Body`] with its own.
//! - Graceful shutdown and [`Handle`](crate::Handle) as for any service:
//!   [`serve`] returns the same [`Serve`].
//!
//! A tower service other than a `Router` goes through
//! [`TowerToHyperService`] as before.

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;

use ::axum::Router;
use ::axum::extract::ConnectInfo;
use http::Request;
use hyper::service::Service;
use hyper_util::service::{TowerToHyperService, TowerToHyperServiceFuture};
use tokio::net::unix::SocketAddr as UnixAddr;

use crate::body::Body;
use crate::deadlines::Deadlines;
use crate::listener::Listener;
use crate::server::{Serve, Server};
use crate::service::PeerAddr;

/// Serves `router` on `listener` with dormant's defaults and the peer's
/// address on (axum's [`ConnectInfo`]): `axum::serve(listener, router)`,
/// with idle connections that cost almost nothing.
///
/// The returned [`Serve`] runs until dropped;
/// [`with_graceful_shutdown`](Serve::with_graceful_shutdown) and
/// [`with_handle`](Serve::with_handle) work as for any service. For other
/// settings, build the server and serve [`App::new(router)`](App::new).
pub fn serve<L: Listener>(listener: L, router: Router) -> Serve<L, App> {
    let server = Server::builder()
        .peer_addr(true)
        // WebSockets over HTTP/2 (RFC 8441), as `axum::serve` has them.
        .http2_enable_connect_protocol(true)
        .build()
        .expect("dormant's default settings are valid");
    server.serve(listener, App::new(router))
}

/// An axum [`Router`] as a service of dormant's: give it to
/// [`Server::serve`].
///
/// Before the router sees a request, it gets the [`ConnectInfo`] axum's
/// extractor reads (with [`peer_addr`](crate::Builder::peer_addr) on) and
/// its [`Deadlines`].
#[derive(Clone)]
pub struct App {
    router: TowerToHyperService<Router>,
}

impl App {
    /// Wraps `router`.
    pub fn new(router: Router) -> Self {
        App {
            router: TowerToHyperService::new(router),
        }
    }
}

impl From<Router> for App {
    fn from(router: Router) -> Self {
        App::new(router)
    }
}

impl fmt::Debug for App {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("App").finish_non_exhaustive()
    }
}

impl Service<Request<Body>> for App {
    type Response = ::axum::response::Response;
    type Error = Infallible;
    type Future = TowerToHyperServiceFuture<Router, Request<Body>>;

    fn call(&self, mut req: Request<Body>) -> Self::Future {
        // The address types of dormant's transports (the trait is sealed):
        // TCP's (also under TLS and the PROXY protocol), a Unix socket's.
        let extensions = req.extensions_mut();
        if let Some(&PeerAddr(peer)) = extensions.get::<PeerAddr<SocketAddr>>() {
            extensions.insert(ConnectInfo(peer));
        } else if let Some(PeerAddr(peer)) = extensions.get::<PeerAddr<UnixAddr>>() {
            let peer = peer.clone();
            extensions.insert(ConnectInfo(peer));
        }
        if let Some(deadlines) = Deadlines::unregistered(&req) {
            req.extensions_mut().insert(deadlines);
        }
        self.router.call(req)
    }
}
