//! hyper's own upgrades on dormant's HTTP/1 connections: `hyper::upgrade::on`
//! and what is built on it (axum's `WebSocketUpgrade`, CONNECT tunnels), over every transport,
//! on connections that slept (PARKED and DORMANT) before the upgrade request,
//! with real clients (hyper's with upgrades, tokio-tungstenite).

use std::convert::Infallible;

use crate::common::axum::{bye, echo};
use crate::common::ladder::ladder;
use crate::common::rungs::{DORMANT_AFTER, all_closed, client_runtime, sleep_until, woke};
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{AsyncStream, Transport, over_every_transport, read_until};
use axum::extract::ws::WebSocketUpgrade;
use axum::routing::{any, get};
use dormant::Rung;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite;

over_every_transport!(
    hyper_upgrade_on_works_after_a_sleep,
    hyper_upgrade_declined_goes_on_as_http,
    hyper_connect_tunnels_after_a_sleep,
    axum_websocket_works_after_a_sleep,
    axum_websocket_over_http2_after_a_sleep,
);

/// Answers an `Upgrade: echo` request with `101` and echoes the upgraded
/// stream through `hyper::upgrade::on`; `/decline` asks for the upgrade
/// and answers `200`; anything else `200 plain`.
async fn hyper_echo(mut req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() == http::Method::CONNECT {
        // A tunnel, as a CONNECT proxy opens one: `2xx`, then bytes.
        spawn_echo(hyper::upgrade::on(&mut req));
        return Ok(Response::new(Full::default()));
    }
    if !req.headers().contains_key(header::UPGRADE) {
        return Ok(Response::new(Full::new(Bytes::from_static(b"plain"))));
    }
    let on = hyper::upgrade::on(&mut req);
    if req.uri().path() == "/decline" {
        // Declined: the connection serves HTTP on. (hyper keeps a declined
        // upgrade pending until its next upgrade request or its end, so
        // its future is dropped here, as hyper's own server needs it.)
        drop(on);
        return Ok(Response::new(Full::new(Bytes::from_static(b"declined"))));
    }
    spawn_echo(on);
    let res = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "echo")
        .body(Full::default())
        .unwrap();
    Ok(res)
}

/// Echoes the stream hyper hands to `on`, in a task of its own.
fn spawn_echo(on: hyper::upgrade::OnUpgrade) {
    tokio::spawn(async move {
        let mut stream = TokioIo::new(on.await.expect("hyper's upgrade"));
        let mut buf = [0; 1024];
        while let Ok(n @ 1..) = stream.read(&mut buf).await {
            if stream.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
}

/// hyper's HTTP/1 client, with upgrades, on `io`.
async fn hyper_client(
    io: Box<dyn AsyncStream>,
) -> hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("handshake");
    tokio::spawn(conn.with_upgrades());
    send
}

/// `send`, once its connection is ready for the next request (hyper's
/// HTTP/1 client takes one at a time).
async fn ready(
    send: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
) -> &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>> {
    send.ready().await.expect("the connection closed");
    send
}

/// `GET /`, answered `plain`.
async fn get_plain(send: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>) {
    let req = Request::get("/").header(header::HOST, "localhost");
    let res = ready(send)
        .await
        .send_request(req.body(Empty::new()).unwrap())
        .await;
    let body = res.unwrap().into_body().collect().await.unwrap();
    assert_eq!(body.to_bytes(), "plain");
}

fn upgrade_request(path: &str) -> Request<Empty<Bytes>> {
    Request::get(path)
        .header(header::HOST, "localhost")
        .header(header::CONNECTION, "upgrade")
        .header(header::UPGRADE, "echo")
        .body(Empty::new())
        .unwrap()
}

/// A plain request, then a pause until the connection sleeps (PARKED, and
/// on a second connection DORMANT), then an upgrade through
/// `hyper::upgrade::on`: the stream echoes, and the connection counts as
/// upgraded, not open.
fn hyper_upgrade_on_works_after_a_sleep<T: Transport>() {
    upgraded_after_a_sleep::<T>(|| upgrade_request("/"), StatusCode::SWITCHING_PROTOCOLS);
}

/// `CONNECT` through `hyper::upgrade::on`, as a CONNECT proxy serves it, on
/// a connection that slept (PARKED, then DORMANT) after a request: the
/// tunnel echoes.
fn hyper_connect_tunnels_after_a_sleep<T: Transport>() {
    let connect = || {
        Request::connect("example.com:443")
            .header(header::HOST, "example.com:443")
            .body(Empty::new())
            .unwrap()
    };
    upgraded_after_a_sleep::<T>(connect, StatusCode::OK);
}

/// On a new connection per rung: `GET /`, a pause until the connection
/// sleeps to the rung, then `request`, answered with `status`; the stream
/// hyper's client gets echoes, the request woke the connection, and it
/// counts as upgraded.
fn upgraded_after_a_sleep<T: Transport>(
    request: impl Fn() -> Request<Empty<Bytes>>,
    status: StatusCode,
) {
    let srv = T::serve(&ladder(DORMANT_AFTER), service_fn(hyper_echo));
    client_runtime().block_on(async {
        for (i, rung) in [Rung::Parked, Rung::Dormant].into_iter().enumerate() {
            let mut send = hyper_client(T::connect_http1(&srv.addr).await).await;
            get_plain(&mut send).await;
            sleep_until(&srv, rung, srv.stats());
            let before = srv.stats();
            let res = timeout(
                CLIENT_TIMEOUT,
                ready(&mut send).await.send_request(request()),
            )
            .await
            .expect("no response")
            .expect("the upgrade request");
            assert_eq!(res.status(), status, "from {rung:?}");
            let mut stream = TokioIo::new(hyper::upgrade::on(res).await.expect("client upgrade"));
            for message in [&b"hello"[..], &[0xff; 700], b"after the sleep"] {
                stream.write_all(message).await.unwrap();
                let mut back = vec![0; message.len()];
                timeout(CLIENT_TIMEOUT, stream.read_exact(&mut back))
                    .await
                    .expect("no echo")
                    .unwrap();
                assert_eq!(back, message, "from {rung:?}");
            }
            woke(&srv, rung, before);
            srv.wait_for("the upgrade counted", |s| s.upgrades == i as u64 + 1);
        }
    });
    all_closed(&srv);
}

/// A handler that asks hyper for the upgrade and answers `200` instead:
/// the connection goes on serving HTTP.
fn hyper_upgrade_declined_goes_on_as_http<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), service_fn(hyper_echo));
    client_runtime().block_on(async {
        let mut send = hyper_client(T::connect_http1(&srv.addr).await).await;
        for _ in 0..2 {
            let res = ready(&mut send)
                .await
                .send_request(upgrade_request("/decline"))
                .await
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            let body = res.into_body().collect().await.unwrap();
            assert_eq!(body.to_bytes(), "declined");
            get_plain(&mut send).await;
        }
    });
    assert_eq!(srv.stats().upgrades, 0);
    all_closed(&srv);
}

/// An axum `Router` with a WebSocket echo route (axum's own
/// `WebSocketUpgrade`), served through `TowerToHyperService`.
fn axum_app() -> axum::Router {
    axum::Router::new()
        .route("/", get(|| async { "hi" }))
        .route(
            // `any`: over HTTP/2 the upgrade is a CONNECT (axum's docs).
            "/ws",
            any(|ws: WebSocketUpgrade| async move { ws.on_upgrade(echo) }),
        )
        .route("/bye", get(bye))
}

/// A WebSocket client (tokio-tungstenite) on a connection that served a
/// request and slept before the handshake (PARKED, DORMANT): text and binary messages echo,
/// a close gets its code back; a server's close code reaches the client.
fn axum_websocket_works_after_a_sleep<T: Transport>() {
    use tungstenite::protocol::CloseFrame as ClientClose;
    use tungstenite::protocol::frame::coding::CloseCode;

    let srv = T::serve(
        &ladder(DORMANT_AFTER),
        dormant::TowerToHyperService::new(axum_app()),
    );
    client_runtime().block_on(async {
        for (i, rung) in [Rung::Parked, Rung::Dormant].into_iter().enumerate() {
            let mut io = T::connect_http1(&srv.addr).await;
            let before = srv.stats();
            io.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .await
                .unwrap();
            read_until(&mut io, b"\r\n\r\nhi").await;
            sleep_until(&srv, rung, before);
            let before = srv.stats();
            let (mut ws, res) = timeout(
                CLIENT_TIMEOUT,
                tokio_tungstenite::client_async("ws://localhost/ws", io),
            )
            .await
            .expect("no handshake")
            .expect("the WebSocket handshake");
            assert_eq!(
                res.status(),
                StatusCode::SWITCHING_PROTOCOLS,
                "from {rung:?}"
            );
            let sent = [
                tungstenite::Message::text("hello"),
                tungstenite::Message::binary(vec![7; 70_000]),
                tungstenite::Message::text("é".repeat(1000)),
            ];
            for message in sent {
                ws.send(message.clone()).await.unwrap();
                let back = timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no echo");
                assert_eq!(back.unwrap().unwrap(), message, "from {rung:?}");
            }
            let close = ClientClose {
                code: CloseCode::Normal,
                reason: "done".into(),
            };
            ws.close(Some(close)).await.unwrap();
            let back = timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no close");
            match back {
                Some(Ok(tungstenite::Message::Close(Some(frame)))) => {
                    assert_eq!(frame.code, CloseCode::Normal)
                }
                other => panic!("from {rung:?}: {other:?}"),
            }
            woke(&srv, rung, before);
            srv.wait_for("the upgrade counted", |s| s.upgrades == i as u64 + 1);
        }

        let io = T::connect_http1(&srv.addr).await;
        let (mut ws, _) = tokio_tungstenite::client_async("ws://localhost/bye", io)
            .await
            .expect("the WebSocket handshake");
        match timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no close") {
            Some(Ok(tungstenite::Message::Close(Some(frame)))) => {
                assert_eq!(u16::from(frame.code), 4001);
                assert_eq!(frame.reason, "bye");
            }
            other => panic!("{other:?}"),
        }
    });
    all_closed(&srv);
}

/// A client WebSocket frame (masked, as a client's must be): `opcode`,
/// final, with `payload`.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() < 126);
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// WebSockets over HTTP/2 (RFC 8441) with `http2_enable_connect_protocol`:
/// h2's client opens an extended CONNECT (`:protocol websocket`) to axum's
/// `WebSocketUpgrade` on a connection that slept (PARKED, DORMANT) after a
/// request; a text frame echoes, a close gets its code back, and the
/// connection serves requests on other streams meanwhile.
fn axum_websocket_over_http2_after_a_sleep<T: Transport>() {
    let mut builder = ladder(DORMANT_AFTER);
    builder.http2_enable_connect_protocol(true);
    let srv = T::serve(&builder, dormant::TowerToHyperService::new(axum_app()));
    client_runtime().block_on(async {
        for rung in [Rung::Parked, Rung::Dormant] {
            let io = T::connect_h2(&srv.addr).await.into_inner();
            let (send, conn) = h2::client::handshake(io).await.expect("h2 handshake");
            tokio::spawn(conn);
            let mut send = send.ready().await.unwrap();
            let get = Request::get("http://localhost/").body(()).unwrap();
            let (res, _) = send.send_request(get, true).unwrap();
            let mut body = res.await.unwrap().into_body();
            assert_eq!(body.data().await.unwrap().unwrap(), "hi");
            // The server's SETTINGS came before its response.
            assert!(send.is_extended_connect_protocol_enabled());
            let before = srv.stats();
            sleep_until(&srv, rung, before);
            let before = srv.stats();

            let mut connect = Request::connect("http://localhost/ws")
                .header("sec-websocket-version", "13")
                .body(())
                .unwrap();
            connect
                .extensions_mut()
                .insert(h2::ext::Protocol::from_static("websocket"));
            let mut send = send.ready().await.unwrap();
            let (res, mut tunnel) = send.send_request(connect, false).unwrap();
            let res = timeout(CLIENT_TIMEOUT, res)
                .await
                .expect("no response")
                .unwrap();
            assert_eq!(res.status(), StatusCode::OK, "from {rung:?}");
            woke(&srv, rung, before);
            let mut from_server = res.into_body();
            let mut received = Vec::new();
            tunnel
                .send_data(client_frame(0x1, b"over h2").into(), false)
                .unwrap();
            let echo = [&[0x81, 7][..], b"over h2"].concat();
            while received.len() < echo.len() {
                let data = timeout(CLIENT_TIMEOUT, from_server.data())
                    .await
                    .expect("no echo")
                    .expect("the tunnel ended")
                    .unwrap();
                let _ = from_server.flow_control().release_capacity(data.len());
                received.extend_from_slice(&data);
            }
            assert_eq!(received, echo, "from {rung:?}");

            // Another stream is served while the tunnel is open.
            let get = Request::get("http://localhost/").body(()).unwrap();
            let (res, _) = send.send_request(get, true).unwrap();
            let mut body = res.await.unwrap().into_body();
            assert_eq!(body.data().await.unwrap().unwrap(), "hi");

            tunnel
                .send_data(client_frame(0x8, &1000u16.to_be_bytes()).into(), false)
                .unwrap();
            received.clear();
            while received.len() < 4 {
                let data = timeout(CLIENT_TIMEOUT, from_server.data())
                    .await
                    .expect("no close")
                    .expect("the tunnel ended")
                    .unwrap();
                received.extend_from_slice(&data);
            }
            assert_eq!(received, [0x88, 2, 0x03, 0xe8], "from {rung:?}");
        }
    });
    all_closed(&srv);
}
