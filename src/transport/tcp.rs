//! TCP: the socket is the whole transport; parked, it is its fd.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::task::{Context, Poll};

use tokio::net::TcpStream;

use super::socket::{Sock, Socket, sock_io};
use super::{Peer, Seam, Serving, Stream, Transport};
use crate::lot::Direction;

impl Sock for std::net::TcpStream {
    sock_io!();

    fn peer_closed(&self) -> Option<io::Result<bool>> {
        Some(self.peek(&mut [0; 1]).map(|n| n == 0))
    }
}

impl Seam for Socket<std::net::TcpStream> {
    type Addr = SocketAddr;

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.io.peer_addr()
    }

    fn poll_peer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Peer>> {
        let mut byte = [0; 1];
        // No system call until the socket is readable; bytes keep it so.
        (self.registration)
            .poll_io(
                self.io.as_fd(),
                Direction::Read,
                cx,
                || self.io.peek(&mut byte),
                |_| false,
            )
            .map_ok(|n| if n == 0 { Peer::Closed } else { Peer::Unread })
    }

    fn into_stream(self) -> io::Result<Stream> {
        TcpStream::from_std(self.leave()?).map(Stream::from)
    }

    fn dormant_from_stream(stream: Stream) -> Result<io::Result<std::net::TcpStream>, Stream> {
        // Stays non-blocking.
        stream.into_tcp().map(TcpStream::into_std)
    }

    fn dormant_into_stream(dormant: std::net::TcpStream) -> io::Result<Stream> {
        TcpStream::from_std(dormant).map(Stream::from)
    }
}

impl Transport for TcpStream {
    type Addr = SocketAddr;

    fn peer_addr(&self) -> io::Result<SocketAddr> {
        TcpStream::peer_addr(self)
    }

    type Served = Socket<std::net::TcpStream>;

    fn serve_in(self, serving: &Serving<'_>) -> io::Result<Self::Served> {
        // Stays non-blocking.
        let io = self.into_std()?;
        let registration = serving.lot.register(io.as_fd())?;
        Ok(Socket::new(io, registration))
    }
}
