//! Differential test of HTTP/2 sleep, over every transport: the same
//! scripted conversation (frames written by hand, responses decoded with
//! the tests' own HPACK decoder) against plain hyper's HTTP/2 server and
//! against dormant, whose connection sleeps in every pause of the script
//! (PARKED and DORMANT in turn). The decoded responses must be equal
//! (status, headers but `date`, body, trailers), each stream must carry
//! the same frames, and the connection the same frames but for the
//! SETTINGS a sleep needs: the *fence* (`SETTINGS_HEADER_TABLE_SIZE = 0`)
//! and the *restore* (back to 4,096), in that order.
//!
//! The scripts: requests with bodies both ways from 0 B to 300 KB (past
//! the 65,535-byte windows), six streams at once, a HEAD, request and
//! response trailers, a 404, a ~3 KB cookie on every request (so that the
//! client's dynamic table is filled and reused: it encodes literals with
//! incremental indexing), client PINGs and SETTINGS changes (awake, and as
//! the step that wakes a sleeping connection), and a GOAWAY; by clients
//! with h2's defaults, a browser's settings, and a small header table.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::time::Duration;

use crate::common::h2_raw::{
    ACK, Frame, GOAWAY, NO_ERROR, PING, RST_STREAM, RawClient, SETTINGS, frame, get_frame,
};
use crate::common::h2_script::{
    Client, DATA, HEADER_TABLE_SIZE, INITIAL_WINDOW_SIZE, Profile, Received, Request, WINDOW_UPDATE,
};
use crate::common::hpack::Field;
use crate::common::hyper::Protocol;
use crate::common::ladder::ladder;
use crate::common::reference::Reference;
use crate::common::rungs::{DORMANT_AFTER, all_closed, client_runtime, sleep_until, woke};
use crate::common::servers::Serve;
use crate::common::services::pattern;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung;
use dormant::Stats;
use http::{HeaderMap, HeaderValue, Response};
use http_body_util::combinators::WithTrailers;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::time::timeout;

over_every_transport!(
    a_default_client_sees_what_plain_hyper_sends,
    a_browser_like_client_sees_what_plain_hyper_sends,
    a_small_header_table_client_sees_what_plain_hyper_sends,
    the_goaway_answering_a_clients_after_a_wake_names_the_last_stream,
    a_header_table_lowered_and_raised_before_a_sleep_is_announced_after_it,
    frames_on_streams_from_before_a_sleep_get_what_plain_hyper_answers,
);

fn a_default_client_sees_what_plain_hyper_sends<T: Reference>() {
    differential::<T>(Profile {
        settings: vec![],
        connection_window: 0,
    });
}

/// Chrome's settings: a 64 KiB header table, no push, 6 MiB stream
/// windows, and a 15 MiB connection window.
fn a_browser_like_client_sees_what_plain_hyper_sends<T: Reference>() {
    differential::<T>(Profile {
        settings: vec![
            (HEADER_TABLE_SIZE, 65_536),
            (0x2, 0),
            (INITIAL_WINDOW_SIZE, 6 << 20),
            (0x6, 262_144),
        ],
        connection_window: (15 << 20) + 1,
    });
}

/// A 512-byte header table: the cookie never enters the server's table,
/// and it evicts all the time.
fn a_small_header_table_client_sees_what_plain_hyper_sends<T: Reference>() {
    differential::<T>(Profile {
        settings: vec![(HEADER_TABLE_SIZE, 512)],
        connection_window: 0,
    });
}

/// The smallest case of the differences the conversations above found: a
/// client's GOAWAY to a sleeping connection wakes it, and the server's
/// GOAWAY in answer must name the last stream the connection processed
/// (stream 1), as plain hyper's does (RFC 9113, 6.8); a woken connection
/// is a fresh h2 connection, which processed none, and says 0.
fn the_goaway_answering_a_clients_after_a_wake_names_the_last_stream<T: Reference>() {
    let plain = T::serve_reference(Protocol::Http2, answer::<hyper::body::Incoming>);
    let srv = T::serve(&ladder(None), service_fn(answer::<dormant::Body>));
    client_runtime().block_on(async {
        for dormant in [None, Some(&srv)] {
            let addr = dormant.map_or(&plain.addr, |srv| &srv.addr);
            let before = srv.stats();
            let mut client = RawClient::start(T::connect_h2(addr).await.into_inner()).await;
            client.get(1).await;
            if let Some(srv) = dormant {
                sleep_until(srv, Rung::Parked, before);
            }
            client.go_away().await;
            let frames = client.until_closed().await;
            let who = if dormant.is_some() {
                "dormant"
            } else {
                "plain hyper"
            };
            let goaway = frames.iter().find(|f| f.kind == GOAWAY);
            let goaway = goaway.unwrap_or_else(|| panic!("{who}: no GOAWAY in {frames:?}"));
            assert_eq!(goaway.error_code(), NO_ERROR, "{who}");
            assert_eq!(goaway.payload[..4], [0, 0, 0, 1], "{who}: {frames:?}");
        }
    });
}

/// The client lowers its header table size to 0 and raises it again
/// before the server's next header block, and the connection sleeps
/// there. The server's encoder owes the client's decoder a size update to
/// 0 (RFC 7541, 4.2; nghttp2's decoder, as the tests' own, empties its
/// table at the ACK), which plain hyper sends at its next block; after
/// the wake, dormant's fresh encoder must send it too.
fn a_header_table_lowered_and_raised_before_a_sleep_is_announced_after_it<T: Reference>() {
    use Step::*;
    let script = [
        Requests(vec![get("/bytes/10", 0), get("/bytes/11", 0)]),
        Settings(vec![(HEADER_TABLE_SIZE, 0)]),
        Settings(vec![(HEADER_TABLE_SIZE, 4_096)]),
        Pause,
        Requests(vec![get("/bytes/20", 1), get("/bytes/21", 1)]),
        Settings(vec![(HEADER_TABLE_SIZE, 100)]),
        Settings(vec![(HEADER_TABLE_SIZE, 2_000)]),
        Pause,
        Requests(vec![get("/bytes/30", 2)]),
        Pause,
        Requests(vec![get("/missing", 3)]),
    ];
    let profile = Profile {
        settings: vec![],
        connection_window: 0,
    };
    let plain = T::serve_reference(Protocol::Http2, answer::<hyper::body::Incoming>);
    let srv = T::serve(&ladder(DORMANT_AFTER), service_fn(answer::<dormant::Body>));
    let rt = client_runtime();
    let (want, _) = rt.block_on(converse::<T>(&plain.addr, &profile, &script, None));
    let (got, pauses) = rt.block_on(converse::<T>(&srv.addr, &profile, &script, Some(&srv)));
    assert_eq!(pauses, [2, 1]);
    assert_eq!(want.error, None, "plain hyper's conversation");
    assert_eq!(got.error, None, "dormant's conversation");
    assert_eq!(want.streams.len(), 6);
    assert_same_streams(&want, &got);
}

/// After two requests and a sleep, frames on the streams closed before it
/// get what plain hyper answers (RFC 9113, 5.1): a HEADERS reusing an id is
/// a connection error, DATA gets RST_STREAM (STREAM_CLOSED), a well-formed
/// RST_STREAM or WINDOW_UPDATE is ignored, and the frame errors h2 checks
/// before it looks the stream up (an increment of 0, a wrong length, a
/// length beyond SETTINGS_MAX_FRAME_SIZE) end the connection the same
/// way. Each probe is followed by two PINGs in turn; what the server sent
/// until the second's ACK, or its close, is compared (but its SETTINGS,
/// and connection WINDOW_UPDATEs, which a wake times differently).
fn frames_on_streams_from_before_a_sleep_get_what_plain_hyper_answers<T: Reference>() {
    // A WINDOW_UPDATE's header announcing `len` bytes, and none of them: the
    // length alone is the error, and the server closes with no unread
    // byte (which could reset the connection before the client reads the
    // GOAWAY).
    let announcing = |len: u32| {
        let mut head = frame(WINDOW_UPDATE, 0, 1, &[]);
        head[..3].copy_from_slice(&len.to_be_bytes()[1..]);
        head
    };
    let probes: Vec<(&str, Vec<u8>)> = vec![
        ("HEADERS reusing stream 1", get_frame(1, "/")),
        ("HEADERS reusing stream 3", get_frame(3, "/")),
        ("DATA on stream 1", frame(DATA, 0, 1, b"late")),
        ("DATA on stream 3 twice", {
            let mut twice = frame(DATA, 0, 3, b"late");
            twice.extend(frame(DATA, 0x1, 3, b""));
            twice
        }),
        (
            "padded DATA on stream 1",
            frame(DATA, 0x8, 1, &[2, b'x', 0, 0]),
        ),
        (
            "WINDOW_UPDATE of 0 on stream 1",
            frame(WINDOW_UPDATE, 0, 1, &[0; 4]),
        ),
        (
            "WINDOW_UPDATE on stream 3",
            frame(WINDOW_UPDATE, 0, 3, &[0, 0, 1, 0]),
        ),
        (
            "RST_STREAM on stream 1",
            frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]),
        ),
        (
            "RST_STREAM of 3 bytes on stream 1",
            frame(RST_STREAM, 0, 1, &[0; 3]),
        ),
        (
            "WINDOW_UPDATE of 8 bytes on stream 1",
            frame(WINDOW_UPDATE, 0, 1, &[1; 8]),
        ),
        ("WINDOW_UPDATE of 64 KiB on stream 1", announcing(1 << 16)),
        (
            "WINDOW_UPDATE of 16 MiB on stream 1",
            announcing((1 << 24) - 1),
        ),
        ("HEADERS on stream 5, a new one", get_frame(5, "/")),
    ];
    let plain = T::serve_reference(Protocol::Http2, answer::<hyper::body::Incoming>);
    let srv = T::serve(&ladder(DORMANT_AFTER), service_fn(answer::<dormant::Body>));
    client_runtime().block_on(async {
        for (i, (what, probe)) in probes.iter().enumerate() {
            let rung = [Rung::Parked, Rung::Dormant][i % 2];
            let mut seen = Vec::new();
            for dormant in [None, Some(&srv)] {
                let addr = dormant.map_or(&plain.addr, |srv| &srv.addr);
                let before = srv.stats();
                let mut client = RawClient::start(T::connect_h2(addr).await.into_inner()).await;
                client.get(1).await;
                client.get(3).await;
                match dormant {
                    Some(srv) => {
                        sleep_until(srv, rung, before);
                    }
                    None => tokio::time::sleep(Duration::from_millis(10)).await,
                }
                client.send(probe).await;
                seen.push(answers(&mut client).await);
                drop(client);
                if dormant.is_some() {
                    all_closed(&srv);
                }
            }
            assert_eq!(
                seen[1], seen[0],
                "{what}, from {rung:?}: dormant, then plain hyper"
            );
        }
    });
}

/// What the server sends after a probe, as [`Answer`]s, sorted (a reply
/// dormant writes may come before or after h2's ACK of the first PING),
/// until the ACK of a second PING sent after the first's, or the end of the
/// connection.
async fn answers(client: &mut RawClient) -> Vec<Answer> {
    let mut seen = Vec::new();
    for payload in [*b"probe #1", *b"probe #2"] {
        // The server may have closed the connection already.
        let _ = client.try_send(&frame(PING, 0, 0, &payload)).await;
        loop {
            let Some(f) = client.next().await else {
                seen.push(Answer::Closed);
                seen.sort();
                return seen;
            };
            let acked = (f.kind, f.flags, &f.payload[..]) == (PING, ACK, &payload[..]);
            match (f.kind, f.stream) {
                (SETTINGS, _) | (WINDOW_UPDATE, 0) => {}
                (GOAWAY | RST_STREAM, _) => {
                    seen.push(Answer::Frame(f.kind, f.stream, f.payload[..].to_vec()))
                }
                (PING, _) if acked => break,
                (kind, stream) => seen.push(Answer::Frame(kind, stream, vec![f.flags])),
            }
        }
    }
    seen.sort();
    seen
}

/// A frame the server sent after a probe: its type, stream, and payload
/// (RST_STREAM, GOAWAY) or flags; or the end of the connection.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Answer {
    Frame(u8, u32, Vec<u8>),
    Closed,
}

// ---- the service, the same code on both servers ----

type Reply = WithTrailers<Full<Bytes>, Ready<Option<Result<HeaderMap, Infallible>>>>;

/// Answers `/bytes/N` with `N` bytes of [`pattern`], `/missing` with a
/// `404`, anything else with the request's body; with an `x-request`
/// header describing the request, its `x-` headers and its `cookie` (as
/// `x-cookie`) copied back, and, if the request had trailers, its trailers
/// back as trailers with `x-body-len`.
async fn answer<B>(req: http::Request<B>) -> Result<Response<Reply>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let (parts, body) = req.into_parts();
    let (body, trailers) = match body.collect().await {
        Ok(c) => {
            let trailers = c.trailers().cloned();
            (c.to_bytes(), trailers)
        }
        Err(e) => (Bytes::from(format!("error: {e}")), None),
    };
    let path = parts.uri.path();
    let (status, out) = match path.strip_prefix("/bytes/") {
        Some(len) => (
            200,
            pattern(len.parse().expect("/bytes/ takes a length"), 0),
        ),
        None if path == "/missing" => (404, Bytes::from_static(b"no such thing")),
        None => (200, body.clone()),
    };
    let mut res = Response::builder().status(status).header(
        "x-request",
        format!("{} {path} body={}", parts.method, body.len()),
    );
    for (name, value) in &parts.headers {
        match name.as_str() {
            "cookie" => res = res.header("x-cookie", value),
            n if n.starts_with("x-") => res = res.header(name, value),
            _ => {}
        }
    }
    let trailers = trailers.map(|mut t| {
        t.insert("x-body-len", HeaderValue::from(body.len()));
        Ok(t)
    });
    Ok(res
        .body(Full::new(out).with_trailers(ready(trailers)))
        .unwrap())
}

// ---- the scripts ----

/// A step of a conversation.
enum Step {
    /// Requests sent at once, each on its stream, all answered before the
    /// next step.
    Requests(Vec<Request>),
    Ping([u8; 8]),
    Settings(Vec<(u16, u32)>),
    /// The client idle: dormant's connection sleeps (PARKED and DORMANT in
    /// turn); the step after it must wake it.
    Pause,
}

/// The conversation every client has, ended by a GOAWAY after a last
/// pause.
fn script() -> Vec<Step> {
    use Step::*;
    vec![
        Requests(vec![
            get("/bytes/0", 0),
            get("/bytes/100", 0),
            post("/echo", 1_000, 0),
        ]),
        Pause,
        // Bodies past the windows both ways, six streams at once.
        Requests(vec![
            get("/bytes/70000", 1),
            get("/bytes/200000", 1),
            post("/echo", 70_000, 1),
            post("/echo", 200_000, 1),
            Request {
                method: "HEAD",
                ..get("/bytes/1000", 1)
            },
            with_trailers(post("/trailers", 5_000, 1)),
        ]),
        Pause,
        // Answered asleep (or by a wake, over TLS).
        Ping(*b"pingpong"),
        // Six streams on a woken connection: busy, it gets its header
        // table back (the restore), and needs a fence again.
        Requests(
            (0..6)
                .map(|i| get(&format!("/bytes/{}", 10 * i), 3))
                .collect(),
        ),
        Settings(vec![(INITIAL_WINDOW_SIZE, 100_000)]),
        Requests(vec![
            get("/missing", 4),
            post("/echo", 16_384, 4),
            with_trailers(post("/trailers", 0, 4)),
        ]),
        Pause,
        // A SETTINGS change wakes the connection.
        Settings(vec![
            (INITIAL_WINDOW_SIZE, 32_768),
            (HEADER_TABLE_SIZE, 1_024),
        ]),
        Requests(vec![get("/bytes/100000", 5), get("/bytes/50", 5)]),
        Pause,
        // A PING, and a request that wakes the connection.
        Ping(*b"wake up!"),
        Requests(vec![
            post("/echo", 300_000, 6),
            get("/bytes/65535", 6),
            get("/bytes/65536", 6),
        ]),
        Pause,
    ]
}

/// A cookie of about 3 KB, as browsers send: it enters the client's
/// header table and is reused from there.
fn cookie() -> String {
    let session: String = (0..3_000)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    format!("session={session}; theme=dark; lang=en")
}

/// A request's headers in step `step`: the same but for `x-step`.
fn headers(step: usize) -> Vec<Field> {
    [
        ("user-agent", "dormant-differential/1.0".to_owned()),
        ("accept", "*/*".to_owned()),
        ("cookie", cookie()),
        ("x-client", "script".to_owned()),
        ("x-step", step.to_string()),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_owned(), v))
    .collect()
}

fn get(path: &str, step: usize) -> Request {
    Request {
        method: "GET",
        path: path.to_owned(),
        headers: headers(step),
        body: Vec::new(),
        trailers: Vec::new(),
    }
}

/// A POST of `len` bytes of [`pattern`].
fn post(path: &str, len: usize, step: usize) -> Request {
    Request {
        method: "POST",
        body: pattern(len, step as u64).to_vec(),
        ..get(path, step)
    }
}

fn with_trailers(r: Request) -> Request {
    Request {
        trailers: vec![("x-checksum".to_owned(), format!("{}", r.body.len() * 31))],
        ..r
    }
}

// ---- running a script ----

/// How a run pauses: against plain hyper, for a moment; against dormant,
/// until the connection sleeps to a rung (PARKED, DORMANT, PARKED, ...),
/// and the step after the pause must wake it.
struct Pauses<'a, A> {
    dormant: Option<&'a Serve<A>>,
    before: Option<Stats>,
    asleep: Option<Rung>,
    /// Pauses to each rung so far: PARKED, DORMANT.
    count: [u64; 2],
}

impl<'a, A> Pauses<'a, A> {
    fn new(dormant: Option<&'a Serve<A>>) -> Self {
        Pauses {
            dormant,
            before: dormant.map(Serve::stats),
            asleep: None,
            count: [0; 2],
        }
    }

    fn pause(&mut self) {
        let pauses = self.count[0] + self.count[1];
        let (rung, to) = if pauses % 2 == 0 {
            (Rung::Parked, 0)
        } else {
            (Rung::Dormant, 1)
        };
        self.count[to] += 1;
        match (self.dormant, self.before) {
            (Some(srv), Some(before)) => {
                self.before = Some(sleep_until(srv, rung, before));
                self.asleep = Some(rung);
            }
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }

    fn stepped(&mut self) {
        if let (Some(srv), Some(before), Some(rung)) =
            (self.dormant, self.before, self.asleep.take())
        {
            woke(srv, rung, before);
        }
    }
}

/// Has `profile`'s client go through `script` with the server at `addr`
/// (`dormant`'s, if it is dormant's), then send a GOAWAY; what it
/// received, and the pauses to each rung.
async fn converse<T: Transport>(
    addr: &T::Addr,
    profile: &Profile,
    script: &[Step],
    dormant: Option<&Serve<T::Addr>>,
) -> (Received, [u64; 2]) {
    let mut pauses = Pauses::new(dormant);
    let io = timeout(CLIENT_TIMEOUT, T::connect_h2(addr))
        .await
        .expect("connect timed out")
        .into_inner();
    let client = Client::start(io, profile).await;
    for step in script {
        match step {
            Step::Requests(requests) => {
                client.exchange(requests).await;
            }
            Step::Ping(payload) => {
                client.ping(*payload).await;
                // A sleeping connection may answer a PING without a wake
                // (`Transport::ANSWERS_ASLEEP`): the step after it wakes it.
                continue;
            }
            Step::Settings(settings) => client.settings(settings).await,
            Step::Pause => {
                pauses.pause();
                continue;
            }
        }
        pauses.stepped();
    }
    let received = client.go_away().await;
    pauses.stepped();
    (received, pauses.count)
}

fn differential<T: Reference>(profile: Profile) {
    let plain = T::serve_reference(Protocol::Http2, answer::<hyper::body::Incoming>);
    let srv = T::serve(&ladder(DORMANT_AFTER), service_fn(answer::<dormant::Body>));
    let script = script();
    let rt = client_runtime();
    let (want, _) = rt.block_on(converse::<T>(&plain.addr, &profile, &script, None));
    let (got, [parked, dormant]) =
        rt.block_on(converse::<T>(&srv.addr, &profile, &script, Some(&srv)));
    all_closed(&srv);
    let s = srv.stats();
    assert!(
        s.parks >= parked + dormant && s.dormancies >= dormant && s.wakes >= parked + dormant,
        "{parked} pauses PARKED, {dormant} DORMANT: {s:?}"
    );
    assert_same_conversation(&want, &got);
}

// ---- the comparison ----

/// Each stream of `got` is the one of `want`: the same response (status,
/// headers but `date`, body, trailers), in frames of the same types and
/// flags, DATA runs aside.
fn assert_same_streams(want: &Received, got: &Received) {
    let ids = |r: &Received| r.streams.keys().copied().collect::<Vec<_>>();
    assert_eq!(ids(got), ids(want), "the streams");
    for (id, (w, g)) in want
        .streams
        .keys()
        .zip(want.streams.values().zip(got.streams.values()))
    {
        let head = |fields: &[Field]| -> Vec<Field> {
            fields
                .iter()
                .filter(|(n, _)| n != "date")
                .cloned()
                .collect()
        };
        assert!(w.ended && g.ended, "stream {id} ended");
        assert_eq!(head(&g.head), head(&w.head), "stream {id}: the head");
        assert!(
            g.body == w.body,
            "stream {id}: dormant's body of {} bytes, hyper's of {}",
            g.body.len(),
            w.body.len()
        );
        assert_eq!(g.trailers, w.trailers, "stream {id}: the trailers");
        assert_eq!(
            shape(&g.frames),
            shape(&w.frames),
            "stream {id}: the frames"
        );
    }
}

/// The fence: SETTINGS_HEADER_TABLE_SIZE = 0.
const FENCE: [u8; 6] = [0, 1, 0, 0, 0, 0];
/// The restore: SETTINGS_HEADER_TABLE_SIZE = 4,096.
const RESTORE: [u8; 6] = [0, 1, 0, 0, 0x10, 0];

/// hyper's and h2's connection window: the most a client may send unasked.
const CONNECTION_WINDOW: i64 = 1 << 20;

/// A stream's frames with each run of DATA frames as one (flags or'ed):
/// how a body is cut into frames depends on when window comes back.
fn shape(frames: &[(u8, u8)]) -> Vec<(u8, u8)> {
    let mut out: Vec<(u8, u8)> = Vec::new();
    for &(kind, flags) in frames {
        match out.last_mut() {
            Some((DATA, run)) if kind == DATA => *run |= flags,
            _ => out.push((kind, flags)),
        }
    }
    out
}

/// What dormant's client received (`got`) is what plain hyper's received
/// (`want`), but for the SETTINGS frames a sleep needs and the
/// connection's WINDOW_UPDATEs:
///
/// - each stream: the same response (status, headers but `date`, body,
///   trailers), in frames of the same types and flags, DATA runs aside;
/// - the connection: the same frames in the same order (SETTINGS and
///   their ACKs, PING ACKs, GOAWAY), once dormant's fences and restores are
///   taken out; those alternate, a fence first.
/// - WINDOW_UPDATEs on stream 0: h2 tops the client's window up when a
///   third of it is used, counted from the connection's start; a woken
///   connection is a fresh h2 connection counting anew, and the wake
///   brings the client's view to its window. So they come at other
///   moments, with other increments; what both servers must keep is the
///   client's view of the window at most the configured 1 MiB (`Received`
///   counts it as each arrives), and the first one, which opens the
///   window, the same.
fn assert_same_conversation(want: &Received, got: &Received) {
    assert_eq!(want.error, None, "plain hyper's conversation");
    assert_eq!(got.error, None, "dormant's conversation");
    assert!(want.streams.len() >= 20, "{:?}", want.streams.keys());
    assert_same_streams(want, got);

    let updates = |r: &Received| -> Vec<Frame> {
        r.connection
            .iter()
            .filter(|f| f.kind == WINDOW_UPDATE)
            .cloned()
            .collect()
    };
    let others = |r: &Received| -> Vec<Frame> {
        r.connection
            .iter()
            .filter(|f| f.kind != WINDOW_UPDATE)
            .cloned()
            .collect()
    };
    let (sleep, rest): (Vec<Frame>, Vec<Frame>) = others(got).into_iter().partition(|f| {
        (f.kind, f.flags) == (SETTINGS, 0) && (f.payload == FENCE || f.payload == RESTORE)
    });
    assert_eq!(
        rest,
        others(want),
        "the connection's frames, fences and restores aside"
    );
    assert!(
        !sleep.is_empty(),
        "no fence: dormant's connection never slept"
    );
    for (i, f) in sleep.iter().enumerate() {
        let expected = if i % 2 == 0 { FENCE } else { RESTORE };
        assert_eq!(f.payload, expected, "sleep SETTINGS {i} of {sleep:?}");
    }
    assert!(
        sleep.len() >= 3,
        "a restore and a fence after it: {sleep:?}"
    );
    assert_eq!(
        updates(got).first(),
        updates(want).first(),
        "the opening WINDOW_UPDATE"
    );
    for (who, r) in [("plain hyper", want), ("dormant", got)] {
        assert!(
            r.largest_window <= CONNECTION_WINDOW,
            "{who} let the client send {} bytes",
            r.largest_window
        );
    }
}
