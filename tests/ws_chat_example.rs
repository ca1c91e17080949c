//! `examples/chat.rs`, served over every transport to real WebSocket
//! clients (tokio-tungstenite): what one member says, every member hears,
//! while their sockets sleep between messages; a member that leaves is
//! announced; the page is served.

#[allow(
    dead_code,
    unreachable_pub,
    reason = "the example's main is not run here"
)]
#[path = "../examples/chat.rs"]
mod chat;

use std::sync::Arc;

use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{AsyncStream, Transport, over_every_transport};
use crate::common::wait::wait;
use futures_util::{SinkExt, StreamExt};
use hyper::service::service_fn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

over_every_transport!(members_hear_each_other_across_sleeps);

type Client = WebSocketStream<Box<dyn AsyncStream>>;

/// Reads until `text` comes.
async fn hears(ws: &mut Client, text: &str) {
    loop {
        let message = timeout(CLIENT_TIMEOUT, ws.next())
            .await
            .unwrap_or_else(|_| panic!("never heard {text:?}"))
            .expect("the stream ended")
            .expect("a message");
        if message == Message::text(text) {
            return;
        }
    }
}

fn members_hear_each_other_across_sleeps<T: Transport>() {
    let room = Arc::new(chat::Room::default());
    let service = {
        let room = room.clone();
        service_fn(move |req| chat::handle(room.clone(), req))
    };
    let srv = T::serve(&dormant::Server::builder(), service);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut members = Vec::new();
        for _ in 0..3 {
            let io = T::connect_http1(&srv.addr).await;
            let (ws, _) = tokio_tungstenite::client_async("ws://localhost/chat", io)
                .await
                .expect("the handshake");
            members.push(ws);
        }
        wait("three members", || room.len() == 3);
        hears(&mut members[0], "#3 joined (3 here)").await;
        for round in 0..3 {
            wait("every socket asleep", || room.asleep() == 3);
            let speaker = round % 3;
            let text = format!("hello from {speaker}, round {round}");
            members[speaker]
                .send(Message::text(text.clone()))
                .await
                .unwrap();
            for ws in &mut members {
                hears(ws, &format!("#{}: {text}", speaker + 1)).await;
            }
        }
        let mut gone = members.pop().unwrap();
        gone.close(None).await.unwrap();
        for ws in &mut members {
            hears(ws, "#3 left").await;
        }
        wait("two members", || room.len() == 2);
        // The page that chats from.
        let mut io = T::connect_http1(&srv.addr).await;
        io.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut page = String::new();
        io.read_to_string(&mut page).await.unwrap();
        assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page}");
        assert!(page.contains("new WebSocket(`ws://${location.host}/chat`)"));
    });
}
