//! The PROXY protocol (feature `proxy-protocol`): the client's address
//! behind a load balancer in TCP mode (HAProxy, an AWS Network Load
//! Balancer, GCP, Azure), from the header it sends before a connection's
//! bytes, versions 1 and 2 of
//! [HAProxy's specification](https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use dormant::proxy::ProxyProtocol;
//!
//! let tcp = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
//! let listener = ProxyProtocol::new(tcp);
//! // … dormant::Server::serve(listener, service) …
//! # Ok(()) }
//! ```
//!
//! [`ProxyProtocol`] wraps any TCP or Unix socket listener (tokio's, or
//! dormant's [`UnixListener`](crate::UnixListener)). Behind TLS, the
//! header comes before the ClientHello, so it goes under the TLS listener:
//! `TlsListener::new(ProxyProtocol::new(tcp), config)`.
//!
//! - **Where it is read.** Accepting does not wait for the header: each
//!   connection reads it in its own task, before its first request (or its
//!   TLS handshake). Bytes the client sent after the header, even in the
//!   same packet, reach hyper (or TLS) intact.
//! - **What it changes.** The client's address the header carries is the
//!   connection's peer from then on: the [`PeerAddr`](crate::PeerAddr)
//!   extension, the `conn` tracing span, on every rung of the idle ladder
//!   (a PARKED or DORMANT connection keeps it: a few bytes beside its fd).
//!   On TCP it stays a `SocketAddr`; on a Unix socket it is a
//!   [`UnixPeer`]. A header without a client address (a v2 `LOCAL` health
//!   check, a v1 `UNKNOWN` line, an AF_UNIX or unspecified family) keeps
//!   the socket's own peer.
//! - **How long it may take.** The header is the transport's handshake, as
//!   a TLS handshake is: the server's
//!   [`handshake_timeout`](crate::Builder::handshake_timeout)
//!   (default 10 s, like the `ReadHeaderTimeout` of Go's go-proxyproto)
//!   bounds it, and its
//!   [`header_read_timeout`](crate::Builder::header_read_timeout) bounds it
//!   and the first request head together, both counted from accept: by
//!   default, a client that trickles a header is cut after 10 s. With
//!   both timeouts off, only the idle timeout bounds it, as it bounds a
//!   first request. Under TLS, the handshake timeout covers the header and
//!   the TLS handshake together.
//! - **What it refuses.** A connection whose first bytes are not a valid
//!   header (malformed, longer than the specification allows, a version 2
//!   header with addresses and TLVs over 4 KiB, or no header at all) is
//!   closed, logged at debug level and counted in
//!   [`Stats::proxy_header_failures`](crate::Stats::proxy_header_failures);
//!   no other connection notices.
//!
//! The specification asks that a listener expecting the header never
//! accept a connection without one, and that only trusted proxies reach
//! it: anyone who can connect can claim any address. Keep such a listener
//! where only the load balancer reaches it.
//!
//! What it costs: a connection whose header comes whole, as proxies send
//! it, allocates nothing to read it; a header that comes in pieces is kept
//! until it is whole. A proxied connection keeps the client's address
//! while it waits, PARKED or DORMANT (the address's bytes beside the fd);
//! connections of other listeners are untouched.

use std::io;

use crate::listener::{Addr, Listener};
use crate::transport::Transport;
pub use crate::transport::{ProxiedStream, UnixPeer};

/// Serves the connections of a TCP or Unix socket listener that each
/// start with a PROXY protocol header (v1 or v2), with the client's
/// address it carries as their peer.
///
/// Accepting does not wait for the header: each connection reads it in
/// its own task (see the [module docs](self)). The address `accept`
/// returns is the socket's peer (the load balancer), since nothing has
/// been read yet.
#[derive(Debug)]
pub struct ProxyProtocol<L> {
    inner: L,
}

impl<L> ProxyProtocol<L> {
    /// Reads a PROXY header at the start of every connection of `listener`.
    pub fn new(listener: L) -> Self {
        ProxyProtocol { inner: listener }
    }

    /// Returns the listener underneath.
    pub fn get_ref(&self) -> &L {
        &self.inner
    }
}

impl<L> Listener for ProxyProtocol<L>
where
    L: Listener,
    ProxiedStream<L::Io>: Transport,
    <ProxiedStream<L::Io> as Transport>::Addr: From<Addr<L>>,
{
    type Io = ProxiedStream<L::Io>;

    async fn accept(
        &mut self,
    ) -> io::Result<(
        ProxiedStream<L::Io>,
        <ProxiedStream<L::Io> as Transport>::Addr,
    )> {
        let (io, peer) = self.inner.accept().await?;
        Ok((ProxiedStream::new(io), peer.into()))
    }

    fn local_addr(&self) -> io::Result<<ProxiedStream<L::Io> as Transport>::Addr> {
        self.inner.local_addr().map(Into::into)
    }
}
