//! ACTIVE on HTTP/1.1: the hyper seam, where connections are taken apart.
//!
//! # Invariants
//!
//! The code here and in the driver keeps five invariants; each has tests
//! that would fail without it.
//!
//! - **I1 Parked holds nothing.** A PARKED connection holds its transport,
//!   its service, its deadline and leftover bytes only if the client
//!   pipelined a partial request: no hyper object, no pooled buffer.
//!   DORMANT holds less (the transport's fd and state, in the lot). Kept by
//!   [`serve`] returning the transport alone from `into_parts`, and by the
//!   driver's PARKED future (`parked`), which holds nothing else.
//!   Tests: the ladder tests, which check over every transport that
//!   PARKED and DORMANT connections hold no pool buffer and keep their fds
//!   until closed; the idle memory bench (heap per connection).
//! - **I2 Lossless.** Every byte read from a socket is parsed by hyper,
//!   replayed to the next hyper connection (`Replay`, the copied
//!   `read_buf`), or handed to the upgrade. Pipelined and split requests
//!   behave exactly as on plain hyper. Tests: the differential tests
//!   against plain hyper, and the pipelining and split-request tests
//!   across a park, over every transport.
//! - **I3 Never mid-message.** hyper is taken apart only between messages:
//!   see "When is hyper between messages?" below. Getting this wrong is a
//!   request-smuggling bug, not a performance bug. Tests: the HTTP/1 body
//!   tests (bodies read late, abandoned, or cut at a park) and the HTTP/1
//!   parking tests.
//! - **I4 No buffer across an idle await.** Pool buffers are taken after
//!   readiness and returned before the next wait (`parked`, `ConnIo`'s
//!   replay). Tests: the `pool.in_use` assertions of the ladder tests, on
//!   every rung and transport.
//! - **I5 Upgrades keep nothing.** After the hand-off to dormant's
//!   `upgrade::on` ([`hand_off`]), no server structure (hyper connection,
//!   request, response, pool buffer, connection slot) stays referenced by
//!   the upgraded stream. (An upgrade through hyper's `OnUpgrade` is
//!   hyper's `Upgraded`, which boxes `ConnIo`; its socket leaves the lot
//!   for tokio first, see `ConnIo`.) Tests: the
//!   upgrade tests (hand-off, sleeping streams, shutdown), and the
//!   upgraded memory bench.
//!
//! # When is hyper between messages?
//!
//! hyper does not say, so the driver watches from the outside (the shared
//! [`Tracker`]). After the hyper connection future returns `Pending`, the
//! connection is *idle* when all of these hold:
//!
//! - the last read hyper issued reached the socket and found nothing
//!   (`WouldBlock`), and no replayed byte is left: hyper has every byte the
//!   client sent so far, and is waiting for more;
//! - no request is in flight: every service future has completed and every
//!   response body has been written to its end and dropped by hyper;
//! - every write was flushed: hyper's write buffer is empty;
//! - every request body was read to its end, or dropped and hyper has been
//!   polled since. A body still alive (a handler may answer first and read
//!   the body later, in another task) keeps hyper in the middle of the
//!   message. When a body is dropped unread, hyper's next poll drains the
//!   rest if it has already arrived, or stops reading and closes the
//!   connection after the response (`poll_drain_or_close_read`); parking
//!   before that poll could cut a body in two and let its tail be parsed as
//!   a request (request smuggling).
//!
//! With nothing in flight and nothing buffered on either side, hyper's only
//! state is its keep-alive `Init` state plus, possibly, the first bytes of a
//! request head it could not yet parse. `into_parts` hands those back; the
//! driver copies them out (a slice would pin hyper's whole read buffer) and
//! replays them to the next hyper connection (I2).
//!
//! Parking right after each response would rebuild hyper for every request
//! of a busy connection, so the driver waits until the connection has been
//! idle for `park_after`. The same timer enforces the timeouts (see
//! `timeout`). A connection the lot woke after a sleep of at least
//! `park_after` parks as soon as it is quiet (`park_after` zero for that
//! phase, see `conn::serve`): waiting would cost a timer and a second
//! poll of its task per request.

mod io;

use std::future::{Future, poll_fn};
use std::marker::PhantomData;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use hyper::server::conn::http1;
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};
use tracing::debug;

use self::io::ConnIo;
use super::phase::{Clocks, Closing, Ended, Quiet, Start, count_requests};
use crate::error::Error;
use crate::life::Life;
use crate::service::{ConnService, HttpService, ResBody};
use crate::shutdown::{Level, Shutdown, Watch};
use crate::state::ServeState;
use crate::stats::Counters;
use crate::timeout::{Expiry, Watchdog};
use crate::track::{AcceptedUpgrade, Tracker};
use crate::transport::Seam;
use crate::upgrade::{self, HandOffResult};

/// hyper's HTTP/1 connection over dormant's transport, with hyper's
/// upgrades (`hyper::upgrade::on`, and dormant's `upgrade::on` on top).
type HyperH1<T, S> = http1::UpgradeableConnection<ConnIo<T>, ConnService<S, <T as Seam>::Addr>>;

/// Why the driver stopped polling hyper.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// The watchdog's timer: quiet for `park_after` (take hyper apart), or
    /// a timeout passed.
    Expired(Expiry),
    /// hyper's future completed without error: the connection closed, or
    /// an accepted upgrade's response was flushed and the socket left open.
    Finished,
    /// hyper failed, or the grace period of a shutdown is over.
    Failed,
}

/// Runs hyper until the connection closes, a timeout passes, or it has been
/// quiet for its `park_after`; counts its requests in its life, whose
/// limits it keeps.
pub(super) async fn serve<T, S, B>(mut start: Start<'_, T, S>) -> Ended<T>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    let (tracker, service) = start.service();
    let (state, timing, life) = (start.state, start.timing, start.life);
    let shared = &state.shared;
    let head_since = timing.head_since.unwrap_or_else(Instant::now);
    let io = ConnIo::new(start.stream, start.replay, tracker.clone());
    let config = &shared.config;
    let mut watchdog = Watchdog::new(config.timeouts, timing.park_after, Some(head_since));
    watchdog.set_end(life.ends_at.map(|at| (at, Expiry::Age)));
    let mut driver = ActiveH1 {
        conn: shared.http1.serve_connection(io, service).with_upgrades(),
        watchdog,
        tracker,
        acked: 0,
        closing: Closing::No,
        age_grace: config.limits.age_grace,
        body: PhantomData,
    };
    // One timer for parking and every timeout (see `timeout`).
    let mut timer = pin!(tokio::time::sleep_until(head_since));
    let mut watch = pin!(state.signal.watch());
    let stop = poll_fn(|cx| driver.poll(cx, timer.as_mut(), watch.as_mut(), &shared.stats)).await;
    driver.finish(stop, state, life)
}

/// One ACTIVE HTTP/1 connection: hyper, and what the driver watches it
/// with.
struct ActiveH1<T, S, B>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    conn: HyperH1<T, S>,
    watchdog: Watchdog,
    tracker: Arc<Tracker>,
    /// Abandoned request bodies hyper has been polled after.
    acked: u64,
    /// Graceful shutdown has begun, or the connection's age passed: hyper
    /// was told to close after the request in flight.
    closing: Closing,
    /// How long the request in flight may take once the age passed.
    age_grace: Option<Duration>,
    body: PhantomData<fn() -> B>,
}

impl<T, S, B> ActiveH1<T, S, B>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    /// Polls the shutdown signal, hyper, and the watchdog.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        timer: Pin<&mut Sleep>,
        watch: Pin<&mut Watch<'_>>,
        stats: &Counters,
    ) -> Poll<Stop> {
        // Registered for a rise only before returning `Pending`: most
        // phases of a woken connection end in their first poll.
        let level = watch.level();
        match level {
            Level::Running => {}
            Level::Draining => self.drain(),
            Level::Forced => return Poll::Ready(Stop::Failed),
        }
        let abandons = self.tracker.abandons();
        match Pin::new(&mut self.conn).poll(cx) {
            Poll::Ready(Ok(())) => return Poll::Ready(Stop::Finished),
            Poll::Ready(Err(error)) => {
                debug!(%error, "connection error");
                return Poll::Ready(Stop::Failed);
            }
            Poll::Pending => {}
        }
        if abandons != self.acked {
            // hyper has drained or given up on the abandoned body (see
            // `Tracker::observe`).
            self.acked = abandons;
            self.tracker.abandon_seen();
        }
        let seen = self.tracker.observe(self.acked);
        match self
            .watchdog
            .poll(cx, timer, seen, self.tracker.chosen_cell())
        {
            Poll::Ready(Expiry::Age) => {
                debug!("connection age passed: closing after the request in flight");
                Expiry::Age.count(stats);
                if self.closing.age_passed(&mut self.watchdog, self.age_grace) {
                    self.told_to_close();
                }
                // hyper acts on it in a poll of its own.
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(Expiry::AgeGrace) => return Poll::Ready(Stop::Failed),
            Poll::Ready(why) => return Poll::Ready(Stop::Expired(why)),
            Poll::Pending => {}
        }
        if watch.poll_level(cx) != level {
            // Risen since the check above: act on it in a poll of its own.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// Tells hyper to close after the request in flight (a graceful
    /// shutdown, or the connection's age), once.
    fn drain(&mut self) {
        if self.closing.drain() {
            self.told_to_close();
        }
    }

    /// Draining began: hyper closes after the request in flight, and the
    /// connection no longer parks.
    fn told_to_close(&mut self) {
        self.watchdog.stop_parking();
        Pin::new(&mut self.conn).graceful_shutdown();
    }

    /// What the connection becomes once the driver stopped; its requests
    /// are counted in `life` too.
    fn finish(self, stop: Stop, state: &ServeState<T>, life: &mut Life) -> Ended<T> {
        let shared = &state.shared;
        count_requests(&self.tracker, life, shared);
        match stop {
            Stop::Expired(Expiry::Park) => take_apart(self.conn, &self.watchdog),
            Stop::Expired(why) => {
                debug!(?why, "timeout");
                why.count(&shared.stats);
                Ended::Closed
            }
            Stop::Finished => match self.tracker.upgrade.take() {
                Some(AcceptedUpgrade::Dormant { tx, on }) => match hand_off(on, tx, state) {
                    true => Ended::Upgraded,
                    false => Ended::Closed,
                },
                Some(AcceptedUpgrade::Hyper) => {
                    // hyper gave the connection to the handler's `OnUpgrade`
                    // (or dropped it, if the handler did not keep one).
                    shared.stats.upgrades.fetch_add(1, Relaxed);
                    Ended::Upgraded
                }
                None => Ended::Closed,
            },
            Stop::Failed => Ended::Closed,
        }
    }
}

/// ACTIVE → PARKED: takes hyper apart between messages (I3), keeping the
/// transport and a copy of the bytes hyper read but did not parse (I1,
/// I2).
fn take_apart<T, S, B>(conn: HyperH1<T, S>, watchdog: &Watchdog) -> Ended<T>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    // hyper keeps its connection until an upgrade, and a connection in the
    // middle of one is never quiet.
    let taken = conn
        .into_parts()
        .and_then(|parts| Some((parts.read_buf, parts.io.into_inner()?)));
    let Some((read_buf, (stream, replay))) = taken else {
        debug_assert!(false, "parked after an upgrade");
        return Ended::Closed;
    };
    debug_assert!(replay.is_empty(), "quiet implies the replay was consumed");
    // Copy: `read_buf` is a view into hyper's whole read allocation.
    let carried = Bytes::copy_from_slice(&read_buf);
    let (quiet_since, head_since) = watchdog.parked_clocks(&carried);
    Ended::Quiet(Quiet {
        stream,
        carried,
        clocks: Clocks {
            quiet_since,
            head_since,
        },
        asleep: None,
    })
}

/// Hands the connection hyper gave to `on` (hyper's upgrade, which the
/// handler's response fulfilled before hyper's future returned) to the
/// handler's dormant `OnUpgrade`, as the socket and a copy of the bytes
/// read past the request; everything else of it is dropped here (I5). If
/// the future is gone, the connection is closed. Whether the handler has
/// it.
fn hand_off<T: Seam>(
    mut on: hyper::upgrade::OnUpgrade,
    tx: oneshot::Sender<HandOffResult>,
    state: &ServeState<T>,
) -> bool {
    let upgraded = match Pin::new(&mut on).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Ok(upgraded)) => upgraded.downcast::<ConnIo<T>>().ok(),
        // Another holder of hyper's `OnUpgrade` (a handler that called both
        // `on`s) took it first.
        Poll::Ready(Err(_)) | Poll::Pending => None,
    };
    let taken = upgraded.and_then(|parts| Some((parts.read_buf, parts.io.into_inner()?)));
    let Some((read_buf, (stream, replay))) = taken else {
        debug!("upgrade taken by hyper's `OnUpgrade`: dormant's fails");
        let _ = tx.send(Err(Error::closed()));
        return false;
    };
    // Bytes hyper read past the request, then any it had not read yet.
    // Copied: `read_buf` is a view into hyper's whole read allocation.
    let rest = replay.into_carried();
    let read_buf = if rest.is_empty() {
        Bytes::copy_from_slice(&read_buf)
    } else {
        [&read_buf[..], &rest[..]].concat().into()
    };
    let stream = match stream.into_stream() {
        Ok(stream) => stream,
        Err(error) => {
            // Moving the socket back into tokio failed (out of memory for
            // its registration): the socket is closed.
            debug!(%error, "upgrade hand-off failed");
            let _ = tx.send(Err(Error::closed()));
            return false;
        }
    };
    let parts = upgrade::Parts::new(
        stream,
        read_buf,
        state.upgrade_lot.clone(),
        Shutdown::new(&state.signal),
    );
    match tx.send(Ok(parts)) {
        Ok(()) => {
            state.shared.stats.upgrades.fetch_add(1, Relaxed);
            true
        }
        Err(_) => {
            debug!("upgrade future dropped before the hand-off: closing");
            false
        }
    }
}
