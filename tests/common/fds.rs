//! The process's open descriptors, counted: the server runs in-process, so
//! a descriptor it keeps shows in the count.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::timeout::CLIENT_TIMEOUT;

/// Tests of a binary that counts the process's descriptors run one at a
/// time: each holds this while it runs, so no other test opens or closes
/// descriptors meanwhile.
pub(crate) fn exclusive() -> MutexGuard<'static, ()> {
    static FDS: Mutex<()> = Mutex::new(());
    FDS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Open file descriptors of this process.
pub(crate) fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Waits (bounded) until the process has `want` open descriptors.
pub(crate) fn wait_for_fds(want: usize, what: &str) {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    loop {
        let now = fd_count();
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {now} descriptors open, want {want}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
