//! Unix domain sockets: like TCP, except the peer's close.
//!
//! std's `UnixStream::peek` is unstable and tokio offers none, so the
//! close check while a request is answered reads instead: a few bytes on
//! the stack (`poll_read_ahead`), handed to hyper before anything else
//! (the bytes of a pipelined request are rare here, and never lost). A
//! task-less Unix connection whose event reports the peer's close cannot
//! be told apart from one with bytes before the close, so the lot hands it
//! back and its first read finds out.

use std::io;
use std::os::fd::AsFd;
use std::task::{Context, Poll};

use tokio::net::UnixStream;
use tokio::net::unix::SocketAddr;

use super::socket::{Sock, Socket, sock_io};
use super::{Peer, Seam, Serving, Stream, Transport};

impl Sock for std::os::unix::net::UnixStream {
    sock_io!();

    fn peer_closed(&self) -> Option<io::Result<bool>> {
        None
    }
}

impl Seam for Socket<std::os::unix::net::UnixStream> {
    type Addr = SocketAddr;

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.peer_addr().map(SocketAddr::from)
    }

    fn poll_peer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Peer>> {
        // No system call until the socket is readable.
        super::poll_read_ahead(self, cx)
    }

    fn into_stream(self) -> io::Result<Stream> {
        UnixStream::from_std(self.leave()?).map(Stream::from)
    }

    fn dormant_from_stream(
        stream: Stream,
    ) -> Result<io::Result<std::os::unix::net::UnixStream>, Stream> {
        // Stays non-blocking.
        stream.into_unix().map(UnixStream::into_std)
    }

    fn dormant_into_stream(dormant: std::os::unix::net::UnixStream) -> io::Result<Stream> {
        UnixStream::from_std(dormant).map(Stream::from)
    }
}

impl Transport for UnixStream {
    type Addr = SocketAddr;

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        UnixStream::peer_addr(self)
    }

    type Served = Socket<std::os::unix::net::UnixStream>;

    fn serve_in(self, serving: &Serving<'_>) -> io::Result<Self::Served> {
        // Stays non-blocking.
        let io = self.into_std()?;
        let registration = serving.lot.register(io.as_fd())?;
        Ok(Socket::new(io, registration))
    }
}
