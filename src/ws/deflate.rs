//! `permessage-deflate` (RFC 7692) that keeps nothing while a socket
//! sleeps (feature `ws-deflate`).
//!
//! A compressor that keeps its window between messages ("context
//! takeover") is 32 KiB of history per socket and direction, kept for the
//! socket's life. Negotiated with no context takeover both ways
//! (`server_no_context_takeover`, `client_no_context_takeover`), each
//! message is a deflate stream of its own, so:
//!
//! - a socket keeps nothing between messages: a client's compressed
//!   message is inflated by an [`Inflater`] taken from a per-thread cache
//!   when the message starts and given back when it ends (a socket that
//!   sleeps in the middle of a message keeps its inflater until then);
//! - a message the server sends is compressed once, whoever it goes to: a
//!   [`Frame`](super::Frame) compresses itself the first time a socket
//!   that negotiated compression sends it, and every such socket sends the
//!   same bytes (a shared compressor, as uWebSockets has).
//!
//! An offer that cannot accept the server's answer is declined for the
//! next one, and without one the socket is not compressed: the answer
//! always says `server_no_context_takeover` and `client_no_context_takeover`
//! (a server may add the latter to an offer that lacks it; a client that
//! cannot take it fails the handshake: browsers take it). A client that
//! limits the server's window (`server_max_window_bits` below 15) is
//! answered, and gets the messages uncompressed (the extension lets each
//! message choose): a message compressed once is compressed with one
//! window. A client's own window needs nothing: the inflater's 32 KiB
//! window reads every smaller one.
//!
//! Inflation is bounded while it runs: a message that inflates past the
//! socket's `max_message_size` is refused (1009) before it grows past it,
//! whatever its compressed size; one that does not inflate is refused
//! with 1007.
//!
//! The backend is flate2's default, miniz_oxide: pure Rust, no C compiler,
//! and what the extension needs of it (raw deflate, a 32 KiB window,
//! sync flushes).

use std::cell::RefCell;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use http::HeaderValue;

/// The extension's name.
const NAME: &str = "permessage-deflate";

/// The answer to an accepted offer.
const ANSWER: &str = "permessage-deflate; server_no_context_takeover; client_no_context_takeover";

/// How many inflaters (and compressors) a thread keeps for reuse.
const CACHED: usize = 4;

/// The four bytes a sender removes from the end of each message (RFC
/// 7692, 7.2.1) and a receiver adds back.
const TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

thread_local! {
    static INFLATERS: RefCell<Vec<Decompress>> = const { RefCell::new(Vec::new()) };
    /// The thread's compressor, and the room it compresses into.
    static COMPRESSOR: RefCell<Option<(Compress, Vec<u8>)>> = const { RefCell::new(None) };
}

/// What a socket negotiated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Negotiated {
    /// Nothing: messages go both ways uncompressed.
    #[default]
    Off,
    /// Compression both ways, with no context takeover: the client's
    /// messages may be compressed; the server's are, when `send` says so
    /// (not when the client limited the server's window).
    On { send: bool },
}

/// Chooses the first of the client's offers (`Sec-WebSocket-Extensions`,
/// in its order) the server can accept: what was negotiated, and the
/// answer's header.
pub(crate) fn negotiate<'a>(
    offers: impl IntoIterator<Item = &'a HeaderValue>,
) -> (Negotiated, Option<HeaderValue>) {
    for value in offers {
        let Ok(value) = value.to_str() else {
            continue;
        };
        for offer in value.split(',') {
            if let Some(answer) = accept(offer) {
                return answer;
            }
        }
    }
    (Negotiated::Off, None)
}

/// The answer to one offer (`permessage-deflate; params…`), if the server
/// accepts it.
fn accept(offer: &str) -> Option<(Negotiated, Option<HeaderValue>)> {
    let mut params = offer.split(';').map(str::trim);
    if !params.next()?.eq_ignore_ascii_case(NAME) {
        return None;
    }
    let mut seen = [false; 4];
    let mut server_window = None;
    for param in params {
        let (name, value) = match param.split_once('=') {
            Some((name, value)) => (name.trim(), Some(value.trim().trim_matches('"'))),
            None => (param, None),
        };
        let index = match name.to_ascii_lowercase().as_str() {
            "server_no_context_takeover" if value.is_none() => 0,
            "client_no_context_takeover" if value.is_none() => 1,
            "server_max_window_bits" => {
                server_window = Some(window_bits(value?)?);
                2
            }
            "client_max_window_bits" => {
                if let Some(value) = value {
                    window_bits(value)?;
                }
                3
            }
            // An unknown parameter, or a known one with a value it may
            // not have: the offer is declined (RFC 7692, 5.1).
            _ => return None,
        };
        if std::mem::replace(&mut seen[index], true) {
            return None;
        }
    }
    let send = server_window.is_none_or(|bits| bits == 15);
    let answer = match server_window {
        Some(bits) => HeaderValue::from_str(&format!("{ANSWER}; server_max_window_bits={bits}")),
        None => Ok(HeaderValue::from_static(ANSWER)),
    };
    Some((Negotiated::On { send }, answer.ok()))
}

/// A window size's bits, 8 to 15 (RFC 7692, 7.1.2).
fn window_bits(value: &str) -> Option<u8> {
    let bits: u8 = value.parse().ok()?;
    (8..=15).contains(&bits).then_some(bits)
}

/// Why a message did not inflate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Uninflated {
    /// It would grow past the limit (nothing past it was kept).
    TooBig,
    /// Its bytes are not deflate.
    Invalid,
}

/// Inflates one compressed message: a raw deflate stream whose last four
/// bytes the client left out.
#[derive(Debug)]
pub(crate) struct Inflater(Decompress);

impl Inflater {
    /// An inflater from this thread's cache, or a new one.
    pub(crate) fn take() -> Inflater {
        let cached = INFLATERS.with(|cache| cache.borrow_mut().pop());
        Inflater(cached.unwrap_or_else(|| Decompress::new(false)))
    }

    /// Gives the inflater back to this thread's cache, reset.
    pub(crate) fn give(mut self) {
        self.0.reset(false);
        let _ = INFLATERS.try_with(|cache| {
            let mut cache = cache.borrow_mut();
            if cache.len() < CACHED {
                cache.push(self.0);
            }
        });
    }

    /// Inflates `input` (the next compressed bytes of the message) onto
    /// `out`, which may not grow past `limit` bytes.
    ///
    /// # Errors
    ///
    /// When the message would grow past `limit` (nothing past it is kept),
    /// or the bytes do not inflate.
    pub(crate) fn inflate(
        &mut self,
        mut input: &[u8],
        out: &mut Vec<u8>,
        limit: usize,
    ) -> Result<(), Uninflated> {
        let mut chunk = [0; 4096];
        loop {
            let (before_in, before_out) = (self.0.total_in(), self.0.total_out());
            let status = self
                .0
                .decompress(input, &mut chunk, FlushDecompress::Sync)
                .map_err(|_| Uninflated::Invalid)?;
            let took = (self.0.total_in() - before_in) as usize;
            let made = (self.0.total_out() - before_out) as usize;
            input = &input[took..];
            if out.len() + made > limit {
                return Err(Uninflated::TooBig);
            }
            out.extend_from_slice(&chunk[..made]);
            let stuck = took == 0 && made == 0;
            let drained = input.is_empty() && made < chunk.len();
            if status == flate2::Status::StreamEnd || stuck || drained {
                return Ok(());
            }
        }
    }

    /// The message's last bytes came: inflates what the client left out
    /// of its end.
    ///
    /// # Errors
    ///
    /// As [`inflate`](Self::inflate).
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>, limit: usize) -> Result<(), Uninflated> {
        self.inflate(&TAIL, out, limit)
    }
}

/// `payload` compressed as one message (a deflate stream of its own,
/// without its last four bytes) with this thread's compressor, handed to
/// `f`; `None` when that would not make it smaller.
pub(crate) fn compress<R>(payload: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    COMPRESSOR.with(|cached| {
        let mut cached = cached.borrow_mut();
        let (compressor, out) =
            cached.get_or_insert_with(|| (Compress::new(Compression::fast(), false), Vec::new()));
        compressor.reset();
        out.clear();
        // Room for the payload and the flush's tail: output that fills it
        // would not be smaller.
        out.reserve(payload.len() + 2 * TAIL.len());
        let room = out.capacity();
        compressor
            .compress_vec(payload, out, FlushCompress::Sync)
            .ok()?;
        let whole = compressor.total_in() as usize == payload.len() && out.len() < room;
        let smaller = out.len() < payload.len() + TAIL.len();
        let result =
            (whole && smaller && out.ends_with(&TAIL)).then(|| f(&out[..out.len() - TAIL.len()]));
        if out.capacity() > 64 * 1024 {
            // A large message's room is not kept for the thread's life.
            *out = Vec::new();
        }
        result
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(value: &'static str) -> (Negotiated, Option<HeaderValue>) {
        negotiate([&HeaderValue::from_static(value)])
    }

    #[test]
    fn offers_are_accepted_or_declined_as_rfc_7692_says() {
        let on = (
            Negotiated::On { send: true },
            Some(HeaderValue::from_static(ANSWER)),
        );
        // What browsers offer.
        assert_eq!(offer("permessage-deflate; client_max_window_bits"), on);
        assert_eq!(offer("permessage-deflate"), on);
        assert_eq!(
            offer("permessage-deflate; server_no_context_takeover; client_no_context_takeover"),
            on
        );
        assert_eq!(offer("permessage-deflate; client_max_window_bits=10"), on);
        // The server's window limited: answered, not used.
        let (negotiated, answer) = offer("permessage-deflate; server_max_window_bits=10");
        assert_eq!(negotiated, Negotiated::On { send: false });
        assert_eq!(
            answer.unwrap(),
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10"
        );
        assert_eq!(
            offer("permessage-deflate; server_max_window_bits=15").0,
            Negotiated::On { send: true }
        );
        // Declined: bad values, duplicates, unknown parameters, others.
        for declined in [
            "permessage-deflate; server_max_window_bits",
            "permessage-deflate; server_max_window_bits=7",
            "permessage-deflate; client_max_window_bits=16",
            "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
            "permessage-deflate; server_no_context_takeover=1",
            "permessage-deflate; mystery",
            "x-webkit-deflate-frame",
            "",
        ] {
            assert_eq!(offer(declined), (Negotiated::Off, None), "{declined}");
        }
        // The first acceptable offer wins, across values and lines.
        let first = HeaderValue::from_static("permessage-deflate; bogus, permessage-deflate");
        assert_eq!(negotiate([&first]), on);
        let lines = [
            HeaderValue::from_static("foo"),
            HeaderValue::from_static("permessage-deflate; server_max_window_bits=9"),
        ];
        assert_eq!(negotiate(&lines).0, Negotiated::On { send: false });
    }

    #[test]
    fn a_message_compresses_and_inflates_back() {
        let text = "{\"user\":\"ada\",\"text\":\"hello, hello, hello\"}".repeat(20);
        let compressed = compress(text.as_bytes(), <[u8]>::to_vec).expect("smaller");
        assert!(compressed.len() < text.len() / 4);
        let mut out = Vec::new();
        let mut inflater = Inflater::take();
        for piece in compressed.chunks(7) {
            inflater.inflate(piece, &mut out, 1 << 20).unwrap();
        }
        inflater.finish(&mut out, 1 << 20).unwrap();
        assert_eq!(out, text.as_bytes());
        inflater.give();
        // What does not shrink is sent as it is.
        assert_eq!(compress(b"ab", <[u8]>::to_vec), None);
        // The cached inflater and compressor start over for each message.
        let again = compress(text.as_bytes(), <[u8]>::to_vec).unwrap();
        assert_eq!(again, compressed);
        let mut out = Vec::new();
        let mut inflater = Inflater::take();
        inflater.inflate(&again, &mut out, 1 << 20).unwrap();
        inflater.finish(&mut out, 1 << 20).unwrap();
        assert_eq!(out, text.as_bytes());
    }

    #[test]
    fn inflation_stops_at_the_limit() {
        // A few kilobytes that inflate to a megabyte.
        let bomb = compress(&vec![0; 1 << 20], <[u8]>::to_vec).unwrap();
        assert!(bomb.len() < 8192, "{}", bomb.len());
        let mut out = Vec::new();
        let mut inflater = Inflater::take();
        let refused = inflater.inflate(&bomb, &mut out, 64 * 1024).unwrap_err();
        assert_eq!(refused, Uninflated::TooBig);
        assert!(out.len() <= 64 * 1024, "{}", out.len());
        // Bytes that are not deflate.
        let mut out = Vec::new();
        let refused = Inflater::take()
            .inflate(&[0xFF; 64], &mut out, 1 << 20)
            .unwrap_err();
        assert_eq!(refused, Uninflated::Invalid);
    }
}
