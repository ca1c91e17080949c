//! `dormant::ws` over every transport, against tokio-tungstenite's client
//! (and raw frames where the client must misbehave): messages between
//! sleeps, broadcasts written to sleeping sockets, fragments and pings that
//! arrive while a socket sleeps, close handshakes from either side, the
//! protocol's refusals, a vanished client, a client that stops reading,
//! and graceful shutdown. Frames in pieces, the socket asleep between
//! them, keep no worker busy while they wait for their rest: on a server
//! with one worker, another client is served meanwhile.

use std::time::Duration;

use crate::common::rungs::client_runtime;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{AsyncStream, Transport, over_every_transport, read_until};
use crate::common::wait::wait;
use crate::common::ws::{PING_EVERY, Room, SMALL, echo, next_event};
use crate::common::xorshift::XorShift;
use dormant::ws::{CloseCode, Frame, Sender};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode as WsCode;

over_every_transport!(
    websockets_over_http2_with_an_extended_connect,
    topics_reach_sleeping_members_and_lose_the_ones_that_go,
    messages_of_every_size_across_sleeps,
    broadcasts_reach_sleeping_sockets_without_waking_them,
    fragments_arrive_across_sleeps,
    pings_to_a_sleeping_socket_are_answered,
    client_closes_with_a_code,
    server_closes_a_sleeping_socket,
    protocol_errors_get_their_close_codes,
    a_vanished_client_ends_its_socket,
    a_client_that_stops_reading_is_closed_and_holds_no_one_back,
    shutdown_closes_sleeping_sockets_with_1001,
    generated_sessions_across_sleeps,
    pings_from_the_lot_keep_an_answering_client,
    a_client_that_does_not_answer_pings_is_closed,
    an_idle_client_is_closed_and_messages_keep_one_open,
    a_client_that_never_answers_a_close_is_let_go,
    a_frame_in_pieces_does_not_stop_another_socket,
);

type Client = WebSocketStream<Box<dyn AsyncStream>>;

async fn connect<T: Transport>(addr: &T::Addr, path: &str) -> Client {
    let io = T::connect_http1(addr).await;
    let url = format!("ws://localhost{path}");
    let (ws, res) = timeout(CLIENT_TIMEOUT, tokio_tungstenite::client_async(url, io))
        .await
        .expect("no handshake")
        .expect("the handshake");
    assert_eq!(res.status(), 101);
    ws
}

async fn next(ws: &mut Client) -> WsMessage {
    timeout(CLIENT_TIMEOUT, ws.next())
        .await
        .expect("nothing came")
        .expect("the stream ended")
        .expect("a message")
}

/// Reads until the server's close frame: its code.
async fn close_code(ws: &mut Client) -> u16 {
    loop {
        match next(ws).await {
            WsMessage::Close(Some(frame)) => return frame.code.into(),
            WsMessage::Close(None) => panic!("a close frame without a code"),
            _ => {}
        }
    }
}

/// Reads until the connection ends.
async fn ends(ws: &mut Client) {
    loop {
        match timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no end") {
            None | Some(Err(_)) => return,
            Some(Ok(_)) => {}
        }
    }
}

/// A client's frame: `first` byte, masked payload.
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut frame = vec![first];
    match payload.len() {
        len @ 0..=125 => frame.push(0x80 | len as u8),
        len @ 126..=0xFFFF => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// Writes raw bytes under the client.
async fn raw(ws: &mut Client, bytes: &[u8]) {
    let io = ws.get_mut();
    io.write_all(bytes).await.unwrap();
    io.flush().await.unwrap();
}

/// Text and binary messages from empty to 16 MiB, each sent to a socket
/// that slept since the last.
fn messages_of_every_size_across_sleeps<T: Transport>() {
    let (room, _events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut ws = connect::<T>(&srv.addr, "/").await;
        for len in [0, 1, 125, 126, 65535, 65536, 1 << 20, 16 << 20] {
            room.wait_asleep(1);
            let text = "é".repeat(len / 2);
            ws.send(WsMessage::text(text.clone())).await.unwrap();
            assert_eq!(next(&mut ws).await, WsMessage::text(text), "{len}");
            room.wait_asleep(1);
            let binary: Vec<u8> = (0..len).map(|i| i as u8).collect();
            ws.send(WsMessage::binary(binary.clone())).await.unwrap();
            assert_eq!(next(&mut ws).await, WsMessage::binary(binary), "{len}");
        }
    });
}

/// One frame, encoded once, sent to 20 sleeping sockets: each gets it, and
/// none woke for it.
fn broadcasts_reach_sleeping_sockets_without_waking_them<T: Transport>() {
    let (room, _events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut clients = Vec::new();
        for _ in 0..20 {
            clients.push(connect::<T>(&srv.addr, "/").await);
        }
        for round in 0..3 {
            room.wait_asleep(20);
            let frame = Frame::text(format!("news {round}"));
            for i in 0..20 {
                room.sender(i).send(&frame).unwrap();
            }
            for ws in &mut clients {
                assert_eq!(next(ws).await, WsMessage::text(format!("news {round}")));
            }
            let senders = room.senders.lock().unwrap();
            assert!(
                senders.iter().all(Sender::is_asleep),
                "a write woke a socket"
            );
        }
        // And they still answer.
        for ws in &mut clients {
            ws.send(WsMessage::text("still here")).await.unwrap();
            assert_eq!(next(ws).await, WsMessage::text("still here"));
        }
    });
}

/// A text message in four fragments, with a ping between them and its
/// last frame split inside its header and its payload, the socket asleep
/// between every piece.
fn fragments_arrive_across_sleeps<T: Transport>() {
    let (room, _events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut ws = connect::<T>(&srv.addr, "/").await;
        let last = masked(0x80, "wörld, at last".as_bytes());
        let pieces: Vec<Vec<u8>> = vec![
            masked(0x01, b"hello "),
            masked(0x00, b""),
            masked(0x89, b"between"),
            masked(0x00, "big ".as_bytes()),
            last[..1].to_vec(),
            last[1..4].to_vec(),
            last[4..10].to_vec(),
            last[10..].to_vec(),
        ];
        for piece in &pieces {
            room.wait_asleep(1);
            raw(&mut ws, piece).await;
        }
        assert_eq!(next(&mut ws).await, WsMessage::Pong("between".into()));
        assert_eq!(
            next(&mut ws).await,
            WsMessage::text("hello big wörld, at last")
        );
    });
}

/// A ping to a sleeping socket gets its pong; the socket sleeps again, and
/// its handler never saw the ping.
fn pings_to_a_sleeping_socket_are_answered<T: Transport>() {
    let (room, _events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut ws = connect::<T>(&srv.addr, "/").await;
        for i in 0..3 {
            room.wait_asleep(1);
            let payload = format!("ping {i}");
            ws.send(WsMessage::Ping(payload.clone().into()))
                .await
                .unwrap();
            assert_eq!(next(&mut ws).await, WsMessage::Pong(payload.into()));
        }
        room.wait_asleep(1);
        ws.send(WsMessage::text("then text")).await.unwrap();
        assert_eq!(next(&mut ws).await, WsMessage::text("then text"));
    });
}

/// The client closes a sleeping socket with 4000: the server answers with
/// 4000 and closes, and the handler's last message has the code.
fn client_closes_with_a_code<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut ws = connect::<T>(&srv.addr, "/").await;
        room.wait_asleep(1);
        let frame = CloseFrame {
            code: WsCode::from(4000),
            reason: "bye".into(),
        };
        ws.close(Some(frame)).await.unwrap();
        assert_eq!(close_code(&mut ws).await, 4000);
        ends(&mut ws).await;
    });
    assert_eq!(next_event(&events), "closed 4000 bye");
    assert!(room.sender(0).is_closed());
    assert_eq!(
        room.sender(0).send("late"),
        Err(dormant::ws::SendError::Closed)
    );
}

/// The server closes a sleeping socket (through its sender) and when a
/// handler asks to: the client gets the code and reason and answers.
fn server_closes_a_sleeping_socket<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut ws = connect::<T>(&srv.addr, "/").await;
        room.wait_asleep(1);
        room.sender(0).close(CloseCode::from(4001), "done").unwrap();
        match next(&mut ws).await {
            WsMessage::Close(Some(frame)) => {
                assert_eq!(
                    (u16::from(frame.code), frame.reason.as_str()),
                    (4001, "done")
                );
            }
            other => panic!("{other:?}"),
        }
        ends(&mut ws).await;
        let mut ws = connect::<T>(&srv.addr, "/").await;
        ws.send(WsMessage::text("close 4002")).await.unwrap();
        assert_eq!(close_code(&mut ws).await, 4002);
        ends(&mut ws).await;
    });
    // The client's answers echo the codes and reasons.
    let mut got = [next_event(&events), next_event(&events)];
    got.sort();
    assert_eq!(got, ["closed 4001 done", "closed 4002 asked to"]);
}

/// Invalid UTF-8 (1007), an unmasked frame (1002), a reserved opcode
/// (1002) and a message over the limit (1009, refused on its header: its
/// payload is skipped, not kept): each socket gets its code and is
/// closed; a neighbour keeps working. After 1007 the server reads on for
/// the client's close frame, and closes once it comes; a message over the
/// limit is read to its end before the close frame goes out (a browser
/// still sending when it comes calls the close unclean); after 1002 the
/// server cannot find the client's close frame, and closes at once.
fn protocol_errors_get_their_close_codes<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut neighbour = connect::<T>(&srv.addr, "/small").await;
        let mut too_big = vec![0x82, 0x80 | 127];
        too_big.extend_from_slice(&(SMALL as u64 + 1).to_be_bytes());
        too_big.extend_from_slice(&[1, 2, 3, 4]);
        let cases: [(&str, Vec<u8>, u16); 4] = [
            ("invalid UTF-8", masked(0x81, &[b'a', 0xC3, 0x28]), 1007),
            ("unmasked", vec![0x81, 0x02, b'h', b'i'], 1002),
            ("reserved opcode", masked(0x83, b"x"), 1002),
            ("too big", too_big, 1009),
        ];
        for (what, mut frame, code) in cases {
            let mut ws = connect::<T>(&srv.addr, "/small").await;
            room.wait_asleep(2);
            if code == 1009 {
                // The refused frame's payload: the close frame comes after
                // it.
                frame.extend(vec![0; SMALL + 1]);
            }
            raw(&mut ws, &frame).await;
            assert_eq!(close_code(&mut ws).await, code, "{what}");
            // tungstenite answers the close frame as it reads on.
            ends(&mut ws).await;
            // The handler hears the client's answer, where the server read
            // it (tungstenite echoes the code and the reason).
            let heard = match code {
                1007 => "closed 1007 text that is not UTF-8",
                1009 => "closed 1009 message too big",
                _ => "closed",
            };
            assert_eq!(next_event(&events), heard, "{what}");
            room.senders.lock().unwrap().pop();
            neighbour.send(WsMessage::text(what)).await.unwrap();
            assert_eq!(next(&mut neighbour).await, WsMessage::text(what));
        }
    });
}

/// A client that vanishes while its socket sleeps: the socket ends, its
/// handler hears of it, its sender fails.
fn a_vanished_client_ends_its_socket<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let ws = connect::<T>(&srv.addr, "/").await;
        room.wait_asleep(1);
        drop(ws);
    });
    assert_eq!(next_event(&events), "closed");
    assert!(room.sender(0).is_closed());
}

/// One client stops reading while messages are broadcast (to it from a
/// thread of no runtime): once its queue is full, sends to it fail and it
/// is closed; the others get every message.
fn a_client_that_stops_reading_is_closed_and_holds_no_one_back<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let slow = connect::<T>(&srv.addr, "/small").await;
        let mut fast = connect::<T>(&srv.addr, "/small").await;
        room.wait_asleep(2);
        let frame = Frame::binary(vec![7; 64 << 10]);
        let mut sent = 0;
        let full = loop {
            assert!(sent < 10_000, "the slow client's queue never filled");
            room.sender(1).send(&frame).unwrap();
            sent += 1;
            assert_eq!(next(&mut fast).await, WsMessage::binary(vec![7; 64 << 10]));
            // From a thread outside any runtime: a send that finds the
            // socket full wakes it on the server's runtime all the same.
            let (slow_sender, frame) = (room.sender(0), frame.clone());
            let sending = std::thread::spawn(move || slow_sender.send(&frame));
            if let Err(error) = sending.join().expect("the sending thread") {
                break error;
            }
        };
        assert_eq!(full, dormant::ws::SendError::Full);
        assert_eq!(next_event(&events), "closed");
        assert!(room.sender(0).is_closed());
        drop(slow);
        // The fast client goes on.
        room.sender(1).send("after").unwrap();
        assert_eq!(next(&mut fast).await, WsMessage::text("after"));
    });
}

/// Graceful shutdown sends every sleeping socket 1001 and waits for the
/// clients' answers.
fn shutdown_closes_sleeping_sockets_with_1001<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut clients = Vec::new();
        for _ in 0..3 {
            clients.push(connect::<T>(&srv.addr, "/").await);
        }
        room.wait_asleep(3);
        srv.handle.graceful_shutdown(None);
        for ws in &mut clients {
            assert_eq!(close_code(ws).await, 1001);
            ends(ws).await;
        }
    });
    for _ in 0..3 {
        assert_eq!(
            next_event(&events),
            "closed 1001 the server is shutting down"
        );
    }
}

/// Generated sessions: text and binary messages of random sizes, in
/// random fragments with pings between them, sent in random pieces with
/// the socket asleep between pieces (in the middle of headers, payloads
/// and messages): every message comes back whole, every ping answered, in
/// order.
fn generated_sessions_across_sleeps<T: Transport>() {
    let (room, _events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    client_runtime().block_on(async {
        for session in 0..12 {
            let mut ws = connect::<T>(&srv.addr, "/").await;
            let (mut bytes, mut expected) = (Vec::new(), Vec::new());
            for _ in 0..1 + rng.below(5) {
                let text = rng.below(2) == 0;
                let len = [0, 1, 125, 126, 3000, 70_000][rng.below(6)];
                let data: Vec<u8> = if text {
                    "aé€😀"
                        .chars()
                        .cycle()
                        .take(len / 3)
                        .collect::<String>()
                        .into_bytes()
                } else {
                    rng.bytes(len)
                };
                let pieces = 1 + rng.below(4);
                let mut cuts: Vec<usize> = (1..pieces).map(|_| rng.below(data.len() + 1)).collect();
                cuts.sort_unstable();
                cuts.push(data.len());
                let mut start = 0;
                for (i, end) in cuts.into_iter().enumerate() {
                    let opcode = match (i, text) {
                        (0, true) => 0x1,
                        (0, false) => 0x2,
                        _ => 0x0,
                    };
                    let fin = if i == pieces - 1 { 0x80 } else { 0 };
                    bytes.extend(masked(fin | opcode, &data[start..end]));
                    if fin == 0 && rng.below(2) == 0 {
                        let len = rng.below(126);
                        let ping = rng.bytes(len);
                        bytes.extend(masked(0x89, &ping));
                        expected.push(WsMessage::Pong(ping.into()));
                    }
                    start = end;
                }
                expected.push(match text {
                    true => WsMessage::text(String::from_utf8(data).unwrap()),
                    false => WsMessage::binary(data),
                });
            }
            let mut start = 0;
            while start < bytes.len() {
                let end = (start + 1 + rng.below(bytes.len() / 3 + 2)).min(bytes.len());
                room.wait_asleep(1);
                raw(&mut ws, &bytes[start..end]).await;
                start = end;
            }
            for (i, message) in expected.into_iter().enumerate() {
                assert_eq!(
                    next(&mut ws).await,
                    message,
                    "session {session}, message {i}"
                );
            }
            drop(ws);
            wait("the socket closed", || room.sender(0).is_closed());
            room.senders.lock().unwrap().clear();
        }
    });
}

/// Pings written by the lot where the socket sleeps: the client (which
/// answers each with a pong as it reads) gets one after another, and its
/// socket stays open and asleep between them.
fn pings_from_the_lot_keep_an_answering_client<T: Transport>() {
    let (room, _events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut ws = connect::<T>(&srv.addr, "/ping").await;
        for _ in 0..5 {
            assert_eq!(next(&mut ws).await, WsMessage::Ping(Default::default()));
        }
        assert!(!room.sender(0).is_closed());
        ws.send(WsMessage::text("still here")).await.unwrap();
        loop {
            match next(&mut ws).await {
                WsMessage::Ping(_) => {}
                other => break assert_eq!(other, WsMessage::text("still here")),
            }
        }
    });
}

/// A client that reads nothing (so answers no ping): its socket is closed
/// once a ping goes unanswered, with 1001, and its handler hears of it.
fn a_client_that_does_not_answer_pings_is_closed<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut ws = connect::<T>(&srv.addr, "/ping-soon").await;
        assert_eq!(next_event(&events), "closed");
        assert!(room.sender(0).is_closed());
        // What came, read raw (an answer to the ping now would find the
        // socket closed): the ping, then the close frame.
        let got = read_to_end(&mut ws).await;
        assert!(got.starts_with(&[0x89, 0x00, 0x88]), "{got:?}");
        assert_eq!(got[4..6], 1001u16.to_be_bytes(), "{got:?}");
    });
}

/// `idle_timeout`: a socket whose client sends messages more often stays
/// open; a silent one is closed with 1001, whatever else it does (a ping
/// from the client does not count).
fn an_idle_client_is_closed_and_messages_keep_one_open<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut talker = connect::<T>(&srv.addr, "/idle").await;
        let mut quiet = connect::<T>(&srv.addr, "/idle").await;
        quiet
            .send(WsMessage::Ping("are you there".into()))
            .await
            .unwrap();
        assert_eq!(
            next(&mut quiet).await,
            WsMessage::Pong("are you there".into())
        );
        let deadline = tokio::time::Instant::now() + CLIENT_TIMEOUT;
        while !room.sender(1).is_closed() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the quiet socket stayed open"
            );
            talker.send(WsMessage::text("hi")).await.unwrap();
            assert_eq!(next(&mut talker).await, WsMessage::text("hi"));
            tokio::time::sleep(PING_EVERY).await;
        }
        // The talker spoke last less than its idle timeout ago.
        assert!(!room.sender(0).is_closed(), "the talker was closed");
        assert_eq!(next_event(&events), "closed");
        let got = read_to_end(&mut quiet).await;
        assert_eq!(got[..4], [0x88, got[1], 0x03, 0xE9], "{got:?}");
    });
}

/// Reads the raw bytes under the client until the server closes.
async fn read_to_end(ws: &mut Client) -> Vec<u8> {
    let mut got = Vec::new();
    timeout(CLIENT_TIMEOUT, ws.get_mut().read_to_end(&mut got))
        .await
        .expect("no end")
        .expect("the bytes");
    got
}

/// The server closes a sleeping socket whose client reads the close frame
/// but never answers it, nor closes: the socket is let go after its close
/// timeout (the client sees the end of the stream), its handler told.
fn a_client_that_never_answers_a_close_is_let_go<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut ws = connect::<T>(&srv.addr, "/close-soon").await;
        room.wait_asleep(1);
        room.sender(0).close(CloseCode::from(4003), "over").unwrap();
        // Raw reads: tungstenite would answer the close.
        let got = read_to_end(&mut ws).await;
        assert_eq!(got[..4], [0x88, 6, 0x0F, 0xA3], "{got:?}");
        assert_eq!(&got[4..], b"over");
    });
    assert_eq!(next_event(&events), "closed");
    assert!(room.sender(0).is_closed());
}

/// How long a client pauses between the pieces of a frame: long enough
/// for its socket to read the piece and sleep again.
const PAUSE: Duration = Duration::from_millis(40);

/// A server with one worker, and frames sent in pieces with a pause after
/// each, the socket asleep in the lot between them: a text frame whose
/// header comes byte by byte, one with a 16-bit length cut inside it, a
/// message in two fragments cut in each; and a frame whose first byte came
/// in the same write as the upgrade request (read past the request, handed
/// over with the stream, which reads it before it first sleeps). While a
/// socket waits for the rest of a frame, the worker stays idle and serves
/// another client.
fn a_frame_in_pieces_does_not_stop_another_socket<T: Transport>() {
    let (room, _events) = Room::new();
    let mut builder = dormant::Server::builder();
    builder
        .park_after(Duration::from_millis(1))
        .dormant_after(Duration::from_millis(2));
    let srv = T::serve_with_workers(&builder, echo(room.clone()), 1);
    client_runtime().block_on(async {
        let mut ws = connect::<T>(&srv.addr, "/").await;
        room.wait_asleep(1);
        let long = "ü".repeat(100);
        let messages: [(Vec<u8>, &[usize], &str); 3] = [
            (masked(0x81, b"hello"), &[1, 2, 3, 6, 8], "hello"),
            (masked(0x81, long.as_bytes()), &[2, 3, 5, 50], &long),
            (
                [masked(0x01, b"frag"), masked(0x80, b"ment")].concat(),
                &[1, 4, 8, 11, 13],
                "fragment",
            ),
        ];
        let mut others = Vec::new();
        for (bytes, cuts, want) in messages {
            let mut start = 0;
            for &cut in cuts {
                raw(&mut ws, &bytes[start..cut]).await;
                start = cut;
                srv.pause_idle(
                    PAUSE,
                    &format!("{want:.5}: after the piece that ends at {cut}"),
                );
                assert!(room.sender(0).is_asleep(), "{want:.5}: asleep after {cut}");
                if others.is_empty() {
                    let mut other = connect::<T>(&srv.addr, "/").await;
                    other.send(WsMessage::text("other")).await.unwrap();
                    assert_eq!(next(&mut other).await, WsMessage::text("other"));
                    others.push(other);
                }
            }
            raw(&mut ws, &bytes[start..]).await;
            assert_eq!(next(&mut ws).await, WsMessage::text(want));
        }

        let mut io = T::connect_http1(&srv.addr).await;
        let frame = masked(0x81, b"read ahead");
        let upgrade = "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\n\
            Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
            Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
        io.write_all(&[upgrade.as_bytes(), &frame[..1]].concat())
            .await
            .unwrap();
        let head = read_until(&mut io, b"\r\n\r\n").await;
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        srv.pause_idle(PAUSE, "after an upgrade and a byte");
        room.wait_asleep(3);
        io.write_all(&frame[1..]).await.unwrap();
        let mut echoed = [0; 12];
        timeout(CLIENT_TIMEOUT, io.read_exact(&mut echoed))
            .await
            .expect("no echo")
            .unwrap();
        assert_eq!(echoed, *b"\x81\x0aread ahead");
        srv.pause_idle(PAUSE, "every message answered");
    });
}

/// A topic's members get what is published to it where they sleep: no
/// socket wakes for it (the server's gauges say so); a member that leaves
/// (`leave`), or closes, is no longer one, and a publish after that goes
/// to the others only.
fn topics_reach_sleeping_members_and_lose_the_ones_that_go<T: Transport>() {
    let (room, events) = Room::new();
    let srv = T::serve(&dormant::Server::builder(), echo(room.clone()));
    client_runtime().block_on(async {
        let mut members = Vec::new();
        for _ in 0..3 {
            members.push(connect::<T>(&srv.addr, "/topic").await);
        }
        room.wait_asleep(3);
        assert_eq!(room.topic.len(), 3);
        for round in 0..3 {
            let text = format!("news {round}");
            let published = room.topic.publish(text.as_str());
            assert_eq!((published.sent, published.failed), (3, 0));
            let ws = srv.stats().websockets;
            assert_eq!(
                (ws.open, ws.asleep, ws.queued_bytes),
                (3, 3, 0),
                "none woke"
            );
            for member in &mut members {
                assert_eq!(next(member).await, WsMessage::text(text.as_str()));
            }
        }
        members[0].send(WsMessage::text("leave")).await.unwrap();
        assert_eq!(next(&mut members[0]).await, WsMessage::text("left"));
        assert_eq!(room.topic.len(), 2);
        let mut gone = members.pop().unwrap();
        gone.close(None).await.unwrap();
        assert_eq!(next_event(&events), "closed");
        // The socket left the topic before its handler heard of the end.
        assert_eq!(room.topic.len(), 1);
        assert_eq!(room.topic.members(), [room.sender(1)]);
        wait("the members asleep", || {
            room.topic
                .members()
                .iter()
                .all(dormant::ws::Sender::is_asleep)
        });
        assert_eq!(room.topic.publish("last").sent, 1);
        assert_eq!(next(&mut members[1]).await, WsMessage::text("last"));
        // The one that left gets its echo, and nothing published before it.
        members[0].send(WsMessage::text("echo")).await.unwrap();
        assert_eq!(next(&mut members[0]).await, WsMessage::text("echo"));
    });
}

/// RFC 8441: hyper's HTTP/2 client opens WebSockets with an extended
/// CONNECT (`:protocol` websocket) on a server with extended CONNECT on;
/// the answer is `200` with the extensions, the stream carries the frames
/// (echoed; a publish to a topic reaches them; the server's close), two
/// sockets on one connection, beside an ordinary request. Without the
/// setting, hyper refuses the CONNECT as `axum::serve` does not.
fn websockets_over_http2_with_an_extended_connect<T: Transport>() {
    use http_body_util::Empty;
    use hyper::body::Bytes;
    use tokio_tungstenite::tungstenite::protocol::Role;

    let (room, events) = Room::new();
    let mut builder = dormant::Server::builder();
    builder.http2_enable_connect_protocol(true);
    let srv = T::serve(&builder, echo(room.clone()));
    client_runtime().block_on(async {
        let (mut send, _conn) = T::hyper_h2::<Empty<Bytes>>(&srv.addr).await;
        let mut sockets = Vec::new();
        for path in ["/topic", "/topic"] {
            let req = http::Request::builder()
                .method(http::Method::CONNECT)
                .uri(format!("https://localhost{path}"))
                .header("sec-websocket-version", "13")
                .extension(hyper::ext::Protocol::from_static("websocket"))
                .body(Empty::new())
                .unwrap();
            let res = timeout(CLIENT_TIMEOUT, send.send_request(req))
                .await
                .expect("an answer")
                .expect("the CONNECT");
            assert_eq!(res.status(), 200);
            assert!(res.headers().get("sec-websocket-accept").is_none());
            let upgraded = hyper::upgrade::on(res).await.expect("the stream");
            let io = hyper_util::rt::TokioIo::new(upgraded);
            sockets.push(WebSocketStream::from_raw_socket(io, Role::Client, None).await);
        }
        for (i, ws) in sockets.iter_mut().enumerate() {
            let text = format!("over h2 {i}");
            ws.send(WsMessage::text(text.as_str())).await.unwrap();
            assert_eq!(next_h2(ws).await, WsMessage::text(text.as_str()));
        }
        // An ordinary request on the same connection.
        let req = http::Request::get("https://localhost/plain")
            .body(Empty::new())
            .unwrap();
        let res = send.send_request(req).await.expect("a plain request");
        assert_eq!(res.status(), 426, "not a WebSocket request");
        assert_eq!(room.topic.publish("to all").sent, 2);
        for ws in &mut sockets {
            assert_eq!(next_h2(ws).await, WsMessage::text("to all"));
        }
        // Not asleep: an HTTP/2 stream stays in its task.
        assert!(!room.sender(0).is_asleep());
        sockets[0]
            .send(WsMessage::text("close 4003"))
            .await
            .unwrap();
        match next_h2(&mut sockets[0]).await {
            WsMessage::Close(Some(frame)) => assert_eq!(u16::from(frame.code), 4003),
            other => panic!("{other:?} before the close"),
        }
        // tungstenite answers the close frame as it reads on; the server
        // then ends the stream.
        let end = timeout(CLIENT_TIMEOUT, sockets[0].next()).await;
        assert!(matches!(end, Ok(None | Some(Err(_)))), "{end:?}");
        assert_eq!(next_event(&events), "closed 4003 asked to");
        sockets[1].send(WsMessage::text("still")).await.unwrap();
        assert_eq!(next_h2(&mut sockets[1]).await, WsMessage::text("still"));
    });
    // Without extended CONNECT, the same request is refused by hyper.
    let plain = T::serve(&dormant::Server::builder(), echo(Room::new().0));
    client_runtime().block_on(async {
        let (mut send, _conn) = T::hyper_h2::<Empty<Bytes>>(&plain.addr).await;
        let req = http::Request::builder()
            .method(http::Method::CONNECT)
            .uri("https://localhost/topic")
            .header("sec-websocket-version", "13")
            .extension(hyper::ext::Protocol::from_static("websocket"))
            .body(Empty::new())
            .unwrap();
        let sent = timeout(CLIENT_TIMEOUT, send.send_request(req))
            .await
            .expect("an answer");
        assert!(sent.is_err(), "{sent:?}");
    });
}

type H2Socket = WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

async fn next_h2(ws: &mut H2Socket) -> WsMessage {
    timeout(CLIENT_TIMEOUT, ws.next())
        .await
        .expect("nothing came")
        .expect("the stream ended")
        .expect("a message")
}
