//! What the tests share, a file per role: the servers under test and the
//! transports they run over (`servers`, `transport`, `runtime`), the
//! clients that talk to them (raw HTTP/1 in `client`, HTTP/2 in `h2`,
//! `h2_raw` and `h2_script`, TLS in `tls` and `tls_client`, the PROXY
//! protocol's in `proxied`, programs of other languages in `child` and
//! `go`), plain hyper as the reference (`hyper`, `reference`), and what a
//! test waits for or counts (`rungs`, `wait`, `drops`, `probes`, `fds`).

pub(crate) mod axum;
pub(crate) mod child;
pub(crate) mod client;
pub(crate) mod drops;
pub(crate) mod fds;
pub(crate) mod go;
pub(crate) mod h2;
pub(crate) mod h2_raw;
pub(crate) mod h2_script;
pub(crate) mod hpack;
pub(crate) mod hyper;
pub(crate) mod ladder;
pub(crate) mod probes;
pub(crate) mod process;
#[cfg(feature = "proxy-protocol")]
pub(crate) mod proxied;
pub(crate) mod racing;
pub(crate) mod reference;
pub(crate) mod rungs;
pub(crate) mod runtime;
pub(crate) mod servers;
pub(crate) mod services;
pub(crate) mod sleepers;
pub(crate) mod tcp;
pub(crate) mod temp_dir;
pub(crate) mod timeout;
#[cfg(any(feature = "tls", feature = "tls-ring"))]
pub(crate) mod tls;
#[cfg(any(feature = "tls", feature = "tls-ring"))]
pub(crate) mod tls_client;
pub(crate) mod transport;
pub(crate) mod upgrade_echo;
pub(crate) mod wait;
#[cfg(feature = "ws")]
pub(crate) mod ws;
pub(crate) mod xorshift;
