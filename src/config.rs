//! [`Config`]: what `Builder::build` checked, as the connections read it.

use std::time::Duration;

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
    pub(crate) tls_handshake_timeout: Option<Duration>,
}
