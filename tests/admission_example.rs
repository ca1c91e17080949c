//! `examples/admission.rs`'s per-client limit, on a real server: a client
//! address gets `PER_CLIENT` connections, the next is closed before a
//! byte, and a closed connection gives its slot back.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/admission.rs"]
mod admission;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::client::{get, ok};
use crate::common::ladder::ladder;
use crate::common::servers::Hooks;
use crate::common::services::echo_service;
use crate::common::transport::{Tcp, Transport};
use admission::{PER_CLIENT, PerClient};

/// The example's hooks, on the test harness's (which gives the peer's
/// `Debug` form: a TCP address reads back).
fn hooks(per_client: &PerClient) -> Hooks {
    let (admit, state) = (per_client.clone(), per_client.clone());
    let addr = |peer: String| -> SocketAddr { peer.parse().expect("a TCP peer") };
    Hooks {
        accept: Some(Arc::new(move |peer| admit.admit(&addr(peer)))),
        state: Some(Arc::new(move |peer, s| state.state(&addr(peer), s))),
    }
}

#[test]
fn a_client_gets_its_limit_of_connections_and_a_closed_one_back() {
    let per_client = PerClient::default();
    let srv = Tcp::serve_hooked(
        &ladder(Duration::from_millis(50)),
        echo_service(),
        2,
        hooks(&per_client),
    );
    let mut open: Vec<_> = (0..PER_CLIENT)
        .map(|i| {
            let mut c = srv.connect();
            c.send(get(&format!("/{i}")).as_bytes());
            assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
            c
        })
        .collect();
    let mut over = srv.connect();
    assert_eq!(over.read_to_close(), "", "one connection over the limit");
    srv.wait_for("rejected", |s| s.rejected == 1);
    drop(open.pop());
    // The state hook saw `Closed` before the server stopped counting it.
    srv.wait_for("a slot given back", |s| {
        s.connections.total() == PER_CLIENT - 1
    });
    let mut again = srv.connect();
    again.send(get("/again").as_bytes());
    assert_eq!(again.response(), ok("GET /again read="));
    assert_eq!(srv.stats().rejected, 1);
}
