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
//!   sent them ([`Asleep::prelude`]); the fresh connection's ACK of them
//!   is removed before the client sees it ([`Asleep::settle`]). The fresh
//!   connection's own SETTINGS never reaches the client, which lives by
//!   the same values already: the prelude acknowledges it (h2 applies its
//!   own settings, such as a new stream's window, only once acknowledged).
//! - **The last stream the client opened.** A fresh connection accepts any
//!   higher stream id (ids only have to increase). It takes a
//!   WINDOW_UPDATE or RST_STREAM on an older stream, which it never saw,
//!   for a protocol error, so those are removed ([`Watch::inbound`]): the
//!   streams were closed, where the frames would be ignored. Its GOAWAY
//!   would name the last stream it processed since the wake (0 if none),
//!   telling the client that the streams answered before the sleep were
//!   not processed: it is raised to the last one before the sleep
//!   ([`Watch::raise_goaway`]; found by `tests/http2_differential.rs`).
//! - **Connection flow control, both ways.** A fresh connection starts at
//!   65,535 bytes each way (RFC 9113, 6.9.2). What the server may send is
//!   what the client granted (65,535 + its connection WINDOW_UPDATEs − the
//!   DATA the server sent): the prelude grants the rest to the fresh
//!   connection with a client WINDOW_UPDATE, and a connection sleeps only
//!   if that is at least 65,535 (a fresh server must never believe it may
//!   send more than the client allows, nor less: a client tops its window
//!   up only as it is used, so a server that believes less waits for
//!   ever). What the client may send is counted the same way the other way
//!   round: the fresh connection's opening WINDOW_UPDATE is replaced by one
//!   that brings the client's view exactly to the fresh connection's
//!   window, and a connection sleeps only if the client may not already
//!   send more than that.
//! - **HPACK.** The client's encoder keeps its dynamic table across the
//!   sleep; the fresh decoder starts empty. So before a connection first
//!   sleeps, the server sends `SETTINGS_HEADER_TABLE_SIZE = 0` (the
//!   *fence*) and sleeps only after the client's ACK (removed before h2
//!   sees it, as h2 did not send that SETTINGS): the client has then
//!   emptied its table, and must open its next header block with a table
//!   size update (RFC 7541, 4.2), which the fresh decoder accepts. The
//!   table stays empty across wakes, so a connection that wakes for a
//!   request or two sleeps again without a round trip; one that gets busy
//!   ([`Watch::restore`]) is given its table back, and fenced again before
//!   its next sleep. The other way, a fresh encoder starts empty and
//!   inserts in front of what the client's decoder still holds; the client
//!   evicts its oldest entries first, so the entries the fresh encoder
//!   refers to are where it expects them.
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

mod frame;
mod watch;

pub(crate) use watch::{Asleep, Decline, SettingsCache, Unsettled, Watch};
