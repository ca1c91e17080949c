//! Upgraded streams that sleep in the lot between messages, watched by the
//! test: what their callbacks report, their hand-offs, their wakes, and
//! the drops of their state.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

use dormant::upgrade::Lot;

use super::drops::{DropCount, Dropped};
use super::timeout::CLIENT_TIMEOUT;

/// An upgrade request to the echo protocol.
pub(crate) const UPGRADE: &str =
    "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n";
/// The answer to [`UPGRADE`].
pub(crate) const SWITCHED: &str =
    "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n";

/// What the test watches of the upgraded streams of a sleeping service.
pub(crate) struct Sleepers {
    /// What the sleeping streams' callbacks report.
    pub(crate) events: Receiver<String>,
    /// One report a hand-off: the kind of stream, and its leftover bytes.
    hand_offs: Receiver<String>,
    /// The lot, once a stream was handed off.
    pub(crate) lot: Arc<Mutex<Option<Lot>>>,
    /// Callbacks called.
    pub(crate) wakes: Arc<AtomicUsize>,
    /// States dropped.
    pub(crate) drops: DropCount,
}

/// The service's side of [`Sleepers`]: where it reports.
#[derive(Clone)]
pub(crate) struct Reports {
    events: Sender<String>,
    hand_offs: Sender<String>,
    lot: Arc<Mutex<Option<Lot>>>,
    wakes: Arc<AtomicUsize>,
    drops: DropCount,
}

impl Sleepers {
    pub(crate) fn new() -> (Sleepers, Reports) {
        let (events_tx, events) = mpsc::channel();
        let (hand_offs_tx, hand_offs) = mpsc::channel();
        let sleepers = Sleepers {
            events,
            hand_offs,
            lot: Arc::default(),
            wakes: Arc::default(),
            drops: DropCount::default(),
        };
        let reports = Reports {
            events: events_tx,
            hand_offs: hand_offs_tx,
            lot: sleepers.lot.clone(),
            wakes: sleepers.wakes.clone(),
            drops: sleepers.drops.clone(),
        };
        (sleepers, reports)
    }

    /// Streams asleep in the lot.
    pub(crate) fn sleeping(&self) -> usize {
        self.lot.lock().unwrap().as_ref().map_or(0, Lot::sleeping)
    }

    /// The next event of a callback.
    pub(crate) fn next(&self) -> String {
        self.events
            .recv_timeout(CLIENT_TIMEOUT)
            .expect("handler event")
    }

    /// The next hand-off.
    pub(crate) fn hand_off(&self) -> String {
        self.hand_offs
            .recv_timeout(CLIENT_TIMEOUT)
            .expect("hand-off")
    }
}

impl Reports {
    /// The state of a new stream, to carry between its sleeps.
    pub(crate) fn sleeper(&self) -> Sleeper {
        Sleeper {
            wakes: self.wakes.clone(),
            events: self.events.clone(),
            _dropped: self.drops.token(),
        }
    }

    /// A stream was handed off into `lot`, as `report` says.
    pub(crate) fn handed_off(&self, report: String, lot: &Lot) {
        let _ = self.hand_offs.send(report);
        *self.lot.lock().unwrap() = Some(lot.clone());
    }
}

/// The state a sleeping stream carries between its wakes.
pub(crate) struct Sleeper {
    wakes: Arc<AtomicUsize>,
    events: Sender<String>,
    _dropped: Dropped,
}

impl Sleeper {
    /// Counts a wake.
    pub(crate) fn woken(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
    }

    /// Tells the test how a wake ended.
    pub(crate) fn report(&self, event: impl Into<String>) {
        let _ = self.events.send(event.into());
    }
}
