//! `dormant::ws::WebSocketUpgrade` as an axum extractor (features `ws` and
//! `axum`): an axum `Router` whose WebSocket route takes dormant's extractor
//! in place of axum's, served by `dormant::axum` over every transport, with
//! tokio-tungstenite's client: messages across sleeps, axum's `State`
//! beside the extractor, the subprotocol chosen, and the rejection of a
//! request that is not an upgrade.
#![cfg(all(feature = "ws", feature = "axum"))]

mod common {
    #[allow(dead_code, reason = "the raw HTTP/1 client is not used here")]
    pub(crate) mod client;
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
}

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use common::timeout::CLIENT_TIMEOUT;
use common::transport::{Transport, over_every_transport};
use common::wait::wait;
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

fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
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
