//! What a server's connections share: [`Shared`] for the whole server,
//! [`ServeState`] for the connections of one `serve` call, and [`Open`],
//! one connection's handle on it.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::TokioExecutor;

use crate::accounting::Held;
use crate::config::Config;
use crate::hooks::{Admitted, Hooks};
use crate::kept::Stowed;
use crate::ladder::Rung;
use crate::lot;
use crate::pool::Pool;
use crate::shutdown::Signal;
use crate::stats::Counters;
use crate::transport::{Handshakes, Seam};
use crate::upgrade::{self, Handler};
use crate::wire::SettingsCache;

/// What every connection of a server shares.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) http1: http1::Builder,
    pub(crate) http2: http2::Builder<TokioExecutor>,
    pub(crate) pool: Pool,
    pub(crate) stats: Counters,
    /// The client settings sleeping HTTP/2 connections share.
    pub(crate) h2_settings: SettingsCache,
}

impl Handshakes for Shared {
    fn tls_completed(&self) {
        self.stats.tls_handshakes.fetch_add(1, Relaxed);
    }

    fn tls_failed(&self) {
        self.stats.tls_handshake_failures.fetch_add(1, Relaxed);
    }

    fn tls_kept_by_rustls(&self) {
        self.stats.tls_kept_by_rustls.fetch_add(1, Relaxed);
    }

    fn proxy_header_failed(&self) {
        self.stats.proxy_header_failures.fetch_add(1, Relaxed);
    }
}

/// The parking lot of one `serve` call: its sleepers are upgraded streams,
/// its task-less connections carry what they keep (`kept`).
pub(crate) type ServeLot<T> = lot::ParkingLot<T, Box<dyn Handler>, Stowed<<T as Seam>::Addr>>;

/// What the connections of one `serve` call share.
pub(crate) struct ServeState<T: Seam> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) signal: Signal,
    /// Where every connection is registered, and waits without a task.
    pub(crate) lot: ServeLot<T>,
    /// The same lot, as upgraded streams see it.
    pub(crate) upgrade_lot: upgrade::Lot,
    pub(crate) held: Arc<Held>,
    /// The call's connection hooks; `None` without any.
    pub(crate) hooks: Option<Hooks<T::Addr>>,
}

impl<T: Seam> ServeState<T> {
    /// What the connection hooks decide for a new connection from `peer`
    /// ([`Hooks::open`]): at accept, or once a PROXY header named the
    /// peer.
    pub(crate) fn admit(&self, peer: &T::Addr) -> Admitted<T::Addr> {
        match &self.hooks {
            None => Admitted::Serve(None),
            Some(hooks) => hooks.open(peer, &self.shared.stats.rejected),
        }
    }
}

/// A connection task's hold on its `serve` call: it counts the connection
/// as held (from accept until it is closed) and on its rung in the
/// server's gauges (ACTIVE or PARKED), until it drops, or until the
/// connection goes into the parking lot, which counts it from then on.
pub(crate) struct Open<T: Seam> {
    state: Arc<ServeState<T>>,
    /// The rung it counts on; `None` once in the lot, which counts it.
    rung: Option<Rung>,
}

impl<T: Seam> Open<T> {
    /// A newly accepted connection, PARKED until its first bytes.
    pub(crate) fn accepted(state: &Arc<ServeState<T>>) -> Self {
        state.held.acquire();
        Open::woken(state)
    }

    /// A connection the parking lot hands back, PARKED until served; it
    /// is already held.
    pub(crate) fn woken(state: &Arc<ServeState<T>>) -> Self {
        state.shared.stats.connections.add(Rung::Parked, 1);
        Open {
            state: state.clone(),
            rung: Some(Rung::Parked),
        }
    }

    /// The `serve` call this connection is held by: its lot, its shutdown
    /// signal, and what the whole server shares.
    pub(crate) fn state(&self) -> &ServeState<T> {
        &self.state
    }

    /// The connection, in its task, steps onto `rung` (ACTIVE or PARKED).
    pub(crate) fn set_rung(&mut self, rung: Rung) {
        debug_assert!(self.rung.is_some(), "in the lot, it has no task");
        if let Some(from) = self.rung.filter(|&from| from != rung) {
            let gauges = &self.state.shared.stats.connections;
            gauges.sub(from, 1);
            gauges.add(rung, 1);
            self.rung = Some(rung);
        }
    }

    /// The (PARKED) connection moved into the parking lot, which holds it
    /// and counts it as parked from now on, until it closes it or hands it
    /// back.
    pub(crate) fn moved_to_lot(&mut self) {
        debug_assert_eq!(self.rung, Some(Rung::Parked));
        self.rung = None;
    }
}

impl<T: Seam> Drop for Open<T> {
    fn drop(&mut self) {
        if let Some(rung) = self.rung {
            self.state.shared.stats.connections.sub(rung, 1);
            self.state.held.release(1);
        }
    }
}
