//! The owner of a `serve` call's parking lot: it makes the call's state and
//! starts the lot ([`start`]) and drives it until shutdown; it counts what
//! the lot reports (parks, dormancies, closes) in the server's stats, and
//! hands the connections the lot wakes back to the driver
//! (`conn::serve_woken`), saying where their first poll runs.

use std::io;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use tracing::error;

use crate::accounting::Held;
use crate::conn::{self, FirstPoll, Origin, Pause};
use crate::hooks::Hooks;
use crate::kept::Stowed;
use crate::ladder::Rung;
use crate::lot::{self, Closed, Pings, Slept, Turn, Woke};
use crate::service::{HttpService, ResBody, SharedService};
use crate::shutdown::{Level, Signal};
use crate::state::{ServeLot, ServeState, Shared};
use crate::transport::Seam;
use crate::upgrade;

/// How many workers the runtime has, which decides where woken connections
/// are polled first (see `conn::serve_woken`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Workers {
    /// One: every woken connection is polled in place.
    One,
    /// More: only the last of a batch of events is.
    Many,
}

/// What the parking lot of a `serve` call reports to: connections it hands
/// back are served again (see `conn::serve_woken`), and what it closes is
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
                stats.connections.sub(Rung::Parked, 1);
                config.park_after.is_some_and(|p| slept >= p)
            }
            Slept::Dormant => {
                // Out of the gauge before the wake is counted, as a
                // parked connection's wake is.
                stats.connections.sub(Rung::Dormant, 1);
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
        conn::serve_woken(&state, conn, origin, &self.service, first_poll);
    }

    fn closed(&self, from: Rung, why: Closed, n: usize) {
        let Some(state) = self.state.upgrade().filter(|_| n > 0) else {
            return;
        };
        let stats = &state.shared.stats;
        stats.connections.sub(from, n);
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
        stats.connections.sub(Rung::Parked, n);
        stats.connections.add(Rung::Dormant, n);
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
        let lot = ServeLot::new(
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
