//! `dormant::ws` against Go's `github.com/coder/websocket` v1.8.15 client
//! (the program in `tests/go/wsclient`, in a child process driven by
//! commands on its stdin), over every transport: TCP, a Unix socket (the
//! client's own `DialContext`) and TLS (a `tls.Config` trusting the
//! server's certificate). It shows that an independently written client
//! gets what tests/ws_sleep.rs shows with tokio-tungstenite's: messages of
//! 0 B to 16 MiB echoed to a socket that slept before each; a fragmented
//! message whose frames arrive across sleeps; the client's pings and the
//! lot's answered; close handshakes from either side with their codes and
//! reasons; 1007 for text that is not UTF-8 and 1009 for a message over
//! the limit; a client that vanishes while asleep; 1001 at graceful
//! shutdown.
//!
//! What this client cannot do as the other tests do: its `Writer` writes
//! each `Write` as one frame but keeps a frame that is not the message's
//! last in its 4 KiB buffer until a final frame flushes it, so each
//! fragment here is pushed out by a ping (a control frame, which flushes:
//! the client reports the bytes each wrote), and the message ends with
//! `Writer.Close`'s empty final frame; its pings carry the library's own
//! payloads (a counter). The client reads in a goroutine of its own (`Ping`
//! needs a concurrent reader), and pings once at `connect` so that the
//! reader is known to be reading before anything else: a `Close` before
//! the reader's first `Read` reads the server's close frame itself, and
//! the reader then finds only a closed connection. A 2 MiB message that
//! the server refuses (1009) before reading it may fail to be written
//! whole (the server lets the connection go): the client counts it as
//! sent, and reports the close frame it got.
//!
//! With the feature `ws-deflate`, the tests of `mod compression` show the
//! client's `permessage-deflate` (`-compression`, its
//! `DialOptions.CompressionMode`; off by default, and in the tests above)
//! against the server's: the client's offer of context takeover
//! (`context`: plain `permessage-deflate`) is answered without it either
//! way, which the client accepts, as it does the answer to its offer of
//! none (`no-context`); compressible texts of 200 B to 1 MB come back
//! whole to a socket that slept before each, each read on fewer than a
//! quarter of its bytes (the client counts what it read); and a
//! decompression bomb (8 MiB of zeros, about 10 KB on the wire, as the
//! client checks) is refused with 1009 on `/small` as it inflates past
//! 1 MiB. Without `ws-deflate` the offer is declined (`mod declined`).
//!
//! The Go client is built once per test process (`go build`, from the
//! module cache or the Go module proxy); without Go, the tests fail saying
//! how to install it.
#![cfg(feature = "ws")]

// The transports' raw HTTP/1 clients (`Serve::connect`) are not used here:
// the Go client connects by itself.
mod common {
    #[allow(
        dead_code,
        reason = "the rounds of the HTTP/2 clients are not played here"
    )]
    pub(crate) mod child_client;
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod client;
    pub(crate) mod go;
    #[allow(dead_code, reason = "the Go client runs on no runtime of ours")]
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

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::child_client::{ChildClient, STEP_TIMEOUT};
use common::go::GoDial;
use common::servers::Serve;
use common::transport::{Transport, over_every_transport};
use common::ws::{Room, SMALL, echo, next_event};

over_every_transport!(
    messages_of_every_size_across_sleeps,
    fragments_arrive_across_sleeps,
    client_pings_to_a_sleeping_socket_are_answered,
    the_client_answers_the_lots_pings,
    client_closes_with_a_code,
    server_closes_when_asked,
    invalid_utf8_gets_1007,
    a_message_over_the_limit_gets_1009,
    a_vanished_client_ends_its_socket,
    shutdown_closes_a_sleeping_socket_with_1001,
);

/// A dormant server serving the tests' echo on `T` for `room`.
fn echo_server<T: Transport>(room: &Room) -> Serve<T::Addr> {
    T::serve(&dormant::Server::builder(), echo(room.clone()))
}

/// The Go client, started and connected to `path` on `srv`.
fn connect<T: Transport>(srv: &Serve<T::Addr>, path: &str) -> ChildClient
where
    T::Addr: GoDial,
{
    connect_with::<T>(srv, path, &[])
}

/// The Go client, started with `flags` too and connected to `path` on
/// `srv`.
fn connect_with<T: Transport>(srv: &Serve<T::Addr>, path: &str, flags: &[&str]) -> ChildClient
where
    T::Addr: GoDial,
{
    let mut args = srv.addr.go_args();
    args.extend([
        "-timeout".into(),
        format!("{}s", STEP_TIMEOUT.as_secs() / 2).into(),
    ]);
    args.extend(flags.iter().map(Into::into));
    let mut client = ChildClient::start("the Go client", go_client(), &args);
    client.command(&format!("connect {path}"), "connected");
    client
}

/// Text and binary messages from empty to 16 MiB, each sent to a socket
/// that slept since the last, each echo checked byte for byte by the
/// client.
fn messages_of_every_size_across_sleeps<T: Transport>()
where
    T::Addr: GoDial,
{
    // Declared after the events' receiver, the server is dropped first:
    // its sockets' last events (at its shutdown) still find the receiver.
    let (room, _events) = Room::new();
    let srv = echo_server::<T>(&room);
    let mut client = connect::<T>(&srv, "/");
    for len in [0, 1, 125, 126, 65535, 65536, 1 << 20, 16 << 20] {
        room.wait_asleep(1);
        client.command(&format!("text {len}"), &format!("text {len} echoed"));
        room.wait_asleep(1);
        client.command(&format!("binary {len}"), &format!("binary {len} echoed"));
    }
    client.command("close 1000 done", r#"closed 1000 """#);
}

/// A text message in three fragments and the empty final frame
/// (`Writer.Close`), the socket asleep before each: each fragment left the
/// client only with the ping after it (it wrote nothing by itself), and
/// the echo is the whole message.
fn fragments_arrive_across_sleeps<T: Transport>()
where
    T::Addr: GoDial,
{
    // Declared after the events' receiver, the server is dropped first:
    // its sockets' last events (at its shutdown) still find the receiver.
    let (room, _events) = Room::new();
    let srv = echo_server::<T>(&room);
    let mut client = connect::<T>(&srv, "/");
    for (i, fragment) in ["hé", "llo wö", "rld, at last"].into_iter().enumerate() {
        room.wait_asleep(1);
        // A masked frame: 2 + 4 bytes of header; the ping's payload is the
        // client's count of its pings, "2" to "4" (its first was at
        // `connect`).
        let frame = 6 + fragment.len();
        let ping = 6 + (i + 2).to_string().len();
        client.command(
            &format!("fragment {fragment}"),
            &format!(
                "fragment: 0 B written by Write, {} B by the ping",
                frame + ping
            ),
        );
    }
    room.wait_asleep(1);
    client.command("end", "echoed héllo wörld, at last");
    room.wait_asleep(1);
    client.command("echo and after", "echoed and after");
}

/// The client's pings to a sleeping socket get their pongs, with their
/// payloads; the socket sleeps again after each.
fn client_pings_to_a_sleeping_socket_are_answered<T: Transport>()
where
    T::Addr: GoDial,
{
    // Declared after the events' receiver, the server is dropped first:
    // its sockets' last events (at its shutdown) still find the receiver.
    let (room, _events) = Room::new();
    let srv = echo_server::<T>(&room);
    let mut client = connect::<T>(&srv, "/");
    // The payloads are the client's count of its pings; its first was at
    // `connect`.
    for i in 2..=4 {
        room.wait_asleep(1);
        client.command("ping", &format!("pong {i}"));
    }
    room.wait_asleep(1);
    client.command("echo then text", "echoed then text");
}

/// On `/ping`, the lot pings the sleeping socket every 20 ms; the client,
/// reading, answers each by itself: after three, an echo still works and
/// the socket is open.
fn the_client_answers_the_lots_pings<T: Transport>()
where
    T::Addr: GoDial,
{
    // Declared after the events' receiver, the server is dropped first:
    // its sockets' last events (at its shutdown) still find the receiver.
    let (room, _events) = Room::new();
    let srv = echo_server::<T>(&room);
    let mut client = connect::<T>(&srv, "/ping");
    client.command("pings 3", "pinged 3 times");
    assert!(!room.sender(0).is_closed());
    room.wait_asleep(1);
    client.command("echo still here", "echoed still here");
    assert!(!room.sender(0).is_closed());
}

/// The client closes a sleeping socket with 4000 "bye": the server answers
/// with 4000 (and no reason), and the handler's last message has the code
/// and reason.
fn client_closes_with_a_code<T: Transport>()
where
    T::Addr: GoDial,
{
    let (room, events) = Room::new();
    let srv = echo_server::<T>(&room);
    let mut client = connect::<T>(&srv, "/");
    room.wait_asleep(1);
    client.command("close 4000 bye", r#"closed 4000 """#);
    assert_eq!(next_event(&events), "closed 4000 bye");
    assert!(room.sender(0).is_closed());
}

/// The handler closes the socket when the client asks it to: the client
/// gets 4002 "asked to", and its answer echoes both.
fn server_closes_when_asked<T: Transport>()
where
    T::Addr: GoDial,
{
    let (room, events) = Room::new();
    let srv = echo_server::<T>(&room);
    let mut client = connect::<T>(&srv, "/");
    room.wait_asleep(1);
    client.command("send close 4002", "sent");
    client.command("wait-close", r#"closed 4002 "asked to""#);
    assert_eq!(next_event(&events), "closed 4002 asked to");
    assert!(room.sender(0).is_closed());
}

/// A text message that is not UTF-8 (the client does not check what it
/// sends): 1007.
fn invalid_utf8_gets_1007<T: Transport>()
where
    T::Addr: GoDial,
{
    let (room, events) = Room::new();
    let srv = echo_server::<T>(&room);
    let mut client = connect::<T>(&srv, "/");
    room.wait_asleep(1);
    client.command("send-invalid", "sent");
    client.command("wait-close", r#"closed 1007 "text that is not UTF-8""#);
    // The handler hears the client's answer, which echoes the code.
    assert_eq!(next_event(&events), "closed 1007 text that is not UTF-8");
    assert!(room.sender(0).is_closed());
}

/// A 2 MiB binary message on `/small` (1 MiB at most): 1009.
fn a_message_over_the_limit_gets_1009<T: Transport>()
where
    T::Addr: GoDial,
{
    let (room, events) = Room::new();
    let srv = echo_server::<T>(&room);
    let mut client = connect::<T>(&srv, "/small");
    room.wait_asleep(1);
    client.command(&format!("send-binary {}", 2 * SMALL), "sent");
    client.command("wait-close", r#"closed 1009 "message too big""#);
    // The handler hears the client's answer, which echoes the code.
    assert_eq!(next_event(&events), "closed 1009 message too big");
    assert!(room.sender(0).is_closed());
}

/// The client's process is killed while its socket sleeps: the socket
/// ends, its handler hears of it, its sender is closed.
fn a_vanished_client_ends_its_socket<T: Transport>()
where
    T::Addr: GoDial,
{
    let (room, events) = Room::new();
    let srv = echo_server::<T>(&room);
    let client = connect::<T>(&srv, "/");
    room.wait_asleep(1);
    // Dropping a running client kills it.
    drop(client);
    assert_eq!(next_event(&events), "closed");
    assert!(room.sender(0).is_closed());
}

/// Graceful shutdown with the client's socket asleep: the client gets
/// 1001, and its answer reaches the handler.
fn shutdown_closes_a_sleeping_socket_with_1001<T: Transport>()
where
    T::Addr: GoDial,
{
    let (room, events) = Room::new();
    let mut srv = echo_server::<T>(&room);
    let mut client = connect::<T>(&srv, "/");
    room.wait_asleep(1);
    srv.handle.graceful_shutdown(None);
    client.command("wait-close", r#"closed 1001 "the server is shutting down""#);
    assert_eq!(
        next_event(&events),
        "closed 1001 the server is shutting down"
    );
    srv.wait_stopped();
}

/// The tests of `permessage-deflate`, which the client offers when told
/// to (`-compression`).
#[cfg(feature = "ws-deflate")]
mod compression {
    use super::*;

    over_every_transport!(
        compressed_messages_across_sleeps,
        compressed_without_context_takeover_offered,
        a_decompression_bomb_is_refused_with_1009,
    );

    /// The server's answer to either of the client's offers.
    const ANSWER: &str =
        "extensions permessage-deflate; server_no_context_takeover; client_no_context_takeover";

    /// The sizes of the compressible texts echoed, in bytes.
    const SIZES: [usize; 4] = [200, 10_000, 1_000_000, 200];

    /// The client offers plain `permessage-deflate` (context takeover);
    /// the server's answer adds `client_no_context_takeover`, which the
    /// client takes. Compressible texts (a JSON-like line repeated) from
    /// 200 B to 1 MB, each sent compressed to a socket asleep since the
    /// last, come back whole, each read on fewer than a quarter of its
    /// bytes: the server inflated the client's message and compressed its
    /// echo.
    fn compressed_messages_across_sleeps<T: Transport>()
    where
        T::Addr: GoDial,
    {
        let (room, _events) = Room::new();
        let srv = echo_server::<T>(&room);
        let mut client = connect_with::<T>(&srv, "/", &["-compression", "context"]);
        client.command("extensions", ANSWER);
        for len in SIZES {
            room.wait_asleep(1);
            client.command(
                &format!("echo-compressed {len}"),
                &format!("echo {len} compressed"),
            );
        }
        client.command("close 1000 done", r#"closed 1000 """#);
    }

    /// The client offers no context takeover either way: the same answer,
    /// and a 1 MB text to a sleeping socket comes back compressed.
    fn compressed_without_context_takeover_offered<T: Transport>()
    where
        T::Addr: GoDial,
    {
        let (room, _events) = Room::new();
        let srv = echo_server::<T>(&room);
        let mut client = connect_with::<T>(&srv, "/", &["-compression", "no-context"]);
        client.command("extensions", ANSWER);
        room.wait_asleep(1);
        client.command("echo-compressed 1000000", "echo 1000000 compressed");
        client.command("close 1000 done", r#"closed 1000 """#);
    }

    /// 8 MiB of zeros in one binary message on `/small` (1 MiB at most),
    /// which the client compresses to about 10 KB (it checks that it wrote
    /// fewer than a quarter of them): under the limit on the wire, the
    /// message is refused with 1009 as it inflates past it, a few KB into
    /// its frame.
    fn a_decompression_bomb_is_refused_with_1009<T: Transport>()
    where
        T::Addr: GoDial,
    {
        let (room, events) = Room::new();
        let srv = echo_server::<T>(&room);
        let mut client = connect_with::<T>(&srv, "/small", &["-compression", "context"]);
        client.command("extensions", ANSWER);
        room.wait_asleep(1);
        client.command(&format!("send-zeros {}", 8 * SMALL), "sent");
        client.command("wait-close", r#"closed 1009 "message too big""#);
        // The server skips the rest of the message, then closes; the
        // handler hears the client's answer, which echoes the code.
        assert_eq!(next_event(&events), "closed 1009 message too big");
        assert!(room.sender(0).is_closed());
    }
}

/// Without `ws-deflate`: the client's offer is declined.
#[cfg(not(feature = "ws-deflate"))]
mod declined {
    use super::*;

    over_every_transport!(compression_is_declined);

    /// The server answers no extension, and messages go uncompressed.
    fn compression_is_declined<T: Transport>()
    where
        T::Addr: GoDial,
    {
        let (room, _events) = Room::new();
        let srv = echo_server::<T>(&room);
        let mut client = connect_with::<T>(&srv, "/", &["-compression", "context"]);
        client.command("extensions", "extensions none");
        room.wait_asleep(1);
        client.command("text 1000", "text 1000 echoed");
        room.wait_asleep(1);
        client.command("binary 100000", "binary 100000 echoed");
    }
}

// ---- the Go client ----

/// The Go client, built once per test process (the first test to need it
/// builds it; the others wait).
fn go_client() -> &'static Path {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(|| {
        common::go::build(
            "wsclient",
            "Go's coder/websocket client (tests/go/wsclient)",
        )
    }) {
        Ok(path) => path,
        Err(e) => panic!("{e}"),
    }
}
