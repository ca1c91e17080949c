//! [`Stream`]: a connection's stream with its transport erased.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// A connection's stream, whatever the listener it came from: what an
/// upgrade hands over ([`upgrade::Parts`](crate::upgrade::Parts)).
///
/// It implements tokio's [`AsyncRead`] and [`AsyncWrite`] by delegating to
/// the socket (one `match`, no box), so a handler speaks its protocol on it
/// whether the server listens on TCP or on a Unix socket. The socket
/// itself is one method away when a handler needs it
/// ([`as_tcp`](Self::as_tcp), [`into_unix`](Self::into_unix), …).
pub struct Stream(Kind);

enum Kind {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A TLS session over a TCP or Unix socket (a `Stream` itself).
    #[cfg(feature = "tls-no-provider")]
    Tls(Box<super::TlsStream<Stream>>),
}

impl Stream {
    /// Returns the TCP socket, if the stream is one.
    pub fn as_tcp(&self) -> Option<&TcpStream> {
        match &self.0 {
            Kind::Tcp(stream) => Some(stream),
            _ => None,
        }
    }

    /// Returns the Unix socket, if the stream is one.
    pub fn as_unix(&self) -> Option<&UnixStream> {
        match &self.0 {
            Kind::Unix(stream) => Some(stream),
            _ => None,
        }
    }

    /// Returns the TLS session, if the stream is one; its transport is a `Stream`
    /// again.
    #[cfg(feature = "tls-no-provider")]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
    )]
    pub fn as_tls(&self) -> Option<&super::TlsStream<Stream>> {
        match &self.0 {
            Kind::Tls(stream) => Some(stream),
            _ => None,
        }
    }

    /// Returns the TCP socket, or the stream back if it is not one.
    pub fn into_tcp(self) -> Result<TcpStream, Stream> {
        match self.0 {
            Kind::Tcp(stream) => Ok(stream),
            kind => Err(Stream(kind)),
        }
    }

    /// Returns the Unix socket, or the stream back if it is not one.
    pub fn into_unix(self) -> Result<UnixStream, Stream> {
        match self.0 {
            Kind::Unix(stream) => Ok(stream),
            kind => Err(Stream(kind)),
        }
    }

    /// tokio's readiness flag of the socket: `Ready` once bytes (or the
    /// peer's close) arrived, no system call.
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.0 {
            Kind::Tcp(stream) => stream.poll_read_ready(cx),
            Kind::Unix(stream) => stream.poll_read_ready(cx),
            #[cfg(feature = "tls-no-provider")]
            Kind::Tls(stream) if stream.has_buffered() => Poll::Ready(Ok(())),
            #[cfg(feature = "tls-no-provider")]
            Kind::Tls(stream) => stream.get_ref().poll_read_ready(cx),
        }
    }

    /// Whether a read can return bytes the socket no longer has: the
    /// plaintext or whole records a TLS session holds (see
    /// `TlsStream::has_buffered`). Such a stream must
    /// not wait for the socket.
    pub(crate) fn has_buffered(&self) -> bool {
        match &self.0 {
            Kind::Tcp(_) | Kind::Unix(_) => false,
            #[cfg(feature = "tls-no-provider")]
            Kind::Tls(stream) => stream.has_buffered(),
        }
    }
}

impl Stream {
    /// A TLS session over a TCP or Unix socket.
    #[cfg(feature = "tls-no-provider")]
    pub(crate) fn from_tls(stream: super::TlsStream<Stream>) -> Self {
        Stream(Kind::Tls(Box::new(stream)))
    }

    /// The TLS session, or the stream back if it is not one.
    #[cfg(feature = "tls-no-provider")]
    pub(crate) fn into_tls(self) -> Result<super::TlsStream<Stream>, Stream> {
        match self.0 {
            Kind::Tls(stream) => Ok(*stream),
            kind => Err(Stream(kind)),
        }
    }
}

impl From<TcpStream> for Stream {
    fn from(stream: TcpStream) -> Self {
        Stream(Kind::Tcp(stream))
    }
}

impl From<UnixStream> for Stream {
    fn from(stream: UnixStream) -> Self {
        Stream(Kind::Unix(stream))
    }
}

#[cfg(feature = "tls-no-provider")]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
)]
impl From<super::TlsStream<TcpStream>> for Stream {
    fn from(stream: super::TlsStream<TcpStream>) -> Self {
        Stream(Kind::Tls(Box::new(stream.map_io(Stream::from))))
    }
}

#[cfg(feature = "tls-no-provider")]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
)]
impl From<super::TlsStream<UnixStream>> for Stream {
    fn from(stream: super::TlsStream<UnixStream>) -> Self {
        Stream(Kind::Tls(Box::new(stream.map_io(Stream::from))))
    }
}

#[cfg(feature = "tls-no-provider")]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
)]
impl TryFrom<Stream> for super::TlsStream<TcpStream> {
    type Error = Stream;

    fn try_from(stream: Stream) -> Result<Self, Stream> {
        match stream.0 {
            Kind::Tls(tls) => tls
                .try_map_io(Stream::into_tcp)
                .map_err(|tls| Stream(Kind::Tls(Box::new(tls)))),
            kind => Err(Stream(kind)),
        }
    }
}

#[cfg(feature = "tls-no-provider")]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
)]
impl TryFrom<Stream> for super::TlsStream<UnixStream> {
    type Error = Stream;

    fn try_from(stream: Stream) -> Result<Self, Stream> {
        match stream.0 {
            Kind::Tls(tls) => tls
                .try_map_io(Stream::into_unix)
                .map_err(|tls| Stream(Kind::Tls(Box::new(tls)))),
            kind => Err(Stream(kind)),
        }
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Tcp(stream) => stream.fmt(f),
            Kind::Unix(stream) => stream.fmt(f),
            #[cfg(feature = "tls-no-provider")]
            Kind::Tls(stream) => stream.fmt(f),
        }
    }
}

/// Delegates one I/O call to the socket.
macro_rules! delegate {
    ($self:ident, $stream:ident => $call:expr) => {
        match &mut $self.get_mut().0 {
            Kind::Tcp($stream) => $call,
            Kind::Unix($stream) => $call,
            #[cfg(feature = "tls-no-provider")]
            Kind::Tls($stream) => {
                let $stream = &mut **$stream;
                $call
            }
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match &self.0 {
            Kind::Tcp(stream) => stream.is_write_vectored(),
            Kind::Unix(stream) => stream.is_write_vectored(),
            #[cfg(feature = "tls-no-provider")]
            Kind::Tls(stream) => stream.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}
