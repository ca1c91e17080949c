//! The watcher: what an HTTP/2 connection's frames say, both ways, while
//! it is awake; what a sleeping one keeps ([`Asleep`]); and the frames
//! the wake removes or rewrites.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::frame::{
    self, Field, Fields, HEAD_LEN, Head, INITIAL_WINDOW, Piece, Scanner, flag, kind,
};
use super::gate::{Gate, Watcher};

/// The client's settings: the last value it sent of each one dormant
/// replays (identifiers 1 to [`frame::MAX_SETTING`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Settings {
    values: [u32; frame::MAX_SETTING as usize],
    /// Bit `id - 1` is set when the client sent setting `id`.
    sent: u16,
}

impl Settings {
    fn set(&mut self, id: u16, value: u32) {
        if (1..=frame::MAX_SETTING).contains(&id) {
            self.values[usize::from(id - 1)] = value;
            self.sent |= 1 << (id - 1);
        }
    }

    /// The settings a wake replays: those the client sent, and, if
    /// `table_size`, the header table size whether it sent one or not (see
    /// [`Asleep::prelude`]).
    fn replayed(&self, table_size: bool) -> impl Iterator<Item = (u16, u32)> + '_ {
        (1..=frame::MAX_SETTING)
            .map(|id| (id, self.sent & (1 << (id - 1)) != 0))
            .filter(move |&(id, sent)| sent || (table_size && id == frame::HEADER_TABLE_SIZE))
            .map(|(id, sent)| match sent {
                true => (id, self.values[usize::from(id - 1)]),
                false => (id, TABLE_SIZE),
            })
    }
}

/// How many different sets of client settings a [`SettingsCache`] shares.
const SHARED_SETTINGS: usize = 64;

/// The clients' settings that sleeping connections keep, shared between
/// those with the same ones: a server's clients send a few different sets
/// (one per client library and version), so a sleeping connection keeps a
/// pointer instead of its own 40 bytes. Beyond [`SHARED_SETTINGS`] sets in
/// use at once, a connection keeps its own.
#[derive(Debug, Default)]
pub(crate) struct SettingsCache {
    sets: Mutex<Vec<Arc<Settings>>>,
}

impl SettingsCache {
    fn share(&self, settings: &Settings) -> Arc<Settings> {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = sets.iter().find(|set| ***set == *settings) {
            return set.clone();
        }
        if sets.len() == SHARED_SETTINGS {
            // Sets no sleeping connection keeps any more.
            sets.retain(|set| Arc::strong_count(set) > 1);
        }
        let set = Arc::new(settings.clone());
        if sets.len() < SHARED_SETTINGS {
            sets.push(set.clone());
        }
        set
    }
}

/// A stream open on the wire, and which sides have ended it.
#[derive(Debug)]
struct OpenStream {
    id: u32,
    client_ended: bool,
    server_ended: bool,
}

/// Whose SETTINGS frame, sent to the client, its ACK answers (ACKs come in
/// the order the frames went).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    /// h2's: the ACK goes to h2.
    H2,
    /// dormant's fence, `SETTINGS_HEADER_TABLE_SIZE = 0`, sent when the
    /// connection had reset this many streams on which the client could
    /// still send: the ACK is kept from h2.
    Fence { resets: u32 },
    /// dormant's `SETTINGS_HEADER_TABLE_SIZE = 4096`, which gives a woken
    /// connection that got busy its compression back: the ACK is kept from
    /// h2.
    Restore,
}

/// A woken connection gives the client its HPACK table back
/// ([`Watch::restore`]) once the client has opened this many streams
/// since the table was emptied: a connection that wakes for a request or
/// two goes back to sleep without another round trip, a busy one gets its
/// compression back.
const RESTORE_AFTER: u32 = 4;

/// The header table size a restore gives the client: HPACK's default,
/// h2's decoder's.
const TABLE_SIZE: u32 = 4096;

/// The most of a client frame the watcher holds back while it decides
/// what h2 gets of it: a header and the 8 bytes of a PING.
pub(crate) const HELD: usize = HEAD_LEN + 8;

/// What h2 gets of the client frame being scanned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// The frame (its header rewritten, maybe).
    Pass,
    /// Nothing of it.
    Drop,
    /// Nothing yet: the frame is held until its first `need` payload bytes
    /// are in, which decide.
    Hold { need: u8 },
}

/// Why an idle HTTP/2 connection may not sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decline {
    /// The client may send more than a fresh connection accepts: hyper's
    /// adaptive window grew the connection's window beyond the configured
    /// one, or raised the streams' windows with a SETTINGS frame.
    Window,
}

/// When a connection's fence goes out (see `wire`): the client must
/// acknowledge it before the connection may sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FenceTiming {
    /// Before the server frame that ends the last open stream, once: a new
    /// connection's. Many connections idle after their first request, and
    /// a client that reads only while it waits for a response (Python's
    /// httpx) acknowledges a fence only among a response's frames; after
    /// it, the client's table stays empty until the connection is busy
    /// ([`RESTORE_AFTER`]).
    FirstResponse,
    /// Once the connection is quiet: the client's table is emptied only
    /// if it idles.
    Quiet,
    /// Before the frame that ends the last open stream, every time: the
    /// client did not acknowledge a fence sent while it was quiet
    /// ([`Watch::fence_early`]).
    Early,
}

/// What a connection's frames have said, both ways.
#[derive(Debug)]
pub(crate) struct Watch {
    inbound: Scanner,
    in_fields: Fields,
    /// What h2 gets of the inbound frame being scanned.
    verdict: Verdict,
    /// The inbound frame held back while its verdict waits for its payload:
    /// its header, then the payload bytes it needs.
    held: [u8; HELD],
    held_len: u8,
    /// Frames dormant writes to the client in answer to frames h2 does not
    /// see (see [`Watch::replies`]).
    replies: Vec<u8>,
    /// The stream from before a wake whose DATA was last answered with
    /// RST_STREAM: its later DATA is discarded, as h2 discards frames on a
    /// stream it reset.
    closed_reset: u32,
    outbound: Scanner,
    out_fields: Fields,
    settings: Settings,
    /// The highest stream the client opened.
    last_stream: u32,
    open: Vec<OpenStream>,
    /// What the client may still send on the connection: its view of the
    /// server's receive window.
    recv_window: i64,
    /// What the server may still send: the client's receive window.
    send_window: i64,
    /// After a wake from a client's window below the initial one: how much
    /// more h2 believes it may send than the client granted, not repaid
    /// yet by the client's WINDOW_UPDATEs (see `gate`).
    deficit: u32,
    /// While there is a deficit, or frames wait for the window: what h2
    /// writes passes here.
    gate: Option<Box<Gate>>,
    /// SETTINGS frames sent to the client and not acknowledged yet.
    settings_sent: VecDeque<Sent>,
    /// The client acknowledged a fence and no restore since: its HPACK
    /// encoder's table is empty and stays so.
    table_empty: bool,
    /// Streams opened since the table was emptied.
    streams_since_empty: u32,
    /// Streams the server reset while the client could still send on them,
    /// not yet fenced: frames of theirs may come late.
    resets: u32,
    /// PINGs of the server not answered yet.
    pings_out: u32,
    /// PINGs of the client h2 has not answered yet.
    pings_in: u32,
    /// Keep-alive PINGs the lot sent while the connection slept, not
    /// answered yet: their ACKs are kept from h2, which did not send them.
    lot_pings: u32,
    /// A GOAWAY went either way, or a frame dormant does not expect (a
    /// server PUSH_PROMISE): this connection never sleeps.
    ending: bool,
    /// When the fence goes out.
    fence_timing: FenceTiming,
    /// The client sent SETTINGS_HEADER_TABLE_SIZE since the server's last
    /// header block: the server's encoder owes its decoder a size update
    /// (RFC 7541, 4.2), which it sends at the start of its next block.
    table_size_owed: bool,
    /// A header block is open (CONTINUATION frames follow).
    header_block: bool,
    /// After a wake: the streams up to this one were closed before the
    /// sleep, and the fresh connection never knew them: the client's frames
    /// on them get what h2 answers on a closed stream (see
    /// [`Watch::client_frame`]).
    forgotten: u32,
    /// Frames read: whether the client did anything.
    frames_in: u64,
    /// SETTINGS frames h2 sent on this connection, a woken one's counting
    /// the first (the client has it from before the sleep). A second one
    /// changed the server's settings mid-connection, as hyper's adaptive
    /// window does when it raises the streams' windows: a fresh connection
    /// would open with the first ones.
    server_settings: u8,
}

impl Watch {
    /// The watch of a new connection, whose bytes start with the preface.
    pub(crate) fn new() -> Watch {
        Watch {
            inbound: Scanner::after_preface(),
            in_fields: Fields::default(),
            verdict: Verdict::Pass,
            held: [0; HELD],
            held_len: 0,
            replies: Vec::new(),
            closed_reset: 0,
            outbound: Scanner::default(),
            out_fields: Fields::default(),
            settings: Settings::default(),
            last_stream: 0,
            open: Vec::new(),
            recv_window: INITIAL_WINDOW.into(),
            send_window: INITIAL_WINDOW.into(),
            deficit: 0,
            gate: None,
            settings_sent: VecDeque::new(),
            table_empty: false,
            streams_since_empty: 0,
            resets: 0,
            pings_out: 0,
            pings_in: 0,
            lot_pings: 0,
            ending: false,
            fence_timing: FenceTiming::FirstResponse,
            table_size_owed: false,
            header_block: false,
            forgotten: 0,
            frames_in: 0,
            server_settings: 0,
        }
    }

    /// Scans bytes read from the client, in place, and removes or rewrites
    /// the frames h2 must not see as they are: `buf[from..to]` are new,
    /// `buf[..from]` is room for what a frame split across reads left here
    /// (at least [`HELD`] bytes). Returns how many bytes h2 gets,
    /// `buf[..len]`.
    pub(crate) fn inbound(&mut self, buf: &mut [u8], from: usize, to: usize) -> usize {
        debug_assert!(from >= HELD);
        let mut w = 0;
        let mut at = from;
        while let Some(piece) = self.inbound.next(&buf[..to], &mut at) {
            match piece {
                Piece::Preface(r) => {
                    buf.copy_within(r.clone(), w);
                    w += r.len();
                }
                Piece::Head(mut head) => {
                    self.frames_in += 1;
                    self.in_fields.reset();
                    self.verdict = self.client_frame(&mut head);
                    match self.verdict {
                        Verdict::Pass => {
                            buf[w..w + HEAD_LEN].copy_from_slice(&head.bytes());
                            w += HEAD_LEN;
                        }
                        Verdict::Drop => {}
                        Verdict::Hold { .. } => {
                            self.held[..HEAD_LEN].copy_from_slice(&head.bytes());
                            self.held_len = HEAD_LEN as u8;
                        }
                    }
                }
                Piece::Payload(head, mut r) => {
                    if let Verdict::Hold { need } = self.verdict {
                        let (have, need) = (usize::from(self.held_len), usize::from(need));
                        let n = (HEAD_LEN + need - have).min(r.len());
                        self.held[have..have + n].copy_from_slice(&buf[r.start..r.start + n]);
                        self.held_len += n as u8;
                        r.start += n;
                        if have + n < HEAD_LEN + need {
                            continue;
                        }
                        self.verdict = self.decide();
                        if let Verdict::Pass = self.verdict {
                            // In place: what is held is no longer than the
                            // room in front of the bytes still unread.
                            let held = self.held;
                            let held = &held[..HEAD_LEN + need];
                            buf[w..w + held.len()].copy_from_slice(held);
                            w += held.len();
                            self.feed(head, &held[HEAD_LEN..]);
                        }
                    }
                    if let Verdict::Pass = self.verdict {
                        self.feed(head, &buf[r.clone()]);
                        buf.copy_within(r.clone(), w);
                        w += r.len();
                    }
                }
                Piece::End(_) => {
                    self.verdict = Verdict::Pass;
                    self.held_len = 0;
                }
            }
        }
        w
    }

    /// Notes the settings and connection window increments in payload
    /// bytes of a client frame h2 gets.
    fn feed(&mut self, head: Head, bytes: &[u8]) {
        let (settings, send_window) = (&mut self.settings, &mut self.send_window);
        let owed = &mut self.table_size_owed;
        self.in_fields.feed(head, bytes, |field| match field {
            Field::Setting(id, value) => {
                *owed |= id == frame::HEADER_TABLE_SIZE;
                settings.set(id, value);
            }
            Field::Increment(n) if head.stream == 0 => *send_window += i64::from(n),
            Field::Increment(_) => {}
        });
    }

    /// Notes a client frame's header, and says what h2 gets of the frame;
    /// rewrites `head` if h2 gets it changed.
    ///
    /// Frames h2 must not act on are removed, or rewritten to an ignored
    /// type where h2 must still check their length. Only frames of a form
    /// h2 accepts are removed or rewritten: one h2 would refuse for its
    /// length or its fields reaches h2 as it is, and h2 answers it as plain
    /// hyper does. Where the fields decide, the frame is held back until
    /// they are in ([`Watch::decide`]).
    fn client_frame(&mut self, head: &mut Head) -> Verdict {
        let end_stream = head.has(flag::END_STREAM);
        // A stream from before the sleep: closed, though the fresh
        // connection never knew it. Client-initiated ids only: h2 answers
        // frames on the server's (even) ids the same either way.
        let forgotten = head.stream % 2 == 1 && head.stream <= self.forgotten;
        match head.kind {
            // Reusing a closed stream's id is a connection error (RFC 9113,
            // 5.1.1); the fresh connection reports one for a HEADERS frame
            // on stream 0 (6.2), before it reads the header block.
            kind::HEADERS if forgotten => {
                self.header_block = !head.has(flag::END_HEADERS);
                head.stream = 0;
            }
            kind::HEADERS => {
                self.header_block = !head.has(flag::END_HEADERS);
                if head.stream > self.last_stream {
                    self.last_stream = head.stream;
                    self.open.push(OpenStream {
                        id: head.stream,
                        client_ended: end_stream,
                        server_ended: false,
                    });
                    self.streams_since_empty += 1;
                } else if end_stream {
                    self.ended(head.stream, Side::Client);
                }
            }
            kind::CONTINUATION => self.header_block = !head.has(flag::END_HEADERS),
            kind::DATA => {
                self.recv_window -= i64::from(head.len);
                if forgotten {
                    // Its padding is checked first, as h2 checks it.
                    return match (head.has(flag::PADDED), head.len) {
                        (true, 0) => Verdict::Pass,
                        (true, _) => Verdict::Hold { need: 1 },
                        (false, _) => self.closed_stream_data(head),
                    };
                }
                if end_stream {
                    self.ended(head.stream, Side::Client);
                }
            }
            // On a closed stream, h2 ignores a well-formed RST_STREAM, and
            // a WINDOW_UPDATE whose increment is not 0.
            kind::RST_STREAM if forgotten && head.len == 4 => return Verdict::Drop,
            kind::WINDOW_UPDATE if forgotten && head.len == 4 => return Verdict::Hold { need: 4 },
            kind::RST_STREAM => self.ended(head.stream, Side::ClientReset),
            // Its increment repays the deficit first (see `gate`).
            kind::WINDOW_UPDATE if head.stream == 0 && head.len == 4 && self.deficit > 0 => {
                return Verdict::Hold { need: 4 };
            }
            kind::SETTINGS if head.has(flag::ACK) && head.len == 0 => {
                match self.settings_sent.pop_front() {
                    // An ACK nothing asked for: h2 reports the error.
                    None | Some(Sent::H2) => {}
                    Some(Sent::Restore) => return Verdict::Drop,
                    Some(Sent::Fence { resets }) => {
                        self.table_empty = true;
                        self.streams_since_empty = 0;
                        self.resets -= resets;
                        return Verdict::Drop;
                    }
                }
            }
            // The ACK of a keep-alive PING the lot sent may come after h2
            // sent PINGs of its own: the payload tells whose it is.
            kind::PING if head.has(flag::ACK) && head.len == 8 && self.lot_pings > 0 => {
                return Verdict::Hold { need: 8 };
            }
            kind::PING if head.has(flag::ACK) => self.pings_out = self.pings_out.saturating_sub(1),
            kind::PING => self.pings_in += 1,
            kind::GOAWAY => self.ending = true,
            _ => {}
        }
        Verdict::Pass
    }

    /// The verdict on the held frame, once the payload bytes it needed are
    /// in: `Pass` (with its header rewritten in `held`, maybe) or `Drop`.
    fn decide(&mut self) -> Verdict {
        let mut bytes = [0; HEAD_LEN];
        bytes.copy_from_slice(&self.held[..HEAD_LEN]);
        let mut head = Head::parse(&bytes);
        let payload = &self.held[HEAD_LEN..usize::from(self.held_len)];
        match head.kind {
            kind::PING if payload == frame::KEEP_ALIVE_PING => {
                self.lot_pings -= 1;
                Verdict::Drop
            }
            kind::PING => {
                self.pings_out = self.pings_out.saturating_sub(1);
                Verdict::Pass
            }
            // An increment of 0 (the reserved bit aside): an error h2
            // reports.
            kind::WINDOW_UPDATE if payload[0] & 0x7f == 0 && payload[1..] == [0; 3] => {
                Verdict::Pass
            }
            kind::WINDOW_UPDATE if head.stream == 0 => {
                let field: [u8; 4] = payload.try_into().expect("4 bytes");
                let increment = u32::from_be_bytes(field) & 0x7fff_ffff;
                let repaid = increment.min(self.deficit);
                self.deficit -= repaid;
                // The rest, h2's, is counted as the frame passes.
                self.send_window += i64::from(repaid);
                match increment - repaid {
                    0 => Verdict::Drop,
                    rest => {
                        let at = HEAD_LEN..HEAD_LEN + 4;
                        self.held[at].copy_from_slice(&rest.to_be_bytes());
                        Verdict::Pass
                    }
                }
            }
            kind::WINDOW_UPDATE => Verdict::Drop,
            // No room for the padding it announces: an error h2 reports.
            kind::DATA if u32::from(payload[0]) >= head.len => Verdict::Pass,
            kind::DATA => {
                let verdict = self.closed_stream_data(&mut head);
                self.held[..HEAD_LEN].copy_from_slice(&head.bytes());
                verdict
            }
            _ => Verdict::Pass,
        }
    }

    /// DATA on a stream closed before the sleep: h2 answers it with
    /// RST_STREAM (STREAM_CLOSED) and gives its window back (RFC 9113,
    /// 5.1 and 6.9), replies dormant writes, as the fresh connection never
    /// knew the stream; h2 gets the frame as an ignored type, which keeps
    /// its length checked.
    fn closed_stream_data(&mut self, head: &mut Head) -> Verdict {
        if self.closed_reset != head.stream {
            self.closed_reset = head.stream;
            frame::rst_stream(&mut self.replies, head.stream, frame::STREAM_CLOSED);
        }
        if head.len > 0 {
            frame::window_update(&mut self.replies, head.len);
            self.recv_window += i64::from(head.len);
        }
        head.kind = kind::IGNORED;
        Verdict::Pass
    }

    /// Takes the frames dormant writes to the client in answer to frames
    /// h2 did not see, for the caller to write between h2's frames.
    pub(crate) fn replies(&mut self) -> Option<Vec<u8>> {
        (!self.replies.is_empty()).then(|| std::mem::take(&mut self.replies))
    }

    /// Scans bytes the server wrote (those the transport took).
    pub(crate) fn outbound(&mut self, bytes: &[u8]) {
        let mut at = 0;
        while let Some(piece) = self.outbound.next(bytes, &mut at) {
            match piece {
                Piece::Head(head) => {
                    self.out_fields.reset();
                    self.server_frame(head);
                }
                Piece::Payload(head, r) => {
                    let recv_window = &mut self.recv_window;
                    self.out_fields.feed(head, &bytes[r], |field| {
                        if let Field::Increment(n) = field {
                            if head.stream == 0 {
                                *recv_window += i64::from(n);
                            }
                        }
                    });
                }
                Piece::Preface(_) | Piece::End(_) => {}
            }
        }
    }

    /// Where, in `bytes` the server is about to write, the last-stream
    /// field of a GOAWAY begins that may need raising: a woken connection's
    /// fresh h2 counts only the streams since the wake, and would tell the
    /// client that the streams it answered before the sleep were never
    /// processed ([`Watch::raise_goaway`]). `None` on a connection that
    /// never slept.
    pub(crate) fn goaway_field_at(&self, bytes: &[u8]) -> Option<usize> {
        if self.forgotten == 0 {
            return None;
        }
        goaway_field(&mut self.outbound.clone(), bytes)
    }

    /// Whether the slices the server is about to write, in order, hold
    /// a GOAWAY's last-stream field that may need raising.
    pub(crate) fn goaway_in<'a>(&self, slices: impl IntoIterator<Item = &'a [u8]>) -> bool {
        if self.forgotten == 0 {
            return false;
        }
        let mut scanner = self.outbound.clone();
        slices
            .into_iter()
            .any(|bytes| goaway_field(&mut scanner, bytes).is_some())
    }

    /// Raises a GOAWAY's last-stream field (found by
    /// [`Watch::goaway_field_at`]) to the last stream the client opened
    /// before the wake, if it names an earlier one.
    pub(crate) fn raise_goaway(&self, field: &mut [u8; 4]) {
        let last = u32::from_be_bytes(*field) & 0x7fff_ffff;
        if last < self.forgotten {
            *field = self.forgotten.to_be_bytes();
        }
    }

    /// What the server may still send on the connection: the client's
    /// receive window.
    pub(super) fn send_window(&self) -> i64 {
        self.send_window
    }

    /// Whether what h2 writes must pass the window gate
    /// ([`Watch::route`]) instead of going straight to the transport.
    pub(crate) fn gated(&self) -> bool {
        self.gate.is_some()
    }

    /// Routes bytes h2 wrote through the window gate: what may go to the
    /// client now is appended to `out` (in order with what is there), the
    /// rest is held until the client's window lets it go.
    pub(crate) fn route(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        if let Some(mut gate) = self.gate.take() {
            gate.route(self, bytes, out);
            self.keep_gate(gate);
        }
    }

    /// Appends to `out` the held frames the client's window now lets go
    /// (after its WINDOW_UPDATE), if `out` ends at a frame boundary.
    pub(crate) fn release(&mut self, out: &mut Vec<u8>) {
        if let Some(mut gate) = self.gate.take() {
            gate.release(self, out);
            self.keep_gate(gate);
        }
    }

    /// Puts the gate back, unless it is no longer needed: the deficit is
    /// repaid and nothing waits in it.
    fn keep_gate(&mut self, gate: Box<Gate>) {
        if self.deficit > 0 || !gate.is_empty() {
            self.gate = Some(gate);
        }
    }

    /// Notes a server frame's header.
    fn server_frame(&mut self, head: Head) {
        let end_stream = head.has(flag::END_STREAM);
        if head.kind == kind::HEADERS {
            // A header block begins with the size updates owed.
            self.table_size_owed = false;
        }
        match head.kind {
            kind::HEADERS if end_stream => self.ended(head.stream, Side::Server),
            kind::DATA => {
                self.send_window -= i64::from(head.len);
                if end_stream {
                    self.ended(head.stream, Side::Server);
                }
            }
            kind::RST_STREAM => self.ended(head.stream, Side::ServerReset),
            kind::SETTINGS if !head.has(flag::ACK) => {
                self.settings_sent.push_back(Sent::H2);
                self.server_settings = self.server_settings.saturating_add(1);
            }
            kind::PING if head.has(flag::ACK) => self.pings_in = self.pings_in.saturating_sub(1),
            kind::PING => self.pings_out += 1,
            kind::GOAWAY | kind::PUSH_PROMISE => self.ending = true,
            _ => {}
        }
    }

    fn ended(&mut self, id: u32, side: Side) {
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

    /// How many frames the client has sent.
    pub(crate) fn frames_in(&self) -> u64 {
        self.frames_in
    }

    /// Whether nothing is under way on the wire: no stream open, no frame
    /// half-read or half-written, no PING or SETTINGS of h2 in flight, and
    /// no GOAWAY either way.
    pub(crate) fn quiet(&self) -> bool {
        self.open.is_empty()
            && self.replies.is_empty()
            && self.gate.as_ref().is_none_or(|gate| gate.is_empty())
            && !self.header_block
            && !self.ending
            && self.inbound.at_boundary()
            && self.outbound.at_boundary()
            && !self.settings_sent.contains(&Sent::H2)
            && self.pings_in == 0
            && self.pings_out == 0
    }

    /// Whether the connection, quiet, needs a fence before it sleeps: the
    /// client's HPACK table is in use, or a stream was reset while the
    /// client could still send on it (see `wire`).
    pub(crate) fn needs_fence(&self) -> bool {
        !self.table_empty || self.resets > 0
    }

    /// Whether the connection is quiet with no SETTINGS of anyone's in
    /// flight and needs no fence: it may sleep.
    pub(crate) fn settled(&self) -> bool {
        self.quiet() && self.settings_sent.is_empty() && !self.needs_fence()
    }

    /// The fence's frame, for the caller to write (between h2's frames,
    /// before any more of them), if the connection needs one, is quiet and
    /// has no SETTINGS in flight.
    pub(crate) fn fence(&mut self) -> Option<Vec<u8>> {
        if !self.needs_fence() || !self.quiet() || !self.settings_sent.is_empty() {
            return None;
        }
        Some(self.fence_frame())
    }

    /// The fence's frame, noted as sent.
    fn fence_frame(&mut self) -> Vec<u8> {
        self.settings_sent.push_back(Sent::Fence {
            resets: self.resets,
        });
        if self.fence_timing == FenceTiming::FirstResponse {
            self.fence_timing = FenceTiming::Quiet;
        }
        let mut out = Vec::with_capacity(HEAD_LEN + 6);
        frame::settings(&mut out, [(frame::HEADER_TABLE_SIZE, 0)]);
        out
    }

    /// From now on the fence goes out with the response that leaves no
    /// stream open, not once the connection is quiet: its client did not
    /// acknowledge one sent while it was quiet. A client that reads only
    /// while it waits for a response (a synchronous one, such as Python's
    /// httpx) sees a SETTINGS frame only among a response's frames, and
    /// acknowledges it then; before the last frame of the response, the
    /// ACK is on its way when the client stops reading.
    pub(crate) fn fence_early(&mut self) {
        self.fence_timing = FenceTiming::Early;
    }

    /// Whether an early fence is due before a frame that ends the last open
    /// stream (see [`fence_early`](Self::fence_early)). h2's own SETTINGS
    /// may be in flight (a new connection's first response usually goes
    /// out before the client's ACK of them): ACKs come in order.
    fn early_fence_due(&self) -> bool {
        self.fence_timing != FenceTiming::Quiet
            && !self.ending
            && self.needs_fence()
            && self.settings_sent.iter().all(|sent| *sent == Sent::H2)
    }

    /// The early fence's frame, for the caller to write right before the
    /// frame [`early_fence_at`](Self::early_fence_at) found, if it is due.
    pub(crate) fn early_fence(&mut self) -> Option<Vec<u8>> {
        self.early_fence_due().then(|| self.fence_frame())
    }

    /// Whether the server frame `head` ends a stream and leaves none open,
    /// counting the streams `ended` lists as ended already (by frames
    /// before it, not written yet); notes the stream it ends in `ended`.
    fn ends_the_last_stream(&self, head: Head, ended: &mut Vec<u32>) -> bool {
        if !matches!(head.kind, kind::HEADERS | kind::DATA) || !head.has(flag::END_STREAM) {
            return false;
        }
        ended.push(head.stream);
        self.open
            .iter()
            .all(|open| open.client_ended && (open.server_ended || ended.contains(&open.id)))
    }

    /// Where, in the slices the server is about to write, in order, an
    /// early fence goes ([`fence_early`](Self::fence_early)): the offset
    /// of the header of the frame that ends the last open stream, if one
    /// begins in them and a fence is due.
    pub(crate) fn early_fence_at<'a>(
        &self,
        slices: impl IntoIterator<Item = &'a [u8]>,
    ) -> Option<usize> {
        if !self.early_fence_due() || self.open.is_empty() {
            return None;
        }
        let mut scanner = self.outbound.clone();
        let mut ended = Vec::new();
        let mut offset = 0;
        for bytes in slices {
            let mut at = 0;
            while let Some(piece) = scanner.next(bytes, &mut at) {
                if let Piece::Head(head) = piece {
                    if self.ends_the_last_stream(head, &mut ended) {
                        // A header split across writes began before these
                        // bytes: too late for this one.
                        return (offset + at).checked_sub(HEAD_LEN);
                    }
                }
            }
            offset += bytes.len();
        }
        None
    }

    /// The early fence, if it is due before the server frame `head` (the
    /// window gate routes frames one by one: see `gate`).
    pub(super) fn early_fence_before(&mut self, head: Head) -> Option<Vec<u8>> {
        if !self.early_fence_due() || !self.ends_the_last_stream(head, &mut Vec::new()) {
            return None;
        }
        Some(self.fence_frame())
    }

    /// The frame that gives the client its HPACK table back, for the caller
    /// to write (between h2's frames), once a connection whose table was
    /// emptied has become busy (see [`RESTORE_AFTER`]) and no fence is out.
    pub(crate) fn restore(&mut self) -> Option<Vec<u8>> {
        let fence_out = self
            .settings_sent
            .iter()
            .any(|sent| matches!(sent, Sent::Fence { .. }));
        if !self.table_empty || self.streams_since_empty < RESTORE_AFTER || fence_out {
            return None;
        }
        self.table_empty = false;
        self.settings_sent.push_back(Sent::Restore);
        let mut out = Vec::with_capacity(HEAD_LEN + 6);
        frame::settings(&mut out, [(frame::HEADER_TABLE_SIZE, TABLE_SIZE)]);
        Some(out)
    }

    /// Whether the outbound bytes end at a frame boundary, where dormant
    /// may write a frame of its own.
    pub(crate) fn may_write(&self) -> bool {
        self.outbound.at_boundary()
    }

    /// The facts a fresh connection needs, if the connection is
    /// [`settled`](Self::settled); `fresh_window` is what a fresh h2
    /// connection lets the client send; the client's settings are shared
    /// through `cache`.
    pub(crate) fn asleep(
        &self,
        fresh_window: u32,
        cache: &SettingsCache,
    ) -> Result<Asleep, Decline> {
        debug_assert!(self.settled());
        let send_window = u32::try_from(self.send_window).ok();
        let recv_window = u32::try_from(self.recv_window).ok();
        match (send_window, recv_window) {
            _ if self.server_settings > 1 => Err(Decline::Window),
            (Some(send), Some(recv)) if recv <= fresh_window => Ok(Asleep {
                settings: cache.share(&self.settings),
                last_stream: self.last_stream,
                recv_window: recv,
                send_window: send,
                pings: u16::try_from(self.lot_pings).unwrap_or(u16::MAX),
                fence_early: self.fence_timing == FenceTiming::Early,
                table_size_owed: self.table_size_owed,
            }),
            _ => Err(Decline::Window),
        }
    }
}

/// Scans `bytes` with `scanner` up to the first byte of a GOAWAY's
/// payload (its last-stream field), if there is one.
fn goaway_field(scanner: &mut Scanner, bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    loop {
        if let Some(head) = scanner.at_payload_start() {
            if head.kind == kind::GOAWAY && at < bytes.len() {
                return Some(at);
            }
        }
        scanner.next(bytes, &mut at)?;
    }
}

/// Who ended a stream, or reset it.
#[derive(Clone, Copy)]
enum Side {
    Client,
    Server,
    ClientReset,
    ServerReset,
}

impl Watcher for Watch {
    fn send_window(&self) -> i64 {
        Watch::send_window(self)
    }

    fn may_write(&self) -> bool {
        Watch::may_write(self)
    }

    fn early_fence_before(&mut self, head: Head) -> Option<Vec<u8>> {
        Watch::early_fence_before(self, head)
    }

    fn raise_goaway(&self, field: &mut [u8; 4]) {
        Watch::raise_goaway(self, field)
    }

    fn outbound(&mut self, bytes: &[u8]) {
        Watch::outbound(self, bytes)
    }
}

/// What a sleeping HTTP/2 connection keeps: what the client told it and
/// what a fresh hyper connection must be told to take over (see
/// `conn::h2`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Asleep {
    settings: Arc<Settings>,
    last_stream: u32,
    recv_window: u32,
    send_window: u32,
    /// Keep-alive PINGs sent while asleep, not answered yet.
    pings: u16,
    /// The client acknowledges a fence only while it reads a response (see
    /// [`Watch::fence_early`]).
    fence_early: bool,
    /// The client changed its header table size since the server's last
    /// header block: its decoder is owed a size update (see
    /// [`Asleep::prelude`]).
    table_size_owed: bool,
}

/// A wake that cannot bring a fresh connection to where the old one was.
#[derive(Debug)]
pub(crate) struct Unsettled;

impl Asleep {
    /// What a fresh connection reads before the client's next bytes: the
    /// client's preface and settings, as if just sent; an ACK of the fresh
    /// connection's own settings, which the client already lives by (h2
    /// applies its settings, such as a stream's initial window, only once
    /// acknowledged), so that they never need to reach the client; and a
    /// connection WINDOW_UPDATE for the window the client had granted
    /// beyond the initial one.
    ///
    /// HPACK, server to client: the fresh encoder starts empty, believing
    /// the client's decoder's table is the initial 4,096 bytes, and the
    /// replayed header table size makes it open its first block with an
    /// update to that size (if not 4,096). That is where the old encoder
    /// left the decoder, unless it owed the decoder an update when it
    /// slept: a client that lowered its table size and raised it again
    /// before the next response is owed one to the lower size (RFC 7541,
    /// 4.2; nghttp2 empties its table at the ACK). Then the settings come
    /// in two frames: a header table size of 0, then the client's settings
    /// with its own, and the fresh encoder opens with updates to 0 and to
    /// the client's size, which empty the decoder's table and bring both
    /// sides to the same size.
    pub(crate) fn prelude(&self) -> Vec<u8> {
        // Its longest: every setting, and the WINDOW_UPDATE.
        let fence = HEAD_LEN + 6;
        let settings = HEAD_LEN + 6 * usize::from(frame::MAX_SETTING);
        let capacity = frame::PREFACE.len() + fence + settings + HEAD_LEN + HEAD_LEN + 4;
        let mut out = Vec::with_capacity(capacity);
        out.extend_from_slice(frame::PREFACE);
        if self.table_size_owed {
            frame::settings(&mut out, [(frame::HEADER_TABLE_SIZE, 0)]);
        }
        frame::settings(&mut out, self.settings.replayed(self.table_size_owed));
        frame::settings_ack(&mut out);
        if self.send_window > INITIAL_WINDOW {
            frame::window_update(&mut out, self.send_window - INITIAL_WINDOW);
        }
        out
    }

    /// The SETTINGS frames the prelude replays, whose ACKs never reach the
    /// client.
    fn replayed_frames(&self) -> usize {
        1 + usize::from(self.table_size_owed)
    }

    /// A GOAWAY for the client (`NO_ERROR`, every stream it opened
    /// processed): what the server says before it closes a sleeping
    /// connection.
    pub(crate) fn goaway(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD_LEN + 8);
        frame::goaway(&mut out, self.last_stream);
        out
    }

    /// A keep-alive PING for the client while the connection sleeps
    /// (sent by the lot), noted as sent.
    pub(crate) fn keep_alive_ping(&mut self) -> Vec<u8> {
        self.pings = self.pings.saturating_add(1);
        let mut out = Vec::with_capacity(HEAD_LEN + 8);
        frame::ping(&mut out, frame::KEEP_ALIVE_PING);
        out
    }

    /// Answers `read`, bytes the client sent while the connection sleeps,
    /// without waking it, if they are only frames that need no h2: PINGs
    /// (their ACKs appended to `reply`) and ACKs of the keep-alive PINGs
    /// sent while asleep. Returns how many of those ACKs came, to be noted
    /// by [`answered`](Self::answered) once the reply is written; `None`
    /// if any byte needs h2 (any other frame, a PING of another length,
    /// part of a frame), and the connection wakes.
    pub(crate) fn answer(&self, read: &[u8], reply: &mut Vec<u8>) -> Option<u32> {
        let mut pongs = 0;
        let mut frames = read.chunks(HEAD_LEN + 8);
        for bytes in &mut frames {
            let head: &[u8; HEAD_LEN] = bytes.get(..HEAD_LEN)?.try_into().ok()?;
            let head = Head::parse(head);
            let payload: [u8; 8] = bytes.get(HEAD_LEN..)?.try_into().ok()?;
            if (head.kind, head.len, head.stream) != (kind::PING, 8, 0) {
                return None;
            }
            if !head.has(flag::ACK) {
                frame::ping_ack(reply, payload);
            } else if payload == frame::KEEP_ALIVE_PING && pongs < u32::from(self.pings) {
                pongs += 1;
            } else {
                return None;
            }
        }
        Some(pongs)
    }

    /// Notes the ACKs of keep-alive PINGs that [`answer`](Self::answer)
    /// found.
    pub(crate) fn answered(&mut self, pongs: u32) {
        self.pings -= u16::try_from(pongs).unwrap_or(self.pings);
    }

    /// The watch of the fresh connection, which starts where this one
    /// slept: with the client's table empty.
    pub(crate) fn watch(&self) -> Watch {
        Watch {
            inbound: Scanner::default(),
            table_empty: true,
            settings: (*self.settings).clone(),
            last_stream: self.last_stream,
            recv_window: self.recv_window.into(),
            send_window: self.send_window.into(),
            deficit: INITIAL_WINDOW.saturating_sub(self.send_window),
            gate: (self.send_window < INITIAL_WINDOW).then(Box::default),
            forgotten: self.last_stream,
            lot_pings: self.pings.into(),
            fence_timing: match self.fence_early {
                true => FenceTiming::Early,
                false => FenceTiming::Quiet,
            },
            table_size_owed: self.table_size_owed,
            server_settings: 1,
            ..Watch::new()
        }
    }

    /// Rewrites what a fresh connection wrote in answer to the prelude
    /// before the client sees it: its SETTINGS (the client has them, and
    /// the prelude acknowledged them) and its ACKs of the replayed ones go,
    /// and its connection WINDOW_UPDATEs become one that brings the
    /// client's view of the window to the fresh connection's. `Err` if the
    /// fresh connection lets the client send less than it may already
    /// (the sleep should have been declined).
    pub(crate) fn settle(&self, written: &[u8]) -> Result<Vec<u8>, Unsettled> {
        let mut out = Vec::with_capacity(written.len());
        let mut scanner = Scanner::default();
        let mut fields = Fields::default();
        let mut fresh_window = u64::from(INITIAL_WINDOW);
        let mut acks = 0;
        let mut keep = true;
        let mut at = 0;
        while let Some(piece) = scanner.next(written, &mut at) {
            match piece {
                Piece::Head(head) => {
                    fields.reset();
                    keep = match head.kind {
                        kind::SETTINGS if !head.has(flag::ACK) => false,
                        kind::SETTINGS if acks < self.replayed_frames() => {
                            acks += 1;
                            false
                        }
                        kind::WINDOW_UPDATE if head.stream == 0 => false,
                        _ => true,
                    };
                    if keep {
                        out.extend_from_slice(&head.bytes());
                    }
                }
                Piece::Payload(head, r) => {
                    fields.feed(head, &written[r.clone()], |field| {
                        if let (Field::Increment(n), 0) = (field, head.stream) {
                            fresh_window += u64::from(n);
                        }
                    });
                    if keep {
                        out.extend_from_slice(&written[r]);
                    }
                }
                Piece::Preface(_) | Piece::End(_) => {}
            }
        }
        let grant = fresh_window
            .checked_sub(self.recv_window.into())
            .ok_or(Unsettled)?;
        if grant > 0 {
            frame::window_update(&mut out, u32::try_from(grant).map_err(|_| Unsettled)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(kind: u8, flags: u8, stream: u32, len: u32) -> Vec<u8> {
        Head {
            len,
            kind,
            flags,
            stream,
        }
        .bytes()
        .to_vec()
    }

    /// Passes client bytes through `watch` as a read would; what h2 gets.
    fn read(watch: &mut Watch, bytes: &[u8]) -> Vec<u8> {
        let mut buf = vec![0; HELD + bytes.len()];
        buf[HELD..].copy_from_slice(bytes);
        let end = buf.len();
        let len = watch.inbound(&mut buf, HELD, end);
        buf.truncate(len);
        buf
    }

    fn client_start(watch: &mut Watch) {
        let mut bytes = frame::PREFACE.to_vec();
        frame::settings(&mut bytes, [(frame::HEADER_TABLE_SIZE, 8192), (4, 1 << 20)]);
        frame::window_update(&mut bytes, (16 << 20) - INITIAL_WINDOW);
        assert_eq!(
            read(watch, &bytes),
            bytes,
            "nothing of the start is removed"
        );
    }

    /// A request on `stream` with a body of `body` bytes, answered with
    /// `answer` bytes.
    fn exchange(watch: &mut Watch, stream: u32, body: u32, answer: u32) {
        let mut req = head(kind::HEADERS, flag::END_HEADERS, stream, 1);
        req.push(0x82);
        req.extend(head(kind::DATA, flag::END_STREAM, stream, body));
        req.extend(vec![0; body as usize]);
        read(watch, &req);
        assert!(!watch.quiet(), "a stream is open");
        let mut res = head(kind::HEADERS, flag::END_HEADERS, stream, 1);
        res.push(0x88);
        res.extend(head(kind::DATA, flag::END_STREAM, stream, answer));
        res.extend(vec![0; answer as usize]);
        // Written in two pieces, split inside a frame header.
        watch.outbound(&res[..12]);
        assert!(!watch.quiet(), "a frame is half-written");
        watch.outbound(&res[12..]);
    }

    #[test]
    fn a_connection_sleeps_after_its_fence_with_its_windows() {
        let mut watch = Watch::new();
        client_start(&mut watch);
        let mut server_start = Vec::new();
        frame::settings(&mut server_start, [(4, 1 << 20)]);
        frame::window_update(&mut server_start, (1 << 20) - INITIAL_WINDOW);
        watch.outbound(&server_start);
        assert!(!watch.quiet(), "the server's SETTINGS is unacknowledged");
        read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
        exchange(&mut watch, 1, 1000, 5000);
        exchange(&mut watch, 3, 0, 70_000);
        assert!(watch.quiet());
        assert!(!watch.settled(), "the client's HPACK table is in use");
        let fence = watch.fence().expect("a fence");
        assert_eq!(watch.fence(), None, "one fence at a time");
        assert!(watch.quiet(), "the fence does not make it busy");
        assert!(!watch.settled());
        // The client's ACK of the fence is kept from h2.
        let ack = head(kind::SETTINGS, flag::ACK, 0, 0);
        assert_eq!(read(&mut watch, &ack), b"");
        assert!(watch.settled());
        assert_eq!(watch.fence(), None, "fenced already");
        let asleep = watch
            .asleep(1 << 20, &SettingsCache::default())
            .expect("asleep");
        assert_eq!(asleep.last_stream, 3);
        assert_eq!(asleep.send_window, (16 << 20) - 5000 - 70_000);
        assert_eq!(asleep.recv_window, (1 << 20) - 1000);
        assert_eq!(fence, [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        // A fresh connection whose window is smaller than what the client
        // may send cannot take over.
        assert_eq!(
            watch.asleep(65_535, &SettingsCache::default()),
            Err(Decline::Window)
        );
    }

    /// hyper's adaptive window raises the streams' windows with a SETTINGS
    /// frame of h2's mid-connection; a fresh connection would open with the
    /// first ones and reject what the client may now send on a stream.
    #[test]
    fn a_connection_whose_server_changed_its_settings_declines() {
        let mut watch = Watch::new();
        client_start(&mut watch);
        let mut server_start = Vec::new();
        frame::settings(&mut server_start, [(4, INITIAL_WINDOW)]);
        watch.outbound(&server_start);
        read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
        exchange(&mut watch, 1, 60_000, 10);
        let mut raised = Vec::new();
        frame::settings(&mut raised, [(4, 120_000)]);
        watch.outbound(&raised);
        read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
        watch.fence().expect("a fence");
        read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
        assert!(watch.settled());
        assert!(
            watch.recv_window <= i64::from(INITIAL_WINDOW),
            "the connection window alone would not decline"
        );
        assert_eq!(
            watch.asleep(INITIAL_WINDOW, &SettingsCache::default()),
            Err(Decline::Window)
        );

        // A woken connection's first SETTINGS of h2 is already a change:
        // the one it opened with was removed (`Asleep::settle`).
        let asleep = Asleep {
            settings: Arc::default(),
            last_stream: 1,
            recv_window: INITIAL_WINDOW,
            send_window: INITIAL_WINDOW,
            pings: 0,
            fence_early: false,
            table_size_owed: false,
        };
        let mut woken = asleep.watch();
        assert!(
            woken
                .asleep(INITIAL_WINDOW, &SettingsCache::default())
                .is_ok()
        );
        woken.outbound(&raised);
        read(&mut woken, &head(kind::SETTINGS, flag::ACK, 0, 0));
        assert_eq!(
            woken.asleep(INITIAL_WINDOW, &SettingsCache::default()),
            Err(Decline::Window)
        );
    }

    #[test]
    fn a_woken_connection_needs_a_fence_only_after_a_reset_or_a_restore() {
        let asleep = Asleep {
            settings: Arc::default(),
            last_stream: 1,
            recv_window: 1 << 20,
            send_window: 1 << 20,
            pings: 0,
            fence_early: false,
            table_size_owed: false,
        };
        let mut watch = asleep.watch();
        exchange(&mut watch, 3, 10, 10);
        assert!(watch.settled(), "the client's table is still empty");
        // The server answers stream 5 and resets it while the client still
        // sends its body: the client may send more before it reads that.
        let mut req = head(kind::HEADERS, flag::END_HEADERS, 5, 1);
        req.push(0x82);
        read(&mut watch, &req);
        let mut res = head(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 5, 1);
        res.push(0x88);
        res.extend(head(kind::RST_STREAM, 0, 5, 4));
        res.extend(0u32.to_be_bytes());
        watch.outbound(&res);
        assert!(watch.quiet());
        assert!(!watch.settled(), "frames of stream 5 may come late");
        watch.fence().expect("a fence");
        exchange(&mut watch, 7, 0, 0);
        read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
        assert!(watch.settled(), "the ACK came after stream 5's last frame");
        // A busy connection gets its table back, and then needs a fence.
        for stream in [9, 11, 13, 15] {
            assert_eq!(watch.restore(), None, "not busy yet");
            exchange(&mut watch, stream, 0, 0);
        }
        let restore = watch.restore().expect("busy: the table comes back");
        assert_eq!(restore, [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 1, 0, 0, 16, 0]);
        assert_eq!(watch.restore(), None);
        assert!(!watch.settled(), "the restore is unacknowledged");
        assert_eq!(
            read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0)),
            b""
        );
        assert!(watch.quiet());
        assert!(watch.needs_fence(), "the client's table is in use");
    }

    #[test]
    fn a_client_that_kept_the_initial_window_and_received_data_sleeps_gated() {
        let mut watch = Watch::new();
        let mut bytes = frame::PREFACE.to_vec();
        frame::settings(&mut bytes, []);
        read(&mut watch, &bytes);
        exchange(&mut watch, 1, 0, 100);
        watch.fence().unwrap();
        read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
        assert!(watch.settled());
        let asleep = watch.asleep(1 << 20, &SettingsCache::default()).unwrap();
        assert_eq!(asleep.send_window, INITIAL_WINDOW - 100);
        let woken = asleep.watch();
        assert!(woken.gated());
        assert_eq!(woken.deficit, 100);
        // One that slept with its window whole needs no gate.
        let whole = Asleep {
            send_window: INITIAL_WINDOW,
            ..asleep
        };
        assert!(!whole.watch().gated());
    }

    /// Routes what h2 writes, `chunks` at a time, through the gate.
    fn route(watch: &mut Watch, bytes: &[u8], chunk: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for piece in bytes.chunks(chunk) {
            watch.route(piece, &mut out);
        }
        out
    }

    /// A woken connection whose client had granted 10 bytes: the gate
    /// lets 10 bytes of DATA go (the frame cut there), holds the rest and
    /// the frames after it (a stream-0 frame passes them), and lets them
    /// go as the client's WINDOW_UPDATEs open the window; the part that
    /// repays the deficit never reaches h2. Split anywhere, the same.
    #[test]
    fn the_gate_sends_no_more_than_the_client_granted() {
        let asleep = Asleep {
            settings: Arc::default(),
            last_stream: 1,
            recv_window: INITIAL_WINDOW,
            send_window: 10,
            pings: 0,
            fence_early: false,
            table_size_owed: false,
        };
        let mut h2 = frame_of(kind::HEADERS, flag::END_HEADERS, 3, &[0x88]);
        h2.extend(frame_of(kind::DATA, flag::END_STREAM, 3, &[7; 30]));
        h2.extend(frame_of(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            5,
            &[0x88],
        ));
        h2.extend(frame_of(kind::PING, flag::ACK, 0, b"pingpong"));
        let mut now = frame_of(kind::HEADERS, flag::END_HEADERS, 3, &[0x88]);
        now.extend(frame_of(kind::DATA, 0, 3, &[7; 10]));
        now.extend(frame_of(kind::PING, flag::ACK, 0, b"pingpong"));
        let update = |n: u32| frame_of(kind::WINDOW_UPDATE, 0, 0, &n.to_be_bytes());
        for chunk in 1..=h2.len() {
            let mut watch = asleep.watch();
            for stream in [3, 5] {
                read(
                    &mut watch,
                    &frame_of(
                        kind::HEADERS,
                        flag::END_HEADERS | flag::END_STREAM,
                        stream,
                        &[0x82],
                    ),
                );
            }
            assert_eq!(route(&mut watch, &h2, chunk), now, "chunks of {chunk}");
            assert!(!watch.quiet(), "frames are held");
            // 5 bytes: all of them repay the deficit; h2 gets nothing.
            assert_eq!(read(&mut watch, &update(5)), b"");
            let mut out = Vec::new();
            watch.release(&mut out);
            assert_eq!(out, frame_of(kind::DATA, 0, 3, &[7; 5]));
            // 65,530: the rest of the deficit (65,520), and 10 for h2.
            assert_eq!(read(&mut watch, &update(65_530)), update(10));
            let mut out = Vec::new();
            watch.release(&mut out);
            let mut rest = frame_of(kind::DATA, flag::END_STREAM, 3, &[7; 15]);
            rest.extend(frame_of(
                kind::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                5,
                &[0x88],
            ));
            assert_eq!(out, rest);
            assert_eq!(watch.send_window, 65_530 - 15);
            assert!(!watch.gated(), "repaid, nothing held: no gate");
            assert!(watch.quiet());
        }
    }

    /// An increment of 0 reaches h2 (an error h2 reports), as does the
    /// part of an increment beyond the deficit, whatever the split.
    #[test]
    fn window_updates_repay_the_deficit_first() {
        let asleep = Asleep {
            settings: Arc::default(),
            last_stream: 1,
            recv_window: INITIAL_WINDOW,
            send_window: INITIAL_WINDOW - 1_000,
            pings: 0,
            fence_early: false,
            table_size_owed: false,
        };
        let update = |n: u32| frame_of(kind::WINDOW_UPDATE, 0, 0, &n.to_be_bytes());
        let zero = update(0);
        assert_eq!(read_split(&asleep, &zero), (zero.clone(), vec![]));
        let bytes = [update(600), update(700), update(50)].concat();
        let to_h2 = [update(300), update(50)].concat();
        assert_eq!(read_split(&asleep, &bytes), (to_h2, vec![]));
        let mut watch = asleep.watch();
        read(&mut watch, &bytes);
        assert_eq!(watch.deficit, 0);
        assert_eq!(watch.send_window, i64::from(INITIAL_WINDOW) + 350);
        assert!(watch.gated(), "dropped at its next use");
        watch.release(&mut Vec::new());
        assert!(!watch.gated());
    }

    #[test]
    fn pings_and_goaway_keep_it_awake() {
        let mut watch = Watch::new();
        client_start(&mut watch);
        let mut ping = head(kind::PING, 0, 0, 8);
        ping.extend([0; 8]);
        read(&mut watch, &ping);
        assert!(!watch.quiet(), "the client's PING is unanswered");
        let mut pong = head(kind::PING, flag::ACK, 0, 8);
        pong.extend([0; 8]);
        watch.outbound(&pong);
        assert!(watch.quiet());
        let mut goaway = Vec::new();
        frame::goaway(&mut goaway, 0);
        read(&mut watch, &goaway);
        assert!(!watch.quiet(), "the client is going away");
    }

    /// A woken connection: what its fresh h2 reads first, how its answer
    /// is settled, and which client frames it never sees.
    #[test]
    fn a_woken_connection_is_brought_to_where_it_slept() {
        let asleep = Asleep {
            settings: {
                let mut s = Settings::default();
                s.set(frame::HEADER_TABLE_SIZE, 8192);
                s.set(4, 1 << 20);
                Arc::new(s)
            },
            last_stream: 7,
            recv_window: 900_000,
            send_window: 2_000_000,
            pings: 0,
            fence_early: false,
            table_size_owed: false,
        };
        let mut expected = frame::PREFACE.to_vec();
        frame::settings(&mut expected, [(1, 8192), (4, 1 << 20)]);
        frame::settings_ack(&mut expected);
        frame::window_update(&mut expected, 2_000_000 - INITIAL_WINDOW);
        assert_eq!(asleep.prelude(), expected);
        // A client whose decoder is owed a size update: 0, then its own
        // (HPACK's default if it never sent one).
        let mut defaults = Settings::default();
        defaults.set(3, 100);
        let mut expected = frame::PREFACE.to_vec();
        frame::settings(&mut expected, [(1, 0)]);
        frame::settings(&mut expected, [(1, 4096), (3, 100)]);
        frame::settings_ack(&mut expected);
        let owed = Asleep {
            settings: Arc::new(defaults),
            last_stream: 7,
            recv_window: 900_000,
            send_window: INITIAL_WINDOW,
            pings: 0,
            fence_early: false,
            table_size_owed: true,
        };
        assert_eq!(owed.prelude(), expected);

        // The fresh connection's answer: its SETTINGS, its ACK of the
        // replayed ones (two ACKs for two frames), its WINDOW_UPDATE up to
        // 1 MiB.
        let mut answer = Vec::new();
        frame::settings(&mut answer, [(1, 4096), (4, 1 << 20)]);
        frame::settings_ack(&mut answer);
        frame::window_update(&mut answer, (1 << 20) - INITIAL_WINDOW);
        let mut settled = Vec::new();
        frame::window_update(&mut settled, (1 << 20) - 900_000);
        assert_eq!(asleep.settle(&answer).unwrap(), settled);
        let mut answer = Vec::new();
        frame::settings(&mut answer, [(1, 4096), (4, 1 << 20)]);
        frame::settings_ack(&mut answer);
        frame::settings_ack(&mut answer);
        frame::window_update(&mut answer, (1 << 20) - INITIAL_WINDOW);
        assert_eq!(owed.settle(&answer).unwrap(), settled);
        // A fresh connection that grants less than the client has.
        let mut small = Vec::new();
        frame::settings_ack(&mut small);
        assert!(asleep.settle(&small).is_err());

        let mut watch = asleep.watch();
        watch.outbound(&settled);
        assert!(watch.settled(), "the client's table is still empty");
        // Frames on streams the fresh connection never saw that h2 would
        // ignore are removed, the others pass.
        let mut late = head(kind::WINDOW_UPDATE, 0, 5, 4);
        late.extend(1000u32.to_be_bytes());
        let mut reset = head(kind::RST_STREAM, 0, 7, 4);
        reset.extend(8u32.to_be_bytes());
        let mut next = head(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 9, 1);
        next.push(0x82);
        let bytes = [late, reset, next.clone()].concat();
        for split in 1..bytes.len() {
            let mut w = asleep.watch();
            let mut got = read(&mut w, &bytes[..split]);
            got.extend(read(&mut w, &bytes[split..]));
            assert_eq!(got, next, "split at {split}");
        }
        assert_eq!(read(&mut watch, &bytes), next);
        assert!(!watch.quiet(), "stream 9 is open");
    }

    #[test]
    fn sleeping_connections_with_the_same_settings_share_them() {
        let cache = SettingsCache::default();
        let set = |id, value| {
            let mut s = Settings::default();
            s.set(id, value);
            s
        };
        let browser = cache.share(&set(4, 1 << 20));
        assert!(Arc::ptr_eq(&browser, &cache.share(&set(4, 1 << 20))));
        let held: Vec<_> = (1..SHARED_SETTINGS as u32)
            .map(|i| cache.share(&set(3, i)))
            .collect();
        // Full of sets in use: a new one is not shared.
        let new = set(3, 1000);
        assert!(!Arc::ptr_eq(&cache.share(&new), &cache.share(&new)));
        // Sets no connection keeps make room.
        drop(held);
        assert!(Arc::ptr_eq(&cache.share(&new), &cache.share(&new)));
        assert!(Arc::ptr_eq(&browser, &cache.share(&set(4, 1 << 20))));
    }

    /// A woken connection's GOAWAY names at least the last stream of
    /// before the sleep (the fresh h2 knows only those since the wake).
    #[test]
    fn a_woken_connections_goaway_counts_the_streams_before_the_sleep() {
        let mut pong = Vec::new();
        frame::settings_ack(&mut pong);
        let mut goaway = Vec::new();
        frame::goaway(&mut goaway, 0);
        let bytes = [pong.clone(), goaway.clone()].concat();
        assert_eq!(Watch::new().goaway_field_at(&bytes), None, "never slept");
        let asleep = Asleep {
            settings: Arc::default(),
            last_stream: 45,
            recv_window: INITIAL_WINDOW,
            send_window: INITIAL_WINDOW,
            pings: 0,
            fence_early: false,
            table_size_owed: false,
        };
        let mut watch = asleep.watch();
        let at = HEAD_LEN * 2;
        assert_eq!(watch.goaway_field_at(&bytes), Some(at));
        assert!(watch.goaway_in([&bytes[..3], &bytes[3..]]));
        // Across a split: the field is found where the next write begins.
        watch.outbound(&bytes[..at]);
        assert_eq!(watch.goaway_field_at(&bytes[at..]), Some(0));
        let mut field = [0; 4];
        watch.raise_goaway(&mut field);
        assert_eq!(field, 45u32.to_be_bytes());
        let mut later = 47u32.to_be_bytes();
        watch.raise_goaway(&mut later);
        assert_eq!(later, 47u32.to_be_bytes(), "a stream since the wake");
        watch.outbound(&field);
        assert_eq!(watch.goaway_field_at(&bytes[at + 4..]), None);
    }

    /// The ACKs of the lot's keep-alive PINGs never reach h2; later ones,
    /// and the client's own PINGs, do.
    #[test]
    fn the_ack_of_a_ping_sent_while_asleep_is_kept_from_h2() {
        let mut asleep = Asleep {
            settings: Arc::default(),
            last_stream: 1,
            recv_window: INITIAL_WINDOW,
            send_window: INITIAL_WINDOW,
            pings: 0,
            fence_early: false,
            table_size_owed: false,
        };
        let ping = asleep.keep_alive_ping();
        assert_eq!(
            ping,
            [&[0, 0, 8, 6, 0, 0, 0, 0, 0][..], b"dormant!"].concat()
        );
        let ack = |payload: &[u8; 8]| [&head(kind::PING, flag::ACK, 0, 8)[..], payload].concat();
        let client_ping = [&head(kind::PING, 0, 0, 8)[..], b"client!!"].concat();
        let bytes = [ack(b"dormant!"), client_ping.clone()].concat();
        for split in 1..bytes.len() {
            let mut watch = asleep.watch();
            let mut got = read(&mut watch, &bytes[..split]);
            got.extend(read(&mut watch, &bytes[split..]));
            assert_eq!(got, client_ping, "split at {split}");
        }
        // Slept again before the ACK came: it is kept from the next one.
        let again = asleep
            .watch()
            .asleep(INITIAL_WINDOW, &SettingsCache::default())
            .unwrap();
        let mut watch = again.watch();
        assert!(read(&mut watch, &ack(b"dormant!")).is_empty());
        // One nothing of the lot's asked for is h2's business.
        let stray = ack(b"strayack");
        assert_eq!(read(&mut watch, &stray), stray);
    }

    /// Passes `bytes` through a fresh watch of `asleep` split at every
    /// place; what h2 gets and what dormant replies, the same for each.
    fn read_split(asleep: &Asleep, bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut whole = asleep.watch();
        let want = (read(&mut whole, bytes), whole.replies().unwrap_or_default());
        for split in 1..bytes.len() {
            let mut w = asleep.watch();
            let mut got = read(&mut w, &bytes[..split]);
            got.extend(read(&mut w, &bytes[split..]));
            let got = (got, w.replies().unwrap_or_default());
            assert_eq!(got, want, "split at {split}");
        }
        want
    }

    fn frame_of(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        [
            &head(kind, flags, stream, payload.len() as u32)[..],
            payload,
        ]
        .concat()
    }

    /// Frames on the streams closed before a sleep, which the fresh
    /// connection never knew, get what h2 answers on a closed stream: the
    /// frames it ignores are removed or disguised, the errors it reports
    /// reach it as they are, and DATA is answered by dormant.
    #[test]
    fn frames_on_streams_from_before_the_sleep_are_answered_as_on_closed_streams() {
        let asleep = Asleep {
            settings: Arc::default(),
            last_stream: 3,
            recv_window: INITIAL_WINDOW,
            send_window: INITIAL_WINDOW,
            pings: 0,
            fence_early: false,
            table_size_owed: false,
        };
        let unchanged = |bytes: Vec<u8>| {
            assert_eq!(read_split(&asleep, &bytes), (bytes.clone(), vec![]));
        };
        // A HEADERS reusing an id reaches h2 on stream 0: a connection
        // error, as reusing an id is.
        let reuse = frame_of(kind::HEADERS, flag::END_HEADERS, 1, &[0x82]);
        let to_h2 = frame_of(kind::HEADERS, flag::END_HEADERS, 0, &[0x82]);
        assert_eq!(read_split(&asleep, &reuse), (to_h2, vec![]));
        // DATA: STREAM_CLOSED and its window back, once per stream; h2
        // gets it as a frame of an ignored type.
        let data = frame_of(kind::DATA, 0, 1, b"hello");
        let data2 = frame_of(kind::DATA, flag::END_STREAM, 1, b"again!");
        let data3 = frame_of(kind::DATA, flag::PADDED, 3, &[2, b'x', 0, 0]);
        let bytes = [data, data2, data3].concat();
        let mut to_h2 = bytes.clone();
        for at in [0, HEAD_LEN + 5, 2 * HEAD_LEN + 11] {
            to_h2[at + 3] = kind::IGNORED;
        }
        let mut replies = Vec::new();
        frame::rst_stream(&mut replies, 1, frame::STREAM_CLOSED);
        frame::window_update(&mut replies, 5);
        frame::window_update(&mut replies, 6);
        frame::rst_stream(&mut replies, 3, frame::STREAM_CLOSED);
        frame::window_update(&mut replies, 4);
        assert_eq!(read_split(&asleep, &bytes), (to_h2, replies));
        let mut watch = asleep.watch();
        read(&mut watch, &frame_of(kind::DATA, 0, 1, b"hello"));
        assert!(!watch.quiet(), "a reply is unwritten");
        assert!(watch.replies().is_some());
        assert!(watch.quiet());
        assert_eq!(watch.recv_window, i64::from(INITIAL_WINDOW), "given back");
        // Well-formed RST_STREAM and WINDOW_UPDATE frames: ignored.
        let reset = frame_of(kind::RST_STREAM, 0, 1, &8u32.to_be_bytes());
        let update = frame_of(kind::WINDOW_UPDATE, 0, 3, &1000u32.to_be_bytes());
        assert_eq!(
            read_split(&asleep, &[reset, update].concat()),
            (vec![], vec![])
        );
        // What h2 refuses reaches it: an increment of 0, frames of the
        // wrong length, too much padding.
        unchanged(frame_of(kind::WINDOW_UPDATE, 0, 1, &[0x80, 0, 0, 0]));
        unchanged(frame_of(kind::WINDOW_UPDATE, 0, 1, &[0; 8]));
        unchanged(frame_of(kind::RST_STREAM, 0, 1, &[0; 3]));
        unchanged(frame_of(kind::DATA, flag::PADDED, 1, &[3, 0, 0]));
        unchanged(frame_of(kind::DATA, flag::PADDED, 1, &[]));
        // So does a frame on the server's ids, which h2 answers the same.
        unchanged(frame_of(kind::WINDOW_UPDATE, 0, 2, &1u32.to_be_bytes()));
        // And on the streams opened since the wake.
        unchanged(frame_of(kind::HEADERS, flag::END_HEADERS, 5, &[0x82]));
    }

    /// ACKs are told apart by payload, whatever their order: the lot's
    /// keep-alive PING's never reaches h2, h2's own always does.
    #[test]
    fn ping_acks_are_told_apart_by_payload() {
        let asleep = Asleep {
            settings: Arc::default(),
            last_stream: 1,
            recv_window: INITIAL_WINDOW,
            send_window: INITIAL_WINDOW,
            pings: 1,
            fence_early: false,
            table_size_owed: false,
        };
        let h2s = frame_of(kind::PING, flag::ACK, 0, &[0x3b; 8]);
        let lots = frame_of(kind::PING, flag::ACK, 0, &frame::KEEP_ALIVE_PING);
        for bytes in [[&h2s[..], &lots].concat(), [&lots[..], &h2s].concat()] {
            assert_eq!(read_split(&asleep, &bytes), (h2s.clone(), vec![]));
            let mut watch = asleep.watch();
            watch.outbound(&frame_of(kind::PING, 0, 0, &[0x3b; 8]));
            assert!(!watch.quiet(), "h2's PING is out");
            read(&mut watch, &bytes);
            assert!(watch.quiet());
            assert_eq!(watch.lot_pings, 0);
        }
    }

    /// A sleeping connection answers PINGs, and takes the ACKs of the
    /// keep-alive PINGs sent while asleep, where it sleeps; anything else,
    /// or part of a frame, wakes it.
    #[test]
    fn pings_and_their_acks_are_answered_asleep() {
        let mut asleep = Asleep {
            settings: Arc::default(),
            last_stream: 1,
            recv_window: INITIAL_WINDOW,
            send_window: INITIAL_WINDOW,
            pings: 0,
            fence_early: false,
            table_size_owed: false,
        };
        let ping = frame_of(kind::PING, 0, 0, b"client!!");
        let ours = frame_of(kind::PING, flag::ACK, 0, &frame::KEEP_ALIVE_PING);
        let mut reply = Vec::new();
        assert_eq!(
            asleep.answer(&[ping.clone(), ping.clone()].concat(), &mut reply),
            Some(0)
        );
        let pong = frame_of(kind::PING, flag::ACK, 0, b"client!!");
        assert_eq!(reply, [pong.clone(), pong.clone()].concat());
        // An ACK of a PING the lot did not send is h2's business.
        assert_eq!(asleep.answer(&ours, &mut Vec::new()), None);
        asleep.keep_alive_ping();
        let mut reply = Vec::new();
        let both = [ours.clone(), ping.clone()].concat();
        assert_eq!(asleep.answer(&both, &mut reply), Some(1));
        assert_eq!(reply, pong);
        assert_eq!(asleep.pings, 1, "noted only once answered");
        asleep.answered(1);
        assert_eq!(asleep.pings, 0);
        // What needs h2 wakes it.
        let wakes = [
            ping[..10].to_vec(),
            [
                ping.clone(),
                frame_of(kind::HEADERS, flag::END_HEADERS, 3, &[0x82]),
            ]
            .concat(),
            frame_of(kind::PING, flag::ACK, 0, b"h2's ack"),
            frame_of(kind::PING, 0, 0, b"longer ping"),
            frame_of(kind::PING, 0, 1, b"stream 1"),
            frame_of(kind::SETTINGS, flag::ACK, 0, &[]),
        ];
        for bytes in wakes {
            assert_eq!(asleep.answer(&bytes, &mut Vec::new()), None, "{bytes:?}");
        }
    }

    /// A client that changes its header table size is owed a size update
    /// until the server's next header block, across sleeps too.
    #[test]
    fn a_table_size_change_is_owed_until_the_next_header_block() {
        let mut watch = Watch::new();
        client_start(&mut watch);
        assert!(watch.table_size_owed, "the client's first SETTINGS set one");
        exchange(&mut watch, 1, 0, 10);
        assert!(!watch.table_size_owed, "the response's block paid it");
        let mut change = Vec::new();
        frame::settings(&mut change, [(frame::HEADER_TABLE_SIZE, 0)]);
        frame::settings(&mut change, [(frame::HEADER_TABLE_SIZE, 4096)]);
        read(&mut watch, &change);
        let ack = frame_of(kind::SETTINGS, flag::ACK, 0, &[]);
        watch.outbound(&[ack.clone(), ack].concat());
        watch.fence().expect("a fence");
        read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
        let asleep = watch.asleep(1 << 20, &SettingsCache::default()).unwrap();
        assert!(asleep.table_size_owed);
        // Woken and asleep again before a block: still owed.
        let again = asleep
            .watch()
            .asleep(1 << 20, &SettingsCache::default())
            .unwrap();
        assert!(again.table_size_owed);
        let mut woken = again.watch();
        exchange(&mut woken, 3, 0, 10);
        assert!(!woken.table_size_owed);
    }
}
