//! ACTIVE on HTTP/2 (h2c with prior knowledge, or ALPN `h2`): hyper's
//! http2 server over [`H2Io`], and the sleep of an idle connection.
//!
//! ```text
//! ACTIVE ── quiet for park_after ──► fence, if needed: SETTINGS_HEADER_TABLE_SIZE = 0
//!   ▲     (no stream open, nothing      │ the client's ACK (kept from h2),
//!   │      in flight, all flushed)      │ still quiet
//!   │                                   ▼
//!   │                              asleep: hyper dropped; the transport and
//!   │                              `wire::Asleep` go to the lot, PARKED then
//!   │                              DORMANT like an HTTP/1 connection
//!   └── bytes: a fresh hyper connection reads the prelude, answers it
//!       (settled before the client sees it), then the client's bytes
//! ```
//!
//! Why this is safe is `wire`'s part. A connection that cannot sleep when
//! it could (see [`Decline`]) stays awake, served as hyper serves it, and
//! the reason is counted once per quiet spell. With an idle timeout, a
//! connection with no request open for that long is shut down gracefully
//! (GOAWAY); a sleeping one gets a GOAWAY from the lot.

mod io;

use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tracing::debug;

use bytes::Bytes;
use hyper::server::conn::http2;
use hyper_util::rt::TokioExecutor;

use super::phase::{Clocks, Closing, Ended, Quiet, Start, count_requests};
use crate::config::H2Sleep;
use crate::life::Life;
use crate::service::{ConnService, HttpService, ResBody};
use crate::shutdown::{Level, Watch as ShutdownWatch};
use crate::state::Shared;
use crate::timeout::{Expiry, Timeouts, Watchdog};
use crate::track::Tracker;
use crate::transport::Seam;
use crate::wire::{Asleep, Decline, Watch};
use io::{H2Io, WireState, lock};

/// The longest a connection waits for the ACK of its fence when its
/// `park_after` is shorter (or zero, right after a long sleep).
const FENCE_WAIT: Duration = Duration::from_secs(1);

/// hyper's HTTP/2 connection over dormant's transport.
type HyperH2<'a, T, S> =
    http2::Connection<H2Io<'a, T>, ConnService<S, <T as Seam>::Addr>, TokioExecutor>;

/// Where the sleep timer waits while the connection is busy: far enough
/// never to fire.
const OUT_OF_THE_WAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Serves an HTTP/2 connection until it ends or sleeps; `asleep` is what
/// it kept if it wakes from a sleep. Counts its streams in its life, whose
/// limits it keeps: past its age, or once its last request started, it
/// sends GOAWAY and ends with its streams (past the age's grace, at once).
pub(super) async fn serve<T, S, B>(
    mut start: Start<'_, T, S>,
    asleep: Option<Box<Asleep>>,
) -> Ended<T>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    let (tracker, service) = start.service();
    let (mut stream, state, life) = (start.stream, start.state, start.life);
    let shared = &state.shared;
    let wire = WireState::new(asleep.as_deref().map_or_else(Watch::new, Watch::woken));
    let requests_left = service.requests_left;
    let mut driver = ActiveH2::new(
        shared,
        life,
        requests_left,
        start.timing.park_after,
        tracker,
    );
    let mut pins = Pins {
        timer: pin!(tokio::time::sleep(Duration::ZERO)),
        park_timer: pin!(tokio::time::sleep(Duration::ZERO)),
        watch: pin!(state.signal.watch()),
    };
    let outcome = {
        let io = H2Io::new(
            &mut stream,
            start.replay,
            &wire,
            &shared.pool,
            asleep.as_deref(),
        );
        let mut conn = pin!(shared.http2.serve_connection(io, service));
        poll_fn(|cx| driver.poll(cx, conn.as_mut(), &mut pins, &wire)).await
    };
    count_requests(&driver.tracker, life, shared);
    match outcome {
        Some((asleep, quiet_since)) => Ended::Quiet(Quiet {
            stream,
            carried: Bytes::new(),
            clocks: Clocks {
                quiet_since,
                head_since: None,
            },
            asleep: Some(Box::new(asleep)),
        }),
        None => Ended::Closed,
    }
}

/// The timers and the shutdown watch of an HTTP/2 phase, pinned on its
/// stack.
struct Pins<'p, 's> {
    /// The watchdog's: the idle timeout, the age and its grace.
    timer: Pin<&'p mut Sleep>,
    /// [`Bedtime`]'s.
    park_timer: Pin<&'p mut Sleep>,
    watch: Pin<&'p mut ShutdownWatch<'s>>,
}

/// What an HTTP/2 phase ended with: `None` if the connection is finished;
/// what a fresh connection needs if it sleeps, and since when it is quiet.
type Outcome = Option<(Asleep, Instant)>;

/// One ACTIVE HTTP/2 connection: what the driver watches hyper with.
struct ActiveH2<'a> {
    shared: &'a Shared,
    tracker: Arc<Tracker>,
    watchdog: Watchdog,
    closing: Closing,
    age_grace: Option<Duration>,
    /// How many more requests the connection may start.
    requests_left: Option<u32>,
    /// When it may sleep; `None` if it may not (`park_after(None)`).
    bedtime: Option<Bedtime>,
}

impl<'a> ActiveH2<'a> {
    fn new(
        shared: &'a Shared,
        life: &Life,
        requests_left: Option<u32>,
        park_after: Option<Duration>,
        tracker: Arc<Tracker>,
    ) -> Self {
        let config = &shared.config;
        let idle_only = Timeouts {
            idle: config.timeouts.idle,
            ..Timeouts::default()
        };
        let mut watchdog = Watchdog::new(idle_only, None, None);
        watchdog.set_end(life.ends_at.map(|at| (at, Expiry::Age)));
        ActiveH2 {
            shared,
            tracker,
            watchdog,
            closing: Closing::No,
            age_grace: config.limits.age_grace,
            requests_left,
            bedtime: park_after.map(|after| Bedtime::new(after, config.h2_sleep)),
        }
    }

    /// Polls the shutdown signal, hyper, the connection's limits, the
    /// watchdog and the bedtime.
    fn poll<T, S, B>(
        &mut self,
        cx: &mut Context<'_>,
        mut conn: Pin<&mut HyperH2<'_, T, S>>,
        pins: &mut Pins<'_, '_>,
        wire: &Mutex<WireState>,
    ) -> Poll<Outcome>
    where
        T: Seam,
        S: HttpService<B>,
        B: ResBody,
    {
        match pins.watch.as_mut().poll_level(cx) {
            Level::Running => {}
            Level::Draining => {
                if self.closing.drain() {
                    conn.as_mut().graceful_shutdown();
                }
            }
            Level::Forced => return Poll::Ready(None),
        }
        match conn.as_mut().poll(cx) {
            Poll::Ready(Ok(())) => return Poll::Ready(None),
            Poll::Ready(Err(error)) => {
                debug!(%error, "h2 connection error");
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        if self.closing == Closing::Draining {
            return Poll::Pending;
        }
        let seen = self.tracker.observe_streams();
        let last = (self.requests_left).is_some_and(|left| seen.requests >= u64::from(left));
        if last && self.closing.drain() {
            debug!("h2 request limit reached: GOAWAY");
            conn.as_mut().graceful_shutdown();
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        // No `Deadlines` on HTTP/2: nobody chooses (see `deadlines`).
        let chosen = self.tracker.chosen_cell();
        match self.watchdog.poll(cx, pins.timer.as_mut(), seen, chosen) {
            Poll::Ready(Expiry::AgeGrace) => return Poll::Ready(None),
            Poll::Ready(_) if self.closing != Closing::No => {}
            Poll::Ready(why) => {
                debug!(?why, "h2 connection closing: GOAWAY");
                why.count(&self.shared.stats);
                if why == Expiry::Age {
                    // From now on the watchdog watches the grace alone.
                    self.watchdog = Watchdog::new(Timeouts::default(), None, None);
                    self.closing.age_passed(&mut self.watchdog, self.age_grace);
                } else {
                    self.closing.drain();
                }
                conn.as_mut().graceful_shutdown();
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Pending => {}
        }
        if self.closing != Closing::No {
            return Poll::Pending;
        }
        if let Some(bedtime) = &mut self.bedtime {
            let timer = pins.park_timer.as_mut();
            if let Poll::Ready(asleep) = bedtime.poll(cx, timer, wire, &self.tracker, self.shared) {
                return Poll::Ready(Some((asleep, bedtime.since)));
            }
        }
        Poll::Pending
    }
}

/// When an idle connection sleeps: quiet for `park_after` (a quiet spell
/// ends with any frame of the client), then, if it needs it, fenced (see
/// `wire`).
#[derive(Debug)]
struct Bedtime {
    park_after: Duration,
    sleep: H2Sleep,
    /// The client's frame count when the current quiet spell began.
    spell: Option<u64>,
    since: Instant,
    stage: Stage,
    /// When the current stage's wait ends.
    due: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Quiet, for `park_after`.
    Quiet,
    /// The fence is wanted or out; its ACK is awaited.
    Fencing,
    /// Declined for this spell.
    Declined,
}

impl Bedtime {
    fn new(park_after: Duration, sleep: H2Sleep) -> Self {
        let now = Instant::now();
        Bedtime {
            park_after,
            sleep,
            spell: None,
            since: now,
            stage: Stage::Quiet,
            due: now,
        }
    }

    /// `Ready` with what the connection keeps once it may sleep.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        mut timer: Pin<&mut Sleep>,
        wire: &Mutex<WireState>,
        tracker: &Tracker,
        shared: &Shared,
    ) -> Poll<Asleep> {
        let stats = &shared.stats;
        let mut wire = lock(wire);
        let wire_quiet = wire.read_blocked && !wire.unflushed && wire.watch.quiet();
        let mut quiet = wire_quiet && tracker.observe_streams().quiet;
        if wire_quiet && !quiet {
            // Only requests keep it awake, which its streams' tasks end:
            // nothing else wakes this task then.
            quiet = tracker.wake_when_quiet(cx.waker());
        }
        if !quiet {
            if self.spell.take().is_some() {
                // Busy again: the timer goes out of the way. A timer that
                // fires on a busy connection runs its task between the
                // tasks of its streams, and h2 then writes responses one
                // by one: `h2load -m10` saw 1.7 writes per request instead
                // of 1.0. (A later deadline costs the timer wheel nothing.)
                timer.reset(self.since + OUT_OF_THE_WAY);
            }
            return Poll::Pending;
        }
        let frames = wire.watch.frames_in();
        if self.spell != Some(frames) {
            self.spell = Some(frames);
            self.since = Instant::now();
            self.stage = Stage::Quiet;
            self.due = self.since + self.park_after;
            timer.as_mut().reset(self.due);
            wire.fence_wanted = false;
        }
        match self.stage {
            Stage::Declined => return Poll::Pending,
            Stage::Fencing if wire.watch.settled() => return self.sleep(&wire.watch, shared),
            // A zero wait acts at once: the timer wheel would round it up
            // to its next tick.
            Stage::Quiet if self.park_after.is_zero() => {}
            Stage::Quiet | Stage::Fencing => {
                if timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
        }
        // The stage's wait is over.
        match (self.stage, self.sleep) {
            (Stage::Fencing, _) => {
                debug!("h2 sleep declined: the client did not acknowledge the fence");
                stats.h2_declines_unacknowledged.fetch_add(1, Relaxed);
                // It may read only while it waits for a response.
                wire.watch.fence_early();
                self.stage = Stage::Declined;
                Poll::Pending
            }
            _ if wire.watch.settled() => self.sleep(&wire.watch, shared),
            _ => {
                // The fence goes out at hyper's next flush (as soon as no
                // other SETTINGS is in flight), and the connection sleeps
                // on its ACK.
                wire.fence_wanted = true;
                self.stage = Stage::Fencing;
                self.due = Instant::now() + self.park_after.max(FENCE_WAIT);
                timer.as_mut().reset(self.due);
                let _ = timer.poll(cx);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    fn sleep(&mut self, watch: &Watch, shared: &Shared) -> Poll<Asleep> {
        match watch.asleep(self.sleep.fresh_window, &shared.h2_settings) {
            Ok(asleep) => Poll::Ready(asleep),
            Err(Decline::Window) => {
                debug!("h2 sleep declined: flow-control windows");
                shared.stats.h2_declines_window.fetch_add(1, Relaxed);
                self.stage = Stage::Declined;
                Poll::Pending
            }
        }
    }
}
