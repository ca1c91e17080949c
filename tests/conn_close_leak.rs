//! Clients that close while their connection is parked (or active) leave
//! nothing behind: the gauges return to zero and no file descriptor leaks.
//! One test in this binary, so no other test opens descriptors meanwhile.

mod common;
use common::*;

#[test]
fn clients_closing_leave_no_connection_and_no_fd() {
    let srv = serve_with(&fast_park(), echo_service());
    // Warm up the runtime (lazily opened descriptors), then take the baseline.
    let mut c = srv.connect();
    c.send(b"GET /warm HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    c.read_to_close();
    drop(c);
    srv.wait_for("warm-up closed", |s| s.active == 0 && s.parked == 0);
    let baseline = fd_count();

    // Parked after a request.
    let mut clients: Vec<Client> = (0..20).map(|_| srv.connect()).collect();
    for (i, c) in clients.iter_mut().enumerate() {
        c.send(format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        c.response();
    }
    srv.wait_for("20 parked", |s| s.parked == 20 && s.parks == 20);
    // The test's own 20 sockets plus the server's 20.
    assert_eq!(fd_count(), baseline + 40);
    drop(clients);
    srv.wait_for("all closed", |s| s.parked == 0 && s.active == 0);
    wait_for_fds(baseline, "after closing parked connections");
    assert_eq!(srv.stats().pool.in_use, 0);

    // Parked holding part of a request.
    let mut c = srv.connect();
    c.send(b"GET /x HTTP/1.1\r\nHo");
    srv.wait_for("parked with carried bytes", |s| {
        s.parks == 21 && s.parked == 1
    });
    drop(c);
    srv.wait_for("closed", |s| s.parked == 0 && s.active == 0);
    wait_for_fds(baseline, "after closing a connection with carried bytes");

    // Never sent a byte.
    let c = srv.connect();
    srv.wait_for("accepted", |s| s.parked == 1);
    drop(c);
    srv.wait_for("closed", |s| s.parked == 0 && s.active == 0);
    wait_for_fds(baseline, "after closing a silent connection");

    // Active: the handler waits for a body that never comes.
    let mut c = srv.connect();
    c.send(b"POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc");
    srv.wait_for("active", |s| s.active == 1);
    drop(c);
    srv.wait_for("closed", |s| s.parked == 0 && s.active == 0);
    wait_for_fds(baseline, "after closing an active connection");
    assert_eq!(srv.stats().pool.in_use, 0);
}
