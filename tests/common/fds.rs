//! The process's open descriptors, counted: the server runs in-process, so
//! a descriptor it keeps shows in the count. A test that counts them runs
//! alone in a process of its own (`process::in_own_process`), where no
//! other test opens or closes one meanwhile.

use std::time::{Duration, Instant};

use super::timeout::CLIENT_TIMEOUT;

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
