//! Clients of other languages that keep HTTP/2's default 65,535-byte
//! windows and top them up only once half is used, against a dormant
//! server whose connection sleeps between their rounds, over every
//! transport (TCP and a Unix socket with prior knowledge, TLS with ALPN
//! `h2`): Node's `http2` module (on nghttp2, `tests/node/h2client.mjs`) and
//! Python's httpx (on the `h2` package, `tests/python/h2client.py`, a
//! synchronous client that reads only while it waits for a response).
//! After any response such a client has granted less than a fresh
//! connection believes, which the woken connection's window gate makes up
//! for (`wire::gate`). Each round: GETs of responses larger than 65,535 B
//! and than what is left of the window, and POSTs (at once for Node, one
//! after the other for httpx), then small GETs; the client checks every
//! byte. The pauses between rounds cross PARKED and DORMANT, each a sleep
//! (never declined for the window); two of Node's carry a client PING.
//! Needs `node` (18 or newer) and `python3` with `httpx[http2]` on `PATH`
//! (or `NODE`, `PYTHON` set to them).

// The transports' raw HTTP/1 clients (`Serve::connect`) are not used here:
// the clients connect by themselves.
mod common {
    pub(crate) mod child_client;
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod client;
    pub(crate) mod ladder;
    #[allow(dead_code, reason = "the clients run on no runtime of ours")]
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

use common::child_client::{ChildClient, PAUSES, rounds_across_sleeps};
use common::ladder::ladder;
use common::rungs::all_closed;
use common::services::mirror_service;
use common::transport::{Transport, over_every_transport};

over_every_transport!(
    node_client_with_its_default_windows_across_sleeps,
    httpx_client_with_its_default_windows_across_sleeps,
);

/// `dormant_after` of the servers here: as the Go client's tests, long
/// enough that a connection the test waits for PARKED has not gone on.
const DORMANT_AFTER: Duration = Duration::from_millis(500);

/// A client program and what its rounds do.
struct Client {
    /// What messages call it.
    name: &'static str,
    /// The interpreter, and the script under `tests/`.
    program: PathBuf,
    script: &'static str,
    /// Requests in one of its rounds.
    requests_per_round: u64,
    /// The pauses (indices into [`PAUSES`]) in which it sends a PING while
    /// its connection sleeps, before the next round.
    pings: &'static [usize],
}

fn node_client_with_its_default_windows_across_sleeps<T: Transport>()
where
    T::Addr: Dial,
{
    let node = Client {
        name: "the Node client",
        program: find("NODE", "node", "Node.js 18 or newer"),
        script: "node/h2client.mjs",
        requests_per_round: 8,
        pings: &[1, 2],
    };
    client_across_sleeps::<T>(&node);
}

fn httpx_client_with_its_default_windows_across_sleeps<T: Transport>()
where
    T::Addr: Dial,
{
    let httpx = Client {
        name: "the httpx client",
        program: find(
            "PYTHON",
            "python3",
            "Python 3 with httpx (`python3 -m pip install 'httpx[http2]'`)",
        ),
        script: "python/h2client.py",
        requests_per_round: 7,
        pings: &[],
    };
    client_across_sleeps::<T>(&httpx);
}

/// Runs `client` against a dormant server serving the mirror service:
/// round 0 on the new connection, then a round after each pause of
/// [`PAUSES`], which waits, the client idle, until the connection has
/// slept to its rung (and, in the client's PING pauses, has it PING the
/// connection); the round after it must have woken it. Then the client
/// closes, and must exit 0. The server must have accepted one connection,
/// served each request once, and never declined a sleep.
fn client_across_sleeps<T: Transport>(client: &Client)
where
    T::Addr: Dial,
{
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(client.script);
    let mut args = vec![script.into_os_string()];
    args.extend(srv.addr.args());
    let mut child = ChildClient::start(client.name, &client.program, &args);

    rounds_across_sleeps(&srv, &mut child, client.pings);
    child.finish();

    all_closed(&srv);
    let s = srv.stats();
    let rounds = PAUSES.len() as u64 + 1;
    assert_eq!(
        (s.accepted, s.tls_handshakes, s.requests),
        (1, T::HANDSHAKES, rounds * client.requests_per_round),
        "one connection, each request served once: {s:?}"
    );
    assert_eq!(s.h2_sleep_declines.window, 0, "{s:?}");
}

/// The command `$VAR` names, else `command` on `PATH`; fails saying to
/// install `what` if there is none.
fn find(var: &str, command: &str, what: &str) -> PathBuf {
    let found = match std::env::var_os(var) {
        Some(path) => Some(PathBuf::from(path)),
        None => std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join(command))
            .find(|path| path.is_file()),
    };
    found.filter(|path| path.is_file()).unwrap_or_else(|| {
        panic!(
            "these tests run HTTP/2 clients of other languages, and no `{command}` was found \
             on PATH: install {what}, or set {var} to it"
        )
    })
}

/// A client's arguments that reach a server at this address (both
/// scripts take the same).
trait Dial {
    fn args(&self) -> Vec<OsString>;
}

impl Dial for SocketAddr {
    fn args(&self) -> Vec<OsString> {
        vec!["--addr".into(), self.to_string().into()]
    }
}

impl Dial for PathBuf {
    fn args(&self) -> Vec<OsString> {
        vec!["--unix".into(), self.into()]
    }
}

#[cfg(any(feature = "tls", feature = "tls-ring"))]
impl Dial for common::transport::tls::TlsAddr {
    /// TLS with ALPN `h2`, trusting the server's certificate, for
    /// `localhost` (the name it was made for).
    fn args(&self) -> Vec<OsString> {
        vec![
            "--addr".into(),
            self.addr.to_string().into(),
            "--tls".into(),
            "--ca".into(),
            self.ca.clone().into(),
        ]
    }
}
