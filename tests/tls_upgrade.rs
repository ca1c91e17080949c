//! Upgrades over TLS (`dormant::tls::TlsListener`): `upgrade::on` hands
//! the handler the TLS stream with the plaintext hyper read past the
//! upgrade request, wss:// WebSockets (tokio-tungstenite on both ends,
//! tokio-rustls under the client, certificates made with rcgen), and
//! upgraded TLS streams that sleep in the parking lot with their session
//! between messages: woken by each message, by the client's close (a close
//! frame, `close_notify`, a bare TCP close), by graceful shutdown, and at
//! once when their session holds bytes no socket event will announce.
//! `examples/websocket.rs`'s handler serves wss:// from PEM files.
//!
//! Built only with a crypto provider (features `tls` or `tls-ring`), as
//! tests/tls_session.rs. The server's runtime outlives `serve` (`Serve`),
//! so upgraded streams, which outlive `serve`, can be watched after it
//! returned.
//!
//! One test counts the process's descriptors: it runs alone in a process
//! of its own ([`in_own_process`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::fds::{fd_count, wait_for_fds};
use crate::common::ladder::ladder;
use crate::common::process::in_own_process;
use crate::common::rungs::none_open;
use crate::common::runtime::{ResponseBody, Servable, bind_tcp};
use crate::common::servers::{Hooks, Serve, serve_on};
use crate::common::sleepers::{SWITCHED, Sleeper, Sleepers, UPGRADE};
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::tls::{
    APPLICATION_DATA, Cert, Tap, block, client_config, client_rt, records, tls13,
};
use crate::common::wait::wait;
use crate::upgrade_examples::websocket;

use dormant::Rung::Dormant;
use dormant::tls::TlsListener;
use dormant::upgrade::{self, Lot, Upgraded, Woken};
use futures_util::{SinkExt, StreamExt};
use http::header::{self, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::version::{TLS12, TLS13};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// Serves `service` over TLS with `cert` (from its PEM files) on
/// 127.0.0.1.
fn serve_tls<B: ResponseBody>(cert: &Cert, service: impl Servable<B>) -> Serve<SocketAddr> {
    let config = cert.config();
    // Parks after 3 ms, goes dormant after 10 ms: the connection that asks
    // for the upgrade may come from the lot.
    serve_on(
        &ladder(Duration::from_millis(10)),
        service,
        2,
        (),
        || async {
            let (tcp, addr) = bind_tcp().await;
            (TlsListener::new(tcp, config), addr)
        },
        Hooks::default(),
    )
}

/// The client's TLS stream.
type Tls = tokio_rustls::client::TlsStream<Tap>;

/// A wss:// client.
type Ws = WebSocketStream<Tls>;

/// Connects to `addr` and completes the TLS handshake with `localhost`.
fn tls_connect(addr: SocketAddr, config: &Arc<ClientConfig>) -> Tls {
    let tcp = block("connect", TcpStream::connect(addr)).expect("connect");
    tcp.set_nodelay(true).unwrap();
    let connector = TlsConnector::from(config.clone());
    let name = ServerName::try_from("localhost").unwrap();
    block("TLS handshake", connector.connect(name, Tap::new(tcp))).expect("TLS handshake")
}

/// Runs `write` on `tls` with the socket corked, then sends every byte it
/// wrote in one TCP write; returns the TLS records that were in it (each
/// one's content type and length).
fn in_one_write(tls: &mut Tls, write: impl FnOnce(&mut Tls)) -> Vec<(u8, usize)> {
    tls.get_mut().0.held = Some(Vec::new());
    write(tls);
    let held = tls.get_mut().0.held.take().unwrap();
    let tcp = &mut tls.get_mut().0.tcp;
    block("one TCP write", tcp.write_all(&held)).expect("one TCP write");
    records(&held)
}

/// Writes `bytes` as one TLS record and flushes.
fn tls_send(tls: &mut Tls, bytes: &[u8]) {
    block("write", async {
        tls.write_all(bytes).await?;
        tls.flush().await
    })
    .expect("write");
}

/// Sends a TLS 1.3 KeyUpdate (asking the server for one too).
fn tls_key_update(tls: &mut Tls) {
    tls.get_mut()
        .1
        .refresh_traffic_keys()
        .expect("refresh_traffic_keys");
    block("flush KeyUpdate", tls.flush()).expect("flush KeyUpdate");
}

/// Reads plaintext until `buf` holds at least `n` bytes.
fn tls_read_until(tls: &mut Tls, buf: &mut Vec<u8>, n: usize) {
    while buf.len() < n {
        let mut chunk = [0u8; 4096];
        let got = block("read", tls.read(&mut chunk)).expect("read");
        assert!(
            got > 0,
            "closed after {:?}, want {n} bytes",
            String::from_utf8_lossy(buf)
        );
        buf.extend_from_slice(&chunk[..got]);
    }
}

/// Reads a response head; returns it (`date` removed) and the bytes read
/// past it.
fn tls_read_head(tls: &mut Tls) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return (without_date(&buf), rest);
        }
        let want = buf.len() + 1;
        tls_read_until(tls, &mut buf, want);
    }
}

/// A response head as text, without its `date` line.
fn without_date(head: &[u8]) -> String {
    String::from_utf8_lossy(head)
        .split_inclusive("\r\n")
        .filter(|line| !line.starts_with("date:"))
        .collect()
}

/// Opens a WebSocket over `tls` (tungstenite's handshake).
fn ws_handshake(tls: Tls) -> Ws {
    let (ws, res) = block(
        "WebSocket handshake",
        tokio_tungstenite::client_async("wss://localhost/chat", tls),
    )
    .expect("WebSocket handshake");
    assert_eq!(res.status(), StatusCode::SWITCHING_PROTOCOLS);
    ws
}

/// A wss:// client connected to `addr`.
fn wss(addr: SocketAddr, config: &Arc<ClientConfig>) -> Ws {
    ws_handshake(tls_connect(addr, config))
}

fn send(ws: &mut Ws, message: Message) {
    block("send", ws.send(message)).expect("send");
}

fn next_message(ws: &mut Ws) -> Option<Result<Message, WsError>> {
    block("next message", ws.next())
}

/// Sends `message` and reads its echo.
fn echoed(ws: &mut Ws, message: Message) {
    send(ws, message.clone());
    let echo = next_message(ws)
        .expect("an echo, not the end")
        .expect("an echo");
    assert_eq!(echo, message);
}

/// Three wss:// clients of `addr`, each with an echo, then asleep in the
/// lot (`sleepers` counts them).
fn three_asleep(addr: SocketAddr, config: &Arc<ClientConfig>, sleepers: &Sleepers) -> Vec<Ws> {
    let clients = (0..3)
        .map(|i| {
            let mut ws = wss(addr, config);
            echoed(&mut ws, Message::text(format!("hello {i}")));
            ws
        })
        .collect();
    wait("all asleep", || sleepers.sleeping() == 3);
    clients
}

/// A WebSocket handshake request, and the answer to it.
const HANDSHAKE: &[u8] = b"GET /chat HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\n\
    Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
const SWITCHED_WS: &str = "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\n\
    upgrade: websocket\r\nsec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";

/// The client's text frame "early", masked.
fn early_frame() -> Vec<u8> {
    let mask = [1u8, 2, 3, 4];
    let mut frame = vec![0x81, 0x80 | 5];
    frame.extend_from_slice(&mask);
    frame.extend(b"early".iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
    frame
}

/// How the client sends the first frame with its upgrade request.
#[derive(Clone, Copy, Debug)]
enum Early {
    /// Request and frame in one TLS record: hyper reads the frame with the
    /// request, and the hand-off carries it (`read_buf`).
    OneRecord,
    /// Request and frame each in a TLS record of its own, both in one TCP
    /// write: hyper reads the request's record, and the frame's may still
    /// be in the session when the stream is handed off (decrypted when
    /// hyper wrote the 101 through it, but not read).
    TwoRecords,
}

/// Connects, sends the upgrade request with the frame "early" as `early`
/// says, and reads the 101 and the echo of "early"; returns the WebSocket.
/// `server` says what the server's stream reported, for a failure.
fn upgrade_with_early_frame(
    addr: SocketAddr,
    config: &Arc<ClientConfig>,
    early: Early,
    server: impl Fn() -> String,
) -> Ws {
    let mut tls = tls_connect(addr, config);
    let frame = early_frame();
    let sent = in_one_write(&mut tls, |tls| match early {
        Early::OneRecord => tls_send(tls, &[HANDSHAKE, &frame].concat()),
        Early::TwoRecords => {
            tls_send(tls, HANDSHAKE);
            tls_send(tls, &frame);
        }
    });
    let want = match early {
        Early::OneRecord => 1,
        Early::TwoRecords => 2,
    };
    assert_eq!(sent.len(), want, "{early:?}: {sent:?}");
    assert!(sent.iter().all(|&(kind, _)| kind == APPLICATION_DATA));
    let (head, rest) = tls_read_head(&mut tls);
    assert_eq!(head, SWITCHED_WS, "{early:?}");
    let mut ws = block(
        "WebSocket over the upgraded stream",
        WebSocketStream::from_partially_read(tls, rest, Role::Client, None),
    );
    match next_message(&mut ws) {
        Some(Ok(echo)) => assert_eq!(echo, Message::text("early"), "{early:?}"),
        other => panic!(
            "{early:?}: the echo of the early frame: {other:?}; the server's stream: {}",
            server()
        ),
    }
    ws
}

/// Puts the WebSocket's stream to sleep in the lot; each wake-up serves
/// one message (an echo, a pong) and puts it to sleep again.
fn sleep_ws(lot: Lot, stream: Upgraded, state: Sleeper) {
    lot.clone().sleep(stream, move |woken| async move {
        state.woken();
        match woken {
            Woken::Readable(stream) => serve_one(lot, stream, state).await,
            Woken::Shutdown(stream) => going_away(stream, state).await,
            Woken::Eof(_) => state.report("eof"),
            Woken::Failed(error) => state.report(format!("failed: {error}")),
            _ => state.report("unknown"),
        }
    });
}

/// The server's end of a WebSocket over `stream`, for one wake-up.
async fn server_ws(stream: Upgraded) -> WebSocketStream<Upgraded> {
    WebSocketStream::from_raw_socket(stream, Role::Server, Some(websocket::config())).await
}

/// Serves one message, then puts the stream to sleep again.
///
/// tungstenite lives for this message only: the test's clients send a
/// message only once the last one was answered, so its read buffer holds
/// nothing when it is dropped, and the stream holds what arrived since.
async fn serve_one(lot: Lot, stream: Upgraded, state: Sleeper) {
    let mut ws = server_ws(stream).await;
    match ws.next().await {
        Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => {
            if let Err(error) = ws.send(message).await {
                return state.report(format!("send failed: {error}"));
            }
        }
        // tungstenite queued the pong: out it goes before the sleep.
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => {
            if let Err(error) = ws.flush().await {
                return state.report(format!("flush failed: {error}"));
            }
        }
        Some(Ok(Message::Close(frame))) => {
            state.report(match frame {
                Some(frame) => format!("close {} {}", u16::from(frame.code), frame.reason),
                None => "close".to_owned(),
            });
            return finish(ws, &state).await;
        }
        Some(Ok(other)) => return state.report(format!("unexpected {other:?}")),
        Some(Err(error)) => return state.report(format!("error: {error}")),
        None => return state.report("end"),
    }
    sleep_ws(lot, ws.into_inner(), state);
}

/// Graceful shutdown: a close frame with 1001 (going away), then the end
/// of the session.
async fn going_away(stream: Upgraded, state: Sleeper) {
    state.report("shutdown");
    let mut ws = server_ws(stream).await;
    let frame = CloseFrame {
        code: CloseCode::Away,
        reason: "server shutting down".into(),
    };
    if let Err(error) = ws.close(Some(frame)).await {
        return state.report(format!("close failed: {error}"));
    }
    finish(ws, &state).await;
}

/// Completes a close handshake begun by either side (tungstenite sends
/// its reply, or reads the peer's), then ends the TLS session with
/// `close_notify`.
async fn finish(mut ws: WebSocketStream<Upgraded>, state: &Sleeper) {
    let closing = async {
        while let Some(Ok(_)) = ws.next().await {}
        ws.into_inner().shutdown().await
    };
    match tokio::time::timeout(CLIENT_TIMEOUT, closing).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => state.report(format!("shutdown failed: {error}")),
        Err(_) => state.report("the close handshake timed out"),
    }
}

/// A WebSocket service whose upgraded streams sleep in the lot between
/// messages ([`sleep_ws`]); other requests get an empty `200`. A hand-off
/// reports whether the stream is a TLS one and the plaintext handed over
/// with it.
fn sleeping_wss() -> (impl Servable<Empty<Bytes>>, Sleepers) {
    let (sleepers, reports) = Sleepers::new();
    let service = service_fn(move |mut req: Request<dormant::Body>| {
        let (Some(key), Ok(upgrade)) = (
            req.headers().get(SEC_WEBSOCKET_KEY).cloned(),
            upgrade::on(&mut req),
        ) else {
            return std::future::ready(Ok::<_, Infallible>(Response::new(Empty::new())));
        };
        let (reports, state) = (reports.clone(), reports.sleeper());
        tokio::spawn(async move {
            let parts = upgrade.await.expect("hand-off");
            reports.handed_off(
                format!(
                    "tls={} read_buf={:?}",
                    parts.stream.as_tls().is_some(),
                    parts.read_buf
                ),
                &parts.lot,
            );
            sleep_ws(parts.lot.clone(), Upgraded::from(parts), state);
        });
        std::future::ready(Ok(Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header(CONNECTION, "upgrade")
            .header(header::UPGRADE, "websocket")
            .header(SEC_WEBSOCKET_ACCEPT, derive_accept_key(key.as_bytes()))
            .body(Empty::new())
            .unwrap()))
    });
    (service, sleepers)
}

/// 1. A wss:// WebSocket whose upgraded TLS stream sleeps in the lot
///    between messages, over TLS 1.3 and 1.2: the upgrade request comes to
///    a keep-alive connection that went DORMANT (its session in the lot)
///    after a first request; then text, a binary message of
///    several records, a ping and more text each wake the stream from the
///    lot exactly once, are answered exactly (the session, its keys and
///    sequence numbers, survived each sleep), and it sleeps again; over
///    TLS 1.3 a KeyUpdate wakes it and a message under the new keys is
///    answered. No connection stays counted by the server, and no pool
///    buffer is held.
#[test]
fn wss_sleeps_in_the_lot_between_messages() {
    let cert = Cert::new();
    for version in [&TLS13, &TLS12] {
        let (service, s) = sleeping_wss();
        let srv = serve_tls(&cert, service);
        let mut tls = tls_connect(srv.addr, &client_config(&[&cert], &[version], &[]));
        tls_send(&mut tls, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let (head, rest) = tls_read_head(&mut tls);
        assert_eq!(
            (head.as_str(), rest.as_slice()),
            ("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", &b""[..])
        );
        srv.wait_for("dormant before the upgrade", |st| {
            st.connections[Dormant] == 1 && st.dormancies == 1
        });
        let mut ws = ws_handshake(tls);
        assert_eq!(s.hand_off(), r#"tls=true read_buf=b"""#);
        wait("asleep after the hand-off", || s.sleeping() == 1);
        srv.wait_for("handed off", |st| st.upgrades == 1 && none_open(st));
        assert_eq!(s.wakes.load(SeqCst), 0, "{version:?}: nothing woke it yet");

        let big: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let ping = Bytes::from_static(b"are you there?");
        let messages = [
            (Message::text("hello"), Message::text("hello")),
            (Message::binary(big.clone()), Message::binary(big)),
            (Message::Ping(ping.clone()), Message::Pong(ping)),
            (Message::text("after a pong"), Message::text("after a pong")),
        ];
        for (i, (message, answer)) in messages.into_iter().enumerate() {
            send(&mut ws, message);
            let got = next_message(&mut ws)
                .expect("an answer")
                .expect("an answer");
            assert_eq!(got, answer, "{version:?}");
            wait("asleep again", || s.sleeping() == 1);
            assert_eq!(
                s.wakes.load(SeqCst),
                i + 1,
                "{version:?}: one wake per message"
            );
        }
        if version == &TLS13 {
            // A KeyUpdate alone wakes the stream (only decrypting tells
            // it from a message), which answers it with its own and waits
            // in its task; the next message, under the new keys, is
            // served in that wake.
            tls_key_update(ws.get_mut());
            wait("woken by the KeyUpdate", || {
                s.sleeping() == 0 && s.wakes.load(SeqCst) == 5
            });
            echoed(&mut ws, Message::text("under new keys"));
            wait("asleep again", || s.sleeping() == 1);
            assert_eq!(s.wakes.load(SeqCst), 5, "{version:?}");
        }
        let st = srv.stats();
        assert_eq!(
            (
                st.accepted,
                st.upgrades,
                st.requests,
                st.tls_handshakes,
                st.pool.in_use
            ),
            (1, 1, 2, 1, 0),
            "{version:?}: {st:?}"
        );
        assert!(none_open(&st), "{st:?}");
        assert_eq!(s.drops.get(), 0, "the state lives while the stream sleeps");
        assert!(s.events.try_recv().is_err(), "nothing ended");
    }
}

/// The event of a WebSocket whose client left without a close frame.
const RESET: &str = "error: WebSocket protocol error: Connection reset without closing handshake";

/// 2. Clients closing while their upgraded TLS streams sleep: with a
///    close frame (the server replies, then ends the session with
///    `close_notify`: the client sees its reply and a clean end), with
///    `close_notify` and a TCP close but no close frame, and with a bare
///    TCP close (neither). A TLS session cannot tell a close without
///    decrypting, so each one wakes its stream, whose read finds the end;
///    each state is dropped once, nothing sleeps, and every server-side
///    descriptor is released.
#[test]
fn client_close_while_asleep_releases_the_stream() {
    if !in_own_process() {
        return;
    }
    let cert = Cert::new();
    let config = tls13(&cert);
    let (service, s) = sleeping_wss();
    let srv = serve_tls(&cert, service);
    // Warm up the runtimes (lazily opened descriptors), then the baseline.
    let mut warm = wss(srv.addr, &config);
    echoed(&mut warm, Message::text("warm"));
    drop(warm);
    assert_eq!(s.next(), RESET);
    wait("warm-up state dropped", || s.drops.get() == 1);
    let baseline = fd_count();

    let mut clients = three_asleep(srv.addr, &config, &s);
    // The test's 3 sockets and the server's 3.
    assert_eq!(fd_count(), baseline + 6);

    let mut bare = clients.pop().unwrap();
    let mut notify = clients.pop().unwrap();
    let mut framed = clients.pop().unwrap();

    let frame = CloseFrame {
        code: CloseCode::Normal,
        reason: "done".into(),
    };
    block("close frame", framed.close(Some(frame.clone()))).expect("close frame");
    assert_eq!(s.next(), "close 1000 done");
    let reply = next_message(&mut framed).expect("the server's reply");
    assert_eq!(reply.expect("a close frame"), Message::Close(Some(frame)));
    assert!(
        next_message(&mut framed).is_none(),
        "the session ends with close_notify after the close handshake"
    );

    block("close_notify and FIN", notify.get_mut().shutdown()).expect("close_notify");
    assert_eq!(s.next(), RESET);

    // Neither a close frame nor `close_notify`: just the TCP close.
    block("FIN", bare.get_mut().get_mut().0.tcp.shutdown()).expect("FIN");
    assert_eq!(s.next(), RESET);

    wait("states dropped", || s.drops.get() == 4);
    assert_eq!(s.sleeping(), 0);
    // The server's 3 are closed; the test's 3 are left.
    wait_for_fds(baseline + 3, "after the clients closed");
    drop((framed, notify, bare));
    wait_for_fds(baseline, "after the clients dropped their sockets");
    let st = srv.stats();
    assert_eq!((st.upgrades, st.pool.in_use), (4, 0), "{st:?}");
    assert!(none_open(&st), "{st:?}");
    assert!(s.events.try_recv().is_err(), "each called back once");
}

/// Sends the upgrade request with the frame "early" as `early` says to a
/// server whose streams sleep at once ([`sleeping_wss`]): the frame is
/// answered first (the plaintext handed over with the stream, or held in
/// its session, wakes it at once), then a later message; one wake each.
fn early_frame_to_a_sleeping_websocket(early: Early) {
    let cert = Cert::new();
    let (service, s) = sleeping_wss();
    let srv = serve_tls(&cert, service);
    let mut ws = upgrade_with_early_frame(srv.addr, &tls13(&cert), early, || {
        format!("{:?}", s.events.recv_timeout(CLIENT_TIMEOUT))
    });
    let with_frame = format!("tls=true read_buf={:?}", Bytes::from(early_frame()));
    let hand_off = s.hand_off();
    match early {
        Early::OneRecord => assert_eq!(hand_off, with_frame),
        // hyper read the first record only, or the close watch read the
        // second ahead while the request was answered.
        Early::TwoRecords => assert!(
            hand_off == with_frame || hand_off == r#"tls=true read_buf=b"""#,
            "{hand_off}"
        ),
    }
    wait("asleep after the early frame", || s.sleeping() == 1);
    echoed(&mut ws, Message::text("late"));
    wait("asleep again", || s.sleeping() == 1);
    assert_eq!(s.wakes.load(SeqCst), 2, "one wake per message");
    assert!(s.events.try_recv().is_err(), "nothing ended");
    srv.wait_for("handed off", |st| st.upgrades == 1 && none_open(st));
}

/// 3. The first WebSocket frame sent in the same TLS record as the
///    upgrade request: hyper reads it with the request, the hand-off
///    carries it exactly, and it wakes the stream at once.
#[test]
fn frame_in_the_record_of_the_upgrade_request() {
    early_frame_to_a_sleeping_websocket(Early::OneRecord);
}

/// 4. Graceful shutdown while wss:// streams sleep: `serve` returns
///    without waiting for them; each is handed back to its callback, which
///    sends a close frame with 1001 (going away); each client sees it,
///    replies, and sees the session end cleanly (`close_notify`), and
///    every state is dropped.
#[test]
fn graceful_shutdown_while_asleep_closes_each_websocket() {
    let cert = Cert::new();
    let config = tls13(&cert);
    let (service, s) = sleeping_wss();
    let mut srv = serve_tls(&cert, service);
    let mut clients = three_asleep(srv.addr, &config, &s);

    srv.stop();
    let away = Message::Close(Some(CloseFrame {
        code: CloseCode::Away,
        reason: "server shutting down".into(),
    }));
    for ws in &mut clients {
        let close = next_message(ws).expect("a close frame");
        assert_eq!(close.expect("a close frame"), away);
        assert!(
            next_message(ws).is_none(),
            "the session ends with close_notify after the close handshake"
        );
    }
    for _ in 0..3 {
        assert_eq!(s.next(), "shutdown");
    }
    wait("states dropped", || s.drops.get() == 3);
    assert_eq!(s.sleeping(), 0);
    assert!(s.events.try_recv().is_err(), "each called back once");
}

/// 5. `examples/websocket.rs` serves wss:// given a certificate and a key
///    (PEM files, as its command line takes them, loaded the way it loads
///    them): the handshake, echoes of text and of a binary message of
///    several records, and the client's close.
#[test]
fn websocket_example_serves_wss() {
    let cert = Cert::new();
    let srv = serve_tls(&cert, service_fn(websocket::handle));
    let mut ws = wss(srv.addr, &tls13(&cert));
    let big: Vec<u8> = (0..50_000u32).map(|i| i as u8).collect();
    for message in [Message::text("hello"), Message::binary(big)] {
        echoed(&mut ws, message);
    }
    block("close", ws.close(None)).expect("close");
    let reply = next_message(&mut ws).expect("the server's reply");
    assert_eq!(reply.expect("a close frame"), Message::Close(None));
    srv.wait_for("handed off", |st| st.upgrades == 1 && none_open(st));
}

/// 6. The example's handler answers the first frame sent with the
///    upgrade request, in the request's TLS record and in a record of its
///    own in the same TCP write (tungstenite reads the plaintext the
///    hand-off carries, then the session's), then goes on.
#[test]
fn websocket_example_answers_a_frame_sent_with_the_upgrade_request() {
    let cert = Cert::new();
    let srv = serve_tls(&cert, service_fn(websocket::handle));
    let config = tls13(&cert);
    let mut open = Vec::new();
    for early in [Early::OneRecord, Early::TwoRecords] {
        let mut ws = upgrade_with_early_frame(srv.addr, &config, early, || {
            "(the example reports nothing)".to_owned()
        });
        echoed(&mut ws, Message::text(format!("{early:?}, then late")));
        open.push(ws);
    }
    srv.wait_for("handed off", |st| st.upgrades == 2 && none_open(st));
}

/// 7. The example over TLS closes a too big message with a close frame
///    with 1009 (message too big), not a dropped connection: it
///    half-closes the session (`close_notify`) and reads on until the
///    client has its close frame and leaves.
#[test]
fn websocket_example_closes_with_1009_over_tls() {
    let cert = Cert::new();
    let srv = serve_tls(&cert, service_fn(websocket::handle));
    let mut ws = wss(srv.addr, &tls13(&cert));
    let limit = websocket::config()
        .max_message_size
        .expect("the example limits messages");
    send(&mut ws, Message::binary(vec![7u8; limit + 1]));
    let close = next_message(&mut ws).expect("a close frame");
    match close {
        Ok(Message::Close(Some(frame))) => {
            assert_eq!(frame.code, CloseCode::Size, "{frame}");
            assert_eq!(frame.reason, "message too big");
        }
        other => panic!("expected a close frame with 1009, got {other:?}"),
    }
    assert!(
        next_message(&mut ws).is_none(),
        "the session ends with close_notify"
    );
}

// Bytes a sleeping stream's session holds: a TLS stream can go to sleep
// with plaintext or a whole record that no socket event will announce,
// which must wake it at once, as an `Upgraded`'s leftover bytes do.

/// 8. The first WebSocket frame in a TLS record of its own, in the same
///    TCP write as the upgrade request: hyper reads the request's record
///    only, and the session decrypts the frame's when hyper writes the
///    101. The stream is handed off with that plaintext in its session;
///    put to sleep at once, it must be handed back at once, not failed.
#[test]
fn frame_in_a_record_of_its_own_after_the_upgrade_request() {
    early_frame_to_a_sleeping_websocket(Early::TwoRecords);
}

/// Puts `stream` to sleep in the lot; each wake-up reads once
/// (`read_pooled`) and echoes what it read but dashes, which it drops: a
/// read of dashes alone writes nothing. Reports how a wake-up that is not
/// a read ended.
fn sleep_echo_but_dashes(lot: Lot, stream: Upgraded, events: Sender<String>) {
    lot.clone().sleep(stream, move |woken| async move {
        let mut stream = match woken {
            Woken::Readable(stream) => stream,
            other => return drop(events.send(format!("woken: {other:?}"))),
        };
        match stream.read_pooled().await {
            Ok(Some(bytes)) => {
                let echo: Vec<u8> = bytes.iter().copied().filter(|&b| b != b'-').collect();
                drop(bytes);
                if !echo.is_empty() {
                    if let Err(error) = stream.write_all(&echo).await {
                        return drop(events.send(format!("write failed: {error}")));
                    }
                }
                sleep_echo_but_dashes(lot, stream, events);
            }
            Ok(None) => drop(events.send("end".to_owned())),
            Err(error) => drop(events.send(format!("read failed: {error}"))),
        }
    });
}

/// An upgrade service (the echo protocol of [`UPGRADE`]) whose streams
/// sleep as [`sleep_echo_but_dashes`] has them; returns it, the lot once a
/// stream was handed off, and what the streams report.
fn echo_but_dashes() -> (
    impl Servable<Empty<Bytes>>,
    Arc<Mutex<Option<Lot>>>,
    mpsc::Receiver<String>,
) {
    let (events_tx, events) = mpsc::channel();
    let lot_seen = Arc::new(Mutex::new(None));
    let service = {
        let lot_seen = lot_seen.clone();
        service_fn(move |mut req: Request<dormant::Body>| {
            let upgrade = upgrade::on(&mut req).expect("an upgrade request");
            let (lot_seen, events) = (lot_seen.clone(), events_tx.clone());
            tokio::spawn(async move {
                let parts = upgrade.await.expect("hand-off");
                *lot_seen.lock().unwrap() = Some(parts.lot.clone());
                let lot = parts.lot.clone();
                sleep_echo_but_dashes(lot, Upgraded::from(parts), events);
            });
            async {
                Ok::<_, Infallible>(
                    Response::builder()
                        .status(StatusCode::SWITCHING_PROTOCOLS)
                        .header(CONNECTION, "upgrade")
                        .header(header::UPGRADE, "echo")
                        .body(Empty::new())
                        .unwrap(),
                )
            }
        })
    };
    (service, lot_seen, events)
}

/// Reads `n` bytes of plaintext; if they do not come, panics saying what
/// the server's stream reported.
fn read_echo(tls: &mut Tls, n: usize, events: &mpsc::Receiver<String>) -> Vec<u8> {
    let mut buf = vec![0; n];
    let read = client_rt()
        .block_on(async { tokio::time::timeout(CLIENT_TIMEOUT, tls.read_exact(&mut buf)).await });
    match read {
        Ok(Ok(_)) => buf,
        Ok(Err(error)) => panic!(
            "the echo: {error}; the server's stream: {:?}",
            events.recv_timeout(CLIENT_TIMEOUT)
        ),
        Err(_) => panic!(
            "the echo: timed out; the server's stream: {:?}",
            events.try_recv()
        ),
    }
}

/// Sends `records` (two TLS records) in one TCP write to a stream of
/// [`echo_but_dashes`] asleep in the lot, and reads the echo `want`; then
/// the stream sleeps again. Three times, on one connection.
fn records_together_at_a_sleeping_stream(records: [&str; 2], want: &str) {
    let cert = Cert::new();
    let (service, lot, events) = echo_but_dashes();
    let srv = serve_tls(&cert, service);
    let sleeping = || lot.lock().unwrap().as_ref().map_or(0, Lot::sleeping);
    let mut tls = tls_connect(srv.addr, &tls13(&cert));
    tls_send(&mut tls, UPGRADE.as_bytes());
    let (head, rest) = tls_read_head(&mut tls);
    assert_eq!((head.as_str(), rest.as_slice()), (SWITCHED, &b""[..]));
    wait("asleep", || sleeping() == 1);
    for _ in 0..3 {
        let sent = in_one_write(&mut tls, |tls| {
            for record in records {
                tls_send(tls, record.as_bytes());
            }
        });
        assert_eq!(sent.len(), 2, "{records:?}: {sent:?}");
        assert_eq!(read_echo(&mut tls, want.len(), &events), want.as_bytes());
        wait("asleep again", || sleeping() == 1);
    }
    assert!(events.try_recv().is_err(), "nothing ended");
}

/// 9. Two TLS records reach a sleeping upgraded stream in one TCP write.
///    It wakes, reads once (the first record), and writes the echo: to
///    encrypt it, the session first processes what it holds, and decrypts
///    the second record. Going back to sleep with that plaintext unread,
///    the stream must be handed back at once, as with leftover bytes, not
///    failed (which closes it and loses the bytes): both are answered.
#[test]
fn plaintext_decrypted_by_a_write_wakes_the_sleeping_stream_at_once() {
    records_together_at_a_sleeping_stream(["first ", "second"], "first second");
}

/// 10. As 9, but the first record needs no answer ("-"), so nothing is
///     written: the second stays a whole record in the session, its bytes
///     already read from the socket with the first. Going back to sleep
///     with it, the stream must be handed back at once: no socket event
///     will ever announce those bytes.
#[test]
fn a_record_left_in_the_session_wakes_the_sleeping_stream_at_once() {
    records_together_at_a_sleeping_stream(["-", "x"], "x");
}
