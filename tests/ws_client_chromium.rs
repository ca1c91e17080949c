//! `dormant::ws` against a browser's own WebSocket client: headless
//! Chromium's `WebSocket` (Chromium 156 when written; its network
//! service's implementation, with BoringSSL for `wss:`), in a page
//! (`about:blank`) that Node drives over the DevTools protocol
//! (`tests/node/chromium_ws.mjs`: one command a line on its stdin, one
//! answer a line on its stdout). Between the steps the socket sleeps in
//! the lot, with no task. It shows that a browser's client gets back every
//! message from empty to 16 MiB (text and binary, checked byte for byte in
//! the page), answers the pings the lot writes where its socket sleeps and
//! stays open, gets its own close (4000) answered, sees the server's
//! closes (4002 with a reason, 1001 at graceful shutdown, 1009 for a
//! message over the limit, cleanly), and that a browser killed while
//! its socket sleeps (its network service first: the browser itself
//! sends 1001 for the sockets of a page that goes) ends the socket (its
//! handler hears of it, its sender is closed).
//!
//! Chromium offers `permessage-deflate` (`client_max_window_bits`), so
//! with the feature `ws-deflate` every test here runs compressed; the test
//! of `mod compression` shows that it is: the page's `ws.extensions` is
//! the server's answer (no context takeover either way, which the browser
//! takes), and compressible texts of 200 B to 1 MB, which the browser
//! sends compressed, come back whole to a socket that slept before each,
//! in frames marked compressed (RSV1) whose payloads are fewer than a
//! quarter of their bytes (the browser's net log shows the frames'
//! headers, both ways).
//!
//! Over TCP (`ws://127.0.0.1:PORT`) and TLS (`wss://localhost:PORT`, the
//! name the server's self-signed certificate is for; Chromium runs with
//! `--ignore-certificate-errors`). Not over a Unix socket: a browser's
//! `WebSocket` takes a URL, and reaches servers only through TCP. What a
//! page cannot do is not tested here (tests/ws_sleep.rs does it with
//! tokio-tungstenite and raw frames): send fragments, pings or invalid
//! UTF-8 (the browser answers pings by itself, unseen by the page and by
//! the DevTools protocol: the test counts them in the browser's net log).
//!
//! Needs `node` and `chromium` on PATH (or `NODE`, `CHROMIUM` set to
//! them). Each test runs one browser, with a profile of its own; every
//! step is bounded by `STEP_TIMEOUT`, and the browser is killed with
//! Node if the test fails.
#![cfg(feature = "ws")]

mod common {
    #[allow(dead_code, reason = "the rounds of HTTP/2 clients are not played here")]
    pub(crate) mod child_client;
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod client;
    #[allow(dead_code, reason = "the clients run on no runtime of ours")]
    pub(crate) mod rungs;
    pub(crate) mod runtime;
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod servers;
    pub(crate) mod temp_dir;
    pub(crate) mod timeout;
    #[cfg(any(feature = "tls", feature = "tls-ring"))]
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod tls;
    #[cfg(any(feature = "tls", feature = "tls-ring"))]
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod tls_client;
    #[allow(
        unused_imports,
        unused_macros,
        reason = "TCP and TLS only (`over_tcp_and_tls!`): a browser reaches no Unix socket"
    )]
    pub(crate) mod transport;
    pub(crate) mod unix;
    pub(crate) mod wait;
    pub(crate) mod ws;
}

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use common::child_client::ChildClient;
use common::temp_dir::TempDir;
use common::transport::Transport;
use common::wait::wait;
use common::ws::{Room, SMALL, echo, next_event};

/// Stamps out, for each generic behaviour `fn name<T: Transport>()`, a
/// test over TCP (`tcp::name`) and one over TLS (`tls::name`, when a
/// crypto provider is built in): the transports a browser reaches.
macro_rules! over_tcp_and_tls {
    ($($name:ident),* $(,)?) => {
        mod tcp {
            $(#[test]
            fn $name() {
                super::$name::<crate::common::transport::Tcp>();
            })*
        }

        #[cfg(any(feature = "tls", feature = "tls-ring"))]
        mod tls {
            $(#[test]
            fn $name() {
                super::$name::<crate::common::transport::Tls>();
            })*
        }
    };
}

over_tcp_and_tls!(
    messages_of_every_size_across_sleeps,
    pings_from_the_lot_are_answered_by_the_browser,
    the_browser_closes_with_a_code,
    the_server_closes_when_asked,
    a_message_over_the_limit_is_refused_with_1009,
    a_killed_browser_ends_its_socket,
    shutdown_closes_a_sleeping_socket_with_1001,
);

/// The URL of a WebSocket server at this address, without its path.
trait WsUrl {
    fn ws_url(&self) -> String;
}

impl WsUrl for SocketAddr {
    fn ws_url(&self) -> String {
        format!("ws://{self}")
    }
}

#[cfg(any(feature = "tls", feature = "tls-ring"))]
impl WsUrl for common::transport::tls::TlsAddr {
    /// `localhost`: the name the server's certificate is for.
    fn ws_url(&self) -> String {
        format!("wss://localhost:{}", self.addr.port())
    }
}

/// Headless Chromium with a page whose one `WebSocket` the test steers,
/// through Node (`tests/node/chromium_ws.mjs`), and its profile directory.
struct Browser {
    client: ChildClient,
    /// Dropped after the client (fields drop in order).
    _profile: TempDir,
}

impl Browser {
    /// Starts the browser on `about:blank`, its WebSockets for the server
    /// at `addr`.
    fn start(addr: &impl WsUrl) -> Browser {
        let node = find("NODE", "node", "Node.js 18 or newer");
        // devtools.mjs runs `$CHROMIUM`, else `chromium`: there must be one.
        find("CHROMIUM", "chromium", "Chromium");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("node/chromium_ws.mjs");
        let profile = TempDir::new();
        let args: Vec<OsString> = vec![
            script.into(),
            addr.ws_url().into(),
            profile.path.join("profile").into(),
        ];
        Browser {
            client: ChildClient::start("Chromium (through Node)", &node, &args),
            _profile: profile,
        }
    }

    /// Sends `command` and waits (bounded) for `answer`.
    fn command(&mut self, command: &str, answer: &str) {
        self.client.command(command, answer);
    }

    /// Opens the page's WebSocket on `path`.
    fn open(&mut self, path: &str) {
        self.command(&format!("open {path}"), "open");
    }

    /// Closes the browser, which must exit 0.
    fn finish(self) {
        self.client.finish();
    }
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
            "these tests drive headless Chromium through Node, and no `{command}` was found \
             on PATH: install {what}, or set {var} to it"
        )
    })
}

/// The sizes of the echoed messages, in bytes.
const SIZES: [usize; 8] = [0, 1, 125, 126, 65535, 65536, 1 << 20, 16 << 20];

/// Text (UTF-8 with two-byte characters) and binary messages from empty to
/// 16 MiB, each sent to a socket asleep since the last, each back whole
/// (the page compares every byte).
fn messages_of_every_size_across_sleeps<T: Transport>()
where
    T::Addr: WsUrl,
{
    let (room, _events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut browser = Browser::start(&srv.addr);
    browser.open("/");
    for len in SIZES {
        room.wait_asleep(1);
        browser.command(&format!("text {len}"), &format!("text {len} ok"));
        room.wait_asleep(1);
        browser.command(&format!("binary {len}"), &format!("binary {len} ok"));
    }
    assert!(!room.sender(0).is_closed());
    browser.finish();
}

/// `/ping`: the lot pings the sleeping socket (every 20 ms, give or take
/// the lot's slack); the browser, reading, answers each with a pong by
/// itself. Once it has answered three (its net log shows them) the socket
/// is open on both sides, and still echoes.
fn pings_from_the_lot_are_answered_by_the_browser<T: Transport>()
where
    T::Addr: WsUrl,
{
    let (room, _events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut browser = Browser::start(&srv.addr);
    browser.open("/ping");
    room.wait_asleep(1);
    browser.command("pings 3", "pings 3 answered");
    assert!(!room.sender(0).is_closed(), "the server closed the socket");
    browser.command("read 200", "read open");
    browser.command("text 1000", "text 1000 ok");
    browser.command("binary 1000", "binary 1000 ok");
    assert!(!room.sender(0).is_closed());
    browser.finish();
}

/// `ws.close(4000, "bye")` on a sleeping socket: the server answers with
/// 4000 (the page's close event has it, clean), and the handler's last
/// message has the code and reason.
fn the_browser_closes_with_a_code<T: Transport>()
where
    T::Addr: WsUrl,
{
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut browser = Browser::start(&srv.addr);
    browser.open("/");
    room.wait_asleep(1);
    browser.command("close 4000 bye", r#"closed 4000 "" clean"#);
    assert_eq!(next_event(&events), "closed 4000 bye");
    assert!(room.sender(0).is_closed());
    browser.finish();
}

/// The text `close 4002` has the handler close the socket: the page's
/// close event has the code and the reason, clean.
fn the_server_closes_when_asked<T: Transport>()
where
    T::Addr: WsUrl,
{
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut browser = Browser::start(&srv.addr);
    browser.open("/");
    room.wait_asleep(1);
    browser.command("send close 4002", "sent");
    browser.command("wait-close", r#"closed 4002 "asked to" clean"#);
    // The browser's answer echoes the code (and the reason).
    assert_eq!(next_event(&events), "closed 4002 asked to");
    assert!(room.sender(0).is_closed());
    browser.finish();
}

/// A 2 MiB binary message on `/small` (at most 1 MiB), ten times: the page
/// sees the server's 1009 and a clean close every time, the handler hears
/// the browser's answer (it echoes the code), the sender is closed.
/// Chromium sends the message in frames of 131,000 B (or, compressed, in
/// one small frame) and the server refuses it at the header of the frame
/// that takes it past 1 MiB (or as it inflates): the server skips the rest
/// of the message without keeping it, sends its close frame once the
/// message is over, reads the browser's, and only then closes. Chromium
/// calls a close unclean when the server's close frame comes while the page
/// still hands it the message (its `bufferedAmount` is not zero): when the
/// server answered at once, a release build saw that in every run. Before
/// the server read after its close frame at all, the kernel reset the
/// connection on the unread rest, and the browser saw 1006.
fn a_message_over_the_limit_is_refused_with_1009<T: Transport>()
where
    T::Addr: WsUrl,
{
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut browser = Browser::start(&srv.addr);
    for round in 1..=10 {
        browser.open("/small");
        room.wait_asleep(1);
        browser.command(&format!("send-binary {}", 2 * SMALL), "sent");
        browser.command("wait-close", r#"closed 1009 "message too big" clean"#);
        assert_eq!(
            next_event(&events),
            "closed 1009 message too big",
            "round {round}"
        );
        assert!(room.sender(0).is_closed(), "round {round}");
        room.senders.lock().unwrap().clear();
    }
    browser.finish();
}

/// The browser is killed (SIGKILL) while its socket sleeps: no close
/// frame, the connection just ends; the socket ends, its handler hears of
/// it, its sender is closed.
fn a_killed_browser_ends_its_socket<T: Transport>()
where
    T::Addr: WsUrl,
{
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut browser = Browser::start(&srv.addr);
    browser.open("/");
    room.wait_asleep(1);
    browser.command("kill", "killed");
    assert_eq!(next_event(&events), "closed");
    assert!(room.sender(0).is_closed());
    // Node is killed with the test's `Browser` (its browser is gone).
}

/// The test of `permessage-deflate`, which Chromium offers.
#[cfg(feature = "ws-deflate")]
mod compression {
    use super::*;

    over_tcp_and_tls!(compressed_messages_across_sleeps);

    /// The sizes of the compressible texts echoed, in bytes.
    const SIZES: [usize; 4] = [200, 10_000, 1_000_000, 200];

    /// The browser takes the server's answer (no context takeover either
    /// way); compressible texts (a JSON-like line repeated) from 200 B to
    /// 1 MB, each sent compressed (RSV1, as the net log shows) to a socket
    /// asleep since the last, come back whole, each in compressed frames
    /// of fewer than a quarter of its bytes: the server inflated the
    /// browser's message and compressed its echo.
    fn compressed_messages_across_sleeps<T: Transport>()
    where
        T::Addr: WsUrl,
    {
        let (room, _events) = Room::new();
        let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
        let mut browser = Browser::start(&srv.addr);
        browser.open("/");
        browser.command(
            "extensions",
            "extensions permessage-deflate; server_no_context_takeover; client_no_context_takeover",
        );
        for len in SIZES {
            room.wait_asleep(1);
            browser.command(
                &format!("echo-compressed {len}"),
                &format!("echo {len} compressed"),
            );
        }
        assert!(!room.sender(0).is_closed());
        browser.finish();
    }
}

/// Graceful shutdown with the socket asleep: the page's close event has
/// 1001 (clean: the browser answered), and the handler the browser's
/// answer.
fn shutdown_closes_a_sleeping_socket_with_1001<T: Transport>()
where
    T::Addr: WsUrl,
{
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut browser = Browser::start(&srv.addr);
    browser.open("/");
    room.wait_asleep(1);
    srv.handle.graceful_shutdown(None);
    browser.command(
        "wait-close",
        r#"closed 1001 "the server is shutting down" clean"#,
    );
    assert_eq!(
        next_event(&events),
        "closed 1001 the server is shutting down"
    );
    wait("the socket closed", || room.sender(0).is_closed());
    browser.finish();
}
