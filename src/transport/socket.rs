//! [`Socket`]: a TCP or Unix socket as dormant serves it, registered with
//! the parking lot for its whole life instead of with tokio.
//!
//! Reads and writes are the socket's own non-blocking system calls, made
//! when the lot's [`Registration`] says the socket is ready, exactly as
//! tokio's `PollEvented` does: `WouldBlock`, or a read or write shorter
//! than asked, clears the readiness, and the task waits for the next
//! event. Parked, the socket is its fd alone.
//!
//! hyper reads into memory it has not initialised, and the library has
//! no `unsafe`: such a read goes through a per-thread scratch buffer
//! (initialised once) and is copied out, which costs a copy of the bytes
//! read instead of zeroing hyper's whole buffer before each read. Reads
//! into initialised memory (a pool buffer, TLS records) go straight to the
//! socket.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::lot::{Direction, Parkable, Registration, Wrote};

/// The most bytes a read into uninitialised memory asks for.
const SCRATCH: usize = 16 * 1024;

thread_local! {
    static SCRATCH_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// What [`Socket`] needs of a std socket.
pub trait Sock: AsFd + fmt::Debug + Send + Sync + Unpin + Sized + 'static {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write(&self, buf: &[u8]) -> io::Result<usize>;
    fn write_vectored(&self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize>;
    fn shutdown_write(&self) -> io::Result<()>;
    /// [`Parkable::peer_closed`].
    fn peer_closed(&self) -> Option<io::Result<bool>>;
}

/// [`Sock`]'s system calls for a std socket that implements `Read` and
/// `Write` through a shared reference (as TCP and Unix sockets do).
macro_rules! sock_io {
    () => {
        fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
            std::io::Read::read(&mut &*self, buf)
        }

        fn write(&self, buf: &[u8]) -> std::io::Result<usize> {
            std::io::Write::write(&mut &*self, buf)
        }

        fn write_vectored(&self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
            std::io::Write::write_vectored(&mut &*self, bufs)
        }

        fn shutdown_write(&self) -> std::io::Result<()> {
            self.shutdown(std::net::Shutdown::Write)
        }
    };
}
pub(super) use sock_io;

/// A socket served through the lot: its fd (closed first when dropped,
/// which takes it out of the lot's poll), then its registration (which
/// frees its slot).
pub struct Socket<S> {
    pub(super) io: S,
    pub(super) registration: Registration,
}

impl<S: fmt::Debug> fmt::Debug for Socket<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.io.fmt(f)
    }
}

impl<S: Sock> Socket<S> {
    pub(super) fn new(io: S, registration: Registration) -> Self {
        Socket { io, registration }
    }

    /// Makes the system call `op` on the socket once the lot says it is
    /// ready in `dir`; `short` says whether its result leaves the socket
    /// not ready (see `Registration::poll_io`).
    fn poll_io<R>(
        &self,
        dir: Direction,
        cx: &mut Context<'_>,
        mut op: impl FnMut(&S) -> io::Result<R>,
        short: impl Fn(&R) -> bool,
    ) -> Poll<io::Result<R>> {
        let io = &self.io;
        (self.registration).poll_io(io.as_fd(), dir, cx, || op(io), short)
    }

    /// Takes the socket out of the lot's poll and frees its slot: it
    /// leaves the lot for good.
    pub(super) fn leave(self) -> io::Result<S> {
        let Socket { io, registration } = self;
        registration.deregister(io.as_fd())?;
        Ok(io)
    }
}

/// Reads into `buf`, through the scratch buffer if its unfilled part is
/// not initialised.
fn read_into<S: Sock>(io: &S, buf: &mut ReadBuf<'_>) -> io::Result<usize> {
    if buf.initialized().len() == buf.capacity() {
        let n = io.read(buf.initialize_unfilled())?;
        buf.advance(n);
        return Ok(n);
    }
    SCRATCH_BUF.with_borrow_mut(|scratch| {
        if scratch.is_empty() {
            scratch.resize(SCRATCH, 0);
        }
        let want = buf.remaining().min(SCRATCH);
        let n = io.read(&mut scratch[..want])?;
        buf.put_slice(&scratch[..n]);
        Ok(n)
    })
}

impl<S: Sock> AsyncRead for Socket<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let want = buf.remaining().min(SCRATCH);
        let read = self.poll_io(
            Direction::Read,
            cx,
            |io| read_into(io, buf),
            // The end of the stream stays readable.
            |&n| n > 0 && n < want,
        );
        ready!(read)?;
        Poll::Ready(Ok(()))
    }
}

impl<S: Sock> AsyncWrite for Socket<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_io(Direction::Write, cx, |io| io.write(buf), |&n| n < buf.len())
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        self.poll_io(
            Direction::Write,
            cx,
            |io| io.write_vectored(bufs),
            |&n| n < len,
        )
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.io.shutdown_write())
    }
}

impl<S: Sock> Parkable for Socket<S> {
    type Dormant = S;

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (self.registration)
            .poll_ready(Direction::Read, cx)
            .map(|_| Ok(()))
    }

    fn read_ready(&self) -> bool {
        self.registration.read_ready()
    }

    fn into_dormant(self) -> Result<(S, Registration), Self> {
        Ok((self.io, self.registration))
    }

    fn from_dormant(io: S, registration: Registration) -> Self {
        Socket { io, registration }
    }

    fn peer_closed(dormant: &S) -> Option<io::Result<bool>> {
        dormant.peer_closed()
    }

    fn read_dormant(dormant: &mut S, buf: &mut [u8]) -> Option<io::Result<usize>> {
        Some(dormant.read(buf))
    }

    fn send_dormant(dormant: &mut S, bytes: &[u8]) -> io::Result<()> {
        match dormant.write(bytes)? {
            n if n == bytes.len() => Ok(()),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_dormant(dormant: &mut S, bytes: &[u8]) -> io::Result<Wrote> {
        let taken = match dormant.write(bytes) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            res => res?,
        };
        Ok(Wrote { taken, held: false })
    }

    fn close_dormant(dormant: S, goodbye: &[u8]) {
        if !goodbye.is_empty() {
            // Non-blocking: a socket whose buffer is full closes without it.
            let _ = dormant.write(goodbye);
        }
    }
}
