//! Transports: what a connection's bytes travel on, as the driver, the lot
//! and the upgrade hand-off see it.
//!
//! A connection is a *transport* (TCP, a Unix socket, TLS over either)
//! carrying a *protocol* (HTTP/1.1, HTTP/2, an upgraded stream). A
//! listener yields tokio's streams (the public [`Transport`]s); dormant
//! serves each one as its [`Transport::Served`] form, registered with the
//! parking lot for the connection's whole life (`Transport::serve_in`, at
//! accept), told then what the server asks of it ([`Serving`]: the lot,
//! and for TLS whether HTTP/2 is offered and TLS info kept). The protocol
//! drivers need from that form only four things, the [`Seam`] trait and
//! the lot's [`Parkable`], and one value of what the transport's own
//! handshake settled ([`Connected`](sealed::Connected): under way or not, the ALPN protocol,
//! the TLS info):
//!
//! | need | TCP, Unix socket (`socket.rs`) | TLS (`tls/`) |
//! |---|---|---|
//! | hyper's reads and writes | the socket's own non-blocking calls, when the lot's readiness says so | the same, over records decrypted into buffers taken from a per-thread cache while bytes move |
//! | a wait for readiness that holds no buffer | the lot's readiness cell ([`Parkable::poll_read_ready`]) | the socket's, unless the session holds plaintext or a whole record already |
//! | the peer's close while a request is answered ([`Seam::poll_peer`]) | a one-byte peek (TCP); a small read kept for hyper (Unix sockets: std has no stable peek) | a read: `close_notify` or application data, never a peek |
//! | a *parked* form: the fd plus an optional state ([`Parkable::Dormant`]) | the socket's fd alone | the fd plus the boxed session (keys, sequence numbers, the start of a record), no record buffer |
//!
//! What a TLS handshake negotiated, for handlers, is `tls_info.rs`.
//!
//! A PROXY protocol header (feature `proxy-protocol`) is read by
//! `ProxiedStream` over a TCP or Unix socket, under TLS if there is one
//! (`proxy/`): inside its first reads, as a handshake
//! (`Handshake::ProxyHeader`) after which the peer is the header's
//! client; its parked form is the socket's plus that address.
//!
//! The trait is sealed: the lot's slot layout and the parking rules
//! (nothing half-read may be dropped) depend on each implementation, so
//! the crate provides them all. [`Stream`] erases the transport for the
//! upgrade hand-off, back in tokio, so that one handler serves upgrades on
//! any listener.

#[cfg(feature = "proxy-protocol")]
mod proxy;
mod socket;
mod stream;
mod tcp;
#[cfg(feature = "tls-no-provider")]
mod tls;
#[cfg(feature = "tls-no-provider")]
mod tls_info;
mod unix;

use std::fmt;
use std::io;

#[cfg(doc)]
use crate::lot::Parkable;
pub(crate) use crate::lot::Register;
#[cfg(feature = "proxy-protocol")]
pub use proxy::{ProxiedStream, UnixPeer};
pub(crate) use sealed::{Alpn, ClientAddr, Connected, Handshake, Peer, Seam};
pub use stream::Stream;
#[cfg(feature = "tls-no-provider")]
pub(crate) use tls::RecordSecrets;
#[cfg(feature = "tls-no-provider")]
pub use tls::TlsStream;
#[cfg(feature = "tls-no-provider")]
pub(crate) use tls_info::RecordServerName;
#[cfg(feature = "tls-no-provider")]
pub use tls_info::TlsInfo;

/// A connection's byte stream: [`tokio::net::TcpStream`],
/// [`tokio::net::UnixStream`], or (feature `tls`) a `TlsStream` over
/// either.
///
/// Sealed: dormant parks, wakes and hands off each transport in its own
/// way, so it implements this trait for the transports it supports, and a
/// [`Listener`](crate::Listener) of your own yields one of those.
pub trait Transport: Send + Sized + 'static + sealed::Sealed {
    /// The peer's address: [`std::net::SocketAddr`] for TCP,
    /// [`tokio::net::unix::SocketAddr`] (a path, or unnamed) for Unix
    /// sockets. Its `Debug` form is what logs show.
    type Addr: Clone + fmt::Debug + Send + Sync + 'static;

    /// Returns the address of the connection's peer.
    fn peer_addr(&self) -> io::Result<Self::Addr>;

    /// The connection as dormant serves it: registered with the parking
    /// lot instead of tokio.
    #[doc(hidden)]
    type Served: Seam<Addr = Self::Addr>;

    /// Leaves tokio for the lot, for the connection's whole life, told
    /// what the server asks of the transport.
    #[doc(hidden)]
    fn serve_in(self, serving: &Serving<'_>) -> io::Result<Self::Served>;
}

/// What a transport is told when dormant starts serving one of its
/// connections ([`Transport::serve_in`]): the lot to register with and,
/// for a transport with a handshake of its own, what the server asks of it.
pub struct Serving<'a> {
    pub(crate) lot: &'a dyn Register,
    /// The server's settings: whether it serves HTTP/2 (a TLS session
    /// offers `h2` with ALPN only then) and reports [`TlsInfo`].
    #[cfg_attr(not(feature = "tls-no-provider"), expect(dead_code))]
    pub(crate) config: &'a crate::config::Config,
    /// Where a transport counts how its own handshake ends.
    #[cfg_attr(
        not(any(feature = "tls-no-provider", feature = "proxy-protocol")),
        expect(dead_code)
    )]
    pub(crate) handshakes: &'a std::sync::Arc<dyn Handshakes>,
}

impl fmt::Debug for Serving<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Serving").finish_non_exhaustive()
    }
}

/// Where a transport with a handshake of its own (TLS, a PROXY header)
/// counts how its handshakes end: the server's stats. The transport counts
/// them, since only it knows when a handshake completes.
pub(crate) trait Handshakes: Send + Sync + 'static {
    /// A TLS handshake completed.
    #[cfg_attr(not(feature = "tls-no-provider"), expect(dead_code))]
    fn tls_completed(&self);
    /// A connection closed before its TLS handshake completed.
    #[cfg_attr(not(feature = "tls-no-provider"), expect(dead_code))]
    fn tls_failed(&self);

    /// A TLS session's handshake completed, and its keys stay in rustls:
    /// its crypto provider does not hand them out.
    #[cfg_attr(not(feature = "tls-no-provider"), expect(dead_code))]
    fn tls_kept_by_rustls(&self);
    /// A connection closed before its PROXY header was read.
    #[cfg_attr(not(feature = "proxy-protocol"), expect(dead_code))]
    fn proxy_header_failed(&self);
}

/// The most bytes a peer-close check that must read reads at once.
const READ_AHEAD: usize = 512;

/// The peer-close check of a transport that cannot peek: reads up to
/// [`READ_AHEAD`] bytes, which the caller replays before anything else
/// (see [`Peer::ReadAhead`]).
fn poll_read_ahead<T: tokio::io::AsyncRead + Unpin>(
    io: &mut T,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<io::Result<Peer>> {
    let mut buf = [0; READ_AHEAD];
    let mut read = tokio::io::ReadBuf::new(&mut buf);
    std::task::ready!(std::pin::Pin::new(io).poll_read(cx, &mut read))?;
    std::task::Poll::Ready(Ok(match read.filled() {
        [] => Peer::Closed,
        bytes => Peer::ReadAhead(bytes::Bytes::copy_from_slice(bytes)),
    }))
}

/// The body of tokio's `AsyncWrite` for a stream over another, `$field`,
/// that writes as it does and only reads differently (a PROXY header
/// first, bytes read ahead first): every call goes to `$field`.
macro_rules! forward_write {
    ($field:ident) => {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            tokio::io::AsyncWrite::poll_write(
                std::pin::Pin::new(&mut self.get_mut().$field),
                cx,
                buf,
            )
        }

        fn poll_write_vectored(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            tokio::io::AsyncWrite::poll_write_vectored(
                std::pin::Pin::new(&mut self.get_mut().$field),
                cx,
                bufs,
            )
        }

        fn is_write_vectored(&self) -> bool {
            tokio::io::AsyncWrite::is_write_vectored(&self.$field)
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(&mut self.get_mut().$field), cx)
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(&mut self.get_mut().$field), cx)
        }
    };
}
pub(crate) use forward_write;

/// Implements an I/O trait for an `Unpin` type by its inherent methods on
/// `&mut self`, named as the trait's with `_unpin` after them
/// (`poll_read_unpin`, `poll_write_unpin`, …; futures' `poll_next_unpin`
/// is the same idea the other way round). A pin promises nothing to an
/// `Unpin` type, and behind a `&mut self` a method borrows the fields it
/// needs apart; so each method starts with its own work, and the `Pin` is
/// taken off here, once.
///
/// `Read` and `Write` are hyper's (`rt`), for the transports hyper sees
/// (their writes are vectored: `poll_write_vectored_unpin` and
/// `is_write_vectored_unpin`); `AsyncRead` and `AsyncWrite` are tokio's.
macro_rules! unpin_io {
    (impl[$($generics:tt)*] Read for $type:ty) => {
        impl<$($generics)*> hyper::rt::Read for $type {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: hyper::rt::ReadBufCursor<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                self.get_mut().poll_read_unpin(cx, buf)
            }
        }
    };
    (impl[$($generics:tt)*] Write for $type:ty) => {
        impl<$($generics)*> hyper::rt::Write for $type {
            $crate::transport::unpin_io!(@write);

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                self.get_mut().poll_write_vectored_unpin(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.is_write_vectored_unpin()
            }
        }
    };
    (impl[$($generics:tt)*] AsyncRead for $type:ty) => {
        impl<$($generics)*> tokio::io::AsyncRead for $type {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                self.get_mut().poll_read_unpin(cx, buf)
            }
        }
    };
    (impl[$($generics:tt)*] AsyncWrite for $type:ty) => {
        impl<$($generics)*> tokio::io::AsyncWrite for $type {
            $crate::transport::unpin_io!(@write);
        }
    };
    // The methods hyper's `Write` and tokio's `AsyncWrite` share.
    (@write) => {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.get_mut().poll_write_unpin(cx, buf)
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            self.get_mut().poll_flush_unpin(cx)
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            self.get_mut().poll_shutdown_unpin(cx)
        }
    };
}
pub(crate) use unpin_io;

mod sealed {
    use std::io;
    use std::task::{Context, Poll};

    use bytes::Bytes;
    use tokio::io::{AsyncRead, AsyncWrite};

    use super::Stream;
    use crate::lot::Parkable;

    /// Only dormant's transports are [`Transport`](super::Transport)s.
    pub trait Sealed {}

    impl Sealed for tokio::net::TcpStream {}
    impl Sealed for tokio::net::UnixStream {}
    // TLS and PROXY streams are sealed where they are defined.

    /// What the protocol drivers need of a served connection
    /// ([`Transport::Served`](super::Transport::Served)) beyond the lot's
    /// [`Parkable`] and tokio's I/O traits.
    pub trait Seam: Parkable + AsyncRead + AsyncWrite + Unpin + std::fmt::Debug + Sized {
        /// [`Transport::Addr`](super::Transport::Addr).
        type Addr: Clone + std::fmt::Debug + Send + Sync + 'static;

        /// Returns the address of the connection's peer.
        fn peer_addr(&self) -> io::Result<Self::Addr>;

        /// Looks for the peer's close while a request is answered, without
        /// losing a byte. `Pending` (with the waker registered) while
        /// nothing arrived.
        fn poll_peer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Peer>>;

        /// Returns what the transport's own handshake has settled so far:
        /// the one thing the driver asks a transport about itself. A
        /// transport without a handshake has settled nothing.
        fn connected(&self) -> Connected<Self::Addr> {
            Connected::default()
        }

        /// Leaves the lot for tokio, with the transport erased, for the
        /// upgrade hand-off.
        fn into_stream(self) -> io::Result<Stream>;

        /// An upgraded stream of this transport, out of tokio, to sleep in
        /// the lot; the stream back if it is of another transport.
        #[allow(clippy::type_complexity)]
        fn dormant_from_stream(stream: Stream) -> Result<io::Result<Self::Dormant>, Stream>;

        /// A sleeping upgraded stream back in tokio.
        fn dormant_into_stream(dormant: Self::Dormant) -> io::Result<Stream>;
    }

    /// What a transport's handshake has settled, as the protocol drivers
    /// see it: one value, as hyper's client `Connection::connected` hands
    /// one `Connected`, so that the drivers know nothing of TLS or PROXY
    /// headers.
    #[derive(Clone, Debug)]
    pub struct Connected<A> {
        /// Whether the handshake is still under way.
        pub handshake: Handshake,
        /// The application protocol the handshake chose.
        pub alpn: Alpn,
        /// Where the client's address comes from.
        pub client: ClientAddr<A>,
        /// What a TLS handshake negotiated, once complete, when the server
        /// reports it to handlers.
        #[cfg(feature = "tls-no-provider")]
        pub tls_info: Option<super::TlsInfo>,
    }

    impl<A> Default for Connected<A> {
        fn default() -> Self {
            Connected {
                handshake: Handshake::default(),
                alpn: Alpn::default(),
                client: ClientAddr::default(),
                #[cfg(feature = "tls-no-provider")]
                tls_info: None,
            }
        }
    }

    /// Where a connection's client's address comes from.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub enum ClientAddr<A> {
        /// The socket's peer: the address the listener gave at accept.
        #[default]
        Socket,
        /// A header the transport reads first (PROXY protocol) names it:
        /// not read yet. The connection hooks wait for it.
        InHeader,
        /// The header named it: its address stands for the socket's peer.
        Named(A),
    }

    /// Where a transport's handshake is.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub enum Handshake {
        /// Complete, or the transport has none (TCP, a Unix socket).
        #[default]
        Settled,
        /// Under way: the bytes that arrive are the handshake's, and the
        /// connection has the handshake's deadline.
        UnderWay,
        /// A PROXY header is being read: the bytes that arrive are the
        /// header's, and the peer is not known yet.
        ProxyHeader,
    }

    /// The application protocol a handshake chose with ALPN.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub enum Alpn {
        /// None was chosen (the transport has no ALPN, or the client
        /// offered none): the driver tells HTTP/2 by its preface.
        #[default]
        Unchosen,
        /// HTTP/2 (`h2`).
        H2,
        /// Another one: HTTP/1.1.
        Http1,
    }

    /// What [`Seam::poll_peer`] found.
    #[derive(Debug)]
    pub enum Peer {
        /// The peer closed (or half-closed) with nothing left to read.
        Closed,
        /// Bytes wait in the transport, unread (a peek saw them).
        Unread,
        /// Bytes the check had to read: they come before anything else
        /// the transport reads, and whoever reads next must get them.
        ReadAhead(Bytes),
    }
}
