use std::future::poll_fn;
use std::time::Duration;

use super::*;
use crate::timeout::Side;

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
/// ([`WatchdogRig::fire`]): the test plays the timer wheel, and the watchdog
/// decides with the time the clock gives.
struct WatchdogRig {
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

impl WatchdogRig {
    /// A watchdog for `timeouts` and `park_after` whose head began
    /// `head_since` after the epoch; the clock reads the epoch.
    fn new(
        timeouts: Timeouts,
        park_after: Option<Duration>,
        head_since: Option<u64>,
    ) -> WatchdogRig {
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
        WatchdogRig {
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
    let mut rig = WatchdogRig::new(timeouts(), None, Some(0));
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
    let mut rig = WatchdogRig::new(timeouts(), None, None);
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
    let mut rig = WatchdogRig::new(short_read, None, Some(1));
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
    let mut rig = WatchdogRig::new(timeouts(), None, Some(0));
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
    let mut rig = WatchdogRig::new(timeouts(), None, None);
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
    let mut rig = WatchdogRig::new(timeouts(), None, None);
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
    let mut rig = WatchdogRig::new(timeouts(), None, None);
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
    let mut rig = WatchdogRig::new(timeouts(), None, None);
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
    let mut rig = WatchdogRig::new(timeouts(), None, None);
    rig.set_now(1);
    assert_eq!(rig.poll(quiet(0)), Poll::Pending);
    assert_eq!(rig.armed(), rig.at(61));
    rig.set_now(61);
    rig.fire();
    assert_eq!(rig.poll(quiet(0)), Poll::Ready(Expiry::Idle));
}

#[test]
fn a_quiet_connection_parks_after_park_after() {
    let mut rig = WatchdogRig::new(timeouts(), Some(secs(5)), None);
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
    let mut rig = WatchdogRig::new(timeouts(), Some(secs(5)), None);
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
    let mut rig = WatchdogRig::new(timeouts(), Some(secs(5)), None);
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
    let mut rig = WatchdogRig::new(timeouts(), None, None);
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
    let mut rig = WatchdogRig::new(timeouts(), Some(secs(5)), None);
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
    let mut rig = WatchdogRig::new(timeouts(), None, None);
    rig.dog.set_end(Some((rig.at(1), Expiry::Age)));
    rig.set_now(2);
    assert_eq!(rig.poll(quiet(0)), Poll::Ready(Expiry::Age));
    assert_eq!(rig.armed(), rig.at(0) + UNSET, "the timer was not set");
}

#[test]
fn a_chosen_read_deadline_replaces_the_servers_read_timeout() {
    let mut rig = WatchdogRig::new(timeouts(), None, None);
    rig.choose(1, Side::Read, Some(rig.at(5)));
    assert_eq!(rig.poll(body(1)), Poll::Pending);
    assert_eq!((rig.armed(), rig.reads.get()), (rig.at(5), 0));
    rig.set_now(5);
    rig.fire();
    assert_eq!(rig.poll(body(1)), Poll::Ready(Expiry::Read));

    // Later than the server's, it replaces it too.
    let mut rig = WatchdogRig::new(timeouts(), None, None);
    rig.choose(1, Side::Read, Some(rig.at(100)));
    assert_eq!(rig.poll(body(1)), Poll::Pending);
    assert_eq!(rig.armed(), rig.at(100));
}

#[test]
fn a_chosen_write_deadline_replaces_the_servers_write_timeout() {
    let mut rig = WatchdogRig::new(timeouts(), None, None);
    rig.choose(1, Side::Write, Some(rig.at(40)));
    assert_eq!(rig.poll(writing(1)), Poll::Pending);
    assert_eq!(rig.armed(), rig.at(40));
    rig.set_now(40);
    rig.fire();
    assert_eq!(rig.poll(writing(1)), Poll::Ready(Expiry::Write));
}

#[test]
fn a_lifted_write_deadline_leaves_the_response_unbounded() {
    let mut rig = WatchdogRig::new(timeouts(), None, None);
    rig.choose(1, Side::Write, None);
    assert_eq!(rig.poll(writing(1)), Poll::Pending);
    assert_eq!(rig.armed(), rig.at(0) + UNSET, "nothing to watch");
    assert_eq!(rig.reads.get(), 0);
}

#[test]
fn a_deadline_chosen_for_an_earlier_request_does_not_hold() {
    let mut rig = WatchdogRig::new(timeouts(), None, None);
    rig.choose(1, Side::Read, Some(rig.at(5)));
    assert_eq!(rig.poll(body(2)), Poll::Pending);
    assert_eq!(rig.armed(), rig.at(30), "the server's read timeout");
}
