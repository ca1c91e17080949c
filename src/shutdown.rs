//! The shutdown signal one `serve` call shares with its connections.
//!
//! One atomic level and one `Notify`: a connection waiting on it holds a
//! waiter node inside its own task, so the signal costs no allocation per
//! connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

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

    fn level(&self) -> Level {
        match self.level.load(Ordering::Acquire) {
            0 => Level::Running,
            1 => Level::Draining,
            _ => Level::Forced,
        }
    }

    /// A watcher for a connection's poll function.
    pub(crate) fn watch(&self) -> Watch<'_> {
        Watch {
            signal: self,
            notified: self.notify.notified(),
            registered: false,
        }
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

pin_project! {
    /// Reads the level from inside a poll function, cheaply: the waiter is
    /// registered once (a lock on the shared `Notify`), after which each
    /// poll is one atomic load until the level rises. A connection's task
    /// polls it on every wake-up, so this matters for throughput.
    pub(crate) struct Watch<'a> {
        signal: &'a Signal,
        #[pin]
        notified: Notified<'a>,
        registered: bool,
    }
}

impl Watch<'_> {
    /// The current level; the task is woken when it rises. Relies on the
    /// task's waker staying the same between polls, as it does for a
    /// future polled by one tokio task.
    pub(crate) fn poll_level(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Level {
        let mut this = self.project();
        if !*this.registered {
            // `Notified` receives `notify_waiters` from its creation on, so
            // a rise between creation and this poll is not missed.
            match this.notified.as_mut().poll(cx) {
                Poll::Pending => *this.registered = true,
                Poll::Ready(()) => {
                    // Risen: watch for the next rise.
                    this.notified.set(this.signal.notify.notified());
                    let _ = this.notified.as_mut().poll(cx);
                    *this.registered = true;
                }
            }
        } else if this.signal.level() != Level::Running {
            // Woken by a rise: register again for the next one.
            if this.notified.as_mut().poll(cx).is_ready() {
                this.notified.set(this.signal.notify.notified());
                let _ = this.notified.as_mut().poll(cx);
            }
        }
        this.signal.level()
    }
}
