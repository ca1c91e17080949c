//! RFC 6455 frames: a reader that keeps no buffer of its own between
//! messages, and [`Frame`], a server's (unmasked) frame, encoded once for
//! any number of sockets.
//!
//! The reader is fed whatever bytes a read returned and yields one
//! [`Event`] at a time. Between messages it is one null pointer: what a
//! frame or a fragmented message in progress needs (up to 14 bytes of a
//! header cut short, the frame's mask and length, the message's bytes so
//! far) is boxed only while it is in progress, so a socket that sleeps
//! between messages keeps nothing, and one that sleeps in the middle of a
//! message keeps exactly what the client sent of it.
//!
//! Everything a client can get wrong is refused with the close code RFC 6455
//! gives it: reserved bits or opcodes, unmasked frames, fragmented or
//! oversized control frames, a continuation without a start or a new
//! message inside a fragmented one, a 64-bit length with its top bit set
//! (1002); text that is not UTF-8 (1007); a frame or message over the
//! limits (1009, checked against the length a header announces, before any
//! byte of the payload is buffered).

use std::fmt;

use bytes::Bytes;

use super::message::{CloseCode, CloseFrame, Message};

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

/// Limits on what a client may send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// The largest payload of one frame.
    pub(crate) frame: u32,
    /// The largest message, all of its fragments together.
    pub(crate) message: u32,
}

/// What a client's frames amount to, one at a time.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// A whole text or binary message.
    Message(Message),
    /// A ping, to be answered with a pong carrying `payload`.
    Ping(Bytes),
    /// A pong (an answer to the server's ping, or unsolicited).
    Pong,
    /// A close frame: the client's last frame.
    Close(Option<CloseFrame>),
}

/// Why the client's frames were refused: the code and reason of the close
/// frame the server answers with before it closes the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) code: CloseCode,
    pub(crate) reason: &'static str,
}

impl Refused {
    fn protocol(reason: &'static str) -> Refused {
        Refused {
            code: CloseCode::PROTOCOL,
            reason,
        }
    }
}

/// Reads frames from the bytes a client sends (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Reader {
    /// `None` between messages.
    partial: Option<Box<Partial>>,
}

/// A frame, or a fragmented message, in progress.
#[derive(Debug, Default)]
struct Partial {
    /// The frame's header while it is cut short.
    header: [u8; 14],
    have: u8,
    /// The frame whose payload is being read, once its header is whole.
    frame: Option<Incoming>,
    /// The data message being read (its first frame's opcode, the bytes of
    /// its frames so far).
    message: Option<(u8, Vec<u8>)>,
    /// A control frame's payload so far.
    control: Vec<u8>,
}

/// A client's frame whose payload is being read.
#[derive(Clone, Copy, Debug)]
struct Incoming {
    opcode: u8,
    fin: bool,
    mask: [u8; 4],
    /// Payload bytes still to come.
    left: u64,
    /// Payload bytes read so far (where the mask starts for the next).
    read: u64,
}

impl Reader {
    /// Whether a frame or a message is in progress.
    #[cfg(test)]
    fn in_progress(&self) -> bool {
        self.partial.is_some()
    }

    /// The bytes the reader holds (capacity), for the tests' bound.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.partial.as_ref().map_or(0, |partial| {
            let message = partial
                .message
                .as_ref()
                .map_or(0, |(_, data)| data.capacity());
            std::mem::size_of::<Partial>() + message + partial.control.capacity()
        })
    }

    /// Reads from `input` (advancing it) until a frame completes an event,
    /// or until `input` is empty: `Ok(None)` asks for more bytes.
    ///
    /// # Errors
    ///
    /// When the client broke the protocol or a limit; the reader must not
    /// be fed again.
    pub(crate) fn read(
        &mut self,
        input: &mut &[u8],
        limits: Limits,
    ) -> Result<Option<Event>, Refused> {
        loop {
            if input.is_empty() {
                return Ok(None);
            }
            let partial = self.partial.get_or_insert_with(Box::default);
            let event = match partial.frame {
                None => partial.read_header(input, limits)?,
                Some(_) => partial.read_payload(input)?,
            };
            if partial.is_idle() {
                self.partial = None;
            }
            if event.is_some() {
                return Ok(event);
            }
        }
    }
}

impl Partial {
    fn is_idle(&self) -> bool {
        self.have == 0 && self.frame.is_none() && self.message.is_none()
    }

    /// Reads a header's bytes; once it is whole, checks it and starts its
    /// payload (an empty payload completes the frame at once).
    fn read_header(&mut self, input: &mut &[u8], limits: Limits) -> Result<Option<Event>, Refused> {
        let need = loop {
            let have = usize::from(self.have);
            let need = header_len(&self.header[..have]);
            if have >= need {
                break need;
            }
            let Some((&byte, rest)) = input.split_first() else {
                return Ok(None);
            };
            *input = rest;
            self.header[have] = byte;
            self.have += 1;
            if self.have == 2 {
                self.check_start()?;
            }
        };
        let header = &self.header[..need];
        let (len, mask) = match header[1] & 0x7F {
            126 => (
                u64::from(u16::from_be_bytes([header[2], header[3]])),
                &header[4..8],
            ),
            127 => {
                let len = u64::from_be_bytes(header[2..10].try_into().unwrap_or_default());
                if len >> 63 != 0 {
                    return Err(Refused::protocol("a frame length with its top bit set"));
                }
                (len, &header[10..14])
            }
            len => (u64::from(len), &header[2..6]),
        };
        let frame = Incoming {
            opcode: header[0] & 0x0F,
            fin: header[0] & 0x80 != 0,
            mask: mask.try_into().unwrap_or_default(),
            left: len,
            read: 0,
        };
        self.have = 0;
        if is_control(frame.opcode) {
            // At most 125 bytes: checked with the first two.
            self.control = Vec::with_capacity(len as usize);
        } else {
            let so_far = self
                .message
                .as_ref()
                .map_or(0, |(_, data)| data.len() as u64);
            if len > u64::from(limits.frame) || so_far + len > u64::from(limits.message) {
                return Err(Refused {
                    code: CloseCode::SIZE,
                    reason: "message too big",
                });
            }
            if frame.opcode != opcode::CONTINUATION {
                self.message = Some((frame.opcode, Vec::new()));
            }
        }
        self.frame = Some(frame);
        if len == 0 {
            return self.end_frame();
        }
        Ok(None)
    }

    /// Checks what the first two bytes of a header say.
    fn check_start(&self) -> Result<(), Refused> {
        let [first, second, ..] = self.header;
        let (fin, opcode) = (first & 0x80 != 0, first & 0x0F);
        if first & 0x70 != 0 {
            return Err(Refused::protocol("reserved bits set"));
        }
        if second & 0x80 == 0 {
            return Err(Refused::protocol("a client's frame must be masked"));
        }
        match opcode {
            opcode::CONTINUATION if self.message.is_none() => {
                Err(Refused::protocol("a continuation frame without a message"))
            }
            opcode::TEXT | opcode::BINARY if self.message.is_some() => {
                Err(Refused::protocol("a new message inside a fragmented one"))
            }
            opcode::CONTINUATION | opcode::TEXT | opcode::BINARY => Ok(()),
            opcode::CLOSE | opcode::PING | opcode::PONG => {
                if !fin {
                    Err(Refused::protocol("a fragmented control frame"))
                } else if usize::from(second & 0x7F) > MAX_CONTROL {
                    Err(Refused::protocol("a control frame longer than 125 bytes"))
                } else {
                    Ok(())
                }
            }
            _ => Err(Refused::protocol("a reserved opcode")),
        }
    }

    /// Reads payload bytes, unmasked, into the message or control frame.
    fn read_payload(&mut self, input: &mut &[u8]) -> Result<Option<Event>, Refused> {
        let Some(frame) = &mut self.frame else {
            return Ok(None);
        };
        let n = usize::try_from(frame.left).map_or(input.len(), |left| left.min(input.len()));
        let (bytes, rest) = input.split_at(n);
        *input = rest;
        let target = if is_control(frame.opcode) {
            &mut self.control
        } else {
            match &mut self.message {
                Some((_, data)) => data,
                None => return Ok(None),
            }
        };
        let start = target.len();
        target.extend_from_slice(bytes);
        unmask(&mut target[start..], frame.mask, frame.read);
        frame.left -= n as u64;
        frame.read += n as u64;
        if frame.left == 0 {
            return self.end_frame();
        }
        Ok(None)
    }

    /// A frame's payload is whole: the event it completes, if any.
    fn end_frame(&mut self) -> Result<Option<Event>, Refused> {
        let Some(frame) = self.frame.take() else {
            return Ok(None);
        };
        match frame.opcode {
            opcode::PING => Ok(Some(Event::Ping(Bytes::from(std::mem::take(
                &mut self.control,
            ))))),
            opcode::PONG => {
                self.control = Vec::new();
                Ok(Some(Event::Pong))
            }
            opcode::CLOSE => close_frame(&std::mem::take(&mut self.control))
                .map(Event::Close)
                .map(Some),
            _ if !frame.fin => Ok(None),
            _ => {
                let Some((opcode, data)) = self.message.take() else {
                    return Ok(None);
                };
                if opcode == opcode::TEXT {
                    String::from_utf8(data)
                        .map(|text| Some(Event::Message(Message::Text(text))))
                        .map_err(|_| Refused {
                            code: CloseCode::INVALID,
                            reason: "text that is not UTF-8",
                        })
                } else {
                    Ok(Some(Event::Message(Message::Binary(Bytes::from(data)))))
                }
            }
        }
    }
}

/// How long a header is, from its bytes so far (2 until they say more).
fn header_len(header: &[u8]) -> usize {
    match header {
        [_, second, ..] => {
            let mask = if second & 0x80 != 0 { 4 } else { 0 };
            match second & 0x7F {
                126 => 4 + mask,
                127 => 10 + mask,
                _ => 2 + mask,
            }
        }
        _ => 2,
    }
}

fn is_control(opcode: u8) -> bool {
    opcode & 0x8 != 0
}

/// A close frame's payload: no code, or a code a peer may send and a
/// UTF-8 reason.
fn close_frame(payload: &[u8]) -> Result<Option<CloseFrame>, Refused> {
    match payload {
        [] => Ok(None),
        [_] => Err(Refused::protocol("a close frame with a one-byte payload")),
        [high, low, reason @ ..] => {
            let code = CloseCode::from(u16::from_be_bytes([*high, *low]));
            if !code.is_sendable() {
                return Err(Refused::protocol("a close code a peer may not send"));
            }
            let reason = std::str::from_utf8(reason).map_err(|_| Refused {
                code: CloseCode::INVALID,
                reason: "a close reason that is not UTF-8",
            })?;
            Ok(Some(CloseFrame {
                code,
                reason: reason.to_owned(),
            }))
        }
    }
}

/// Unmasks `bytes`, the payload's bytes from offset `at` on.
fn unmask(bytes: &mut [u8], mask: [u8; 4], at: u64) {
    let mut mask = mask;
    mask.rotate_left((at % 4) as usize);
    let mut chunks = bytes.chunks_exact_mut(4);
    for chunk in &mut chunks {
        for (byte, key) in chunk.iter_mut().zip(mask) {
            *byte ^= key;
        }
    }
    for (byte, key) in chunks.into_remainder().iter_mut().zip(mask) {
        *byte ^= key;
    }
}

/// Encodes a server's frame: final, unmasked.
pub(crate) fn encode(opcode: u8, payload: &[u8]) -> Bytes {
    let len = payload.len();
    let mut frame = Vec::with_capacity(len + 10);
    frame.push(0x80 | opcode);
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
#[derive(Clone, PartialEq, Eq)]
pub struct Frame(Bytes);

impl Frame {
    /// A text message.
    pub fn text(text: impl AsRef<str>) -> Frame {
        Frame(encode(opcode::TEXT, text.as_ref().as_bytes()))
    }

    /// A binary message.
    pub fn binary(bytes: impl AsRef<[u8]>) -> Frame {
        Frame(encode(opcode::BINARY, bytes.as_ref()))
    }

    /// A ping carrying `payload` (at most 125 bytes: longer payloads are
    /// cut).
    pub fn ping(payload: impl AsRef<[u8]>) -> Frame {
        let payload = payload.as_ref();
        Frame(encode(
            opcode::PING,
            &payload[..payload.len().min(MAX_CONTROL)],
        ))
    }

    /// A close frame with `code` and as much of `reason` as fits (123
    /// bytes, cut at a character boundary); [`CloseCode::NONE`] sends one
    /// without a code.
    pub fn close(code: CloseCode, reason: &str) -> Frame {
        Frame(encode_close(code, reason))
    }

    pub(crate) fn pong(payload: &[u8]) -> Frame {
        Frame(encode(opcode::PONG, payload))
    }

    pub(crate) fn is_close(&self) -> bool {
        self.0[0] & 0x0F == opcode::CLOSE
    }

    pub(crate) fn bytes(&self) -> &Bytes {
        &self.0
    }

    /// The frame's length on the wire.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the frame is empty: never (a frame has a header).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frame")
            .field("opcode", &(self.0[0] & 0x0F))
            .field("len", &self.0.len())
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

    const LIMITS: Limits = Limits {
        frame: 1 << 20,
        message: 1 << 21,
    };

    /// A client's frame: masked with `mask`.
    fn client_frame(first: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
        let mut frame = vec![first];
        match payload.len() {
            len @ 0..=125 => frame.push(0x80 | len as u8),
            len @ 126..=0xFFFF => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(len as u16).to_be_bytes());
            }
            len => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        frame
    }

    fn read_all(reader: &mut Reader, mut input: &[u8]) -> Result<Vec<Event>, Refused> {
        let mut events = Vec::new();
        while let Some(event) = reader.read(&mut input, LIMITS)? {
            events.push(event);
        }
        Ok(events)
    }

    #[test]
    fn rfc_examples() {
        // RFC 6455, 5.7: a masked "Hello", and the same in two fragments.
        let hello = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        let text = Event::Message(Message::Text("Hello".into()));
        assert_eq!(read_all(&mut Reader::default(), &hello), Ok(vec![text]));
        // The server's unmasked frames.
        assert_eq!(
            &encode(opcode::TEXT, b"Hello")[..],
            [0x81, 0x05, b'H', b'e', b'l', b'l', b'o']
        );
        let long = encode(opcode::BINARY, &[0; 256]);
        assert_eq!(&long[..4], [0x82, 0x7E, 0x01, 0x00]);
        let longer = encode(opcode::BINARY, &[0; 65536]);
        assert_eq!(&longer[..10], [0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0]);
    }

    #[test]
    fn fragments_with_control_frames_between_and_byte_by_byte() {
        let mask = [1, 2, 3, 4];
        let mut input = client_frame(0x01, "héllo ".as_bytes(), mask);
        input.extend(client_frame(0x89, b"ping", mask));
        input.extend(client_frame(0x00, b"", mask));
        input.extend(client_frame(0x80, "wörld".as_bytes(), mask));
        let expected = vec![
            Event::Ping(Bytes::from_static(b"ping")),
            Event::Message(Message::Text("héllo wörld".into())),
        ];
        assert_eq!(
            read_all(&mut Reader::default(), &input).as_ref(),
            Ok(&expected)
        );
        let mut reader = Reader::default();
        let mut events = Vec::new();
        for byte in &input {
            events.extend(read_all(&mut reader, std::slice::from_ref(byte)).unwrap());
        }
        assert_eq!(events, expected);
        assert!(!reader.in_progress());
    }

    #[test]
    fn refusals() {
        let mask = [9, 8, 7, 6];
        let code = |input: &[u8]| read_all(&mut Reader::default(), input).unwrap_err().code;
        assert_eq!(code(&[0x81, 0x00]), CloseCode::PROTOCOL, "unmasked");
        assert_eq!(
            code(&client_frame(0xC1, b"x", mask)),
            CloseCode::PROTOCOL,
            "rsv1"
        );
        assert_eq!(
            code(&client_frame(0x83, b"x", mask)),
            CloseCode::PROTOCOL,
            "opcode 3"
        );
        assert_eq!(
            code(&client_frame(0x80, b"x", mask)),
            CloseCode::PROTOCOL,
            "lone continuation"
        );
        assert_eq!(
            code(&client_frame(0x09, b"x", mask)),
            CloseCode::PROTOCOL,
            "fragmented ping"
        );
        assert_eq!(
            code(&client_frame(0x89, &[0; 126], mask)),
            CloseCode::PROTOCOL,
            "long ping"
        );
        assert_eq!(
            code(&client_frame(0x81, &[0xFF], mask)),
            CloseCode::INVALID,
            "bad UTF-8"
        );
        assert_eq!(
            code(&client_frame(0x88, &[3], mask)),
            CloseCode::PROTOCOL,
            "1-byte close"
        );
        assert_eq!(
            code(&client_frame(0x88, &[3, 0xED], mask)),
            CloseCode::PROTOCOL,
            "close 1005"
        );
        assert_eq!(
            code(&client_frame(0x88, &[3, 0xE8, 0xFF], mask)),
            CloseCode::INVALID,
            "reason"
        );
        let mut two = client_frame(0x01, b"a", mask);
        two.extend(client_frame(0x81, b"b", mask));
        assert_eq!(
            code(&two),
            CloseCode::PROTOCOL,
            "new message inside another"
        );
        let big = [0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4];
        assert_eq!(code(&big), CloseCode::PROTOCOL, "top bit");
        // Sizes are checked on the header, before the payload.
        let huge = [0x82, 0xFF, 0, 0, 0, 0, 0, 0x20, 0, 0, 1, 2, 3, 4];
        assert_eq!(code(&huge), CloseCode::SIZE, "frame over the limit");
        let mut parts = client_frame(0x02, &vec![0; 1 << 20], mask);
        parts.extend(client_frame(0x00, &vec![0; 1 << 20], mask));
        // Refused on its header: no byte of its payload comes.
        parts.extend_from_slice(&client_frame(0x80, b"x", mask)[..6]);
        assert_eq!(code(&parts), CloseCode::SIZE, "message over the limit");
    }

    #[test]
    fn close_frames() {
        let mask = [0; 4];
        let events = read_all(&mut Reader::default(), &client_frame(0x88, &[], mask));
        assert_eq!(events, Ok(vec![Event::Close(None)]));
        let mut payload = 4000u16.to_be_bytes().to_vec();
        payload.extend_from_slice("bye".as_bytes());
        let events = read_all(&mut Reader::default(), &client_frame(0x88, &payload, mask));
        let frame = CloseFrame {
            code: CloseCode::from(4000),
            reason: "bye".into(),
        };
        assert_eq!(events, Ok(vec![Event::Close(Some(frame))]));
        // A reason is cut to fit, at a character boundary.
        let close = encode_close(CloseCode::NORMAL, &"é".repeat(100));
        assert_eq!(close.len(), 2 + 2 + 122);
    }

    /// xorshift64: the same cases on every machine.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    const FUZZ: Limits = Limits {
        frame: 3000,
        message: 5000,
    };

    /// A client's stream of frames, generated: the bytes, and the events
    /// they make (`None` if a corruption makes them refused or cut short).
    fn generate(rng: &mut Rng) -> (Vec<u8>, Vec<Event>) {
        let mut bytes = Vec::new();
        let mut events = Vec::new();
        for _ in 0..1 + rng.below(6) {
            let mask = (rng.next() as u32).to_be_bytes();
            match rng.below(5) {
                0 => {
                    let payload: Vec<u8> = (0..rng.below(126)).map(|_| rng.next() as u8).collect();
                    bytes.extend(client_frame(0x89, &payload, mask));
                    events.push(Event::Ping(Bytes::from(payload)));
                }
                1 => {
                    bytes.extend(client_frame(0x8A, b"pong", mask));
                    events.push(Event::Pong);
                }
                kind => {
                    // A message in 1 to 4 fragments, pings between them.
                    let text = kind == 2;
                    let len = [0, 1, 125, 126, 1000, 2900][rng.below(6)];
                    let data: Vec<u8> = if text {
                        "aé€😀"
                            .chars()
                            .cycle()
                            .take(len / 3)
                            .collect::<String>()
                            .into_bytes()
                    } else {
                        (0..len).map(|_| rng.next() as u8).collect()
                    };
                    let pieces = 1 + rng.below(4);
                    let mut cuts: Vec<usize> =
                        (0..pieces - 1).map(|_| rng.below(data.len() + 1)).collect();
                    cuts.sort_unstable();
                    cuts.push(data.len());
                    let mut start = 0;
                    for (i, end) in cuts.into_iter().enumerate() {
                        let opcode = match (i, text) {
                            (0, true) => 0x1,
                            (0, false) => 0x2,
                            _ => 0x0,
                        };
                        let fin = if end == data.len() && i == pieces - 1 {
                            0x80
                        } else {
                            0
                        };
                        bytes.extend(client_frame(fin | opcode, &data[start..end], mask));
                        if fin == 0 && rng.below(3) == 0 {
                            bytes.extend(client_frame(0x89, b"", mask));
                            events.push(Event::Ping(Bytes::new()));
                        }
                        start = end;
                    }
                    events.push(Event::Message(if text {
                        Message::Text(String::from_utf8(data).unwrap())
                    } else {
                        Message::Binary(Bytes::from(data))
                    }));
                }
            }
        }
        (bytes, events)
    }

    /// Feeds `input` cut at `cuts`: the events, the refusal if any, and
    /// checks the reader's bound after every read.
    fn feed(input: &[u8], cuts: &[usize]) -> (Vec<Event>, Option<Refused>) {
        let mut reader = Reader::default();
        let mut events = Vec::new();
        let mut start = 0;
        for &end in cuts.iter().chain([&input.len()]) {
            let mut piece = &input[start..end.max(start)];
            start = end.max(start);
            loop {
                let read = reader.read(&mut piece, FUZZ);
                assert!(
                    reader.held() <= 2 * FUZZ.message as usize + 1024,
                    "unbounded"
                );
                match read {
                    Ok(Some(event)) => events.push(event),
                    Ok(None) => break,
                    Err(refused) => return (events, Some(refused)),
                }
            }
        }
        (events, None)
    }

    fn random_cuts(rng: &mut Rng, len: usize) -> Vec<usize> {
        let mut cuts: Vec<usize> = (0..rng.below(12)).map(|_| rng.below(len + 1)).collect();
        cuts.sort_unstable();
        cuts
    }

    #[test]
    fn generated_streams_read_the_same_however_they_are_cut() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for case in 0..3000 {
            let (mut bytes, mut expected) = generate(&mut rng);
            // A third of the cases are damaged: a byte changed, or bytes
            // of noise added.
            let damaged = case % 3 == 0;
            if damaged {
                match rng.below(2) {
                    0 => {
                        let at = rng.below(bytes.len());
                        bytes[at] ^= 1 << rng.below(8);
                    }
                    _ => {
                        let at = rng.below(bytes.len() + 1);
                        let noise: Vec<u8> =
                            (0..1 + rng.below(20)).map(|_| rng.next() as u8).collect();
                        bytes.splice(at..at, noise);
                    }
                }
            }
            let whole = feed(&bytes, &[]);
            if !damaged {
                assert_eq!(whole, (std::mem::take(&mut expected), None), "case {case}");
            }
            for _ in 0..4 {
                let cuts = random_cuts(&mut rng, bytes.len());
                assert_eq!(feed(&bytes, &cuts), whole, "case {case}, cut at {cuts:?}");
            }
            if bytes.len() < 600 {
                let every: Vec<usize> = (1..bytes.len()).collect();
                assert_eq!(feed(&bytes, &every), whole, "case {case}, byte by byte");
            }
        }
    }

    #[test]
    fn noise_is_refused_or_waits_within_bounds() {
        let mut rng = Rng(0xD1B5_4A32_D192_ED03);
        let mut refused = 0;
        for _ in 0..3000 {
            let noise: Vec<u8> = (0..rng.below(400)).map(|_| rng.next() as u8).collect();
            let whole = feed(&noise, &[]);
            refused += usize::from(whole.1.is_some());
            let cuts = random_cuts(&mut rng, noise.len());
            assert_eq!(feed(&noise, &cuts), whole);
        }
        // Random bytes are mostly refused (reserved bits, opcodes, no mask).
        assert!(refused > 2000, "{refused}");
    }
}
