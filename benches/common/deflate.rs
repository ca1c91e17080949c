//! The client's side of `permessage-deflate` (RFC 7692) in the WebSocket
//! benches (`ws_memory`, `ws_broadcast`): the offer a browser sends, a
//! message compressed as a client sends it, and a server's compressed
//! message inflated. No context takeover: each message is a deflate
//! stream of its own, as `dormant::ws` negotiates it.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};

/// The offer browsers send, as a request header line.
pub(crate) const OFFER: &str =
    "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n";

/// The four bytes a sender removes from the end of each message and a
/// receiver adds back (RFC 7692, 7.2.1).
const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

/// RSV1 in a frame's first byte: the message is compressed.
pub(crate) const RSV1: u8 = 0x40;

/// Whether a `101` head (its bytes, as read) accepted compression.
pub(crate) fn accepted(head: &[u8]) -> bool {
    String::from_utf8_lossy(head)
        .lines()
        .filter_map(|line| line.split_once(':'))
        .any(|(name, value)| {
            name.trim().eq_ignore_ascii_case("sec-websocket-extensions")
                && value.contains("permessage-deflate")
        })
}

/// `payload` as a client sends it compressed: raw deflate, a sync flush,
/// the flush's last four bytes removed.
#[allow(dead_code, reason = "ws_broadcast's clients send nothing")]
pub(crate) fn deflate(payload: &[u8]) -> Vec<u8> {
    let mut compressor = Compress::new(Compression::default(), false);
    // Deflate's worst case is a few bytes per 16 KiB block over the input.
    let mut out = Vec::with_capacity(payload.len() + payload.len() / 64 + 64);
    compressor
        .compress_vec(payload, &mut out, FlushCompress::Sync)
        .expect("deflate");
    assert_eq!(compressor.total_in() as usize, payload.len(), "room");
    assert!(out.ends_with(&TAIL), "a sync flush ends with 00 00 ff ff");
    out.truncate(out.len() - TAIL.len());
    out
}

/// Inflates a server's compressed messages, one at a time, with one
/// inflater reset for each (a client holding many sockets keeps one).
pub(crate) struct Inflater(Decompress);

impl Inflater {
    pub(crate) fn new() -> Self {
        Inflater(Decompress::new(false))
    }

    /// The message whose compressed payload is `payload`, onto `out`
    /// (cleared first).
    pub(crate) fn inflate(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        self.0.reset(false);
        out.clear();
        for mut input in [payload, &TAIL[..]] {
            loop {
                out.reserve(4096);
                let before = self.0.total_in();
                self.0
                    .decompress_vec(input, out, FlushDecompress::Sync)
                    .expect("the server's message inflates");
                input = &input[(self.0.total_in() - before) as usize..];
                // Done with this input once it is taken and the output
                // did not fill the room it had.
                if input.is_empty() && out.len() < out.capacity() {
                    break;
                }
            }
        }
    }
}
