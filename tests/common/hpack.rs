//! A small HPACK codec (RFC 7541) for the HTTP/2 tests: an encoder for a
//! client's requests and a decoder for a server's responses, both with the
//! dynamic table that the other side's settings size, and Huffman strings
//! (Appendix B). The encoder indexes a field from the static or dynamic
//! table when the whole field is there, and otherwise sends it as a
//! literal *with incremental indexing*, so that the tables of both sides
//! fill, evict and are reused. Checked against RFC 7541 Appendix C below.

use std::collections::{HashMap, VecDeque};
use std::sync::LazyLock;

/// A header field: name and value.
pub(crate) type Field = (String, String);

/// The static table (Appendix A); index `i` is entry `i + 1`.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The Huffman code (Appendix B): `(code, bit length)` of symbols 0 to
/// 256 in order, six a line; 256 is EOS.
#[rustfmt::skip]
const HUFFMAN: [(u32, u8); 257] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28), (0xfffffe5, 28),
    (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28),
    (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28), (0xfffffed, 28), (0xfffffee, 28),
    (0xfffffef, 28), (0xffffff0, 28), (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28),
    (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28),
    (0xffffffa, 28), (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12),
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11), (0x3fa, 10), (0x3fb, 10),
    (0xf9, 8), (0x7fb, 11), (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), (0x1a, 6), (0x1b, 6),
    (0x1c, 6), (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8),
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), (0x1ffa, 13), (0x21, 6),
    (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), (0x67, 7), (0x68, 7),
    (0x69, 7), (0x6a, 7), (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7),
    (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8), (0x73, 7),
    (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5),
    (0x25, 6), (0x26, 6), (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7),
    (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7),
    (0x2c, 6), (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), (0x7fc, 11), (0x3ffd, 14),
    (0x1ffd, 13), (0xffffffc, 28), (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20),
    (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23),
    (0x7fffdb, 23), (0x7fffdc, 23), (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),
    (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23),
    (0x7fffe2, 23), (0x7fffe3, 23), (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23),
    (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24), (0x3fffda, 22), (0x1fffdd, 21),
    (0xfffe9, 20), (0x3fffdb, 22), (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),
    (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22),
    (0x7fffeb, 23), (0x7fffec, 23), (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21),
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23), (0xfffea, 20), (0x3fffe2, 22),
    (0x3fffe3, 22), (0x3fffe4, 22), (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),
    (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23),
    (0x3fffe8, 22), (0x1ffffec, 25), (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27),
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19), (0x1fffe3, 21),
    (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),
    (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26), (0xffffffd, 28), (0x7ffffe3, 27),
    (0x7ffffe4, 27), (0x7ffffe5, 27), (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21),
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22),
    (0x1ffffee, 25), (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27), (0x7ffffe8, 27),
    (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27),
    (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26), (0x3fffffff, 30),
];

/// The size of the dynamic table HTTP/2 starts with (RFC 9113, 6.5.2).
pub(crate) const DEFAULT_TABLE_SIZE: usize = 4096;

/// A dynamic table (2.3.2): newest entry first, sized and evicted as 4.1
/// and 4.4 have it.
#[derive(Clone, Debug)]
struct Table {
    entries: VecDeque<Field>,
    size: usize,
    max: usize,
}

impl Table {
    fn new(max: usize) -> Table {
        Table {
            entries: VecDeque::new(),
            size: 0,
            max,
        }
    }

    /// An entry's size: its name and value and 32 bytes (4.1).
    fn entry_size((name, value): &Field) -> usize {
        name.len() + value.len() + 32
    }

    /// Adds `field` at the front, evicting from the back to make room; a
    /// field larger than the table empties it and is not added (4.4).
    fn insert(&mut self, field: Field) {
        let size = Table::entry_size(&field);
        self.evict_to(self.max.saturating_sub(size));
        if size <= self.max {
            self.size += size;
            self.entries.push_front(field);
        }
    }

    /// A new maximum size, evicting what no longer fits (4.3).
    fn resize(&mut self, max: usize) {
        self.max = max;
        self.evict_to(max);
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let oldest = self.entries.pop_back().expect("entries of the size");
            self.size -= Table::entry_size(&oldest);
        }
    }

    /// Entry `index` of the static table followed by this one (2.3.3).
    fn get(&self, index: usize) -> Result<Field, String> {
        match index {
            0 => Err("index 0".into()),
            1..=61 => {
                let (name, value) = STATIC[index - 1];
                Ok((name.into(), value.into()))
            }
            _ => self
                .entries
                .get(index - 62)
                .cloned()
                .ok_or_else(|| format!("index {index} beyond the dynamic table {self:?}")),
        }
    }

    /// The index of the field `(name, value)` if it is in a table, and of
    /// an entry with its name otherwise.
    fn find(&self, name: &str, value: &str) -> (Option<usize>, Option<usize>) {
        let statics = STATIC.iter().map(|&(n, v)| (n, v));
        let dynamic = self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()));
        let mut name_at = None;
        for (i, (n, v)) in statics.chain(dynamic).enumerate() {
            if n == name {
                if v == value {
                    return (Some(i + 1), None);
                }
                name_at = name_at.or(Some(i + 1));
            }
        }
        (None, name_at)
    }
}

/// Encodes header blocks, as a client's encoder does.
#[derive(Debug)]
pub(crate) struct Encoder {
    table: Table,
    /// Huffman-code a string when that makes it shorter (as h2 does).
    huffman: bool,
    /// The smallest and the last table size since the last block, which
    /// the next block must announce (4.2).
    resized: Option<(usize, usize)>,
}

impl Encoder {
    pub(crate) fn new(size: usize, huffman: bool) -> Encoder {
        Encoder {
            table: Table::new(size),
            huffman,
            resized: None,
        }
    }

    /// The decoder's SETTINGS_HEADER_TABLE_SIZE is now `size` (applied as
    /// the SETTINGS is acknowledged): the table takes all of it, evicting
    /// what no longer fits, and the next block opens with dynamic table
    /// size updates for the smallest size since the last block and for
    /// the last one (4.2, 6.3).
    pub(crate) fn set_max_size(&mut self, size: usize) {
        let was = self.table.max;
        self.table.resize(size);
        self.resized = match self.resized {
            Some((smallest, _)) => Some((smallest.min(size), size)),
            None if size == was => None,
            None => Some((size, size)),
        };
    }

    /// One header block of `fields`.
    pub(crate) fn encode<'a>(
        &mut self,
        fields: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some((smallest, last)) = self.resized.take() {
            if smallest < last {
                put_int(&mut out, 0x20, 5, smallest);
            }
            put_int(&mut out, 0x20, 5, last);
        }
        for (name, value) in fields {
            match self.table.find(name, value) {
                (Some(index), _) => put_int(&mut out, 0x80, 7, index),
                (None, name_at) => {
                    put_int(&mut out, 0x40, 6, name_at.unwrap_or(0));
                    if name_at.is_none() {
                        put_str(&mut out, name, self.huffman);
                    }
                    put_str(&mut out, value, self.huffman);
                    self.table.insert((name.into(), value.into()));
                }
            }
        }
        out
    }
}

/// Decodes header blocks, as a client's decoder does, checking every index
/// and size update.
#[derive(Clone, Debug)]
pub(crate) struct Decoder {
    table: Table,
    /// The largest size a size update may announce: the decoder's
    /// SETTINGS_HEADER_TABLE_SIZE (the larger of the old and new values
    /// while a change is unacknowledged).
    limit: usize,
    /// The next block must open with a size update to at most this: the
    /// smallest size acknowledged below the table's since the last block.
    owed: Option<usize>,
}

impl Decoder {
    pub(crate) fn new(size: usize) -> Decoder {
        Decoder {
            table: Table::new(size),
            limit: size,
            owed: None,
        }
    }

    /// The client sent SETTINGS_HEADER_TABLE_SIZE = `size`: the encoder may
    /// use it at once, or the old value until it acknowledges.
    pub(crate) fn sent(&mut self, size: usize) {
        self.limit = self.limit.max(size);
    }

    /// The server acknowledged SETTINGS_HEADER_TABLE_SIZE = `size`. As
    /// nghttp2 (curl's, Node's) does, a size below the table's shrinks the
    /// table at once, evicting what no longer fits, and the next block
    /// must open with a size update to at most the smallest such size,
    /// even if a later SETTINGS raised it again (RFC 7541, 4.2).
    pub(crate) fn acknowledged(&mut self, size: usize) {
        self.limit = size;
        if size < self.table.max {
            self.table.resize(size);
            self.owed = Some(self.owed.map_or(size, |owed| owed.min(size)));
        }
    }

    /// The fields of one header block.
    pub(crate) fn decode(&mut self, block: &[u8]) -> Result<Vec<Field>, String> {
        let mut fields = Vec::new();
        let mut at = 0;
        let owed = self.owed.take();
        let mut smallest = None;
        while let Some(&first) = block.get(at) {
            if first & 0xe0 == 0x20 {
                // A dynamic table size update (6.3), only at the start.
                let size = get_int(block, &mut at, 5)?;
                if !fields.is_empty() || size > self.limit {
                    return Err(format!("size update to {size} after {fields:?}"));
                }
                smallest = Some(smallest.map_or(size, |s: usize| s.min(size)));
                self.table.resize(size);
                continue;
            }
            if let Some(owed) = owed.filter(|&owed| smallest.is_none_or(|s| s > owed)) {
                return Err(format!(
                    "no size update to at most {owed} before a field (smallest {smallest:?})"
                ));
            }
            if self.table.max > self.limit {
                return Err(format!(
                    "no size update to at most {} before a field",
                    self.limit
                ));
            }
            if first & 0x80 != 0 {
                // Indexed (6.1).
                fields.push(self.table.get(get_int(block, &mut at, 7)?)?);
                continue;
            }
            // A literal (6.2): with incremental indexing (01), without
            // indexing (0000) or never indexed (0001).
            let indexing = first & 0x40 != 0;
            let index = get_int(block, &mut at, if indexing { 6 } else { 4 })?;
            let name = match index {
                0 => get_str(block, &mut at)?,
                _ => self.table.get(index)?.0,
            };
            let field = (name, get_str(block, &mut at)?);
            if indexing {
                self.table.insert(field.clone());
            }
            fields.push(field);
        }
        Ok(fields)
    }
}

/// An integer with an `prefix`-bit prefix, the byte's other bits `first`
/// (5.1).
fn put_int(out: &mut Vec<u8>, first: u8, prefix: u8, mut n: usize) {
    let max = (1 << prefix) - 1;
    if n < max {
        out.push(first | n as u8);
        return;
    }
    out.push(first | max as u8);
    n -= max;
    while n >= 128 {
        out.push(0x80 | (n % 128) as u8);
        n /= 128;
    }
    out.push(n as u8);
}

fn get_int(block: &[u8], at: &mut usize, prefix: u8) -> Result<usize, String> {
    let truncated = || "a truncated integer".to_owned();
    let max = (1 << prefix) - 1;
    let mut n = usize::from(*block.get(*at).ok_or_else(truncated)?) & max;
    *at += 1;
    if n < max {
        return Ok(n);
    }
    for shift in (0..=21).step_by(7) {
        let byte = *block.get(*at).ok_or_else(truncated)?;
        *at += 1;
        n += usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(n);
        }
    }
    Err("an integer over 2^28".into())
}

/// A string literal (5.2), Huffman-coded if `huffman` and shorter so.
fn put_str(out: &mut Vec<u8>, s: &str, huffman: bool) {
    match huffman.then(|| huffman_encode(s.as_bytes())) {
        Some(coded) if coded.len() < s.len() => {
            put_int(out, 0x80, 7, coded.len());
            out.extend(coded);
        }
        _ => {
            put_int(out, 0, 7, s.len());
            out.extend(s.as_bytes());
        }
    }
}

fn get_str(block: &[u8], at: &mut usize) -> Result<String, String> {
    let huffman = block.get(*at).is_some_and(|b| b & 0x80 != 0);
    let len = get_int(block, at, 7)?;
    let raw = block
        .get(*at..*at + len)
        .ok_or("a truncated string literal")?;
    *at += len;
    let bytes = if huffman {
        huffman_decode(raw)?
    } else {
        raw.to_vec()
    };
    String::from_utf8(bytes).map_err(|e| format!("a string that is not UTF-8: {e}"))
}

fn huffman_encode(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    let (mut bits, mut pending) = (0u64, 0u8);
    for &byte in s {
        let (code, len) = HUFFMAN[usize::from(byte)];
        bits = (bits << len) | u64::from(code);
        pending += len;
        while pending >= 8 {
            pending -= 8;
            out.push((bits >> pending) as u8);
        }
        bits &= (1 << pending) - 1;
    }
    if pending > 0 {
        // Padded with the most significant bits of EOS: ones (5.2).
        out.push(((bits << (8 - pending)) as u8) | (0xff >> pending));
    }
    out
}

/// The symbol of each `(bit length, code)`.
static DECODE: LazyLock<HashMap<(u8, u32), u16>> = LazyLock::new(|| {
    (0u16..)
        .zip(HUFFMAN)
        .map(|(symbol, (code, len))| ((len, code), symbol))
        .collect()
});

fn huffman_decode(raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(raw.len() * 8 / 5);
    let (mut code, mut len) = (0u32, 0u8);
    for bit in raw
        .iter()
        .flat_map(|byte| (0..8).rev().map(move |i| byte >> i & 1))
    {
        code = (code << 1) | u32::from(bit);
        len += 1;
        match DECODE.get(&(len, code)) {
            Some(256) => return Err("EOS in a Huffman string".into()),
            Some(&symbol) => {
                out.push(symbol as u8);
                (code, len) = (0, 0);
            }
            None if len == 30 => return Err("not a Huffman code".into()),
            None => {}
        }
    }
    // The padding: fewer than 8 bits, all ones (5.2).
    if len > 7 || code != (1 << len) - 1 {
        return Err(format!("Huffman padding of {len} bits {code:b}"));
    }
    Ok(out)
}

/// RFC 7541 Appendix C, byte for byte, both ways, with the dynamic table
/// after each block.
#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|d| u8::from_str_radix(std::str::from_utf8(d).unwrap(), 16).unwrap())
            .collect()
    }

    fn fields(list: &[(&str, &str)]) -> Vec<Field> {
        list.iter().map(|&(n, v)| (n.into(), v.into())).collect()
    }

    /// The table's entries, newest first, and its size.
    fn table(t: &Table) -> (Vec<Field>, usize) {
        (t.entries.iter().cloned().collect(), t.size)
    }

    /// Every code is the canonical one for its length (codes of a length
    /// follow each other in symbol order), and together they fill the code
    /// space exactly: a wrong entry in [`HUFFMAN`] fails one or the other.
    #[test]
    fn the_huffman_code_is_canonical_and_complete() {
        let mut by_length: Vec<usize> = (0..HUFFMAN.len()).collect();
        by_length.sort_by_key(|&s| (HUFFMAN[s].1, s));
        let (mut next, mut len) = (0u64, HUFFMAN[by_length[0]].1);
        for s in by_length {
            next <<= HUFFMAN[s].1 - len;
            len = HUFFMAN[s].1;
            assert_eq!(u64::from(HUFFMAN[s].0), next, "symbol {s}");
            next += 1;
        }
        assert_eq!(next, 1 << 30, "the code space is filled exactly");
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(huffman_decode(&huffman_encode(&all)).unwrap(), all);
    }

    #[test]
    fn bad_huffman_strings_are_refused() {
        // EOS itself, padding of 8 bits, padding that is not all ones.
        for raw in [&[0xff, 0xff, 0xff, 0xff][..], &[0x1f, 0xff], &[0x1e]] {
            assert!(huffman_decode(raw).is_err(), "{raw:x?}");
        }
    }

    /// C.1: integers.
    #[test]
    fn integers() {
        for (first, prefix, n, bytes) in [
            (0, 5, 10, vec![0x0a]),
            (0, 5, 1337, vec![0x1f, 0x9a, 0x0a]),
            (0, 8, 42, vec![0x2a]),
        ] {
            let mut out = Vec::new();
            put_int(&mut out, first, prefix, n);
            assert_eq!(out, bytes);
            assert_eq!(get_int(&bytes, &mut 0, prefix), Ok(n));
        }
    }

    /// C.2: the literal representations and an indexed field.
    #[test]
    fn literal_and_indexed_fields() {
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE);
        let block = hex("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572");
        let field = fields(&[("custom-key", "custom-header")]);
        assert_eq!(d.decode(&block).unwrap(), field);
        assert_eq!(table(&d.table), (field, 55));
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE);
        let block = hex("040c 2f73 616d 706c 652f 7061 7468");
        assert_eq!(
            d.decode(&block).unwrap(),
            fields(&[(":path", "/sample/path")])
        );
        let block = hex("1008 7061 7373 776f 7264 0673 6563 7265 74");
        assert_eq!(d.decode(&block).unwrap(), fields(&[("password", "secret")]));
        assert_eq!(d.decode(&hex("82")).unwrap(), fields(&[(":method", "GET")]));
        assert_eq!(table(&d.table), (vec![], 0));
    }

    /// C.3 (`huffman` false) and C.4 (true): three requests on one
    /// connection, encoded and decoded.
    fn requests(huffman: bool, blocks: [&str; 3]) {
        let requests = [
            vec![
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
            ],
            vec![
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ],
            vec![
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ],
        ];
        let tables = [
            (fields(&[(":authority", "www.example.com")]), 57),
            (
                fields(&[
                    ("cache-control", "no-cache"),
                    (":authority", "www.example.com"),
                ]),
                110,
            ),
            (
                fields(&[
                    ("custom-key", "custom-value"),
                    ("cache-control", "no-cache"),
                    (":authority", "www.example.com"),
                ]),
                164,
            ),
        ];
        let mut e = Encoder::new(DEFAULT_TABLE_SIZE, huffman);
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE);
        for ((request, block), want) in requests.iter().zip(blocks).zip(tables) {
            let block = hex(block);
            assert_eq!(e.encode(request.iter().copied()), block);
            assert_eq!(d.decode(&block).unwrap(), fields(request));
            assert_eq!(table(&e.table), want);
            assert_eq!(table(&d.table), want);
        }
    }

    #[test]
    fn requests_without_huffman() {
        requests(
            false,
            [
                "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "8286 84be 5808 6e6f 2d63 6163 6865",
                "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
            ],
        );
    }

    #[test]
    fn requests_with_huffman() {
        requests(
            true,
            [
                "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
                "8286 84be 5886 a8eb 1064 9cbf",
                "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
            ],
        );
    }

    /// C.5 and C.6: three responses decoded with a 256-byte table, which
    /// evicts.
    fn responses(blocks: [&str; 3]) {
        let date = |s| format!("Mon, 21 Oct 2013 20:13:{s} GMT");
        let location = ("location".to_owned(), "https://www.example.com".to_owned());
        let private = ("cache-control".to_owned(), "private".to_owned());
        let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
        let status = |s: &str| (":status".to_owned(), s.to_owned());
        let want = [
            (
                vec![
                    status("302"),
                    private.clone(),
                    ("date".into(), date(21)),
                    location.clone(),
                ],
                vec![
                    location.clone(),
                    ("date".into(), date(21)),
                    private.clone(),
                    status("302"),
                ],
                222,
            ),
            (
                vec![
                    status("307"),
                    private.clone(),
                    ("date".into(), date(21)),
                    location.clone(),
                ],
                vec![
                    status("307"),
                    location.clone(),
                    ("date".into(), date(21)),
                    private.clone(),
                ],
                222,
            ),
            (
                vec![
                    status("200"),
                    private,
                    ("date".into(), date(22)),
                    location,
                    ("content-encoding".into(), "gzip".into()),
                    ("set-cookie".into(), cookie.into()),
                ],
                vec![
                    ("set-cookie".into(), cookie.into()),
                    ("content-encoding".into(), "gzip".into()),
                    ("date".into(), date(22)),
                ],
                215,
            ),
        ];
        let mut d = Decoder::new(256);
        for (block, (fields, entries, size)) in blocks.into_iter().zip(want) {
            assert_eq!(d.decode(&hex(block)).unwrap(), fields);
            assert_eq!(table(&d.table), (entries, size));
        }
    }

    #[test]
    fn responses_without_huffman() {
        responses([
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 \
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 \
             6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d \
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 \
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e \
             3d31",
        ]);
    }

    #[test]
    fn responses_with_huffman() {
        responses([
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 \
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab \
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f \
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ]);
    }

    /// A table size change: the encoder evicts and announces the smallest
    /// and the last size at the start of its next block; the decoder
    /// follows, refuses a field before a needed update, and an update
    /// after a field or beyond its setting.
    #[test]
    fn size_updates() {
        let mut e = Encoder::new(DEFAULT_TABLE_SIZE, true);
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE);
        let one = [("x-a", "1")];
        d.decode(&e.encode(one)).unwrap();
        e.set_max_size(0);
        e.set_max_size(DEFAULT_TABLE_SIZE);
        let block = e.encode(one);
        assert_eq!(&block[..4], &[0x20, 0x3f, 0xe1, 0x1f], "0, then 4096");
        assert_eq!(d.decode(&block).unwrap(), fields(&one));
        assert_eq!(table(&d.table), table(&e.table));
        assert_eq!(d.table.entries.len(), 1, "emptied by the update to 0");
        // The decoder's setting goes down to 30 bytes, less than the entry.
        d.sent(30);
        d.acknowledged(30);
        assert!(d.decode(&[0x82]).is_err(), "a field before the size update");
        e.set_max_size(30);
        assert_eq!(table(&e.table), (vec![], 0), "evicted");
        let block = e.encode(one);
        assert_eq!(block[0], 0x3e, "30");
        assert_eq!(d.decode(&block).unwrap(), fields(&one));
        assert_eq!(table(&d.table), (vec![], 0), "too large to enter");
        assert_eq!(table(&e.table), (vec![], 0), "too large to enter");
        assert!(d.decode(&[0x82, 0x20]).is_err(), "an update after a field");
        assert!(d.decode(&[0x3f, 0x00]).is_err(), "an update to 31");
        // Lowered to 0 and raised again before the next block: the table is
        // emptied at once, and the block owes an update to 0.
        let mut d = Decoder::new(DEFAULT_TABLE_SIZE);
        d.decode(&e.encode(one)).unwrap();
        for size in [0, DEFAULT_TABLE_SIZE] {
            d.sent(size);
            d.acknowledged(size);
        }
        assert_eq!(table(&d.table), (vec![], 0), "emptied at the ACK");
        let mut owing = d.clone();
        assert!(owing.decode(&[0x82]).is_err(), "no update");
        let mut owing = d.clone();
        let last_only = owing.decode(&[0x3f, 0xe1, 0x1f, 0x82]);
        assert!(last_only.is_err(), "an update to 4096 alone");
        assert!(d.decode(&[0x20, 0x3f, 0xe1, 0x1f, 0x82]).is_ok());
    }
}
