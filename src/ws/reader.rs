//! The client's frames (RFC 6455, 5; RFC 7692 for compressed messages): a
//! reader that keeps no buffer of its own between messages.
//!
//! The reader is fed whatever bytes a read returned and yields one
//! [`Event`] at a time. Between messages it is one null pointer: what a
//! frame or a fragmented message in progress needs (up to 14 bytes of a
//! header cut short, the frame's mask and length, the message's bytes so
//! far, and the inflater of a compressed one) is boxed only while it is in
//! progress, so a socket that sleeps between messages keeps nothing, and
//! one that sleeps in the middle of a message keeps exactly what the client
//! sent of it.
//!
//! Everything a client can get wrong is refused with the close code RFC
//! 6455 gives it, as early as the bytes tell: reserved bits or opcodes
//! (RSV1 only marks a compressed message, when `permessage-deflate` was
//! negotiated), unmasked frames, fragmented or oversized control frames, a
//! continuation without a start or a new message inside a fragmented one,
//! a 64-bit length with its top bit set (1002); text that is not UTF-8
//! (1007, at the first byte that cannot start or continue a character,
//! whichever fragment or piece of a frame it arrives in; also a compressed
//! message that does not inflate); a frame or message over the limits
//! (1009: a frame's length is checked on its header, before any byte of
//! its payload is kept, and a compressed message as it inflates, before it
//! grows past the limit).
//!
//! Once the server has sent its close frame ([`Reader::closing`]), the
//! reader only looks for the client's: it skips the rest of the frame in
//! flight and every data frame after it, keeping none of their bytes, so
//! that the server can read until the client's close frame arrives instead
//! of closing with bytes unread (a reset, which can destroy its own close
//! frame on the way).

use bytes::Bytes;

#[cfg(feature = "ws-deflate")]
use super::deflate::Inflater;
use super::frame::{MAX_CONTROL, opcode};
use super::message::{CloseCode, CloseFrame, Message};

/// What the reader takes from a client: its limits, and whether it may
/// compress its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rules {
    /// The largest payload of one frame (compressed, as it comes).
    pub(crate) frame: u32,
    /// The largest message, all of its fragments together (inflated).
    pub(crate) message: u32,
    /// `permessage-deflate` was negotiated: RSV1 on a message's first
    /// frame marks it compressed.
    pub(crate) inflate: bool,
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
    pub(crate) fn protocol(reason: &'static str) -> Refused {
        Refused {
            code: CloseCode::PROTOCOL,
            reason,
        }
    }

    pub(crate) fn invalid(reason: &'static str) -> Refused {
        Refused {
            code: CloseCode::INVALID,
            reason,
        }
    }

    pub(crate) fn too_big() -> Refused {
        Refused {
            code: CloseCode::SIZE,
            reason: "message too big",
        }
    }
}

/// Reads frames from the bytes a client sends (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Reader {
    /// `None` between messages.
    partial: Option<Box<Partial>>,
    /// The server sent its close frame: only the client's matters now.
    closing: Closing,
}

/// What a reader does once the server has sent its close frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Closing {
    /// Not closing: frames are read.
    #[default]
    No,
    /// Frames are skipped until the client's close frame.
    Skip,
    /// The client's frames cannot be told apart any more (it broke the
    /// framing): bytes are dropped until the connection ends.
    Drop,
}

/// A frame, or a fragmented message, in progress.
#[derive(Debug, Default)]
struct Partial {
    /// The frame's header while it is cut short.
    header: [u8; 14],
    have: u8,
    /// The frame whose payload is being read, once its header is whole.
    frame: Option<Incoming>,
    /// The data message being read.
    message: Option<InMessage>,
    /// A control frame's payload so far.
    control: Vec<u8>,
}

/// A data message being read.
#[derive(Debug)]
struct InMessage {
    /// Its first frame's opcode.
    opcode: u8,
    /// Its bytes so far (inflated, if it is compressed).
    data: Vec<u8>,
    /// Bytes of `data` known to be UTF-8 (text): a character cut at the
    /// end waits for its other bytes.
    checked: usize,
    /// The inflater of a compressed message.
    #[cfg(feature = "ws-deflate")]
    inflater: Option<Inflater>,
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
    /// Its payload is skipped, not kept (the reader is closing).
    skipped: bool,
}

impl Reader {
    /// Whether a frame or a message is in progress.
    #[cfg(test)]
    pub(crate) fn in_progress(&self) -> bool {
        self.partial.is_some()
    }

    /// The bytes the reader holds (capacity), for the tests' bound.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.partial.as_ref().map_or(0, |partial| {
            let message = partial
                .message
                .as_ref()
                .map_or(0, |message| message.data.capacity());
            std::mem::size_of::<Partial>() + message + partial.control.capacity()
        })
    }

    /// From now on, looks for the client's close frame only (the server
    /// sent its own): the rest of the frame in flight and every data frame
    /// after it are skipped, their bytes kept nowhere. After `refused`, a
    /// refusal of the client's framing itself (1002), nothing can be told
    /// apart any more: every byte is dropped until the connection ends.
    pub(crate) fn closing(&mut self, refused: Option<Refused>) {
        if self.closing == Closing::Drop {
            return;
        }
        let framing_broken = refused.is_some_and(|refused| refused.code == CloseCode::PROTOCOL);
        if framing_broken {
            self.closing = Closing::Drop;
            self.partial = None;
            return;
        }
        self.closing = Closing::Skip;
        if let Some(partial) = &mut self.partial {
            partial.message = None;
            if let Some(frame) = &mut partial.frame {
                frame.skipped = !is_control(frame.opcode);
            }
            if partial.is_idle() {
                self.partial = None;
            }
        }
    }

    /// Whether the reader drops every byte (the client broke its framing):
    /// its close frame cannot be found.
    pub(crate) fn is_dropping(&self) -> bool {
        self.closing == Closing::Drop
    }

    /// Reads from `input` (advancing it) until a frame completes an event,
    /// or until `input` is empty: `Ok(None)` asks for more bytes.
    ///
    /// # Errors
    ///
    /// When the client broke the protocol or a limit; the reader must not
    /// be fed again but in closing mode ([`closing`](Self::closing)).
    pub(crate) fn read(
        &mut self,
        input: &mut &[u8],
        rules: Rules,
    ) -> Result<Option<Event>, Refused> {
        if self.closing == Closing::Drop {
            *input = &[];
            return Ok(None);
        }
        let closing = self.closing == Closing::Skip;
        loop {
            if input.is_empty() {
                return Ok(None);
            }
            let partial = self.partial.get_or_insert_with(Box::default);
            let event = match partial.frame {
                None => partial.read_header(input, rules, closing)?,
                Some(_) => partial.read_payload(input, rules)?,
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
    /// payload (an empty payload completes the frame at once). A closing
    /// reader checks nothing but what it needs to find the frames' ends.
    fn read_header(
        &mut self,
        input: &mut &[u8],
        rules: Rules,
        closing: bool,
    ) -> Result<Option<Event>, Refused> {
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
            if self.have == 2 && !closing {
                self.check_start(rules)?;
            }
        };
        let header = &self.header[..need];
        let masked = header[1] & 0x80 != 0;
        let (len, at) = match header[1] & 0x7F {
            126 => (u64::from(u16::from_be_bytes([header[2], header[3]])), 4),
            127 => {
                let len = u64::from_be_bytes(header[2..10].try_into().unwrap_or_default());
                if len >> 63 != 0 && !closing {
                    return Err(Refused::protocol("a frame length with its top bit set"));
                }
                (len, 10)
            }
            len => (u64::from(len), 2),
        };
        let mask = match masked {
            true => header[at..at + 4].try_into().unwrap_or_default(),
            false => [0; 4],
        };
        let opcode = header[0] & 0x0F;
        let compressed = header[0] & 0x40 != 0;
        self.have = 0;
        let control = is_control(opcode);
        // Closing, only a close frame's payload is kept (and only one that
        // fits a control frame).
        let skipped = closing && !(opcode == opcode::CLOSE && len <= MAX_CONTROL as u64);
        if control {
            if !skipped {
                // At most 125 bytes: checked with the first two.
                self.control = Vec::with_capacity(len as usize);
            }
        } else if !skipped {
            let (so_far, inflated) = match &self.message {
                Some(message) => (message.data.len() as u64, message.is_compressed()),
                None => (0, compressed),
            };
            // A compressed message is measured as it inflates.
            if len > u64::from(rules.frame)
                || (!inflated && so_far + len > u64::from(rules.message))
            {
                // Its payload is skipped if the socket reads on (closing).
                self.message = None;
                self.frame = Some(Incoming::skipped(opcode, len));
                return Err(Refused::too_big());
            }
            if opcode != opcode::CONTINUATION {
                self.message = Some(InMessage::new(opcode, compressed));
            }
        }
        self.frame = Some(Incoming {
            opcode,
            fin: header[0] & 0x80 != 0,
            mask,
            left: len,
            read: 0,
            skipped,
        });
        if len == 0 {
            return self.end_frame(rules);
        }
        Ok(None)
    }

    /// Checks what the first two bytes of a header say.
    fn check_start(&self, rules: Rules) -> Result<(), Refused> {
        let [first, second, ..] = self.header;
        let (fin, opcode) = (first & 0x80 != 0, first & 0x0F);
        // RSV1 marks a compressed message: on its first frame only, and
        // only when compression was negotiated.
        let compressed = first & 0x40 != 0;
        let starts_message = matches!(opcode, opcode::TEXT | opcode::BINARY);
        if first & 0x30 != 0 || (compressed && !(rules.inflate && starts_message)) {
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

    /// Reads payload bytes: unmasked into the control frame, or into the
    /// message (inflated, if it is compressed; checked to be UTF-8, if it
    /// is text); skipped, if the reader is closing.
    fn read_payload(&mut self, input: &mut &[u8], rules: Rules) -> Result<Option<Event>, Refused> {
        let Some(frame) = &mut self.frame else {
            return Err(Refused::protocol("a payload without a frame"));
        };
        let n = usize::try_from(frame.left).map_or(input.len(), |left| left.min(input.len()));
        let (bytes, rest) = input.split_at(n);
        *input = rest;
        let (mask, at) = (frame.mask, frame.read);
        frame.left -= n as u64;
        frame.read += n as u64;
        let done = frame.left == 0;
        match (frame.skipped, is_control(frame.opcode), &mut self.message) {
            (true, _, _) => {}
            (false, true, _) => {
                let start = self.control.len();
                self.control.extend_from_slice(bytes);
                unmask(&mut self.control[start..], mask, at);
            }
            (false, false, Some(message)) => message.take(bytes, mask, at, rules)?,
            (false, false, None) => return Err(Refused::protocol("a payload without a message")),
        }
        if done {
            return self.end_frame(rules);
        }
        Ok(None)
    }

    /// A frame's payload is whole: the event it completes, if any.
    fn end_frame(&mut self, rules: Rules) -> Result<Option<Event>, Refused> {
        let Some(frame) = self.frame.take() else {
            return Ok(None);
        };
        if frame.skipped {
            return Ok(None);
        }
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
            _ => match self.message.take() {
                Some(message) => message
                    .end(rules)
                    .map(|message| Some(Event::Message(message))),
                None => Ok(None),
            },
        }
    }
}

impl Incoming {
    /// A frame whose payload of `len` bytes is skipped.
    fn skipped(opcode: u8, len: u64) -> Incoming {
        Incoming {
            opcode,
            fin: true,
            mask: [0; 4],
            left: len,
            read: 0,
            skipped: true,
        }
    }
}

impl InMessage {
    fn is_compressed(&self) -> bool {
        #[cfg(feature = "ws-deflate")]
        return self.inflater.is_some();
        #[cfg(not(feature = "ws-deflate"))]
        false
    }

    fn new(opcode: u8, compressed: bool) -> InMessage {
        #[cfg(not(feature = "ws-deflate"))]
        let _ = compressed;
        InMessage {
            opcode,
            data: Vec::new(),
            checked: 0,
            #[cfg(feature = "ws-deflate")]
            inflater: compressed.then(Inflater::take),
        }
    }

    /// Takes a piece of a frame's payload, masked with `mask` from offset
    /// `at`.
    fn take(&mut self, bytes: &[u8], mask: [u8; 4], at: u64, rules: Rules) -> Result<(), Refused> {
        #[cfg(feature = "ws-deflate")]
        if let Some(mut inflater) = self.inflater.take() {
            // Unmasked a piece at a time, and inflated into the message.
            let mut at = at;
            let mut piece = [0; 1024];
            for chunk in bytes.chunks(piece.len()) {
                let piece = &mut piece[..chunk.len()];
                piece.copy_from_slice(chunk);
                unmask(piece, mask, at);
                at += chunk.len() as u64;
                inflater.inflate(piece, &mut self.data, rules.message as usize)?;
                self.check_text(false)?;
            }
            self.inflater = Some(inflater);
            return Ok(());
        }
        let _ = rules;
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        unmask(&mut self.data[start..], mask, at);
        self.check_text(false)
    }

    /// Checks that a text message's bytes so far are UTF-8, or the start of
    /// a character at their end, unless `whole`.
    fn check_text(&mut self, whole: bool) -> Result<(), Refused> {
        if self.opcode != opcode::TEXT {
            return Ok(());
        }
        match std::str::from_utf8(&self.data[self.checked..]) {
            Ok(_) => self.checked = self.data.len(),
            Err(e) if e.error_len().is_none() && !whole => self.checked += e.valid_up_to(),
            Err(_) => return Err(Refused::invalid("text that is not UTF-8")),
        }
        Ok(())
    }

    /// The message's last frame came: the message.
    fn end(mut self, rules: Rules) -> Result<Message, Refused> {
        #[cfg(feature = "ws-deflate")]
        if let Some(mut inflater) = self.inflater.take() {
            inflater.finish(&mut self.data, rules.message as usize)?;
            inflater.give();
        }
        let _ = rules;
        self.check_text(true)?;
        if self.opcode == opcode::TEXT {
            // Checked above.
            let text = String::from_utf8(self.data)
                .map_err(|_| Refused::invalid("text that is not UTF-8"))?;
            Ok(Message::Text(text))
        } else {
            Ok(Message::Binary(Bytes::from(self.data)))
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
            let reason = std::str::from_utf8(reason)
                .map_err(|_| Refused::invalid("a close reason that is not UTF-8"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Rules = Rules {
        frame: 1 << 20,
        message: 1 << 21,
        inflate: false,
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
        // RFC 6455, 5.7: a masked "Hello".
        let hello = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        let text = Event::Message(Message::Text("Hello".into()));
        assert_eq!(read_all(&mut Reader::default(), &hello), Ok(vec![text]));
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
    }

    #[test]
    fn invalid_text_is_refused_at_its_first_invalid_byte() {
        let mask = [5, 6, 7, 8];
        // Autobahn 6.4.1: a valid fragment, then one with a code point
        // past U+10FFFF (F4 90 80 80), then a valid one that never comes.
        let mut input = client_frame(0x01, "κόσμε".as_bytes(), mask);
        input.extend(client_frame(0x00, &[0xF4, 0x90, 0x80, 0x80], mask));
        let mut reader = Reader::default();
        let refused = read_all(&mut reader, &input).unwrap_err();
        assert_eq!(refused.code, CloseCode::INVALID);
        // The same frame's payload in pieces: refused at its second byte,
        // F4 90 can start no character.
        let frame = client_frame(0x81, &[b'a', 0xF4, 0x90, 0x80, 0x80], mask);
        let mut reader = Reader::default();
        assert_eq!(read_all(&mut reader, &frame[..8]), Ok(vec![]));
        assert_eq!(
            read_all(&mut reader, &frame[8..9]).unwrap_err().code,
            CloseCode::INVALID
        );
        // A character cut by a fragment's end waits for its other bytes.
        let euro = "€".as_bytes();
        let mut input = client_frame(0x01, &euro[..1], mask);
        input.extend(client_frame(0x00, &euro[1..2], mask));
        input.extend(client_frame(0x80, &euro[2..], mask));
        assert_eq!(
            read_all(&mut Reader::default(), &input),
            Ok(vec![Event::Message(Message::Text("€".into()))])
        );
        // ... but not past the message's end.
        let cut = client_frame(0x81, &euro[..2], mask);
        assert_eq!(
            read_all(&mut Reader::default(), &cut).unwrap_err().code,
            CloseCode::INVALID
        );
    }

    #[test]
    fn a_closing_reader_skips_to_the_clients_close_frame() {
        let mask = [1, 1, 2, 3];
        // A frame refused on its header (1009): its payload is skipped,
        // and so is a data frame after it; the close frame is read.
        let mut input = client_frame(0x82, &vec![7; 5000], mask);
        input.extend(client_frame(0x81, b"more", mask));
        input.extend(client_frame(0x89, b"ping", mask));
        input.extend(client_frame(0x88, &1000u16.to_be_bytes(), mask));
        let rules = Rules {
            frame: 1000,
            ..LIMITS
        };
        for cut in [1, 7, 100, 4999, input.len() - 3] {
            // The first `cut` bytes at once, then one at a time.
            let pieces = std::iter::once(&input[..cut]).chain(input[cut..].chunks(1));
            let (mut reader, mut refused, mut events) = (Reader::default(), None, Vec::new());
            for mut piece in pieces {
                loop {
                    match reader.read(&mut piece, rules) {
                        Ok(None) => break,
                        Ok(Some(event)) => events.push(event),
                        Err(refusal) => {
                            assert!(refused.is_none(), "refused twice");
                            refused = Some(refusal);
                            reader.closing(Some(refusal));
                        }
                    }
                }
                assert!(reader.held() < 1024, "skipped, not kept");
            }
            assert_eq!(refused.map(|r| r.code), Some(CloseCode::SIZE));
            let close = CloseFrame {
                code: CloseCode::NORMAL,
                reason: String::new(),
            };
            // The data frame and the ping are skipped.
            assert_eq!(events, [Event::Close(Some(close))], "cut at {cut}");
        }
        // After a broken framing (1002), bytes are dropped to the end.
        let mut reader = Reader::default();
        let refused = read_all(&mut reader, &[0x81, 0x00]).unwrap_err();
        reader.closing(Some(refused));
        let close = client_frame(0x88, &[], mask);
        assert_eq!(read_all(&mut reader, &close), Ok(vec![]));
    }

    #[cfg(feature = "ws-deflate")]
    #[test]
    fn compressed_messages_inflate_in_pieces_and_stay_within_the_limit() {
        use super::super::deflate::compress;
        let rules = Rules {
            inflate: true,
            ..LIMITS
        };
        let mask = [3, 1, 4, 1];
        let text = "{\"event\":\"tick\",\"value\":42}".repeat(50);
        let deflated = compress(text.as_bytes(), <[u8]>::to_vec).unwrap();
        // RSV1 on the first of three fragments, a ping between two.
        let (a, rest) = deflated.split_at(deflated.len() / 3);
        let (b, c) = rest.split_at(rest.len() / 2);
        let mut input = client_frame(0x41, a, mask);
        input.extend(client_frame(0x00, b, mask));
        input.extend(client_frame(0x89, b"", mask));
        input.extend(client_frame(0x80, c, mask));
        let expected = vec![
            Event::Ping(Bytes::new()),
            Event::Message(Message::Text(text.clone())),
        ];
        let read = |input: &[u8], rules: Rules, one_by_one: bool| {
            let mut reader = Reader::default();
            let mut events = Vec::new();
            let size = if one_by_one { 1 } else { input.len() };
            for mut piece in input.chunks(size) {
                while let Some(event) = reader.read(&mut piece, rules)? {
                    events.push(event);
                }
            }
            Ok::<_, Refused>(events)
        };
        assert_eq!(read(&input, rules, false).as_ref(), Ok(&expected));
        assert_eq!(read(&input, rules, true).as_ref(), Ok(&expected));
        // Not negotiated, RSV1 is a reserved bit; on a continuation too.
        assert_eq!(
            read(&input, LIMITS, false).unwrap_err().code,
            CloseCode::PROTOCOL
        );
        let mut rsv1_later = client_frame(0x01, b"a", mask);
        rsv1_later.extend(client_frame(0xC0, b"b", mask));
        assert_eq!(
            read(&rsv1_later, rules, false).unwrap_err().code,
            CloseCode::PROTOCOL
        );
        // A small frame that inflates past the limit is refused before it
        // grows past it; the limit is the message's, inflated.
        let bomb = compress(&vec![b'a'; 1 << 20], <[u8]>::to_vec).unwrap();
        let small = Rules {
            message: 64 * 1024,
            ..rules
        };
        let mut reader = Reader::default();
        let mut input = &client_frame(0xC1, &bomb, mask)[..];
        let mut refused = None;
        while !input.is_empty() {
            match reader.read(&mut input, small) {
                Ok(_) => {}
                Err(r) => {
                    refused = Some(r);
                    break;
                }
            }
            assert!(reader.held() <= 64 * 1024 + 4096, "{}", reader.held());
        }
        assert_eq!(refused, Some(Refused::too_big()));
        // Compressed text is checked as it inflates.
        let bad = compress(
            &[b'x'; 200]
                .iter()
                .chain(&[0xFF])
                .copied()
                .collect::<Vec<_>>(),
            <[u8]>::to_vec,
        );
        let bad = bad.unwrap();
        assert_eq!(
            read(&client_frame(0xC1, &bad, mask), rules, false)
                .unwrap_err()
                .code,
            CloseCode::INVALID
        );
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

    const FUZZ: Rules = Rules {
        frame: 3000,
        message: 5000,
        inflate: false,
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
