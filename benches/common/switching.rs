//! The client side of an upgrade in the memory benches: reads the server's
//! `101 Switching Protocols` head, and nothing after it.

use std::io::Read;

/// Reads the response head on `s` and returns it; fails the bench unless
/// it is a `101` with no bytes after it.
pub(crate) fn read_switching_head(s: &mut impl Read) -> Vec<u8> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 256];
    let head_end = loop {
        let n = s.read(&mut chunk).expect("read");
        assert!(n > 0, "server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
    };
    assert!(buf.starts_with(b"HTTP/1.1 101"), "not a 101");
    assert_eq!(head_end, buf.len(), "unexpected bytes after the 101");
    buf
}
