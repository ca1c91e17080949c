//! What a WebSocket carries: the messages a handler receives, and close
//! frames and codes.

use std::fmt;

use bytes::Bytes;

/// A message from the client, as the handler receives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// A text message, checked to be UTF-8.
    Text(String),
    /// A binary message.
    Binary(Bytes),
    /// The socket's last message, whatever ended it: the client's close
    /// frame if it sent one (`None` for a close frame without a code, and
    /// when the connection ended without one: the client vanished, broke
    /// the protocol, did not read, or the server shut down).
    Close(Option<CloseFrame>),
}

/// The code and reason of a close frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloseFrame {
    /// Why the connection closes.
    pub code: CloseCode,
    /// A reason for people (UTF-8, at most 123 bytes on the wire).
    pub reason: String,
}

/// A close frame's status code (RFC 6455, 7.4).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CloseCode(u16);

impl CloseCode {
    /// 1000: the purpose of the connection is fulfilled.
    pub const NORMAL: CloseCode = CloseCode(1000);
    /// 1001: the server is going away (shutting down), or the client
    /// navigated away.
    pub const GOING_AWAY: CloseCode = CloseCode(1001);
    /// 1002: the peer broke the protocol.
    pub const PROTOCOL: CloseCode = CloseCode(1002);
    /// 1003: a kind of data the endpoint does not accept.
    pub const UNSUPPORTED: CloseCode = CloseCode(1003);
    /// 1005: no code was given (never sent in a close frame).
    pub const NONE: CloseCode = CloseCode(1005);
    /// 1007: a text message or close reason that is not UTF-8.
    pub const INVALID: CloseCode = CloseCode(1007);
    /// 1008: the endpoint's policy was violated (a client that stopped
    /// reading, by default).
    pub const POLICY: CloseCode = CloseCode(1008);
    /// 1009: a message too big to process.
    pub const SIZE: CloseCode = CloseCode(1009);
    /// 1011: the server hit an unexpected condition.
    pub const ERROR: CloseCode = CloseCode(1011);
    /// 1012: the service is restarting.
    pub const RESTART: CloseCode = CloseCode(1012);
    /// 1013: try again later.
    pub const AGAIN: CloseCode = CloseCode(1013);

    /// Whether an endpoint may send this code in a close frame: the codes
    /// RFC 6455 and IANA's registry define for the wire (1000–1003,
    /// 1007–1014) and those for applications (3000–4999).
    pub fn is_sendable(self) -> bool {
        matches!(self.0, 1000..=1003 | 1007..=1014 | 3000..=4999)
    }
}

impl From<u16> for CloseCode {
    fn from(code: u16) -> Self {
        CloseCode(code)
    }
}

impl From<CloseCode> for u16 {
    fn from(code: CloseCode) -> Self {
        code.0
    }
}

impl fmt::Debug for CloseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CloseCode({})", self.0)
    }
}

impl fmt::Display for CloseCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}
