//! Unix domain sockets: like TCP, except the peer's close.
//!
//! std's `UnixStream::peek` is unstable and tokio offers none, so the
//! close check while a request is answered reads instead: a few bytes on
//! the stack (`poll_read_ahead`), handed to hyper before anything else
//! (the bytes of a pipelined request are rare here, and never lost). A
//! DORMANT Unix connection whose event reports the peer's close cannot be
//! told apart from one with bytes before the close, so the lot hands it
//! back and its first read finds out.

use std::io;
use std::task::{Context, Poll};

use tokio::net::UnixStream;
use tokio::net::unix::SocketAddr;

use super::{Peer, Seam, Stream, Transport};
use crate::lot::Parkable;

impl Parkable for UnixStream {
    type Dormant = std::os::unix::net::UnixStream;

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        UnixStream::poll_read_ready(self, cx)
    }

    fn into_dormant(self) -> io::Result<std::os::unix::net::UnixStream> {
        // Stays non-blocking.
        self.into_std()
    }

    fn from_dormant(dormant: std::os::unix::net::UnixStream) -> io::Result<Self> {
        UnixStream::from_std(dormant)
    }

    fn peer_closed(_: &std::os::unix::net::UnixStream) -> Option<io::Result<bool>> {
        None
    }
}

impl Seam for UnixStream {
    fn poll_peer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Peer>> {
        // No system call until the socket is readable.
        super::poll_read_ahead(self, cx)
    }

    fn into_stream(self) -> Stream {
        Stream::from(self)
    }

    fn from_stream(stream: Stream) -> Result<Self, Stream> {
        stream.into_unix()
    }
}

impl Transport for UnixStream {
    type Addr = SocketAddr;

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        UnixStream::peer_addr(self)
    }
}
