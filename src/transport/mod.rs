//! Transports: what a connection's bytes travel on, as the driver, the lot
//! and the upgrade hand-off see it.
//!
//! A connection is a *transport* (TCP, a Unix socket, TLS over either)
//! carrying a *protocol* (HTTP/1.1, HTTP/2, an upgraded stream). A
//! listener yields tokio's streams (the public [`Transport`]s); dormant
//! serves each one as its [`Transport::Served`] form, registered with the
//! parking lot for the connection's whole life (`Transport::serve_in`, at
//! accept). The protocol drivers need from that form only four things, the
//! [`Seam`] trait and the lot's [`Parkable`]:
//!
//! | need | TCP, Unix socket (`socket.rs`) | TLS (`tls.rs`) |
//! |---|---|---|
//! | hyper's reads and writes | the socket's own non-blocking calls, when the lot's readiness says so | the same, over records decrypted into buffers taken from a per-thread cache while bytes move |
//! | a wait for readiness that holds no buffer | the lot's readiness cell ([`Parkable::poll_read_ready`]) | the socket's, unless the session holds plaintext or a whole record already |
//! | the peer's close while a request is answered ([`Seam::poll_peer`]) | a one-byte peek (TCP); a small read kept for hyper (Unix sockets: std has no stable peek) | a read: `close_notify` or application data, never a peek |
//! | a *parked* form: the fd plus an optional state ([`Parkable::Dormant`]) | the socket alone: 4 bytes | the fd plus the boxed session (keys, sequence numbers, the start of a record), no record buffer |
//!
//! What a TLS handshake negotiated, for handlers, is `tls_info.rs`.
//!
//! The trait is sealed: the lot's slot layout and the parking rules
//! (nothing half-read may be dropped) depend on each implementation, so
//! the crate provides them all. [`Stream`] erases the transport for the
//! upgrade hand-off, back in tokio, so that one handler serves upgrades on
//! any listener.

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

pub(crate) use crate::lot::Register;
pub(crate) use sealed::{Peer, Seam};
pub use stream::Stream;
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

    /// Leaves tokio for the lot, for the connection's whole life.
    #[doc(hidden)]
    fn serve_in(self, lot: &dyn Register) -> io::Result<Self::Served>;
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
    #[cfg(feature = "tls-no-provider")]
    impl<IO: Sealed> Sealed for super::TlsStream<IO> {}

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

        /// Whether the client chose HTTP/2 (`Some(true)`) or HTTP/1.1
        /// with ALPN; `None` when the transport has no ALPN (the driver
        /// then recognises HTTP/2 by its preface).
        fn alpn_h2(&self) -> Option<bool> {
            None
        }

        /// Whether the transport begins with a handshake (TLS).
        const HANDSHAKES: bool = false;

        /// Whether a handshake is still under way: a connection that
        /// closes now counts as a failed handshake.
        fn handshaking(&self) -> bool {
            false
        }

        /// From now on, keeps what the TLS handshake negotiates, for
        /// [`tls_info`](Self::tls_info).
        #[cfg(feature = "tls-no-provider")]
        fn keep_tls_info(&mut self) {}

        /// What the TLS handshake negotiated, once it is complete, when
        /// the transport was asked to [`keep_tls_info`](Self::keep_tls_info).
        #[cfg(feature = "tls-no-provider")]
        fn tls_info(&self) -> Option<super::TlsInfo> {
            None
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
