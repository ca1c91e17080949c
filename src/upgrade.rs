//! HTTP/1.1 upgrades (`101 Switching Protocols`, `CONNECT`): the raw
//! connection handed to the handler, and upgraded streams that sleep in the
//! parking lot while idle.
//!
//! # Two ways to upgrade
//!
//! dormant serves hyper's HTTP/1 connections with hyper's upgrades on, so
//! both work on every transport and from every rung:
//!
//! - **hyper's `hyper::upgrade::on`**, and everything built on it: axum's
//!   `WebSocketUpgrade`, `hyper-tungstenite`, CONNECT proxies. The handler
//!   gets hyper's `Upgraded`, as with hyper-util's server. Its socket has
//!   left the server for tokio before hyper hands it over (at the first
//!   read or write after the `101`), so it outlives the server as it would
//!   with hyper's. What it keeps while idle is what hyper's keeps: the
//!   boxed transport (dormant's, with a small shared record of the
//!   connection) and, until the first read, a view into hyper's read
//!   buffer; a task per stream is the handler's.
//! - **dormant's [`on`]**, for idle streams that should cost nothing: the
//!   handler gets [`Parts`], the socket itself (a [`Stream`]: the
//!   `tokio::net::TcpStream` or `UnixStream` of whatever listener the
//!   server serves, so one handler works on any) and the bytes the client
//!   sent after its upgrade request, *copied* out of hyper's buffer.
//!   Nothing else of the server stays referenced: no hyper connection,
//!   request, response, pool buffer, service or connection slot (invariant
//!   I5 of the design). The stream can read without holding a buffer and
//!   sleep in the lot with no task (below).
//!
//! hyper's upgrade boxes the connection's IO again and keeps hyper's read
//! buffer alive until its leftover bytes are read; Go's `Hijack` keeps the
//! connection's write buffer and, through its read buffer, the whole
//! connection, response and request. Upgraded streams (WebSocket, tunnels)
//! are idle most of their life, so whatever they keep, they keep for long:
//! that is what [`on`] is for.
//!
//! ```text
//! request with `Connection: upgrade` + `Upgrade: …`, or CONNECT
//!   │ on(&mut req) ──► OnUpgrade (future; `Err` at once for other requests)
//!   ▼
//! handler answers 101 (2xx to CONNECT) ── anything else: the future fails
//!   │                                     with `is_declined`, HTTP goes on
//!   ▼
//! hyper writes and flushes the response and hands its connection to its
//!   │ own `OnUpgrade`, which the driver holds for `on`: socket + unread bytes
//!   ▼
//! OnUpgrade resolves to Parts { stream, read_buf, lot, shutdown };
//! the connection's task ends, it no longer counts as open
//! ```
//!
//! hyper puts its `OnUpgrade` in every request that asks for an upgrade
//! (an `Upgrade` header on HTTP/1.1, or `CONNECT`), and dormant leaves it
//! there. To those with `Connection: upgrade`, and to `CONNECT`, it also
//! offers [`on`], with a clone of hyper's: if the handler called [`on`]
//! when it accepts the upgrade, the driver takes the connection from
//! hyper's `OnUpgrade` as soon as hyper's future returns and takes it
//! apart; otherwise it is hyper's `OnUpgrade`'s holder's. Other requests
//! pay nothing for this module but a look at an empty extension map.
//!
//! # Reading without holding a buffer
//!
//! [`Upgraded`] wraps the parts: it implements tokio's `AsyncRead` and
//! `AsyncWrite` (the leftover bytes come first), and
//! [`read_pooled`](Upgraded::read_pooled) waits until the socket is
//! readable and only then takes a buffer from dormant's pool and reads into
//! it ("ready reader"): a stream waiting for its next message holds no
//! buffer. The buffer goes back to the pool when the [`PooledBytes`] are
//! dropped. The pool is process-wide ([`pool_stats`]): a server's own pool
//! handle would tie the stream to the server it left.
//!
//! # Sleeping upgraded streams
//!
//! A handler whose stream is idle can give it, with its own small state, to
//! the server's parking lot ([`Lot::sleep`]): the stream then has no task,
//! no tokio registration and no buffer (its slot in the lot, a small box
//! and the boxed state, for TCP and Unix sockets alike). When bytes arrive, the peer closes, or the server shuts down, the
//! lot calls the handler back in a new task with [`Woken`]. The usual shape
//! is a plain function that puts the stream to sleep with a callback that
//! serves one wake-up and calls that function again:
//!
//! ```no_run
//! use dormant::upgrade::{Lot, Upgraded, Woken};
//! use tokio::io::AsyncWriteExt;
//!
//! /// Echo: answer what arrived, then sleep until more arrives.
//! fn sleep(lot: Lot, stream: Upgraded) {
//!     lot.clone().sleep(stream, move |woken| async move {
//!         let Woken::Readable(mut stream) = woken else { return };
//!         if let Ok(Some(bytes)) = stream.read_pooled().await {
//!             if stream.write_all(&bytes).await.is_ok() {
//!                 drop(bytes);
//!                 sleep(lot, stream);
//!             }
//!         }
//!     });
//! }
//! ```
//!
//! # Shutdown
//!
//! As with Go's `Hijack`, the server neither waits for nor closes the
//! streams it handed off: once handed off, a stream does not delay a
//! graceful shutdown. [`Parts::shutdown`] tells a handler that shutdown
//! began. Streams asleep in the lot when it begins are handed back to their
//! callbacks with [`Woken::Shutdown`], and so is any stream put to sleep
//! afterwards: the lot stops with the `serve` call. Callbacks run in tasks
//! of the runtime; if the runtime itself shuts down while streams sleep,
//! they are closed and their callbacks dropped without being called.

use std::fmt;
use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{Request, Version};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::oneshot;

use crate::accounting::Held;
#[cfg(feature = "ws")]
use crate::accounting::Hold;
use crate::error::Error;
use crate::lot;
use crate::pool::{self, PoolStats};
#[cfg(feature = "ws")]
use crate::shutdown::Level;
use crate::shutdown::{Shutdown, Signal};
use crate::transport::Seam;

pub use crate::pool::PooledBytes;
pub use crate::transport::Stream;

/// What the driver sends to the handler's [`OnUpgrade`].
pub(crate) type HandOffResult = Result<Parts, Error>;

/// Starts an upgrade of the connection that carries `req`: the returned
/// future resolves, once the handler's `101 Switching Protocols` response
/// (or a 2xx response to `CONNECT`) has been written, to the raw
/// connection.
///
/// Call it in the handler, then answer; await the future elsewhere (a
/// spawned task), since it resolves only after the response was sent:
///
/// ```no_run
/// use std::convert::Infallible;
/// use http::{Request, Response, StatusCode};
/// use http_body_util::Empty;
/// use hyper::body::Bytes;
///
/// async fn handle(mut req: Request<dormant::Body>) -> Result<Response<Empty<Bytes>>, Infallible> {
///     let mut res = Response::new(Empty::new());
///     let Ok(upgrade) = dormant::upgrade::on(&mut req) else {
///         *res.status_mut() = StatusCode::UPGRADE_REQUIRED;
///         return Ok(res);
///     };
///     tokio::spawn(async move {
///         if let Ok(parts) = upgrade.await {
///             let stream = dormant::upgrade::Upgraded::from(parts);
///             // … speak the new protocol on `stream` …
/// #           drop(stream);
///         }
///     });
///     *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
///     res.headers_mut().insert("connection", "upgrade".parse().unwrap());
///     res.headers_mut().insert("upgrade", "echo".parse().unwrap());
///     Ok(res)
/// }
/// ```
///
/// Upgrade requests are HTTP/1.1 requests with `Connection: upgrade` and an
/// `Upgrade` header, and `CONNECT` requests. For any other request, for
/// requests over HTTP/2, and when `on` was already called for this request,
/// `on` fails at once ([`Error::is_unsupported`]), so a handler knows before
/// it answers. The future fails with
///
/// - [`Error::is_declined`] if the handler answers with another status: the
///   connection then goes on serving HTTP;
/// - [`Error::is_closed`] if the connection ends before the hand-off.
///
/// If the future is dropped before the hand-off (or neither `on` nor
/// hyper's `hyper::upgrade::on` is called) and the handler answers 101
/// anyway, the connection is closed after the response: nobody is left to
/// speak the new protocol.
///
/// hyper's own `hyper::upgrade::on` works too (see the [module
/// docs](self)); a handler that calls both gets the connection through
/// this one.
pub fn on<B>(req: &mut Request<B>) -> Result<OnUpgrade, Error> {
    let version = req.version();
    on_extensions(req.extensions_mut(), version)
}

/// [`on`] for a request in parts.
pub(crate) fn on_extensions(
    extensions: &mut http::Extensions,
    version: Version,
) -> Result<OnUpgrade, Error> {
    let handle = extensions.remove::<HandOff>();
    match handle.and_then(|h| h.take()) {
        Some(rx) => Ok(OnUpgrade { rx }),
        None if version == Version::HTTP_2 => Err(Error::unsupported(
            "upgrades are not supported on HTTP/2 connections",
        )),
        None => Err(Error::unsupported(
            "not an HTTP/1.1 upgrade request (`Connection: upgrade` with an `Upgrade` header, \
             or CONNECT), or `on` was already called for it",
        )),
    }
}

/// The future of [`on`]: the upgraded connection, once the response that
/// switched protocols has been written.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct OnUpgrade {
    rx: oneshot::Receiver<HandOffResult>,
}

impl Future for OnUpgrade {
    type Output = Result<Parts, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|res| res.unwrap_or_else(|_| Err(Error::closed())))
    }
}

/// An upgraded connection, as handed off by the server.
///
/// The server keeps nothing of the connection: these parts are all there
/// is. [`Upgraded::from`] wraps the stream and the leftover bytes in one
/// `AsyncRead + AsyncWrite`.
#[derive(Debug)]
#[non_exhaustive]
pub struct Parts {
    /// The connection's socket, of whatever transport the listener yields.
    pub stream: Stream,
    /// Bytes the client sent after its upgrade request, which the server
    /// had already read: the first bytes of the new protocol. A copy, so no
    /// server buffer stays alive for them; often empty.
    pub read_buf: Bytes,
    /// The parking lot, where an idle upgraded stream can sleep.
    pub lot: Lot,
    /// Tells when the server's graceful shutdown begins.
    pub shutdown: Shutdown,
}

impl Parts {
    pub(crate) fn new(stream: Stream, read_buf: Bytes, lot: Lot, shutdown: Shutdown) -> Self {
        Parts {
            stream,
            read_buf,
            lot,
            shutdown,
        }
    }
}

/// An upgraded stream: the socket, with the bytes the server read past the
/// upgrade request coming first.
///
/// It implements tokio's [`AsyncRead`] and [`AsyncWrite`], so any protocol
/// library over those runs on it. [`read_pooled`](Self::read_pooled) reads
/// without holding a buffer while it waits. Once the leftover bytes are
/// read, their allocation is freed: an idle `Upgraded` holds its socket and
/// nothing else.
pub struct Upgraded {
    stream: Stream,
    leftover: Bytes,
}

impl Upgraded {
    fn new(stream: Stream, leftover: Bytes) -> Self {
        Upgraded { stream, leftover }
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
            let n = buf.len().min(self.leftover.len());
            buf[..n].copy_from_slice(&self.leftover[..n]);
            self.consume_leftover(n);
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
        (self.stream, self.leftover)
    }

    fn consume_leftover(&mut self, n: usize) {
        self.leftover.advance(n);
        if self.leftover.is_empty() {
            // An empty view would still keep its allocation alive.
            self.leftover = Bytes::new();
        }
    }
}

impl From<Parts> for Upgraded {
    fn from(parts: Parts) -> Self {
        Upgraded::new(parts.stream, parts.read_buf)
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
            .field("leftover", &self.leftover.len())
            .finish()
    }
}

impl AsyncRead for Upgraded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.leftover.is_empty() {
            let n = buf.remaining().min(this.leftover.len());
            buf.put_slice(&this.leftover[..n]);
            this.consume_leftover(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upgraded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Figures of the buffer pool upgraded streams read into
/// ([`Upgraded::read_pooled`]). That pool is process-wide, so that a
/// handed-off stream keeps no reference to the server it left; these
/// figures cover every server of the process. `in_use` counts the
/// [`PooledBytes`] alive now: idle streams hold none.
pub fn pool_stats() -> PoolStats {
    pool::upgraded().stats()
}

/// The parking lot of the `serve` call that handed a stream off, where
/// idle upgraded streams can sleep outside tokio.
///
/// Cloning is cheap (one reference count). A handle keeps the lot's small
/// shared state alive (its slab and one epoll descriptor), not the server:
/// the lot is the only part of the server an upgraded stream may hold on
/// to, and only through this handle.
#[derive(Clone)]
pub struct Lot(Arc<LotShared>);
// A thin pointer: callbacks of sleeping streams capture this handle, and
// each keeps it for as long as its stream sleeps (8 bytes, not 16).

struct LotShared {
    beds: Box<dyn Beds>,
    /// The `serve` call's held connections and shutdown signal, for
    /// sleepers that close with a handshake at shutdown ([`Lot::drain`]).
    #[cfg(feature = "ws")]
    held: Arc<Held>,
    #[cfg(feature = "ws")]
    signal: Signal,
    /// The runtime the `serve` call runs on: where a stream woken by a
    /// write from anywhere ([`Lot::wake`]) goes back to tokio and gets its
    /// task, whatever thread (or other runtime) the write came from.
    #[cfg(feature = "ws")]
    runtime: tokio::runtime::Handle,
    /// The server's WebSocket gauges.
    #[cfg(feature = "ws")]
    ws: Arc<crate::stats::WsCounters>,
}

/// Keeps a `serve` call's graceful shutdown waiting while an upgraded
/// stream says goodbye (a WebSocket's closing handshake), until dropped.
#[cfg(feature = "ws")]
pub(crate) struct Drain {
    _hold: Hold,
    signal: Signal,
}

#[cfg(feature = "ws")]
impl Drain {
    /// Resolves once the grace period is over: the goodbye must end.
    pub(crate) async fn forced(&self) {
        self.signal.reached(Level::Forced).await;
    }

    /// Whether the grace period is over.
    pub(crate) fn is_forced(&self) -> bool {
        self.signal.is_at(Level::Forced)
    }
}

/// The lot of one transport, as upgraded streams see it: the transport is
/// erased, as in [`Stream`].
trait Beds: Send + Sync {
    /// The sleeper's key, or `None` if its callback was called at once;
    /// with `after`, the handler's [`due`](Handler::due) that long from
    /// now.
    fn sleep(
        &self,
        stream: Stream,
        callback: Box<dyn Handler>,
        after: Option<Duration>,
    ) -> Option<u32>;
    fn sleeping(&self) -> usize;
    /// [`Parkable::write_dormant`](lot::Parkable::write_dormant) to the
    /// sleeper at `key` whose handler is `sleeper` (see
    /// [`Handler::sleeper`]); `None` if it is not asleep there.
    #[cfg(feature = "ws")]
    fn write_to(&self, key: u32, sleeper: usize, bytes: &[u8]) -> Option<io::Result<lot::Wrote>>;
    /// Wakes the sleeper at `key` whose handler is `sleeper`, as if bytes
    /// had arrived; `false` if it is not asleep there.
    #[cfg(feature = "ws")]
    fn wake(&self, key: u32, sleeper: usize) -> bool;
}

/// A lot whose sleepers are upgraded streams.
type StreamLot<T, C> = lot::Lot<T, Box<dyn Handler>, C>;

impl<T: Seam, C: lot::Carry> Beds for StreamLot<T, C> {
    fn sleep(
        &self,
        stream: Stream,
        callback: Box<dyn Handler>,
        after: Option<Duration>,
    ) -> Option<u32> {
        match T::dormant_from_stream(stream) {
            Ok(Ok(dormant)) => return lot::Lot::sleep(self, dormant, callback, after),
            Ok(Err(error)) => callback.run(Woken::Failed(error)),
            Err(_) => callback.run(Woken::Failed(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the stream came from a server with another kind of listener than this lot's",
            ))),
        }
        None
    }

    fn sleeping(&self) -> usize {
        lot::Lot::sleeping(self)
    }

    #[cfg(feature = "ws")]
    fn write_to(&self, key: u32, sleeper: usize, bytes: &[u8]) -> Option<io::Result<lot::Wrote>> {
        self.with_sleeper(key, |conn, callback| {
            (callback.sleeper() == sleeper).then(|| T::write_dormant(conn, bytes))
        })
    }

    #[cfg(feature = "ws")]
    fn wake(&self, key: u32, sleeper: usize) -> bool {
        self.wake_sleeper_at(key, |callback| callback.sleeper() == sleeper)
    }
}

impl<T: Seam> lot::Callback<T> for Box<dyn Handler> {
    fn call(self, woken: lot::Wakeup<T::Dormant>) {
        let up = |dormant| T::dormant_into_stream(dormant).map(Upgraded::from);
        let woken = match woken {
            lot::Wakeup::Readable(dormant) => up(dormant).map(Woken::Readable),
            lot::Wakeup::Eof(dormant) => up(dormant).map(Woken::Eof),
            lot::Wakeup::Shutdown(dormant) => up(dormant).map(Woken::Shutdown),
            // The handler asked for it ([`Handler::due`]) and knows why.
            lot::Wakeup::Due(dormant) => up(dormant).map(Woken::Readable),
            lot::Wakeup::Failed(error) => Err(error),
        };
        self.run(woken.unwrap_or_else(Woken::Failed));
    }

    fn due(&mut self, conn: &mut T::Dormant) -> Option<Duration> {
        // Whole and at once, or not at all: a client that does not read is
        // not kept waiting for.
        let mut write = |bytes: &[u8]| {
            matches!(T::write_dormant(conn, bytes),
                Ok(wrote) if wrote.taken == bytes.len() && !wrote.held)
        };
        (**self).due(&mut write)
    }
}

impl Lot {
    /// The handle on a serve call's lot.
    pub(crate) fn new<T: Seam, C: lot::Carry>(
        lot: StreamLot<T, C>,
        held: Arc<Held>,
        signal: Signal,
        stats: &crate::stats::Counters,
    ) -> Self {
        #[cfg(not(feature = "ws"))]
        let _ = (held, signal, stats);
        Lot(Arc::new(LotShared {
            beds: Box::new(lot),
            #[cfg(feature = "ws")]
            held,
            #[cfg(feature = "ws")]
            signal,
            #[cfg(feature = "ws")]
            runtime: tokio::runtime::Handle::current(),
            #[cfg(feature = "ws")]
            ws: stats.ws.clone(),
        }))
    }

    /// The server's WebSocket gauges.
    #[cfg(feature = "ws")]
    pub(crate) fn ws_counters(&self) -> &crate::stats::WsCounters {
        &self.0.ws
    }

    /// Holds the `serve` call's graceful shutdown open until the returned
    /// [`Drain`] drops.
    #[cfg(feature = "ws")]
    pub(crate) fn drain(&self) -> Drain {
        Drain {
            _hold: self.0.held.hold(),
            signal: self.0.signal.clone(),
        }
    }

    /// Puts `stream` to sleep in the parking lot with `callback`, its
    /// handler's state. The stream then has no task, no tokio registration
    /// and no buffer; the lot keeps its fd and two pointers for it, plus
    /// the boxed `callback`, whose size is what it captures (keep it small:
    /// the protocol state between messages).
    ///
    /// `callback` is called exactly once, in a new tokio task, with the
    /// stream when bytes arrive ([`Woken::Readable`]), when the peer closes
    /// ([`Woken::Eof`]; on a Unix socket, which cannot be peeked, a close
    /// wakes it as [`Woken::Readable`] and the next read returns the end
    /// of the stream), when the server's graceful shutdown begins
    /// ([`Woken::Shutdown`]), or with the error if the socket fails
    /// ([`Woken::Failed`]). No byte is lost: bytes that arrived before, or
    /// leftover bytes `stream` still holds, wake it at once. To sleep again,
    /// call `sleep` from the callback's future (see the [module
    /// docs](self)).
    ///
    /// Sleeping streams have no deadline: idle timeouts are the protocol's.
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime: the callback runs in a task
    /// of its own.
    pub fn sleep<F, Fut>(&self, stream: Upgraded, callback: F)
    where
        F: FnOnce(Woken) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let callback: Box<dyn Handler> = Box::new(callback);
        self.sleep_boxed(stream, callback, None);
    }

    /// [`sleep`](Self::sleep) with a boxed handler, asked
    /// [`due`](Handler::due) `after` from now if given: the sleeper's key,
    /// or `None` if the handler was called at once.
    pub(crate) fn sleep_boxed(
        &self,
        stream: Upgraded,
        callback: Box<dyn Handler>,
        after: Option<Duration>,
    ) -> Option<u32> {
        // Bytes already read (by hyper, or into a TLS session, where a
        // write decrypts what came with the records before it) would wait
        // for a readiness the socket never gives again.
        if !stream.leftover.is_empty() || stream.stream.has_buffered() {
            callback.run(Woken::Readable(stream));
            return None;
        }
        self.0.beds.sleep(stream.stream, callback, after)
    }

    /// Writes `bytes` without blocking to the stream asleep at `key` with
    /// the handler `sleeper`: `None` if it is not asleep there (it woke).
    #[cfg(feature = "ws")]
    pub(crate) fn write_to(
        &self,
        key: u32,
        sleeper: usize,
        bytes: &[u8],
    ) -> Option<io::Result<lot::Wrote>> {
        self.0.beds.write_to(key, sleeper, bytes)
    }

    /// Wakes the stream asleep at `key` with the handler `sleeper` as if
    /// bytes had arrived; `false` if it is not asleep there.
    #[cfg(feature = "ws")]
    pub(crate) fn wake(&self, key: u32, sleeper: usize) -> bool {
        let _runtime = self.0.runtime.enter();
        self.0.beds.wake(key, sleeper)
    }

    /// Returns how many upgraded streams sleep in this lot now.
    pub fn sleeping(&self) -> usize {
        self.0.beds.sleeping()
    }
}

impl fmt::Debug for Lot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lot")
            .field("sleeping", &self.sleeping())
            .finish()
    }
}

/// Why a sleeping upgraded stream's callback is called; carries the stream
/// back.
#[derive(Debug)]
#[non_exhaustive]
pub enum Woken {
    /// Bytes arrived.
    Readable(Upgraded),
    /// The peer closed its side (a read returns end of stream). Writing
    /// may still work, as after any half-close.
    Eof(Upgraded),
    /// The server's graceful shutdown began (or its parking lot failed):
    /// the stream cannot sleep any longer, and a new
    /// `sleep` calls back at once with `Shutdown` again. The stream is
    /// still open; what to tell the peer is the protocol's choice.
    Shutdown(Upgraded),
    /// The socket failed while asleep, or could not be put to sleep; it is
    /// closed.
    Failed(io::Error),
}

/// A sleeping stream's handler (the callback given to [`Lot::sleep`]),
/// boxed in the lot.
pub(crate) trait Handler: Send + 'static {
    /// Runs the handler in a new task.
    fn run(self: Box<Self>, woken: Woken);

    /// Its deadline passed while it sleeps (see [`Lot::sleep_boxed`]):
    /// what it does where it sleeps, with `write`, which writes bytes to
    /// the stream whole and at once or fails; returns when its next
    /// deadline is, from now, or `None` to be woken (as
    /// [`Woken::Readable`]). Called under the lot's lock: it must not
    /// block.
    fn due(&mut self, write: &mut dyn FnMut(&[u8]) -> bool) -> Option<Duration> {
        let _ = write;
        None
    }

    /// Who sleeps with this handler, for those who write to a sleeping
    /// stream by its key ([`Lot::write_to`]): a key is reused once its
    /// sleeper wakes. `0` for handlers nobody writes through.
    #[cfg(feature = "ws")]
    fn sleeper(&self) -> usize {
        0
    }
}

impl<F, Fut> Handler for F
where
    F: FnOnce(Woken) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn run(self: Box<Self>, woken: Woken) {
        let callback = *self;
        // The handler runs in its own task, never in the lot's driver.
        tokio::spawn(async move { callback(woken).await });
    }
}

/// The request extension that [`on`] turns into its future; only upgrade
/// candidates carry it. Cloneable because extensions must be; the first
/// `on` takes the receiver.
#[derive(Clone)]
pub(crate) struct HandOff(Arc<Mutex<Option<oneshot::Receiver<HandOffResult>>>>);

impl HandOff {
    pub(crate) fn new(rx: oneshot::Receiver<HandOffResult>) -> Self {
        HandOff(Arc::new(Mutex::new(Some(rx))))
    }

    fn take(&self) -> Option<oneshot::Receiver<HandOffResult>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Whether [`on`] took it.
    pub(crate) fn is_taken(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
}
