//! The raw client: HTTP/1 written and read as bytes, blocking, over TCP, a
//! Unix socket or TLS ([`Stream`]), with a read timeout so a hang fails.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use super::timeout::CLIENT_TIMEOUT;

/// What [`Client`] needs of its stream.
pub(crate) trait Stream: Read + Write + Send + Sized + 'static {
    /// How long a read waits before it fails with `WouldBlock` or
    /// `TimedOut`.
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;

    /// Ends the client's sending side and keeps reading: a TCP or Unix
    /// `shutdown(Write)`; over TLS, `close_notify` and then that.
    fn close_write(&mut self) -> io::Result<()>;

    /// The client's own address, as the server sees it as its peer: over
    /// TCP; `None` over a Unix socket, whose clients are unnamed.
    fn local(&self) -> Option<std::net::SocketAddr>;

    /// The socket under the stream (TCP under TLS), for what only a
    /// socket does (urgent data).
    fn socket(&self) -> std::os::fd::BorrowedFd<'_>;
}

impl Stream for TcpStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }

    fn close_write(&mut self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }

    fn local(&self) -> Option<std::net::SocketAddr> {
        self.local_addr().ok()
    }

    fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self)
    }
}

impl Stream for UnixStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }

    fn close_write(&mut self) -> io::Result<()> {
        self.shutdown(Shutdown::Write)
    }

    fn local(&self) -> Option<std::net::SocketAddr> {
        None
    }

    fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self)
    }
}

/// Where a test server listens (a TCP address, a Unix socket's path, a
/// TLS server's address and the client configuration that trusts it), and
/// how a raw client connects there.
pub(crate) trait Endpoint {
    type Stream: Stream;

    /// A new connection, ready for requests (over TLS, after the
    /// handshake).
    fn connect(&self) -> Client<Self::Stream> {
        self.try_connect().expect("connect")
    }

    /// [`connect`](Endpoint::connect), or why it failed (the server closed
    /// a TLS connection during its handshake).
    fn try_connect(&self) -> io::Result<Client<Self::Stream>>;

    /// Whether a connection attempt fails: nothing listens any more.
    fn refuses(&self) -> bool;
}

impl Endpoint for SocketAddr {
    type Stream = TcpStream;

    fn try_connect(&self) -> io::Result<Client> {
        let stream = TcpStream::connect(self)?;
        stream.set_nodelay(true)?;
        Ok(Client::new(stream))
    }

    fn refuses(&self) -> bool {
        TcpStream::connect(self).is_err_and(|e| e.kind() == ErrorKind::ConnectionRefused)
    }
}

impl Endpoint for PathBuf {
    type Stream = UnixStream;

    fn try_connect(&self) -> io::Result<Client<UnixStream>> {
        let stream = UnixStream::connect(self)
            .map_err(|e| io::Error::new(e.kind(), format!("connect to {}: {e}", self.display())))?;
        Ok(Client::new(stream))
    }

    fn refuses(&self) -> bool {
        UnixStream::connect(self).is_err()
    }
}

/// How the server ended a connection, as the client saw it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// An orderly end: a FIN (TCP), the peer's close (Unix), `close_notify`
    /// (TLS).
    Clean,
    /// A reset, or a TLS session cut without `close_notify`.
    Abrupt,
}

/// A blocking raw-bytes client with a read timeout.
pub(crate) struct Client<S = TcpStream> {
    pub(crate) stream: S,
    buf: Vec<u8>,
}

impl<S: Stream> Client<S> {
    /// Wraps a connected stream, with the read timeout set.
    pub(crate) fn new(mut stream: S) -> Client<S> {
        stream.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub(crate) fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }
}

// The ways a test reads with the raw client: whole responses, a bare
// head, raw bytes, or all to the end.
impl<S: Stream> Client<S> {
    /// Reads more bytes into the buffer; panics if the server closed.
    fn read_more(&mut self, what: &str) {
        let mut chunk = [0u8; 8192];
        let n = self
            .stream
            .read(&mut chunk)
            .unwrap_or_else(|e| panic!("read {what} (timed out?): {e}"));
        assert!(
            n > 0,
            "connection closed before {what}; got {:?}",
            String::from_utf8_lossy(&self.buf)
        );
        self.buf.extend_from_slice(&chunk[..n]);
    }

    /// Reads one full response (head plus content-length or chunked body);
    /// returns it with the `date` header removed.
    pub(crate) fn response(&mut self) -> String {
        loop {
            if let Some(len) = complete_response(&self.buf) {
                let resp: Vec<u8> = self.buf.drain(..len).collect();
                return strip_date(&String::from_utf8_lossy(&resp));
            }
            self.read_more("a full response");
        }
    }

    /// One read from the socket into `chunk`: how many bytes came, or how
    /// the server ended the connection. Any other error (the read timed
    /// out) fails the test.
    pub(crate) fn read_or_end(&mut self, chunk: &mut [u8]) -> Result<usize, End> {
        match self.stream.read(chunk) {
            Ok(0) => Err(End::Clean),
            Ok(n) => Ok(n),
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof
                ) =>
            {
                Err(End::Abrupt)
            }
            Err(e) => panic!(
                "read (timed out?): {e}; got before {:?}",
                String::from_utf8_lossy(&self.buf)
            ),
        }
    }

    /// Reads until the server ends the connection; returns what was read
    /// (`date` headers removed) and how it ended.
    pub(crate) fn read_to_end(&mut self) -> (String, End) {
        let mut chunk = [0u8; 8192];
        let end = loop {
            match self.read_or_end(&mut chunk) {
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(end) => break end,
            }
        };
        let got = strip_date(&String::from_utf8_lossy(&std::mem::take(&mut self.buf)));
        (got, end)
    }

    /// Reads until the server closes the connection, however it does;
    /// returns what was read (`date` headers removed).
    pub(crate) fn read_to_close(&mut self) -> String {
        self.read_to_end().0
    }

    /// Reads one response head only (for `HEAD` requests, whose responses
    /// announce a length but carry no body); `date` removed.
    pub(crate) fn response_head(&mut self) -> String {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head: Vec<u8> = self.buf.drain(..end + 4).collect();
                return strip_date(&String::from_utf8_lossy(&head));
            }
            self.read_more("a full head");
        }
    }

    /// Reads exactly `n` raw bytes (after whatever a response read left
    /// over), for streams that stopped speaking HTTP.
    pub(crate) fn read_exact_bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            self.read_more(&format!("{n} bytes"));
        }
        self.buf.drain(..n).collect()
    }
}

/// Removes `date:` header lines.
pub(crate) fn strip_date(s: &str) -> String {
    s.split_inclusive("\r\n")
        .filter(|line| !line.to_ascii_lowercase().starts_with("date:"))
        .collect()
}

/// The length of the first complete HTTP/1 response in `buf`, if any.
pub(crate) fn complete_response(buf: &[u8]) -> Option<usize> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status_line = head.lines().next()?;
    let informational = status_line
        .split(' ')
        .nth(1)
        .is_some_and(|s| s.starts_with('1'));
    let no_body = informational
        || status_line.contains(" 204 ")
        || status_line.contains(" 304 ")
        || head.contains("x-head-request: 1");
    if no_body {
        return Some(head_end);
    }
    if let Some(cl) = head.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .map(|v| v.trim().parse::<usize>().unwrap())
    }) {
        return (buf.len() >= head_end + cl).then_some(head_end + cl);
    }
    if head.contains("transfer-encoding: chunked") {
        let mut pos = head_end;
        loop {
            let line_end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[pos..line_end]).ok()?.trim(), 16)
                    .ok()?;
            pos = line_end + 2;
            if size == 0 {
                return (buf.len() >= pos + 2).then_some(pos + 2);
            }
            pos += size + 2;
            if buf.len() < pos {
                return None;
            }
        }
    }
    // No framing: the body runs to close.
    None
}

/// `200 OK` with `body`, as the echo and hello services answer.
pub(crate) fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A keep-alive `GET` of `path`.
pub(crate) fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
}
