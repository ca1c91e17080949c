//! What a server's connections share: [`Shared`] for the whole server,
//! [`ServeState`] for the connections of one `serve` call, and [`Open`],
//! one connection's handle on it.

use std::ops::Deref;
use std::sync::Arc;

use hyper::server::conn::{http1, http2};
use hyper_util::rt::TokioExecutor;

use crate::accounting::Held;
use crate::config::Config;
use crate::hooks::Hooks;
use crate::pool::Pool;
use crate::shutdown::Signal;
use crate::stats::Counters;
use crate::transport::Seam;
use crate::upgrade::{self, StreamLot};
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

#[cfg(feature = "tls-no-provider")]
impl crate::transport::Handshakes for Shared {
    fn completed(&self) {
        (self.stats.tls_handshakes).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn failed(&self) {
        (self.stats.tls_handshake_failures).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(feature = "proxy-protocol")]
impl crate::transport::ProxyHeaders for Shared {
    fn failed(&self) {
        (self.stats.proxy_header_failures).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the connections of one `serve` call share.
pub(crate) struct ServeState<T: Seam> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) signal: Signal,
    /// Where every connection is registered, and waits without a task.
    pub(crate) lot: StreamLot<T>,
    /// The same lot, as upgraded streams see it.
    pub(crate) upgrade_lot: upgrade::Lot,
    pub(crate) held: Held,
    /// The call's connection hooks; `None` without any.
    pub(crate) hooks: Option<Hooks<T::Addr>>,
}

/// A connection task's handle on its `serve` call. The connection counts as
/// held from accept until it is closed: when this handle drops, unless it
/// went into the parking lot, which then holds it.
pub(crate) struct Open<T: Seam> {
    state: Arc<ServeState<T>>,
    held: bool,
}

impl<T: Seam> Open<T> {
    /// A newly accepted connection.
    pub(crate) fn accepted(state: &Arc<ServeState<T>>) -> Self {
        state.held.acquire();
        Open {
            state: state.clone(),
            held: true,
        }
    }

    /// A connection the parking lot hands back; it is already counted.
    pub(crate) fn woken(state: &Arc<ServeState<T>>) -> Self {
        Open {
            state: state.clone(),
            held: true,
        }
    }

    /// The connection moves into the parking lot, which holds it from now
    /// on: it stays counted until the lot closes it or hands it back.
    pub(crate) fn into_lot(mut self) {
        self.held = false;
    }
}

impl<T: Seam> Deref for Open<T> {
    type Target = ServeState<T>;
    fn deref(&self) -> &ServeState<T> {
        &self.state
    }
}

impl<T: Seam> Drop for Open<T> {
    fn drop(&mut self) {
        if self.held {
            self.state.held.release(1);
        }
    }
}
