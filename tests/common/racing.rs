//! Requests sent at about the moment their connection is closed (an idle
//! deadline, graceful shutdown): answered exactly, or closed before a
//! byte of the response, and nothing else.

use std::io::ErrorKind;

use super::client::{Client, Stream, complete_response, get, strip_date};

/// How a request sent at about the moment its connection is closed ended.
#[derive(Debug, PartialEq)]
pub(crate) enum Raced {
    /// Answered with one of the expected responses, exactly.
    Answered,
    /// Closed before a byte of the response: the close won.
    Closed,
}

/// Sends `GET path` and reads the response, which must be one of
/// `expected`, or the close of a connection the server closed first.
/// Anything else (another response, a close after part of one, a
/// timeout) fails the test.
pub(crate) fn request_racing_a_close<S: Stream>(
    c: &mut Client<S>,
    path: &str,
    expected: &[String],
) -> Raced {
    let closed = |e: &std::io::Error| {
        matches!(
            e.kind(),
            ErrorKind::ConnectionReset
                | ErrorKind::BrokenPipe
                | ErrorKind::ConnectionAborted
                | ErrorKind::UnexpectedEof
        )
    };
    match c.stream.write_all(get(path).as_bytes()) {
        Ok(()) => {}
        Err(e) if closed(&e) => return Raced::Closed,
        Err(e) => panic!("{path}: write: {e}"),
    }
    let mut buf = Vec::new();
    loop {
        if let Some(len) = complete_response(&buf) {
            let response = strip_date(&String::from_utf8_lossy(&buf[..len]));
            assert!(expected.contains(&response), "{path}: {response:?}");
            assert_eq!(len, buf.len(), "{path}: bytes after the response");
            return Raced::Answered;
        }
        let mut chunk = [0u8; 4096];
        match c.stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if closed(&e) => break,
            Err(e) => panic!("{path}: read (timed out?): {e}"),
        }
    }
    assert!(
        buf.is_empty(),
        "{path}: closed after part of a response: {:?}",
        String::from_utf8_lossy(&buf)
    );
    Raced::Closed
}
