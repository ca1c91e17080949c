//! WebSockets (RFC 6455) whose idle sockets keep no task and no buffer,
//! and still receive messages sent to them.
//!
//! A WebSocket server usually gives each socket a task that loops on
//! `socket.recv().await`, with its read buffer; most sockets are idle most
//! of the time, so that is what a server with many of them pays for. Here a
//! socket is a *fold* over its messages: the handler gets the socket's own
//! state, a message and a [`Sender`], and returns the state; between
//! messages the socket sleeps in the server's parking lot with that state,
//! the protocol's few bytes, and no task.
//!
//! ```no_run
//! use std::convert::Infallible;
//! use http::{Request, Response};
//! use dormant::ws::{Message, WebSocketUpgrade};
//!
//! async fn handle(mut req: Request<dormant::Body>) -> Result<Response<String>, Infallible> {
//!     let ws = match WebSocketUpgrade::from_request(&mut req) {
//!         Ok(ws) => ws,
//!         Err(rejection) => return Ok(rejection.response()),
//!     };
//!     // Each socket counts the messages it echoed: its state is a `u64`.
//!     let accepted = ws.on_message(0u64, |count, message, sender| async move {
//!         match message {
//!             Message::Text(text) => {
//!                 let _ = sender.send(format!("{count}: {text}"));
//!                 count + 1
//!             }
//!             _ => count,
//!         }
//!     });
//!     Ok(accepted.into())
//! }
//! ```
//!
//! # Sending to sleeping sockets
//!
//! A [`Sender`] (from [`WebSocketUpgrade::sender`], or the one each
//! handler call gets) sends to its socket from anywhere, and never waits.
//! Broadcasting — what servers with many idle sockets mostly do — is a
//! loop of sends: a message to a sleeping socket is written to its socket
//! right away, without waking it, so it needs no task and no buffer; only
//! a socket whose client does not read (its kernel send buffer is full)
//! gets a task and a queue, bounded by
//! [`max_queued`](WebSocketUpgrade::max_queued). Past that bound the send
//! fails and, by default, the socket is closed ([`WhenFull`]): a client
//! that stopped reading does not hold the others back. A [`Frame`] encodes
//! a message once for any number of sockets.
//!
//! A [`Topic`] is a set of sockets to publish to: sockets join and leave
//! from their handlers (or wherever their sender is), a publish sends to
//! every member without holding the topic's lock while it sends (a join
//! or another topic's publish never waits for its sends), and a socket
//! that closes leaves its topics by itself. A [`Sender`] is the socket's
//! identity ([`Sender::id`], `Eq`, `Hash`) for apps that keep their own
//! maps; [`Server::stats`](crate::Server::stats) counts the sockets open,
//! asleep, and the bytes queued for them
//! ([`WebSocketStats`](crate::WebSocketStats)).
//!
//! # Keep-alive and idle sockets
//!
//! [`ping_interval`](WebSocketUpgrade::ping_interval) has the parking lot
//! ping a sleeping socket whose client has been silent that long: the lot
//! writes the ping where the socket sleeps, from its deadline queues (no
//! timer and no task per socket), and the client's pong wakes the socket
//! just long enough to read it. A ping left unanswered past
//! [`ping_timeout`](WebSocketUpgrade::ping_timeout), or that the socket
//! cannot take, closes it (1001). [`idle_timeout`](WebSocketUpgrade::idle_timeout)
//! closes a socket whose client sent no message for that long, pongs or
//! not.
//!
//! # The protocol
//!
//! Pings are answered with pongs where the socket sleeps (it wakes, answers
//! and sleeps again, without calling the handler); text is checked to be
//! UTF-8 (1007 otherwise); fragmented messages are joined, and may arrive
//! across sleeps (a sleeping socket keeps what arrived of a message, and
//! nothing between messages); messages and frames over the limits are
//! refused with 1009 before their payload is read
//! ([`max_message_size`](WebSocketUpgrade::max_message_size),
//! [`max_frame_size`](WebSocketUpgrade::max_frame_size)); unmasked client
//! frames, reserved bits and opcodes, and broken control frames with 1002.
//! A close frame from the client is answered with its code and the
//! connection closed; [`Sender::close`] starts the closing handshake from
//! the server, and the socket waits for the client's answer (at most
//! [`close_timeout`](WebSocketUpgrade::close_timeout)). A closing socket
//! reads and drops what the client still sends until it closes, so that
//! no reset destroys the close frame. When the server shuts down, every
//! socket is sent 1001, and the graceful shutdown waits for those
//! handshakes (within its grace period). The handler's last call is
//! always [`Message::Close`], whatever ended the socket.
//!
//! Compression (`permessage-deflate`, feature `ws-deflate`) is negotiated
//! with no context takeover both ways: each message is compressed alone,
//! so a sleeping socket keeps no compressor, and a [`Frame`] is compressed
//! once for every socket that sends it (see `WebSocketUpgrade::compression`,
//! with the feature). Without the feature, offers are declined.
//! WebSockets over HTTP/2 (RFC 8441: an extended CONNECT, on a server with
//! [`http2_enable_connect_protocol`](crate::Builder::http2_enable_connect_protocol),
//! which `dormant::axum::serve` turns on) are served on their stream, awake:
//! an HTTP/2 stream lives inside hyper's connection, so such a socket keeps
//! its task between messages, as on any server, and the lot neither pings
//! it nor counts it; everything else is the same.
//!
//! # With axum
//!
//! With the `axum` feature, [`WebSocketUpgrade`] is an axum extractor and
//! [`Rejection`] a response. An axum app swaps
//! `axum::extract::ws::WebSocketUpgrade` for this one, and
//! `ws.on_upgrade(|socket| async move { while let Some(msg) =
//! socket.recv().await { … } })` for `ws.on_message(state, |state, msg,
//! sender| async move { …; state })`, and is served by
//! `dormant::axum::serve`:
//!
//! ```no_run
//! # #[cfg(feature = "axum")]
//! # mod app {
//! use axum::response::IntoResponse;
//! use dormant::ws::{Message, WebSocketUpgrade};
//!
//! async fn echo(ws: WebSocketUpgrade) -> impl IntoResponse {
//!     ws.on_message((), |(), message, sender| async move {
//!         if let Message::Text(text) = message {
//!             let _ = sender.send(text);
//!         }
//!     })
//! }
//!
//! pub fn router() -> axum::Router {
//!     axum::Router::new().route("/ws", axum::routing::get(echo))
//! }
//! # }
//! ```
//!
//! # Where it works
//!
//! The socket sleeps in the lot of the dormant server that upgraded it, on
//! any transport (TCP, Unix sockets, TLS). [`WebSocketUpgrade::from_request`]
//! needs a request that server serves: on another server it is refused
//! (`426`).

#[cfg(feature = "axum")]
mod axum;
#[cfg(feature = "ws-deflate")]
mod deflate;
mod frame;
mod handshake;
mod link;
mod message;
mod reader;
mod socket;
mod topic;

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderValue;
use http::{Request, Response};

pub use frame::Frame;
pub use handshake::Rejection;
pub use link::{SendError, Sender, WhenFull};
pub use message::{CloseCode, CloseFrame, Message};
pub use topic::{Published, Topic};

use link::{Link, SocketSettings, keep_alive_millis};
use reader::Rules;

/// What a checked upgrade request offers.
#[derive(Debug)]
pub(crate) struct Offered {
    /// How the socket opens: over HTTP/1.1, with the
    /// `Sec-WebSocket-Accept` value of its key; or over HTTP/2.
    opening: handshake::Opening,
    /// Its `Sec-WebSocket-Protocol` values.
    protocols: Vec<HeaderValue>,
    /// Its `Sec-WebSocket-Extensions` values.
    #[cfg(feature = "ws-deflate")]
    extensions: Vec<HeaderValue>,
}

/// Checks the handshake: what the request offers.
pub(crate) fn check(
    method: &http::Method,
    version: http::Version,
    headers: &http::HeaderMap,
    extensions: &http::Extensions,
) -> Result<Offered, Rejection> {
    let protocol = extensions.get::<hyper::ext::Protocol>();
    let opening = handshake::check(method, version, headers, protocol)?;
    let all = |name| headers.get_all(name).iter().cloned().collect();
    Ok(Offered {
        opening,
        protocols: all(http::header::SEC_WEBSOCKET_PROTOCOL),
        #[cfg(feature = "ws-deflate")]
        extensions: all(http::header::SEC_WEBSOCKET_EXTENSIONS),
    })
}

/// How the socket's connection is handed over once the answer is written.
#[derive(Debug)]
enum Upgrade {
    /// An HTTP/1.1 upgrade to dormant's lot, where the socket sleeps.
    Lot(crate::upgrade::OnUpgrade),
    /// An HTTP/2 stream (RFC 8441), hyper's.
    H2(hyper::upgrade::OnUpgrade),
}

/// A request to upgrade to a WebSocket, checked: answer it with
/// [`on_message`](Self::on_message).
#[derive(Debug)]
#[must_use = "the upgrade happens only when answered with `on_message`"]
pub struct WebSocketUpgrade {
    upgrade: Upgrade,
    offered: Offered,
    protocol: Option<HeaderValue>,
    /// Whether `permessage-deflate` may be negotiated.
    #[cfg(feature = "ws-deflate")]
    compression: bool,
    settings: SocketSettings,
    ping_interval: Option<Duration>,
    ping_timeout: Duration,
    idle_timeout: Option<Duration>,
    link: Arc<Link>,
}

impl WebSocketUpgrade {
    /// Checks that `req` asks for a WebSocket, and takes its connection's
    /// upgrade.
    ///
    /// # Errors
    ///
    /// A [`Rejection`] to answer with: for a request that is neither an
    /// HTTP/1.1 WebSocket upgrade nor an HTTP/2 extended CONNECT for one
    /// (`426`), that asks for another version than 13 (`426`), that is not
    /// a `GET` over HTTP/1.1 (`405`) or has no valid `Sec-WebSocket-Key`
    /// (`400`); and for a request that did not come through a dormant
    /// server (`426`: the socket could not sleep).
    pub fn from_request<B>(req: &mut Request<B>) -> Result<Self, Rejection> {
        let offered = check(req.method(), req.version(), req.headers(), req.extensions())?;
        let version = req.version();
        Self::new(offered, req.extensions_mut(), version)
    }

    pub(crate) fn new(
        offered: Offered,
        extensions: &mut http::Extensions,
        version: http::Version,
    ) -> Result<Self, Rejection> {
        let upgrade = match offered.opening {
            handshake::Opening::H2 => extensions
                .remove::<hyper::upgrade::OnUpgrade>()
                .map(Upgrade::H2)
                .ok_or_else(|| {
                    Rejection::upgrade("the HTTP/2 connection does not serve extended CONNECT")
                })?,
            handshake::Opening::Http1 { .. } => crate::upgrade::on_extensions(extensions, version)
                .map(Upgrade::Lot)
                .map_err(|_| {
                    Rejection::upgrade("the request did not come through a dormant server")
                })?,
        };
        let settings = SocketSettings {
            rules: Rules {
                frame: 16 << 20,
                message: 64 << 20,
                inflate: false,
            },
            max_queued: 1 << 20,
            close_timeout: 5_000,
            when_full: WhenFull::default(),
        };
        Ok(WebSocketUpgrade {
            upgrade,
            offered,
            protocol: None,
            #[cfg(feature = "ws-deflate")]
            compression: true,
            settings,
            ping_interval: None,
            ping_timeout: Duration::from_secs(20),
            idle_timeout: None,
            link: Link::new(settings),
        })
    }

    /// Chooses the subprotocol: the first of the client's
    /// (`Sec-WebSocket-Protocol`, in its order) that is among `protocols`.
    /// Without one in common, the answer names none, and the client
    /// decides whether to go on.
    pub fn protocols<I>(mut self, protocols: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<Cow<'static, str>>,
    {
        let ours: Vec<Cow<'static, str>> = protocols.into_iter().map(Into::into).collect();
        self.protocol = handshake::choose_protocol(&self.offered.protocols, &ours);
        self
    }

    /// The subprotocol chosen by [`protocols`](Self::protocols).
    pub fn selected_protocol(&self) -> Option<&HeaderValue> {
        self.protocol.as_ref()
    }

    /// Sets the largest message the client may send, all its fragments
    /// together (at most 4 GiB); a longer one closes the socket with 1009.
    ///
    /// Default is 64 MiB.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.settings.rules.message = u32::try_from(bytes).unwrap_or(u32::MAX);
        self
    }

    /// Sets the largest frame the client may send (at most 4 GiB); a longer
    /// one closes the socket with 1009.
    ///
    /// Default is 16 MiB.
    pub fn max_frame_size(mut self, bytes: usize) -> Self {
        self.settings.rules.frame = u32::try_from(bytes).unwrap_or(u32::MAX);
        self
    }

    /// Sets how many bytes of messages may wait for a socket whose client
    /// does not read (see [`Sender`]); at most 4 GiB.
    ///
    /// Default is 1 MiB.
    pub fn max_queued(mut self, bytes: usize) -> Self {
        self.settings.max_queued = u32::try_from(bytes).unwrap_or(u32::MAX);
        self
    }

    /// Sets how often a sleeping socket whose client has been silent is
    /// pinged, where it sleeps (the lot writes the ping; the socket does
    /// not wake). A client that does not answer within the
    /// [`ping_timeout`](Self::ping_timeout), or whose socket cannot take
    /// the ping, is closed (1001). `None` sends no pings.
    ///
    /// The lot acts on its deadlines in batches, up to a sixteenth of the
    /// server's shortest timer late (its `dormant_after`, by default: 62 ms
    /// of 1 s; at most 100 ms): pings and timeouts of a few seconds or more
    /// are what it is made for.
    ///
    /// Default is `None`.
    pub fn ping_interval(mut self, every: impl Into<Option<Duration>>) -> Self {
        self.ping_interval = every.into();
        self
    }

    /// Sets how long a ping waits for an answer (any bytes from the
    /// client) before the socket is closed.
    ///
    /// Default is 20 seconds.
    pub fn ping_timeout(mut self, timeout: Duration) -> Self {
        self.ping_timeout = timeout;
        self
    }

    /// Sets how long a socket may go without a message from its client
    /// (pings and pongs do not count) before it is closed (1001). The
    /// lot looks at sleeping sockets every `ping_interval` (or a quarter
    /// of this timeout without pings), so a socket closes up to that much
    /// after its time. `None` keeps quiet sockets open.
    ///
    /// Default is `None`.
    pub fn idle_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.idle_timeout = timeout.into();
        self
    }

    /// Sets how long a closing socket waits for its client: for its close
    /// frame once the server sent its own, and for its last frames to be
    /// written. Past it, the connection is let go.
    ///
    /// Default is 5 seconds.
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.settings.close_timeout = keep_alive_millis(Some(timeout));
        self
    }

    /// Sets whether the socket may be compressed (`permessage-deflate`,
    /// RFC 7692), when the client offers it (browsers do): negotiated with
    /// no context takeover both ways, so that a sleeping socket keeps no
    /// compressor, the client's messages may come compressed, and the
    /// server's messages go compressed when that makes them smaller, each
    /// compressed once for every socket ([`Frame`]). A client that limits
    /// the server's window gets them uncompressed.
    ///
    /// Default is `true`.
    #[cfg(feature = "ws-deflate")]
    pub fn compression(mut self, on: bool) -> Self {
        self.compression = on;
        self
    }

    /// Sets what a send does when the socket's queue is full.
    ///
    /// Default is [`WhenFull::Close`].
    pub fn when_full(mut self, policy: WhenFull) -> Self {
        self.settings.when_full = policy;
        self
    }

    /// Returns a sender to the socket, usable at once: what is sent before
    /// the upgrade completes goes out right after the `101` response.
    pub fn sender(&self) -> Sender {
        Sender::new(self.link.clone())
    }

    /// Accepts the upgrade: returns the `101 Switching Protocols` response
    /// to answer the request with ([`Accepted`]). Once it is written, the socket sleeps
    /// with `state`; each message the client sends wakes it and runs
    /// `handler` with the state, the message and a [`Sender`] to the
    /// socket, and the state the handler returns is the socket's until the
    /// next message. The handler's last call is with [`Message::Close`].
    ///
    /// The state is kept for as long as the socket lives, asleep: keep it
    /// small (an id, a few counters, an `Arc` to what sockets share).
    ///
    /// # Panics
    ///
    /// When called outside a tokio runtime: the upgrade completes in a
    /// task of its own.
    pub fn on_message<S, F, Fut>(self, state: S, handler: F) -> Accepted
    where
        S: Send + 'static,
        F: FnMut(S, Message, Sender) -> Fut + Send + 'static,
        Fut: Future<Output = S> + Send + 'static,
    {
        let WebSocketUpgrade {
            upgrade,
            offered,
            protocol,
            settings,
            ping_interval,
            ping_timeout,
            idle_timeout,
            link,
            #[cfg(feature = "ws-deflate")]
            compression,
        } = self;
        #[cfg(feature = "ws-deflate")]
        let (settings, extensions) = {
            let mut settings = settings;
            let (negotiated, answer) = match compression {
                true => deflate::negotiate(&offered.extensions),
                false => (deflate::Negotiated::Off, None),
            };
            if let deflate::Negotiated::On { send } = negotiated {
                settings.rules.inflate = true;
                link.send_compressed(send);
            }
            (settings, answer)
        };
        #[cfg(not(feature = "ws-deflate"))]
        let extensions = None;
        link.set_settings(settings);
        link.keep_alive.set(
            keep_alive_millis(ping_interval),
            keep_alive_millis(Some(ping_timeout)),
            keep_alive_millis(idle_timeout),
        );
        match upgrade {
            Upgrade::Lot(upgrade) => tokio::spawn(socket::upgraded(link, state, handler, upgrade)),
            Upgrade::H2(upgrade) => tokio::spawn(socket::over_h2(link, state, handler, upgrade)),
        };
        Accepted {
            opening: offered.opening,
            protocol,
            extensions,
        }
    }
}

/// The `101 Switching Protocols` answer to a WebSocket upgrade
/// ([`WebSocketUpgrade::on_message`]): a handler returns it as its
/// response, [`into_response`](Self::into_response) (or `.into()`) for a
/// `Response<B>` of any body type with a default, or as is from an axum
/// handler (feature `axum`).
#[derive(Debug)]
#[must_use = "the upgrade happens only once this response is sent"]
pub struct Accepted {
    opening: handshake::Opening,
    protocol: Option<HeaderValue>,
    /// The `Sec-WebSocket-Extensions` answer, if one was negotiated.
    extensions: Option<HeaderValue>,
}

impl Accepted {
    /// The response, with an empty body.
    pub fn into_response<B: Default>(self) -> Response<B> {
        handshake::response(self.opening, self.protocol, self.extensions)
    }
}

impl<B: Default> From<Accepted> for Response<B> {
    fn from(accepted: Accepted) -> Self {
        accepted.into_response()
    }
}
