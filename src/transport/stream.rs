//! [`Stream`]: a connection's stream with its transport erased.
//!
//! It names the sockets (tokio's) and no transport of dormant's: a layer
//! over a socket (TLS) is a [`Layer`] here, and the layer's own file
//! makes it one and gives it back (`tls/erased.rs`), so that the
//! transports that hand their streams over as `Stream`s import this file,
//! and not the other way round.

#[cfg(feature = "tls-no-provider")]
use std::any::Any;
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
pub struct Stream(StreamKind);

enum StreamKind {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// A layer over a TCP or Unix socket (a `Stream` itself): a TLS
    /// session.
    #[cfg(feature = "tls-no-provider")]
    Layer(Box<dyn Layer>),
}

/// A stream over a `Stream` (TLS over a TCP or Unix socket), as the erased
/// stream sees it: what it asks of it beyond tokio's I/O, and a way back to
/// the layer's own type for the file that defines it.
#[cfg(feature = "tls-no-provider")]
pub(super) trait Layer:
    AsyncRead + AsyncWrite + Unpin + Send + Sync + fmt::Debug + 'static
{
    /// Waits until a read can return bytes (or the end): `Ready` at once if
    /// the layer holds some, else tokio's readiness flag of the socket
    /// below, no system call.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// Whether a read can return bytes the socket no longer has (the
    /// plaintext or whole records a TLS session holds): a stream that
    /// holds some must not wait for the socket.
    fn has_buffered(&self) -> bool;

    /// The layer as its own type, to the file that defines it.
    fn as_any(&self) -> &dyn Any;

    /// The layer as its own type, to the file that defines it.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl Stream {
    /// Returns the TCP socket, if the stream is one.
    pub fn as_tcp(&self) -> Option<&TcpStream> {
        match &self.0 {
            StreamKind::Tcp(stream) => Some(stream),
            _ => None,
        }
    }

    /// Returns the Unix socket, if the stream is one.
    pub fn as_unix(&self) -> Option<&UnixStream> {
        match &self.0 {
            StreamKind::Unix(stream) => Some(stream),
            _ => None,
        }
    }

    /// Returns the TCP socket, or the stream back if it is not one.
    pub fn into_tcp(self) -> Result<TcpStream, Stream> {
        match self.0 {
            StreamKind::Tcp(stream) => Ok(stream),
            kind => Err(Stream(kind)),
        }
    }

    /// Returns the Unix socket, or the stream back if it is not one.
    pub fn into_unix(self) -> Result<UnixStream, Stream> {
        match self.0 {
            StreamKind::Unix(stream) => Ok(stream),
            kind => Err(Stream(kind)),
        }
    }

    /// tokio's readiness flag of the socket: `Ready` once bytes (or the
    /// peer's close) arrived, no system call.
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &self.0 {
            StreamKind::Tcp(stream) => stream.poll_read_ready(cx),
            StreamKind::Unix(stream) => stream.poll_read_ready(cx),
            #[cfg(feature = "tls-no-provider")]
            StreamKind::Layer(layer) => layer.poll_read_ready(cx),
        }
    }

    /// Whether a read can return bytes the socket no longer has: the
    /// plaintext or whole records a TLS session holds (see
    /// [`Layer::has_buffered`]). Such a stream must not wait for the
    /// socket.
    pub(crate) fn has_buffered(&self) -> bool {
        match &self.0 {
            StreamKind::Tcp(_) | StreamKind::Unix(_) => false,
            #[cfg(feature = "tls-no-provider")]
            StreamKind::Layer(layer) => layer.has_buffered(),
        }
    }
}

#[cfg(feature = "tls-no-provider")]
impl Stream {
    /// A layer over a TCP or Unix socket.
    pub(super) fn from_layer(layer: Box<dyn Layer>) -> Self {
        Stream(StreamKind::Layer(layer))
    }

    /// The layer, if the stream is one.
    pub(super) fn layer(&self) -> Option<&dyn Layer> {
        match &self.0 {
            StreamKind::Layer(layer) => Some(&**layer),
            _ => None,
        }
    }

    /// The layer, or the stream back if it is not one.
    pub(super) fn into_layer(self) -> Result<Box<dyn Layer>, Stream> {
        match self.0 {
            StreamKind::Layer(layer) => Ok(layer),
            kind => Err(Stream(kind)),
        }
    }
}

impl From<TcpStream> for Stream {
    fn from(stream: TcpStream) -> Self {
        Stream(StreamKind::Tcp(stream))
    }
}

impl From<UnixStream> for Stream {
    fn from(stream: UnixStream) -> Self {
        Stream(StreamKind::Unix(stream))
    }
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            StreamKind::Tcp(stream) => stream.fmt(f),
            StreamKind::Unix(stream) => stream.fmt(f),
            #[cfg(feature = "tls-no-provider")]
            StreamKind::Layer(layer) => layer.fmt(f),
        }
    }
}

/// Delegates one I/O call to the socket.
macro_rules! delegate {
    ($self:ident, $stream:ident => $call:expr) => {
        match &mut $self.get_mut().0 {
            StreamKind::Tcp($stream) => $call,
            StreamKind::Unix($stream) => $call,
            #[cfg(feature = "tls-no-provider")]
            StreamKind::Layer($stream) => {
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
            StreamKind::Tcp(stream) => stream.is_write_vectored(),
            StreamKind::Unix(stream) => stream.is_write_vectored(),
            #[cfg(feature = "tls-no-provider")]
            StreamKind::Layer(layer) => layer.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_shutdown(cx))
    }
}
