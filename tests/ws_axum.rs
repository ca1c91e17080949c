//! `dormant::ws::WebSocketUpgrade` as an axum extractor (features `ws` and
//! `axum`): an axum `Router` whose WebSocket route takes dormant's extractor
//! in place of axum's, served by `dormant::axum` over every transport, with
//! tokio-tungstenite's client: messages across sleeps, axum's `State`
//! beside the extractor, the subprotocol chosen, and the rejection of a
//! request that is not an upgrade. And WebSockets over HTTP/2 (RFC 8441)
//! from an axum app served by `dormant::axum::serve`, with axum's own
//! extractor and with dormant's, as `axum::serve` serves them.

use std::sync::{Arc, Mutex};

use crate::common::rungs::client_runtime;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Transport, over_every_transport};
use crate::common::wait::wait;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use dormant::ws::{Message, Sender, WebSocketUpgrade};
use futures_util::{SinkExt, StreamExt};
use http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

over_every_transport!(
    an_axum_route_serves_sleeping_websockets,
    a_request_that_is_not_an_upgrade_is_rejected,
);

/// The app's state: every socket's sender.
#[derive(Clone, Default)]
struct Senders(Arc<Mutex<Vec<Sender>>>);

/// The route as an axum handler writes it: with axum's extractor it would
/// read `ws.on_upgrade(|socket| ...)`; here each message runs the closure,
/// with the socket's state (a count of its messages).
async fn chat(ws: WebSocketUpgrade, State(senders): State<Senders>) -> impl IntoResponse {
    let ws = ws.protocols(["chat.v2", "chat.v1"]);
    senders.0.lock().unwrap().push(ws.sender());
    ws.on_message(0u32, |count, message, sender| async move {
        if let Message::Text(text) = message {
            let _ = sender.send(format!("{count} {text}"));
        }
        count + 1
    })
}

fn app(senders: Senders) -> axum::Router {
    axum::Router::new()
        .route("/chat", get(chat))
        .with_state(senders)
}

fn an_axum_route_serves_sleeping_websockets<T: Transport>() {
    let senders = Senders::default();
    let srv = T::serve(
        &dormant::Server::builder(),
        dormant::axum::App::new(app(senders.clone())),
    );
    client_runtime().block_on(async {
        let io = T::connect_http1(&srv.addr).await;
        let mut req = "ws://localhost/chat".into_client_request().unwrap();
        let offered = "chat.v1, chat.v2".parse().unwrap();
        req.headers_mut().insert("sec-websocket-protocol", offered);
        let (mut ws, res) = timeout(CLIENT_TIMEOUT, tokio_tungstenite::client_async(req, io))
            .await
            .expect("no handshake")
            .expect("the handshake");
        // The client's first choice that the server speaks.
        assert_eq!(res.headers()["sec-websocket-protocol"], "chat.v1");
        let asleep = || {
            let senders = senders.0.lock().unwrap();
            senders.len() == 1 && senders[0].is_asleep()
        };
        for i in 0..3 {
            wait("the socket asleep", asleep);
            ws.send(WsMessage::text(format!("hello {i}")))
                .await
                .unwrap();
            let echo = timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no echo");
            assert_eq!(
                echo.unwrap().unwrap(),
                WsMessage::text(format!("{i} hello {i}"))
            );
        }
        // A broadcast through the app's state reaches the sleeping socket.
        wait("the socket asleep", asleep);
        senders.0.lock().unwrap()[0].send("from the app").unwrap();
        let news = timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no news");
        assert_eq!(news.unwrap().unwrap(), WsMessage::text("from the app"));
    });
}

fn a_request_that_is_not_an_upgrade_is_rejected<T: Transport>() {
    let srv = T::serve(
        &dormant::Server::builder(),
        dormant::axum::App::new(app(Senders::default())),
    );
    client_runtime().block_on(async {
        let mut io = T::connect_http1(&srv.addr).await;
        io.write_all(b"GET /chat HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        timeout(CLIENT_TIMEOUT, io.read_to_string(&mut response))
            .await
            .expect("no response")
            .unwrap();
        let status = StatusCode::UPGRADE_REQUIRED;
        assert!(
            response.starts_with(&format!("HTTP/1.1 {status}")),
            "{response}"
        );
        assert!(
            response.contains("sec-websocket-version: 13\r\n"),
            "{response}"
        );
        assert!(
            response.ends_with(
                "not a WebSocket upgrade: no `Connection: upgrade` with `Upgrade: websocket`"
            ),
            "{response}"
        );
    });
}

/// `dormant::axum::serve` turns HTTP/2's extended CONNECT on, as
/// `axum::serve` does: hyper's HTTP/2 client (h2c, prior knowledge) opens
/// a WebSocket on a route with axum's own `WebSocketUpgrade` on both
/// servers, and on a route with dormant's on dormant's; each echoes.
#[test]
fn websockets_over_http2_as_axum_serve_has_them() {
    use axum::extract::ws::{Message as AxumMessage, WebSocketUpgrade as AxumUpgrade};
    use http_body_util::Empty;
    use hyper::body::Bytes;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio_tungstenite::WebSocketStream;
    use tokio_tungstenite::tungstenite::protocol::Role;

    async fn axum_echo(ws: AxumUpgrade) -> impl IntoResponse {
        ws.on_upgrade(|mut socket| async move {
            while let Some(Ok(message)) = socket.recv().await {
                if let AxumMessage::Text(text) = message {
                    let _ = socket.send(AxumMessage::text(format!("axum {text}"))).await;
                }
            }
        })
    }
    async fn dormant_echo(ws: WebSocketUpgrade) -> impl IntoResponse {
        ws.on_message((), |(), message, sender| async move {
            if let Message::Text(text) = message {
                let _ = sender.send(format!("dormant {text}"));
            }
        })
    }
    let router = || {
        axum::Router::new()
            .route("/axum", axum::routing::any(axum_echo))
            .route("/dormant", axum::routing::any(dormant_echo))
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ours = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let theirs = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (ours_addr, theirs_addr) = (ours.local_addr().unwrap(), theirs.local_addr().unwrap());
        tokio::spawn(dormant::axum::serve(ours, router()).into_future());
        tokio::spawn(axum::serve(theirs, router()).into_future());
        let cases = [
            (ours_addr, "/dormant", "dormant hi"),
            (theirs_addr, "/axum", "axum hi"),
            (ours_addr, "/axum", "axum hi"),
        ];
        for (addr, path, answer) in cases {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut send, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await
                    .expect("the h2 handshake");
            tokio::spawn(conn);
            let req = http::Request::builder()
                .method(http::Method::CONNECT)
                .uri(format!("http://localhost{path}"))
                .header("sec-websocket-version", "13")
                .extension(hyper::ext::Protocol::from_static("websocket"))
                .body(Empty::<Bytes>::new())
                .unwrap();
            let res = timeout(CLIENT_TIMEOUT, send.send_request(req))
                .await
                .expect("an answer")
                .unwrap_or_else(|e| panic!("{path} on {addr}: {e:?}"));
            assert_eq!(res.status(), StatusCode::OK, "{path} on {addr}");
            let upgraded = hyper::upgrade::on(res).await.expect("the stream");
            let mut ws =
                WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;
            ws.send(WsMessage::text("hi")).await.unwrap();
            let echo = timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no echo");
            assert_eq!(
                echo.unwrap().unwrap(),
                WsMessage::text(answer),
                "{path} on {addr}"
            );
        }
    });
}
