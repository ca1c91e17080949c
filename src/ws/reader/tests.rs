//! The reader against hand-made frames and generated streams cut at
//! random points (and byte by byte), for the same events whatever the cuts.

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
    // One frame each: (first byte, payload, the close code, why).
    let frames: [(u8, &[u8], CloseCode, &str); 9] = [
        (0xC1, b"x", CloseCode::PROTOCOL, "rsv1"),
        (0x83, b"x", CloseCode::PROTOCOL, "opcode 3"),
        (0x80, b"x", CloseCode::PROTOCOL, "lone continuation"),
        (0x09, b"x", CloseCode::PROTOCOL, "fragmented ping"),
        (0x89, &[0; 126], CloseCode::PROTOCOL, "long ping"),
        (0x81, &[0xFF], CloseCode::INVALID, "bad UTF-8"),
        (0x88, &[3], CloseCode::PROTOCOL, "1-byte close"),
        (0x88, &[3, 0xED], CloseCode::PROTOCOL, "close 1005"),
        (0x88, &[3, 0xE8, 0xFF], CloseCode::INVALID, "reason"),
    ];
    for (first, payload, expected, why) in frames {
        assert_eq!(code(&client_frame(first, payload, mask)), expected, "{why}");
    }
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
        assert!(
            !reader.in_refused_message(),
            "the refused frame was skipped"
        );
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
                    let noise: Vec<u8> = (0..1 + rng.below(20)).map(|_| rng.next() as u8).collect();
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

#[test]
fn a_refused_message_is_skipped_to_its_last_frame() {
    let mask = [2, 4, 6, 8];
    let rules = Rules {
        message: 100,
        ..LIMITS
    };
    // Three fragments of 60 bytes: the second takes it past 100 bytes.
    let mut input = client_frame(0x02, &[1; 60], mask);
    input.extend(client_frame(0x00, &[2; 60], mask));
    let third = client_frame(0x80, &[3; 60], mask);
    let mut reader = Reader::default();
    let mut piece = &input[..];
    let refused = match reader.read(&mut piece, rules) {
        Ok(read) => panic!("not refused: {read:?}"),
        Err(refused) => refused,
    };
    assert_eq!(refused.code, CloseCode::SIZE);
    reader.closing(Some(refused));
    assert!(
        reader.in_refused_message(),
        "at the second fragment's header"
    );
    assert_eq!(reader.read(&mut piece, rules), Ok(None));
    assert!(reader.in_refused_message(), "the third fragment to come");
    let mut last = &third[..third.len() - 1];
    assert_eq!(reader.read(&mut last, rules), Ok(None));
    assert!(reader.in_refused_message());
    let mut end = &third[third.len() - 1..];
    assert_eq!(reader.read(&mut end, rules), Ok(None));
    assert!(!reader.in_refused_message(), "the message is over");
    // What comes next is read: the client's close frame.
    let close = client_frame(0x88, &1000u16.to_be_bytes(), mask);
    let events = read_all(&mut reader, &close);
    assert!(matches!(events.as_deref(), Ok([Event::Close(Some(_))])));
}
