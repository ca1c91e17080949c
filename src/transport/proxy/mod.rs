//! A PROXY protocol header before a connection's bytes (feature
//! `proxy-protocol`): [`ProxiedStream`] over a TCP or Unix socket.
//!
//! The header is read inside the stream's reads, in the connection's task,
//! like a TLS handshake: a new connection waits PARKED in its task, under
//! its header clock, and its first read that gets past the header returns
//! the bytes after it. Those bytes may have come in the same read as the
//! header; they are moved to the front of the reader's buffer, so they
//! reach whoever reads (hyper, through the driver's pool buffer, or TLS,
//! for which they are records), as bytes read from a socket always do. A
//! header that comes in pieces is kept until it is whole (at most
//! `header::MAX_V2` bytes); one that comes whole, as proxies send it,
//! costs no allocation.
//!
//! Every read of the header makes progress, waits, or fails: the bytes a
//! read brings are taken (kept, or the header is whole), and a read that
//! brings none returns `Pending` from the socket, whose readiness it
//! cleared. The piece kept is no byte to read: the stream's readiness is
//! the socket's. (A connection reading its header has its first request
//! on the clock, so its PARKED wait never ends quiet either: it cannot go
//! round the park step. tests/proxy_protocol.rs,
//! `a_header_in_pieces_does_not_stop_another_connection`.)
//!
//! ```text
//! ProxiedStream { io, header }
//!   header   Reading { partial, failures }  the start of the header if it
//!                                           came in pieces, and where a
//!                                           connection that closes before
//!                                           it is whole is counted
//!            Read(Option<Client>)           the client's address it
//!                                           carried (None: the socket's
//!                                           own peer stands)
//! DormantProxied { io, client }             its parked form: the
//!                                           transport's and the address
//! ```
//!
//! While the header is read, the stream's handshake is
//! [`Handshake::ProxyHeader`]: the driver bounds it, and whoever asks the
//! stream for its peer once it is settled gets the header's client. A
//! malformed header fails the read (`InvalidData`), which closes that
//! connection and no other.

mod header;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tracing::{debug, trace};

use super::sealed::Sealed;
use super::{ClientAddr, Connected, Handshake, Handshakes, Peer, Seam, Serving, Stream, Transport};

impl Sealed for ProxiedStream<TcpStream> {}
impl Sealed for ProxiedStream<UnixStream> {}
use crate::lot::{Parkable, Registration, Wrote};
use header::Client;

/// A connection whose first bytes are a PROXY protocol header (v1 or v2),
/// as a [`ProxyProtocol`](crate::proxy::ProxyProtocol) listener yields it:
/// a TCP or Unix socket.
///
/// The header is read in the connection's own task, before the first
/// request (see the [module docs](crate::proxy)); from then on the
/// stream's [`peer_addr`](Transport::peer_addr) is the client's address
/// the header carried, or the socket's own peer if it carried none (a v2
/// `LOCAL` health check, a v1 `UNKNOWN` line).
pub struct ProxiedStream<IO> {
    // Dropped first: a failed header is counted before the socket closes,
    // so a client that sees the close sees the count.
    header: HeaderState,
    io: IO,
}

/// Where a stream's PROXY header is.
enum HeaderState {
    Reading(PartialHeader),
    /// Read: the client's address it carried; `None` if the socket's own
    /// peer stands.
    Read(Option<Client>),
}

/// A header being read.
struct PartialHeader {
    /// The start of the header, when it came in pieces.
    partial: Vec<u8>,
    /// Where a connection that closes before its header is whole is
    /// counted (`Drop`); `None` before the connection is served, and once
    /// nothing is to be counted.
    failures: Option<Arc<dyn Handshakes>>,
}

impl Drop for PartialHeader {
    fn drop(&mut self) {
        if let Some(failures) = &self.failures {
            failures.proxy_header_failed();
        }
    }
}

/// What one read did to a header being read.
enum HeaderStep {
    /// The header is not whole yet.
    More,
    /// The header ends `skip` bytes into the read.
    Read { skip: usize, client: Option<Client> },
}

impl PartialHeader {
    /// Takes the bytes of one read.
    fn take(&mut self, fresh: &[u8]) -> Result<HeaderStep, header::Invalid> {
        let kept = self.partial.len();
        let parsed = if kept == 0 {
            header::parse(fresh)?
        } else {
            // Rare (a header in pieces): the whole read joins the start,
            // which is kept only while it is not a whole header, so at most
            // `MAX_V2` bytes.
            self.partial.extend_from_slice(fresh);
            header::parse(&self.partial)?
        };
        Ok(match parsed {
            // The header ends after the bytes kept: they were not one.
            Some(header) => HeaderStep::Read {
                skip: header.len.saturating_sub(kept),
                client: header.client,
            },
            None => {
                if kept == 0 {
                    self.partial.extend_from_slice(fresh);
                }
                HeaderStep::More
            }
        })
    }
}

impl<IO> ProxiedStream<IO> {
    /// A connection whose header has not been read.
    pub(crate) fn new(io: IO) -> Self {
        ProxiedStream {
            io,
            header: HeaderState::Reading(PartialHeader {
                partial: Vec::new(),
                failures: None,
            }),
        }
    }

    /// Returns the underlying transport.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// The client's address the header carried, once read.
    fn client(&self) -> Option<SocketAddr> {
        match self.header {
            HeaderState::Read(client) => client.map(SocketAddr::from),
            HeaderState::Reading(_) => None,
        }
    }
}

impl<IO: fmt::Debug> fmt::Debug for ProxiedStream<IO> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("ProxiedStream");
        debug.field("io", &self.io);
        match &self.header {
            HeaderState::Reading(_) => debug.field("header", &"reading"),
            HeaderState::Read(_) => debug.field("client", &self.client()),
        };
        debug.finish()
    }
}

super::unpin_io!(impl[IO: AsyncRead + Unpin] AsyncRead for ProxiedStream<IO>);

/// tokio's reads (see `unpin_io!`).
impl<IO: AsyncRead + Unpin> ProxiedStream<IO> {
    fn poll_read_unpin(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        while let HeaderState::Reading(reading) = &mut self.header {
            if buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            // Read into the caller's buffer: bytes after the header stay
            // there.
            let start = buf.filled().len();
            ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
            let fresh = &buf.filled()[start..];
            if fresh.is_empty() {
                if reading.partial.is_empty() {
                    // A connect and a close (a TCP health check), not a
                    // failed header.
                    reading.failures = None;
                } else {
                    debug!(
                        received = reading.partial.len(),
                        "the client closed in the middle of its PROXY header"
                    );
                }
                return Poll::Ready(Ok(()));
            }
            match reading.take(fresh) {
                Ok(HeaderStep::More) => buf.set_filled(start),
                Ok(HeaderStep::Read { skip, client }) => {
                    let end = buf.filled().len();
                    buf.filled_mut().copy_within(start + skip..end, start);
                    buf.set_filled(end - skip);
                    reading.failures = None;
                    self.header = HeaderState::Read(client);
                    trace!(client = ?self.client(), "PROXY header read");
                    if buf.filled().len() > start {
                        return Poll::Ready(Ok(()));
                    }
                }
                Err(invalid) => {
                    buf.set_filled(start);
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, invalid)));
                }
            }
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for ProxiedStream<IO> {
    super::forward_write!(io);
}

/// A proxied connection without its task: the transport's parked form and
/// the client's address (the socket's own peer, `None`, stands for
/// itself).
#[derive(Debug)]
pub struct DormantProxied<D> {
    io: D,
    client: Option<Client>,
}

impl<D: AsFd> AsFd for DormantProxied<D> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.io.as_fd()
    }
}

impl<D: io::Write> io::Write for DormantProxied<D> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.io.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.io.flush()
    }
}

impl<S: Parkable> Parkable for ProxiedStream<S> {
    type Dormant = DormantProxied<S::Dormant>;

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The start of a header is no byte to read: it waits for the rest.
        self.io.poll_read_ready(cx)
    }

    fn read_ready(&self) -> bool {
        self.io.read_ready()
    }

    fn into_dormant(self) -> Result<(Self::Dormant, Registration), Self> {
        let ProxiedStream { io, header } = self;
        let client = match header {
            HeaderState::Read(client) => client,
            // A connection whose header is not read has its head on the
            // clock: it never waits without its task.
            header @ HeaderState::Reading(_) => return Err(ProxiedStream { io, header }),
        };
        match io.into_dormant() {
            Ok((io, registration)) => Ok((DormantProxied { io, client }, registration)),
            Err(io) => Err(ProxiedStream {
                io,
                header: HeaderState::Read(client),
            }),
        }
    }

    fn from_dormant(dormant: Self::Dormant, registration: Registration) -> Self {
        ProxiedStream {
            io: S::from_dormant(dormant.io, registration),
            header: HeaderState::Read(dormant.client),
        }
    }

    fn peer_closed(dormant: &Self::Dormant) -> Option<io::Result<bool>> {
        S::peer_closed(&dormant.io)
    }

    fn close_dormant(dormant: Self::Dormant, goodbye: &[u8]) {
        S::close_dormant(dormant.io, goodbye);
    }

    fn send_dormant(dormant: &mut Self::Dormant, bytes: &[u8]) -> io::Result<()> {
        S::send_dormant(&mut dormant.io, bytes)
    }

    fn read_dormant(dormant: &mut Self::Dormant, buf: &mut [u8]) -> Option<io::Result<usize>> {
        S::read_dormant(&mut dormant.io, buf)
    }

    fn write_dormant(dormant: &mut Self::Dormant, bytes: &[u8]) -> io::Result<Wrote> {
        S::write_dormant(&mut dormant.io, bytes)
    }

    fn close(self) {
        // A header cut short is counted before the socket closes: once the
        // client sees the close, the count is final.
        let ProxiedStream { io, header } = self;
        drop(header);
        io.close();
    }
}

/// The peer address of a proxied socket: how its own peer and a header's
/// client become one type (the same for TCP; [`UnixPeer`] for a Unix
/// socket).
pub trait ProxyPeer: Clone + fmt::Debug + Send + Sync + 'static {
    /// [`Transport::Addr`] of the proxied stream.
    type Proxied: From<SocketAddr> + From<Self> + Clone + fmt::Debug + Send + Sync + 'static;
}

impl ProxyPeer for SocketAddr {
    type Proxied = SocketAddr;
}

impl ProxyPeer for tokio::net::unix::SocketAddr {
    type Proxied = UnixPeer;
}

/// The peer of a proxied connection on a Unix socket (the
/// [`PeerAddr`](crate::PeerAddr) of a [`ProxyProtocol`](crate::proxy::ProxyProtocol)
/// over a Unix listener): the client's IP address the PROXY header
/// carried, or the socket's own peer when it carried none. Its `Debug`
/// form is the address's, which logs show. (The listener's own address,
/// from `local_addr`, is a `Socket` too.)
#[derive(Clone)]
pub enum UnixPeer {
    /// The client's address, from the PROXY header.
    Client(SocketAddr),
    /// The socket's own peer: the header carried no client address (a v2
    /// `LOCAL` health check, a v1 `UNKNOWN` line, an address family without
    /// one), or it has not been read yet.
    Socket(tokio::net::unix::SocketAddr),
}

impl fmt::Debug for UnixPeer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnixPeer::Client(addr) => addr.fmt(f),
            UnixPeer::Socket(addr) => addr.fmt(f),
        }
    }
}

impl From<SocketAddr> for UnixPeer {
    fn from(addr: SocketAddr) -> Self {
        UnixPeer::Client(addr)
    }
}

impl From<tokio::net::unix::SocketAddr> for UnixPeer {
    fn from(addr: tokio::net::unix::SocketAddr) -> Self {
        UnixPeer::Socket(addr)
    }
}

impl<S> Seam for ProxiedStream<S>
where
    S: Seam,
    S::Addr: ProxyPeer,
{
    type Addr = <S::Addr as ProxyPeer>::Proxied;

    fn peer_addr(&self) -> io::Result<Self::Addr> {
        match self.client() {
            Some(client) => Ok(client.into()),
            None => self.io.peer_addr().map(Into::into),
        }
    }

    fn poll_peer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Peer>> {
        match self.header {
            HeaderState::Read(_) => self.io.poll_peer(cx),
            // Not asked before the header is read; its bytes must go
            // through it if it were.
            HeaderState::Reading(_) => super::poll_read_ahead(self, cx),
        }
    }

    fn connected(&self) -> Connected<Self::Addr> {
        match self.header {
            HeaderState::Reading(_) => Connected {
                handshake: Handshake::ProxyHeader,
                client: ClientAddr::InHeader,
                ..Connected::default()
            },
            HeaderState::Read(_) => Connected {
                // A header without an address leaves the socket's peer.
                client: (self.client()).map_or(ClientAddr::Socket, |c| ClientAddr::Named(c.into())),
                ..Connected::default()
            },
        }
    }

    fn into_stream(self) -> io::Result<Stream> {
        self.io.into_stream()
    }

    fn dormant_from_stream(stream: Stream) -> Result<io::Result<Self::Dormant>, Stream> {
        // An upgraded stream's handler has had the address already.
        S::dormant_from_stream(stream).map(|io| io.map(|io| DormantProxied { io, client: None }))
    }

    fn dormant_into_stream(dormant: Self::Dormant) -> io::Result<Stream> {
        S::dormant_into_stream(dormant.io)
    }
}

/// [`Transport`] for a proxied socket whose peer address is `$addr`.
macro_rules! proxied_transport {
    ($io:ty, $addr:ty) => {
        impl Transport for ProxiedStream<$io> {
            type Addr = $addr;

            fn peer_addr(&self) -> io::Result<$addr> {
                match self.client() {
                    Some(client) => Ok(client.into()),
                    None => Transport::peer_addr(&self.io).map(Into::into),
                }
            }

            type Served = ProxiedStream<<$io as Transport>::Served>;

            fn serve_in(self, serving: &Serving<'_>) -> io::Result<Self::Served> {
                let ProxiedStream { io, mut header } = self;
                let io = io.serve_in(serving)?;
                if let HeaderState::Reading(reading) = &mut header {
                    reading.failures = Some(serving.handshakes.clone());
                }
                Ok(ProxiedStream { io, header })
            }
        }
    };
}

proxied_transport!(TcpStream, SocketAddr);
proxied_transport!(UnixStream, UnixPeer);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dormant_proxied_tcp_connection_keeps_20_bytes_more_than_a_plain_one() {
        // Beside the fd, the client's address in its compact form.
        let plain = std::mem::size_of::<std::net::TcpStream>();
        let proxied = std::mem::size_of::<DormantProxied<std::net::TcpStream>>();
        assert_eq!(proxied - plain, 20);
    }
}
