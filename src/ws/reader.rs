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
use super::deflate::{Inflater, Uninflated};
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
    /// What was refused was the client's close frame: it will send no
    /// other.
    pub(crate) in_close: bool,
}

impl Refused {
    pub(crate) fn protocol(reason: &'static str) -> Refused {
        Refused {
            code: CloseCode::PROTOCOL,
            reason,
            in_close: false,
        }
    }

    pub(crate) fn invalid(reason: &'static str) -> Refused {
        Refused {
            code: CloseCode::INVALID,
            reason,
            in_close: false,
        }
    }

    pub(crate) fn too_big() -> Refused {
        Refused {
            code: CloseCode::SIZE,
            reason: "message too big",
            in_close: false,
        }
    }

    /// The refusal of a close frame.
    fn of_close(self) -> Refused {
        Refused {
            in_close: true,
            ..self
        }
    }
}

#[cfg(feature = "ws-deflate")]
impl From<Uninflated> for Refused {
    fn from(uninflated: Uninflated) -> Refused {
        match uninflated {
            Uninflated::TooBig => Refused::too_big(),
            Uninflated::Invalid => Refused::invalid("a compressed message that does not inflate"),
        }
    }
}

/// Reads frames from the bytes a client sends (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Reader {
    /// `None` between messages.
    partial: Option<Box<Partial>>,
    /// The server sent its close frame: only the client's matters now.
    closing: AfterClose,
}

/// What a reader does once the server has sent its close frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum AfterClose {
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
    /// Closing: the client is still sending the message the server
    /// refused; its frames are skipped until the last.
    skipping_message: bool,
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
    /// after it are skipped, their bytes kept nowhere (a message refused as
    /// too big, to its last frame: see [`in_refused_message`](Self::in_refused_message)).
    /// After `refused`, a refusal of the client's framing itself (1002), of
    /// its close frame, or of a frame whose payload had begun for another
    /// reason than its size (1007 at an invalid byte: a client that sees
    /// the close frame may cut that frame short), the frames can no longer
    /// be told apart: every byte is dropped until the connection ends.
    pub(crate) fn closing(&mut self, refused: Option<Refused>) {
        if self.closing == AfterClose::Drop {
            return;
        }
        let begun = (self.partial.as_ref())
            .and_then(|partial| partial.frame)
            .is_some_and(|frame| frame.read > 0 && frame.left > 0);
        // A message over the limit is skipped to its end (its client sends
        // it whole, whatever comes); anything else inside a frame is not.
        let framing_broken = refused.is_some_and(|refused| {
            refused.code == CloseCode::PROTOCOL
                || refused.in_close
                || (begun && refused.code != CloseCode::SIZE)
        });
        if framing_broken {
            self.closing = AfterClose::Drop;
            self.partial = None;
            return;
        }
        self.closing = AfterClose::Skip;
        if let Some(partial) = &mut self.partial {
            // A message refused for its size goes on: the rest of the frame
            // in flight, and the frames after it if it was not the last.
            let continues = match partial.frame.filter(|frame| !is_control(frame.opcode)) {
                Some(frame) => !frame.fin || frame.left > 0,
                None => partial.message.is_some(),
            };
            partial.skipping_message =
                refused.is_some_and(|refused| refused.code == CloseCode::SIZE) && continues;
            partial.message = None;
            if let Some(frame) = &mut partial.frame {
                frame.skipped = !is_control(frame.opcode);
            }
            if partial.is_idle() {
                self.partial = None;
            }
        }
    }

    /// Whether the client is still sending the message the server refused
    /// (closing): a browser that still sends when the close frame comes
    /// calls the close unclean, so the server sends it after the message.
    pub(crate) fn in_refused_message(&self) -> bool {
        self.partial
            .as_ref()
            .is_some_and(|partial| partial.skipping_message)
    }

    /// Whether the reader drops every byte (the client broke its framing):
    /// its close frame cannot be found.
    pub(crate) fn is_dropping(&self) -> bool {
        self.closing == AfterClose::Drop
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
        if self.closing == AfterClose::Drop {
            *input = &[];
            return Ok(None);
        }
        let closing = self.closing == AfterClose::Skip;
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
        self.have == 0 && self.frame.is_none() && self.message.is_none() && !self.skipping_message
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
                self.frame = Some(Incoming::skipped(opcode, header[0] & 0x80 != 0, len));
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
            if !is_control(frame.opcode) && frame.fin {
                self.skipping_message = false;
            }
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
                .map(Some)
                .map_err(Refused::of_close),
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
    fn skipped(opcode: u8, fin: bool, len: u64) -> Incoming {
        Incoming {
            opcode,
            fin,
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
                inflater
                    .inflate(piece, &mut self.data, rules.message as usize)
                    .map_err(Refused::from)?;
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
            inflater
                .finish(&mut self.data, rules.message as usize)
                .map_err(Refused::from)?;
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
mod tests;
