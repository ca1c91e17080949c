//! `H2Io`: the transport hyper's HTTP/2 server sees. Every byte passes
//! the watcher (`wire::Watch`) both ways; at a wake, the fresh connection
//! reads the prelude first and its answer is settled before the client's
//! bytes reach it (see `wire`).
//!
//! Reads go through a pool buffer, taken after readiness and given back
//! once h2 has copied its bytes (I4): the watcher must see, and may
//! remove, frames before h2 does, and hyper's read cursor cannot be read
//! back without `unsafe`. So a read costs one copy more than hyper's own.
//!
//! Every read makes progress or waits: it hands h2 bytes, or takes bytes
//! from the replay or the socket (the watcher may keep them all: the
//! start of a frame, up to `HELD` bytes of a frame it holds back), or
//! returns `Pending` once the transport's readiness says nothing came, or
//! the end or an error. What the watcher holds is no byte to read: it
//! waits for the socket like the rest of the frame, and a connection
//! holding part of a frame is not quiet, so it does not sleep (tests:
//! tests/http2_sleep.rs, `a_frame_in_pieces_does_not_stop_another_connection`).

use std::io;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, ready};

use hyper::rt::ReadBufCursor;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::lot::Parkable;
use crate::pool::Pool;
use crate::rewind::Replay;
use crate::rewind::{Fresh, Rewind};
use crate::transport::Seam;
use crate::wire::{Asleep, HELD, Unsettled, Watch};

/// The room at the front of a read buffer for what the watcher held of a
/// frame split across reads (see `Watch::inbound`).
const HEAD_ROOM: usize = HELD;

/// Room for what a fresh connection answers the prelude with (its SETTINGS,
/// a connection WINDOW_UPDATE, the ACK of the replayed SETTINGS: ~70 bytes
/// with hyper's settings), so that holding it back allocates once.
const ANSWER_ROOM: usize = 128;

/// What the driver and the transport hyper sees share.
#[derive(Debug)]
pub(super) struct WireState {
    pub(super) watch: Watch,
    /// h2's last read found nothing: it waits for the client.
    pub(super) read_blocked: bool,
    /// Bytes were written since the last flush.
    pub(super) unflushed: bool,
    /// The driver asks for the fence (`Watch::fence`), written at a flush
    /// between h2's frames once no other SETTINGS is in flight. (A restore,
    /// `Watch::restore`, is written the same way when the watch says.)
    pub(super) fence_wanted: bool,
}

impl WireState {
    pub(super) fn new(watch: Watch) -> Mutex<WireState> {
        Mutex::new(WireState {
            watch,
            read_blocked: false,
            unflushed: false,
            fence_wanted: false,
        })
    }
}

/// Locks the wire. Within one task the lock is never contended; a panic
/// while holding it leaves counters, at worst, stale.
pub(super) fn lock(wire: &Mutex<WireState>) -> MutexGuard<'_, WireState> {
    wire.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh connection being brought to where a sleeping one was.
struct Waking<'a> {
    asleep: &'a Asleep,
    prelude: Vec<u8>,
    read: usize,
    /// What h2 wrote in answer to the prelude, held back until settled.
    written: Vec<u8>,
    /// h2 came back for more after the prelude, and was told to wait once
    /// so that it answers first.
    answering: bool,
}

/// hyper's transport for an HTTP/2 connection.
pub(super) struct H2Io<'a, T> {
    stream: &'a mut T,
    wire: &'a Mutex<WireState>,
    pool: &'a Pool,
    /// Bytes read before hyper was built; they pass the watcher as the
    /// socket's do.
    replay: Rewind<Replay>,
    /// Bytes that passed the watcher, not yet copied by h2.
    input: Rewind<Fresh>,
    /// Frames of dormant's, written before h2's next bytes.
    output: Vec<u8>,
    waking: Option<Waking<'a>>,
}

impl<'a, T> H2Io<'a, T>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    /// The transport of a connection that starts with `replay`, after a
    /// sleep if `asleep` says how it slept.
    pub(super) fn new(
        stream: &'a mut T,
        replay: Replay,
        wire: &'a Mutex<WireState>,
        pool: &'a Pool,
        asleep: Option<&'a Asleep>,
    ) -> Self {
        H2Io {
            stream,
            wire,
            pool,
            replay: Rewind::new(replay),
            input: Rewind::default(),
            output: Vec::new(),
            waking: asleep.map(|asleep| Waking {
                asleep,
                prelude: asleep.prelude(),
                read: 0,
                written: Vec::with_capacity(ANSWER_ROOM),
                answering: false,
            }),
        }
    }

    /// Reads of a waking connection: the prelude, then one `Pending` for h2
    /// to answer it, then the answer settled; `None` once awake.
    fn poll_waking(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBufCursor<'_>,
    ) -> Option<Poll<io::Result<()>>> {
        let waking = self.waking.as_mut()?;
        if waking.read < waking.prelude.len() {
            let n = buf.remaining().min(waking.prelude.len() - waking.read);
            buf.put_slice(&waking.prelude[waking.read..waking.read + n]);
            waking.read += n;
            return Some(Poll::Ready(Ok(())));
        }
        if !waking.answering {
            // h2 answers (its SETTINGS, the ACK of the replayed ones, its
            // connection WINDOW_UPDATE) when a read finds nothing, before
            // it reads again: the client's bytes, which may carry more
            // DATA than its initial window, wait until then.
            waking.answering = true;
            cx.waker().wake_by_ref();
            return Some(Poll::Pending);
        }
        let settled = waking.asleep.settle(&waking.written);
        self.waking = None;
        match settled {
            Ok(answer) => {
                lock(self.wire).watch.outbound(&answer);
                self.output = answer;
                None
            }
            Err(Unsettled) => Some(Poll::Ready(Err(io::Error::other(
                "a woken HTTP/2 connection grants the client less than it had",
            )))),
        }
    }

    /// Writes what h2 wrote through the window gate (`Watch::route`), after
    /// what the gate let go before (written first, by the caller): all of
    /// it is taken, and what the gate lets go is written as far as the
    /// transport takes it now, the rest at the next write or flush.
    fn poll_gated<'b>(
        &mut self,
        cx: &mut Context<'_>,
        bufs: impl IntoIterator<Item = &'b [u8]>,
    ) -> Poll<io::Result<usize>> {
        let mut wire = lock(self.wire);
        let mut n = 0;
        for buf in bufs {
            wire.watch.route(buf, &mut self.output);
            n += buf.len();
        }
        wire.unflushed = true;
        drop(wire);
        if let Poll::Ready(Err(error)) = self.poll_output(cx) {
            return Poll::Ready(Err(error));
        }
        Poll::Ready(Ok(n))
    }

    /// Writes dormant's frames, and in a gated connection what the gate let
    /// go.
    fn poll_output(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.output.is_empty() {
            let n = ready!(Pin::new(&mut *self.stream).poll_write(cx, &self.output))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            lock(self.wire).unflushed = true;
            self.output.drain(..n);
        }
        // Gives the memory back: these are a few frames now and then.
        self.output = Vec::new();
        Poll::Ready(Ok(()))
    }
}

crate::transport::unpin_io!(impl['a, T: Seam] Read for H2Io<'a, T>);
crate::transport::unpin_io!(impl['a, T: AsyncRead + AsyncWrite + Unpin] Write for H2Io<'a, T>);

/// hyper's reads (see `unpin_io!`).
impl<T: Seam> H2Io<'_, T> {
    fn poll_read_unpin(
        &mut self,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(poll) = self.poll_waking(cx, &mut buf) {
            return poll;
        }
        loop {
            if !self.input.is_empty() {
                // Back to the pool once copied, before h2 waits again (I4).
                self.input.serve_hyper(&mut buf);
                return Poll::Ready(Ok(()));
            }
            if self.replay.is_empty() && Parkable::poll_read_ready(&*self.stream, cx).is_pending() {
                // Nothing to read: no buffer taken, no system call made.
                lock(self.wire).read_blocked = true;
                return Poll::Pending;
            }
            let mut bytes = self.pool.take();
            let n = if self.replay.is_empty() {
                let mut read = ReadBuf::new(&mut bytes[HEAD_ROOM..]);
                match Pin::new(&mut *self.stream).poll_read(cx, &mut read) {
                    Poll::Ready(Ok(())) => read.filled().len(),
                    Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                    Poll::Pending => {
                        lock(self.wire).read_blocked = true;
                        return Poll::Pending;
                    }
                }
            } else {
                self.replay.take_into(&mut bytes[HEAD_ROOM..])
            };
            let mut wire = lock(self.wire);
            wire.read_blocked = false;
            if n == 0 {
                // The end of the stream: h2 sees it as such.
                return Poll::Ready(Ok(()));
            }
            let len = wire.watch.inbound(&mut bytes, HEAD_ROOM, HEAD_ROOM + n);
            if wire.watch.gated() {
                // A WINDOW_UPDATE may have opened the window for held
                // frames: they go out at h2's next write or flush.
                wire.watch.release(&mut self.output);
                wire.unflushed |= !self.output.is_empty();
            }
            if len > 0 {
                self.input = Rewind::new(Some((bytes, 0..len)));
            }
        }
    }
}

/// hyper's writes (see `unpin_io!`).
impl<T> H2Io<'_, T>
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    fn poll_write_unpin(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(waking) = &mut self.waking {
            waking.written.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(self.poll_output(cx))?;
        if lock(self.wire).watch.gated() {
            return self.poll_gated(cx, [buf]);
        }
        let mut buf = buf;
        // One lock for the write: it is never contended (see `lock`).
        let mut wire = lock(self.wire);
        match wire.watch.early_fence_at([buf]) {
            // The fence first, through dormant's output.
            Some(0) => {
                if let Some(fence) = wire.watch.early_fence() {
                    self.output.extend_from_slice(&fence);
                    wire.unflushed = true;
                }
                drop(wire);
                ready!(self.poll_output(cx))?;
                wire = lock(self.wire);
            }
            // What comes before it is written first.
            Some(at) => buf = &buf[..at],
            None => {}
        }
        match wire.watch.goaway_field_at(buf) {
            // The field goes through dormant's output, raised if it must.
            Some(0) if buf.len() >= 4 => {
                let mut field = [buf[0], buf[1], buf[2], buf[3]];
                wire.watch.raise_goaway(&mut field);
                wire.watch.outbound(&field);
                wire.unflushed = true;
                self.output.extend_from_slice(&field);
                return Poll::Ready(Ok(4));
            }
            // What comes before it is written first.
            Some(at) if at > 0 => buf = &buf[..at],
            _ => {}
        }
        let n = ready!(Pin::new(&mut *self.stream).poll_write(cx, buf))?;
        wire.watch.outbound(&buf[..n]);
        wire.unflushed = true;
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored_unpin(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let Some(waking) = &mut self.waking {
            let mut n = 0;
            for buf in bufs {
                waking.written.extend_from_slice(buf);
                n += buf.len();
            }
            return Poll::Ready(Ok(n));
        }
        let wire = lock(self.wire);
        if wire.watch.gated() {
            drop(wire);
            ready!(self.poll_output(cx))?;
            return self.poll_gated(cx, bufs.iter().map(|b| &**b));
        }
        let slices = || bufs.iter().map(|b| &**b);
        if wire.watch.goaway_in(slices()) || wire.watch.early_fence_at(slices()).is_some() {
            // Rare: a GOAWAY of a woken connection, or an early fence
            // (`Watch::fence_early`), written slice by slice.
            drop(wire);
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &**b);
            return self.poll_write_unpin(cx, first);
        }
        drop(wire);
        ready!(self.poll_output(cx))?;
        let n = ready!(Pin::new(&mut *self.stream).poll_write_vectored(cx, bufs))?;
        let mut wire = lock(self.wire);
        let mut left = n;
        for buf in bufs {
            let part = left.min(buf.len());
            wire.watch.outbound(&buf[..part]);
            left -= part;
            if left == 0 {
                break;
            }
        }
        wire.unflushed = true;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored_unpin(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush_unpin(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.waking.is_some() {
            return Poll::Ready(Ok(()));
        }
        {
            let mut wire = lock(self.wire);
            if wire.watch.may_write() {
                if wire.fence_wanted {
                    if let Some(fence) = wire.watch.fence() {
                        wire.fence_wanted = false;
                        self.output.extend_from_slice(&fence);
                    }
                }
                if let Some(restore) = wire.watch.restore() {
                    self.output.extend_from_slice(&restore);
                }
                if let Some(replies) = wire.watch.replies() {
                    self.output.extend_from_slice(&replies);
                }
            }
            wire.unflushed |= !self.output.is_empty();
        }
        ready!(self.poll_output(cx))?;
        ready!(Pin::new(&mut *self.stream).poll_flush(cx))?;
        lock(self.wire).unflushed = false;
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown_unpin(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_output(cx))?;
        Pin::new(&mut *self.stream).poll_shutdown(cx)
    }
}
