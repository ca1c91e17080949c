//! HTTP/2 clients of other languages against a dormant server whose
//! connection sleeps between their rounds, over every transport (TCP and a
//! Unix socket with prior knowledge, TLS with ALPN `h2`), each a command
//! client in a child process (`common::child`):
//!
//! - Go's (`golang.org/x/net/http2`, `tests/go/h2client`): each round sends
//!   19 requests on the one connection: a POST whose body stays open
//!   throughout, ten at once (POST bodies of 0 B to 1 MiB, responses larger
//!   than 65,535 B and than the client's stream window), then eight small
//!   GETs alike; each carries a ~3 KB cookie-like header that HPACK
//!   indexes, and the last GETs must send it as an index (the header table
//!   is back after a wake). With its defaults, its smallest windows, and a
//!   browser's settings. The Go client is built once per test process
//!   (`go build`, from the module cache or the Go module proxy).
//! - Node's `http2` module (on nghttp2, `tests/node/h2client.mjs`) and
//!   Python's httpx (on the `h2` package, `tests/python/h2client.py`, a
//!   synchronous client that reads only while it waits for a response),
//!   which keep HTTP/2's default 65,535-byte windows and top them up only
//!   once half is used: after any response such a client has granted less
//!   than a fresh connection believes, which the woken connection's window
//!   gate makes up for (`wire::gate`). Each round: GETs of responses larger
//!   than 65,535 B and than what is left of the window, and POSTs (at once
//!   for Node, one after the other for httpx), then small GETs.
//!
//! Every client checks every byte and header that comes back, and that it
//! used one connection for all. The pauses between rounds cross PARKED and
//! DORMANT, each a sleep (never declined for the window); two of them
//! carry a client PING (Go's and Node's). Needs Go 1.26+, `node` (18 or
//! newer) and `python3` with `httpx[http2]` on `PATH` (or `GO`, `NODE`,
//! `PYTHON` set to them).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::common::child::{Child, Dial, program, python};
use crate::common::ladder::ladder;
use crate::common::rungs::{DORMANT_AFTER, all_closed, sleep_until, woke};
use crate::common::servers::Serve;
use crate::common::services::mirror_service;
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung;
use dormant::Rung::{Active, Dormant, Parked};

over_every_transport!(
    go_client_with_its_defaults_across_sleeps,
    go_client_with_small_windows_across_sleeps,
    go_client_with_browser_like_settings_across_sleeps,
    node_client_with_its_default_windows_across_sleeps,
    httpx_client_with_its_default_windows_across_sleeps,
);

/// A client program and what its rounds do.
struct Client {
    /// What messages call it.
    name: &'static str,
    /// The program, and its arguments before the server's address.
    program: PathBuf,
    args: Vec<OsString>,
    /// Requests in one of its rounds.
    requests_per_round: u64,
    /// The pauses (indices into [`PAUSES`]) in which it sends a PING while
    /// its connection sleeps, before the next round.
    pings: &'static [usize],
}

impl Client {
    /// Go's client, with `flags` (its settings, split at spaces).
    fn go(flags: &str) -> Client {
        Client {
            name: "the Go client",
            program: crate::common::go::program(
                "h2client",
                "Go's HTTP/2 client (tests/go/h2client)",
            ),
            args: flags.split_whitespace().map(OsString::from).collect(),
            requests_per_round: 19,
            pings: &[1, 2],
        }
    }

    /// The script `script` (under `tests/`) run by `program`.
    fn script(name: &'static str, program: PathBuf, script: &str) -> Client {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
        Client {
            name,
            program,
            args: vec![script.into_os_string()],
            requests_per_round: 0,
            pings: &[],
        }
    }
}

/// Go's client with its transport's defaults: a 1 GiB connection window,
/// 4 MiB stream windows (a GET of 4 MiB + 100 kB runs into one), frames of
/// up to 1 MiB, a 4,096-byte header table.
fn go_client_with_its_defaults_across_sleeps<T: Transport>()
where
    T::Addr: Dial,
{
    across_sleeps::<T>(Client::go(""));
}

/// Go's client with the smallest windows it takes: a connection window of
/// 131,070 bytes (65,535 granted on top of the initial 65,535), 65,535-byte
/// stream windows and 16 KiB frames, so that responses and request bodies
/// run through many window updates both ways.
fn go_client_with_small_windows_across_sleeps<T: Transport>()
where
    T::Addr: Dial,
{
    across_sleeps::<T>(Client::go(
        "--conn-window 65535 --stream-window 65535 --max-frame 16384",
    ));
}

/// Go's client with a browser's settings (Firefox's): a 12 MiB connection
/// window, 128 KiB stream windows, the largest frames, a 64 KiB header
/// table for the server's header blocks.
fn go_client_with_browser_like_settings_across_sleeps<T: Transport>()
where
    T::Addr: Dial,
{
    across_sleeps::<T>(Client::go(
        "--conn-window 12582912 --stream-window 131072 --max-frame 16777215 --header-table 65536",
    ));
}

fn node_client_with_its_default_windows_across_sleeps<T: Transport>()
where
    T::Addr: Dial,
{
    let node = program("NODE", "node", "Node.js 18 or newer");
    across_sleeps::<T>(Client {
        requests_per_round: 8,
        pings: &[1, 2],
        ..Client::script("the Node client", node, "node/h2client.mjs")
    });
}

fn httpx_client_with_its_default_windows_across_sleeps<T: Transport>()
where
    T::Addr: Dial,
{
    let python = python("import httpx, h2", "'httpx[http2]'");
    across_sleeps::<T>(Client {
        requests_per_round: 7,
        ..Client::script("the httpx client", python, "python/h2client.py")
    });
}

/// The pauses between a client's rounds: they alternate between PARKED
/// and DORMANT.
const PAUSES: [Rung; 4] = [Rung::Parked, Rung::Dormant, Rung::Parked, Rung::Dormant];

/// Runs `client` against a dormant server serving the mirror service:
/// round 0 on the new connection, then a round after each pause of
/// [`PAUSES`] ([`rounds_across_sleeps`]). Then the client closes, and must
/// exit 0. The server must have accepted one connection, served each
/// request once, and never declined a sleep for a client's window.
fn across_sleeps<T: Transport>(client: Client)
where
    T::Addr: Dial,
{
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    let mut args = client.args.clone();
    args.extend(srv.addr.dial());
    let mut child = Child::start(client.name, &client.program, &args);
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

/// Has `client` play round 0 on its new connection to `srv`, then a round
/// after each pause of [`PAUSES`], which waits, the client idle, until the
/// connection has slept to its rung (and, in the pauses `pings` lists,
/// has the client PING it, then waits until it is asleep again, woken by
/// the PING or not); the round after it must have woken it. The client
/// answers `round N done` and `ping done`.
fn rounds_across_sleeps<A>(srv: &Serve<A>, client: &mut Child, pings: &[usize]) {
    let mut before = srv.stats();
    client.command("round", "round 0 done");
    for (i, pause) in PAUSES.into_iter().enumerate() {
        sleep_until(srv, pause, before);
        if pings.contains(&i) {
            client.command("ping", "ping done");
            srv.wait_for("asleep after the PING", |s| {
                s.connections[Active] == 0 && s.connections[Parked] + s.connections[Dormant] == 1
            });
        }
        before = srv.stats();
        // A PING may have woken the connection (over TLS), which then
        // slept again.
        let rung = if before.connections[Dormant] == 1 {
            Rung::Dormant
        } else {
            Rung::Parked
        };
        client.command("round", &format!("round {} done", i + 1));
        woke(srv, rung, before);
    }
}
