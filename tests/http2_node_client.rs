//! Node's HTTP/2 client (the built-in `http2` module, on nghttp2: the
//! program in `tests/node/h2client.mjs`) against a dormant server whose
//! connection sleeps between its rounds, over every transport (TCP and a
//! Unix socket with prior knowledge, TLS with ALPN `h2`). Node keeps
//! HTTP/2's default 65,535-byte windows and tops them up only once half is
//! used: after any response, it has granted less than a fresh connection
//! believes, which the woken connection's window gate makes up for
//! (`wire::gate`). Each round: GETs of responses larger than 65,535 B and
//! than what is left of the window, and POSTs, at once, then GETs one after
//! the other; the client checks every byte. The pauses between rounds
//! cross PARKED and DORMANT, each a sleep (never declined for the window);
//! two carry a client PING. Needs `node` (18 or newer) on `PATH`, or
//! `NODE` set to it.

// The transports' raw HTTP/1 clients (`Serve::connect`) are not used here:
// the Node client connects by itself.
mod common {
    pub(crate) mod child_client;
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod client;
    pub(crate) mod ladder;
    #[allow(dead_code, reason = "the Node client runs on no runtime of ours")]
    pub(crate) mod rungs;
    pub(crate) mod runtime;
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod servers;
    pub(crate) mod services;
    pub(crate) mod temp_dir;
    pub(crate) mod timeout;
    #[cfg(any(feature = "tls", feature = "tls-ring"))]
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod tls;
    #[cfg(any(feature = "tls", feature = "tls-ring"))]
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod tls_client;
    pub(crate) mod transport;
    pub(crate) mod unix;
}

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::child_client::ChildClient;
use common::ladder::ladder;
use common::rungs::{Rung, all_closed, sleep_until, woke};
use common::services::mirror_service;
use common::transport::{Transport, over_every_transport};

over_every_transport!(node_client_with_its_default_windows_across_sleeps);

/// The pauses between the Node client's rounds: they alternate between
/// PARKED and DORMANT.
const PAUSES: [Rung; 4] = [Rung::Parked, Rung::Dormant, Rung::Parked, Rung::Dormant];

/// The pauses (indices into [`PAUSES`]) in which the client sends a PING
/// while its connection sleeps, before the next round.
const PINGS: [usize; 2] = [1, 2];

/// `dormant_after` of the servers here: as the Go client's tests, long
/// enough that a connection the test waits for PARKED has not gone on.
const DORMANT_AFTER: Duration = Duration::from_millis(500);

/// Requests in one round of the Node client (`h2client.mjs`, `round`).
const REQUESTS_PER_ROUND: u64 = 8;

/// Runs the Node client against a dormant server serving the mirror
/// service: round 0 on the new connection, then a round after each pause
/// of [`PAUSES`], which waits, the client idle, until the connection has
/// slept to its rung (and, in the pauses of [`PINGS`], has the client
/// PING it); the round after it must have woken it. Then the client
/// closes, and must exit 0. The server must have accepted one connection,
/// served each request once, and never declined a sleep.
fn node_client_with_its_default_windows_across_sleeps<T: Transport>()
where
    T::Addr: NodeDial,
{
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    let mut args = vec![script().into_os_string()];
    args.extend(srv.addr.node_args());
    let mut client = ChildClient::start("the Node client", &node(), &args);

    let mut before = srv.stats();
    client.command("round", "round 0 done");
    for (i, pause) in PAUSES.into_iter().enumerate() {
        sleep_until(&srv, pause, before);
        if PINGS.contains(&i) {
            client.command("ping", "ping done");
            srv.wait_for("asleep after the PING", |s| {
                s.active == 0 && s.parked + s.dormant == 1
            });
        }
        before = srv.stats();
        // Over TLS a PING wakes the connection, which then sleeps again.
        let rung = if before.dormant == 1 {
            Rung::Dormant
        } else {
            Rung::Parked
        };
        client.command("round", &format!("round {} done", i + 1));
        woke(&srv, rung, before);
    }
    client.finish();

    all_closed(&srv);
    let s = srv.stats();
    let rounds = PAUSES.len() as u64 + 1;
    assert_eq!(
        (s.accepted, s.tls_handshakes, s.requests),
        (1, T::HANDSHAKES, rounds * REQUESTS_PER_ROUND),
        "one connection, each request served once: {s:?}"
    );
    assert_eq!(s.h2_sleep_declines.window, 0, "{s:?}");
}

/// `tests/node/h2client.mjs`.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/h2client.mjs")
}

/// The `node` command: `$NODE` if set, else `node` on `PATH`.
fn node() -> PathBuf {
    let found = match std::env::var_os("NODE") {
        Some(node) => Some(PathBuf::from(node)),
        None => std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join("node"))
            .find(|node| node.is_file()),
    };
    found.filter(|node| node.is_file()).unwrap_or_else(|| {
        panic!(
            "these tests run Node's HTTP/2 client (tests/node/h2client.mjs), and no `node` \
             command was found on PATH: install Node.js 18 or newer, or set NODE to the node \
             binary"
        )
    })
}

/// The Node client's arguments that reach a server at this address.
trait NodeDial {
    fn node_args(&self) -> Vec<OsString>;
}

impl NodeDial for SocketAddr {
    fn node_args(&self) -> Vec<OsString> {
        vec!["--addr".into(), self.to_string().into()]
    }
}

impl NodeDial for PathBuf {
    fn node_args(&self) -> Vec<OsString> {
        vec!["--unix".into(), self.into()]
    }
}

#[cfg(any(feature = "tls", feature = "tls-ring"))]
impl NodeDial for common::transport::tls::TlsAddr {
    /// TLS with ALPN `h2`, trusting the server's certificate, for
    /// `localhost` (the name it was made for).
    fn node_args(&self) -> Vec<OsString> {
        vec![
            "--addr".into(),
            self.addr.to_string().into(),
            "--tls".into(),
            "--ca".into(),
            self.ca.clone().into(),
        ]
    }
}
