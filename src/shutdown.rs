//! The shutdown signal one `serve` call shares with its connections.
//!
//! One atomic level and one `Notify`: a connection waiting on it holds a
//! waiter node inside its own task, so the signal costs no allocation per
//! connection.

use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::Notify;

/// How far shutdown has gone. Levels only ever rise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Level {
    Running = 0,
    /// Stop accepting; close idle connections; let requests in flight
    /// finish.
    Draining = 1,
    /// The grace period is over: close everything.
    Forced = 2,
}

#[derive(Debug)]
pub(crate) struct Signal {
    level: AtomicU8,
    notify: Notify,
}

impl Default for Signal {
    fn default() -> Self {
        Signal {
            level: AtomicU8::new(Level::Running as u8),
            notify: Notify::new(),
        }
    }
}

impl Signal {
    pub(crate) fn raise(&self, level: Level) {
        self.level.fetch_max(level as u8, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    fn is_at(&self, level: Level) -> bool {
        self.level.load(Ordering::Acquire) >= level as u8
    }

    /// Resolves once the signal is at `level` or higher.
    pub(crate) async fn reached(&self, level: Level) {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so a `raise` between the check
            // and the await is not missed.
            notified.as_mut().enable();
            if self.is_at(level) {
                return;
            }
            notified.await;
        }
    }
}
