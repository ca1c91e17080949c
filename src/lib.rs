//! An HTTP/1.1 and HTTP/2 server on tokio and hyper whose idle connections
//! cost almost nothing.
//!
//! A keep-alive connection on a hyper or Go server holds kilobytes while it
//! waits for its next request: read and write buffers, parser state, a task.
//! dormant serves each connection with hyper while requests flow, and takes
//! hyper apart once the connection has been idle for a moment
//! ([`Builder::park_after`]): the waiting connection leaves its task and
//! waits in the server's parking lot with its socket (and, on TLS, its
//! session) and a few bytes of its own state; no task, no buffer, no hyper
//! state. When bytes arrive, a buffer is taken from a pool, read into, and
//! handed to a freshly built hyper connection.
//!
//! ```text
//! accept ─► PARKED ─ readable ─► ACTIVE (hyper) ─ idle for park_after ─► PARKED …
//! ```
//!
//! # Serving
//!
//! [`Server::serve`] takes any [`Listener`]: tokio's `TcpListener` or
//! `UnixListener`, or dormant's [`UnixListener`], which cleans up its
//! socket file. Every transport gets the whole idle ladder.
//!
//! Handlers are hyper [`Service`](hyper::service::Service)s over
//! `Request<`[`Body`]`>`; an axum `Router` is served by the `axum` module
//! (feature `axum`: `dormant::axum::serve(listener, app)`, as
//! `axum::serve`), other tower services through [`TowerToHyperService`]. With [`Builder::peer_addr`] on, every request
//! carries the peer's address as a [`PeerAddr`] extension. A handler
//! lifts or moves its own request's read and write deadlines with
//! [`Deadlines`] (a server-sent events stream, a large upload).
//!
//! # TLS
//!
//! With the `tls` feature (or `tls-ring`, `tls-no-provider`), the `tls`
//! module serves any listener over rustls: `TlsListener::new(listener,
//! TlsConfig::from_pem_files(cert, key)?)`. Idle TLS connections park and go
//! dormant too, keeping their session and no record buffer.
//!
//! # PROXY protocol
//!
//! With the `proxy-protocol` feature, the `proxy` module reads the PROXY
//! header (v1 and v2) that a load balancer in TCP mode sends, and makes the
//! client's address it carries the connection's peer:
//! `ProxyProtocol::new(listener)`, under TLS if there is one.
//!
//! # Upgrades
//!
//! [`upgrade::on`] hands a handler the raw socket of an HTTP/1.1 upgrade
//! (`101`) or `CONNECT`, with the bytes the client sent after its request,
//! and keeps nothing of the connection. An idle upgraded stream
//! can sleep in the parking lot with its protocol's small state, and is
//! called back when bytes arrive: see the [`upgrade`] module.
//!
//! ```no_run
//! use std::convert::Infallible;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use hyper::body::Bytes;
//! use hyper::service::service_fn;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     let server = dormant::Server::builder().build()?;
//!     let hello = service_fn(|_req: Request<dormant::Body>| async {
//!         Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("Hello, World!"))))
//!     });
//!     server.serve(listener, hello).await?;
//!     Ok(())
//! }
//! ```
//!
//! # What costs what
//!
//! A PARKED connection waits in the parking lot with its socket and a
//! readiness cell, no task and no buffer; a DORMANT one keeps only its fd
//! (and a TLS session's state) and its deadline in the lot's slot, beside
//! the kernel's socket.
//! BENCHMARKS.md has the measured bytes per idle connection and the
//! throughput against hyper-util, each with the command that reproduces
//! it; `docs/how-it-works.md` and `docs/architecture.md` explain the
//! design.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// Imports go one way, down the Layering block of docs/architecture.md,
// which `cargo test --test it -- layering::` (tests/layering.rs) holds the code to:
// a module imports only modules of the layers below its own, none but
// `axum` imports `server`, the lot imports nothing of the crate but the
// ladder's word for its rungs, and no two
// modules (nor two files of a folder) import each other.
mod accounting;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod axum;
mod body;
mod config;
mod conn;
pub mod context;
mod deadlines;
mod error;
mod hooks;
mod kept;
mod ladder;
mod life;
mod listener;
mod lot;
mod pool;
#[cfg(feature = "proxy-protocol")]
#[cfg_attr(docsrs, doc(cfg(feature = "proxy-protocol")))]
pub mod proxy;
mod rewind;
mod server;
mod service;
mod shutdown;
mod state;
mod stats;
mod timeout;
#[cfg(feature = "tls-no-provider")]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
)]
pub mod tls;
mod track;
mod transport;
pub mod upgrade;
mod wire;
#[cfg(feature = "ws")]
#[cfg_attr(docsrs, doc(cfg(feature = "ws")))]
pub mod ws;

pub use body::Body;
pub use deadlines::Deadlines;
pub use error::Error;
pub use hooks::{Admit, ConnState};
pub use hyper_util::service::TowerToHyperService;
pub use ladder::{PerRung, Rung};
pub use listener::{Addr, Listener, UnixListener};
pub use pool::PoolStats;
pub use server::{Builder, Handle, Serve, ServeFuture, Server, WithGracefulShutdown};
pub use service::{HttpService, PeerAddr, ResBody};
pub use shutdown::Shutdown;
#[cfg(feature = "ws")]
pub use stats::WebSocketStats;
pub use stats::{H2SleepDeclines, Stats};
pub use transport::Transport;

/// The README's example, compiled by `cargo test` as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
