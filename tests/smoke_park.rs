//! Smoke test: a keep-alive connection parks between requests.

mod common;
use common::*;
use std::time::Duration;

#[test]
fn keep_alive_parks_between_requests() {
    let srv = serve_with(&fast_park(), echo_service());
    let mut c = srv.connect();
    for i in 0..3 {
        c.send(format!("GET /{i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(
            c.response(),
            format!("HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\nGET /{i} read=")
        );
        srv.wait_for("park", |s| s.parks == i + 1 && s.parked == 1);
        assert_eq!(srv.stats().pool.in_use, 0);
        std::thread::sleep(Duration::from_millis(1));
    }
}
