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

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::task::unconstrained;
use tokio::time::{Instant, Sleep};

use crate::stats::Counters;

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

/// The side of a request whose deadline a handler may choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The request body, until read to its end (the server's `read_timeout`).
    Read,
    /// The response, until flushed to its end (the server's `write_timeout`).
    Write,
}

/// A phase's deadline as a handler left it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Limit {
    /// Not chosen: the server's timeout applies.
    #[default]
    Server,
    /// This deadline, instead of the server's timeout.
    At(Instant),
    /// No deadline at all.
    Lifted,
}

/// What handlers chose on one ACTIVE HTTP/1 connection: the deadlines of
/// one request (its number on the connection) and the waker of the task
/// that serves the connection, woken when they move. Requests follow each
/// other on an HTTP/1 connection, so one request's choice is enough.
#[derive(Debug, Default)]
pub(crate) struct Chosen(Mutex<ChosenState>);

/// Where a connection's [`Chosen`] lives: made when a handler first asks.
pub(crate) type ChosenCell = OnceLock<Box<Chosen>>;

#[derive(Debug, Default)]
struct ChosenState {
    request: u64,
    read: Limit,
    write: Limit,
    waker: Option<Waker>,
}

impl Chosen {
    fn lock(&self) -> std::sync::MutexGuard<'_, ChosenState> {
        // A panic while holding it leaves plain values.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the deadline of `request`'s `phase` (`None` lifts it) and wakes
    /// the connection's task, whose watchdog then looks again. A deadline
    /// that has passed stays passed, as in Go: the connection is closed,
    /// or is about to be. An earlier request's choice changes nothing.
    pub(crate) fn set(&self, request: u64, side: Side, deadline: Option<Instant>) {
        let waker = {
            let mut state = self.lock();
            if request < state.request {
                return;
            }
            if request > state.request {
                *state = ChosenState {
                    request,
                    waker: state.waker.take(),
                    ..ChosenState::default()
                };
            }
            let limit = match side {
                Side::Read => &mut state.read,
                Side::Write => &mut state.write,
            };
            if let Limit::At(at) = *limit {
                if at <= Instant::now() {
                    return;
                }
            }
            *limit = deadline.map_or(Limit::Lifted, Limit::At);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The read and write limits of `request`, with `waker` registered to
    /// be woken when a handler moves them.
    fn look(&self, request: u64, waker: &Waker) -> (Limit, Limit) {
        let mut state = self.lock();
        if !state.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            state.waker = Some(waker.clone());
        }
        if state.request == request {
            (state.read, state.write)
        } else {
            (Limit::Server, Limit::Server)
        }
    }
}

/// What an ACTIVE HTTP/1 connection is doing, seen after hyper returned
/// `Pending`. Several may hold at once (a handler may answer before it has
/// read the request body).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Observed {
    /// Requests started on this connection so far.
    pub(crate) requests: u64,
    /// Nothing in flight, nothing buffered on the way out, and hyper waits
    /// for bytes: the connection may park.
    pub(crate) quiet: bool,
    /// hyper holds bytes of a request head it cannot parse yet.
    pub(crate) head: bool,
    /// A request body has not been read to its end.
    pub(crate) body: bool,
    /// A response is being written or flushed.
    pub(crate) writing: bool,
}

/// The deadlines of one ACTIVE HTTP/1 connection (see the module docs).
#[derive(Debug)]
pub(crate) struct Watchdog {
    timeouts: Timeouts,
    park_after: Option<Duration>,
    /// When the timer is set to fire; `None` before it is armed and after it
    /// fired.
    timer_at: Option<Instant>,
    /// The waker the timer holds for `timer_at`: until it fires, a look
    /// at its state replaces a poll, as long as the poll brings the same
    /// waker (see `poll`).
    timer_waker: Option<Waker>,
    /// The last poll saw only the quiet streak on the clock and left the
    /// timer waiting for it (see `poll`).
    waiting_quiet: bool,
    requests: u64,
    /// The quiet streak: the request count when it was first seen, and when.
    quiet: Option<(u64, Instant)>,
    head_since: Option<Instant>,
    request_since: Option<Instant>,
    write_since: Option<Instant>,
    /// The connection's own end, whatever it is doing: its age, then the
    /// grace after it (see `life`).
    end: Option<(Instant, Expiry)>,
}

impl Watchdog {
    /// `head_since` is when the bytes hyper is about to read began to
    /// arrive, for the header read timeout.
    pub(crate) fn new(
        timeouts: Timeouts,
        park_after: Option<Duration>,
        head_since: Option<Instant>,
    ) -> Self {
        Watchdog {
            timeouts,
            park_after,
            timer_at: None,
            timer_waker: None,
            waiting_quiet: false,
            requests: 0,
            quiet: None,
            head_since,
            request_since: None,
            write_since: None,
            end: None,
        }
    }

    /// Sets the connection's own end (see `life`), which holds whatever the
    /// connection is doing.
    pub(crate) fn set_end(&mut self, end: Option<(Instant, Expiry)>) {
        self.end = end;
        self.waiting_quiet = false;
    }

    /// Stops parking (shutdown has begun); timeouts still apply.
    pub(crate) fn stop_parking(&mut self) {
        self.park_after = None;
        self.waiting_quiet = false;
    }

    /// When the connection became quiet (for the idle timeout once parked),
    /// and when the partial request head it holds began, if it `carries`
    /// the start of one.
    pub(crate) fn parked_clocks(&self, carried: &[u8]) -> (Instant, Option<Instant>) {
        let now = Instant::now();
        let quiet_since = self.quiet.map_or(now, |(_, since)| since);
        // A head whose first byte the watchdog did not see began at the
        // latest now: counting from now never closes a client early.
        let head_since = (!carried.is_empty()).then(|| self.head_since.unwrap_or(now));
        (quiet_since, head_since)
    }

    /// Checks the deadlines of what the connection is doing, with the
    /// request's own where its handler chose them (`chosen`); `Ready` when
    /// one has passed. Registers the task with `timer` otherwise.
    pub(crate) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        timer: Pin<&mut Sleep>,
        seen: Observed,
        chosen: &ChosenCell,
    ) -> Poll<Expiry> {
        self.poll_with_clock(cx, timer, seen, chosen, Instant::now)
    }

    /// [`poll`](Self::poll), reading the time from `clock`: only when a
    /// phase's clock starts or the timer fired, as the module docs say
    /// (tests pass a clock of their own).
    fn poll_with_clock(
        &mut self,
        cx: &mut Context<'_>,
        mut timer: Pin<&mut Sleep>,
        seen: Observed,
        chosen: &ChosenCell,
        clock: impl Fn() -> Instant,
    ) -> Poll<Expiry> {
        if seen.requests != self.requests {
            self.requests = seen.requests;
            self.request_since = self.head_since.take();
            self.write_since = None;
        }
        // A busy connection is quiet after every response, and the quiet
        // streak's deadlines (park, idle) do not move while it lasts:
        // nothing to compute until the timer fires.
        let quiet_only = seen.quiet && !seen.head;
        if self.waiting_quiet && quiet_only && self.timer_holds(cx) && !timer.is_elapsed() {
            return Poll::Pending;
        }
        self.waiting_quiet = false;
        // Looked at only for the phases a handler may time, and only on a
        // connection where a handler asked to.
        let limits = match chosen.get() {
            Some(chosen) if seen.body || seen.writing => chosen.look(seen.requests, cx.waker()),
            _ => (Limit::Server, Limit::Server),
        };
        let mut now = None;
        loop {
            let Some((at, why)) = self.deadline(seen, limits, &mut now, &clock) else {
                // Nothing to watch. A timer armed earlier may still fire;
                // that only costs a poll.
                return Poll::Pending;
            };
            if now.is_some_and(|now| at <= now) {
                // A zero delay acts at once: the timer wheel would round it
                // up to its next tick.
                return Poll::Ready(why);
            }
            if self.timer_at.is_none_or(|t| at < t) {
                // Later than a pending deadline is left alone: the timer
                // fires early and is moved on below, which is cheaper than
                // moving it now.
                timer.as_mut().reset(at);
                self.timer_at = Some(at);
                self.timer_waker = None;
            }
            // Polling a `Sleep` registers the waker again and spends coop
            // budget: a third of this function's cost on a busy connection,
            // where it is polled once per request. Once it holds the waker of
            // this connection's task, reading its state is enough until it
            // fires. Not across tasks: a woken connection's first poll runs
            // in the lot's task (with a waker that goes nowhere), and if it
            // does not end there its own task polls it next. The
            // registering poll is unconstrained: with the task's budget
            // spent, a `Sleep` returns `Pending` without taking the waker,
            // and the connection would then wait for a timer that never
            // wakes it.
            let registered = self.timer_holds(cx);
            let fired = if registered {
                timer.is_elapsed()
            } else {
                pin!(unconstrained(timer.as_mut())).poll(cx).is_ready()
            };
            if !fired {
                if !registered {
                    self.timer_waker = Some(cx.waker().clone());
                }
                self.waiting_quiet = quiet_only;
                return Poll::Pending;
            }
            self.timer_at = None;
            self.timer_waker = None;
            let fired = clock();
            now = Some(fired);
            if matches!(why, Expiry::Park | Expiry::Idle)
                && self
                    .quiet
                    .is_some_and(|(requests, _)| requests != seen.requests)
            {
                // Requests came and went since the quiet streak began.
                self.quiet = Some((seen.requests, fired));
                continue;
            }
            if at <= fired {
                return Poll::Ready(why);
            }
        }
    }

    /// Whether the timer holds the waker of the task polling now.
    fn timer_holds(&self, cx: &Context<'_>) -> bool {
        self.timer_waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
    }

    /// The earliest deadline of what `seen` shows, starting the clocks of
    /// phases seen for the first time (at the time `read_clock` gives, read
    /// once into `clock`); `(read, write)` are the request's limits.
    fn deadline(
        &mut self,
        seen: Observed,
        (read, write): (Limit, Limit),
        clock: &mut Option<Instant>,
        read_clock: &impl Fn() -> Instant,
    ) -> Option<(Instant, Expiry)> {
        let mut now = || *clock.get_or_insert_with(read_clock);
        let mut best: Option<(Instant, Expiry)> = None;
        let mut consider = |deadline: Option<(Instant, Expiry)>| {
            if let Some((at, why)) = deadline {
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, why));
                }
            }
        };
        consider(self.end);
        if seen.quiet {
            let idle = self.timeouts.idle.filter(|_| !seen.head);
            if self.park_after.is_some() || idle.is_some() {
                let (_, since) = *self.quiet.get_or_insert_with(|| (seen.requests, now()));
                consider(self.park_after.map(|t| (since + t, Expiry::Park)));
                consider(idle.map(|t| (since + t, Expiry::Idle)));
            }
        } else {
            self.quiet = None;
        }
        if seen.head {
            if self.timeouts.header_read.is_some() || self.timeouts.read.is_some() {
                let since = *self.head_since.get_or_insert_with(&mut now);
                consider(self.timeouts.head_deadline(since));
            }
        } else {
            // A head that began before the last request started has become
            // that request (see `poll`).
            self.head_since = None;
        }
        if seen.body {
            match (read, self.timeouts.read) {
                (Limit::Server, Some(t)) => {
                    let since = *self.request_since.get_or_insert_with(&mut now);
                    consider(Some((since + t, Expiry::Read)));
                }
                (Limit::At(at), _) => consider(Some((at, Expiry::Read))),
                (Limit::Server, None) | (Limit::Lifted, _) => {}
            }
        }
        if seen.writing {
            match (write, self.timeouts.write) {
                (Limit::Server, Some(t)) => {
                    let since = *self.write_since.get_or_insert_with(&mut now);
                    consider(Some((since + t, Expiry::Write)));
                }
                (Limit::At(at), _) => consider(Some((at, Expiry::Write))),
                (Limit::Server, None) | (Limit::Lifted, _) => {}
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::time::Duration;

    /// A connection seen quiet for the first time in a poll whose coop
    /// budget is already spent must still be woken when `park_after` has
    /// passed: the watchdog relies on its timer holding the task's waker.
    #[tokio::test]
    async fn timer_registers_with_the_budget_spent() {
        let park_after = Duration::from_millis(20);
        let mut watchdog = Watchdog::new(Timeouts::default(), Some(park_after), None);
        let mut timer = pin!(tokio::time::sleep(Duration::from_secs(3600)));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..1_000 {
            tx.send(i).unwrap();
        }
        let quiet = Observed {
            quiet: true,
            ..Observed::default()
        };
        let mut first = true;
        let fired = poll_fn(|cx| {
            if first {
                first = false;
                // Spend the budget: the channel answers `Pending` once it
                // is gone, with messages still queued.
                while rx.poll_recv(cx).is_ready() {}
            }
            watchdog.poll(cx, timer.as_mut(), quiet, &ChosenCell::new())
        });
        // A hang guard that wins ties: once it fires, the watchdog's own
        // (elapsed) timer must not get a poll that would hide the hang.
        tokio::select! {
            biased;
            () = tokio::time::sleep(Duration::from_secs(5)) => {
                panic!("the watchdog was never woken")
            }
            why = fired => assert_eq!(why, Expiry::Park),
        }
    }

    /// A watchdog under a clock the test sets. Its timer belongs to a
    /// runtime that never runs, so it fires only when the test says
    /// ([`Rig::fire`]): the test plays the timer wheel, and the watchdog
    /// decides with the time the clock gives.
    struct Rig {
        dog: Watchdog,
        timer: Pin<Box<Sleep>>,
        chosen: ChosenCell,
        /// The test's epoch: deadlines are counted from it.
        t0: Instant,
        /// What the clock reads.
        now: std::cell::Cell<Instant>,
        /// How often the watchdog read it.
        reads: std::cell::Cell<u32>,
        /// Before the runtime's timer started: its first tick.
        before_start: Instant,
        _runtime: tokio::runtime::Runtime,
    }

    /// Where the timer is before the watchdog first sets it.
    const UNSET: Duration = Duration::from_secs(365 * 24 * 3600);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    impl Rig {
        /// A watchdog for `timeouts` and `park_after` whose head began
        /// `head_since` after the epoch; the clock reads the epoch.
        fn new(timeouts: Timeouts, park_after: Option<Duration>, head_since: Option<u64>) -> Rig {
            let before_start = Instant::now();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime with a timer");
            let t0 = Instant::now();
            let timer = {
                let _in = runtime.enter();
                Box::pin(tokio::time::sleep_until(t0 + UNSET))
            };
            Rig {
                dog: Watchdog::new(timeouts, park_after, head_since.map(|s| t0 + secs(s))),
                timer,
                chosen: ChosenCell::new(),
                t0,
                now: std::cell::Cell::new(t0),
                reads: std::cell::Cell::new(0),
                before_start,
                _runtime: runtime,
            }
        }

        /// `s` seconds after the epoch.
        fn at(&self, s: u64) -> Instant {
            self.t0 + secs(s)
        }

        /// The clock reads `s` seconds after the epoch from now on.
        fn set_now(&self, s: u64) {
            self.now.set(self.at(s));
        }

        fn poll(&mut self, seen: Observed) -> Poll<Expiry> {
            let mut cx = Context::from_waker(Waker::noop());
            let (now, reads) = (&self.now, &self.reads);
            let clock = || {
                reads.set(reads.get() + 1);
                now.get()
            };
            let timer = self.timer.as_mut();
            (self.dog).poll_with_clock(&mut cx, timer, seen, &self.chosen, clock)
        }

        /// The timer fires, as the wheel makes it at its deadline: moved to
        /// the wheel's first tick, which has passed, it fires there and
        /// then. The watchdog sees only that it fired.
        fn fire(&mut self) {
            self.timer.as_mut().reset(self.before_start);
            assert!(self.timer.is_elapsed(), "a timer reset into the past fires");
        }

        /// Where the watchdog set the timer.
        fn armed(&self) -> Instant {
            self.timer.deadline()
        }

        fn choose(&self, request: u64, side: Side, deadline: Option<Instant>) {
            self.chosen
                .get_or_init(Box::default)
                .set(request, side, deadline);
        }
    }

    fn seen(requests: u64) -> Observed {
        Observed {
            requests,
            ..Observed::default()
        }
    }

    fn quiet(requests: u64) -> Observed {
        Observed {
            quiet: true,
            ..seen(requests)
        }
    }

    fn head(requests: u64) -> Observed {
        Observed {
            head: true,
            ..seen(requests)
        }
    }

    fn body(requests: u64) -> Observed {
        Observed {
            body: true,
            ..seen(requests)
        }
    }

    fn writing(requests: u64) -> Observed {
        Observed {
            writing: true,
            ..seen(requests)
        }
    }

    fn timeouts() -> Timeouts {
        Timeouts {
            header_read: Some(secs(10)),
            read: Some(secs(30)),
            write: Some(secs(20)),
            idle: Some(secs(60)),
        }
    }

    #[test]
    fn the_header_read_timeout_counts_from_the_heads_first_byte() {
        let mut rig = Rig::new(timeouts(), None, Some(0));
        rig.set_now(3);
        assert_eq!(rig.poll(head(0)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(10), "from head_since, not from now");
        assert_eq!(rig.reads.get(), 0, "the head's clock had started");
        rig.set_now(10);
        rig.fire();
        assert_eq!(rig.poll(head(0)), Poll::Ready(Expiry::HeaderRead));
    }

    #[test]
    fn a_head_first_seen_starts_its_clock_then() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.set_now(2);
        assert_eq!(rig.poll(head(0)), Poll::Pending);
        assert_eq!((rig.armed(), rig.reads.get()), (rig.at(12), 1));
        rig.set_now(5);
        assert_eq!(rig.poll(head(0)), Poll::Pending);
        assert_eq!(
            (rig.armed(), rig.reads.get()),
            (rig.at(12), 1),
            "started once"
        );
        rig.set_now(12);
        rig.fire();
        assert_eq!(rig.poll(head(0)), Poll::Ready(Expiry::HeaderRead));
    }

    #[test]
    fn a_read_timeout_shorter_than_the_header_read_timeout_bounds_the_head() {
        let short_read = Timeouts {
            read: Some(secs(4)),
            ..timeouts()
        };
        let mut rig = Rig::new(short_read, None, Some(1));
        assert_eq!(rig.poll(head(0)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(5));
        rig.set_now(5);
        rig.fire();
        assert_eq!(rig.poll(head(0)), Poll::Ready(Expiry::Read));
    }

    #[test]
    fn a_timer_that_fires_before_the_deadline_is_set_again() {
        // The watchdog decides with the clock: a timer that fires early
        // (it was left at a deadline that no longer holds) is set again.
        let mut rig = Rig::new(timeouts(), None, Some(0));
        assert_eq!(rig.poll(head(0)), Poll::Pending);
        rig.set_now(4);
        rig.fire();
        assert_eq!(rig.poll(head(0)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(10));
        rig.set_now(10);
        rig.fire();
        assert_eq!(rig.poll(head(0)), Poll::Ready(Expiry::HeaderRead));
    }

    #[test]
    fn a_later_deadline_leaves_the_timer_until_it_fires() {
        // Moving a `Sleep` later is cheap only once it has fired: the
        // watchdog lets the earlier one fire, then moves it.
        let mut rig = Rig::new(timeouts(), None, None);
        assert_eq!(rig.poll(writing(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(20));
        rig.set_now(2);
        assert_eq!(rig.poll(quiet(1)), Poll::Pending);
        assert_eq!(
            rig.armed(),
            rig.at(20),
            "the idle deadline, at 62, is later"
        );
        rig.set_now(20);
        rig.fire();
        assert_eq!(rig.poll(quiet(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(62));
        rig.set_now(62);
        rig.fire();
        assert_eq!(rig.poll(quiet(1)), Poll::Ready(Expiry::Idle));
    }

    #[test]
    fn a_body_read_timeout_counts_from_the_first_sight_of_its_request() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.set_now(5);
        assert_eq!(rig.poll(body(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(35));
        rig.set_now(34);
        assert_eq!(rig.poll(body(1)), Poll::Pending);
        assert_eq!((rig.armed(), rig.reads.get()), (rig.at(35), 1));
        rig.set_now(35);
        rig.fire();
        assert_eq!(rig.poll(body(1)), Poll::Ready(Expiry::Read));
    }

    #[test]
    fn a_body_read_timeout_counts_from_the_first_byte_of_its_head() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.set_now(1);
        assert_eq!(rig.poll(head(0)), Poll::Pending);
        rig.set_now(8);
        assert_eq!(rig.poll(body(1)), Poll::Pending);
        assert_eq!(rig.reads.get(), 1, "the request began with its head");
        // Still at the head's deadline (11), which is earlier.
        assert_eq!(rig.armed(), rig.at(11));
        rig.set_now(11);
        rig.fire();
        assert_eq!(rig.poll(body(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(31));
        rig.set_now(31);
        rig.fire();
        assert_eq!(rig.poll(body(1)), Poll::Ready(Expiry::Read));
    }

    #[test]
    fn the_write_timeout_counts_from_the_first_sight_of_each_response() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.set_now(1);
        assert_eq!(rig.poll(writing(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(21));
        rig.set_now(15);
        assert_eq!(rig.poll(writing(1)), Poll::Pending);
        assert_eq!((rig.armed(), rig.reads.get()), (rig.at(21), 1));
        // The next request's response has a clock of its own.
        rig.set_now(16);
        assert_eq!(rig.poll(writing(2)), Poll::Pending);
        assert_eq!(rig.reads.get(), 2);
        rig.set_now(21);
        rig.fire();
        assert_eq!(rig.poll(writing(2)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(36));
        rig.set_now(36);
        rig.fire();
        assert_eq!(rig.poll(writing(2)), Poll::Ready(Expiry::Write));
    }

    #[test]
    fn the_idle_timeout_counts_from_the_first_quiet_sight() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.set_now(1);
        assert_eq!(rig.poll(quiet(0)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(61));
        rig.set_now(61);
        rig.fire();
        assert_eq!(rig.poll(quiet(0)), Poll::Ready(Expiry::Idle));
    }

    #[test]
    fn a_quiet_connection_parks_after_park_after() {
        let mut rig = Rig::new(timeouts(), Some(secs(5)), None);
        rig.set_now(1);
        assert_eq!(rig.poll(quiet(0)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(6));
        rig.set_now(6);
        rig.fire();
        assert_eq!(rig.poll(quiet(0)), Poll::Ready(Expiry::Park));
    }

    #[test]
    fn a_busy_connection_reads_no_clock_until_its_timer_fires() {
        // Quiet after every response, with requests in between that the
        // watchdog never saw: its quiet streak starts again when the timer
        // fires, and the connection parks once quiet for `park_after`.
        let mut rig = Rig::new(timeouts(), Some(secs(5)), None);
        assert_eq!(rig.poll(quiet(0)), Poll::Pending);
        assert_eq!((rig.armed(), rig.reads.get()), (rig.at(5), 1));
        for requests in 1..=3 {
            rig.set_now(requests);
            assert_eq!(rig.poll(quiet(requests)), Poll::Pending);
        }
        assert_eq!((rig.armed(), rig.reads.get()), (rig.at(5), 1));
        rig.set_now(5);
        rig.fire();
        assert_eq!(rig.poll(quiet(3)), Poll::Pending);
        assert_eq!((rig.armed(), rig.reads.get()), (rig.at(10), 2));
        rig.set_now(10);
        rig.fire();
        assert_eq!(rig.poll(quiet(3)), Poll::Ready(Expiry::Park));
    }

    #[test]
    fn a_connection_that_stops_parking_keeps_its_idle_timeout() {
        let mut rig = Rig::new(timeouts(), Some(secs(5)), None);
        assert_eq!(rig.poll(quiet(0)), Poll::Pending);
        rig.dog.stop_parking();
        assert_eq!(rig.poll(quiet(0)), Poll::Pending);
        rig.set_now(5);
        rig.fire();
        assert_eq!(rig.poll(quiet(0)), Poll::Pending);
        assert_eq!(
            rig.armed(),
            rig.at(60),
            "the idle deadline, from the same streak"
        );
        rig.set_now(60);
        rig.fire();
        assert_eq!(rig.poll(quiet(0)), Poll::Ready(Expiry::Idle));
    }

    #[test]
    fn the_age_ends_a_connection_whatever_it_does_then_its_grace() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.dog.set_end(Some((rig.at(3), Expiry::Age)));
        assert_eq!(rig.poll(writing(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(3), "earlier than the write timeout");
        rig.set_now(3);
        rig.fire();
        assert_eq!(rig.poll(writing(1)), Poll::Ready(Expiry::Age));
        // What `Closing::age_passed` does: the grace replaces the age.
        rig.dog.set_end(Some((rig.at(8), Expiry::AgeGrace)));
        assert_eq!(rig.poll(writing(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(8));
        rig.set_now(8);
        rig.fire();
        assert_eq!(rig.poll(writing(1)), Poll::Ready(Expiry::AgeGrace));
    }

    #[test]
    fn an_end_set_while_the_connection_waits_quiet_moves_the_timer() {
        let mut rig = Rig::new(timeouts(), Some(secs(5)), None);
        assert_eq!(rig.poll(quiet(0)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(5));
        rig.dog.set_end(Some((rig.at(2), Expiry::Age)));
        assert_eq!(rig.poll(quiet(0)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(2));
        rig.set_now(2);
        rig.fire();
        assert_eq!(rig.poll(quiet(0)), Poll::Ready(Expiry::Age));
    }

    #[test]
    fn a_deadline_passed_when_a_clock_starts_acts_at_once() {
        // Without the timer: the wheel would round a zero delay up to its
        // next tick.
        let mut rig = Rig::new(timeouts(), None, None);
        rig.dog.set_end(Some((rig.at(1), Expiry::Age)));
        rig.set_now(2);
        assert_eq!(rig.poll(quiet(0)), Poll::Ready(Expiry::Age));
        assert_eq!(rig.armed(), rig.at(0) + UNSET, "the timer was not set");
    }

    #[test]
    fn a_chosen_read_deadline_replaces_the_servers_read_timeout() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.choose(1, Side::Read, Some(rig.at(5)));
        assert_eq!(rig.poll(body(1)), Poll::Pending);
        assert_eq!((rig.armed(), rig.reads.get()), (rig.at(5), 0));
        rig.set_now(5);
        rig.fire();
        assert_eq!(rig.poll(body(1)), Poll::Ready(Expiry::Read));

        // Later than the server's, it replaces it too.
        let mut rig = Rig::new(timeouts(), None, None);
        rig.choose(1, Side::Read, Some(rig.at(100)));
        assert_eq!(rig.poll(body(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(100));
    }

    #[test]
    fn a_chosen_write_deadline_replaces_the_servers_write_timeout() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.choose(1, Side::Write, Some(rig.at(40)));
        assert_eq!(rig.poll(writing(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(40));
        rig.set_now(40);
        rig.fire();
        assert_eq!(rig.poll(writing(1)), Poll::Ready(Expiry::Write));
    }

    #[test]
    fn a_lifted_write_deadline_leaves_the_response_unbounded() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.choose(1, Side::Write, None);
        assert_eq!(rig.poll(writing(1)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(0) + UNSET, "nothing to watch");
        assert_eq!(rig.reads.get(), 0);
    }

    #[test]
    fn a_deadline_chosen_for_an_earlier_request_does_not_hold() {
        let mut rig = Rig::new(timeouts(), None, None);
        rig.choose(1, Side::Read, Some(rig.at(5)));
        assert_eq!(rig.poll(body(2)), Poll::Pending);
        assert_eq!(rig.armed(), rig.at(30), "the server's read timeout");
    }
}
