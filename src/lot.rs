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
//! [`dormant_after`]: crate::Builder::dormant_after

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Mutex, MutexGuard};
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

/// Events collected per `epoll_wait`.
const EVENTS: usize = 256;

/// Deadlines are kept as wrapping 32-bit milliseconds since the lot's
/// epoch; comparisons are correct while deadlines are less than ~24 days
/// apart, which `Builder::build` guarantees by bounding the idle timeout.
type Millis = u32;

struct Slot {
    stream: Option<MioStream>,
    deadline: Millis,
}

#[derive(Default)]
struct Inner {
    slots: Vec<Slot>,
    free: Vec<u32>,
    deadlines: VecDeque<(Millis, u32)>,
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

/// The lot of one `serve` call.
pub(crate) struct Lot {
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
        let lot = Lot {
            registry: poll.registry().try_clone()?,
            inner: Mutex::default(),
            epoch: Instant::now(),
            new_front: Notify::new(),
        };
        Ok((lot, poll))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the slab consistent (every
        // step is a single push, pop or take), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn millis(&self, at: Instant) -> Millis {
        // Truncation is the wrapping clock.
        at.saturating_duration_since(self.epoch).as_millis() as Millis
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
            self.registry
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
                self.new_front.notify_one();
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

    /// Closes every dormant connection and refuses new ones (shutdown).
    pub(crate) fn close_all(&self, stats: &Counters, held: &Held) {
        let mut inner = self.lock();
        inner.closed = true;
        let closed = inner.slots.iter().filter(|s| s.stream.is_some()).count();
        inner.slots.clear();
        inner.free.clear();
        inner.deadlines.clear();
        drop(inner);
        stats.dormant.fetch_sub(closed, Relaxed);
        held.release(closed);
    }

    /// Acts on one readiness event; returns the stream if it goes back to
    /// tokio (still counted as held: the caller adopts it).
    fn on_ready(&self, slot: usize, stats: &Counters, held: &Held) -> Option<TcpStream> {
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
        if let Err(error) = self.registry.deregister(&mut stream) {
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
            () = lot.new_front.notified(), if next.is_none() => {}
        }
    }
}
