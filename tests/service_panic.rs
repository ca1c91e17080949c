//! A service that panics on a woken connection: the connection is closed
//! and released, and the server goes on. A test server counts the panics
//! on its threads as failures (`common::runtime::Panics`): this test takes
//! back the one it causes on purpose.

use std::convert::Infallible;
use std::time::Duration;

use crate::common::client::{get, ok};
use crate::common::runtime::bind_tcp;
use crate::common::servers::{Hooks, serve_on};
use crate::common::services::echo;
use bytes::Bytes;
use dormant::Rung::{Active, Parked};
use http::{Request, Response};
use http_body_util::Full;

/// Answers as `echo` does, and panics for `/panic`.
async fn panics_on_request(
    req: Request<dormant::Body>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    assert_ne!(
        req.uri().path(),
        "/panic",
        "the test's service panics on /panic"
    );
    echo(req).await
}

/// Both ways of serving a woken connection: first polled in the lot's task
/// (one worker), where the server catches the panic itself, and in a task
/// of its own (two), where tokio does.
#[test]
fn a_service_panic_after_a_wake_closes_only_its_connection() {
    for workers in [1, 2] {
        let mut b = dormant::Server::builder();
        b.park_after(Duration::from_millis(2)).dormant_after(None);
        let service = hyper::service::service_fn(panics_on_request);
        let srv = serve_on(&b, service, workers, (), bind_tcp, Hooks::default());
        let mut clients: Vec<_> = (0..3).map(|_| srv.connect()).collect();
        for c in &mut clients {
            c.send(get("/").as_bytes());
            assert_eq!(c.response(), ok("GET / read="));
        }
        srv.wait_for("3 parked", |s| s.connections[Parked] == 3 && s.parks == 3);

        clients[0].send(get("/panic").as_bytes());
        assert_eq!(clients[0].read_to_close(), "", "{workers} workers");
        assert_eq!(srv.take_panics(), 1, "the one panic the test caused");
        for c in &mut clients[1..] {
            c.send(get("/after").as_bytes());
            assert_eq!(c.response(), ok("GET /after read="), "{workers} workers");
        }
        srv.wait_for("the others parked again, the panicked one released", |s| {
            s.connections[Parked] == 2 && s.connections[Active] == 0 && s.parks == 5
        });
        let s = srv.stats();
        // The panicked request is not counted: it never completed.
        assert_eq!((s.wakes, s.requests), (3, 5), "{workers} workers: {s:?}");
    }
}
