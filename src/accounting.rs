//! [`Held`]: the connections one `serve` call holds, for its connection
//! limit and its graceful shutdown.

#[cfg(feature = "ws")]
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The connections a `serve` call holds, in a task or in the parking lot.
/// Shutdown waits for none to be left; the accept loop waits for fewer than
/// the maximum.
#[derive(Debug)]
pub(crate) struct Held {
    count: AtomicUsize,
    max: usize,
    /// Notified when the count reaches zero, or drops below the maximum.
    released: Notify,
}

impl Held {
    pub(crate) fn new(max: Option<usize>) -> Self {
        Held {
            count: AtomicUsize::new(0),
            max: max.unwrap_or(usize::MAX),
            released: Notify::new(),
        }
    }

    /// How many connections are held.
    pub(crate) fn count(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// A connection was accepted.
    pub(crate) fn acquire(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// `n` connections are closed.
    pub(crate) fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let before = self.count.fetch_sub(n, Ordering::AcqRel);
        // Only the release that crosses a threshold someone may wait on
        // takes the notifier's lock.
        if before == n || (before >= self.max && before - n < self.max) {
            self.released.notify_waiters();
        }
    }

    /// Holds one more until the returned guard drops: a WebSocket's
    /// closing handshake at shutdown, which the drain waits for.
    #[cfg(feature = "ws")]
    pub(crate) fn hold(self: &Arc<Self>) -> Hold {
        self.acquire();
        Hold(self.clone())
    }

    /// Waits until `ready(count)` holds.
    async fn wait(&self, ready: impl Fn(usize) -> bool) {
        loop {
            let mut notified = std::pin::pin!(self.released.notified());
            notified.as_mut().enable();
            if ready(self.count.load(Ordering::Acquire)) {
                return;
            }
            notified.await;
        }
    }

    /// Waits until no connection is held.
    pub(crate) async fn all_released(&self) {
        self.wait(|n| n == 0).await;
    }

    /// Waits until fewer connections than the maximum are held.
    pub(crate) async fn below_max(&self) {
        self.wait(|n| n < self.max).await;
    }
}

/// One held count, released on drop (see [`Held::hold`]).
#[cfg(feature = "ws")]
#[derive(Debug)]
pub(crate) struct Hold(Arc<Held>);

#[cfg(feature = "ws")]
impl Drop for Hold {
    fn drop(&mut self) {
        self.0.release(1);
    }
}
