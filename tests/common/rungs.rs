//! Waiting, the client idle, for a connection to sleep to a rung of the
//! idle ladder, and checking that the next request woke it: for the
//! HTTP/2 tests, whose async clients run on a runtime of their own.

use std::cell::Cell;
use std::time::Duration;

use dormant::Rung::{Active, Dormant, Parked};
use dormant::{Rung, Stats};

use super::servers::Serve;

/// `dormant_after` of the servers of the HTTP/2 sleep tests (they park
/// after 3 ms, `ladder`): long enough for a test to see a connection
/// PARKED before it goes DORMANT.
pub(crate) const DORMANT_AFTER: Duration = Duration::from_millis(500);

/// A runtime for a test's async clients: one worker, so that the client
/// connections' tasks run while the test thread waits on the server.
pub(crate) fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Waits, the client idle, until its connection (the server's only one)
/// has gone to sleep since `before` (taken before the client's last
/// request) and reached `rung`; returns the stats that saw it asleep, for
/// [`woke`].
///
/// A client's frame still in flight (a late WINDOW_UPDATE) may wake the
/// connection right after it fell asleep, and the client's next step then
/// find it awake. So the wake counters of the stats returned are read
/// before the gauges that show the connection asleep: the server moves a
/// woken connection out of its gauge before it counts the wake, so a wake
/// after the connection was seen asleep, the step's or a late frame's, is
/// never in them.
pub(crate) fn sleep_until<A>(srv: &Serve<A>, rung: Rung, before: Stats) -> Stats {
    let asleep = |s: &Stats| match rung {
        Rung::Active => panic!("a pause reaches PARKED or DORMANT"),
        // Asleep, it holds no pool buffer (invariant I4).
        Rung::Parked => {
            s.parks > before.parks
                && s.connections[Parked] == 1
                && s.connections[Active] == 0
                && s.pool.in_use == 0
        }
        Rung::Dormant => {
            s.dormancies > before.dormancies
                && s.connections[Dormant] == 1
                && s.connections[Active] == 0
                && s.pool.in_use == 0
        }
    };
    let seen = Cell::new(None);
    srv.wait_for(
        &format!("the connection {rung:?}, holding no buffer"),
        |_| {
            let counted = srv.stats();
            let now = srv.stats();
            let found = asleep(&now);
            if found {
                let mut seen_asleep = now;
                seen_asleep.wakes = counted.wakes;
                seen_asleep.lot_wakes = counted.lot_wakes;
                seen.set(Some(seen_asleep));
            }
            found
        },
    );
    seen.get().expect("seen asleep")
}

/// Waits until the wake from `rung` by the requests that `before`
/// preceded is counted (a DORMANT connection's is also a wake of the
/// lot's).
pub(crate) fn woke<A>(srv: &Serve<A>, rung: Rung, before: Stats) {
    srv.wait_for(&format!("the wake from {rung:?} counted"), |s| {
        s.wakes > before.wakes && (matches!(rung, Rung::Parked) || s.lot_wakes > before.lot_wakes)
    });
}

/// Waits until the server has no connection left.
pub(crate) fn all_closed<A>(srv: &Serve<A>) {
    srv.wait_for("every connection closed", none_open);
}

/// Whether `s` counts no open connection, on any rung.
pub(crate) fn none_open(s: &dormant::Stats) -> bool {
    s.connections.total() == 0
}
