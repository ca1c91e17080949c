//! Waiting, bounded, for what the test cannot be told directly.

use std::time::{Duration, Instant};

use super::timeout::CLIENT_TIMEOUT;

/// Waits (polling, bounded) until `cond` holds.
pub(crate) fn wait(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}
