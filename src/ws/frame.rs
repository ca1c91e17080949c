//! The server's frames (RFC 6455, 5): [`Frame`], a message encoded once
//! for any number of sockets, and compressed once for all those that
//! negotiated `permessage-deflate` (feature `ws-deflate`).

use std::fmt;
#[cfg(feature = "ws-deflate")]
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::message::{CloseCode, Message};

/// The longest payload of a control frame (RFC 6455, 5.5).
pub(crate) const MAX_CONTROL: usize = 125;

/// Opcodes (RFC 6455, 5.2).
pub(crate) mod opcode {
    pub(crate) const CONTINUATION: u8 = 0x0;
    pub(crate) const TEXT: u8 = 0x1;
    pub(crate) const BINARY: u8 = 0x2;
    pub(crate) const CLOSE: u8 = 0x8;
    pub(crate) const PING: u8 = 0x9;
    pub(crate) const PONG: u8 = 0xA;
}

/// The smallest message a socket that negotiated compression sends
/// compressed: deflate's headers and Huffman tables outweigh what it
/// saves on shorter ones.
#[cfg(feature = "ws-deflate")]
const COMPRESS_FROM: usize = 64;

/// Encodes a server's frame: final, unmasked.
pub(crate) fn encode(opcode: u8, payload: &[u8]) -> Bytes {
    encode_with(0x80 | opcode, payload)
}

/// Encodes a frame whose first byte is `first` (FIN, RSV1, the opcode).
fn encode_with(first: u8, payload: &[u8]) -> Bytes {
    let len = payload.len();
    let mut frame = Vec::with_capacity(len + 10);
    frame.push(first);
    match len {
        0..=125 => frame.push(len as u8),
        126..=0xFFFF => {
            frame.push(126);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            frame.push(127);
            frame.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(payload);
    Bytes::from(frame)
}

/// Encodes a close frame: the code (none for [`CloseCode::NONE`]) and as
/// much of `reason` as fits a control frame, cut at a character boundary.
pub(crate) fn encode_close(code: CloseCode, reason: &str) -> Bytes {
    if code == CloseCode::NONE {
        return encode(opcode::CLOSE, &[]);
    }
    let mut end = reason.len().min(MAX_CONTROL - 2);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = u16::from(code).to_be_bytes().to_vec();
    payload.extend_from_slice(&reason.as_bytes()[..end]);
    encode(opcode::CLOSE, &payload)
}

/// A message encoded as the frame the server sends, ready for any number
/// of sockets: clones share the bytes. A broadcast encodes its message once
/// and sends the same `Frame` to every socket
/// ([`Sender::send`](super::Sender::send) takes anything that converts into
/// one).
///
/// With `ws-deflate`, a message of more than a few dozen bytes is also
/// compressed, once, the first time a socket that negotiated
/// `permessage-deflate` sends it; every such socket sends those bytes
/// (clones share them too), and a message that compression does not make
/// smaller goes uncompressed.
#[derive(Clone)]
pub struct Frame {
    bytes: Bytes,
    /// The message compressed, once a socket asked for it: `None` inside
    /// when that is not smaller. Only messages that may be worth it have
    /// the cell.
    #[cfg(feature = "ws-deflate")]
    deflated: Option<Arc<OnceLock<Option<Bytes>>>>,
}

impl PartialEq for Frame {
    fn eq(&self, other: &Frame) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Frame {}

impl Frame {
    fn control(bytes: Bytes) -> Frame {
        Frame {
            bytes,
            #[cfg(feature = "ws-deflate")]
            deflated: None,
        }
    }

    fn data(opcode: u8, payload: &[u8]) -> Frame {
        Frame {
            bytes: encode(opcode, payload),
            #[cfg(feature = "ws-deflate")]
            deflated: (payload.len() >= COMPRESS_FROM).then(Arc::default),
        }
    }

    /// A text message.
    pub fn text(text: impl AsRef<str>) -> Frame {
        Frame::data(opcode::TEXT, text.as_ref().as_bytes())
    }

    /// A binary message.
    pub fn binary(bytes: impl AsRef<[u8]>) -> Frame {
        Frame::data(opcode::BINARY, bytes.as_ref())
    }

    /// A ping carrying `payload` (at most 125 bytes: longer payloads are
    /// cut).
    pub fn ping(payload: impl AsRef<[u8]>) -> Frame {
        let payload = payload.as_ref();
        Frame::control(encode(
            opcode::PING,
            &payload[..payload.len().min(MAX_CONTROL)],
        ))
    }

    /// A close frame with `code` and as much of `reason` as fits (123
    /// bytes, cut at a character boundary); [`CloseCode::NONE`] sends one
    /// without a code.
    pub fn close(code: CloseCode, reason: &str) -> Frame {
        Frame::control(encode_close(code, reason))
    }

    pub(crate) fn pong(payload: &[u8]) -> Frame {
        Frame::control(encode(opcode::PONG, payload))
    }

    pub(crate) fn is_close(&self) -> bool {
        self.bytes[0] & 0x0F == opcode::CLOSE
    }

    /// The bytes a socket sends: compressed (compressing the message the
    /// first time one asks) if it negotiated compression and that is
    /// smaller.
    pub(crate) fn bytes(&self, compressed: bool) -> &Bytes {
        #[cfg(feature = "ws-deflate")]
        if let (true, Some(deflated)) = (compressed, &self.deflated) {
            let deflated = deflated.get_or_init(|| {
                let (first, payload) = (self.bytes[0], self.payload());
                // RSV1 marks the message compressed.
                super::deflate::compress(payload, |deflated| encode_with(first | 0x40, deflated))
            });
            if let Some(deflated) = deflated {
                return deflated;
            }
        }
        #[cfg(not(feature = "ws-deflate"))]
        let _ = compressed;
        &self.bytes
    }

    /// The message's payload: its bytes after the header.
    #[cfg(feature = "ws-deflate")]
    fn payload(&self) -> &[u8] {
        let start = match self.bytes[1] & 0x7F {
            126 => 4,
            127 => 10,
            _ => 2,
        };
        &self.bytes[start..]
    }

    /// The frame's length on the wire, uncompressed.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the frame is empty: never (a frame has a header).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frame")
            .field("opcode", &(self.bytes[0] & 0x0F))
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl From<Message> for Frame {
    fn from(message: Message) -> Self {
        match message {
            Message::Text(text) => Frame::text(text),
            Message::Binary(bytes) => Frame::binary(bytes),
            Message::Close(None) => Frame::close(CloseCode::NONE, ""),
            Message::Close(Some(close)) => Frame::close(close.code, &close.reason),
        }
    }
}

impl From<&str> for Frame {
    fn from(text: &str) -> Self {
        Frame::text(text)
    }
}

impl From<String> for Frame {
    fn from(text: String) -> Self {
        Frame::text(text)
    }
}

impl From<Bytes> for Frame {
    fn from(bytes: Bytes) -> Self {
        Frame::binary(bytes)
    }
}

impl From<Vec<u8>> for Frame {
    fn from(bytes: Vec<u8>) -> Self {
        Frame::binary(bytes)
    }
}

impl From<&Frame> for Frame {
    fn from(frame: &Frame) -> Self {
        frame.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_as_rfc_6455_encodes_them() {
        // RFC 6455, 5.7: an unmasked "Hello".
        assert_eq!(
            &encode(opcode::TEXT, b"Hello")[..],
            [0x81, 0x05, b'H', b'e', b'l', b'l', b'o']
        );
        let long = encode(opcode::BINARY, &[0; 256]);
        assert_eq!(&long[..4], [0x82, 0x7E, 0x01, 0x00]);
        let longer = encode(opcode::BINARY, &[0; 65536]);
        assert_eq!(&longer[..10], [0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0]);
        // A reason is cut to fit, at a character boundary.
        let close = encode_close(CloseCode::NORMAL, &"é".repeat(100));
        assert_eq!(close.len(), 2 + 2 + 122);
    }

    #[cfg(feature = "ws-deflate")]
    #[test]
    fn a_frame_is_compressed_once_for_every_socket() {
        let text = "{\"price\":101.25,\"symbol\":\"ACME\"}".repeat(8);
        let frame = Frame::text(&text);
        let copy = frame.clone();
        let deflated = frame.bytes(true).clone();
        assert_eq!(deflated[0], 0x80 | 0x40 | opcode::TEXT, "FIN, RSV1, text");
        assert!(deflated.len() < frame.len() / 2);
        // The clone shares the compressed bytes: the same allocation.
        assert_eq!(copy.bytes(true).as_ptr(), deflated.as_ptr());
        assert_eq!(copy.bytes(false), &encode(opcode::TEXT, text.as_bytes()));
        // Short messages and control frames go uncompressed.
        assert_eq!(Frame::text("hi").bytes(true)[0], 0x81);
        assert_eq!(Frame::ping("x".repeat(100)).bytes(true)[0], 0x89);
    }
}
