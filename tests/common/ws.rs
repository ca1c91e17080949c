//! The WebSocket server the `ws_*` tests run: an echo on `dormant::ws`
//! whose sockets the test watches ([`Room`]), with routes of different
//! settings.

use std::convert::Infallible;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dormant::ws::{CloseCode, Message, Sender, Topic, WebSocketUpgrade};
use http::Request;
use hyper::service::service_fn;

use super::runtime::Servable;
use super::timeout::CLIENT_TIMEOUT;
use super::wait::wait;

/// The largest message on `/small`.
pub(crate) const SMALL: usize = 1 << 20;

/// How often `/ping` and `/ping-soon` ping.
pub(crate) const PING_EVERY: Duration = Duration::from_millis(20);

/// What the tests see of the server's sockets: their senders, in the
/// order they connected, and what their handlers were given.
#[derive(Clone)]
pub(crate) struct Room {
    pub(crate) senders: Arc<Mutex<Vec<Sender>>>,
    events: Arc<Mutex<mpsc::Sender<String>>>,
    /// The topic the sockets of `/topic` join.
    pub(crate) topic: Topic,
}

impl Room {
    pub(crate) fn new() -> (Room, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel();
        let room = Room {
            senders: Arc::default(),
            events: Arc::new(Mutex::new(tx)),
            topic: Topic::new(),
        };
        (room, rx)
    }

    pub(crate) fn sender(&self, i: usize) -> Sender {
        self.senders.lock().unwrap()[i].clone()
    }

    pub(crate) fn wait_asleep(&self, n: usize) {
        wait("sockets asleep", || {
            let senders = self.senders.lock().unwrap();
            senders.len() == n && senders.iter().all(Sender::is_asleep)
        });
    }
}

/// Echoes every message; `close CODE` closes with that code. `/small`
/// refuses messages over [`SMALL`] and queues at most 256 KiB. A socket of
/// `/topic` joins the room's topic, and `leave` has it leave (answered
/// `left`).
pub(crate) fn echo(room: Room) -> impl Servable<String> {
    service_fn(move |mut req: Request<dormant::Body>| {
        let room = room.clone();
        async move {
            let ws = match WebSocketUpgrade::from_request(&mut req) {
                Ok(ws) => ws,
                Err(rejection) => return Ok::<_, Infallible>(rejection.response()),
            };
            let ws = match req.uri().path() {
                "/small" => ws.max_message_size(SMALL).max_queued(256 << 10),
                // Pinged often; the answer may take long.
                "/ping" => ws.ping_interval(PING_EVERY).ping_timeout(CLIENT_TIMEOUT),
                // Pinged often; the answer must come soon.
                "/ping-soon" => ws.ping_interval(PING_EVERY).ping_timeout(PING_EVERY),
                // Long enough that a talking client never comes near it.
                // Waits little for a client's answer to a close.
                "/close-soon" => ws.close_timeout(PING_EVERY * 5),
                "/idle" => ws.idle_timeout(PING_EVERY * 15),
                _ => ws,
            };
            room.senders.lock().unwrap().push(ws.sender());
            if req.uri().path() == "/topic" {
                room.topic.subscribe(&ws.sender());
            }
            let events = room.events.clone();
            let topic = room.topic.clone();
            Ok(ws
                .on_message((), move |(), message, sender| {
                    let (events, topic) = (events.clone(), topic.clone());
                    async move {
                        match message {
                            Message::Text(text) if text == "leave" => {
                                assert!(topic.unsubscribe(&sender), "a member");
                                sender.send("left").unwrap();
                            }
                            Message::Text(text) => match text.strip_prefix("close ") {
                                Some(code) => {
                                    let code = CloseCode::from(code.parse::<u16>().unwrap());
                                    sender.close(code, "asked to").unwrap();
                                }
                                None => sender.send(text).unwrap(),
                            },
                            Message::Binary(bytes) => sender.send(bytes).unwrap(),
                            Message::Close(frame) => {
                                let event = match frame {
                                    Some(frame) => {
                                        format!("closed {} {}", frame.code, frame.reason)
                                    }
                                    None => "closed".to_owned(),
                                };
                                events.lock().unwrap().send(event).unwrap();
                            }
                        }
                    }
                })
                .into())
        }
    })
}

/// The handler's next report (see [`echo`]), waited for (bounded).
pub(crate) fn next_event(events: &mpsc::Receiver<String>) -> String {
    events.recv_timeout(CLIENT_TIMEOUT).expect("no event")
}
