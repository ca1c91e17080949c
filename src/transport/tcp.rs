//! TCP: the socket is the whole transport; parked, it is its fd.

use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use tokio::io::ReadBuf;
use tokio::net::TcpStream;

use super::{Peer, Seam, Stream, Transport};
use crate::lot::Parkable;

impl Parkable for TcpStream {
    type Dormant = std::net::TcpStream;

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }

    fn into_dormant(self) -> io::Result<std::net::TcpStream> {
        // Stays non-blocking.
        self.into_std()
    }

    fn from_dormant(dormant: std::net::TcpStream) -> io::Result<Self> {
        TcpStream::from_std(dormant)
    }

    fn peer_closed(dormant: &std::net::TcpStream) -> Option<io::Result<bool>> {
        Some(dormant.peek(&mut [0; 1]).map(|n| n == 0))
    }
}

impl Seam for TcpStream {
    fn poll_peer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Peer>> {
        let mut byte = [0; 1];
        // No system call until the socket is readable.
        self.poll_peek(cx, &mut ReadBuf::new(&mut byte))
            .map_ok(|n| if n == 0 { Peer::Closed } else { Peer::Unread })
    }

    fn into_stream(self) -> Stream {
        Stream::from(self)
    }

    fn from_stream(stream: Stream) -> Result<Self, Stream> {
        stream.into_tcp()
    }
}

impl Transport for TcpStream {
    type Addr = SocketAddr;

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        TcpStream::peer_addr(self)
    }
}
