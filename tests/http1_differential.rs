//! Differential test: one stream of pipelined requests, cut into two or
//! three writes at every split point (and seeded random 3-way splits), sent
//! to dormant (which may park between the writes) and to plain hyper; the
//! bytes that come back must be identical (invariant I2).

mod common;
use common::*;

use std::time::Duration;

use common::differential::{CONCURRENCY, PAUSE, STREAM, describe, split_cases};
use hyper::service::service_fn;

/// Sends `STREAM` cut at `cuts` (ascending), pausing between writes, and
/// reads until the server closes.
fn run(mut c: Client, cuts: &[usize]) -> String {
    let mut start = 0;
    for &cut in cuts.iter().chain([STREAM.len()].iter()) {
        if start > 0 {
            std::thread::sleep(PAUSE);
        }
        c.send(&STREAM[start..cut]);
        start = cut;
    }
    c.read_to_close()
}

#[test]
fn split_pipelines_match_plain_hyper() {
    split_pipelines_match_plain_hyper_on(2);
}

/// On one worker a woken connection is first polled in the lot's task.
#[test]
fn split_pipelines_match_plain_hyper_on_one_worker() {
    split_pipelines_match_plain_hyper_on(1);
}

fn split_pipelines_match_plain_hyper_on(workers: usize) {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(1));
    let srv = serve_with_workers(&b, service_fn(describe::<dormant::Body>), workers);
    let plain = serve_plain_hyper(describe::<hyper::body::Incoming>);

    // The reference: plain hyper, one write.
    let want = run(plain.connect(), &[]);
    assert_eq!(want.matches("HTTP/1.1 200 OK").count(), 6, "{want}");
    assert!(want.contains("HTTP/1.1 100 Continue\r\n\r\n"), "{want}");
    assert!(want.contains("body=hello world trailers="), "{want}");
    assert_eq!(run(srv.connect(), &[]), want, "dormant, one write");

    let cases = split_cases();

    for batch in cases.chunks(CONCURRENCY) {
        std::thread::scope(|s| {
            for cuts in batch {
                let (srv, plain, want) = (&srv, &plain, &want);
                s.spawn(move || {
                    let hyper_out = run(plain.connect(), cuts);
                    let dormant_out = run(srv.connect(), cuts);
                    assert_eq!(hyper_out, *want, "plain hyper, cuts {cuts:?}");
                    assert_eq!(dormant_out, *want, "dormant, cuts {cuts:?}");
                });
            }
        });
    }
    let s = srv.stats();
    println!(
        "{} split cases ({} two-way, {} three-way); dormant on {workers} workers parked {} times",
        cases.len(),
        STREAM.len() - 1,
        cases.len() - (STREAM.len() - 1),
        s.parks
    );
    assert!(s.parks > 0, "no case parked: {s:?}");
}
