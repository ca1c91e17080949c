//! What the memory benches (`idle_memory`, `upgrade_memory`) share: the
//! counting global allocator, heap and RSS readings, and small helpers.
//! Each includes this file with `#[path = "common/memory.rs"] mod memory;`;
//! the processes that take the readings are in `common/procs.rs`.

use std::time::{Duration, Instant};

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

/// Counts every allocation of the bench process (the crate forbids
/// `unsafe`, so a bench cannot implement `GlobalAlloc` itself).
#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

pub(crate) fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number")),
        Err(_) => default,
    }
}

/// `cargo bench` passes `--bench`; `cargo test --benches` does not, and then
/// the bench only checks that it works: a small N, one round.
pub(crate) fn is_bench() -> bool {
    std::env::args().any(|a| a == "--bench")
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Live heap bytes and live allocations.
pub(crate) fn heap() -> (i64, i64) {
    let s = GLOBAL.stats();
    // `bytes_allocated` and `bytes_deallocated` already include what a
    // realloc grew or shrank by; `bytes_reallocated` is the same change
    // again.
    let bytes = s.bytes_allocated as i64 - s.bytes_deallocated as i64;
    let allocs = s.allocations as i64 - s.deallocations as i64;
    (bytes, allocs)
}

/// `VmRSS` in bytes.
pub(crate) fn rss() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: i64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

/// Memory figures at one point of a measurement.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reading {
    /// Live heap bytes ([`heap`]).
    pub(crate) heap: i64,
    /// Live allocations ([`heap`]).
    pub(crate) allocs: i64,
    /// `VmRSS` ([`rss`]).
    pub(crate) rss: i64,
}

impl Reading {
    /// Reads the live heap, then RSS.
    pub(crate) fn take() -> Self {
        let (heap, allocs) = heap();
        Reading {
            heap,
            allocs,
            rss: rss(),
        }
    }
}

/// Waits until `cond` holds, polling; panics after `limit`.
pub(crate) fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until the live heap has not moved for a while.
pub(crate) fn wait_heap_stable() {
    let mut last = heap().0;
    let mut still = 0;
    let start = Instant::now();
    while still < 5 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        let now = heap().0;
        if now == last {
            still += 1;
        } else {
            still = 0;
            last = now;
        }
    }
}
