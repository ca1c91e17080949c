//! An ACTIVE phase's edges, as the ladder (`conn`) and the protocols (`h1`,
//! `h2`) share them: what a phase starts with ([`Start`]: the service of
//! [`Start::service`], its [`Timing`]), what it counts when it ends
//! ([`count_requests`]), and how it ends ([`Ended`]).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::life::Life;
use crate::rewind::Replay;
use crate::service::{ConnService, SharedService};
use crate::state::{ServeState, Shared};
use crate::timeout::{Expiry, Watchdog};
use crate::track::Tracker;
use crate::transport::Seam;
use crate::wire::Asleep;

/// The clocks a connection keeps while PARKED.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clocks {
    /// When the connection last became quiet (the idle timeout counts from
    /// here).
    pub(super) quiet_since: Instant,
    /// When the request head the connection is receiving began: at accept
    /// until the first request, then while it holds part of a pipelined
    /// request head.
    pub(super) head_since: Option<Instant>,
}

/// The clocks an ACTIVE phase starts with.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timing {
    /// When the bytes about to be replayed began to arrive, if a request
    /// head was already on the clock; else they begin one now.
    pub(super) head_since: Option<Instant>,
    /// How long the phase must be quiet to park.
    pub(super) park_after: Option<Duration>,
}

/// What an ACTIVE phase starts with. (The phase's service is made in the
/// phase, by [`Start::service`]: the phase's future keeps its start, and a
/// reference to the user's service is smaller than the phase's.)
pub(super) struct Start<'a, T: Seam, S> {
    pub(super) stream: T,
    /// The bytes that woke the connection, and any it carried.
    pub(super) replay: Replay,
    /// The peer's address, for the `PeerAddr` extension if it is on.
    pub(super) peer: Option<T::Addr>,
    pub(super) service: &'a SharedService<S>,
    pub(super) state: &'a ServeState<T>,
    pub(super) timing: Timing,
    /// What the connection used of its limits: the phase counts its
    /// requests in it ([`count_requests`]), and keeps its age.
    pub(super) life: &'a mut Life,
}

/// How an ACTIVE phase ended.
pub(super) enum Ended<T> {
    /// Quiet long enough: PARKED next.
    Quiet(Quiet<T>),
    /// The connection is finished (closed by either side, an error, a
    /// timeout, or shutdown).
    Closed,
    /// The connection was handed to an upgrade's handler.
    Upgraded,
}

/// A connection whose ACTIVE phase ended quiet: hyper is gone, this is
/// what is left.
pub(super) struct Quiet<T> {
    pub(super) stream: T,
    /// HTTP/1: the bytes hyper had read but not parsed (the start of a
    /// request head), replayed to the next phase.
    pub(super) carried: Bytes,
    pub(super) clocks: Clocks,
    /// HTTP/2: what a fresh connection needs (asleep).
    pub(super) asleep: Option<Box<Asleep>>,
}

impl<T: Seam, S: Clone> Start<'_, T, S> {
    /// The phase's tracker, and its service: the user's, with the
    /// tracker, the request extensions the server adds (the peer's
    /// address, taken from the start), and what is left of the
    /// connection's request limit.
    pub(super) fn service(&mut self) -> (Arc<Tracker>, ConnService<S, T::Addr>) {
        let tracker = Arc::new(Tracker::default());
        let service = ConnService::new(
            self.service.get(),
            self.peer.take(),
            self.stream.connected(),
            tracker.clone(),
            self.state.shared.config.limits.requests_left(self.life),
        );
        (tracker, service)
    }
}

/// Counts the requests an ACTIVE phase started (HTTP/2: streams), in the
/// server's stats and in the connection's `life`.
pub(super) fn count_requests(tracker: &Tracker, life: &mut Life, shared: &Shared) {
    let requests = tracker.requests();
    shared.stats.requests.fetch_add(requests, Relaxed);
    life.add_requests(requests, &shared.config.limits, &shared.stats);
}

/// Where an ACTIVE connection is in closing, by one rule for HTTP/1 and
/// HTTP/2: told to close after what is in flight (graceful shutdown, its
/// age, its last request), then, past its age, bounded by the age's grace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Closing {
    /// Serving.
    #[default]
    No,
    /// hyper was told to close after what is in flight (HTTP/2: GOAWAY);
    /// the connection no longer parks.
    Draining,
    /// Draining past its age: the watchdog ends it at the grace's end
    /// ([`Expiry::AgeGrace`]).
    Graced,
}

impl Closing {
    /// Starts draining: `true` if it just began (the caller tells hyper),
    /// `false` if it had.
    pub(super) fn drain(&mut self) -> bool {
        let began = *self == Closing::No;
        if began {
            *self = Closing::Draining;
        }
        began
    }

    /// The connection's age passed: draining, and with a `grace`, ended by
    /// `watchdog` when it is over. `true` if draining just began.
    pub(super) fn age_passed(&mut self, watchdog: &mut Watchdog, grace: Option<Duration>) -> bool {
        let began = self.drain();
        if grace.is_some() {
            *self = Closing::Graced;
        }
        // Replaces the age: it passed once.
        watchdog.set_end(grace.map(|grace| (Instant::now() + grace, Expiry::AgeGrace)));
        began
    }
}
