//! [`Config`]: what `Builder::build` checked, as the connections read it.

use std::time::Duration;

use crate::life::Limits;
use crate::timeout::Timeouts;

/// A server's validated settings (see `Builder` for each one's meaning).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Config {
    pub(crate) park_after: Option<Duration>,
    pub(crate) dormant_after: Option<Duration>,
    pub(crate) timeouts: Timeouts,
    pub(crate) max_connections: Option<usize>,
    pub(crate) http2: bool,
    pub(crate) peer_addr: bool,
    #[cfg(feature = "tls-no-provider")]
    pub(crate) tls_info: bool,
    pub(crate) shutdown_grace: Option<Duration>,
    pub(crate) handshake_timeout: Option<Duration>,
    /// How idle HTTP/2 connections may sleep.
    pub(crate) h2_sleep: H2Sleep,
    /// How long connections live, and how many requests they serve.
    pub(crate) limits: Limits,
}

/// What an idle HTTP/2 connection's sleep depends on (see `wire`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct H2Sleep {
    /// The connection window a fresh h2 connection grants: a connection
    /// sleeps only if the client may not send more.
    pub(crate) fresh_window: u32,
    /// Keep-alive PINGs, which the lot sends to sleeping connections.
    pub(crate) keep_alive: Option<KeepAlive>,
}

/// HTTP/2 keep-alive PINGs: one after `interval` without a frame from the
/// client, answered within `timeout` or the connection is closed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeepAlive {
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
}

/// The most the parking lot may be late on a deadline.
const MAX_LOT_SLACK: Duration = Duration::from_millis(100);

impl Config {
    /// How late the parking lot may act on a deadline, so that it acts on
    /// many at once: a sixteenth of the shortest duration it counts down
    /// (`dormant_after`, the idle timeout, the HTTP/2 keep-alive interval
    /// and timeout), between 1 ms and 100 ms.
    pub(crate) fn lot_slack(&self) -> Duration {
        let keep_alive = self.h2_sleep.keep_alive;
        [
            self.dormant_after,
            self.timeouts.idle,
            keep_alive.map(|k| k.interval),
            keep_alive.map(|k| k.timeout),
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(MAX_LOT_SLACK, |shortest| {
            (shortest / 16).clamp(Duration::from_millis(1), MAX_LOT_SLACK)
        })
    }

    /// How often the parking lot looks for task-less connections past
    /// their age (see `life`): a thirty-second of it, between 10 ms and a
    /// minute; `None` without an age.
    pub(crate) fn lot_sweep_every(&self) -> Option<Duration> {
        (self.limits.max_age)
            .map(|age| (age / 32).clamp(Duration::from_millis(10), Duration::from_secs(60)))
    }
}
