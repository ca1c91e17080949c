//! `dormant::ws` against Python's `websockets` (17.4, its asyncio client:
//! `websockets.asyncio.client.connect` and `unix_connect`), a WebSocket
//! client written independently of the library, over every transport (TCP,
//! a Unix socket, TLS trusting the server's certificate). The client,
//! `tests/python/ws_client.py`, runs in a child process and does one
//! command at a time ([`ChildClient`]), so that the socket sleeps in the
//! lot between them: messages from empty to 16 MiB, a fragmented message
//! whose fragments arrive across sleeps, the client's pings and the
//! lot's, close handshakes from either side, the refusals of invalid UTF-8
//! (1007) and of a message over the limit (1009), a client killed while
//! its socket sleeps, and graceful shutdown (1001). Each test serves
//! `common::ws::echo` and checks the client's answers (exact lines) and
//! the handler's events.
//!
//! websockets offers `permessage-deflate` by default
//! (`client_max_window_bits`), so with the feature `ws-deflate` every test
//! here runs compressed; the tests of `mod compression` show that it is:
//! the server's answer is the one it always gives (no context takeover
//! either way), compressible texts of 200 B to 1 MB come back whole to a
//! socket that slept before each, on fewer than a quarter of their bytes
//! (the client counts what it received), and a decompression bomb (8 MiB
//! of zeros, about 8 KB on the wire, as the client checks) is refused with
//! 1009 on `/small`, as it inflates past 1 MiB. Without `ws-deflate` the
//! server declines the offer, and messages go uncompressed (`mod
//! declined`).
//!
//! Needs `python3` (3.11 or newer) with websockets on `PATH` (or `PYTHON`
//! set to it): `python3 -m pip install 'websockets==17.4'`.
#![cfg(feature = "ws")]

mod common {
    #[allow(dead_code, reason = "the HTTP/2 clients' rounds are not played here")]
    pub(crate) mod child_client;
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod client;
    #[allow(dead_code, reason = "the HTTP/2 clients' rounds are not played here")]
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
    pub(crate) mod transport;
    pub(crate) mod unix;
    pub(crate) mod wait;
    pub(crate) mod ws;
}

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::child_client::ChildClient;
use common::servers::Serve;
use common::transport::{Transport, over_every_transport};
use common::wait::wait;
use common::ws::{Room, SMALL, echo, next_event};

over_every_transport!(
    messages_of_every_size_across_sleeps,
    fragments_arrive_across_sleeps,
    client_pings_to_a_sleeping_socket_are_answered,
    the_client_answers_the_pings_of_the_lot,
    client_closes_with_a_code,
    server_closes_when_asked,
    invalid_utf8_is_refused_with_1007,
    a_message_over_the_limit_is_refused_with_1009,
    a_killed_client_ends_its_socket,
    shutdown_closes_the_client_with_1001,
);

/// The echo server for `room`, with the client connected to `path` (its
/// socket not yet asleep).
fn connected<T: Transport>(room: &Room, path: &str) -> (Serve<T::Addr>, ChildClient)
where
    T::Addr: Dial,
{
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/ws_client.py");
    let mut args = vec![script.into_os_string()];
    args.extend(srv.addr.args());
    let mut client = ChildClient::start("the websockets client", python(), &args);
    client.command(&format!("connect {path}"), "connected");
    (srv, client)
}

/// Text and binary messages from empty to 16 MiB, each sent to a socket
/// that slept since the last; the client checks every byte of the echo.
fn messages_of_every_size_across_sleeps<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, _events) = Room::new();
    let (_srv, mut client) = connected::<T>(&room, "/");
    for len in [0, 1, 125, 126, 65535, 65536, 1 << 20, 16 << 20] {
        for kind in ["text", "binary"] {
            room.wait_asleep(1);
            client.command(
                &format!("echo {kind} {len}"),
                &format!("echo {kind} {len} ok"),
            );
        }
    }
    client.finish();
}

/// A text message sent in three fragments (and websockets' last frame,
/// empty, with FIN), the socket asleep before each: the echo is the whole
/// message. After each fragment the client pings, between the message's
/// frames: the pong says the server read the fragment (the socket woke for
/// it, and keeps what came of the message as it sleeps again).
fn fragments_arrive_across_sleeps<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, _events) = Room::new();
    let (_srv, mut client) = connected::<T>(&room, "/");
    for (i, fragment) in ["hello ", "big ", "wörld"].into_iter().enumerate() {
        room.wait_asleep(1);
        client.command(&format!("fragment {fragment}"), "fragment sent");
        client.command(&format!("ping after-{i}"), &format!("pong after-{i}"));
    }
    room.wait_asleep(1);
    client.command("fragments end", "echo hello big wörld");
    room.wait_asleep(1);
    client.command("echo text 10", "echo text 10 ok");
    client.finish();
}

/// The client pings a sleeping socket: the pong comes back with the
/// payload, the socket sleeps again, and messages still come back.
fn client_pings_to_a_sleeping_socket_are_answered<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, _events) = Room::new();
    let (_srv, mut client) = connected::<T>(&room, "/");
    for i in 0..3 {
        room.wait_asleep(1);
        client.command(&format!("ping payload-{i}"), &format!("pong payload-{i}"));
    }
    room.wait_asleep(1);
    client.command("echo text 125", "echo text 125 ok");
    client.finish();
}

/// On `/ping` the lot pings the sleeping socket every 20 ms, and pings
/// again only once the last was answered: a client that saw three more
/// pings answered the two before. Its socket is still open and echoes.
fn the_client_answers_the_pings_of_the_lot<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, _events) = Room::new();
    let (_srv, mut client) = connected::<T>(&room, "/ping");
    room.wait_asleep(1);
    client.command("pings 3", "saw 3 pings");
    assert!(!room.sender(0).is_closed(), "the socket was closed");
    client.command("echo binary 300", "echo binary 300 ok");
    client.command("pings 3", "saw 3 pings");
    assert!(!room.sender(0).is_closed(), "the socket was closed");
    client.finish();
}

/// The client closes a sleeping socket with 4000 "bye": the server answers
/// with 4000, and the handler's last message has the code and reason.
fn client_closes_with_a_code<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (_srv, mut client) = connected::<T>(&room, "/");
    room.wait_asleep(1);
    client.command("close 4000 bye", "closed 4000");
    assert_eq!(next_event(&events), "closed 4000 bye");
    wait("the socket closed", || room.sender(0).is_closed());
    client.finish();
}

/// The client asks the handler to close (`close 4002`): it gets the code
/// and reason, and answers them.
fn server_closes_when_asked<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (_srv, mut client) = connected::<T>(&room, "/");
    room.wait_asleep(1);
    client.command("send-text close 4002", "sent");
    client.command("recv", "closed 4002 asked to");
    assert_eq!(next_event(&events), "closed 4002 asked to");
    wait("the socket closed", || room.sender(0).is_closed());
    client.finish();
}

/// A text message that is not UTF-8 (the bytes ff fe, which websockets
/// sends as text when told to): 1007.
fn invalid_utf8_is_refused_with_1007<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (_srv, mut client) = connected::<T>(&room, "/");
    room.wait_asleep(1);
    client.command("send-invalid-utf8", "sent");
    client.command("recv", "closed 1007 text that is not UTF-8");
    // The handler hears the client's answer, which echoes the code.
    assert_eq!(next_event(&events), "closed 1007 text that is not UTF-8");
    wait("the socket closed", || room.sender(0).is_closed());
    client.finish();
}

/// A 2 MiB binary message on `/small` (1 MiB at most): 1009, refused on
/// its header, while the client is still sending its payload.
fn a_message_over_the_limit_is_refused_with_1009<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (_srv, mut client) = connected::<T>(&room, "/small");
    room.wait_asleep(1);
    client.command(&format!("send-binary {}", 2 * SMALL), "sent");
    client.command("recv", "closed 1009 message too big");
    // The handler hears the client's answer, which echoes the code.
    assert_eq!(next_event(&events), "closed 1009 message too big");
    wait("the socket closed", || room.sender(0).is_closed());
    client.finish();
}

/// The client process is killed while its socket sleeps: the socket ends
/// (no close frame), its handler hears of it, its sender is closed.
fn a_killed_client_ends_its_socket<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (_srv, mut client) = connected::<T>(&room, "/");
    room.wait_asleep(1);
    client.command("echo text 3", "echo text 3 ok");
    room.wait_asleep(1);
    // Dropped while running: killed.
    drop(client);
    assert_eq!(next_event(&events), "closed");
    assert!(room.sender(0).is_closed());
}

/// Graceful shutdown with the client's socket asleep: the client gets 1001
/// and the reason, and answers it.
fn shutdown_closes_the_client_with_1001<T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (srv, mut client) = connected::<T>(&room, "/");
    room.wait_asleep(1);
    srv.handle.graceful_shutdown(None);
    client.command("recv", "closed 1001 the server is shutting down");
    assert_eq!(
        next_event(&events),
        "closed 1001 the server is shutting down"
    );
    client.finish();
}

/// The tests of `permessage-deflate`, which websockets offers by default.
#[cfg(feature = "ws-deflate")]
mod compression {
    use super::*;

    over_every_transport!(
        compressed_messages_across_sleeps,
        a_decompression_bomb_is_refused_with_1009,
    );

    /// The server's answer to websockets' offer.
    const ANSWER: &str =
        "extensions permessage-deflate; server_no_context_takeover; client_no_context_takeover";

    /// The sizes of the compressible texts echoed, in bytes.
    const SIZES: [usize; 4] = [200, 10_000, 1_000_000, 200];

    /// The server accepts websockets' offer with no context takeover
    /// either way; compressible texts (a JSON-like line repeated) from
    /// 200 B to 1 MB, each sent compressed to a socket asleep since the
    /// last, come back whole, each on fewer than a quarter of its bytes:
    /// the server inflated the client's message and compressed its echo.
    fn compressed_messages_across_sleeps<T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, _events) = Room::new();
        let (_srv, mut client) = connected::<T>(&room, "/");
        client.command("extensions", ANSWER);
        for len in SIZES {
            room.wait_asleep(1);
            client.command(
                &format!("echo-compressed {len}"),
                &format!("echo {len} compressed"),
            );
        }
        client.finish();
    }

    /// 8 MiB of zeros in one binary message on `/small` (1 MiB at most),
    /// which websockets compresses to about 8 KB (the client checks that
    /// it wrote fewer than a quarter of them): under the limit on the
    /// wire, the message is refused with 1009 as it inflates past it, a
    /// few KB into its frame.
    fn a_decompression_bomb_is_refused_with_1009<T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, events) = Room::new();
        let (_srv, mut client) = connected::<T>(&room, "/small");
        client.command("extensions", ANSWER);
        room.wait_asleep(1);
        client.command(&format!("send-zeros {}", 8 * SMALL), "sent");
        client.command("recv", "closed 1009 message too big");
        // The server skips the rest of the message, then closes; the
        // handler hears the client's answer, which echoes the code.
        assert_eq!(next_event(&events), "closed 1009 message too big");
        wait("the socket closed", || room.sender(0).is_closed());
        client.finish();
    }
}

/// Without `ws-deflate`: websockets' offer is declined.
#[cfg(not(feature = "ws-deflate"))]
mod declined {
    use super::*;

    over_every_transport!(compression_is_declined);

    /// The server answers no extension, and messages go uncompressed.
    fn compression_is_declined<T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, _events) = Room::new();
        let (_srv, mut client) = connected::<T>(&room, "/");
        client.command("extensions", "extensions none");
        room.wait_asleep(1);
        client.command("echo text 1000", "echo text 1000 ok");
        room.wait_asleep(1);
        client.command("echo binary 100000", "echo binary 100000 ok");
        client.finish();
    }
}

/// `$PYTHON`, else `python3` on `PATH`, checked once to have websockets'
/// asyncio client; fails saying what to install otherwise.
fn python() -> &'static Path {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match FOUND.get_or_init(find_python) {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}

fn find_python() -> Result<PathBuf, String> {
    const INSTALL: &str = "python3 -m pip install 'websockets==17.4'";
    let python = match std::env::var_os("PYTHON") {
        Some(path) => Some(PathBuf::from(path)),
        None => std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|dir| dir.join("python3"))
            .find(|path| path.is_file()),
    };
    let Some(python) = python.filter(|path| path.is_file()) else {
        return Err(format!(
            "these tests run Python's websockets client, and no `python3` was found on \
             PATH: install Python 3.11 or newer and websockets (`{INSTALL}`), or set PYTHON \
             to it"
        ));
    };
    let check = Command::new(&python)
        .args([
            "-c",
            "import websockets.asyncio.client, asyncio; asyncio.timeout",
        ])
        .output()
        .map_err(|e| format!("could not run {}: {e}", python.display()))?;
    if !check.status.success() {
        return Err(format!(
            "these tests run Python's websockets client, and {} has none (or is older than \
             3.11): install it with `{INSTALL}` (or set PYTHON to a Python that has it); \
             its error:\n{}",
            python.display(),
            String::from_utf8_lossy(&check.stderr)
        ));
    }
    Ok(python)
}

/// The client's arguments that reach a server at this address.
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
    /// TLS trusting the server's certificate, made for `localhost`.
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
