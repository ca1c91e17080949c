//! A TLS stream inside the erased [`Stream`], which an upgrade hands over:
//! the [`Layer`] it is to `stream.rs` (which names no transport above the
//! sockets), the way back to its own type, and the public conversions
//! between the two.

use std::any::Any;
use std::io;
use std::task::{Context, Poll};

use tokio::net::{TcpStream, UnixStream};

use super::TlsStream;
use crate::transport::stream::{Layer, Stream};

impl Layer for TlsStream<Stream> {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_buffered() {
            return Poll::Ready(Ok(()));
        }
        self.get_ref().poll_read_ready(cx)
    }

    fn has_buffered(&self) -> bool {
        TlsStream::has_buffered(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl Stream {
    /// Returns the TLS session, if the stream is one; its transport is a `Stream`
    /// again.
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
    )]
    pub fn as_tls(&self) -> Option<&TlsStream<Stream>> {
        self.layer()?.as_any().downcast_ref()
    }

    /// A TLS session over a TCP or Unix socket.
    pub(super) fn from_tls(stream: TlsStream<Stream>) -> Self {
        Stream::from_layer(Box::new(stream))
    }

    /// The TLS session, or the stream back if it is not one.
    pub(super) fn into_tls(self) -> Result<TlsStream<Stream>, Stream> {
        let layer = self.into_layer()?;
        if !layer.as_any().is::<TlsStream<Stream>>() {
            return Err(Stream::from_layer(layer));
        }
        let tls = layer.into_any().downcast::<TlsStream<Stream>>();
        Ok(*tls.expect("the layer is a TLS stream"))
    }
}

/// The public conversions between a TLS stream over the socket `$io` and
/// the erased stream, which `$into` takes back to that socket.
macro_rules! conversions {
    ($io:ty, $into:path) => {
        #[cfg_attr(
            docsrs,
            doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
        )]
        impl From<TlsStream<$io>> for Stream {
            fn from(stream: TlsStream<$io>) -> Self {
                Stream::from_tls(stream.map_io(Stream::from))
            }
        }

        #[cfg_attr(
            docsrs,
            doc(cfg(any(feature = "tls", feature = "tls-ring", feature = "tls-no-provider")))
        )]
        impl TryFrom<Stream> for TlsStream<$io> {
            type Error = Stream;

            fn try_from(stream: Stream) -> Result<Self, Stream> {
                let tls = stream.into_tls()?;
                tls.try_map_io($into).map_err(Stream::from_tls)
            }
        }
    };
}

conversions!(TcpStream, Stream::into_tcp);
conversions!(UnixStream, Stream::into_unix);
