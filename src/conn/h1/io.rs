//! `ConnIo`: the transport hyper sees while an HTTP/1 connection is
//! ACTIVE (HTTP/2 has its own, `conn::h2`).
//!
//! It does four things on top of the transport:
//!
//! 1. **Replay.** The bytes the driver read while the connection was parked
//!    (a pool buffer, and any unparsed bytes carried over from the previous
//!    hyper connection) are handed to hyper's first reads before the socket
//!    is touched (a [`Rewind`], as every read-ahead in dormant). The pool
//!    buffer goes back to the pool the moment hyper has copied its last
//!    byte, usually in the same poll that woke the connection.
//! 2. **Readiness reads.** After the replay, reads go to the transport's
//!    `poll_read`, which waits for the readiness the parking lot reports
//!    and then reads without blocking.
//! 3. **Idle bookkeeping.** It records whether the last socket read found
//!    nothing (`WouldBlock`) and whether every write hyper issued has been
//!    flushed. The driver uses both to decide that hyper sits between
//!    messages with nothing buffered on the way out (see `conn`).
//! 4. **The peer's close while a request is answered.**
//!    hyper's default is to keep reading while a handler runs, only to
//!    notice a client that goes away and drop its handler. That read needs
//!    room in hyper's read buffer, and the request just parsed still holds
//!    slices of the old one, so hyper allocated a fresh 8 KiB buffer for
//!    every request: half of a hello request's allocations, and a
//!    noticeable share of its instructions (BENCHMARKS.md, "Allocations
//!    per request" and "Instructions per request"). dormant turns
//!    that read off (`half_close(true)`) and looks for the close itself,
//!    in `poll_flush`, which hyper calls on every poll of the connection:
//!    while a request whose body has been read waits for its answer, it
//!    asks the transport (`Seam::poll_peer`: a peek on TCP, a small read
//!    on a Unix socket, whose bytes are replayed to hyper first). End of
//!    stream or an error fails the flush, which ends the connection and
//!    drops the handler, as hyper's read would; bytes (a pipelined request)
//!    are left for hyper, which reads them after the response. The check
//!    costs no system call until the socket is readable. One difference
//!    remains: hyper did not look while its buffer held a pipelined
//!    request, dormant cannot see that buffer, so a client that pipelines
//!    requests and then half-closes has the one in flight cancelled rather
//!    than the last.
//! 5. **Leaving for hyper's upgrades.** A connection whose handler accepted
//!    an upgrade through hyper's `OnUpgrade` (`hyper::upgrade::on`, axum's
//!    `WebSocketUpgrade`) is handed over by hyper itself, inside a box of
//!    its own around this `ConnIo`. Its socket, registered in the server's
//!    parking lot, moves to tokio at the first read or write after the
//!    handler's response, so that the stream works on after the server
//!    (and its lot) stopped, as hyper's own server's do.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::sync::Arc;

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::rt::TokioIo;

use crate::rewind::{Replay, Rewind};
use crate::track::Tracker;
use crate::transport::{Peer, Seam, Stream};

/// hyper's transport for an ACTIVE connection.
#[derive(Debug)]
pub(crate) struct ConnIo<T> {
    stream: SocketPlace<T>,
    replay: Rewind<Replay>,
    /// `None` once the socket left the lot for hyper's `OnUpgrade`: the
    /// stream hyper hands over keeps nothing of the connection's record.
    tracker: Option<Arc<Tracker>>,
    /// A peek found bytes hyper has not read yet: no need to look again
    /// until it has.
    unread: bool,
}

/// Where the connection's socket is.
#[derive(Debug)]
enum SocketPlace<T> {
    /// Registered in the parking lot, as the driver serves it.
    Lot(TokioIo<T>),
    /// Left the lot for tokio: the connection went to hyper's `OnUpgrade`
    /// (`hyper::upgrade::on`, axum's `WebSocketUpgrade`), which boxes this
    /// `ConnIo` and hands it to the handler. It is the handler's from then
    /// on, as with hyper's own server, and outlives the server's lot.
    Left(TokioIo<Stream>),
    /// Leaving failed (out of memory for the tokio registration): the
    /// socket is closed.
    Gone,
}

/// Runs `$op` on the socket wherever it is.
macro_rules! on_socket {
    ($served:expr, $io:ident => $op:expr, $gone:expr) => {
        match $served {
            SocketPlace::Lot($io) => $op,
            SocketPlace::Left($io) => $op,
            SocketPlace::Gone => $gone,
        }
    };
}

fn gone() -> io::Error {
    io::Error::other("the upgraded connection could not leave the server's parking lot")
}

impl<T: Seam> ConnIo<T> {
    /// `tracker` learns whether the last read found the socket empty and
    /// whether a write is waiting for its flush. A request in flight ends
    /// when the peer closes (see the module docs).
    pub(crate) fn new(stream: T, replay: Replay, tracker: Arc<Tracker>) -> Self {
        ConnIo {
            stream: SocketPlace::Lot(TokioIo::new(stream)),
            replay: Rewind::new(replay),
            tracker: Some(tracker),
            unread: false,
        }
    }

    /// Leaves the lot for tokio once the handler accepted an upgrade
    /// through hyper's `OnUpgrade`: the first read or write after its
    /// response moves the socket (hyper writes that response through here
    /// too), so that the stream hyper hands over needs nothing of the
    /// server.
    #[inline]
    fn leave_if_handed(&mut self) {
        if self.tracker.as_ref().is_some_and(|t| t.handed_to_hyper()) {
            self.leave();
        }
    }

    /// Before a write: leaves the lot if the connection was handed to
    /// hyper's upgrade, and notes bytes waiting for their flush.
    #[inline]
    fn will_write(&mut self) {
        self.leave_if_handed();
        if let Some(tracker) = &self.tracker {
            tracker.set_unflushed(true);
        }
    }

    #[cold]
    fn leave(&mut self) {
        let SocketPlace::Lot(io) = std::mem::replace(&mut self.stream, SocketPlace::Gone) else {
            return;
        };
        if let Some(tracker) = self.tracker.take() {
            // The driver must never find it quiet, and take apart what is
            // no longer its own: to it, the connection stays unflushed
            // until hyper's future ends with the hand-off.
            tracker.set_unflushed(true);
        }
        match io.into_inner().into_stream() {
            Ok(stream) => self.stream = SocketPlace::Left(TokioIo::new(stream)),
            Err(error) => tracing::debug!(%error, "upgrade hand-off to hyper failed"),
        }
    }

    /// Asks the transport for the peer's close (see the module docs):
    /// `Err` when it has closed or failed, `Ok` otherwise.
    fn poll_peer_open(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let SocketPlace::Lot(stream) = &mut self.stream else {
            // Upgraded: the handler's from now on.
            return Ok(());
        };
        match stream.inner_mut().poll_peer(cx) {
            Poll::Ready(Ok(Peer::Closed)) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the client closed the connection before the response was complete",
            )),
            Poll::Ready(Ok(Peer::Unread)) => {
                self.unread = true;
                Ok(())
            }
            Poll::Ready(Ok(Peer::ReadAhead(bytes))) => {
                // Checked empty before the look: these come first (I2), and
                // no further look is made until hyper has read them.
                debug_assert!(self.replay.is_empty());
                self.replay = Rewind::new(Replay {
                    carried: bytes,
                    fresh: None,
                });
                if let Some(tracker) = &self.tracker {
                    tracker.set_read_blocked(false);
                }
                Ok(())
            }
            Poll::Ready(Err(error)) => Err(error),
            // Not readable: the socket now wakes this task when it is.
            Poll::Pending => Ok(()),
        }
    }

    /// The transport and the bytes not handed to hyper yet; `None` once
    /// the socket left the lot for hyper's `OnUpgrade`.
    pub(crate) fn into_inner(self) -> Option<(T, Replay)> {
        match self.stream {
            SocketPlace::Lot(stream) => Some((stream.into_inner(), self.replay.into_inner())),
            SocketPlace::Left(_) | SocketPlace::Gone => None,
        }
    }
}

crate::transport::unpin_io!(impl[T: Seam] Read for ConnIo<T>);
crate::transport::unpin_io!(impl[T: Seam] Write for ConnIo<T>);

/// hyper's reads and writes (see `unpin_io!`).
impl<T: Seam> ConnIo<T> {
    fn poll_read_unpin(
        &mut self,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        // Most reads find no replay: checked here, without a call.
        if !self.replay.is_empty() && self.replay.serve_hyper(&mut buf) > 0 {
            if let Some(tracker) = &self.tracker {
                tracker.set_read_blocked(false);
                tracker.bytes_read();
            }
            return Poll::Ready(Ok(()));
        }
        self.leave_if_handed();
        let res = on_socket!(&mut self.stream, s => Pin::new(s).poll_read(cx, buf), Poll::Ready(Err(gone())));
        if let Some(tracker) = &self.tracker {
            tracker.set_read_blocked(res.is_pending());
            if let Poll::Ready(Ok(())) = res {
                // Bytes, or the end of the stream, which ends the
                // connection anyway.
                tracker.bytes_read();
                self.unread = false;
            }
        }
        res
    }

    fn poll_write_unpin(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.will_write();
        on_socket!(&mut self.stream, s => Pin::new(s).poll_write(cx, buf), Poll::Ready(Err(gone())))
    }

    fn poll_write_vectored_unpin(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.will_write();
        on_socket!(&mut self.stream, s => Pin::new(s).poll_write_vectored(cx, bufs), Poll::Ready(Err(gone())))
    }

    fn is_write_vectored_unpin(&self) -> bool {
        on_socket!(&self.stream, s => s.is_write_vectored(), false)
    }

    fn poll_flush_unpin(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.leave_if_handed();
        let res =
            on_socket!(&mut self.stream, s => Pin::new(s).poll_flush(cx), Poll::Ready(Err(gone())));
        if let (Poll::Ready(Ok(())), Some(tracker)) = (&res, &self.tracker) {
            tracker.set_unflushed(false);
            if !self.unread && self.replay.is_empty() && tracker.awaits_response() {
                return Poll::Ready(self.poll_peer_open(cx));
            }
        }
        res
    }

    fn poll_shutdown_unpin(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.leave_if_handed();
        on_socket!(&mut self.stream, s => Pin::new(s).poll_shutdown(cx), Poll::Ready(Err(gone())))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tokio::io::ReadBuf;

    use crate::pool::Pool;
    use crate::rewind::Replay;
    use crate::rewind::Rewind;

    /// Carried bytes, then a read's pool buffer, served in pieces to each
    /// kind of reader; the pool buffer goes back with the last byte.
    #[test]
    fn serves_in_order_and_lets_go_with_the_last_byte() {
        let pool = Pool::default();
        let mut buf = pool.take();
        buf[10..13].copy_from_slice(b"cde");
        let mut rewind = Rewind::new(Replay {
            carried: Bytes::from_static(b"ab"),
            fresh: Some((buf, 10..13)),
        });
        let mut two = [0; 2];
        assert_eq!(rewind.take_into(&mut two), 2);
        assert_eq!(&two, b"ab");
        let mut storage = [0; 2];
        let mut read = ReadBuf::new(&mut storage);
        assert_eq!(rewind.serve(&mut read), 2);
        assert_eq!(read.filled(), b"cd");
        assert_eq!(pool.stats().in_use, 1);
        assert_eq!(rewind.take_into(&mut two), 1);
        assert_eq!(two[0], b'e');
        assert!(rewind.is_empty());
        assert_eq!(pool.stats().in_use, 0, "back to the pool once served");
        assert_eq!(rewind.take_into(&mut two), 0);
    }
}
