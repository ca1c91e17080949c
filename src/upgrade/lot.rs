//! The parking lot as upgraded streams see it: [`Lot`], where an idle
//! [`Upgraded`] stream sleeps with its handler, and [`Woken`], why the
//! handler is called back.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use super::upgraded::Upgraded;
use crate::accounting::Held;
#[cfg(feature = "ws")]
use crate::accounting::Hold;
use crate::lot;
#[cfg(feature = "ws")]
use crate::shutdown::Level;
use crate::shutdown::Signal;
use crate::transport::{Seam, Stream};

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
type StreamLot<T, C> = lot::ParkingLot<T, Box<dyn Handler>, C>;

impl<T: Seam, C: lot::Carry> Beds for StreamLot<T, C> {
    fn sleep(
        &self,
        stream: Stream,
        callback: Box<dyn Handler>,
        after: Option<Duration>,
    ) -> Option<u32> {
        match T::dormant_from_stream(stream) {
            Ok(Ok(dormant)) => return lot::ParkingLot::sleep(self, dormant, callback, after),
            Ok(Err(error)) => callback.run(Woken::Failed(error)),
            Err(_) => callback.run(Woken::Failed(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the stream came from a server with another kind of listener than this lot's",
            ))),
        }
        None
    }

    fn sleeping(&self) -> usize {
        lot::ParkingLot::sleeping(self)
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
    /// docs](super)).
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
    /// [`Woken::Readable`]). Called from the lot's driver, on the stream
    /// lent out of its slot (without the lot's lock): it must not block.
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
