//! Go's HTTP/2 client (`golang.org/x/net/http2`, the program in
//! `tests/go/h2client`) against a dormant server whose connection sleeps
//! between its rounds, over every transport (TCP and a Unix socket with
//! prior knowledge, TLS with ALPN `h2`). Each round sends 19 requests on
//! the one connection: a POST whose body stays open throughout, ten at once
//! (POST bodies of 0 B to 1 MiB, responses larger than 65,535 B and than
//! the client's stream window), then eight small GETs alike; each carries
//! a ~3 KB cookie-like header that HPACK indexes, and the last GETs must
//! send it as an index (the header table is back after a wake). The client
//! checks every byte and header that comes back; pauses between the rounds
//! cross PARKED and DORMANT, and two of them carry a client PING. The Go
//! client is built once per test process (`go build`, from the module
//! cache or the Go module proxy); without Go, the tests fail saying how to
//! install it.

// The transports' raw HTTP/1 clients (`Serve::connect`) are not used here:
// the Go client connects by itself.
mod common {
    pub(crate) mod child_client;
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod client;
    pub(crate) mod go;
    pub(crate) mod ladder;
    #[allow(dead_code, reason = "the Go client runs on no runtime of ours")]
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
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use common::child_client::{ChildClient, PAUSES, STEP_TIMEOUT, rounds_across_sleeps};
use common::go::GoDial;
use common::ladder::ladder;
use common::rungs::all_closed;
use common::services::mirror_service;
use common::transport::{Transport, over_every_transport};

over_every_transport!(
    go_client_with_its_defaults_across_sleeps,
    go_client_with_small_windows_across_sleeps,
    go_client_with_browser_like_settings_across_sleeps,
);

/// The pauses (indices into [`PAUSES`]) in which the client sends a PING
/// while its connection sleeps, before the next round.
const PINGS: [usize; 2] = [1, 2];

/// `dormant_after` of the servers here (they park after 3 ms, `ladder`):
/// longer than the HTTP/2 sleep tests' (`rungs::DORMANT_AFTER`), since
/// the test learns that a round is over only from the Go client's answer,
/// which a busy machine may hold back; in the meantime the connection must
/// not have gone on from PARKED to DORMANT.
const DORMANT_AFTER: Duration = Duration::from_millis(500);

/// Requests in one round of the Go client (`main.go`, `round`).
const REQUESTS_PER_ROUND: u64 = 19;

/// Go's client with its transport's defaults: a 1 GiB connection window,
/// 4 MiB stream windows (a GET of 4 MiB + 100 kB runs into one), frames of
/// up to 1 MiB, a 4,096-byte header table.
fn go_client_with_its_defaults_across_sleeps<T: Transport>()
where
    T::Addr: GoDial,
{
    go_client_across_sleeps::<T>(&[]);
}

/// Go's client with the smallest windows it takes: a connection window of
/// 131,070 bytes (65,535 granted on top of the initial 65,535), 65,535-byte
/// stream windows and 16 KiB frames, so that responses and request bodies
/// run through many window updates both ways.
fn go_client_with_small_windows_across_sleeps<T: Transport>()
where
    T::Addr: GoDial,
{
    go_client_across_sleeps::<T>(&[
        "-conn-window",
        "65535",
        "-stream-window",
        "65535",
        "-max-frame",
        "16384",
    ]);
}

/// Go's client with a browser's settings (Firefox's): a 12 MiB connection
/// window, 128 KiB stream windows, the largest frames, a 64 KiB header
/// table for the server's header blocks.
fn go_client_with_browser_like_settings_across_sleeps<T: Transport>()
where
    T::Addr: GoDial,
{
    go_client_across_sleeps::<T>(&[
        "-conn-window",
        "12582912",
        "-stream-window",
        "131072",
        "-max-frame",
        "16777215",
        "-header-table",
        "65536",
    ]);
}

/// Runs the Go client (with the extra `flags`) against a dormant server
/// serving the mirror service: round 0 on the new connection, then a round
/// after each pause of [`PAUSES`], which waits, the client idle, until the
/// connection has slept to its rung (and, in the pauses of [`PINGS`], has
/// the client PING it and waits until it sleeps again); the round after it
/// must have woken it. The client checks every response and that it used
/// one connection for all; then it closes, and must exit 0. The server must
/// have accepted one connection and served each request once.
fn go_client_across_sleeps<T: Transport>(flags: &[&str])
where
    T::Addr: GoDial,
{
    let go = go_client();
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    let mut args = srv.addr.go_args();
    args.extend([
        "-timeout".into(),
        format!("{}s", STEP_TIMEOUT.as_secs() / 2).into(),
    ]);
    args.extend(flags.iter().map(OsString::from));
    let mut client = ChildClient::start("the Go client", go, &args);

    rounds_across_sleeps(&srv, &mut client, &PINGS);
    client.finish();

    all_closed(&srv);
    let s = srv.stats();
    let rounds = PAUSES.len() as u64 + 1;
    assert_eq!(
        (s.accepted, s.tls_handshakes, s.requests),
        (1, T::HANDSHAKES, rounds * REQUESTS_PER_ROUND),
        "one connection, each request served once: {s:?}"
    );
}

// ---- the Go client ----

/// The Go client, built once per test process (the first test to need it
/// builds it; the others wait).
fn go_client() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT
        .get_or_init(|| common::go::build("h2client", "Go's HTTP/2 client (tests/go/h2client)"))
    {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}
