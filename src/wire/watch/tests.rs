use std::sync::Arc;

use super::*;

/// What a connection slept with: the client's defaults, its last stream
/// and both windows, nothing owed.
fn sleeping(last_stream: u32, recv_window: u32, send_window: u32) -> Asleep {
    Asleep {
        settings: Arc::default(),
        last_stream,
        recv_window,
        send_window,
        pings: 0,
        fence_early: false,
        table_size_owed: false,
    }
}

fn head(kind: u8, flags: u8, stream: u32, len: u32) -> Vec<u8> {
    Head {
        len,
        kind,
        flags,
        stream,
    }
    .bytes()
    .to_vec()
}

/// Passes client bytes through `watch` as a read would; what h2 gets.
fn read(watch: &mut Watch, bytes: &[u8]) -> Vec<u8> {
    let mut buf = vec![0; HELD + bytes.len()];
    buf[HELD..].copy_from_slice(bytes);
    let end = buf.len();
    let len = watch.inbound(&mut buf, HELD, end);
    buf.truncate(len);
    buf
}

fn client_start(watch: &mut Watch) {
    let mut bytes = frame::PREFACE.to_vec();
    frame::settings(&mut bytes, [(frame::HEADER_TABLE_SIZE, 8192), (4, 1 << 20)]);
    frame::window_update(&mut bytes, (16 << 20) - INITIAL_WINDOW);
    assert_eq!(
        read(watch, &bytes),
        bytes,
        "nothing of the start is removed"
    );
}

/// A request on `stream` with a body of `body` bytes, answered with
/// `answer` bytes.
fn exchange(watch: &mut Watch, stream: u32, body: u32, answer: u32) {
    let mut req = head(kind::HEADERS, flag::END_HEADERS, stream, 1);
    req.push(0x82);
    req.extend(head(kind::DATA, flag::END_STREAM, stream, body));
    req.extend(vec![0; body as usize]);
    read(watch, &req);
    assert!(!watch.quiet(), "a stream is open");
    let mut res = head(kind::HEADERS, flag::END_HEADERS, stream, 1);
    res.push(0x88);
    res.extend(head(kind::DATA, flag::END_STREAM, stream, answer));
    res.extend(vec![0; answer as usize]);
    // Written in two pieces, split inside a frame header.
    watch.outbound(&res[..12]);
    assert!(!watch.quiet(), "a frame is half-written");
    watch.outbound(&res[12..]);
}

#[test]
fn a_connection_sleeps_after_its_fence_with_its_windows() {
    let mut watch = Watch::new();
    client_start(&mut watch);
    let mut server_start = Vec::new();
    frame::settings(&mut server_start, [(4, 1 << 20)]);
    frame::window_update(&mut server_start, (1 << 20) - INITIAL_WINDOW);
    watch.outbound(&server_start);
    assert!(!watch.quiet(), "the server's SETTINGS is unacknowledged");
    read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
    exchange(&mut watch, 1, 1000, 5000);
    exchange(&mut watch, 3, 0, 70_000);
    assert!(watch.quiet());
    assert!(!watch.settled(), "the client's HPACK table is in use");
    let fence = watch.fence().expect("a fence");
    assert_eq!(watch.fence(), None, "one fence at a time");
    assert!(watch.quiet(), "the fence does not make it busy");
    assert!(!watch.settled());
    // The client's ACK of the fence is kept from h2.
    let ack = head(kind::SETTINGS, flag::ACK, 0, 0);
    assert_eq!(read(&mut watch, &ack), b"");
    assert!(watch.settled());
    assert_eq!(watch.fence(), None, "fenced already");
    let asleep = watch
        .asleep(1 << 20, &SettingsCache::default())
        .expect("asleep");
    assert_eq!(asleep.last_stream, 3);
    assert_eq!(asleep.send_window, (16 << 20) - 5000 - 70_000);
    assert_eq!(asleep.recv_window, (1 << 20) - 1000);
    assert_eq!(fence, [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
    // A fresh connection whose window is smaller than what the client
    // may send cannot take over.
    assert_eq!(
        watch.asleep(65_535, &SettingsCache::default()),
        Err(Decline::Window)
    );
}

/// hyper's adaptive window raises the streams' windows with a SETTINGS
/// frame of h2's mid-connection; a fresh connection would open with the
/// first ones and reject what the client may now send on a stream.
#[test]
fn a_connection_whose_server_changed_its_settings_declines() {
    let mut watch = Watch::new();
    client_start(&mut watch);
    let mut server_start = Vec::new();
    frame::settings(&mut server_start, [(4, INITIAL_WINDOW)]);
    watch.outbound(&server_start);
    read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
    exchange(&mut watch, 1, 60_000, 10);
    let mut raised = Vec::new();
    frame::settings(&mut raised, [(4, 120_000)]);
    watch.outbound(&raised);
    read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
    watch.fence().expect("a fence");
    read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
    assert!(watch.settled());
    assert!(
        watch.recv_window <= i64::from(INITIAL_WINDOW),
        "the connection window alone would not decline"
    );
    assert_eq!(
        watch.asleep(INITIAL_WINDOW, &SettingsCache::default()),
        Err(Decline::Window)
    );

    // A woken connection's first SETTINGS of h2 is already a change:
    // the one it opened with was removed (`Asleep::settle`).
    let asleep = sleeping(1, INITIAL_WINDOW, INITIAL_WINDOW);
    let mut woken = Watch::woken(&asleep);
    assert!(
        woken
            .asleep(INITIAL_WINDOW, &SettingsCache::default())
            .is_ok()
    );
    woken.outbound(&raised);
    read(&mut woken, &head(kind::SETTINGS, flag::ACK, 0, 0));
    assert_eq!(
        woken.asleep(INITIAL_WINDOW, &SettingsCache::default()),
        Err(Decline::Window)
    );
}

#[test]
fn a_woken_connection_needs_a_fence_only_after_a_reset_or_a_restore() {
    let asleep = sleeping(1, 1 << 20, 1 << 20);
    let mut watch = Watch::woken(&asleep);
    exchange(&mut watch, 3, 10, 10);
    assert!(watch.settled(), "the client's table is still empty");
    // The server answers stream 5 and resets it while the client still
    // sends its body: the client may send more before it reads that.
    let mut req = head(kind::HEADERS, flag::END_HEADERS, 5, 1);
    req.push(0x82);
    read(&mut watch, &req);
    let mut res = head(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 5, 1);
    res.push(0x88);
    res.extend(head(kind::RST_STREAM, 0, 5, 4));
    res.extend(0u32.to_be_bytes());
    watch.outbound(&res);
    assert!(watch.quiet());
    assert!(!watch.settled(), "frames of stream 5 may come late");
    watch.fence().expect("a fence");
    exchange(&mut watch, 7, 0, 0);
    read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
    assert!(watch.settled(), "the ACK came after stream 5's last frame");
    // A busy connection gets its table back, and then needs a fence.
    for stream in [9, 11, 13, 15] {
        assert_eq!(watch.restore(), None, "not busy yet");
        exchange(&mut watch, stream, 0, 0);
    }
    let restore = watch.restore().expect("busy: the table comes back");
    assert_eq!(restore, [0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 1, 0, 0, 16, 0]);
    assert_eq!(watch.restore(), None);
    assert!(!watch.settled(), "the restore is unacknowledged");
    assert_eq!(
        read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0)),
        b""
    );
    assert!(watch.quiet());
    assert!(watch.needs_fence(), "the client's table is in use");
}

#[test]
fn a_client_that_kept_the_initial_window_and_received_data_sleeps_gated() {
    let mut watch = Watch::new();
    let mut bytes = frame::PREFACE.to_vec();
    frame::settings(&mut bytes, []);
    read(&mut watch, &bytes);
    exchange(&mut watch, 1, 0, 100);
    watch.fence().unwrap();
    read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
    assert!(watch.settled());
    let asleep = watch.asleep(1 << 20, &SettingsCache::default()).unwrap();
    assert_eq!(asleep.send_window, INITIAL_WINDOW - 100);
    let woken = Watch::woken(&asleep);
    assert!(woken.gated());
    assert_eq!(woken.deficit, 100);
    // One that slept with its window whole needs no gate.
    let whole = Asleep {
        send_window: INITIAL_WINDOW,
        ..asleep
    };
    assert!(!Watch::woken(&whole).gated());
}

/// Routes what h2 writes, `chunks` at a time, through the gate.
fn route(watch: &mut Watch, bytes: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in bytes.chunks(chunk) {
        watch.route(piece, &mut out);
    }
    out
}

/// A woken connection whose client had granted 10 bytes: the gate
/// lets 10 bytes of DATA go (the frame cut there), holds the rest and
/// the frames after it (a stream-0 frame passes them), and lets them
/// go as the client's WINDOW_UPDATEs open the window; the part that
/// repays the deficit never reaches h2. Split anywhere, the same.
#[test]
fn the_gate_sends_no_more_than_the_client_granted() {
    let asleep = sleeping(1, INITIAL_WINDOW, 10);
    let mut h2 = frame_of(kind::HEADERS, flag::END_HEADERS, 3, &[0x88]);
    h2.extend(frame_of(kind::DATA, flag::END_STREAM, 3, &[7; 30]));
    h2.extend(frame_of(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        5,
        &[0x88],
    ));
    h2.extend(frame_of(kind::PING, flag::ACK, 0, b"pingpong"));
    let mut now = frame_of(kind::HEADERS, flag::END_HEADERS, 3, &[0x88]);
    now.extend(frame_of(kind::DATA, 0, 3, &[7; 10]));
    now.extend(frame_of(kind::PING, flag::ACK, 0, b"pingpong"));
    let update = |n: u32| frame_of(kind::WINDOW_UPDATE, 0, 0, &n.to_be_bytes());
    for chunk in 1..=h2.len() {
        let mut watch = Watch::woken(&asleep);
        for stream in [3, 5] {
            read(
                &mut watch,
                &frame_of(
                    kind::HEADERS,
                    flag::END_HEADERS | flag::END_STREAM,
                    stream,
                    &[0x82],
                ),
            );
        }
        assert_eq!(route(&mut watch, &h2, chunk), now, "chunks of {chunk}");
        assert!(!watch.quiet(), "frames are held");
        // 5 bytes: all of them repay the deficit; h2 gets nothing.
        assert_eq!(read(&mut watch, &update(5)), b"");
        let mut out = Vec::new();
        watch.release(&mut out);
        assert_eq!(out, frame_of(kind::DATA, 0, 3, &[7; 5]));
        // 65,530: the rest of the deficit (65,520), and 10 for h2.
        assert_eq!(read(&mut watch, &update(65_530)), update(10));
        let mut out = Vec::new();
        watch.release(&mut out);
        let mut rest = frame_of(kind::DATA, flag::END_STREAM, 3, &[7; 15]);
        rest.extend(frame_of(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            5,
            &[0x88],
        ));
        assert_eq!(out, rest);
        assert_eq!(watch.send_window, 65_530 - 15);
        assert!(!watch.gated(), "repaid, nothing held: no gate");
        assert!(watch.quiet());
    }
}

/// An increment of 0 reaches h2 (an error h2 reports), as does the
/// part of an increment beyond the deficit, whatever the split.
#[test]
fn window_updates_repay_the_deficit_first() {
    let asleep = sleeping(1, INITIAL_WINDOW, INITIAL_WINDOW - 1_000);
    let update = |n: u32| frame_of(kind::WINDOW_UPDATE, 0, 0, &n.to_be_bytes());
    let zero = update(0);
    assert_eq!(read_split(&asleep, &zero), (zero.clone(), vec![]));
    let bytes = [update(600), update(700), update(50)].concat();
    let to_h2 = [update(300), update(50)].concat();
    assert_eq!(read_split(&asleep, &bytes), (to_h2, vec![]));
    let mut watch = Watch::woken(&asleep);
    read(&mut watch, &bytes);
    assert_eq!(watch.deficit, 0);
    assert_eq!(watch.send_window, i64::from(INITIAL_WINDOW) + 350);
    assert!(watch.gated(), "dropped at its next use");
    watch.release(&mut Vec::new());
    assert!(!watch.gated());
}

#[test]
fn pings_and_goaway_keep_it_awake() {
    let mut watch = Watch::new();
    client_start(&mut watch);
    let mut ping = head(kind::PING, 0, 0, 8);
    ping.extend([0; 8]);
    read(&mut watch, &ping);
    assert!(!watch.quiet(), "the client's PING is unanswered");
    let mut pong = head(kind::PING, flag::ACK, 0, 8);
    pong.extend([0; 8]);
    watch.outbound(&pong);
    assert!(watch.quiet());
    let mut goaway = Vec::new();
    frame::goaway(&mut goaway, 0);
    read(&mut watch, &goaway);
    assert!(!watch.quiet(), "the client is going away");
}

/// A woken connection: what its fresh h2 reads first, how its answer
/// is settled, and which client frames it never sees.
#[test]
fn a_woken_connection_is_brought_to_where_it_slept() {
    let asleep = Asleep {
        settings: {
            let mut s = Settings::default();
            s.set(frame::HEADER_TABLE_SIZE, 8192);
            s.set(4, 1 << 20);
            Arc::new(s)
        },
        ..sleeping(7, 900_000, 2_000_000)
    };
    let mut expected = frame::PREFACE.to_vec();
    frame::settings(&mut expected, [(1, 8192), (4, 1 << 20)]);
    frame::settings_ack(&mut expected);
    frame::window_update(&mut expected, 2_000_000 - INITIAL_WINDOW);
    assert_eq!(asleep.prelude(), expected);
    // A client whose decoder is owed a size update: 0, then its own
    // (HPACK's default if it never sent one).
    let mut defaults = Settings::default();
    defaults.set(3, 100);
    let mut expected = frame::PREFACE.to_vec();
    frame::settings(&mut expected, [(1, 0)]);
    frame::settings(&mut expected, [(1, 4096), (3, 100)]);
    frame::settings_ack(&mut expected);
    let owed = Asleep {
        settings: Arc::new(defaults),
        table_size_owed: true,
        ..sleeping(7, 900_000, INITIAL_WINDOW)
    };
    assert_eq!(owed.prelude(), expected);

    // The fresh connection's answer: its SETTINGS, its ACK of the
    // replayed ones (two ACKs for two frames), its WINDOW_UPDATE up to
    // 1 MiB.
    let mut answer = Vec::new();
    frame::settings(&mut answer, [(1, 4096), (4, 1 << 20)]);
    frame::settings_ack(&mut answer);
    frame::window_update(&mut answer, (1 << 20) - INITIAL_WINDOW);
    let mut settled = Vec::new();
    frame::window_update(&mut settled, (1 << 20) - 900_000);
    assert_eq!(asleep.settle(&answer).unwrap(), settled);
    let mut answer = Vec::new();
    frame::settings(&mut answer, [(1, 4096), (4, 1 << 20)]);
    frame::settings_ack(&mut answer);
    frame::settings_ack(&mut answer);
    frame::window_update(&mut answer, (1 << 20) - INITIAL_WINDOW);
    assert_eq!(owed.settle(&answer).unwrap(), settled);
    // A fresh connection that grants less than the client has.
    let mut small = Vec::new();
    frame::settings_ack(&mut small);
    assert!(asleep.settle(&small).is_err());

    let mut watch = Watch::woken(&asleep);
    watch.outbound(&settled);
    assert!(watch.settled(), "the client's table is still empty");
    // Frames on streams the fresh connection never saw that h2 would
    // ignore are removed, the others pass.
    let mut late = head(kind::WINDOW_UPDATE, 0, 5, 4);
    late.extend(1000u32.to_be_bytes());
    let mut reset = head(kind::RST_STREAM, 0, 7, 4);
    reset.extend(8u32.to_be_bytes());
    let mut next = head(kind::HEADERS, flag::END_HEADERS | flag::END_STREAM, 9, 1);
    next.push(0x82);
    let bytes = [late, reset, next.clone()].concat();
    for split in 1..bytes.len() {
        let mut w = Watch::woken(&asleep);
        let mut got = read(&mut w, &bytes[..split]);
        got.extend(read(&mut w, &bytes[split..]));
        assert_eq!(got, next, "split at {split}");
    }
    assert_eq!(read(&mut watch, &bytes), next);
    assert!(!watch.quiet(), "stream 9 is open");
}

/// A woken connection's GOAWAY names at least the last stream of
/// before the sleep (the fresh h2 knows only those since the wake).
#[test]
fn a_woken_connections_goaway_counts_the_streams_before_the_sleep() {
    let mut pong = Vec::new();
    frame::settings_ack(&mut pong);
    let mut goaway = Vec::new();
    frame::goaway(&mut goaway, 0);
    let bytes = [pong.clone(), goaway.clone()].concat();
    assert_eq!(Watch::new().goaway_field_at(&bytes), None, "never slept");
    let asleep = sleeping(45, INITIAL_WINDOW, INITIAL_WINDOW);
    let mut watch = Watch::woken(&asleep);
    let at = HEAD_LEN * 2;
    assert_eq!(watch.goaway_field_at(&bytes), Some(at));
    assert!(watch.goaway_in([&bytes[..3], &bytes[3..]]));
    // Across a split: the field is found where the next write begins.
    watch.outbound(&bytes[..at]);
    assert_eq!(watch.goaway_field_at(&bytes[at..]), Some(0));
    let mut field = [0; 4];
    watch.raise_goaway(&mut field);
    assert_eq!(field, 45u32.to_be_bytes());
    let mut later = 47u32.to_be_bytes();
    watch.raise_goaway(&mut later);
    assert_eq!(later, 47u32.to_be_bytes(), "a stream since the wake");
    watch.outbound(&field);
    assert_eq!(watch.goaway_field_at(&bytes[at + 4..]), None);
}

/// The ACKs of the lot's keep-alive PINGs never reach h2; later ones,
/// and the client's own PINGs, do.
#[test]
fn the_ack_of_a_ping_sent_while_asleep_is_kept_from_h2() {
    let mut asleep = sleeping(1, INITIAL_WINDOW, INITIAL_WINDOW);
    let ping = asleep.keep_alive_ping();
    assert_eq!(
        ping,
        [&[0, 0, 8, 6, 0, 0, 0, 0, 0][..], b"dormant!"].concat()
    );
    let ack = |payload: &[u8; 8]| [&head(kind::PING, flag::ACK, 0, 8)[..], payload].concat();
    let client_ping = [&head(kind::PING, 0, 0, 8)[..], b"client!!"].concat();
    let bytes = [ack(b"dormant!"), client_ping.clone()].concat();
    for split in 1..bytes.len() {
        let mut watch = Watch::woken(&asleep);
        let mut got = read(&mut watch, &bytes[..split]);
        got.extend(read(&mut watch, &bytes[split..]));
        assert_eq!(got, client_ping, "split at {split}");
    }
    // Slept again before the ACK came: it is kept from the next one.
    let again = Watch::woken(&asleep)
        .asleep(INITIAL_WINDOW, &SettingsCache::default())
        .unwrap();
    let mut watch = Watch::woken(&again);
    assert!(read(&mut watch, &ack(b"dormant!")).is_empty());
    // One nothing of the lot's asked for is h2's business.
    let stray = ack(b"strayack");
    assert_eq!(read(&mut watch, &stray), stray);
}

/// Passes `bytes` through a fresh watch of `asleep` split at every
/// place; what h2 gets and what dormant replies, the same for each.
fn read_split(asleep: &Asleep, bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut whole = Watch::woken(asleep);
    let want = (read(&mut whole, bytes), whole.replies().unwrap_or_default());
    for split in 1..bytes.len() {
        let mut w = Watch::woken(asleep);
        let mut got = read(&mut w, &bytes[..split]);
        got.extend(read(&mut w, &bytes[split..]));
        let got = (got, w.replies().unwrap_or_default());
        assert_eq!(got, want, "split at {split}");
    }
    want
}

fn frame_of(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame::append(&mut out, kind, flags, stream, payload);
    out
}

/// Frames on the streams closed before a sleep, which the fresh
/// connection never knew, get what h2 answers on a closed stream: the
/// frames it ignores are removed or disguised, the errors it reports
/// reach it as they are, and DATA is answered by dormant.
#[test]
fn frames_on_streams_from_before_the_sleep_are_answered_as_on_closed_streams() {
    let asleep = sleeping(3, INITIAL_WINDOW, INITIAL_WINDOW);
    let unchanged = |bytes: Vec<u8>| {
        assert_eq!(read_split(&asleep, &bytes), (bytes.clone(), vec![]));
    };
    // A HEADERS reusing an id reaches h2 on stream 0: a connection
    // error, as reusing an id is.
    let reuse = frame_of(kind::HEADERS, flag::END_HEADERS, 1, &[0x82]);
    let to_h2 = frame_of(kind::HEADERS, flag::END_HEADERS, 0, &[0x82]);
    assert_eq!(read_split(&asleep, &reuse), (to_h2, vec![]));
    // DATA: STREAM_CLOSED and its window back, once per stream; h2
    // gets it as a frame of an ignored type.
    let data = frame_of(kind::DATA, 0, 1, b"hello");
    let data2 = frame_of(kind::DATA, flag::END_STREAM, 1, b"again!");
    let data3 = frame_of(kind::DATA, flag::PADDED, 3, &[2, b'x', 0, 0]);
    let bytes = [data, data2, data3].concat();
    let mut to_h2 = bytes.clone();
    for at in [0, HEAD_LEN + 5, 2 * HEAD_LEN + 11] {
        to_h2[at + 3] = kind::IGNORED;
    }
    let mut replies = Vec::new();
    frame::rst_stream(&mut replies, 1, frame::STREAM_CLOSED);
    frame::window_update(&mut replies, 5);
    frame::window_update(&mut replies, 6);
    frame::rst_stream(&mut replies, 3, frame::STREAM_CLOSED);
    frame::window_update(&mut replies, 4);
    assert_eq!(read_split(&asleep, &bytes), (to_h2, replies));
    let mut watch = Watch::woken(&asleep);
    read(&mut watch, &frame_of(kind::DATA, 0, 1, b"hello"));
    assert!(!watch.quiet(), "a reply is unwritten");
    assert!(watch.replies().is_some());
    assert!(watch.quiet());
    assert_eq!(watch.recv_window, i64::from(INITIAL_WINDOW), "given back");
    // Well-formed RST_STREAM and WINDOW_UPDATE frames: ignored.
    let reset = frame_of(kind::RST_STREAM, 0, 1, &8u32.to_be_bytes());
    let update = frame_of(kind::WINDOW_UPDATE, 0, 3, &1000u32.to_be_bytes());
    assert_eq!(
        read_split(&asleep, &[reset, update].concat()),
        (vec![], vec![])
    );
    // What h2 refuses reaches it: an increment of 0, frames of the
    // wrong length, too much padding.
    unchanged(frame_of(kind::WINDOW_UPDATE, 0, 1, &[0x80, 0, 0, 0]));
    unchanged(frame_of(kind::WINDOW_UPDATE, 0, 1, &[0; 8]));
    unchanged(frame_of(kind::RST_STREAM, 0, 1, &[0; 3]));
    unchanged(frame_of(kind::DATA, flag::PADDED, 1, &[3, 0, 0]));
    unchanged(frame_of(kind::DATA, flag::PADDED, 1, &[]));
    // So does a frame on the server's ids, which h2 answers the same.
    unchanged(frame_of(kind::WINDOW_UPDATE, 0, 2, &1u32.to_be_bytes()));
    // And on the streams opened since the wake.
    unchanged(frame_of(kind::HEADERS, flag::END_HEADERS, 5, &[0x82]));
}

/// ACKs are told apart by payload, whatever their order: the lot's
/// keep-alive PING's never reaches h2, h2's own always does.
#[test]
fn ping_acks_are_told_apart_by_payload() {
    let asleep = Asleep {
        pings: 1,
        ..sleeping(1, INITIAL_WINDOW, INITIAL_WINDOW)
    };
    let h2s = frame_of(kind::PING, flag::ACK, 0, &[0x3b; 8]);
    let lots = frame_of(kind::PING, flag::ACK, 0, &frame::KEEP_ALIVE_PING);
    for bytes in [[&h2s[..], &lots].concat(), [&lots[..], &h2s].concat()] {
        assert_eq!(read_split(&asleep, &bytes), (h2s.clone(), vec![]));
        let mut watch = Watch::woken(&asleep);
        watch.outbound(&frame_of(kind::PING, 0, 0, &[0x3b; 8]));
        assert!(!watch.quiet(), "h2's PING is out");
        read(&mut watch, &bytes);
        assert!(watch.quiet());
        assert_eq!(watch.lot_pings, 0);
    }
}

/// A client that changes its header table size is owed a size update
/// until the server's next header block, across sleeps too.
#[test]
fn a_table_size_change_is_owed_until_the_next_header_block() {
    let mut watch = Watch::new();
    client_start(&mut watch);
    assert!(watch.table_size_owed, "the client's first SETTINGS set one");
    exchange(&mut watch, 1, 0, 10);
    assert!(!watch.table_size_owed, "the response's block paid it");
    let mut change = Vec::new();
    frame::settings(&mut change, [(frame::HEADER_TABLE_SIZE, 0)]);
    frame::settings(&mut change, [(frame::HEADER_TABLE_SIZE, 4096)]);
    read(&mut watch, &change);
    let ack = frame_of(kind::SETTINGS, flag::ACK, 0, &[]);
    watch.outbound(&[ack.clone(), ack].concat());
    watch.fence().expect("a fence");
    read(&mut watch, &head(kind::SETTINGS, flag::ACK, 0, 0));
    let asleep = watch.asleep(1 << 20, &SettingsCache::default()).unwrap();
    assert!(asleep.table_size_owed);
    // Woken and asleep again before a block: still owed.
    let again = Watch::woken(&asleep)
        .asleep(1 << 20, &SettingsCache::default())
        .unwrap();
    assert!(again.table_size_owed);
    let mut woken = Watch::woken(&again);
    exchange(&mut woken, 3, 0, 10);
    assert!(!woken.table_size_owed);
}

/// A sleeping connection answers PINGs, and takes the ACKs of the
/// keep-alive PINGs sent while asleep, where it sleeps; anything else,
/// or part of a frame, wakes it.
#[test]
fn pings_and_their_acks_are_answered_asleep() {
    let mut asleep = sleeping(1, INITIAL_WINDOW, INITIAL_WINDOW);
    let ping = frame_of(kind::PING, 0, 0, b"client!!");
    let ours = frame_of(kind::PING, flag::ACK, 0, &frame::KEEP_ALIVE_PING);
    let mut reply = Vec::new();
    assert_eq!(
        asleep.answer(&[ping.clone(), ping.clone()].concat(), &mut reply),
        Some(0)
    );
    let pong = frame_of(kind::PING, flag::ACK, 0, b"client!!");
    assert_eq!(reply, [pong.clone(), pong.clone()].concat());
    // An ACK of a PING the lot did not send is h2's business.
    assert_eq!(asleep.answer(&ours, &mut Vec::new()), None);
    asleep.keep_alive_ping();
    let mut reply = Vec::new();
    let both = [ours.clone(), ping.clone()].concat();
    assert_eq!(asleep.answer(&both, &mut reply), Some(1));
    assert_eq!(reply, pong);
    assert_eq!(asleep.pings, 1, "noted only once answered");
    asleep.answered(1);
    assert_eq!(asleep.pings, 0);
    // What needs h2 wakes it.
    let wakes = [
        ping[..10].to_vec(),
        [
            ping.clone(),
            frame_of(kind::HEADERS, flag::END_HEADERS, 3, &[0x82]),
        ]
        .concat(),
        frame_of(kind::PING, flag::ACK, 0, b"h2's ack"),
        frame_of(kind::PING, 0, 0, b"longer ping"),
        frame_of(kind::PING, 0, 1, b"stream 1"),
        frame_of(kind::SETTINGS, flag::ACK, 0, &[]),
    ];
    for bytes in wakes {
        assert_eq!(asleep.answer(&bytes, &mut Vec::new()), None, "{bytes:?}");
    }
}
