//! HTTP/2 on the wire: what dormant reads of an HTTP/2 connection's
//! frames, so that an idle one can sleep without hyper.
//!
//! hyper has no way to take an HTTP/2 connection apart and put it back
//! together (hyper#1531), and a patched h2 could not reach dormant's
//! users. So a sleeping HTTP/2 connection is dropped whole, and woken by
//! building a fresh hyper connection that is brought to where the old one
//! was before the client's next bytes reach it. What the fresh connection
//! needs is what the wire showed; the [`Watch`] keeps it, reading every
//! frame both ways as it passes (`frame` cuts the bytes into frames):
//!
//! - **The client's settings**, the last value of each, replayed to the
//!   fresh connection after a client preface as if the client had just
//!   sent them ([`Asleep::prelude`]); the fresh connection's ACKs of them
//!   are removed before the client sees it ([`Asleep::settle`]). The fresh
//!   connection's own SETTINGS never reaches the client, which lives by
//!   the same values already: the prelude acknowledges it (h2 applies its
//!   own settings, such as a new stream's window, only once acknowledged).
//! - **The last stream the client opened.** A fresh connection accepts any
//!   higher stream id (ids only have to increase), but it never knew the
//!   streams up to that one, which were closed before the sleep: it would
//!   serve a HEADERS that reuses one of their ids, and take any other frame
//!   on them for a frame on an idle stream. So the client's frames on them
//!   get what h2 gives a closed stream's ([`Watch::inbound`]): a HEADERS
//!   reaches h2 on stream 0 (a connection error, as reusing an id is),
//!   DATA is answered by dormant (RST_STREAM with STREAM_CLOSED, and its
//!   window given back) and reaches h2 as a frame of an ignored type, a
//!   well-formed RST_STREAM or WINDOW_UPDATE is removed. A frame that h2
//!   refuses whatever its stream (a wrong length, one beyond
//!   SETTINGS_MAX_FRAME_SIZE, an increment of 0, more padding than
//!   payload) reaches h2 unchanged, and h2 answers it as plain hyper does:
//!   the watcher acts only on frames of a form h2 accepts, and holds back
//!   the few bytes of a small frame whose fields decide. The fresh
//!   connection's GOAWAY would name the last stream it processed since the
//!   wake (0 if none), telling the client that the streams answered before
//!   the sleep were not processed: it is raised to the last one before the
//!   sleep ([`Watch::raise_goaway`]; found by `tests/http2_differential.rs`).
//! - **Connection flow control, both ways.** A fresh connection starts at
//!   65,535 bytes each way (RFC 9113, 6.9.2), and can only be raised. What
//!   the server may send is what the client granted (65,535 + its
//!   connection WINDOW_UPDATEs − the DATA the server sent): the prelude
//!   grants what is beyond 65,535 to the fresh connection with a client
//!   WINDOW_UPDATE. What is below, the *deficit* (a client that keeps the
//!   default window and tops it up only once half is used: Node's http2,
//!   Python's h2, Netty), the fresh connection would believe it may send
//!   beyond the client's window; the window gate (`gate`) keeps it from
//!   doing so, holding back what h2 writes past the window and keeping
//!   from h2 the part of the client's WINDOW_UPDATEs that repays the
//!   deficit. What the client may send is counted the same way the other
//!   way round: the fresh connection's opening WINDOW_UPDATE is replaced
//!   by one that brings the client's view exactly to the fresh
//!   connection's window, and a connection sleeps only if the client may
//!   not already send more than that (it may, when hyper's adaptive window
//!   grew the window beyond the configured one: [`Decline::Window`]). For
//!   the same reason a connection whose h2 changed its settings
//!   mid-connection stays awake: the adaptive window raises the streams'
//!   windows with a SETTINGS frame, and a fresh connection would open
//!   with the first ones.
//! - **HPACK.** The client's encoder keeps its dynamic table across the
//!   sleep; the fresh decoder starts empty. So before a connection first
//!   sleeps, the server sends `SETTINGS_HEADER_TABLE_SIZE = 0` (the
//!   *fence*) and sleeps only after the client's ACK (removed before h2
//!   sees it, as h2 did not send that SETTINGS): the client has then
//!   emptied its table, and must open its next header block with a table
//!   size update (RFC 7541, 4.2), which the fresh decoder accepts. A
//!   client acknowledges a SETTINGS frame only when it reads it, and a
//!   synchronous one (Python's httpx) reads only while it waits for a
//!   response: a fence sent once the connection is quiet would wait for
//!   ever. So a new connection's fence goes out with its first response,
//!   right before the frame that ends the last open stream, and so does
//!   every fence of a connection whose client once left one
//!   unacknowledged (`fence.rs`). The table stays empty across wakes, so a connection that wakes for a
//!   request or two sleeps again without a round trip; one that gets busy
//!   ([`Watch::restore`]) is given its table back, and fenced again before
//!   its next sleep. The other way, the client's decoder keeps its table
//!   across the sleep and the fresh encoder starts empty, believing the
//!   decoder's table is HPACK's initial 4,096 bytes. That holds only if the
//!   old encoder owed the decoder no size update: a client that lowered its
//!   SETTINGS_HEADER_TABLE_SIZE and raised it again before the next
//!   response is owed one to the lower size (RFC 7541, 4.2; nghttp2 empties
//!   its table at the ACK), and the old encoder's debt dies with hyper. So
//!   the watcher notes a debt (a client SETTINGS_HEADER_TABLE_SIZE since
//!   the server's last header block), and a wake that inherits one
//!   replays the table size twice, 0 and then the client's
//!   ([`Asleep::prelude`]): the fresh encoder opens its first block with
//!   size updates to 0 and to the client's size, which empty the decoder's
//!   table and bring both sides to the same size.
//! - **PING ACKs by their payload.** The lot pings a sleeping connection
//!   with a payload h2 never uses; the ACK may come after a wake, before or
//!   after ACKs of h2's own PINGs, and is kept from h2 by its payload, never
//!   by its order.
//! - **Nothing in flight**: no stream open, no frame half-read or
//!   half-written, no PING or SETTINGS unacknowledged, no PING of the
//!   client unanswered, no GOAWAY either way. A stream the server reset
//!   while the client could still send on it also calls for a fence: the
//!   client sends its ACK after every frame it sent before it, so no late
//!   frame of such a stream reaches the fresh connection but the ones
//!   removed.
//!
//! When any of this is unknown or does not hold, the connection stays
//! awake: correct beats small.
//!
//! # Files
//!
//! One concern a file, the imports one way (down this list):
//!
//! - `watch.rs`: the watcher ([`Watch`]), which reads both directions,
//!   decides what h2 gets of each client frame, and counts the connection
//!   windows, PINGs and what is half-read or half-written;
//! - `gate.rs`: the window gate after a wake, the watcher's mechanism (it
//!   knows the watcher through its `Watcher` trait);
//! - `asleep.rs`: the sleeping form ([`Asleep`]): the prelude, the
//!   settling of the fresh connection's answer, and the frames a sleeping
//!   connection answers or sends;
//! - `fence.rs`: the fence, the restore and the SETTINGS in flight;
//! - `streams.rs`: the streams open, reset, and forgotten at a wake;
//! - `settings.rs`: the client's settings, shared between sleeping
//!   connections ([`SettingsCache`]);
//! - `frame.rs`: frames as dormant sees them (the scanner, the fields it
//!   reads, the frames dormant writes).

mod asleep;
mod fence;
mod frame;
mod gate;
mod settings;
mod streams;
mod watch;

pub(crate) use asleep::{Asleep, Unsettled};
pub(crate) use settings::SettingsCache;
pub(crate) use watch::{Decline, HELD, Watch};
