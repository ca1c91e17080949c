//! [`Upgraded`]: an upgraded stream, with the bytes the server read past
//! the upgrade request coming first, and its reads into dormant's pool
//! taken only once bytes arrived ([`read_pooled`](Upgraded::read_pooled)).

use std::fmt;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use crate::pool::{self, PoolStats, PooledBytes};
use crate::rewind::Rewind;
use crate::transport::Stream;

/// An upgraded stream: the socket, with the bytes the server read past the
/// upgrade request coming first.
///
/// It implements tokio's [`AsyncRead`] and [`AsyncWrite`], so any protocol
/// library over those runs on it. [`read_pooled`](Self::read_pooled) reads
/// without holding a buffer while it waits. Once the leftover bytes are
/// read, their allocation is freed: an idle `Upgraded` holds its socket and
/// nothing else.
pub struct Upgraded {
    // Seen by the lot (`lot.rs`), which puts the stream to sleep only once
    // no byte read already waits.
    pub(super) stream: Stream,
    pub(super) leftover: Rewind<Bytes>,
}

impl Upgraded {
    pub(super) fn new(stream: Stream, leftover: Bytes) -> Self {
        Upgraded {
            stream,
            leftover: Rewind::new(leftover),
        }
    }

    /// Waits until bytes arrive, then reads them into a buffer from
    /// dormant's pool. `Ok(None)` is the end of the stream (the peer
    /// closed).
    ///
    /// The buffer is taken only once the socket is readable, and goes back
    /// to the pool when the returned [`PooledBytes`] are dropped: drop them
    /// before waiting again and a waiting stream holds no buffer. The bytes
    /// the server read past the upgrade request come first. Each call
    /// returns at most one buffer's worth (4 KiB).
    ///
    /// # Errors
    ///
    /// When reading from the socket fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while waiting, no byte was read.
    pub async fn read_pooled(&mut self) -> io::Result<Option<PooledBytes>> {
        if !self.leftover.is_empty() {
            let mut buf = pool::upgraded().take();
            let n = self.leftover.take_into(&mut buf);
            return Ok(Some(PooledBytes::new(buf, n)));
        }
        let stream = &mut self.stream;
        poll_fn(|cx| {
            // `poll_read_ready` keeps the waker in tokio's per-socket
            // state; `readable()` would add a waiter node to the task.
            std::task::ready!(stream.poll_read_ready(cx))?;
            // Taken only now, after the wait; back to the pool at once if
            // the readiness was spurious.
            let mut buf = pool::upgraded().take();
            let mut read = ReadBuf::new(&mut buf);
            std::task::ready!(Pin::new(&mut *stream).poll_read(cx, &mut read))?;
            Poll::Ready(Ok(match read.filled().len() {
                0 => None,
                n => Some(PooledBytes::new(buf, n)),
            }))
        })
        .await
    }

    /// [`read_pooled`](Self::read_pooled) without waiting:
    /// `Err(WouldBlock)` if no bytes are there now (as far as tokio knows:
    /// a stream just handed to tokio has not been seen readable yet, and
    /// must wait once).
    #[cfg(feature = "ws")]
    pub(crate) async fn read_pooled_now(&mut self) -> io::Result<Option<PooledBytes>> {
        if !self.leftover.is_empty() {
            return self.read_pooled().await;
        }
        let stream = &mut self.stream;
        poll_fn(|cx| {
            let mut buf = pool::upgraded().take();
            let mut read = ReadBuf::new(&mut buf);
            Poll::Ready(match Pin::new(&mut *stream).poll_read(cx, &mut read) {
                Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
                Poll::Ready(Err(error)) => Err(error),
                Poll::Ready(Ok(())) => Ok(match read.filled().len() {
                    0 => None,
                    n => Some(PooledBytes::new(buf, n)),
                }),
            })
        })
        .await
    }

    /// Returns the socket.
    pub fn get_ref(&self) -> &Stream {
        &self.stream
    }

    /// Returns the socket and the leftover bytes not read yet.
    pub fn into_inner(self) -> (Stream, Bytes) {
        (self.stream, self.leftover.into_inner())
    }
}

/// A stream with no leftover bytes.
impl From<Stream> for Upgraded {
    fn from(stream: Stream) -> Self {
        Upgraded::new(stream, Bytes::new())
    }
}

/// A stream with no leftover bytes.
impl From<TcpStream> for Upgraded {
    fn from(stream: TcpStream) -> Self {
        Upgraded::from(Stream::from(stream))
    }
}

/// A stream with no leftover bytes.
impl From<UnixStream> for Upgraded {
    fn from(stream: UnixStream) -> Self {
        Upgraded::from(Stream::from(stream))
    }
}

impl fmt::Debug for Upgraded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upgraded")
            .field("stream", &self.stream)
            .field("leftover", &self.leftover.get_ref().len())
            .finish()
    }
}

impl AsyncRead for Upgraded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.leftover.is_empty() {
            self.leftover.serve(buf);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upgraded {
    crate::transport::forward_write!(stream);
}

/// Figures of the buffer pool upgraded streams read into
/// ([`Upgraded::read_pooled`]). That pool is process-wide, so that a
/// handed-off stream keeps no reference to the server it left; these
/// figures cover every server of the process. `in_use` counts the
/// [`PooledBytes`] alive now: idle streams hold none.
pub fn pool_stats() -> PoolStats {
    pool::upgraded().stats()
}
