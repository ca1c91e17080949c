//! A connection's deadlines, enforced with one timer per connection: Go's
//! four timeouts (header read, read, write, idle), its transport's
//! handshake (`handshake_timeout`: TLS, a PROXY header), and its end
//! (`max_connection_age`, then the age's grace).
//!
//! A Go server once lost half its QPS because each request moved four
//! deadlines on one locked timer heap. In tokio, moving a `Sleep` to a later
//! deadline is a lock-free compare-and-swap, but moving it earlier, or
//! registering it again after it fired, takes the timer wheel's lock; hyper's
//! own `header_read_timeout` even boxes a new `Sleep` per request. dormant
//! keeps one `Sleep` per ACTIVE connection (the one that also decides when
//! the connection parks) and a [`Watchdog`] that decides what it waits for.
//!
//! The watchdog looks at the connection only when hyper returns `Pending`,
//! and starts a clock only for a phase it *sees*: a request that arrives,
//! is answered and flushed within one poll of hyper never shows a phase that
//! has a timeout, so a busy keep-alive connection reads no clock and touches
//! no timer per request. The idle clock is lazy as well: it starts when the
//! connection is first seen quiet, and when the timer fires after requests
//! came and went, it just starts again. A busy connection thus re-arms its
//! timer once per `park_after`, whatever its request rate. In between, the
//! watchdog neither polls the timer (once it holds the task's waker, a look
//! at its state is enough) nor recomputes deadlines while the connection is
//! only ever seen quiet: both would cost every request (BENCHMARKS.md,
//! "Instructions per request").
//!
//! | phase, seen after hyper returned `Pending` | clock starts | timeout |
//! |---|---|---|
//! | bytes of a request head, head not complete | first byte after an idle wait, or accept | `header_read_timeout`, `read_timeout` |
//! | a request body not read to its end | first byte of the request (or first seen) | `read_timeout` |
//! | a response being written or flushed | first seen | `write_timeout` |
//! | nothing in flight, nothing buffered | first seen quiet | `park_after`, `idle_timeout` |
//!
//! PARKED connections use the same deadlines (see `conn`), and DORMANT ones
//! the parking lot's ordered queue.
//!
//! A handler may choose its own request's read and write deadlines
//! (`Deadlines`, Go's `ResponseController`): they replace the server's
//! `read_timeout` for the body phase and `write_timeout` for the response
//! phase of that request. What handlers chose lives in a [`Chosen`], made
//! the first time a handler on the connection asks for its deadlines; the
//! watchdog looks at it only for a body or response phase it sees, so a
//! connection whose handlers never ask pays nothing for it.
//!
//! # Files
//!
//! The settings and what a timer fires for (here: [`Timeouts`],
//! [`Expiry`]); the watchdog of an ACTIVE connection (`watchdog.rs`:
//! `Watchdog`, with its tests under the clock they set, `watchdog/tests.rs`);
//! and the deadlines a handler chose for its own request (`chosen.rs`:
//! `Chosen`), which the watchdog reads.

mod chosen;
mod watchdog;

use std::time::Duration;

use tokio::time::Instant;

use crate::stats::Counters;
pub(crate) use chosen::{Chosen, ChosenCell, Side};
pub(crate) use watchdog::{Observed, Watchdog};

/// The timeouts a server enforces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timeouts {
    pub(crate) header_read: Option<Duration>,
    pub(crate) read: Option<Duration>,
    pub(crate) write: Option<Duration>,
    pub(crate) idle: Option<Duration>,
}

impl Timeouts {
    /// The deadline of a request head that began at `since`: the header
    /// read timeout, or the whole-request read timeout if that is shorter.
    pub(crate) fn head_deadline(&self, since: Instant) -> Option<(Instant, Expiry)> {
        match (self.header_read, self.read) {
            (Some(h), Some(r)) if r < h => Some((since + r, Expiry::Read)),
            (Some(h), _) => Some((since + h, Expiry::HeaderRead)),
            (None, Some(r)) => Some((since + r, Expiry::Read)),
            (None, None) => None,
        }
    }

    pub(crate) fn idle_deadline(&self, since: Instant) -> Option<(Instant, Expiry)> {
        self.idle.map(|t| (since + t, Expiry::Idle))
    }
}

/// What a connection's timer fired for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Quiet for `park_after`: take hyper apart.
    Park,
    Idle,
    HeaderRead,
    Read,
    Write,
    /// A TLS handshake took longer than `handshake_timeout`.
    Handshake,
    /// The connection's `max_connection_age` passed: it finishes what it
    /// is doing and closes (see `life`).
    Age,
    /// The grace after its age is over too: closed.
    AgeGrace,
    /// A PROXY header took longer than `handshake_timeout`, the bound
    /// of a transport's handshake.
    ProxyHeader,
}

impl Expiry {
    /// Whether it bounds a transport's handshake (TLS, a PROXY header)
    /// alone: once the handshake is done, the connection's other
    /// deadlines take over.
    pub(crate) fn bounds_handshake(self) -> bool {
        matches!(self, Expiry::Handshake | Expiry::ProxyHeader)
    }

    /// Counts a connection closed for this reason.
    pub(crate) fn count(self, stats: &Counters) {
        use std::sync::atomic::Ordering::Relaxed;
        let counter = match self {
            Expiry::Park | Expiry::AgeGrace => return,
            Expiry::Age => &stats.age_closes,
            Expiry::Idle => &stats.idle_timeouts,
            Expiry::HeaderRead => &stats.header_read_timeouts,
            // The stream counts its failed header itself.
            Expiry::ProxyHeader => return,
            Expiry::Read => &stats.read_timeouts,
            Expiry::Write => &stats.write_timeouts,
            Expiry::Handshake => &stats.tls_handshake_timeouts,
        };
        counter.fetch_add(1, Relaxed);
    }
}
