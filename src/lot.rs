//! The parking lot: where long-idle connections wait outside tokio.
//!
//! A PARKED connection still has a tokio task and a tokio I/O registration
//! (several hundred bytes). After [`dormant_after`] it leaves both: its fd
//! moves into the lot, a slab of 8-byte slots watched by one `mio::Poll`.
//!
//! ```text
//!  slots: Vec<Slot>       Slot { fd (4 B), idle deadline (4 B) }
//!  deadlines: VecDeque    (deadline, slot) in FIFO order: every dormant
//!                         connection has the same idle timeout, so the
//!                         front is always the next to expire
//!  free: Vec<u32>         reusable slot numbers
//! ```
//!
//! The lot has no thread of its own. The mio poll's epoll fd is registered
//! with tokio (`AsyncFd`), and one task per `serve` call drives it: when the
//! epoll fd turns readable, the task collects the events without blocking
//! and, for each ready fd,
//!
//! - peeks one byte: 0 bytes means the peer closed, and the fd is closed
//!   right there, tokio never sees it again;
//! - otherwise hands the fd back to tokio (`TcpStream::from_std`) in a new
//!   connection task, which finds it readable at once.
//!
//! mio registers edge-triggered, so every event is acted on; an fd that
//! became readable before it was registered is reported on registration.
//! The same task closes connections whose idle deadline passed, sleeping
//! until the front deadline; there is no timer per connection.
//!
//! # Upgraded streams
//!
//! A protocol handler can put an idle upgraded stream to sleep here too
//! ([`upgrade::Lot::sleep`]). Those sit in a second slab, so that
//! keep-alive slots stay 8 bytes:
//!
//! ```text
//!  sleepers: Vec<Option<Sleeper>>   Sleeper { fd (4 B), Box<dyn Callback> (16 B) }: 24 B
//!  free_sleepers: Vec<u32>          plus the handler's boxed state
//! ```
//!
//! Their tokens have the top bit set. When one turns readable the lot
//! peeks a byte as for keep-alive connections, and in every case calls the
//! handler's callback, exactly once, in a new task: with the stream back in
//! tokio when bytes arrived or the peer closed, with the error when the
//! socket failed. They have no idle deadline (the protocol owns its
//! timeouts). At shutdown ([`Lot::close_all`]) they are handed back to
//! their callbacks as well, with [`Woken::Shutdown`]: the server does not
//! close upgraded streams, and their handler decides what to say. If the
//! lot is dropped without being closed (the runtime shut down), the
//! sleeping streams are closed and their callbacks dropped uncalled.
//!
//! [`dormant_after`]: crate::Builder::dormant_after
//! [`upgrade::Lot::sleep`]: crate::upgrade::Lot::sleep

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mio::net::TcpStream as MioStream;
use mio::{Events, Interest, Poll, Token};
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{debug, trace};

use crate::server::Held;
use crate::stats::Counters;
use crate::upgrade::{Callback, Upgraded, Woken};

/// Events collected per `epoll_wait`.
const EVENTS: usize = 256;

/// The token bit that marks a sleeping upgraded stream.
const SLEEPER: usize = 1 << (usize::BITS - 1);

/// Deadlines are kept as wrapping 32-bit milliseconds since the lot's
/// epoch; comparisons are correct while deadlines are less than ~24 days
/// apart, which `Builder::build` guarantees by bounding the idle timeout.
type Millis = u32;

struct Slot {
    stream: Option<MioStream>,
    deadline: Millis,
}

/// An upgraded stream asleep, with the handler to call when it wakes.
struct Sleeper {
    stream: MioStream,
    callback: Box<dyn Callback>,
}

/// Why a sleeper is woken.
enum Reason {
    Readable,
    Eof,
    Shutdown,
}

impl Sleeper {
    /// Takes the stream out of the lot's poll and hands it back to its
    /// handler.
    fn wake(self, reason: Reason, registry: &mio::Registry) {
        let Sleeper {
            mut stream,
            callback,
        } = self;
        match registry.deregister(&mut stream) {
            Ok(()) => call_back(stream, reason, callback),
            Err(error) => callback.call(Woken::Failed(error)),
        }
    }
}

/// Hands a stream that is in no poll back to tokio and calls its handler
/// (in a new task).
fn call_back(stream: MioStream, reason: Reason, callback: Box<dyn Callback>) {
    let stream = match TcpStream::from_std(std::net::TcpStream::from(stream)) {
        Ok(stream) => Upgraded::new(stream, bytes::Bytes::new()),
        Err(error) => return callback.call(Woken::Failed(error)),
    };
    callback.call(match reason {
        Reason::Readable => Woken::Readable(stream),
        Reason::Eof => Woken::Eof(stream),
        Reason::Shutdown => Woken::Shutdown(stream),
    });
}

#[derive(Default)]
struct Inner {
    slots: Vec<Slot>,
    free: Vec<u32>,
    deadlines: VecDeque<(Millis, u32)>,
    sleepers: Vec<Option<Sleeper>>,
    free_sleepers: Vec<u32>,
    closed: bool,
}

impl Inner {
    /// Closes the connection in `slot`, if any; returns whether there was
    /// one.
    fn close(&mut self, slot: u32) -> bool {
        // Dropping the fd closes it, which also removes it from the epoll
        // set.
        let had = self.slots[slot as usize].stream.take().is_some();
        if had {
            self.free.push(slot);
        }
        had
    }
}

/// The lot of one `serve` call. Cloning is cheap: clones share the lot
/// (upgraded streams' handlers hold one to sleep again).
#[derive(Clone)]
pub(crate) struct Lot(Arc<Shared>);

struct Shared {
    registry: mio::Registry,
    inner: Mutex<Inner>,
    epoch: Instant,
    /// Woken when the deadline queue goes from empty to non-empty.
    new_front: Notify,
}

impl Lot {
    /// A lot and the poll its driver runs.
    pub(crate) fn new() -> io::Result<(Lot, Poll)> {
        let poll = Poll::new()?;
        let lot = Lot(Arc::new(Shared {
            registry: poll.registry().try_clone()?,
            inner: Mutex::default(),
            epoch: Instant::now(),
            new_front: Notify::new(),
        }));
        Ok((lot, poll))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the slab consistent (every
        // step is a single push, pop or take), so poisoning is ignored.
        self.0.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn millis(&self, at: Instant) -> Millis {
        // Truncation is the wrapping clock.
        at.saturating_duration_since(self.0.epoch).as_millis() as Millis
    }

    /// Moves `stream` into the lot, to be closed at `deadline` if no byte
    /// arrives before. Returns false if the connection was closed instead:
    /// the lot is closed (shutdown) or entering it failed.
    pub(crate) fn enter(
        &self,
        stream: TcpStream,
        deadline: Option<Instant>,
        stats: &Counters,
    ) -> bool {
        match self.try_enter(stream, deadline, stats) {
            Ok(entered) => entered,
            Err(error) => {
                debug!(%error, "entering the parking lot failed");
                false
            }
        }
    }

    fn try_enter(
        &self,
        stream: TcpStream,
        deadline: Option<Instant>,
        stats: &Counters,
    ) -> io::Result<bool> {
        let mut stream = MioStream::from_std(stream.into_std()?);
        let mut inner = self.lock();
        if inner.closed {
            return Ok(false);
        }
        let slot = match inner.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(inner.slots.len())
                    .map_err(|_| io::Error::other("parking lot full"))?;
                inner.slots.push(Slot {
                    stream: None,
                    deadline: 0,
                });
                slot
            }
        };
        // Registered while the lock is held: the driver cannot see the
        // event before the slot holds the stream.
        if let Err(e) =
            self.0
                .registry
                .register(&mut stream, Token(slot as usize), Interest::READABLE)
        {
            inner.free.push(slot);
            return Err(e);
        }
        let deadline = deadline.map(|d| {
            let mut d = self.millis(d);
            // Keep the queue in order even if two connections raced here.
            if let Some(&(back, _)) = inner.deadlines.back() {
                if (d.wrapping_sub(back) as i32) < 0 {
                    d = back;
                }
            }
            d
        });
        inner.slots[slot as usize] = Slot {
            stream: Some(stream),
            deadline: deadline.unwrap_or(0),
        };
        if let Some(d) = deadline {
            inner.deadlines.push_back((d, slot));
            if inner.deadlines.len() == 1 {
                self.0.new_front.notify_one();
            }
        }
        stats.dormant.fetch_add(1, Relaxed);
        stats.dormancies.fetch_add(1, Relaxed);
        Ok(true)
    }

    /// Whether connections may enter (false after shutdown or a failure of
    /// the driver).
    pub(crate) fn is_open(&self) -> bool {
        !self.lock().closed
    }

    /// Closes every dormant connection, hands every sleeping upgraded
    /// stream back to its handler with [`Woken::Shutdown`], and refuses new
    /// ones (shutdown, or the driver failed). Needs a tokio runtime.
    pub(crate) fn close_all(&self, stats: &Counters, held: &Held) {
        let mut inner = self.lock();
        inner.closed = true;
        let closed = inner.slots.iter().filter(|s| s.stream.is_some()).count();
        inner.slots.clear();
        inner.free.clear();
        inner.deadlines.clear();
        let sleepers = std::mem::take(&mut inner.sleepers);
        inner.free_sleepers.clear();
        drop(inner);
        stats.dormant.fetch_sub(closed, Relaxed);
        held.release(closed);
        for sleeper in sleepers.into_iter().flatten() {
            sleeper.wake(Reason::Shutdown, &self.0.registry);
        }
    }

    /// Puts an upgraded stream to sleep until it is readable, its peer
    /// closes it, or the lot closes; then calls `callback`, exactly once, in
    /// a new task. Needs a tokio runtime.
    pub(crate) fn sleep(&self, stream: TcpStream, callback: Box<dyn Callback>) {
        let mut stream = match stream.into_std() {
            Ok(stream) => MioStream::from_std(stream),
            Err(error) => return callback.call(Woken::Failed(error)),
        };
        let mut inner = self.lock();
        if inner.closed {
            drop(inner);
            return call_back(stream, Reason::Shutdown, callback);
        }
        let slot = match inner.free_sleepers.pop() {
            Some(slot) => slot as usize,
            None => {
                inner.sleepers.push(None);
                inner.sleepers.len() - 1
            }
        };
        // Registered while the lock is held: the driver cannot see the
        // event before the slot holds the stream. Slot numbers stay below
        // `SLEEPER`: each one holds an open fd.
        let token = Token(SLEEPER | slot);
        if let Err(error) = self
            .0
            .registry
            .register(&mut stream, token, Interest::READABLE)
        {
            inner.free_sleepers.push(slot as u32);
            drop(inner);
            return callback.call(Woken::Failed(error));
        }
        inner.sleepers[slot] = Some(Sleeper { stream, callback });
    }

    /// How many upgraded streams sleep in the lot.
    pub(crate) fn sleeping(&self) -> usize {
        let inner = self.lock();
        inner.sleepers.len() - inner.free_sleepers.len()
    }

    /// Acts on one readiness event of a sleeping upgraded stream.
    fn wake_sleeper(&self, slot: usize) {
        let mut inner = self.lock();
        let Some(Some(sleeper)) = inner.sleepers.get(slot) else {
            return;
        };
        let reason = match sleeper.stream.peek(&mut [0u8; 1]) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Ok(0) => Reason::Eof,
            Ok(_) => Reason::Readable,
            Err(error) => {
                let Some(sleeper) = inner.sleepers[slot].take() else {
                    return;
                };
                inner.free_sleepers.push(slot as u32);
                drop(inner);
                // Dropping the stream closes it.
                return sleeper.callback.call(Woken::Failed(error));
            }
        };
        let Some(sleeper) = inner.sleepers[slot].take() else {
            return;
        };
        inner.free_sleepers.push(slot as u32);
        drop(inner);
        sleeper.wake(reason, &self.0.registry);
    }

    /// Acts on one readiness event; returns the stream if it is a
    /// keep-alive connection going back to tokio (still counted as held:
    /// the caller adopts it).
    fn on_ready(&self, token: usize, stats: &Counters, held: &Held) -> Option<TcpStream> {
        if token & SLEEPER != 0 {
            self.wake_sleeper(token & !SLEEPER);
            return None;
        }
        let slot = token;
        let mut inner = self.lock();
        let entry = inner.slots.get_mut(slot)?;
        let stream = entry.stream.as_ref()?;
        match stream.peek(&mut [0u8; 1]) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Ok(n) if n > 0 => {}
            res => {
                trace!(?res, "dormant connection closed by peer");
                inner.close(slot as u32);
                drop(inner);
                stats.dormant.fetch_sub(1, Relaxed);
                stats.lot_closes.fetch_add(1, Relaxed);
                held.release(1);
                return None;
            }
        }
        let mut stream = entry.stream.take()?;
        inner.free.push(slot as u32);
        drop(inner);
        stats.dormant.fetch_sub(1, Relaxed);
        stats.lot_wakes.fetch_add(1, Relaxed);
        if let Err(error) = self.0.registry.deregister(&mut stream) {
            debug!(%error, "leaving the lot failed");
            held.release(1);
            return None;
        }
        match TcpStream::from_std(std::net::TcpStream::from(stream)) {
            Ok(stream) => Some(stream),
            Err(error) => {
                debug!(%error, "back into tokio failed");
                held.release(1);
                None
            }
        }
    }

    /// Closes the connections whose deadline passed; returns how long until
    /// the next deadline.
    fn expire(&self, now: Instant, stats: &Counters, held: &Held) -> Option<Duration> {
        let now = self.millis(now);
        let mut closed = 0;
        let next = self.expire_locked(now, &mut closed);
        stats.dormant.fetch_sub(closed, Relaxed);
        stats.idle_timeouts.fetch_add(closed as u64, Relaxed);
        held.release(closed);
        next
    }

    fn expire_locked(&self, now: Millis, closed: &mut usize) -> Option<Duration> {
        let mut inner = self.lock();
        while let Some(&(deadline, slot)) = inner.deadlines.front() {
            let left = deadline.wrapping_sub(now) as i32;
            if left > 0 {
                return Some(Duration::from_millis(left as u64));
            }
            inner.deadlines.pop_front();
            // A slot reused since has a later deadline of its own.
            let same = inner.slots[slot as usize].deadline == deadline;
            if same && inner.close(slot) {
                *closed += 1;
            }
        }
        None
    }
}

/// Runs the lot until shutdown: hands ready connections to `respawn`,
/// closes those the peer closed or whose idle deadline passed.
pub(crate) async fn drive(
    lot: &Lot,
    poll: Poll,
    stats: &Counters,
    held: &Held,
    respawn: impl Fn(TcpStream),
) -> io::Result<()> {
    // Deprecated in tokio 1.54 because an arbitrary `AsRawFd` type might
    // close or swap its fd while registered; `mio::Poll` owns its epoll fd
    // for its whole life and always returns that one, which is the
    // condition the `unsafe` replacement asks callers to promise.
    #[allow(deprecated)]
    let mut poll = AsyncFd::with_interest(poll, tokio::io::Interest::READABLE)?;
    let mut events = Events::with_capacity(EVENTS);
    let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    loop {
        let next = lot.expire(Instant::now(), stats, held);
        if let Some(next) = next {
            timer.as_mut().reset(Instant::now() + next);
        }
        tokio::select! {
            guard = poll.readable_mut() => {
                let mut guard = guard?;
                events.clear();
                match guard.get_inner_mut().poll(&mut events, Some(Duration::ZERO)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
                // A full batch may have left events behind: look again
                // before waiting for the next edge.
                if events.iter().count() < EVENTS {
                    guard.clear_ready();
                }
                for event in events.iter() {
                    if let Some(stream) = lot.on_ready(event.token().0, stats, held) {
                        respawn(stream);
                    }
                }
            }
            () = &mut timer, if next.is_some() => {}
            () = lot.0.new_front.notified(), if next.is_none() => {}
        }
    }
}
