//! The watcher: what an HTTP/2 connection's frames say, both ways, while
//! it is awake ([`Watch`]), and the frames it removes or rewrites on their
//! way to h2. It reads every byte that passes; what the frames say it
//! keeps by concern: the client's settings (`settings.rs`), the streams
//! (`streams.rs`), the fence and the SETTINGS in flight (`fence.rs`), and,
//! here, the connection windows (with the window gate of a woken
//! connection, `gate.rs`), PINGs and what is half-read or half-written.
//! When it may sleep, it gives the connection's sleeping form
//! ([`Asleep`], `asleep.rs`), and a wake starts a watcher from that form
//! ([`Watch::woken`]).

use super::asleep::Asleep;
use super::fence::Fence;
use super::frame::{
    self, Field, Fields, HEAD_LEN, Head, INITIAL_WINDOW, Piece, Scanner, flag, kind,
};
use super::gate::{Gate, Watcher};
use super::settings::{Settings, SettingsCache};
use super::streams::{Side, Streams};

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
    streams: Streams,
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
    /// The fence, the restore, and the SETTINGS frames in flight.
    fence: Fence,
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
    /// The client sent SETTINGS_HEADER_TABLE_SIZE since the server's last
    /// header block: the server's encoder owes its decoder a size update
    /// (RFC 7541, 4.2), which it sends at the start of its next block.
    table_size_owed: bool,
    /// A header block is open (CONTINUATION frames follow).
    header_block: bool,
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
            streams: Streams::default(),
            recv_window: INITIAL_WINDOW.into(),
            send_window: INITIAL_WINDOW.into(),
            deficit: 0,
            gate: None,
            fence: Fence::new(),
            pings_out: 0,
            pings_in: 0,
            lot_pings: 0,
            ending: false,
            table_size_owed: false,
            header_block: false,
            frames_in: 0,
            server_settings: 0,
        }
    }

    /// The watch of a fresh connection woken from `asleep`, which starts
    /// where the sleeping one left off: with the client's table empty.
    pub(crate) fn woken(asleep: &Asleep) -> Watch {
        Watch {
            inbound: Scanner::default(),
            settings: (*asleep.settings).clone(),
            streams: Streams::woken(asleep.last_stream),
            recv_window: asleep.recv_window.into(),
            send_window: asleep.send_window.into(),
            deficit: INITIAL_WINDOW.saturating_sub(asleep.send_window),
            gate: (asleep.send_window < INITIAL_WINDOW).then(Box::default),
            lot_pings: asleep.pings.into(),
            fence: Fence::woken(asleep.fence_early),
            table_size_owed: asleep.table_size_owed,
            server_settings: 1,
            ..Watch::new()
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
        let forgotten = self.streams.is_forgotten(head.stream);
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
                if self.streams.client_headers(head.stream, end_stream) {
                    self.fence.stream_opened();
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
                    self.streams.ended(head.stream, Side::Client);
                }
            }
            // On a closed stream, h2 ignores a well-formed RST_STREAM, and
            // a WINDOW_UPDATE whose increment is not 0.
            kind::RST_STREAM if forgotten && head.len == 4 => return Verdict::Drop,
            kind::WINDOW_UPDATE if forgotten && head.len == 4 => return Verdict::Hold { need: 4 },
            kind::RST_STREAM => self.streams.ended(head.stream, Side::ClientReset),
            // Its increment repays the deficit first (see `gate`).
            kind::WINDOW_UPDATE if head.stream == 0 && head.len == 4 && self.deficit > 0 => {
                return Verdict::Hold { need: 4 };
            }
            // The ACK of dormant's own SETTINGS is kept from h2; one of
            // h2's reaches it, as does one nothing asked for (h2 reports
            // the error).
            kind::SETTINGS if head.has(flag::ACK) && head.len == 0 => {
                if let Some(resets) = self.fence.acknowledged() {
                    self.streams.fenced(resets);
                    return Verdict::Drop;
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
        if !self.streams.forgot_any() {
            return None;
        }
        goaway_field(&mut self.outbound.clone(), bytes)
    }

    /// Whether the slices the server is about to write, in order, hold
    /// a GOAWAY's last-stream field that may need raising.
    pub(crate) fn goaway_in<'a>(&self, slices: impl IntoIterator<Item = &'a [u8]>) -> bool {
        if !self.streams.forgot_any() {
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
        self.streams.raise_goaway(field);
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
            kind::HEADERS if end_stream => self.streams.ended(head.stream, Side::Server),
            kind::DATA => {
                self.send_window -= i64::from(head.len);
                if end_stream {
                    self.streams.ended(head.stream, Side::Server);
                }
            }
            kind::RST_STREAM => self.streams.ended(head.stream, Side::ServerReset),
            kind::SETTINGS if !head.has(flag::ACK) => {
                self.fence.h2_sent();
                self.server_settings = self.server_settings.saturating_add(1);
            }
            kind::PING if head.has(flag::ACK) => self.pings_in = self.pings_in.saturating_sub(1),
            kind::PING => self.pings_out += 1,
            kind::GOAWAY | kind::PUSH_PROMISE => self.ending = true,
            _ => {}
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
        self.streams.none_open()
            && self.replies.is_empty()
            && self.gate.as_ref().is_none_or(|gate| gate.is_empty())
            && !self.header_block
            && !self.ending
            && self.inbound.at_boundary()
            && self.outbound.at_boundary()
            && !self.fence.h2_in_flight()
            && self.pings_in == 0
            && self.pings_out == 0
    }

    /// Whether the connection, quiet, needs a fence before it sleeps: the
    /// client's HPACK table is in use, or a stream was reset while the
    /// client could still send on it (see `wire`).
    pub(crate) fn needs_fence(&self) -> bool {
        self.fence.needed(self.streams.resets())
    }

    /// Whether the connection is quiet with no SETTINGS of anyone's in
    /// flight and needs no fence: it may sleep.
    pub(crate) fn settled(&self) -> bool {
        self.quiet() && !self.fence.in_flight() && !self.needs_fence()
    }

    /// The fence's frame, for the caller to write (between h2's frames,
    /// before any more of them), if the connection needs one, is quiet and
    /// has no SETTINGS in flight.
    pub(crate) fn fence(&mut self) -> Option<Vec<u8>> {
        if !self.needs_fence() || !self.quiet() || self.fence.in_flight() {
            return None;
        }
        Some(self.fence.frame(self.streams.resets()))
    }

    /// From now on the fence goes out with the response that leaves no
    /// stream open, not once the connection is quiet: its client did not
    /// acknowledge one sent while it was quiet. A client that reads only
    /// while it waits for a response (a synchronous one, such as Python's
    /// httpx) sees a SETTINGS frame only among a response's frames, and
    /// acknowledges it then; before the last frame of the response, the
    /// ACK is on its way when the client stops reading.
    pub(crate) fn fence_early(&mut self) {
        self.fence.go_early();
    }

    /// Whether an early fence is due before a frame that ends the last open
    /// stream (see [`fence_early`](Self::fence_early)).
    fn early_fence_due(&self) -> bool {
        self.fence.early_allowed() && !self.ending && self.needs_fence()
    }

    /// The early fence's frame, for the caller to write right before the
    /// frame [`early_fence_at`](Self::early_fence_at) found, if it is due.
    pub(crate) fn early_fence(&mut self) -> Option<Vec<u8>> {
        self.early_fence_due()
            .then(|| self.fence.frame(self.streams.resets()))
    }

    /// Where, in the slices the server is about to write, in order, an
    /// early fence goes ([`fence_early`](Self::fence_early)): the offset
    /// of the header of the frame that ends the last open stream, if one
    /// begins in them and a fence is due.
    pub(crate) fn early_fence_at<'a>(
        &self,
        slices: impl IntoIterator<Item = &'a [u8]>,
    ) -> Option<usize> {
        if !self.early_fence_due() || self.streams.none_open() {
            return None;
        }
        let mut scanner = self.outbound.clone();
        let mut ended = Vec::new();
        let mut offset = 0;
        for bytes in slices {
            let mut at = 0;
            while let Some(piece) = scanner.next(bytes, &mut at) {
                if let Piece::Head(head) = piece {
                    if self.streams.ends_the_last(head, &mut ended) {
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
        if !self.early_fence_due() || !self.streams.ends_the_last(head, &mut Vec::new()) {
            return None;
        }
        Some(self.fence.frame(self.streams.resets()))
    }

    /// The frame that gives the client its HPACK table back, for the caller
    /// to write (between h2's frames), once a connection whose table was
    /// emptied has become busy and no fence is out.
    pub(crate) fn restore(&mut self) -> Option<Vec<u8>> {
        self.fence.restore()
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
                last_stream: self.streams.last(),
                recv_window: recv,
                send_window: send,
                pings: u16::try_from(self.lot_pings).unwrap_or(u16::MAX),
                fence_early: self.fence.is_early(),
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

#[cfg(test)]
mod tests;
