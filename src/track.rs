//! [`Tracker`]: what one ACTIVE connection's driver, service wrapper,
//! request bodies and `ConnIo` share.
//!
//! hyper does not say when a connection sits between messages, so the
//! driver watches from the outside (see `conn::h1`): the service wrapper
//! counts requests in flight ([`InFlight`], until the response body is
//! written and dropped), request bodies count themselves open until their
//! end, and `ConnIo` records whether the last read found the socket empty
//! and whether every write was flushed. All of it is relaxed atomics: one
//! task polls the connection, and bodies moved to other tasks only ever
//! delay parking.
//!
//! It also keeps the deadlines handlers chose for their requests
//! (`Deadlines`), once one asks: the watchdog's `Chosen`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use tokio::sync::oneshot;

use crate::timeout::{Chosen, ChosenCell, Observed};
use crate::upgrade::HandOffResult;

/// How a request body ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    /// Read to its end.
    Complete,
    /// Dropped before its end.
    Abandoned,
}

/// An upgrade the handler accepted (it answered `101`, or `2xx` to
/// `CONNECT`), waiting for hyper to finish its connection.
#[derive(Debug)]
pub(crate) enum AcceptedUpgrade {
    /// To dormant's [`upgrade::on`](crate::upgrade::on): hyper hands the
    /// connection to `on`, from which the driver takes it apart and sends
    /// the parts through `tx`.
    Dormant {
        tx: oneshot::Sender<HandOffResult>,
        on: hyper::upgrade::OnUpgrade,
    },
    /// To whoever holds hyper's `OnUpgrade` (`hyper::upgrade::on`, axum's
    /// `WebSocketUpgrade`): hyper hands the connection over itself.
    Hyper,
}

/// Where an accepted upgrade waits for the driver: between the handler's
/// response and the end of hyper's connection future.
#[derive(Debug, Default)]
pub(crate) struct UpgradeHold(Mutex<Option<AcceptedUpgrade>>);

impl UpgradeHold {
    /// Keeps an upgrade the handler accepted.
    pub(crate) fn put(&self, accepted: AcceptedUpgrade) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(accepted);
    }

    /// The upgrade the handler accepted, if any.
    pub(crate) fn take(&self) -> Option<AcceptedUpgrade> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// What the driver, the service wrapper, the request bodies and `ConnIo`
/// share about one ACTIVE connection.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    /// Requests in flight (low 32 bits) and, of those, requests whose
    /// response is being written (high 32 bits).
    in_flight: AtomicU64,
    /// Request bodies handed to the service and not yet at their end.
    open_bodies: AtomicUsize,
    /// Request bodies dropped before their end, ever. The driver compares
    /// it with the count hyper has seen (see [`Tracker::observe`]).
    abandons: AtomicU64,
    /// The latest request's body was dropped before its end: hyper may have
    /// stopped reading (see [`Tracker::awaits_response`]).
    abandoned: AtomicBool,
    read_blocked: AtomicBool,
    unflushed: AtomicBool,
    /// Bytes arrived after the last request ended and before the next one
    /// began: hyper holds part of a request head.
    head_pending: AtomicBool,
    requests: AtomicU64,
    /// An upgrade the handler accepted, waiting for hyper to finish.
    pub(crate) upgrade: UpgradeHold,
    /// The connection goes to hyper's `OnUpgrade` (see `ConnIo`): it
    /// leaves the parking lot for tokio at its next read or write.
    to_hyper: AtomicBool,
    /// The deadlines handlers chose (`Deadlines`), once one asks.
    chosen: ChosenCell,
    /// An HTTP/2 connection's task that waits for its last request to end
    /// (its streams' tasks end them, not it): woken then.
    quiet_waiter: Mutex<Option<Waker>>,
    /// `quiet_waiter` holds a waker.
    waiting: AtomicBool,
}

const RESPONDING: u64 = 1 << 32;

impl Tracker {
    /// Marks a request in flight; returns the mark and the request's
    /// number on the connection (from 1).
    #[inline]
    pub(crate) fn request_started(self: &Arc<Self>) -> (InFlight, u64) {
        self.in_flight.fetch_add(1, Relaxed);
        let number = self.requests.fetch_add(1, Relaxed) + 1;
        self.head_pending.store(false, Relaxed);
        self.abandoned.store(false, Relaxed);
        let in_flight = InFlight {
            tracker: self.clone(),
            responding: false,
        };
        (in_flight, number)
    }

    #[inline]
    pub(crate) fn body_opened(&self) {
        self.open_bodies.fetch_add(1, Relaxed);
    }

    /// A body reached its end or was dropped before it.
    #[inline]
    pub(crate) fn body_closed(&self, end: BodyEnd) {
        self.open_bodies.fetch_sub(1, SeqCst);
        if end == BodyEnd::Abandoned {
            self.abandons.fetch_add(1, Relaxed);
            self.abandoned.store(true, Relaxed);
        }
        self.wake_if_quiet();
    }

    /// Whether no request is in flight and no request body open.
    fn streams_quiet(&self) -> bool {
        self.in_flight.load(SeqCst) == 0 && self.open_bodies.load(SeqCst) == 0
    }

    /// Has `waker` woken when the last request in flight ends (an HTTP/2
    /// connection whose frames are quiet, waiting for its streams' tasks
    /// to drop their requests before it may sleep). Returns whether the
    /// connection is quiet already: then nothing will wake it.
    pub(crate) fn wake_when_quiet(&self, waker: &Waker) -> bool {
        *self.quiet_waiter.lock().unwrap_or_else(|e| e.into_inner()) = Some(waker.clone());
        // Sequentially consistent with the counts' decrements: either the
        // check below sees the last one, or its `wake_if_quiet` sees this.
        self.waiting.store(true, SeqCst);
        self.streams_quiet()
    }

    /// Wakes the waiter of [`wake_when_quiet`](Self::wake_when_quiet), if
    /// there is one and no request is in flight any more.
    #[inline]
    fn wake_if_quiet(&self) {
        if self.waiting.load(SeqCst) && self.streams_quiet() && self.waiting.swap(false, SeqCst) {
            let waker = self
                .quiet_waiter
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }

    /// A request is in flight and hyper reads nothing until it is answered:
    /// its body was read to the end, or it had none. Only then does
    /// `ConnIo` look for the peer's close (see `conn::h1::io`). Not after a body was
    /// dropped before its end: hyper then drains it or stops reading, and a
    /// hyper that stops reading does not look for the close either.
    #[inline]
    pub(crate) fn awaits_response(&self) -> bool {
        self.in_flight.load(Relaxed) & (RESPONDING - 1) != 0
            && self.open_bodies.load(Relaxed) == 0
            && !self.abandoned.load(Relaxed)
    }

    /// The handler accepted an upgrade through hyper's `OnUpgrade`.
    pub(crate) fn hand_to_hyper(&self) {
        self.to_hyper.store(true, Relaxed);
    }

    #[inline]
    pub(crate) fn handed_to_hyper(&self) -> bool {
        self.to_hyper.load(Relaxed)
    }

    #[inline]
    pub(crate) fn set_read_blocked(&self, blocked: bool) {
        self.read_blocked.store(blocked, Relaxed);
    }

    #[inline]
    pub(crate) fn set_unflushed(&self, unflushed: bool) {
        self.unflushed.store(unflushed, Relaxed);
    }

    /// hyper read bytes from the client.
    #[inline]
    pub(crate) fn bytes_read(&self) {
        if self.in_flight.load(Relaxed) == 0 && self.open_bodies.load(Relaxed) == 0 {
            self.head_pending.store(true, Relaxed);
        }
    }

    /// What the connection is doing (see `conn::h1`). `acked` is the
    /// number of abandoned bodies hyper has reacted to.
    ///
    /// When a handler drops a body before its end, the next poll of hyper
    /// either drains the rest of the body, if it is already readable, or
    /// stops reading and closes the connection once the response is written
    /// (`poll_drain_or_close_read` in hyper's `proto/h1/conn.rs`). An
    /// abandoned body therefore counts as unread until hyper has been
    /// polled after the drop; after that, a connection still open is
    /// between messages.
    #[inline]
    pub(crate) fn observe(&self, acked: u64) -> Observed {
        let flight = self.in_flight.load(Relaxed);
        let in_flight = flight & (RESPONDING - 1);
        let unflushed = self.unflushed.load(Relaxed);
        let body = self.open_bodies.load(Relaxed) > 0 || self.abandons.load(Relaxed) != acked;
        let between = in_flight == 0 && !unflushed && !body;
        let head = between && self.head_pending.load(Relaxed);
        Observed {
            requests: self.requests.load(Relaxed),
            quiet: between && self.read_blocked.load(Relaxed),
            head,
            body,
            writing: flight >= RESPONDING || (in_flight == 0 && unflushed),
        }
    }
}

impl Tracker {
    /// Request bodies dropped before their end, so far.
    #[inline]
    pub(crate) fn abandons(&self) -> u64 {
        self.abandons.load(Relaxed)
    }

    /// hyper has been polled after an abandoned body: it drained the body
    /// or stopped reading, and bytes it drained were no request head.
    #[inline]
    pub(crate) fn abandon_seen(&self) {
        self.head_pending.store(false, Relaxed);
    }

    /// Requests started on the connection so far.
    #[inline]
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Relaxed)
    }

    /// The deadlines handlers chose, for the watchdog.
    #[inline]
    pub(crate) fn chosen_cell(&self) -> &ChosenCell {
        &self.chosen
    }

    /// The deadlines handlers chose, made when the first one asks.
    pub(crate) fn chosen(&self) -> &Chosen {
        self.chosen.get_or_init(Box::default)
    }

    /// What an HTTP/2 connection is doing: it is quiet when no stream is
    /// open, whatever hyper buffers (its streams are independent).
    pub(crate) fn observe_streams(&self) -> Observed {
        Observed {
            requests: self.requests.load(Relaxed),
            quiet: self.in_flight.load(Relaxed) == 0 && self.open_bodies.load(Relaxed) == 0,
            ..Observed::default()
        }
    }
}

/// Marks one request as in flight until dropped.
#[derive(Debug)]
pub(crate) struct InFlight {
    tracker: Arc<Tracker>,
    responding: bool,
}

impl InFlight {
    /// The service answered: the response is being written from now on.
    #[inline]
    pub(crate) fn responded(&mut self) {
        if !self.responding {
            self.responding = true;
            self.tracker.in_flight.fetch_add(RESPONDING, Relaxed);
        }
    }
}

impl Drop for InFlight {
    #[inline]
    fn drop(&mut self) {
        let mut done = 1;
        if self.responding {
            done += RESPONDING;
        }
        self.tracker.in_flight.fetch_sub(done, SeqCst);
        self.tracker.wake_if_quiet();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// An HTTP/2 connection waiting for its last request to end is woken
    /// when the stream's task drops it, once, and not before.
    #[test]
    fn the_end_of_the_last_request_wakes_the_waiting_connection() {
        let tracker = Arc::new(Tracker::default());
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(count.clone());
        let (first, _) = tracker.request_started();
        let (second, _) = tracker.request_started();
        tracker.body_opened();
        assert!(!tracker.wake_when_quiet(&waker), "requests in flight");
        drop(first);
        tracker.body_closed(BodyEnd::Complete);
        assert_eq!(count.0.load(Ordering::SeqCst), 0, "one is still in flight");
        drop(second);
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        let (third, _) = tracker.request_started();
        drop(third);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "nobody waits any more");
        assert!(tracker.wake_when_quiet(&waker), "quiet already");
    }
}
