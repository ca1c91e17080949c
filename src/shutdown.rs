//! The shutdown signal one `serve` call shares with its connections, and
//! [`Shutdown`], the view of it that upgraded streams get.
//!
//! One atomic level and one `Notify`: a connection waiting on it holds a
//! waiter node inside its own task, so the signal costs no allocation per
//! connection. The pair sits behind an `Arc` so that a handler can keep
//! watching it after its stream left the server (an upgrade), without
//! keeping anything else of the server alive.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Waker};

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

/// Cloning is cheap: clones share one level.
#[derive(Clone, Debug, Default)]
pub(crate) struct Signal {
    inner: Arc<SignalState>,
}

/// What the clones of a [`Signal`] share: the level, and who waits for it
/// to rise.
#[derive(Debug)]
struct SignalState {
    level: AtomicU8,
    notify: Notify,
}

impl Default for SignalState {
    fn default() -> Self {
        SignalState {
            level: AtomicU8::new(Level::Running as u8),
            notify: Notify::new(),
        }
    }
}

impl Signal {
    pub(crate) fn raise(&self, level: Level) {
        self.inner.raise(level);
    }

    /// A watcher for a connection's poll function.
    pub(crate) fn watch(&self) -> Watch<'_> {
        Watch {
            signal: &self.inner,
            notified: self.inner.notify.notified(),
            waker: None,
        }
    }

    /// Resolves once the signal is at `level` or higher.
    pub(crate) async fn reached(&self, level: Level) {
        self.inner.reached(level).await;
    }

    pub(crate) fn is_at(&self, level: Level) -> bool {
        self.inner.is_at(level)
    }
}

impl SignalState {
    fn raise(&self, level: Level) {
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

    async fn reached(&self, level: Level) {
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
    /// Reads the level from inside a poll function, cheaply: the task's
    /// waker is registered once (a lock on the shared `Notify`), after
    /// which each poll is one atomic load until the level rises. A
    /// connection's task polls it on every wake-up, so this matters for
    /// throughput.
    pub(crate) struct Watch<'a> {
        signal: &'a SignalState,
        #[pin]
        notified: Notified<'a>,
        // The waker `notified` was last polled with: registered again
        // when a poll brings another (the future moved to another task,
        // as a woken connection does after its first poll in the lot's).
        waker: Option<Waker>,
    }
}

impl Watch<'_> {
    /// The current level, registering nothing: for a poll function that
    /// returns `Pending` only after [`poll_level`](Self::poll_level).
    pub(crate) fn level(&self) -> Level {
        self.signal.level()
    }

    /// The current level; the task is woken when it rises.
    pub(crate) fn poll_level(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Level {
        let mut this = self.project();
        let registered = this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        if !registered || this.signal.level() != Level::Running {
            // `Notified` receives `notify_waiters` from its creation on, so
            // a rise between creation and this poll is not missed; a poll
            // also replaces the waker it holds.
            if this.notified.as_mut().poll(cx).is_ready() {
                // Risen: watch for the next rise.
                this.notified.set(this.signal.notify.notified());
                let _ = this.notified.as_mut().poll(cx);
            }
            if !registered {
                *this.waker = Some(cx.waker().clone());
            }
        }
        this.signal.level()
    }
}

/// Tells whether the graceful shutdown of a `serve` call has begun.
///
/// The server neither waits for nor closes the streams it handed off in an
/// upgrade (as Go's `Hijack`): they are the handler's. A handler that wants
/// to end them at shutdown (say, send a WebSocket close frame) watches this
/// signal, which every [`upgrade::Parts`](crate::upgrade::Parts) carries.
/// Upgraded streams asleep in the parking lot are woken with
/// [`Woken::Shutdown`](crate::upgrade::Woken::Shutdown) instead.
///
/// Cloning is cheap. It holds the signal only (one small allocation shared
/// with the `serve` call), nothing else of the server.
///
/// ```no_run
/// # async fn run(parts: dormant::upgrade::Parts) {
/// let shutdown = parts.shutdown.clone();
/// tokio::select! {
///     () = shutdown.begun() => { /* say goodbye, close */ }
///     // … the protocol …
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct Shutdown(Signal);

impl Shutdown {
    pub(crate) fn new(signal: &Signal) -> Self {
        Shutdown(signal.clone())
    }

    /// Returns whether graceful shutdown has begun.
    pub fn is_begun(&self) -> bool {
        self.0.is_at(Level::Draining)
    }

    /// Resolves once graceful shutdown has begun (at once if it has). Never
    /// resolves if the `serve` future is dropped instead of shut down.
    pub async fn begun(&self) {
        self.0.reached(Level::Draining).await;
    }
}

impl fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shutdown")
            .field("begun", &self.is_begun())
            .finish()
    }
}
