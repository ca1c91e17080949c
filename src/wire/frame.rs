//! HTTP/2 frames as dormant sees them: the 9-byte header of each frame,
//! the few payload fields the watcher needs, and the few frames dormant
//! writes itself (RFC 9113, section 4 and 6).

use std::ops::Range;

/// The client connection preface, before the client's first frame.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The length of a frame header.
pub(crate) const HEAD_LEN: usize = 9;

/// The connection flow-control window every connection starts with, both
/// ways (RFC 9113, 6.9.2).
pub(crate) const INITIAL_WINDOW: u32 = 65_535;

/// Frame types (RFC 9113, 6).
pub(crate) mod kind {
    pub(crate) const DATA: u8 = 0x0;
    pub(crate) const HEADERS: u8 = 0x1;
    pub(crate) const RST_STREAM: u8 = 0x3;
    pub(crate) const SETTINGS: u8 = 0x4;
    pub(crate) const PUSH_PROMISE: u8 = 0x5;
    pub(crate) const PING: u8 = 0x6;
    pub(crate) const GOAWAY: u8 = 0x7;
    pub(crate) const WINDOW_UPDATE: u8 = 0x8;
    pub(crate) const CONTINUATION: u8 = 0x9;
    /// A type of the experimental range (RFC 9113, 11.2: 0xf0 to 0xff),
    /// which h2 ignores, as a receiver must ignore every unknown type
    /// (5.5): what a client frame becomes when h2 must not act on it but
    /// must still check its length against SETTINGS_MAX_FRAME_SIZE.
    pub(crate) const IGNORED: u8 = 0xf0;
}

/// Frame flags (RFC 9113, 6).
pub(crate) mod flag {
    /// DATA, HEADERS.
    pub(crate) const END_STREAM: u8 = 0x1;
    /// DATA, HEADERS.
    pub(crate) const PADDED: u8 = 0x8;
    /// SETTINGS, PING.
    pub(crate) const ACK: u8 = 0x1;
    /// HEADERS, CONTINUATION.
    pub(crate) const END_HEADERS: u8 = 0x4;
}

/// `SETTINGS_HEADER_TABLE_SIZE` (RFC 9113, 6.5.2).
pub(crate) const HEADER_TABLE_SIZE: u16 = 0x1;

/// HPACK's initial header table size (RFC 7541, 4.2), which both sides
/// assume until the decoder's side sets another: h2's decoder's, and the
/// one a fresh encoder believes.
pub(crate) const INITIAL_TABLE_SIZE: u32 = 4096;

/// The largest setting identifier the watcher keeps (RFC 9113 defines
/// 1 to 6; RFC 8441 adds 8, RFC 9218 adds 9). Others are ignored by h2
/// and need no replay.
pub(crate) const MAX_SETTING: u16 = 9;

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) len: u32,
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
}

impl Head {
    pub(crate) fn parse(b: &[u8; HEAD_LEN]) -> Head {
        Head {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    /// The header's bytes (the stream identifier's reserved bit, which a
    /// receiver ignores, cleared).
    pub(crate) fn bytes(&self) -> [u8; HEAD_LEN] {
        let [_, l0, l1, l2] = self.len.to_be_bytes();
        let [s0, s1, s2, s3] = self.stream.to_be_bytes();
        [l0, l1, l2, self.kind, self.flags, s0, s1, s2, s3]
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes());
    }

    pub(crate) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Appends a SETTINGS frame with `settings`.
pub(crate) fn settings(out: &mut Vec<u8>, settings: impl IntoIterator<Item = (u16, u32)>) {
    let start = out.len();
    let mut head = Head {
        len: 0,
        kind: kind::SETTINGS,
        flags: 0,
        stream: 0,
    };
    head.write(out);
    for (id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
        head.len += 6;
    }
    out[start..start + HEAD_LEN].copy_from_slice(&head.bytes());
}

/// Appends a frame of `kind` with `flags` on `stream`, carrying `payload`.
pub(crate) fn append(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("a frame's payload fits its length field");
    Head {
        len,
        kind,
        flags,
        stream,
    }
    .write(out);
    out.extend_from_slice(payload);
}

/// Appends a SETTINGS frame that acknowledges the peer's.
pub(crate) fn settings_ack(out: &mut Vec<u8>) {
    append(out, kind::SETTINGS, flag::ACK, 0, &[]);
}

/// The payload of dormant's keep-alive PINGs, which h2 never sends: a
/// woken connection knows their ACKs from h2's by it.
pub(crate) const KEEP_ALIVE_PING: [u8; 8] = *b"dormant!";

/// Appends a PING frame with `payload`.
pub(crate) fn ping(out: &mut Vec<u8>, payload: [u8; 8]) {
    append(out, kind::PING, 0, 0, &payload);
}

/// Appends the ACK of a PING whose payload was `payload`.
pub(crate) fn ping_ack(out: &mut Vec<u8>, payload: [u8; 8]) {
    append(out, kind::PING, flag::ACK, 0, &payload);
}

/// Appends a WINDOW_UPDATE frame for the connection.
pub(crate) fn window_update(out: &mut Vec<u8>, increment: u32) {
    append(out, kind::WINDOW_UPDATE, 0, 0, &increment.to_be_bytes());
}

/// `STREAM_CLOSED`, RST_STREAM's error code for a frame on a closed
/// stream (RFC 9113, 7).
pub(crate) const STREAM_CLOSED: u32 = 0x5;

/// Appends a RST_STREAM frame for `stream` with `error`.
pub(crate) fn rst_stream(out: &mut Vec<u8>, stream: u32, error: u32) {
    append(out, kind::RST_STREAM, 0, stream, &error.to_be_bytes());
}

/// Appends a GOAWAY frame with `NO_ERROR` that names `last_stream` as the
/// last stream processed.
pub(crate) fn goaway(out: &mut Vec<u8>, last_stream: u32) {
    let [a, b, c, d] = last_stream.to_be_bytes();
    append(out, kind::GOAWAY, 0, 0, &[a, b, c, d, 0, 0, 0, 0]);
}

/// What the scanner found next in the bytes it was given.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Bytes of the client's preface, as a range of the input.
    Preface(Range<usize>),
    /// A frame's header is complete (its bytes may have come in earlier
    /// calls: they are in the scanner, not all in the input).
    Head(Head),
    /// Bytes of the current frame's payload, as a range of the input.
    Payload(Head, Range<usize>),
    /// The current frame is complete.
    End(Head),
}

/// Cuts a byte stream into frames, across any split of the bytes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scanner {
    /// Bytes of the client's preface still to pass (inbound, at accept).
    preface: u8,
    head: [u8; HEAD_LEN],
    head_len: u8,
    /// The frame whose payload is being scanned, and how much is left.
    frame: Option<(Head, u32)>,
    /// A frame without payload whose end is still to report.
    empty: Option<Head>,
}

impl Scanner {
    /// A scanner of a client's bytes from their very start: the preface
    /// (checked by h2) comes first.
    pub(crate) fn after_preface() -> Scanner {
        Scanner {
            preface: PREFACE.len() as u8,
            ..Scanner::default()
        }
    }

    /// Whether the bytes scanned so far end where a frame ends.
    pub(crate) fn at_boundary(&self) -> bool {
        self.preface == 0 && self.head_len == 0 && self.frame.is_none() && self.empty.is_none()
    }

    /// The frame whose payload begins with the next byte, if one does.
    pub(crate) fn at_payload_start(&self) -> Option<Head> {
        match self.frame {
            Some((head, left)) if left == head.len => Some(head),
            _ => None,
        }
    }

    /// The next piece of `input[*at..]`, advancing `at` past it; `None`
    /// once it is all scanned.
    pub(crate) fn next(&mut self, input: &[u8], at: &mut usize) -> Option<Piece> {
        if let Some(head) = self.empty.take() {
            return Some(Piece::End(head));
        }
        loop {
            let rest = input.len().checked_sub(*at).filter(|&n| n > 0)?;
            if self.preface > 0 {
                let n = (self.preface as usize).min(rest);
                self.preface -= n as u8;
                *at += n;
                return Some(Piece::Preface(*at - n..*at));
            }
            if let Some((head, left)) = &mut self.frame {
                let head = *head;
                let n = (*left as usize).min(rest);
                *left -= n as u32;
                if *left == 0 {
                    self.frame = None;
                    self.empty = Some(head);
                }
                *at += n;
                return Some(Piece::Payload(head, *at - n..*at));
            }
            let n = (HEAD_LEN - self.head_len as usize).min(rest);
            let from = self.head_len as usize;
            self.head[from..from + n].copy_from_slice(&input[*at..*at + n]);
            self.head_len += n as u8;
            *at += n;
            if self.head_len as usize == HEAD_LEN {
                self.head_len = 0;
                let head = Head::parse(&self.head);
                if head.len == 0 {
                    self.empty = Some(head);
                } else {
                    self.frame = Some((head, head.len));
                }
                return Some(Piece::Head(head));
            }
        }
    }
}

/// Gathers the payload fields the watcher needs from a frame's payload,
/// whatever its split: settings and window increments.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    bytes: [u8; 6],
    len: u8,
}

/// A payload field.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Field {
    /// A setting of a SETTINGS frame (not an ACK).
    Setting(u16, u32),
    /// The increment of a WINDOW_UPDATE frame.
    Increment(u32),
}

impl Fields {
    /// Feeds payload bytes of `head`'s frame, in order; reports each field
    /// as it completes. A new frame starts after `Piece::Head`: call
    /// [`reset`](Self::reset) there.
    pub(crate) fn feed(&mut self, head: Head, bytes: &[u8], mut on: impl FnMut(Field)) {
        let width = match head.kind {
            kind::SETTINGS if !head.has(flag::ACK) => 6,
            kind::WINDOW_UPDATE => 4,
            _ => return,
        };
        for &b in bytes {
            // A WINDOW_UPDATE longer than 4 bytes is a FRAME_SIZE_ERROR
            // h2 reports; only its first field counts.
            if self.len as usize == width {
                return;
            }
            self.bytes[self.len as usize] = b;
            self.len += 1;
            if self.len as usize == width {
                let f = self.bytes;
                if width == 6 {
                    self.len = 0;
                    let id = u16::from_be_bytes([f[0], f[1]]);
                    on(Field::Setting(
                        id,
                        u32::from_be_bytes([f[2], f[3], f[4], f[5]]),
                    ));
                } else {
                    on(Field::Increment(
                        u32::from_be_bytes([f[0], f[1], f[2], f[3]]) & 0x7fff_ffff,
                    ));
                }
            }
        }
    }

    pub(crate) fn reset(&mut self) {
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans `chunks` in turn; the pieces with their bytes, and the fields.
    fn scan(s: &mut Scanner, chunks: &[&[u8]]) -> (Vec<String>, Vec<Field>) {
        let (mut out, mut found, mut fields) = (Vec::new(), Fields::default(), Vec::new());
        for chunk in chunks {
            let mut at = 0;
            while let Some(piece) = s.next(chunk, &mut at) {
                match piece {
                    Piece::Preface(r) => out.push(format!("preface {}", r.len())),
                    Piece::Head(h) => {
                        found.reset();
                        out.push(format!("head {} {}", h.kind, h.len));
                    }
                    Piece::Payload(h, r) => found.feed(h, &chunk[r], |f| fields.push(f)),
                    Piece::End(h) => out.push(format!("end {}", h.kind)),
                }
            }
        }
        (out, fields)
    }

    #[test]
    fn frames_split_anywhere_give_the_same_pieces_and_fields() {
        let mut bytes = PREFACE.to_vec();
        settings(&mut bytes, [(1, 0), (4, 6_291_456)]);
        window_update(&mut bytes, 15_663_105);
        goaway(&mut bytes, 7);
        let (whole, fields) = scan(&mut Scanner::after_preface(), &[&bytes]);
        assert_eq!(
            whole,
            [
                "preface 24",
                "head 4 12",
                "end 4",
                "head 8 4",
                "end 8",
                "head 7 8",
                "end 7"
            ]
        );
        assert_eq!(
            fields,
            [
                Field::Setting(1, 0),
                Field::Setting(4, 6_291_456),
                Field::Increment(15_663_105)
            ]
        );
        for split in 1..bytes.len() {
            let mut s = Scanner::after_preface();
            let (pieces, got) = scan(&mut s, &[&bytes[..split], &bytes[split..]]);
            let pieces: Vec<_> = pieces
                .into_iter()
                .filter(|p| !p.starts_with("preface"))
                .collect();
            assert_eq!(pieces, whole[1..], "split at {split}");
            assert_eq!(got, fields, "split at {split}");
            assert!(s.at_boundary());
        }
    }

    #[test]
    fn a_frame_without_payload_ends_at_once() {
        let ack = Head {
            len: 0,
            kind: kind::SETTINGS,
            flags: flag::ACK,
            stream: 0,
        };
        let (pieces, _) = scan(&mut Scanner::default(), &[&ack.bytes()]);
        assert_eq!(pieces, ["head 4 0", "end 4"]);
    }
}
