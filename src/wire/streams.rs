//! The streams' bookkeeping: which streams are open on the wire and which
//! side ended each, the last one the client opened, the ones the server
//! reset while the client could still send on them, and, after a wake, the
//! ones from before the sleep that the fresh connection never knew.

use super::frame::{Head, flag, kind};

/// A stream open on the wire, and which sides have ended it.
#[derive(Debug)]
struct OpenStream {
    id: u32,
    client_ended: bool,
    server_ended: bool,
}

/// Who ended a stream, or reset it.
#[derive(Clone, Copy)]
pub(super) enum Side {
    Client,
    Server,
    ClientReset,
    ServerReset,
}

/// A connection's streams, as its frames both ways show them.
#[derive(Debug, Default)]
pub(super) struct Streams {
    /// The highest stream the client opened.
    last: u32,
    open: Vec<OpenStream>,
    /// Streams the server reset while the client could still send on them,
    /// not yet fenced: frames of theirs may come late (see `wire`).
    resets: u32,
    /// After a wake: the streams up to this one were closed before the
    /// sleep, and the fresh connection never knew them (see
    /// `Watch::client_frame`).
    forgotten: u32,
}

impl Streams {
    /// The streams of a connection woken from a sleep, whose client had
    /// opened up to `last`: none open, and those forgotten.
    pub(super) fn woken(last: u32) -> Streams {
        Streams {
            last,
            forgotten: last,
            ..Streams::default()
        }
    }

    /// The highest stream the client opened.
    pub(super) fn last(&self) -> u32 {
        self.last
    }

    /// Notes a client's HEADERS on stream `id`, which ends the client's
    /// side if `end_stream`; returns whether it opened a new stream.
    pub(super) fn client_headers(&mut self, id: u32, end_stream: bool) -> bool {
        if id > self.last {
            self.last = id;
            self.open.push(OpenStream {
                id,
                client_ended: end_stream,
                server_ended: false,
            });
            return true;
        }
        if end_stream {
            self.ended(id, Side::Client);
        }
        false
    }

    /// Notes that `side` ended (or reset) stream `id`.
    pub(super) fn ended(&mut self, id: u32, side: Side) {
        let Some(i) = self.open.iter().position(|o| o.id == id) else {
            return;
        };
        let open = &mut self.open[i];
        match side {
            Side::Client => open.client_ended = true,
            Side::Server => open.server_ended = true,
            Side::ServerReset if !open.client_ended => {
                // The client may send on it until it reads the reset.
                self.resets += 1;
                (open.client_ended, open.server_ended) = (true, true);
            }
            Side::ClientReset | Side::ServerReset => {
                (open.client_ended, open.server_ended) = (true, true)
            }
        }
        if open.client_ended && open.server_ended {
            self.open.swap_remove(i);
        }
    }

    /// Whether no stream is open.
    pub(super) fn none_open(&self) -> bool {
        self.open.is_empty()
    }

    /// Whether stream `id` is one from before the sleep: closed, though
    /// the fresh connection never knew it. Client-initiated ids only: h2
    /// answers frames on the server's (even) ids the same either way.
    pub(super) fn is_forgotten(&self, id: u32) -> bool {
        id % 2 == 1 && id <= self.forgotten
    }

    /// Whether the connection slept, and forgot streams.
    pub(super) fn forgot_any(&self) -> bool {
        self.forgotten > 0
    }

    /// Raises a GOAWAY's last-stream field to the last stream the client
    /// opened before the wake, if it names an earlier one.
    pub(super) fn raise_goaway(&self, field: &mut [u8; 4]) {
        let last = u32::from_be_bytes(*field) & 0x7fff_ffff;
        if last < self.forgotten {
            *field = self.forgotten.to_be_bytes();
        }
    }

    /// The resets not fenced yet.
    pub(super) fn resets(&self) -> u32 {
        self.resets
    }

    /// Notes that the client acknowledged a fence sent after `resets`
    /// resets: no late frame of theirs can come any more.
    pub(super) fn fenced(&mut self, resets: u32) {
        self.resets -= resets;
    }

    /// Whether the server frame `head` ends a stream and leaves none open,
    /// counting the streams `ended` lists as ended already (by frames
    /// before it, not written yet); notes the stream it ends in `ended`.
    pub(super) fn ends_the_last(&self, head: Head, ended: &mut Vec<u32>) -> bool {
        if !matches!(head.kind, kind::HEADERS | kind::DATA) || !head.has(flag::END_STREAM) {
            return false;
        }
        ended.push(head.stream);
        self.open
            .iter()
            .all(|open| open.client_ended && (open.server_ended || ended.contains(&open.id)))
    }
}
