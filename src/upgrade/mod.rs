//! HTTP/1.1 upgrades (`101 Switching Protocols`, `CONNECT`): the raw
//! connection handed to the handler, and upgraded streams that sleep in the
//! parking lot while idle.
//!
//! # Two ways to upgrade
//!
//! dormant serves hyper's HTTP/1 connections with hyper's upgrades on, so
//! both work on every transport and from every rung:
//!
//! - **hyper's `hyper::upgrade::on`**, and everything built on it: axum's
//!   `WebSocketUpgrade`, `hyper-tungstenite`, CONNECT proxies. The handler
//!   gets hyper's `Upgraded`, as with hyper-util's server. Its socket has
//!   left the server for tokio before hyper hands it over (at the first
//!   read or write after the `101`), so it outlives the server as it would
//!   with hyper's. What it keeps while idle is what hyper's keeps: the
//!   boxed transport (dormant's, with a small shared record of the
//!   connection) and, until the first read, a view into hyper's read
//!   buffer; a task per stream is the handler's.
//! - **dormant's [`on`]**, for idle streams that should cost nothing: the
//!   handler gets [`Parts`], the socket itself (a [`Stream`]: the
//!   `tokio::net::TcpStream` or `UnixStream` of whatever listener the
//!   server serves, so one handler works on any) and the bytes the client
//!   sent after its upgrade request, *copied* out of hyper's buffer.
//!   Nothing else of the server stays referenced: no hyper connection,
//!   request, response, pool buffer, service or connection slot (invariant
//!   I5 of the design). The stream can read without holding a buffer and
//!   sleep in the lot with no task (below).
//!
//! hyper's upgrade boxes the connection's IO again and keeps hyper's read
//! buffer alive until its leftover bytes are read; Go's `Hijack` keeps the
//! connection's write buffer and, through its read buffer, the whole
//! connection, response and request. Upgraded streams (WebSocket, tunnels)
//! are idle most of their life, so whatever they keep, they keep for long:
//! that is what [`on`] is for.
//!
//! ```text
//! request with `Connection: upgrade` + `Upgrade: …`, or CONNECT
//!   │ on(&mut req) ──► OnUpgrade (future; `Err` at once for other requests)
//!   ▼
//! handler answers 101 (2xx to CONNECT) ── anything else: the future fails
//!   │                                     with `is_declined`, HTTP goes on
//!   ▼
//! hyper writes and flushes the response and hands its connection to its
//!   │ own `OnUpgrade`, which the driver holds for `on`: socket + unread bytes
//!   ▼
//! OnUpgrade resolves to Parts { stream, read_buf, lot, shutdown };
//! the connection's task ends, it no longer counts as open
//! ```
//!
//! hyper puts its `OnUpgrade` in every request that asks for an upgrade
//! (an `Upgrade` header on HTTP/1.1, or `CONNECT`), and dormant leaves it
//! there. To those with `Connection: upgrade`, and to `CONNECT`, it also
//! offers [`on`], with a clone of hyper's: if the handler called [`on`]
//! when it accepts the upgrade, the driver takes the connection from
//! hyper's `OnUpgrade` as soon as hyper's future returns and takes it
//! apart; otherwise it is hyper's `OnUpgrade`'s holder's. Other requests
//! pay nothing for this module but a look at an empty extension map.
//!
//! # Reading without holding a buffer
//!
//! [`Upgraded`] wraps the parts: it implements tokio's `AsyncRead` and
//! `AsyncWrite` (the leftover bytes come first), and
//! [`read_pooled`](Upgraded::read_pooled) waits until the socket is
//! readable and only then takes a buffer from dormant's pool and reads into
//! it ("ready reader"): a stream waiting for its next message holds no
//! buffer. The buffer goes back to the pool when the [`PooledBytes`] are
//! dropped. The pool is process-wide ([`pool_stats`]): a server's own pool
//! handle would tie the stream to the server it left.
//!
//! # Sleeping upgraded streams
//!
//! A handler whose stream is idle can give it, with its own small state, to
//! the server's parking lot ([`Lot::sleep`]): the stream then has no task,
//! no tokio registration and no buffer (its slot in the lot, a small box
//! and the boxed state, for TCP and Unix sockets alike). When bytes arrive, the peer closes, or the server shuts down, the
//! lot calls the handler back in a new task with [`Woken`]. The usual shape
//! is a plain function that puts the stream to sleep with a callback that
//! serves one wake-up and calls that function again:
//!
//! ```no_run
//! use dormant::upgrade::{Lot, Upgraded, Woken};
//! use tokio::io::AsyncWriteExt;
//!
//! /// Echo: answer what arrived, then sleep until more arrives.
//! fn sleep(lot: Lot, stream: Upgraded) {
//!     lot.clone().sleep(stream, move |woken| async move {
//!         let Woken::Readable(mut stream) = woken else { return };
//!         if let Ok(Some(bytes)) = stream.read_pooled().await {
//!             if stream.write_all(&bytes).await.is_ok() {
//!                 drop(bytes);
//!                 sleep(lot, stream);
//!             }
//!         }
//!     });
//! }
//! ```
//!
//! # Shutdown
//!
//! As with Go's `Hijack`, the server neither waits for nor closes the
//! streams it handed off: once handed off, a stream does not delay a
//! graceful shutdown. [`Parts::shutdown`] tells a handler that shutdown
//! began. Streams asleep in the lot when it begins are handed back to their
//! callbacks with [`Woken::Shutdown`], and so is any stream put to sleep
//! afterwards: the lot stops with the `serve` call. Callbacks run in tasks
//! of the runtime; if the runtime itself shuts down while streams sleep,
//! they are closed and their callbacks dropped without being called.
//!
//! # Files
//!
//! The hand-off (`handoff.rs`: [`on`], [`OnUpgrade`], [`Parts`]), the
//! stream a handler speaks on (`upgraded.rs`: [`Upgraded`],
//! [`read_pooled`](Upgraded::read_pooled), [`pool_stats`]), and the parking
//! lot as upgraded streams see it (`lot.rs`: [`Lot`], [`Woken`]). The
//! imports go one way: the hand-off's [`Parts`] carry the lot, whose
//! sleepers are [`Upgraded`] streams.

mod handoff;
mod lot;
mod upgraded;

pub use crate::pool::PooledBytes;
pub use crate::transport::Stream;
#[cfg(feature = "ws")]
pub(crate) use handoff::on_extensions;
pub(crate) use handoff::{HandOff, HandOffResult};
pub use handoff::{OnUpgrade, Parts, on};
#[cfg(feature = "ws")]
pub(crate) use lot::Drain;
pub(crate) use lot::Handler;
pub use lot::{Lot, Woken};
pub use upgraded::{Upgraded, pool_stats};
