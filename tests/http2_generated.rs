//! Randomized differential test of HTTP/2 sleep, over every transport:
//! conversations generated from a seed (with a small PRNG of its own, so a
//! seed is the same conversations everywhere) run against plain hyper's
//! HTTP/2 server and against dormant with the same h2 settings, and what
//! each client receives must be the same, as `tests/http2_differential.rs`
//! compares it: each stream's decoded response (status, headers but
//! `date`, body, trailers) and its frames' types and flags (runs of DATA
//! merged, a header block's CONTINUATION frames too), the server's
//! RST_STREAM and GOAWAY error codes, every frame on stream 0 (in order,
//! kind by kind) but dormant's fence and restore SETTINGS and the
//! connection's WINDOW_UPDATEs, and the connection's fate (it lives until
//! the client's GOAWAY, then the server closes it). The client checks on
//! its own that the server keeps to every window and frame size it
//! granted, and decodes every header block with a strict HPACK decoder.
//!
//! dormant parks after 10 ms and goes DORMANT 1 s later, and the pauses of
//! a conversation (0, 5 ms, 9–13 ms, 50 ms, 0.99–1.01 s, 2.5 s) are plain
//! sleeps, so that random timing crosses both thresholds: the test does
//! not wait for a rung, it only counts over the seeds (`dormant::Stats`)
//! that connections did park, go DORMANT and wake, so that it cannot pass
//! without sleeping. Against plain hyper, whose server has no timers here,
//! the conversations run without pauses.
//!
//! A seed's plan: one connection, or two or three at once to the same
//! server; the servers' windows hyper's (1 MiB), or others (65,535 bytes,
//! which grants no more than the protocol's). Each connection's
//! conversation, by an honest client (no frame it generates is one a
//! correct client may not send):
//!
//! - a profile: its first SETTINGS (header table 0 B to 64 KiB, stream
//!   windows 16 KiB to 6 MiB, frame sizes), a connection window of its own
//!   or none, whether it gives window back at once or only once half of it
//!   is used (as Node's, Python's and Netty's clients do), and whether it
//!   reads only while it waits for something (as synchronous clients do:
//!   not in its pauses);
//! - requests several at once (GET, HEAD, a 404, POSTs echoed, POSTs with
//!   trailers, POSTs answered before their body is read, responses with a
//!   header of up to 30 KB, responses delayed up to 200 ms; bodies both
//!   ways from 0 B to 300 KB, past the 65,535-byte windows; headers from a
//!   pool and a 3 KB cookie, so that both sides' dynamic tables fill and
//!   their entries are used again after a sleep), each framed at random:
//!   padded HEADERS and DATA, priority blocks, header blocks cut into
//!   CONTINUATION frames, an empty DATA frame for END_STREAM, a
//!   WINDOW_UPDATE and a PRIORITY frame for the stream, a client
//!   RST_STREAM before the request's end or in the middle of the response,
//!   sometimes the bodies a while after the HEADERS (a slow upload);
//! - PINGs (one or a few at once, a payload maybe twice) and SETTINGS
//!   changes, awaited or not, often right before a pause, among them
//!   SETTINGS_HEADER_TABLE_SIZE lowered to 0 and raised again before the
//!   next request; connection WINDOW_UPDATEs; PRIORITY frames for closed
//!   and idle streams; pauses.
//!
//! What depends on timing is compared as far as it does not: a stream the
//! client reset, for its head, that it ended, and that one body is the
//! start of the other; a response that ended before its request, with or
//! without the server's RST_STREAM (NO_ERROR) after it.
//!
//! Seeds: by default a fixed set, chosen to run in well under a minute
//! (all three transports, debug build, two cores) and to sleep PARKED and
//! DORMANT. More with environment variables:
//!
//! - `DORMANT_H2_SEEDS`: `N` (seeds 0 to N − 1), `A..B`, `A..=B`, or a
//!   list `A,B,C`. For a long run, e.g.
//!   `DORMANT_H2_SEEDS=0..1000 DORMANT_H2_JOBS=6 cargo test --features
//!   tls,proxy-protocol --test it -- http2_generated:: --nocapture
//!   --test-threads=3` (about 6 minutes on two cores, the three transports
//!   side by side).
//! - `DORMANT_H2_JOBS`: seeds run at once per transport (default 4: a
//!   seed mostly sleeps).
//! - `DORMANT_H2_SHRINK=1`: on a failure, look for a smaller part of the
//!   seed's plan that still fails (re-running it: connections left out,
//!   then steps, then requests, then framings made plain), and print it
//!   with its `DORMANT_H2_KEEP`.
//! - `DORMANT_H2_KEEP`: run only part of each seed's plan, as shrinking
//!   prints it: for each connection in turn (separated by `/`; `-` leaves
//!   one out, and so does the end of the list), its step indices
//!   separated by `,`, where `5:0.2p` keeps requests 0 and 2 of step 5, the
//!   second with plain framing.
//! - `DORMANT_H2_VERBOSE=1`: print each seed's plan and what its run did.
//! - `DORMANT_H2_SELF=1`: run the second run against plain hyper too (with
//!   the pauses), to check that the comparison holds of two plain hyper
//!   servers: a harness that differs by timing fails there.
//!
//! A failure prints the seed, the transport, the plan and the difference,
//! and the command that runs that seed alone.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::future::{Future, Ready, poll_fn, ready};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::common::h2_raw::{ACK, Frame, GOAWAY, HEADERS, NO_ERROR, PING, SETTINGS};
use crate::common::h2_script::{
    Block, CONTINUATION, Client, DATA, ENABLE_PUSH, Framing, HEADER_TABLE_SIZE,
    INITIAL_WINDOW_SIZE, MAX_CONCURRENT_STREAMS, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE, Priority,
    Profile, RST_STREAM, Received, Request, Reset, WINDOW_UPDATE,
};
use crate::common::hpack::Field;
use crate::common::hyper::Protocol;
use crate::common::reference::Reference;
use crate::common::rungs::{all_closed, client_runtime};
use crate::common::services::pattern;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Transport, over_every_transport};
use http::{HeaderMap, HeaderValue, Response};
use http_body_util::combinators::WithTrailers;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::time::timeout;

over_every_transport!(generated_conversations_see_what_plain_hyper_sends);

/// The seeds run by default, by each transport's test: they cover every
/// kind of step and request, several connections at once, other server
/// windows, and sleeps PARKED and DORMANT, in about 10 s a transport.
const CI_SEEDS: std::ops::Range<u64> = 0..24;

fn generated_conversations_see_what_plain_hyper_sends<T: Reference>() {
    let (seeds, default_set) = match std::env::var("DORMANT_H2_SEEDS") {
        Ok(spec) => (parse_seeds(&spec), false),
        Err(_) => (CI_SEEDS.collect(), true),
    };
    let keep = std::env::var("DORMANT_H2_KEEP")
        .ok()
        .map(|k| Kept::parse(&k));
    let jobs: usize = std::env::var("DORMANT_H2_JOBS")
        .ok()
        .map_or(4, |j| j.parse().expect("DORMANT_H2_JOBS: a number"));
    let shrink = std::env::var_os("DORMANT_H2_SHRINK").is_some();
    let verbose = std::env::var_os("DORMANT_H2_VERBOSE").is_some();
    let transport = std::any::type_name::<T>()
        .rsplit("::")
        .next()
        .unwrap()
        .to_lowercase();

    let next = AtomicUsize::new(0);
    let totals = Mutex::new(Totals::default());
    let failures = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                let rt = client_runtime();
                while let Some(&seed) = seeds.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let plan = Plan::of(seed).keep(keep.as_ref());
                    if verbose {
                        println!("{transport} {plan}");
                    }
                    match run::<T>(&rt, &plan) {
                        Ok(slept) => {
                            if verbose {
                                println!("{transport} seed {seed}: {slept:?}");
                            }
                            totals.lock().unwrap().add(slept);
                        }
                        Err(e) => {
                            let mut report = failure(&transport, &plan, &e);
                            if shrink {
                                report.push_str(&shrunk::<T>(&rt, &plan, &e));
                            }
                            failures.lock().unwrap().push(report);
                        }
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    let totals = totals.into_inner().unwrap();
    println!(
        "{transport}: {} seeds in {:.1?}, {} failed; {totals:?}",
        seeds.len(),
        started.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    if (default_set || seeds.len() >= 20) && std::env::var_os("DORMANT_H2_SELF").is_none() {
        assert!(
            totals.parks > 0 && totals.dormancies > 0 && totals.wakes > 0,
            "the connections never slept PARKED and DORMANT and woke: {totals:?}"
        );
        assert!(
            totals.client_resets > 0,
            "the client never reset a stream: {totals:?}"
        );
    }
}

/// The set of seeds `DORMANT_H2_SEEDS` names.
fn parse_seeds(spec: &str) -> Vec<u64> {
    let num = |s: &str| -> u64 {
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("DORMANT_H2_SEEDS: {s:?} is not a seed"))
    };
    if let Some((a, b)) = spec.split_once("..=") {
        (num(a)..=num(b)).collect()
    } else if let Some((a, b)) = spec.split_once("..") {
        (num(a)..num(b)).collect()
    } else if spec.contains(',') {
        spec.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(num)
            .collect()
    } else {
        (0..num(spec)).collect()
    }
}

/// What a seed's run did, as dormant's client and stats saw it.
#[derive(Debug, Default)]
struct Totals {
    parks: u64,
    dormancies: u64,
    wakes: u64,
    /// Quiet spells in which a connection stayed awake because of its
    /// windows, or because the client did not acknowledge the fence
    /// (`H2SleepDeclines`).
    window_declines: u64,
    unacknowledged: u64,
    streams: usize,
    /// Streams the client reset, and that the server reset.
    client_resets: usize,
    server_resets: usize,
}

impl Totals {
    fn of(s: dormant::Stats, runs: &[Run]) -> Totals {
        let streams = || runs.iter().flat_map(|r| r.received.streams.values());
        Totals {
            parks: s.parks,
            dormancies: s.dormancies,
            wakes: s.wakes,
            window_declines: s.h2_sleep_declines.window,
            unacknowledged: s.h2_sleep_declines.unacknowledged,
            streams: streams().count(),
            client_resets: streams().filter(|s| s.cancelled).count(),
            server_resets: streams().filter(|s| s.reset.is_some()).count(),
        }
    }

    fn add(&mut self, t: Totals) {
        self.parks += t.parks;
        self.dormancies += t.dormancies;
        self.wakes += t.wakes;
        self.window_declines += t.window_declines;
        self.unacknowledged += t.unacknowledged;
        self.streams += t.streams;
        self.client_resets += t.client_resets;
        self.server_resets += t.server_resets;
    }
}

/// hyper's initial HTTP/2 windows, stream and connection.
const HYPER_WINDOWS: Windows = Windows {
    stream: 1 << 20,
    connection: 1 << 20,
};

/// The initial windows of both servers (their other settings are
/// hyper's defaults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Windows {
    stream: u32,
    connection: u32,
}

impl Windows {
    /// Plain hyper's server with these windows.
    fn protocol(self) -> Protocol {
        match self {
            HYPER_WINDOWS => Protocol::Http2,
            w => Protocol::Http2Windows(w.stream, w.connection),
        }
    }

    /// dormant's builder: parks after 10 ms, DORMANT after 1 s, with
    /// these windows.
    fn builder(self) -> dormant::Builder {
        let mut b = dormant::Server::builder();
        b.park_after(Duration::from_millis(10))
            .dormant_after(Duration::from_secs(1))
            .http2_initial_stream_window_size(self.stream)
            .http2_initial_connection_window_size(self.connection);
        b
    }

    /// Whether the server opens with a connection WINDOW_UPDATE (it grants
    /// more than the protocol's 65,535 bytes).
    fn opens(self) -> bool {
        self.connection > 65_535
    }
}

/// Runs `plan` against plain hyper and dormant over transport `T` (its
/// conversations at once, each on a connection of its own), and compares
/// each conversation's runs; what dormant's runs did if they match, the
/// difference (or the panic) otherwise. With `DORMANT_H2_SELF` set, the
/// second run is against another plain hyper server too (with the
/// pauses): a check of the harness, whose runs must not differ by timing.
fn run<T: Reference>(rt: &tokio::runtime::Runtime, plan: &Plan) -> Result<Totals, String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let protocol = plan.windows.protocol();
        let plain = T::serve_reference(protocol, answer::<hyper::body::Incoming>);
        let want = rt.block_on(converse_all::<T>(&plain.addr, plan, false));
        if std::env::var_os("DORMANT_H2_SELF").is_some() {
            let other = T::serve_reference(protocol, answer::<hyper::body::Incoming>);
            let got = rt.block_on(converse_all::<T>(&other.addr, plan, true));
            compare_all(plan.windows, &want, &got)?;
            return Ok(Totals::of(dormant::Stats::default(), &got));
        }
        let mut srv = T::serve(&plan.windows.builder(), service_fn(answer::<dormant::Body>));
        let got = rt.block_on(converse_all::<T>(&srv.addr, plan, true));
        compare_all(plan.windows, &want, &got)?;
        all_closed(&srv);
        let totals = Totals::of(srv.stats(), &got);
        // Fails if a task of the server panicked.
        srv.stop();
        Ok(totals)
    }));
    outcome.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        Err(format!("panicked: {message}"))
    })
}

/// A failure's report: everything needed to run it again alone.
fn failure(transport: &str, plan: &Plan, e: &str) -> String {
    format!(
        "seed {seed} over {transport}: {e}\n\
         {plan}\n\
         again: DORMANT_H2_SEEDS={seed}..={seed}{keep} cargo test --features tls,proxy-protocol \
         --test it -- http2_generated::{transport}::",
        seed = plan.seed,
        keep = plan
            .mask
            .as_ref()
            .map(|m| format!(" DORMANT_H2_KEEP='{m}'"))
            .unwrap_or_default(),
    )
}

// ---- the service, the same code on both servers ----

type Reply = WithTrailers<Full<Bytes>, Ready<Option<Result<HeaderMap, Infallible>>>>;

/// Answers `/bytes/N` with `N` bytes of [`pattern`], `/missing` with a
/// `404`, anything else with the request's body; with an `x-request`
/// header describing the request, its `x-` headers and its `cookie` (as
/// `x-cookie`) copied back, and, if the request had trailers, its trailers
/// back as trailers with `x-body-len` (as `tests/http2_differential.rs`'s).
/// Besides: `/early/N` answers `N` bytes without reading the body,
/// `/head/N` adds a header of `N` bytes, `/slow/N` answers after `N` ms.
async fn answer<B>(req: http::Request<B>) -> Result<Response<Reply>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    let number = |prefix: &str| -> Option<usize> {
        Some(path.strip_prefix(prefix)?.parse().expect("a length"))
    };
    let early = number("/early/");
    if let Some(ms) = number("/slow/") {
        tokio::time::sleep(Duration::from_millis(ms as u64)).await;
    }
    let (body, trailers) = match early {
        // Answered without reading the body.
        Some(_) => (Bytes::from_static(b"unread"), None),
        None => match body.collect().await {
            Ok(c) => {
                let trailers = c.trailers().cloned();
                (c.to_bytes(), trailers)
            }
            Err(e) => (Bytes::from(format!("error: {e}")), None),
        },
    };
    let (status, out) = match number("/bytes/").or(early) {
        Some(len) => (200, pattern(len, 0)),
        None if path == "/missing" => (404, Bytes::from_static(b"no such thing")),
        None => (200, body.clone()),
    };
    let mut res = Response::builder().status(status).header(
        "x-request",
        format!("{} {path} body={}", parts.method, body.len()),
    );
    if let Some(len) = number("/head/") {
        // A header of `len` bytes, other for every request, so that the
        // response's header block needs CONTINUATION frames and evicts
        // the tables.
        let step = parts.headers.get("x-step");
        let step = step.and_then(|v| v.to_str().ok()?.parse().ok());
        let step = step.unwrap_or(0);
        let value: String = pattern(len, step)
            .iter()
            .map(|b| char::from(b'a' + b % 26))
            .collect();
        res = res.header("x-big", value);
    }
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

// ---- the PRNG ----

/// splitmix64: small, and the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c908)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    fn usize(&mut self, lo: usize, hi: usize) -> usize {
        self.range(lo as u64, hi as u64) as usize
    }

    /// `true` `percent` times in a hundred.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.next() as usize % items.len()]
    }

    /// An index into `weights`, each as likely as its weight.
    fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut n = self.next() % weights.iter().sum::<u64>();
        for (i, &w) in weights.iter().enumerate() {
            if n < w {
                return i;
            }
            n -= w;
        }
        unreachable!()
    }
}

// ---- the conversations ----

/// What a request asks.
#[derive(Clone, Copy, Debug)]
enum Ask {
    /// `GET /bytes/N`.
    Get(usize),
    /// `HEAD /bytes/N`.
    Head(usize),
    /// `GET /missing`: a 404.
    Missing,
    /// `POST /echo` with a body of N bytes.
    Echo(usize),
    /// `POST /trailers` with a body of N bytes and trailers.
    Trailers(usize),
    /// `POST /early/N` with a body of M bytes: N bytes answered without
    /// reading the body; if the response ends before the body, the server
    /// resets the stream (NO_ERROR), and the client stops sending.
    Early(usize, usize),
    /// `GET /head/N`: a response with a header of N bytes.
    BigHead(usize),
    /// `GET /slow/N`: answered after N ms (a long poll: its stream open
    /// while the client waits).
    Slow(u64),
}

/// A request of a generated conversation.
#[derive(Clone, Debug)]
struct Req {
    ask: Ask,
    /// Which cookie, if any ([`COOKIES`]).
    cookie: Option<usize>,
    /// Headers of [`POOL`].
    pool: Vec<usize>,
    framing: Framing,
}

/// A stream a PRIORITY step names.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// A stream this many back from the next one (closed), or the next
    /// one if there are not that many.
    Closed(u32),
    /// A stream this many after the next one (idle: it is opened later,
    /// or never).
    Idle(u32),
}

#[derive(Clone, Debug)]
enum Step {
    /// Requests sent at once, each on its stream, all answered (or reset)
    /// before the next step; with a time, their bodies follow their
    /// HEADERS after that long.
    Requests(Vec<Req>, Option<Duration>),
    /// PINGs sent at once (the same payload maybe twice), and, with
    /// `wait`, their ACKs awaited (with any still owed).
    Pings {
        payloads: Vec<[u8; 8]>,
        wait: bool,
    },
    Settings {
        settings: Vec<(u16, u32)>,
        wait: bool,
    },
    /// A connection WINDOW_UPDATE.
    WindowUpdate(u32),
    Priority {
        target: Target,
        priority: Priority,
    },
    /// The client idle.
    Pause(Duration),
}

/// A generated conversation: the client's profile and its steps, each
/// with its index in the whole conversation generated.
#[derive(Clone, Debug)]
struct Conversation {
    profile: Profile,
    /// The client gives window back only once half of it is used.
    lazy: bool,
    /// The client reads only while it waits for something: not in its
    /// pauses.
    sync: bool,
    steps: Vec<(usize, Step)>,
}

/// A seed's conversations, each on a connection of its own, all at once
/// with the same server.
#[derive(Clone, Debug)]
struct Plan {
    seed: u64,
    /// The servers' windows.
    windows: Windows,
    conversations: Vec<Conversation>,
    /// The part of the seed's plan this is, if not all of it (a
    /// `DORMANT_H2_KEEP`).
    mask: Option<String>,
}

impl Plan {
    /// Seed `seed`'s plan: mostly one connection, sometimes two or
    /// three.
    fn of(seed: u64) -> Plan {
        let mut rng = Rng::new(seed ^ 0x3c6e_f372_fe94_f82b);
        let n = rng.pick(&[1, 1, 1, 1, 1, 1, 2, 2, 2, 3]);
        let windows = match rng.weighted(&[70, 15, 15]) {
            0 => HYPER_WINDOWS,
            1 => Windows {
                stream: 65_535,
                connection: 65_535,
            },
            _ => Windows {
                stream: rng.pick(&[16_384, 100_000, 1 << 20]),
                connection: rng.pick(&[65_535, 262_144, 6 << 20]),
            },
        };
        Plan {
            seed,
            windows,
            conversations: (0..n).map(|k| generate(seed, k)).collect(),
            mask: None,
        }
    }
}

/// Cookies: of about 3 KB, as browsers send, and a short one.
const COOKIES: usize = 2;

fn cookie(i: usize) -> String {
    match i {
        0 => {
            let session: String = (0..3_000)
                .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
                .collect();
            format!("session={session}; theme=dark; lang=en")
        }
        _ => "theme=light".to_owned(),
    }
}

/// Headers a request may carry besides the usual ones: the same few again
/// and again, so that they are found in the tables of both sides.
const POOL: [(&str, &str); 8] = [
    (
        "x-trace",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ),
    ("x-tenant", "acme"),
    ("x-tenant", "globex"),
    ("x-feature", "sleep,wake,fence"),
    ("accept-language", "en-GB,en;q=0.9"),
    (
        "x-long",
        "a value long enough to take a good part of a small table; 0123456789abcdef",
    ),
    ("cache-control", "no-cache"),
    ("x-empty", ""),
];

impl Req {
    /// The request, in step `step` (its `x-step` header).
    fn request(&self, step: usize) -> Request {
        let (method, path, body, trailers) = match self.ask {
            Ask::Get(n) => ("GET", format!("/bytes/{n}"), 0, false),
            Ask::Head(n) => ("HEAD", format!("/bytes/{n}"), 0, false),
            Ask::Missing => ("GET", "/missing".to_owned(), 0, false),
            Ask::Echo(n) => ("POST", "/echo".to_owned(), n, false),
            Ask::Trailers(n) => ("POST", "/trailers".to_owned(), n, true),
            Ask::Early(n, m) => ("POST", format!("/early/{n}"), m, false),
            Ask::BigHead(n) => ("GET", format!("/head/{n}"), 0, false),
            Ask::Slow(ms) => ("GET", format!("/slow/{ms}"), 0, false),
        };
        let mut headers: Vec<Field> = vec![
            ("user-agent".into(), "dormant-generated/1.0".into()),
            ("accept".into(), "*/*".into()),
        ];
        if let Some(c) = self.cookie {
            headers.push(("cookie".into(), cookie(c)));
        }
        headers.extend(
            self.pool
                .iter()
                .map(|&i| (POOL[i].0.into(), POOL[i].1.into())),
        );
        headers.push(("x-step".into(), step.to_string()));
        Request {
            method,
            path,
            headers,
            body: pattern(body, step as u64).to_vec(),
            trailers: if trailers {
                vec![("x-checksum".into(), format!("{}", body * 31))]
            } else {
                Vec::new()
            },
        }
    }
}

/// What the generator knows of the client as it goes.
struct Gen {
    rng: Rng,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE.
    own_window: u32,
    /// Long pauses so far, in ms: a seed's are bounded so that seeds stay
    /// short.
    long_pauses: u64,
    steps: Vec<Step>,
}

/// Conversation `k` of seed `seed`.
fn generate(seed: u64, k: u64) -> Conversation {
    let mut rng = Rng::new(seed ^ k << 48);
    let mut settings = Vec::new();
    if rng.chance(50) {
        settings.push((HEADER_TABLE_SIZE, rng.pick(&[0, 512, 4096, 65_536])));
    }
    if rng.chance(20) {
        settings.push((ENABLE_PUSH, 0));
    }
    let own_window = if rng.chance(60) {
        let w = rng.pick(&[16_384, 100_000, 1 << 20, 6 << 20]);
        settings.push((INITIAL_WINDOW_SIZE, w));
        w
    } else {
        65_535
    };
    if rng.chance(25) {
        settings.push((MAX_FRAME_SIZE, rng.pick(&[16_384, 32_768, 1 << 20])));
    }
    if rng.chance(20) {
        settings.push((MAX_HEADER_LIST_SIZE, 262_144));
    }
    let connection_window = match rng.weighted(&[25, 30, 30, 15]) {
        0 => 0,
        1 => 1 << 20,
        2 => 15 << 20,
        _ => rng.range(1, 4 << 20) as u32,
    };
    let lazy = rng.chance(35);
    let sync = rng.chance(25);
    let mut g = Gen {
        rng,
        own_window,
        long_pauses: 0,
        steps: Vec::new(),
    };
    let len = g.rng.usize(5, 14);
    while g.steps.len() < len {
        g.step();
    }
    Conversation {
        profile: Profile {
            settings,
            connection_window,
        },
        lazy,
        sync,
        steps: g.steps.into_iter().enumerate().collect(),
    }
}

impl Gen {
    /// Adds a step, or a few that belong together.
    fn step(&mut self) {
        match self.rng.weighted(&[40, 24, 12, 8, 5, 6, 5]) {
            0 => {
                let requests = self.requests();
                let hold = self.hold();
                self.steps.push(Step::Requests(requests, hold));
            }
            1 => {
                if self.rng.chance(50) {
                    let settings = self.settings();
                    self.steps.push(settings);
                }
                let pause = self.pause();
                self.steps.push(pause);
            }
            2 => {
                let mut payloads = Vec::new();
                for _ in 0..self.rng.pick(&[1, 1, 1, 2, 3, 4]) {
                    let payload = match payloads.last() {
                        Some(&last) if self.rng.chance(25) => last,
                        _ => self.rng.next().to_be_bytes(),
                    };
                    payloads.push(payload);
                }
                let wait = self.rng.chance(70);
                self.steps.push(Step::Pings { payloads, wait });
            }
            3 => {
                let settings = self.settings();
                self.steps.push(settings);
            }
            4 => {
                // The header table emptied and given back, a pause
                // (maybe), and requests: whether it sleeps before or
                // after the raise, the server's next header block must
                // open with size updates of 0 and of the new size.
                self.steps.push(Step::Settings {
                    settings: vec![(HEADER_TABLE_SIZE, 0)],
                    wait: self.rng.chance(70),
                });
                if self.rng.chance(50) {
                    let pause = self.pause();
                    self.steps.push(pause);
                }
                self.steps.push(Step::Settings {
                    settings: vec![(HEADER_TABLE_SIZE, self.rng.pick(&[256, 4096, 65_536]))],
                    wait: self.rng.chance(70),
                });
                let pause = self.pause();
                self.steps.push(pause);
                let requests = self.requests();
                let hold = self.hold();
                self.steps.push(Step::Requests(requests, hold));
            }
            5 => {
                let n = self.rng.range(1, 4 << 20) as u32;
                self.steps.push(Step::WindowUpdate(n));
            }
            _ => {
                let target = if self.rng.chance(60) {
                    Target::Closed(self.rng.range(1, 4) as u32)
                } else {
                    Target::Idle(self.rng.range(0, 2) as u32)
                };
                let priority = self.priority();
                self.steps.push(Step::Priority { target, priority });
            }
        }
    }

    /// Mostly none; sometimes a slow upload, its streams open while the
    /// client waits.
    fn hold(&mut self) -> Option<Duration> {
        self.rng
            .chance(10)
            .then(|| Duration::from_millis(self.rng.pick(&[5, 12, 50])))
    }

    fn pause(&mut self) -> Step {
        let r = &mut self.rng;
        let mut pause = match r.weighted(&[10, 15, 20, 25, 18, 12]) {
            0 => Duration::ZERO,
            1 => Duration::from_millis(5),
            2 => Duration::from_micros(r.range(9_000, 13_000)),
            3 => Duration::from_millis(50),
            4 => Duration::from_micros(r.range(990_000, 1_010_000)),
            _ => Duration::from_millis(2_500),
        };
        if pause >= Duration::from_millis(990) {
            if self.long_pauses >= 5_000 {
                pause = Duration::from_millis(50);
            } else {
                self.long_pauses += pause.as_millis() as u64;
            }
        }
        Step::Pause(pause)
    }

    /// A SETTINGS frame of one to three settings (each once).
    fn settings(&mut self) -> Step {
        let mut settings = Vec::new();
        let n = self.rng.usize(1, 3);
        for _ in 0..n {
            let setting = match self.rng.weighted(&[35, 35, 15, 5, 5, 5]) {
                0 => (HEADER_TABLE_SIZE, self.rng.pick(&[0, 256, 4096, 65_536])),
                1 => {
                    let w = self.rng.pick(&[16_384, 65_535, 100_000, 1 << 20, 6 << 20]);
                    (INITIAL_WINDOW_SIZE, w)
                }
                2 => (MAX_FRAME_SIZE, self.rng.pick(&[16_384, 32_768, 1 << 20])),
                3 => (ENABLE_PUSH, 0),
                4 => (MAX_CONCURRENT_STREAMS, self.rng.pick(&[0, 100])),
                _ => (MAX_HEADER_LIST_SIZE, self.rng.pick(&[16_384, 262_144])),
            };
            if settings.iter().all(|&(id, _)| id != setting.0) {
                settings.push(setting);
            }
        }
        if let Some(&(_, w)) = settings.iter().find(|(id, _)| *id == INITIAL_WINDOW_SIZE) {
            self.own_window = w;
        }
        Step::Settings {
            settings,
            wait: self.rng.chance(70),
        }
    }

    fn priority(&mut self) -> Priority {
        Priority {
            back: self.rng.range(0, 3) as u32,
            weight: self.rng.next() as u8,
            exclusive: self.rng.chance(20),
        }
    }

    /// A body's or a response's length: often near the edges of frames
    /// and windows.
    fn len(&mut self) -> usize {
        let r = &mut self.rng;
        match r.weighted(&[10, 15, 8, 8, 24, 35]) {
            0 => 0,
            1 => r.usize(1, 100),
            2 => r.usize(16_383, 16_385),
            3 => r.usize(65_534, 65_536),
            4 => r.usize(100, 20_000),
            _ => r.usize(70_000, 300_000),
        }
    }

    /// One to eight requests sent at once, up to about 1.5 MB each way.
    fn requests(&mut self) -> Vec<Req> {
        let n = match self.rng.weighted(&[30, 50, 20]) {
            0 => 1,
            1 => self.rng.usize(2, 6),
            _ => self.rng.usize(7, 8),
        };
        let mut requests: Vec<Req> = Vec::new();
        let (mut up, mut down) = (0, 0);
        for _ in 0..n {
            let r = self.request();
            let (u, d) = match r.ask {
                Ask::Get(n) | Ask::Head(n) | Ask::BigHead(n) => (0, n),
                Ask::Missing | Ask::Slow(_) => (0, 0),
                Ask::Echo(n) | Ask::Trailers(n) => (n, n),
                Ask::Early(n, m) => (m, n),
            };
            if !requests.is_empty() && (up + u > 1_500_000 || down + d > 1_500_000) {
                break;
            }
            (up, down) = (up + u, down + d);
            requests.push(r);
        }
        requests
    }

    fn request(&mut self) -> Req {
        let len = self.len();
        let ask = match self.rng.weighted(&[35, 8, 7, 30, 20, 6, 4, 4]) {
            0 => Ask::Get(len),
            1 => Ask::Head(len),
            2 => Ask::Missing,
            3 => Ask::Echo(len),
            4 => Ask::Trailers(len),
            5 => Ask::Early(self.rng.usize(0, 20_000), len),
            6 => Ask::BigHead(self.rng.usize(1, 30_000)),
            _ => Ask::Slow(self.rng.pick(&[1, 5, 9, 11, 13, 50, 200])),
        };
        let cookie = self.rng.chance(60).then(|| self.rng.usize(0, COOKIES - 1));
        let pool = (0..self.rng.usize(0, 3))
            .map(|_| self.rng.usize(0, POOL.len() - 1))
            .collect();
        let framing = self.framing(ask);
        Req {
            ask,
            cookie,
            pool,
            framing,
        }
    }

    fn block(&mut self) -> Block {
        Block {
            padding: self.rng.chance(20).then(|| self.rng.next() as u8),
            priority: self.rng.chance(15).then(|| self.priority()),
            cuts: if self.rng.chance(30) {
                (0..self.rng.usize(1, 3))
                    .map(|_| self.rng.range(1, 999) as u16)
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    fn framing(&mut self, ask: Ask) -> Framing {
        let head = self.block();
        let trailers = self.block();
        let data_padding = if self.rng.chance(20) {
            (0..self.rng.usize(1, 3))
                .map(|_| self.rng.next() as u8)
                .collect()
        } else {
            Vec::new()
        };
        let reset = match ask {
            Ask::Get(n) if n > 0 && self.rng.chance(15) => {
                let most = n.min(self.own_window as usize) / 2;
                Some(Reset::Response {
                    after: self.rng.usize(0, most),
                })
            }
            Ask::Echo(n) if n > 1 && self.rng.chance(8) => Some(Reset::Request {
                after: self.rng.usize(0, n - 1),
            }),
            _ => None,
        };
        Framing {
            head,
            trailers,
            data_padding,
            empty_end: self.rng.chance(12),
            window_update: (reset.is_none() && self.rng.chance(12))
                .then(|| self.rng.range(1, 1 << 20) as u32),
            priority: self.rng.chance(8).then(|| self.priority()),
            reset,
        }
    }
}

// ---- showing a conversation, and parts of it ----

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seed {}", self.seed)?;
        if self.windows != HYPER_WINDOWS {
            write!(f, ", server windows {:?}", self.windows)?;
        }
        if let Some(mask) = &self.mask {
            write!(f, " (DORMANT_H2_KEEP='{mask}')")?;
        }
        for (k, c) in self.conversations.iter().enumerate() {
            write!(f, "\nconnection {k}: {c}")?;
        }
        Ok(())
    }
}

impl std::fmt::Display for Conversation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "settings {:?}, connection window +{}{}",
            self.profile.settings,
            self.profile.connection_window,
            if self.lazy {
                ", lazy window updates"
            } else {
                ""
            },
        )?;
        if self.sync {
            writeln!(f, "  (reads only while it waits)")?;
        }
        for (i, step) in &self.steps {
            match step {
                Step::Requests(requests, hold) => {
                    match hold {
                        None => writeln!(f, "{i:3}: requests")?,
                        Some(hold) => writeln!(f, "{i:3}: requests, bodies after {hold:?}")?,
                    }
                    for (j, r) in requests.iter().enumerate() {
                        writeln!(f, "       {j}: {}", describe(r))?;
                    }
                }
                step => writeln!(f, "{i:3}: {step:?}")?,
            }
        }
        Ok(())
    }
}

/// A request in a line: what it asks, its headers, and its framing but
/// what is default.
fn describe(r: &Req) -> String {
    let mut s = format!("{:?}", r.ask);
    if let Some(c) = r.cookie {
        let _ = write!(s, " cookie{c}");
    }
    if !r.pool.is_empty() {
        let _ = write!(s, " pool{:?}", r.pool);
    }
    let fr = &r.framing;
    let block = |name: &str, b: &Block, s: &mut String| {
        if let Some(p) = b.padding {
            let _ = write!(s, " {name}.padding={p}");
        }
        if let Some(p) = b.priority {
            let _ = write!(s, " {name}.priority={p:?}");
        }
        if !b.cuts.is_empty() {
            let _ = write!(s, " {name}.cuts={:?}", b.cuts);
        }
    };
    block("head", &fr.head, &mut s);
    if matches!(r.ask, Ask::Trailers(_)) {
        block("trailers", &fr.trailers, &mut s);
    }
    if !fr.data_padding.is_empty() {
        let _ = write!(s, " data_padding={:?}", fr.data_padding);
    }
    if fr.empty_end {
        s.push_str(" empty_end");
    }
    if let Some(n) = fr.window_update {
        let _ = write!(s, " window_update={n}");
    }
    if let Some(p) = fr.priority {
        let _ = write!(s, " priority={p:?}");
    }
    if let Some(reset) = fr.reset {
        let _ = write!(s, " reset={reset:?}");
    }
    s
}

/// The steps of a conversation to run (`DORMANT_H2_KEEP`): step indices,
/// and for a step of requests, which of them (`5:0.2p`: requests 0 and
/// 2, the second with plain framing).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Keep(Vec<(usize, Option<Chosen>)>);

/// The requests of a step that a [`Keep`] keeps: their indices, and
/// whether each is made plain (default framing).
type Chosen = Vec<(usize, bool)>;

impl Keep {
    fn parse(spec: &str) -> Keep {
        let num = |s: &str| -> usize {
            s.parse()
                .unwrap_or_else(|_| panic!("DORMANT_H2_KEEP: {s:?} is not an index"))
        };
        Keep(
            spec.split(',')
                .filter(|s| !s.is_empty())
                .map(|step| match step.split_once(':') {
                    None => (num(step), None),
                    Some((i, requests)) => {
                        let requests = requests
                            .split('.')
                            .filter(|r| !r.is_empty())
                            .map(|r| match r.strip_suffix('p') {
                                Some(r) => (num(r), true),
                                None => (num(r), false),
                            })
                            .collect();
                        (num(i), Some(requests))
                    }
                })
                .collect(),
        )
    }
}

impl std::fmt::Display for Keep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let steps: Vec<String> = self
            .0
            .iter()
            .map(|(i, requests)| match requests {
                None => i.to_string(),
                Some(requests) => {
                    let requests: Vec<String> = requests
                        .iter()
                        .map(|&(j, plain)| format!("{j}{}", if plain { "p" } else { "" }))
                        .collect();
                    format!("{i}:{}", requests.join("."))
                }
            })
            .collect();
        write!(f, "{}", steps.join(","))
    }
}

/// The part of a plan to run (`DORMANT_H2_KEEP`): for each connection in
/// turn (separated by `/`), its [`Keep`], or `-` to leave the connection
/// out; connections past the last are left out.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Kept(Vec<Option<Keep>>);

impl Kept {
    fn parse(spec: &str) -> Kept {
        Kept(
            spec.split('/')
                .map(|c| (c != "-").then(|| Keep::parse(c)))
                .collect(),
        )
    }
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let connections: Vec<String> = self
            .0
            .iter()
            .map(|c| c.as_ref().map_or("-".to_owned(), Keep::to_string))
            .collect();
        write!(f, "{}", connections.join("/"))
    }
}

impl Plan {
    /// The part of this (whole) plan that `kept` names; all of it with
    /// `None`.
    fn keep(self, kept: Option<&Kept>) -> Plan {
        let Some(kept) = kept else {
            return self;
        };
        let conversations = self
            .conversations
            .into_iter()
            .zip(&kept.0)
            .filter_map(|(c, keep)| Some(c.keep(keep.as_ref()?)))
            .collect();
        Plan {
            conversations,
            mask: Some(kept.to_string()),
            ..self
        }
    }

    /// The whole plan as a [`Kept`].
    fn all(&self) -> Kept {
        Kept(self.conversations.iter().map(|c| Some(c.all())).collect())
    }
}

impl Conversation {
    /// The part of this (whole) conversation that `keep` names.
    fn keep(self, keep: &Keep) -> Conversation {
        let mut steps = Vec::new();
        for (i, requests) in &keep.0 {
            let Some((_, step)) = self.steps.iter().find(|(j, _)| j == i) else {
                continue;
            };
            let step = match (step, requests) {
                (Step::Requests(all, hold), Some(chosen)) => Step::Requests(
                    chosen
                        .iter()
                        .filter_map(|&(j, plain)| {
                            let mut r = all.get(j)?.clone();
                            if plain {
                                r.framing = Framing::default();
                            }
                            Some(r)
                        })
                        .collect(),
                    *hold,
                ),
                (step, _) => step.clone(),
            };
            steps.push((*i, step));
        }
        Conversation { steps, ..self }
    }

    /// The whole conversation as a [`Keep`] (every request as generated).
    fn all(&self) -> Keep {
        Keep(
            self.steps
                .iter()
                .map(|(i, step)| match step {
                    Step::Requests(r, _) => (*i, Some((0..r.len()).map(|j| (j, false)).collect())),
                    _ => (*i, None),
                })
                .collect(),
        )
    }
}

/// Looks for a smaller part of `plan` (a whole seed's) that still fails
/// (any failure): connections left out, then steps one at a time, then
/// requests, then framings made plain; each candidate run once. Its
/// report.
fn shrunk<T: Reference>(rt: &tokio::runtime::Runtime, plan: &Plan, first: &str) -> String {
    let whole = Plan::of(plan.seed);
    let mut kept = plan.all();
    let mut last = first.to_owned();
    let fails = |k: &Kept, last: &mut String| -> bool {
        match run::<T>(rt, &whole.clone().keep(Some(k))) {
            Err(e) => {
                *last = e;
                true
            }
            Ok(_) => false,
        }
    };
    let mut try_without = |kept: &mut Kept, change: &dyn Fn(&mut Kept) -> bool| {
        let mut k = kept.clone();
        if change(&mut k) && fails(&k, &mut last) {
            *kept = k;
        }
    };
    for c in (0..kept.0.len()).rev() {
        try_without(&mut kept, &|k| k.0[c].take().is_some());
    }
    for c in 0..kept.0.len() {
        let steps = kept.0[c].as_ref().map_or(0, |keep| keep.0.len());
        for i in (0..steps).rev() {
            try_without(&mut kept, &|k| {
                k.0[c].as_mut().unwrap().0.remove(i);
                true
            });
        }
    }
    for plain in [false, true] {
        for c in 0..kept.0.len() {
            let steps = kept.0[c].as_ref().map_or(0, |keep| keep.0.len());
            for i in 0..steps {
                let n = kept.0[c].as_ref().unwrap().0[i]
                    .1
                    .as_ref()
                    .map_or(0, Vec::len);
                for j in (0..n).rev() {
                    try_without(&mut kept, &|k| {
                        let requests = k.0[c].as_mut().unwrap().0[i].1.as_mut().unwrap();
                        if plain {
                            !std::mem::replace(&mut requests[j].1, true)
                        } else {
                            requests.len() > 1 && {
                                requests.remove(j);
                                true
                            }
                        }
                    });
                }
            }
        }
    }
    let small = whole.keep(Some(&kept));
    format!("\n\nshrunk, failing with: {last}\n{small}")
}

// ---- running a conversation ----

/// What a run of a conversation came to.
#[derive(Debug)]
struct Run {
    received: Received,
    /// The streams of [`Ask::Early`] requests.
    early: Vec<u32>,
    /// Why it stopped before its end: the step, and what went wrong.
    failed: Option<String>,
}

/// Runs each of `plan`'s conversations on a connection of its own to the
/// server at `addr`, all at once, pausing if `pauses`.
async fn converse_all<T: Transport>(addr: &T::Addr, plan: &Plan, pauses: bool) -> Vec<Run> {
    let mut runs: Vec<Pin<Box<dyn Future<Output = Run> + '_>>> = plan
        .conversations
        .iter()
        .map(|c| {
            let run = converse::<T>(addr, c, plan.windows, pauses);
            Box::pin(run) as Pin<Box<dyn Future<Output = Run>>>
        })
        .collect();
    let mut done: Vec<Option<Run>> = runs.iter().map(|_| None).collect();
    poll_fn(|cx| {
        for (run, done) in runs.iter_mut().zip(&mut done) {
            if done.is_none() {
                if let Poll::Ready(r) = run.as_mut().poll(cx) {
                    *done = Some(r);
                }
            }
        }
        match done.iter().all(Option::is_some) {
            true => Poll::Ready(()),
            false => Poll::Pending,
        }
    })
    .await;
    done.into_iter().map(Option::unwrap).collect()
}

/// Has the client of `conversation`'s profile go through its steps with
/// the server at `addr`, pausing if `pauses`, then wait for every ACK and
/// send a GOAWAY.
async fn converse<T: Transport>(
    addr: &T::Addr,
    conversation: &Conversation,
    windows: Windows,
    pauses: bool,
) -> Run {
    let io = timeout(CLIENT_TIMEOUT, T::connect_h2(addr))
        .await
        .expect("connect timed out")
        .into_inner();
    let client = Client::start(io, &conversation.profile).await;
    if conversation.lazy {
        client.lazy_windows();
    }
    let mut early = Vec::new();
    let stop = |client: &Client, early, e| Run {
        received: client.received(),
        early,
        failed: Some(e),
    };
    if let Err(e) = client.try_ready(windows.opens()).await {
        return stop(&client, early, format!("the start: {e}"));
    }
    for (i, step) in &conversation.steps {
        let done = match step {
            Step::Requests(requests, hold) => {
                let framed: Vec<_> = requests
                    .iter()
                    .map(|r| (r.request(*i), r.framing.clone()))
                    .collect();
                let next = client.next_stream();
                for (j, r) in requests.iter().enumerate() {
                    if matches!(r.ask, Ask::Early(..)) {
                        early.push(next + 2 * j as u32);
                    }
                }
                let hold = hold.filter(|_| pauses);
                client.try_exchange(&framed, hold).await.map(drop)
            }
            Step::Pings { payloads, wait } => {
                let mut sent = Ok(());
                for &payload in payloads {
                    if sent.is_ok() {
                        sent = client.try_ping(payload, false).await;
                    }
                }
                match sent {
                    Ok(()) if *wait => client.settle().await,
                    sent => sent,
                }
            }
            Step::Settings { settings, wait } => client.try_settings(settings, *wait).await,
            Step::WindowUpdate(n) => {
                client.window_update(*n);
                Ok(())
            }
            Step::Priority { target, priority } => {
                let next = client.next_stream();
                let id = match *target {
                    Target::Closed(back) => next.checked_sub(2 * back).filter(|&id| id > 0),
                    Target::Idle(ahead) => Some(next + 2 * ahead),
                };
                client.priority(id.unwrap_or(next), *priority);
                Ok(())
            }
            Step::Pause(pause) => {
                if pauses {
                    client.reading(!conversation.sync);
                    tokio::time::sleep(*pause).await;
                    client.reading(true);
                }
                Ok(())
            }
        };
        if let Err(e) = done {
            return stop(&client, early, format!("step {i}: {e}"));
        }
    }
    if let Err(e) = client.settle().await {
        return stop(&client, early, format!("the last ACKs: {e}"));
    }
    let (received, failed) = match client.try_go_away().await {
        Ok(received) => (received, None),
        Err((e, received)) => (received, Some(format!("the GOAWAY: {e}"))),
    };
    Run {
        received,
        early,
        failed,
    }
}

// ---- the comparison ----

/// The fence: SETTINGS_HEADER_TABLE_SIZE = 0.
const FENCE: [u8; 6] = [0, 1, 0, 0, 0, 0];
/// The restore: SETTINGS_HEADER_TABLE_SIZE = 4,096.
const RESTORE: [u8; 6] = [0, 1, 0, 0, 0x10, 0];

/// A stream's frames with each run of DATA frames as one (flags or'ed):
/// how a body is cut into frames depends on when window comes back; and
/// each header block as one HEADERS frame (its CONTINUATION frames'
/// flags or'ed in): the server's HPACK tables differ after a sleep, and
/// so does the length of a block and where it is cut.
fn shape(frames: &[(u8, u8)]) -> Vec<(u8, u8)> {
    let mut out: Vec<(u8, u8)> = Vec::new();
    for &(kind, flags) in frames {
        match out.last_mut() {
            Some((DATA, run)) if kind == DATA => *run |= flags,
            Some((HEADERS, block)) if kind == CONTINUATION => *block |= flags,
            _ => out.push((kind, flags)),
        }
    }
    out
}

/// A response's head but `date`.
fn head(fields: &[Field]) -> Vec<Field> {
    fields
        .iter()
        .filter(|(n, _)| n != "date")
        .cloned()
        .collect()
}

/// Checks `a == b`, or says how they differ.
fn same<V: PartialEq + std::fmt::Debug>(what: &str, want: V, got: V) -> Result<(), String> {
    if want == got {
        Ok(())
    } else {
        Err(format!("{what}: plain hyper's {want:?}, dormant's {got:?}"))
    }
}

/// [`compare`] for each conversation of a plan.
fn compare_all(windows: Windows, want: &[Run], got: &[Run]) -> Result<(), String> {
    for (k, (want, got)) in want.iter().zip(got).enumerate() {
        compare(windows, want, got).map_err(|e| format!("connection {k}: {e}"))?;
    }
    Ok(())
}

/// What dormant's client received (`got`) is what plain hyper's received
/// (`want`), as the module's docs say; the first difference otherwise.
///
/// With windows other than hyper's, the server's stream WINDOW_UPDATEs
/// for request bodies come as the handler reads them, so they are left out
/// of the streams' frames; and without an opening connection WINDOW_UPDATE
/// the first one comes by timing too.
fn compare(windows: Windows, want: &Run, got: &Run) -> Result<(), String> {
    if let Some(e) = &want.failed {
        return Err(format!("plain hyper's conversation failed, {e}"));
    }
    if let Some(e) = &got.failed {
        return Err(format!(
            "dormant's conversation failed (plain hyper's did not), {e}"
        ));
    }
    let early = &want.early;
    let (want, got) = (&want.received, &got.received);
    same("the client's complaint", &want.error, &got.error)?;
    let ids = |r: &Received| r.streams.keys().copied().collect::<Vec<_>>();
    same("the streams", ids(want), ids(got))?;
    for (id, w) in &want.streams {
        let g = &got.streams[id];
        let on = |what: &str| format!("stream {id}: {what}");
        if !(w.ended && g.ended) {
            return Err(on(&format!(
                "ended: plain hyper's {}, dormant's {}",
                w.ended, g.ended
            )));
        }
        same(&on("the head"), head(&w.head), head(&g.head))?;
        let (mut w_frames, mut g_frames) = (w.frames.clone(), g.frames.clone());
        if windows != HYPER_WINDOWS {
            w_frames.retain(|&(kind, _)| kind != WINDOW_UPDATE);
            g_frames.retain(|&(kind, _)| kind != WINDOW_UPDATE);
        }
        if early.contains(id) {
            // Answered before the request's end: the server resets the
            // stream (NO_ERROR) if the response ends first, by timing.
            for (who, s) in [("plain hyper", w), ("dormant", g)] {
                if !matches!(s.reset, None | Some(NO_ERROR)) {
                    return Err(on(&format!("{who} reset it with {:?}", s.reset)));
                }
            }
            w_frames.retain(|&(kind, _)| kind != RST_STREAM);
            g_frames.retain(|&(kind, _)| kind != RST_STREAM);
        } else {
            same(&on("the server's RST_STREAM"), w.reset, g.reset)?;
        }
        if w.cancelled || g.cancelled {
            // Reset by the client: how much came depends on timing.
            let n = w.body.len().min(g.body.len());
            if w.body[..n] != g.body[..n] {
                return Err(on(&format!(
                    "(reset by the client) bodies of {} and {} bytes differ in their first {n}",
                    w.body.len(),
                    g.body.len()
                )));
            }
            continue;
        }
        if w.body != g.body {
            return Err(on(&format!(
                "plain hyper's body of {} bytes, dormant's of {}",
                w.body.len(),
                g.body.len()
            )));
        }
        same(&on("the trailers"), &w.trailers, &g.trailers)?;
        same(&on("the frames"), shape(&w_frames), shape(&g_frames))?;
    }

    // Stream 0, kind by kind: the order of frames of different kinds
    // depends on when the client's frames arrive together.
    let of = |r: &Received, kind: u8, flags: u8| -> Vec<Vec<u8>> {
        r.connection
            .iter()
            .filter(|f| (f.kind, f.flags) == (kind, flags))
            .map(|f| f.payload.clone())
            .collect()
    };
    let (sleep, settings): (Vec<Vec<u8>>, Vec<Vec<u8>>) = of(got, SETTINGS, 0)
        .into_iter()
        .partition(|p| p[..] == FENCE || p[..] == RESTORE);
    same("the server's SETTINGS", of(want, SETTINGS, 0), settings)?;
    // A restore only ever follows a fence (one that emptied the table);
    // fences may follow each other (one for streams the server reset).
    let mut fenced = false;
    for (i, p) in sleep.iter().enumerate() {
        if p[..] == RESTORE && !fenced {
            return Err(format!(
                "dormant's sleep SETTINGS {i} is a restore after no fence: {sleep:?}"
            ));
        }
        fenced = p[..] == FENCE;
    }
    same(
        "the SETTINGS ACKs",
        of(want, SETTINGS, ACK),
        of(got, SETTINGS, ACK),
    )?;
    same("the PING ACKs", of(want, PING, ACK), of(got, PING, ACK))?;
    same("the server's PINGs", of(want, PING, 0), of(got, PING, 0))?;
    let goaways = |r: &Received| -> Vec<Frame> {
        r.connection
            .iter()
            .filter(|f| f.kind == GOAWAY)
            .cloned()
            .collect()
    };
    same("the GOAWAYs", goaways(want), goaways(got))?;
    let others = |r: &Received| -> Vec<Frame> {
        r.connection
            .iter()
            .filter(|f| ![SETTINGS, PING, GOAWAY, WINDOW_UPDATE].contains(&f.kind))
            .cloned()
            .collect()
    };
    same("other frames on stream 0", others(want), others(got))?;
    let first_update = |r: &Received| -> Option<Frame> {
        r.connection
            .iter()
            .find(|f| f.kind == WINDOW_UPDATE)
            .cloned()
    };
    if windows.opens() {
        same(
            "the opening WINDOW_UPDATE",
            first_update(want),
            first_update(got),
        )?;
    }
    for (who, r) in [("plain hyper", want), ("dormant", got)] {
        if r.largest_window > i64::from(windows.connection.max(65_535)) {
            return Err(format!(
                "{who} let the client send {} bytes",
                r.largest_window
            ));
        }
    }
    same("the connection closed", want.closed, got.closed)?;
    Ok(())
}
