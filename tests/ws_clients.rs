//! `dormant::ws` against WebSocket clients written independently of the
//! library, each a command client in a child process (`common::child`)
//! that speaks the tests' one command language (see the programs'
//! headers), so that each behaviour below is written once and run with
//! every client that can do it:
//!
//! - Go's `github.com/coder/websocket` v1.8.15 (`tests/go/wsclient`, built
//!   once per test process), over TCP, a Unix socket (its own
//!   `DialContext`) and TLS (a `tls.Config` trusting the server's
//!   certificate). Its `Writer` keeps a frame that is not the message's
//!   last in its 4 KiB buffer until a final frame flushes it, so the client
//!   pushes each fragment out with a ping and checks that the ping, not
//!   `Write`, wrote the fragment's frame; it reads in a goroutine of its
//!   own, and pings at `connect` and before `close` so that the reader, not
//!   `Close`, reads the server's close frame. It offers `permessage-deflate`
//!   only when told to (`-compression`).
//! - Python's `websockets` 17.4, its asyncio client (`tests/python/
//!   ws_client.py`), over the same three; it offers `permessage-deflate`
//!   (`client_max_window_bits`) by default.
//! - Headless Chromium's own `WebSocket` (Chromium 156 when written; its
//!   network service's implementation, with BoringSSL for `wss:`), in a
//!   page that Node drives over the DevTools protocol
//!   (`tests/node/chromium_ws.mjs`), over TCP and TLS (`wss://localhost`,
//!   with `--ignore-certificate-errors`): a browser's `WebSocket` reaches
//!   no Unix socket. It offers `permessage-deflate` by default; it answers
//!   pings by itself, unseen by the page (the script counts them in the
//!   browser's net log), and cannot send fragments, pings or text that is
//!   not UTF-8 (tests/ws_sleep.rs does that with raw frames).
//!
//! Every client gets back messages of 0 B to 16 MiB that it sent to a
//! socket asleep in the lot since the last (checked byte for byte by the
//! client), answers the lot's pings and stays open, has its own close
//! answered, sees the server's closes (4002 with a reason, 1009 for a
//! message over the limit, 1001 at graceful shutdown), and ends its socket
//! when it vanishes while the socket sleeps (its handler hears of it, its
//! sender is closed). Go's and Python's also send a fragmented message
//! whose frames arrive across sleeps, ping a sleeping socket, and get 1007
//! for text that is not UTF-8 (`mod frames`).
//!
//! With the feature `ws-deflate`, `mod compression` shows each client's
//! `permessage-deflate` against the server's: the server's answer (no
//! context takeover either way, which every client takes), compressible
//! texts of 200 B to 1 MB back whole to a socket that slept before each,
//! each on fewer than a quarter of its bytes (the clients count what they
//! read, Chromium in its net log), and a decompression bomb (8 MiB of
//! zeros, about 10 KB on the wire) refused with 1009 on `/small` as it
//! inflates past 1 MiB. Without `ws-deflate`, the offer is declined
//! (`mod declined`).
//!
//! Needs Go 1.26+, `python3` (3.11 or newer) with websockets
//! (`python3 -m pip install 'websockets==17.4'`), `node` and `chromium` on
//! `PATH` (or `GO`, `PYTHON`, `NODE`, `CHROMIUM` set to them); a test
//! fails saying what to install when one is missing.

use std::ffi::OsString;
use std::path::Path;

use crate::common::child::{Child, Dial, STEP_TIMEOUT, python};
use crate::common::servers::Serve;
use crate::common::temp_dir::TempDir;
use crate::common::transport::Transport;
use crate::common::wait::wait;
use crate::common::ws::{Room, SMALL, echo, next_event};

/// What a client offers of `permessage-deflate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Offer {
    /// What it offers by itself: Go nothing, Python and Chromium plain
    /// `permessage-deflate` (context takeover, `client_max_window_bits`).
    Own,
    /// `permessage-deflate` with context takeover.
    Deflate,
    /// `permessage-deflate` without context takeover either way (Go's
    /// alone can be told so).
    DeflateWithoutContext,
}

/// A WebSocket client program that speaks the tests' command language.
trait WsClient {
    /// Starts it for the server at `addr`, offering `offer`; not yet
    /// connected.
    fn start(addr: &impl Dial, offer: Offer) -> Child;

    /// Whether it opens another connection after the server closed one
    /// (Go's and Python's open one each).
    const RECONNECTS: bool = false;

    /// Has it vanish while its socket sleeps: no close frame, the
    /// connection just ends.
    fn vanish(client: Child) {
        // Dropping a running client kills it.
        drop(client);
    }
}

/// Go's coder/websocket client (`tests/go/wsclient`).
struct Go;

impl WsClient for Go {
    fn start(addr: &impl Dial, offer: Offer) -> Child {
        let client = crate::common::go::program(
            "wsclient",
            "Go's coder/websocket client (tests/go/wsclient)",
        );
        let mut args = addr.dial();
        let timeout = format!("{}s", STEP_TIMEOUT.as_secs() / 2);
        args.extend(["-timeout".into(), timeout.into()]);
        let compression = match offer {
            Offer::Own => "off",
            Offer::Deflate => "context",
            Offer::DeflateWithoutContext => "no-context",
        };
        args.extend(["-compression".into(), compression.into()]);
        Child::start("the Go client", client, args)
    }
}

/// Python's websockets client (`tests/python/ws_client.py`).
struct Python;

impl WsClient for Python {
    fn start(addr: &impl Dial, offer: Offer) -> Child {
        assert_ne!(
            offer,
            Offer::DeflateWithoutContext,
            "websockets offers its own"
        );
        let python = python(
            "import websockets.asyncio.client, asyncio; asyncio.timeout",
            "'websockets==17.4'",
        );
        let mut args = vec![script("python/ws_client.py")];
        args.extend(addr.dial());
        Child::start("the websockets client", python, args)
    }
}

/// Headless Chromium's `WebSocket` in a page, through Node
/// (`tests/node/chromium_ws.mjs`), with a profile of its own; Node and the
/// browser are killed together if the test fails.
struct Chromium;

impl WsClient for Chromium {
    const RECONNECTS: bool = true;

    fn start(addr: &impl Dial, offer: Offer) -> Child {
        assert_ne!(
            offer,
            Offer::DeflateWithoutContext,
            "Chromium offers its own"
        );
        let profile = TempDir::new();
        let mut args = addr.dial();
        args.extend(["--profile".into(), profile.path.join("profile").into()]);
        Child::chromium("chromium_ws.mjs", args).keeping(profile)
    }

    /// SIGKILLs the browser's processes, its network service first (the
    /// browser itself would send 1001 for the sockets of a page that goes);
    /// Node goes with the `Child`.
    fn vanish(mut client: Child) {
        client.command("kill", "killed");
    }
}

/// The path of `script` under `tests/`.
fn script(script: &str) -> OsString {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(script).into()
}

/// The echo server for `room` on `T`, and client `C` connected to `path`
/// on it (its socket not yet asleep), offering `offer`.
fn connected<C: WsClient, T: Transport>(
    room: &Room,
    path: &str,
    offer: Offer,
) -> (Serve<T::Addr>, Child)
where
    T::Addr: Dial,
{
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut client = C::start(&srv.addr, offer);
    client.command(&format!("connect {path}"), "connected");
    (srv, client)
}

/// Waits (bounded) until the room's one socket is closed.
fn wait_closed(room: &Room) {
    wait("the socket closed", || room.sender(0).is_closed());
}

/// Stamps out, for each client `module: Type` and each transport it is
/// listed with (`tcp`, `unix`, `tls`; the last when a crypto provider is
/// built in), a test per behaviour `fn name<C: WsClient, T: Transport>()`
/// of the module that calls it: `module::transport::name`.
macro_rules! with_clients {
    ($([$module:ident: $client:ident over $($transport:ident)+]),+ => $names:tt) => {
        $(mod $module {
            $(with_clients!(@over $client $transport $names);)+
        })+
    };
    (@over $client:ident tcp $names:tt) => {
        with_clients!(@mod $client tcp Tcp $names);
    };
    (@over $client:ident unix $names:tt) => {
        with_clients!(@mod $client unix Unix $names);
    };
    (@over $client:ident tls $names:tt) => {
        #[cfg(any(feature = "tls", feature = "tls-ring"))]
        with_clients!(@mod $client tls Tls $names);
    };
    (@mod $client:ident $module:ident $transport:ident [$($name:ident),* $(,)?]) => {
        mod $module {
            $(#[test]
            fn $name() {
                super::super::$name::<super::super::$client, crate::common::transport::$transport>();
            })*
        }
    };
}

with_clients!(
    [go: Go over tcp unix tls],
    [python: Python over tcp unix tls],
    [chromium: Chromium over tcp tls]
    => [
        messages_of_every_size_across_sleeps,
        the_client_answers_the_pings_of_the_lot,
        the_client_closes_with_a_code,
        the_server_closes_when_asked,
        a_message_over_the_limit_is_refused_with_1009,
        a_vanished_client_ends_its_socket,
        shutdown_closes_a_sleeping_socket_with_1001,
    ]
);

/// Text (UTF-8 with two-byte characters) and binary messages from empty to
/// 16 MiB, each sent to a socket that slept since the last; the client
/// checks every byte of the echo.
fn messages_of_every_size_across_sleeps<C: WsClient, T: Transport>()
where
    T::Addr: Dial,
{
    // Declared after the events' receiver, the server is dropped first:
    // its sockets' last events (at its shutdown) still find the receiver.
    let (room, _events) = Room::new();
    let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::Own);
    for len in [0, 1, 125, 126, 65535, 65536, 1 << 20, 16 << 20] {
        for kind in ["text", "binary"] {
            room.wait_asleep(1);
            client.command(&format!("{kind} {len}"), &format!("{kind} {len} echoed"));
        }
    }
    assert!(!room.sender(0).is_closed());
    client.finish();
}

/// On `/ping` the lot pings the sleeping socket every 20 ms, and pings
/// again only once the last was answered; the client, reading, answers
/// each by itself. After three the socket is open on both sides and still
/// echoes, and the pings go on after the echo.
fn the_client_answers_the_pings_of_the_lot<C: WsClient, T: Transport>()
where
    T::Addr: Dial,
{
    let (room, _events) = Room::new();
    let (_srv, mut client) = connected::<C, T>(&room, "/ping", Offer::Own);
    room.wait_asleep(1);
    client.command("pings 3", "pinged 3 times");
    assert!(!room.sender(0).is_closed(), "the server closed the socket");
    room.wait_asleep(1);
    client.command("binary 1000", "binary 1000 echoed");
    client.command("text 1000", "text 1000 echoed");
    client.command("pings 6", "pinged 6 times");
    assert!(!room.sender(0).is_closed(), "the server closed the socket");
    client.finish();
}

/// The client closes a sleeping socket with 4000 "bye": the server answers
/// with 4000 (and no reason), and the handler's last message has the code
/// and reason.
fn the_client_closes_with_a_code<C: WsClient, T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::Own);
    room.wait_asleep(1);
    client.command("close 4000 bye", r#"closed 4000 """#);
    assert_eq!(next_event(&events), "closed 4000 bye");
    wait_closed(&room);
    client.finish();
}

/// The text `close 4002` has the handler close the socket: the client gets
/// the code and the reason (cleanly, for a browser), and its answer echoes
/// both to the handler.
fn the_server_closes_when_asked<C: WsClient, T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::Own);
    room.wait_asleep(1);
    client.command("send close 4002", "sent");
    client.command("wait-close", r#"closed 4002 "asked to""#);
    assert_eq!(next_event(&events), "closed 4002 asked to");
    wait_closed(&room);
    client.finish();
}

/// A 2 MiB binary message on `/small` (1 MiB at most), on a new connection
/// each round while the client can open another (Chromium: ten rounds):
/// the client sees the server's 1009 (cleanly), the handler hears the
/// client's answer (it echoes the code), the sender is closed.
///
/// The server refuses the message at the header of the frame that takes
/// it past 1 MiB (or, compressed, as it inflates past it) while the client
/// may still be sending; it skips the rest of the message without keeping
/// it, sends its close frame once the message is over, reads the client's,
/// and only then closes. A client that cannot write the message whole
/// (Go's, when the server lets the connection go) counts it as sent.
/// Chromium calls a close unclean when the server's close frame comes
/// while the page still hands it the message (its `bufferedAmount` is not
/// zero): when the server answered at once, a release build saw that in
/// every run. Before the server read after its close frame at all, the
/// kernel reset the connection on the unread rest, and the browser saw
/// 1006.
fn a_message_over_the_limit_is_refused_with_1009<C: WsClient, T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut client = C::start(&srv.addr, Offer::Own);
    let rounds = if C::RECONNECTS { 10 } else { 1 };
    for round in 1..=rounds {
        client.command("connect /small", "connected");
        room.wait_asleep(1);
        client.command(&format!("send-binary {}", 2 * SMALL), "sent");
        client.command("wait-close", r#"closed 1009 "message too big""#);
        assert_eq!(
            next_event(&events),
            "closed 1009 message too big",
            "round {round}"
        );
        wait_closed(&room);
        room.senders.lock().unwrap().clear();
    }
    client.finish();
}

/// The client vanishes while its socket sleeps (its process killed): the
/// socket ends, its handler hears of it, its sender is closed.
fn a_vanished_client_ends_its_socket<C: WsClient, T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::Own);
    room.wait_asleep(1);
    client.command("text 3", "text 3 echoed");
    room.wait_asleep(1);
    C::vanish(client);
    assert_eq!(next_event(&events), "closed");
    assert!(room.sender(0).is_closed());
}

/// Graceful shutdown with the client's socket asleep: the client gets
/// 1001 and the reason (cleanly, for a browser), and its answer reaches
/// the handler; `serve` returns.
fn shutdown_closes_a_sleeping_socket_with_1001<C: WsClient, T: Transport>()
where
    T::Addr: Dial,
{
    let (room, events) = Room::new();
    let (mut srv, mut client) = connected::<C, T>(&room, "/", Offer::Own);
    room.wait_asleep(1);
    srv.handle.graceful_shutdown(None);
    client.command("wait-close", r#"closed 1001 "the server is shutting down""#);
    assert_eq!(
        next_event(&events),
        "closed 1001 the server is shutting down"
    );
    wait_closed(&room);
    client.finish();
    srv.wait_stopped();
}

/// What a page cannot do: fragments, pings of the client's own, text that
/// is not UTF-8.
mod frames {
    use super::*;

    with_clients!(
        [go: Go over tcp unix tls],
        [python: Python over tcp unix tls]
        => [
            fragments_arrive_across_sleeps,
            the_clients_pings_to_a_sleeping_socket_are_answered,
            invalid_utf8_is_refused_with_1007,
        ]
    );

    /// A text message in three fragments and an empty final frame, the
    /// socket asleep before each; after each fragment the client pings,
    /// between the message's frames: the pong says the server read the
    /// fragment (the socket woke for it, and keeps what came of the message
    /// as it sleeps again). The echo is the whole message.
    fn fragments_arrive_across_sleeps<C: WsClient, T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, _events) = Room::new();
        let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::Own);
        for fragment in ["hé", "llo wö", "rld, at last"] {
            room.wait_asleep(1);
            client.command(&format!("fragment {fragment}"), "fragment sent");
            client.command("ping", "pong");
        }
        room.wait_asleep(1);
        client.command("end", "echoed héllo wörld, at last");
        room.wait_asleep(1);
        client.command("text 10", "text 10 echoed");
        client.finish();
    }

    /// The client's pings to a sleeping socket get their pongs (each with
    /// its payload, as the client checks); the socket sleeps again after
    /// each, and messages still come back.
    fn the_clients_pings_to_a_sleeping_socket_are_answered<C: WsClient, T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, _events) = Room::new();
        let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::Own);
        for _ in 0..3 {
            room.wait_asleep(1);
            client.command("ping", "pong");
        }
        room.wait_asleep(1);
        client.command("text 125", "text 125 echoed");
        client.finish();
    }

    /// A text message that is not UTF-8 (the bytes ff fe; the clients do
    /// not check what they are told to send): 1007.
    fn invalid_utf8_is_refused_with_1007<C: WsClient, T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, events) = Room::new();
        let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::Own);
        room.wait_asleep(1);
        client.command("send-invalid", "sent");
        client.command("wait-close", r#"closed 1007 "text that is not UTF-8""#);
        // The handler hears the client's answer, which echoes the code.
        assert_eq!(next_event(&events), "closed 1007 text that is not UTF-8");
        wait_closed(&room);
        client.finish();
    }
}

/// The tests of `permessage-deflate`.
#[cfg(feature = "ws-deflate")]
mod compression {
    use super::*;

    with_clients!(
        [go: Go over tcp unix tls],
        [python: Python over tcp unix tls],
        [chromium: Chromium over tcp tls]
        => [compressed_messages_across_sleeps]
    );

    /// What a page cannot send, and an offer only Go's client makes.
    mod go_and_python {
        use super::*;

        with_clients!(
            [go: Go over tcp unix tls],
            [python: Python over tcp unix tls]
            => [a_decompression_bomb_is_refused_with_1009]
        );

        with_clients!(
            [go_alone: Go over tcp unix tls]
            => [compressed_without_context_takeover_offered]
        );
    }

    /// The server's answer to every offer.
    const ANSWER: &str =
        "extensions permessage-deflate; server_no_context_takeover; client_no_context_takeover";

    /// The sizes of the compressible texts echoed, in bytes.
    const SIZES: [usize; 4] = [200, 10_000, 1_000_000, 200];

    /// The client offers `permessage-deflate` with context takeover; the
    /// server's answer adds no context takeover either way, which the
    /// client takes. Compressible texts (a JSON-like line repeated) from
    /// 200 B to 1 MB, each sent compressed to a socket asleep since the
    /// last, come back whole, each on fewer than a quarter of its bytes:
    /// the server inflated the client's message and compressed its echo.
    fn compressed_messages_across_sleeps<C: WsClient, T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, _events) = Room::new();
        let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::Deflate);
        client.command("extensions", ANSWER);
        for len in SIZES {
            room.wait_asleep(1);
            client.command(
                &format!("echo-compressed {len}"),
                &format!("echo {len} compressed"),
            );
        }
        assert!(!room.sender(0).is_closed());
        client.finish();
    }

    /// The client offers no context takeover either way: the same answer,
    /// and a 1 MB text to a sleeping socket comes back compressed.
    fn compressed_without_context_takeover_offered<C: WsClient, T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, _events) = Room::new();
        let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::DeflateWithoutContext);
        client.command("extensions", ANSWER);
        room.wait_asleep(1);
        client.command("echo-compressed 1000000", "echo 1000000 compressed");
        client.finish();
    }

    /// 8 MiB of zeros in one binary message on `/small` (1 MiB at most),
    /// which the client compresses to about 10 KB (it checks that it wrote
    /// fewer than a quarter of them): under the limit on the wire, the
    /// message is refused with 1009 as it inflates past it, a few KB into
    /// its frame.
    fn a_decompression_bomb_is_refused_with_1009<C: WsClient, T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, events) = Room::new();
        let (_srv, mut client) = connected::<C, T>(&room, "/small", Offer::Deflate);
        client.command("extensions", ANSWER);
        room.wait_asleep(1);
        client.command(&format!("send-zeros {}", 8 * SMALL), "sent");
        client.command("wait-close", r#"closed 1009 "message too big""#);
        // The server skips the rest of the message, then closes; the
        // handler hears the client's answer, which echoes the code.
        assert_eq!(next_event(&events), "closed 1009 message too big");
        wait_closed(&room);
        client.finish();
    }
}

/// Without `ws-deflate`: every client's offer is declined.
#[cfg(not(feature = "ws-deflate"))]
mod declined {
    use super::*;

    with_clients!(
        [go: Go over tcp unix tls],
        [python: Python over tcp unix tls],
        [chromium: Chromium over tcp tls]
        => [compression_is_declined]
    );

    /// The server answers no extension, and messages go uncompressed.
    fn compression_is_declined<C: WsClient, T: Transport>()
    where
        T::Addr: Dial,
    {
        let (room, _events) = Room::new();
        let (_srv, mut client) = connected::<C, T>(&room, "/", Offer::Deflate);
        client.command("extensions", "extensions none");
        room.wait_asleep(1);
        client.command("text 1000", "text 1000 echoed");
        room.wait_asleep(1);
        client.command("binary 100000", "binary 100000 echoed");
        client.finish();
    }
}
