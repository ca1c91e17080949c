//! What the memory benches (`idle_memory`, `upgrade_memory`) share: the
//! counting global allocator, heap and RSS readings, and small helpers.
//! Each (in `benches/experiments/`) includes this file with
//! `#[path = "../common/memory.rs"] mod memory;`; the processes that take
//! the readings are in `common/procs.rs`.

use std::time::{Duration, Instant};

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

/// Counts every allocation of the bench process (the library forbids
/// `unsafe` and the benches allow it only for [`trim_allocator`], so a
/// bench does not implement `GlobalAlloc` itself).
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
    /// `VmRSS` right after [`trim_allocator`]; `None` where it cannot trim.
    pub(crate) rss_trimmed: Option<i64>,
}

impl Reading {
    /// Reads the live heap and RSS as the benches always have, then trims
    /// the allocator and reads RSS again.
    pub(crate) fn take() -> Self {
        let (heap, allocs) = heap();
        let untrimmed = rss();
        let rss_trimmed = trim_allocator().then(rss);
        Reading {
            heap,
            allocs,
            rss: untrimmed,
            rss_trimmed,
        }
    }
}

/// Gives the memory the allocator holds free back to the system
/// (glibc's `malloc_trim(0)`, every arena), so that an RSS reading right
/// after it counts memory in use, not memory the allocator keeps free.
/// glibc keeps the high-water mark of its arenas: what connections used
/// while they were briefly served and then freed stays in RSS, a fixed
/// amount that `(after - before) / N` would spread over the connections
/// as if each kept it. Returns whether it trimmed (glibc only; `unsafe`
/// FFI, allowed for this one item).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub(crate) fn trim_allocator() -> bool {
    // SAFETY: the declaration matches glibc's `int malloc_trim(size_t pad)`
    // (malloc.h); `size_t` is `usize` on Linux.
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: `malloc_trim` has no preconditions: it takes each arena's
    // lock and releases only free pages, never memory in use. Its result
    // (whether anything was released) does not matter here.
    unsafe { malloc_trim(0) };
    true
}

/// Elsewhere there is nothing to call: the trimmed figures are `n/a`.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn trim_allocator() -> bool {
    false
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
