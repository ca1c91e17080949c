//! The owner of a `serve` call's parking lot: it makes the call's state and
//! starts the lot ([`start`]) and drives it until shutdown; it counts what
//! the lot reports (parks, dormancies, closes) in the server's stats, and
//! serves the connections the lot hands back, first in place, in the lot's
//! own task, under `catch_unwind`.

use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use tracing::error;

use crate::accounting::Held;
use crate::conn::{self, Origin, Pause};
use crate::hooks::Hooks;
use crate::kept::Stowed;
use crate::lot::{self, Closed, Pings, Rung, Slept, Turn, Woke};
use crate::service::{HttpService, ResBody, SharedService};
use crate::shutdown::{Level, Signal};
use crate::state::{Open, ServeState, Shared, StreamLot};
use crate::transport::Seam;
use crate::upgrade;

/// Serves a connection the parking lot handed back with bytes waiting (or
/// the peer's close). It still counts as held.
///
/// With [`FirstPoll::InPlace`], the connection is first polled right
/// here, in the lot's task, which the readiness that woke it has just woken: what
/// hyper-util's connection task does in its own. Most wakes end in that
/// poll (the request answered, the connection parked again), with no task
/// spawned; one that does not (a service that waits, a response larger than
/// the socket's buffer) goes on in a task of its own, whose first poll
/// registers its wakers again. The owner polls in place every
/// connection on a runtime with one worker, where a spawned task would run
/// on this thread right after the lot's anyway; with more, only for the
/// last of a batch of events, which tokio would run next on this worker
/// too (the task spawned last takes the worker's LIFO slot, out of other
/// workers' reach), while the others are spawned first for idle workers to
/// take. The in-place poll runs the application's handler in the lot's
/// task; while it runs, the lot's readiness goes to a relief task, so a
/// handler that spins there holds up no other connection's wake (the
/// lot's `relief.rs`).
fn serve_woken<T, S, B>(
    state: &Arc<ServeState<T>>,
    stream: T,
    origin: Origin<T::Addr>,
    service: &Arc<SharedService<S>>,
    first_poll: FirstPoll,
) where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    let open = Open::woken(state);
    // `getpeername` is a system call on every wake: made only for the
    // `PeerAddr` extension or a connection span that will show it.
    let wanted = state.shared.config.peer_addr
        || tracing::enabled!(target: "dormant::conn", tracing::Level::DEBUG);
    let peer = match wanted.then(|| stream.peer_addr()).transpose() {
        Ok(peer) => peer,
        Err(error) => {
            // The peer reset the connection while it waited.
            conn::closed_while_idle("woken", Some(&error));
            return;
        }
    };
    let serve = conn::serve(stream, peer, service.clone(), open, origin);
    if first_poll == FirstPoll::InTask {
        tokio::spawn(serve);
        return;
    }
    let mut serve = Box::pin(serve);
    // Wakers registered in this poll go nowhere: the task spawned if it is
    // pending polls it again at once, registering its own.
    let mut cx = Context::from_waker(Waker::noop());
    match panic::catch_unwind(AssertUnwindSafe(|| serve.as_mut().poll(&mut cx))) {
        Ok(Poll::Ready(())) => {}
        Ok(Poll::Pending) => {
            tokio::spawn(serve);
        }
        Err(_) => {
            // As tokio does with a task that panics: the connection is
            // dropped (closed, released), the lot's task goes on.
            error!("a woken connection's service panicked; connection closed");
        }
    }
}

/// Where a woken connection is polled first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FirstPoll {
    /// In the lot's task, under `catch_unwind` (see [`serve_woken`]).
    InPlace,
    /// In a task of its own.
    InTask,
}

/// How many workers the runtime has, which decides where woken connections
/// are polled first (see [`serve_woken`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workers {
    /// One: every woken connection is polled in place.
    One,
    /// More: only the last of a batch of events is.
    Many,
}

/// What the parking lot of a `serve` call reports to: connections it hands
/// back are served again (see `serve_woken`), and what it closes is
/// counted. Holds the state weakly: the state keeps the lot, which keeps
/// this.
pub(super) struct LotOwner<T: Seam, S, B> {
    state: Weak<ServeState<T>>,
    service: Arc<SharedService<S>>,
    workers: Workers,
    body: PhantomData<fn() -> B>,
}

impl<T: Seam, S, B> LotOwner<T, S, B> {
    /// The owner of the lot of `state`, which it holds weakly (the state
    /// keeps the lot, which keeps its owner), serving what the lot hands
    /// back with `service`. Called within the runtime that will serve.
    pub(super) fn new(state: Weak<ServeState<T>>, service: Arc<SharedService<S>>) -> Self {
        LotOwner {
            state,
            service,
            workers: match tokio::runtime::Handle::current().metrics().num_workers() {
                1 => Workers::One,
                _ => Workers::Many,
            },
            body: PhantomData,
        }
    }
}

impl<T, S, B> lot::Owner<T, Stowed<T::Addr>> for LotOwner<T, S, B>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    fn woken(&self, conn: T, stowed: Option<Stowed<T::Addr>>, woke: Woke) {
        let Woke {
            slept,
            turn,
            unread,
        } = woke;
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let stats = &state.shared.stats;
        let config = &state.shared.config;
        let long = match slept {
            Slept::Parked(slept) => {
                stats.parked.fetch_sub(1, Ordering::Relaxed);
                config.park_after.is_some_and(|p| slept >= p)
            }
            Slept::Dormant => {
                // Out of the gauge before the wake is counted, as a
                // parked connection's wake is.
                stats.dormant.fetch_sub(1, Ordering::Relaxed);
                stats.lot_wakes.fetch_add(1, Ordering::Relaxed);
                // It slept at least `dormant_after`.
                matches!((config.park_after, config.dormant_after), (Some(p), Some(d)) if p <= d)
            }
        };
        let pause = if long { Pause::Long } else { Pause::Short };
        let first_poll = match (self.workers, turn) {
            (Workers::One, _) | (Workers::Many, Turn::Last) => FirstPoll::InPlace,
            (Workers::Many, Turn::Before) => FirstPoll::InTask,
        };
        let origin = Origin::Woken(pause, stowed, unread);
        serve_woken(&state, conn, origin, &self.service, first_poll);
    }

    fn closed(&self, from: Rung, why: Closed, n: usize) {
        let Some(state) = self.state.upgrade().filter(|_| n > 0) else {
            return;
        };
        let stats = &state.shared.stats;
        match from {
            Rung::Parked => stats.parked.fetch_sub(n, Ordering::Relaxed),
            Rung::Dormant => stats.dormant.fetch_sub(n, Ordering::Relaxed),
        };
        match why {
            Closed::ByPeer if from == Rung::Dormant => {
                stats.lot_closes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Closed::Idle => {
                stats.idle_timeouts.fetch_add(n as u64, Ordering::Relaxed);
            }
            Closed::Unanswered => {
                stats
                    .keep_alive_timeouts
                    .fetch_add(n as u64, Ordering::Relaxed);
            }
            Closed::Age => {
                stats.age_closes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Closed::ByPeer | Closed::Failed | Closed::Shutdown => {}
        }
        state.held.release(n);
    }

    fn went_dormant(&self, n: usize) {
        let Some(state) = self.state.upgrade().filter(|_| n > 0) else {
            return;
        };
        let stats = &state.shared.stats;
        stats.parked.fetch_sub(n, Ordering::Relaxed);
        stats.dormant.fetch_add(n, Ordering::Relaxed);
        stats.dormancies.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Makes the state of a `serve` call and starts its parking lot, which
/// every connection is registered with: without it nothing is served.
pub(super) fn start<T, S, B>(
    shared: &Arc<Shared>,
    service: &Arc<SharedService<S>>,
    hooks: Hooks<T::Addr>,
) -> io::Result<Arc<ServeState<T>>>
where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    let poll = mio::Poll::new()?;
    let registry = poll.registry().try_clone()?;
    let state = Arc::new_cyclic(|weak: &Weak<ServeState<T>>| {
        // The lot reports to the state it belongs to, weakly: the state
        // keeps the lot.
        let owner = LotOwner::new(weak.clone(), service.clone());
        let config = &shared.config;
        let pings = (config.h2_sleep.keep_alive).map_or_else(Pings::default, |k| Pings {
            every: k.interval,
            answer_within: k.timeout,
        });
        let sweep_every = config.lot_sweep_every();
        let lot = StreamLot::new(
            Box::new(owner),
            config.lot_slack(),
            pings,
            sweep_every,
            registry,
        );
        let signal = Signal::default();
        let held = Arc::new(Held::new(shared.config.max_connections));
        ServeState {
            shared: shared.clone(),
            upgrade_lot: upgrade::Lot::new(
                lot.clone(),
                held.clone(),
                signal.clone(),
                &shared.stats,
            ),
            signal,
            lot,
            held,
            hooks: hooks.any().then_some(hooks),
        }
    });
    tokio::spawn(drive_lot(state.clone(), poll));
    Ok(state)
}

/// Drives the parking lot of one `serve` call until shutdown.
async fn drive_lot<T: Seam>(state: Arc<ServeState<T>>, poll: mio::Poll) {
    let lot = &state.lot;
    // Every connection reads and writes through the lot: it runs until the
    // last one is gone after shutdown began.
    let done = async {
        // Polled on every wake of the lot's task: a `Watch` is one atomic
        // load per poll, where `reached` takes the signal's lock.
        let mut watch = std::pin::pin!(state.signal.watch());
        std::future::poll_fn(|cx| match watch.as_mut().poll_level(cx) {
            Level::Running => std::task::Poll::Pending,
            Level::Draining | Level::Forced => std::task::Poll::Ready(()),
        })
        .await;
        state.held.all_released().await;
    };
    tokio::select! {
        biased;
        () = done => {}
        res = lot.drive(poll) => {
            if let Err(error) = res {
                error!(%error, "parking lot failed; closing every connection");
            }
            // No connection can make progress without it.
            lot.close_all();
            state.signal.raise(Level::Forced);
        }
    }
}
