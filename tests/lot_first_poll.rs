//! Where a woken connection's first poll runs, over every transport: the
//! lot may serve the last connection of a batch of events in its own task
//! (no task spawned when the request is answered at once), so a handler
//! that spins in that first poll holds up the lot's task. It must not hold
//! up the other connections' wakes: while the lot's task polls in place,
//! their readiness is acted on by a relief task (src/lot/relief.rs).
//!
//! The spinning handler here waits, spinning, for the request of another
//! task-less connection: if that connection's wake waited for the spin, the
//! two would wait for each other until the spin's bound (three client
//! timeouts), and the second client's read would time out first. The
//! server's runtime is kept busy from outside (`Serve::ticking`), as a
//! server with work is: a tokio worker that spins leaves the I/O driver
//! unpolled while the other workers sleep, whatever serves the sockets.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;

use crate::common::client::{get, ok};
use crate::common::runtime::Servable;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Transport, over_every_transport};
use crate::common::wait::wait;
use dormant::Rung::{Dormant, Parked};

over_every_transport!(
    a_handler_spinning_in_its_first_poll_holds_up_no_other_wake,
    a_handler_spinning_in_a_dormant_connections_first_poll_holds_up_no_other_wake,
);

/// What the spinning handler and the releasing one share.
#[derive(Clone, Default)]
struct Spin {
    spinning: Arc<AtomicBool>,
    released: Arc<AtomicBool>,
}

/// `/spin` spins, without awaiting anything, until `/release` comes (or
/// three client timeouts pass), then says whether it was released;
/// `/release` releases it; anything else answers `hello`.
fn spin_service(spin: Spin) -> impl Servable<Full<Bytes>> {
    service_fn(move |req: Request<dormant::Body>| {
        let spin = spin.clone();
        async move {
            let body = match req.uri().path() {
                "/spin" => {
                    spin.spinning.store(true, Ordering::SeqCst);
                    let start = Instant::now();
                    while !spin.released.load(Ordering::SeqCst)
                        && start.elapsed() < 3 * CLIENT_TIMEOUT
                    {
                        std::hint::spin_loop();
                    }
                    format!("released={}", spin.released.load(Ordering::SeqCst))
                }
                "/release" => {
                    spin.released.store(true, Ordering::SeqCst);
                    "released".to_owned()
                }
                _ => "hello".to_owned(),
            };
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
        }
    })
}

/// Two connections wait task-less (on the rung `builder` lets them reach,
/// `rung` in the stats); one wakes with a request whose handler spins in
/// its first poll, then the other wakes with the request that ends the
/// spin: it is served while the first spins.
fn spin_and_release<T: Transport>(builder: &dormant::Builder, rung: fn(&dormant::Stats) -> bool) {
    let spin = Spin::default();
    let srv = T::serve(builder, spin_service(spin.clone()));
    let (mut spinner, mut releaser) = (srv.connect(), srv.connect());
    for c in [&mut spinner, &mut releaser] {
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), ok("hello"));
    }
    srv.wait_for("both task-less", rung);
    srv.wait_tasks(1);
    let _ticking = srv.ticking();
    spinner.send(get("/spin").as_bytes());
    wait("the handler spins", || spin.spinning.load(Ordering::SeqCst));
    releaser.send(get("/release").as_bytes());
    assert_eq!(releaser.response(), ok("released"));
    assert_eq!(spinner.response(), ok("released=true"));
    let s = srv.stats();
    assert_eq!(s.wakes, 2, "both woke from the lot: {s:?}");
}

fn a_handler_spinning_in_its_first_poll_holds_up_no_other_wake<T: Transport>() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(2)).dormant_after(None);
    spin_and_release::<T>(&b, |s| s.connections[Parked] == 2 && s.parks == 2);
}

fn a_handler_spinning_in_a_dormant_connections_first_poll_holds_up_no_other_wake<T: Transport>() {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(2))
        .dormant_after(Duration::from_millis(5));
    spin_and_release::<T>(&b, |s| s.connections[Dormant] == 2);
}
