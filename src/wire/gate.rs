//! The window gate: after a wake, what h2 writes beyond the client's
//! connection window waits here until the client grants it.
//!
//! A fresh connection believes the client's receive window is at least the
//! initial 65,535 bytes (RFC 9113, 6.9.2: a connection window can only be
//! raised). A client that keeps the default window and tops it up only
//! once half of it is used (Node's http2, Python's h2, Netty, nghttp2) had
//! granted less when the connection slept: the fresh connection believes
//! it may send up to the *deficit* more than the client allows. The gate
//! keeps that promise for it:
//!
//! ```text
//!  h2's frames ─► DATA within the window ──────────────► to the client
//!                 DATA beyond it: cut at the window; the rest held ─┐
//!                 any frame after held DATA (HPACK blocks and a     │
//!                 stream's frames keep their order): held ──────────┤
//!                 a stream-0 frame (PING and SETTINGS ACKs,         │
//!                 GOAWAY): passes held frames ───────► to the client│
//!  client's connection WINDOW_UPDATE: the part that repays the      │
//!  deficit is kept from h2; the window it opens releases ◄──────────┘
//! ```
//!
//! h2 believes `window + deficit − held DATA`, so the held DATA is never
//! more than the deficit (at most 65,535 bytes), and it exists only while
//! the connection is awake: a connection sleeps only with nothing held.
//! A held DATA frame is cut at the window rather than held whole: a client
//! may top its window up only once it has received more. The gate is made
//! at a wake with a deficit and dropped once the deficit is repaid and
//! nothing is held; until then every byte h2 writes passes it (one copy),
//! otherwise none does.

use super::frame::{HEAD_LEN, Head, Piece, Scanner, flag, kind};

/// What the gate asks of the connection's watcher (`watch::Watch`, which
/// holds the gate and lends itself to it): the gate is the watcher's
/// mechanism, and knows it only through this.
pub(super) trait Watcher {
    /// The connection's send window, as the client last granted it.
    fn send_window(&self) -> i64;
    /// Whether the watcher is between frames of its own output.
    fn may_write(&self) -> bool;
    /// A fence to write before `head`, if the client is owed one early.
    fn early_fence_before(&mut self, head: Head) -> Option<Vec<u8>>;
    /// Raises a GOAWAY's last-stream field past the streams forgotten at
    /// a sleep.
    fn raise_goaway(&self, field: &mut [u8; 4]);
    /// Notes bytes that go to the client.
    fn outbound(&mut self, bytes: &[u8]);
}

/// What the gate holds of a woken connection's output.
#[derive(Debug, Default)]
pub(super) struct Gate {
    /// h2's frames as it writes them.
    scanner: Scanner,
    route: Route,
    /// Frames held back, in the order h2 wrote them; whole, but the last
    /// while h2 writes it.
    held: Vec<u8>,
    /// A stream-0 frame, gathered whole before it passes.
    whole: Vec<u8>,
}

/// Where the frame h2 is writing goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Route {
    /// To the client.
    #[default]
    Send,
    /// Held.
    Hold,
    /// A DATA frame cut at the window: `left` more payload bytes go to
    /// the client, the rest is held.
    Split { left: u32 },
    /// A frame on stream 0: gathered whole, then sent (a GOAWAY's
    /// last-stream field raised on the way, see [`Watcher::raise_goaway`]).
    Whole,
}

impl Gate {
    /// Whether nothing waits here.
    pub(super) fn is_empty(&self) -> bool {
        self.held.is_empty() && self.whole.is_empty() && self.scanner.at_boundary()
    }

    /// Routes `bytes` h2 wrote: what may go to the client now is appended
    /// to `out` (and noted by `watch`), the rest is held.
    pub(super) fn route(&mut self, watch: &mut impl Watcher, bytes: &[u8], out: &mut Vec<u8>) {
        let mut at = 0;
        while let Some(piece) = self.scanner.next(bytes, &mut at) {
            match piece {
                Piece::Head(head) => self.route = self.head(watch, head, out),
                Piece::Payload(_, r) => {
                    let payload = &bytes[r];
                    match &mut self.route {
                        Route::Send => send(watch, out, payload),
                        Route::Hold => self.held.extend_from_slice(payload),
                        Route::Whole => self.whole.extend_from_slice(payload),
                        Route::Split { left } => {
                            let n = payload.len().min(*left as usize);
                            *left -= n as u32;
                            send(watch, out, &payload[..n]);
                            self.held.extend_from_slice(&payload[n..]);
                        }
                    }
                }
                Piece::End(head) => {
                    if self.route == Route::Whole {
                        if head.kind == kind::GOAWAY && self.whole.len() >= HEAD_LEN + 4 {
                            let field = &mut self.whole[HEAD_LEN..HEAD_LEN + 4];
                            let field: &mut [u8; 4] = field.try_into().expect("4 bytes");
                            watch.raise_goaway(field);
                        }
                        send(watch, out, &self.whole);
                        self.whole.clear();
                    }
                    self.route = Route::Send;
                }
                Piece::Preface(_) => {}
            }
        }
        self.release(watch, out);
    }

    /// Where a frame h2 begins goes; writes its header there.
    fn head(&mut self, watch: &mut impl Watcher, head: Head, out: &mut Vec<u8>) -> Route {
        if head.stream == 0 {
            self.whole.extend_from_slice(&head.bytes());
            return Route::Whole;
        }
        // What goes to the client ends at a frame boundary here.
        if let Some(fence) = watch.early_fence_before(head) {
            out.extend_from_slice(&fence);
        }
        let window = window(watch);
        let route = match head.kind {
            _ if !self.held.is_empty() => Route::Hold,
            kind::DATA if head.len <= window => Route::Send,
            // h2 pads no DATA; a padded frame would be held whole.
            kind::DATA if window > 0 && !head.has(flag::PADDED) => {
                let now = Head {
                    len: window,
                    flags: head.flags & !flag::END_STREAM,
                    ..head
                };
                send(watch, out, &now.bytes());
                let rest = Head {
                    len: head.len - window,
                    ..head
                };
                self.held.extend_from_slice(&rest.bytes());
                return Route::Split { left: window };
            }
            kind::DATA => Route::Hold,
            _ => Route::Send,
        };
        match route {
            Route::Hold => self.held.extend_from_slice(&head.bytes()),
            _ => send(watch, out, &head.bytes()),
        }
        route
    }

    /// Sends the held frames the window lets go, in order, once what goes
    /// to the client ends at a frame boundary.
    pub(super) fn release(&mut self, watch: &mut impl Watcher, out: &mut Vec<u8>) {
        if !watch.may_write() {
            return;
        }
        while self.held.len() >= HEAD_LEN {
            let bytes: &[u8; HEAD_LEN] = self.held[..HEAD_LEN].try_into().expect("a header");
            let head = Head::parse(bytes);
            let end = HEAD_LEN + head.len as usize;
            if self.held.len() < end {
                // h2 is still writing it.
                return;
            }
            let window = window(watch);
            if head.kind == kind::DATA && head.len > window {
                if window == 0 || head.has(flag::PADDED) {
                    return;
                }
                let now = Head {
                    len: window,
                    flags: head.flags & !flag::END_STREAM,
                    ..head
                };
                send(watch, out, &now.bytes());
                let cut = HEAD_LEN + window as usize;
                send(watch, out, &self.held[HEAD_LEN..cut]);
                self.held.drain(HEAD_LEN..cut);
                let rest = Head {
                    len: head.len - window,
                    ..head
                };
                self.held[..HEAD_LEN].copy_from_slice(&rest.bytes());
                return;
            }
            send(watch, out, &self.held[..end]);
            self.held.drain(..end);
        }
    }
}

/// What the client lets the server send on the connection now.
fn window(watch: &impl Watcher) -> u32 {
    u32::try_from(watch.send_window().max(0)).unwrap_or(u32::MAX)
}

/// Sends `bytes` to the client, noted by the watch.
fn send(watch: &mut impl Watcher, out: &mut Vec<u8>, bytes: &[u8]) {
    watch.outbound(bytes);
    out.extend_from_slice(bytes);
}
