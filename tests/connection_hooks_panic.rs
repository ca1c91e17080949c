//! A connection state hook that panics closes its connection only, on its
//! task (PARKED) or in the parking lot (DORMANT), over every transport; the
//! server goes on. A test server counts the panics on its threads as
//! failures (`common::runtime::Panics`): each test takes back the one it
//! causes on purpose.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::client::{get, ok};
use crate::common::ladder::ladder;
use crate::common::servers::Hooks;
use crate::common::services::echo_service;
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung::Dormant;
use dormant::{ConnState, Rung};

over_every_transport!(
    a_state_hook_that_panics_when_a_connection_parks_closes_it_alone,
    a_state_hook_that_panics_when_a_connection_goes_dormant_closes_it_alone,
);

fn a_state_hook_that_panics_when_a_connection_parks_closes_it_alone<T: Transport>() {
    a_state_hook_that_panics_closes_its_connection_alone::<T>(Rung::Parked);
}

fn a_state_hook_that_panics_when_a_connection_goes_dormant_closes_it_alone<T: Transport>() {
    a_state_hook_that_panics_closes_its_connection_alone::<T>(Rung::Dormant);
}

/// A hook that panics the first time it sees its connection on `rung`:
/// that connection is closed (on its task, or in the parking lot for
/// DORMANT); a second connection, open all along, is served before and
/// after, and the server goes on.
fn a_state_hook_that_panics_closes_its_connection_alone<T: Transport>(rung: Rung) {
    let panicked = Arc::new(AtomicBool::new(false));
    let hooks = {
        let panicked = panicked.clone();
        Hooks {
            state: Some(Arc::new(move |_peer, s| {
                if s == ConnState::On(rung) && !panicked.swap(true, Ordering::SeqCst) {
                    panic!("the test's hook panics at {s:?}");
                }
            })),
            ..Hooks::default()
        }
    };
    let srv = T::serve_hooked(&ladder(Duration::from_millis(50)), echo_service(), 2, hooks);
    let mut doomed = srv.connect();
    doomed.send(get("/1").as_bytes());
    assert_eq!(doomed.response(), ok("GET /1 read="));
    assert_eq!(doomed.read_to_close(), "", "its connection closed");
    assert!(panicked.load(Ordering::SeqCst));
    // The panic was caught: take it back.
    assert_eq!(srv.take_panics(), 1, "the one panic caused");
    srv.wait_for("closed", |s| s.connections.total() == 0);
    let mut other = srv.connect();
    for i in 0..2 {
        let before = srv.stats().dormancies;
        other.send(get(&format!("/{i}")).as_bytes());
        assert_eq!(other.response(), ok(&format!("GET /{i} read=")));
        srv.wait_for("DORMANT", |s| {
            s.dormancies > before && s.connections[Dormant] == 1
        });
    }
}
