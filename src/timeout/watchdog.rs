//! The watchdog: one `Sleep` per ACTIVE connection, and what it waits for
//! (see the module docs of `timeout` for why it looks so rarely).

use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::task::unconstrained;
use tokio::time::{Instant, Sleep};

use super::chosen::{ChosenCell, Limit, Side};
use super::{Expiry, Timeouts};

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
            consider(self.chosen_deadline(Side::Read, read, &mut now));
        }
        if seen.writing {
            consider(self.chosen_deadline(Side::Write, write, &mut now));
        }
        best
    }

    /// The deadline of the phase on `side`, which a handler may choose
    /// (`limit`): the handler's, or the server's timeout from the phase's
    /// start (its clock starts at `now` the first time it is needed), or
    /// none.
    fn chosen_deadline(
        &mut self,
        side: Side,
        limit: Limit,
        now: impl FnOnce() -> Instant,
    ) -> Option<(Instant, Expiry)> {
        let (timeout, since, why) = match side {
            Side::Read => (self.timeouts.read, &mut self.request_since, Expiry::Read),
            Side::Write => (self.timeouts.write, &mut self.write_since, Expiry::Write),
        };
        match (limit, timeout) {
            (Limit::Server, Some(t)) => Some((*since.get_or_insert_with(now) + t, why)),
            (Limit::At(at), _) => Some((at, why)),
            (Limit::Server, None) | (Limit::Lifted, _) => None,
        }
    }
}

#[cfg(test)]
mod tests;
