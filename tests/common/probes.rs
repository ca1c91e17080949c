//! Handlers that report to the test: when they start, and what of theirs
//! is dropped (a handler's future, a response body) before it finished.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::timeout::CLIENT_TIMEOUT;

/// A request that gated handlers hold until the test releases them.
pub(crate) const WAIT: &[u8] = b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n";

/// What gated handlers report to the test, and what releases them.
pub(crate) struct Probes {
    started: Mutex<Sender<()>>,
    dropped: Mutex<Sender<&'static str>>,
    pub(crate) release: Notify,
}

impl Probes {
    /// New probes, with the receivers of what they report: the starts of
    /// gated handlers, and the drops of [`DropProbe`]s.
    pub(crate) fn new() -> (Arc<Probes>, Receiver<()>, Receiver<&'static str>) {
        let (started_tx, started) = mpsc::channel();
        let (dropped_tx, dropped) = mpsc::channel();
        let probes = Arc::new(Probes {
            started: Mutex::new(started_tx),
            dropped: Mutex::new(dropped_tx),
            release: Notify::new(),
        });
        (probes, started, dropped)
    }

    /// A probe that reports `what` when dropped, unless defused.
    pub(crate) fn probe(&self, what: &'static str) -> DropProbe {
        DropProbe(what, Some(self.dropped.lock().unwrap().clone()))
    }

    /// A gated handler: reports its start and waits until the test
    /// releases it; if it is dropped before, reports `handler`.
    pub(crate) async fn gate(&self) {
        let probe = self.probe("handler");
        self.started.lock().unwrap().send(()).unwrap();
        self.release.notified().await;
        probe.defuse();
    }
}

/// Reports on its channel when dropped, unless defused.
pub(crate) struct DropProbe(&'static str, Option<Sender<&'static str>>);

impl DropProbe {
    pub(crate) fn defuse(mut self) {
        self.1 = None;
    }
}

impl Drop for DropProbe {
    fn drop(&mut self) {
        if let Some(tx) = &self.1 {
            let _ = tx.send(self.0);
        }
    }
}

/// Waits (bounded) until a gated handler started.
pub(crate) fn handler_started(started: &Receiver<()>) {
    started
        .recv_timeout(CLIENT_TIMEOUT)
        .expect("handler started");
}

/// Waits (bounded) for the next drop report.
pub(crate) fn next_drop(dropped: &Receiver<&'static str>) -> &'static str {
    dropped
        .recv_timeout(CLIENT_TIMEOUT)
        .expect("nothing was dropped after the client closed")
}
