//! A message published to N idle WebSockets, four ways, in one run: a
//! tokio-tungstenite fan-out, an app's own room on `dormant::ws`, a
//! `dormant::ws::Topic`, and the same topic with compression. Same N,
//! same message shape, the kinds alternating.
//!
//! ```text
//! cargo bench --features ws --bench ws_broadcast
//! WSB_N=10000 WSB_ROUNDS=30 WSB_REPEAT=3 cargo bench --features ws-deflate --bench ws_broadcast
//! WSB_KINDS=dormant-topic,dormant-topic-deflate cargo bench --features ws-deflate --bench ws_broadcast
//! ```
//!
//! Under `cargo test --benches` (no `--bench` argument) it only checks that
//! it works: N = 200, 3 rounds, one repetition.
//!
//! # Kinds (`WSB_KINDS=a,b`; by default all, the last with `ws-deflate`)
//!
//! - `tokio-tungstenite`: a task per socket waiting on a
//!   `tokio::sync::broadcast` channel and its socket, as tokio's chat
//!   examples do; a publish is one `Message` into the channel;
//! - `dormant-room` (`dormant-ws` is its old name): `dormant::ws` sockets in
//!   the room an app writes itself, a `Mutex<Vec<Sender>>` held across
//!   every send of a publish (as `examples/chat.rs` did before topics);
//! - `dormant-topic`: the same sockets in a `dormant::ws::Topic`; a publish
//!   is `Topic::publish`, which sends outside the topic's lock;
//! - `dormant-topic-deflate` (feature `ws-deflate`): the same, every
//!   client offering `permessage-deflate` as browsers do (the bench fails
//!   unless the `101`s accept it): the message is compressed once per
//!   publish, and every client inflates what it reads.
//!
//! # Method
//!
//! Each measurement runs a fresh server process (this binary with
//! `WSB_ROLE=server`) on a 1-worker tokio runtime, which starts a client
//! process (`WSB_ROLE=client`, a current-thread runtime with a task per
//! socket). The client opens N WebSockets (the handshake, then nothing),
//! `WSB_SLOW` more that never read, and, for the `dormant-…` kinds, one
//! more on `/extra`, which joins nothing by itself (its sender is the
//! joiner's, below). Once all are idle (`dormant-…`: every socket asleep,
//! `Server::stats().websockets`), the server's main thread publishes
//! `WSB_ROUNDS` messages, one at a time: it notes the time, writes it into
//! the message, encodes the message once (a `Frame`; tungstenite: one
//! `Message`) and sends it to every member. The client notes when each
//! socket read it and the frame's length, then inflates it if it came
//! compressed (one inflater for all its sockets) to read the send time;
//! a round ends when every reading socket has it, the
//! client reports the round, and the server publishes the next.
//!
//! The message is a market-data event, the same shape for every kind: a
//! JSON text of about 480 bytes (`{"type":"price","symbol":"ACME",
//! "bid":101.25,…,"ts":…,"seq":…}`, [`event`]), whose `ts` is the send
//! time in microseconds since the Unix epoch and `seq` the round;
//! `WSB_SIZE` pads it to that many bytes with order-book levels.
//!
//! - **CPU per delivered message**: the server process's CPU time (the sum
//!   of its threads' run time, `/proc/self/task/*/schedstat`) from before
//!   the first round to after the last, less the joiner's and the RSS
//!   sampler's own, over N × rounds messages.
//! - **Delivery**: p50, p99 and max over the N sockets of a round, the
//!   median over the rounds.
//! - **Join wait**: while the rounds run, a thread of the server process
//!   joins and leaves over and over (`WSB_JOIN_GAP_US` apart, 500 µs by
//!   default; `0` turns it off): `dormant-room` locks the room and pushes
//!   the extra socket's sender (and later pops it), `dormant-topic…`
//!   calls `topic.subscribe(&extra)` (and `unsubscribe`),
//!   `tokio-tungstenite` calls `tx.subscribe()` (and drops the receiver).
//!   Each join is timed (`Instant`, wall clock: a preemption counts too);
//!   the max and the p99 over every join of the run.
//! - **Bytes on the wire per message**: what the client read per message
//!   and socket (the frame: header and payload), the mean; and the text
//!   it carries.
//! - **RSS** before the first round and after the last (the server's
//!   `VmRSS`), per socket; with `WSB_PEAK=1`, its peak during the rounds
//!   too, sampled every 2 ms by a thread whose own CPU time is taken out
//!   of the server's (`0` without).
//!
//! `WSB_PERF=FILE` records the server process with `perf record -g`
//! (`WSB_PERF_ARGS` replaces `-g`, e.g. `--call-graph=dwarf,32768`) from
//! before the first round to after the last, into `FILE`; its figures are
//! perf's burden too, not to be quoted.
//!
//! The slow sockets' kernel buffers fill once the rounds' bytes pass them
//! (a few hundred KiB each: use large `WSB_SIZE` and many rounds); the
//! dormant kinds then queue for them and close them (1008) past their
//! `max_queued`, tungstenite's tasks wait on their full sockets with their
//! channel's backlog. Either way, the reading sockets' delivery times are
//! what the slow ones cost the others.

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dormant::ws::{Frame, Sender, Topic};
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

#[path = "../common/deflate.rs"]
mod deflate;
#[path = "../common/ws.rs"]
mod ws;

use ws::{WEBSOCKET, cpu_ns, env, is_bench, upgrade};

/// A setting of this bench.
fn var(name: &str, default: usize) -> usize {
    env(name, default as u64) as usize
}

const KINDS: &[&str] = &[
    "tokio-tungstenite",
    "dormant-room",
    "dormant-topic",
    #[cfg(feature = "ws-deflate")]
    "dormant-topic-deflate",
];

fn main() {
    match std::env::var("WSB_ROLE").as_deref() {
        Ok("server") => server(),
        Ok("client") => client(),
        _ => orchestrate(),
    }
}

/// Microseconds since the Unix epoch.
fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_micros() as u64
}

// ---------------------------------------------------------------------------
// Orchestrator
// ---------------------------------------------------------------------------

/// What a server process reports (its `RESULT` line, in this order).
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    /// Server CPU per delivered message, ns.
    cpu: f64,
    /// Delivery, ms: medians over the rounds of each round's p50, p99, max.
    p50: f64,
    p99: f64,
    max: f64,
    /// Join waits over the run, µs, and how many joins.
    join_max: f64,
    join_p99: f64,
    joins: f64,
    /// Bytes read per message and socket: the frame, and its text.
    wire: f64,
    text: f64,
    /// RSS per socket: before, after, peak.
    rss_before: f64,
    rss_after: f64,
    rss_peak: f64,
}

impl Sample {
    const FIELDS: usize = 12;

    fn parse(line: &str) -> Sample {
        let v: Vec<f64> = line
            .split(' ')
            .map(|x| x.parse().expect("a number"))
            .collect();
        assert_eq!(v.len(), Self::FIELDS, "{line}");
        Sample {
            cpu: v[0],
            p50: v[1],
            p99: v[2],
            max: v[3],
            join_max: v[4],
            join_p99: v[5],
            joins: v[6],
            wire: v[7],
            text: v[8],
            rss_before: v[9],
            rss_after: v[10],
            rss_peak: v[11],
        }
    }

    fn line(&self) -> String {
        let v = [
            self.cpu,
            self.p50,
            self.p99,
            self.max,
            self.join_max,
            self.join_p99,
            self.joins,
            self.wire,
            self.text,
            self.rss_before,
            self.rss_after,
            self.rss_peak,
        ];
        let v: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
        v.join(" ")
    }
}

/// The kinds `WSB_KINDS` chooses (all by default), in the order they run.
fn chosen_kinds() -> Vec<&'static str> {
    let Ok(only) = std::env::var("WSB_KINDS") else {
        return KINDS.to_vec();
    };
    only.split(',')
        .map(|kind| match kind.trim() {
            // The kind's name before topics.
            "dormant-ws" => "dormant-room",
            "dormant-topic-deflate" if !KINDS.contains(&"dormant-topic-deflate") => {
                panic!("dormant-topic-deflate needs --features ws-deflate")
            }
            kind => KINDS
                .iter()
                .find(|k| **k == kind)
                .unwrap_or_else(|| panic!("unknown kind {kind}; kinds: {KINDS:?}")),
        })
        .collect()
}

fn orchestrate() {
    let bench = is_bench();
    let n = var("WSB_N", if bench { 10_000 } else { 200 });
    let rounds = var("WSB_ROUNDS", if bench { 30 } else { 3 });
    let repeat = var("WSB_REPEAT", if bench { 3 } else { 1 });
    let size = var("WSB_SIZE", 0);
    let slow = var("WSB_SLOW", 0);
    let gap = var("WSB_JOIN_GAP_US", 500);
    let kinds = chosen_kinds();
    println!(
        "publish to N = {n} idle WebSockets (+{slow} that never read), {rounds} rounds of a \
         JSON event ({}), joins every {gap} µs, {repeat} repetition(s)",
        if size == 0 {
            format!("{} B", event(0, now_us(), 0).len())
        } else {
            format!("padded to {size} B")
        }
    );
    let mut results: Vec<(&str, Vec<Sample>)> = kinds.iter().map(|k| (*k, Vec::new())).collect();
    for round in 0..repeat {
        for (kind, samples) in &mut results {
            let exe = std::env::current_exe().expect("current_exe");
            let out = Command::new("sh")
                .arg("-c")
                .arg(r#"ulimit -n "$(ulimit -Hn)" && exec "$0""#)
                .arg(exe)
                .env("WSB_ROLE", "server")
                .env("WSB_KIND", *kind)
                .env("WSB_N", n.to_string())
                .env("WSB_ROUNDS", rounds.to_string())
                .env("WSB_SIZE", size.to_string())
                .env("WSB_SLOW", slow.to_string())
                .env("WSB_JOIN_GAP_US", gap.to_string())
                .stderr(Stdio::inherit())
                .output()
                .expect("the server process");
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .unwrap_or_else(|| panic!("{kind}: no result: {text}"));
            let s = Sample::parse(line);
            println!(
                "  round {round} {kind:<22} CPU {:>6.0} ns/msg  delivery p50 {:>6.2} ms  \
                 p99 {:>6.2} ms  max {:>6.2} ms  join max {:>8.1} µs  p99 {:>8.1} µs ({:.0})  \
                 wire {:>4.0} B (text {:.0})  RSS {:>6.0} -> {:>6.0} B/socket, peak {:.0}",
                s.cpu,
                s.p50,
                s.p99,
                s.max,
                s.join_max,
                s.join_p99,
                s.joins,
                s.wire,
                s.text,
                s.rss_before,
                s.rss_after,
                s.rss_peak
            );
            samples.push(s);
        }
    }
    println!(
        "\n{:<22} {:>6} {:>8} {:>8} {:>8} {:>8} {:>12} {:>12} {:>7} {:>8} {:>22}",
        "kind",
        "N",
        "CPU ns",
        "p50 ms",
        "p99 ms",
        "max ms",
        "join max µs",
        "join p99 µs",
        "joins",
        "wire B",
        "RSS B before/peak/after"
    );
    let median = |samples: &[Sample], f: fn(&Sample) -> f64| {
        let mut v: Vec<f64> = samples.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (kind, s) in &results {
        println!(
            "{kind:<22} {n:>6} {:>8.0} {:>8.2} {:>8.2} {:>8.2} {:>12.1} {:>12.1} {:>7.0} {:>8.0} {:>10.0} / {:.0} / {:.0}",
            median(s, |s| s.cpu),
            median(s, |s| s.p50),
            median(s, |s| s.p99),
            median(s, |s| s.max),
            median(s, |s| s.join_max),
            median(s, |s| s.join_p99),
            median(s, |s| s.joins),
            median(s, |s| s.wire),
            median(s, |s| s.rss_before),
            median(s, |s| s.rss_peak),
            median(s, |s| s.rss_after)
        );
    }
    let of = |kind: &str| results.iter().find(|(k, _)| *k == kind).map(|(_, s)| s);
    if let (Some(t), Some(d)) = (of("tokio-tungstenite"), of("dormant-topic")) {
        println!(
            "\ntokio-tungstenite / dormant-topic: CPU per message {:.2}x, p99 delivery {:.2}x",
            median(t, |s| s.cpu) / median(d, |s| s.cpu),
            median(t, |s| s.p99) / median(d, |s| s.p99)
        );
    }
    if let (Some(r), Some(d)) = (of("dormant-room"), of("dormant-topic")) {
        println!(
            "dormant-room / dormant-topic: join wait max {:.1}x, p99 {:.1}x",
            median(r, |s| s.join_max) / median(d, |s| s.join_max),
            median(r, |s| s.join_p99) / median(d, |s| s.join_p99)
        );
    }
    if let (Some(d), Some(z)) = (of("dormant-topic"), of("dormant-topic-deflate")) {
        println!(
            "dormant-topic-deflate / dormant-topic: wire bytes {:.2}x, CPU per message {:.2}x",
            median(z, |s| s.wire) / median(d, |s| s.wire),
            median(z, |s| s.cpu) / median(d, |s| s.cpu)
        );
    }
}

// ---------------------------------------------------------------------------
// The message
// ---------------------------------------------------------------------------

/// A market-data event as a price feed sends it: `seq` (the round) moves
/// the prices, `ts` is the send time (µs since the Unix epoch); padded to
/// `size` bytes with order-book levels when `size` is larger.
fn event(seq: u64, ts: u64, size: usize) -> String {
    let tick = (seq % 23) as f64 * 0.01;
    let (bid, ask) = (101.25 + tick, 101.27 + tick);
    let mut text = format!(
        r#"{{"type":"price","channel":"quotes.us-equities","symbol":"ACME","name":"Acme Corporation","exchange":"XNAS","currency":"USD","bid":{bid:.2},"ask":{ask:.2},"bid_size":{},"ask_size":{},"last":{:.2},"last_size":100,"open":100.12,"high":102.48,"low":99.87,"prev_close":100.05,"change":{:.2},"change_pct":{:.4},"volume":{},"vwap":101.1834,"trades":{},"halted":false,"conditions":["@","F","T"],"tape":"C","session":"regular","source":"consolidated","ts":{ts},"seq":{seq}"#,
        1200 + (seq % 7) * 100,
        800 + (seq % 5) * 100,
        bid + 0.01,
        bid + 0.01 - 100.05,
        (bid + 0.01 - 100.05) / 100.05 * 100.0,
        18_234_500 + seq * 1_300,
        48_211 + seq * 9,
    );
    if text.len() + 1 < size {
        text.push_str(r#","book":["#);
        let mut level = 0u64;
        while text.len() + 2 < size {
            if level > 0 {
                text.push(',');
            }
            let (side, px) = match level % 2 {
                0 => ("bid", bid - (level / 2) as f64 * 0.01),
                _ => ("ask", ask + (level / 2) as f64 * 0.01),
            };
            text.push_str(&format!(
                r#"{{"side":"{side}","px":{px:.2},"qty":{},"orders":{}}}"#,
                100 * (1 + (level * 7 + seq) % 40),
                1 + (level * 3 + seq) % 9
            ));
            level += 1;
        }
        text.push(']');
    }
    text.push('}');
    text
}

/// The number after `"name":` in a JSON text.
fn field(text: &[u8], name: &str) -> u64 {
    let key = format!("\"{name}\":");
    let at = text
        .windows(key.len())
        .position(|w| w == key.as_bytes())
        .unwrap_or_else(|| panic!("no {name} in the message"))
        + key.len();
    text[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0, |n, b| n * 10 + u64::from(b - b'0'))
}

// ---------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------

fn rss() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024.0
}

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    text.split(' ')
        .next()
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(0)
}

/// Where the server's `dormant::ws` sockets go when they upgrade.
#[derive(Clone)]
enum Members {
    /// An app's room: one lock held across a publish's sends.
    Room(Arc<Mutex<Vec<Sender>>>),
    Topic(Topic),
}

/// The sockets the server publishes to.
enum Fanout {
    Dormant {
        server: dormant::Server,
        members: Members,
        /// The extra socket's sender, the joiner's.
        extra: Arc<OnceLock<Sender>>,
    },
    Tungstenite(tokio::sync::broadcast::Sender<Message>, Arc<AtomicUsize>),
}

impl Fanout {
    /// Whether every socket is handed over and idle (asleep).
    fn idle(&self, sockets: usize) -> bool {
        match self {
            Fanout::Dormant {
                server,
                members,
                extra,
            } => {
                let joined = match members {
                    Members::Room(room) => room.lock().unwrap().len(),
                    Members::Topic(topic) => topic.len(),
                };
                let ws = server.stats().websockets;
                joined == sockets
                    && extra.get().is_some()
                    && ws.open == sockets + 1
                    && ws.asleep == sockets + 1
            }
            Fanout::Tungstenite(_, ready) => ready.load(Relaxed) == sockets,
        }
    }

    /// Sends `text` to every member.
    fn publish(&self, text: String) {
        match self {
            Fanout::Dormant {
                members: Members::Room(room),
                ..
            } => {
                let frame = Frame::text(text);
                // As an app's room does it: the lock held across the sends.
                for sender in room.lock().unwrap().iter() {
                    let _ = sender.send(&frame);
                }
            }
            Fanout::Dormant {
                members: Members::Topic(topic),
                ..
            } => {
                let published = topic.publish(text);
                if published.failed > 0 {
                    eprintln!("{} sends failed", published.failed);
                }
            }
            Fanout::Tungstenite(tx, _) => {
                let _ = tx.send(Message::text(text));
            }
        }
    }

    /// What the joiner does: one join (timed), one leave.
    fn joiner(&self) -> Box<dyn FnMut() -> Duration + Send> {
        let mut joined = false;
        match self {
            Fanout::Dormant {
                members: Members::Room(room),
                extra,
                ..
            } => {
                let (room, extra) = (room.clone(), extra.get().expect("extra").clone());
                Box::new(move || {
                    joined = !joined;
                    if !joined {
                        let left = room.lock().unwrap().pop();
                        assert!(left.as_ref() == Some(&extra), "the joiner's pop");
                        return Duration::ZERO;
                    }
                    let sender = extra.clone();
                    let start = Instant::now();
                    room.lock().unwrap().push(sender);
                    start.elapsed()
                })
            }
            Fanout::Dormant {
                members: Members::Topic(topic),
                extra,
                ..
            } => {
                let (topic, extra) = (topic.clone(), extra.get().expect("extra").clone());
                Box::new(move || {
                    joined = !joined;
                    if !joined {
                        assert!(topic.unsubscribe(&extra), "the joiner's leave");
                        return Duration::ZERO;
                    }
                    let start = Instant::now();
                    assert!(topic.subscribe(&extra), "the joiner's join");
                    start.elapsed()
                })
            }
            Fanout::Tungstenite(tx, _) => {
                let tx = tx.clone();
                let mut rx = None;
                Box::new(move || {
                    if rx.take().is_some() {
                        return Duration::ZERO;
                    }
                    let start = Instant::now();
                    rx = Some(tx.subscribe());
                    start.elapsed()
                })
            }
        }
    }
}

/// A thread that joins and leaves every `gap` until `running` is false:
/// returns the joins' waits (ns) and its own CPU time.
fn spawn_joiner(
    mut step: Box<dyn FnMut() -> Duration + Send>,
    gap: Duration,
    running: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(Vec<u64>, u64)> {
    std::thread::Builder::new()
        .name("joiner".into())
        .spawn(move || {
            let start = thread_cpu_ns();
            let mut waits = Vec::new();
            let mut joins = 0usize;
            while running.load(Relaxed) {
                let waited = step();
                // Every other step is a leave.
                if joins % 2 == 0 {
                    waits.push(waited.as_nanos() as u64);
                }
                joins += 1;
                std::thread::sleep(gap);
            }
            if joins % 2 == 1 {
                step();
            }
            (waits, thread_cpu_ns() - start)
        })
        .expect("the joiner")
}

/// `perf record` on this process, if `WSB_PERF` names its output.
fn start_perf() -> Option<Child> {
    let out = std::env::var("WSB_PERF").ok()?;
    let args = std::env::var("WSB_PERF_ARGS").unwrap_or_else(|_| "-g".into());
    let child = Command::new("perf")
        .arg("record")
        .args(args.split_whitespace())
        .args(["-o", &out, "-p", &std::process::id().to_string()])
        .stdout(Stdio::null())
        .spawn()
        .expect("perf record");
    // Until it is attached.
    std::thread::sleep(Duration::from_millis(500));
    Some(child)
}

fn stop_perf(perf: Option<Child>) {
    if let Some(mut perf) = perf {
        let _ = Command::new("kill")
            .args(["-INT", &perf.id().to_string()])
            .status();
        let _ = perf.wait();
    }
}

fn server() {
    let kind = std::env::var("WSB_KIND").expect("WSB_KIND");
    let (n, rounds, size, slow) = (
        var("WSB_N", 200),
        var("WSB_ROUNDS", 3),
        var("WSB_SIZE", 0),
        var("WSB_SLOW", 0),
    );
    let gap = var("WSB_JOIN_GAP_US", 500);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let dormant = |members: Members, listener: TcpListener| {
        let _rt = rt.enter();
        let server = dormant::Server::builder().build().expect("build");
        let extra = Arc::new(OnceLock::new());
        rt.spawn(serve_dormant(
            server.clone(),
            listener,
            members.clone(),
            extra.clone(),
        ));
        Fanout::Dormant {
            server,
            members,
            extra,
        }
    };
    let fanout = match kind.as_str() {
        "dormant-room" => dormant(Members::Room(Arc::default()), listener),
        "dormant-topic" | "dormant-topic-deflate" => {
            dormant(Members::Topic(Topic::new()), listener)
        }
        "tokio-tungstenite" => {
            let (tx, _) = tokio::sync::broadcast::channel(rounds.max(16));
            let ready = Arc::new(AtomicUsize::new(0));
            rt.spawn(serve_tungstenite(listener, tx.clone(), ready.clone()));
            Fanout::Tungstenite(tx, ready)
        }
        other => panic!("unknown kind {other}"),
    };
    let mut client = Command::new(std::env::current_exe().expect("current_exe"))
        .env("WSB_ROLE", "client")
        .env("WSB_ADDR", addr.to_string())
        .env(
            "WSB_DEFLATE",
            u8::from(kind.ends_with("-deflate")).to_string(),
        )
        .env(
            "WSB_EXTRA",
            u8::from(matches!(fanout, Fanout::Dormant { .. })).to_string(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the client process");
    let mut to_client = client.stdin.take().expect("stdin");
    let mut from_client = BufReader::new(client.stdout.take().expect("stdout"));
    let mut line = String::new();
    from_client
        .read_line(&mut line)
        .expect("the client's first line");
    assert_eq!(line.trim(), "connected", "{line}");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !fanout.idle(n + slow) {
        assert!(Instant::now() < deadline, "the sockets never went idle");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let perf = start_perf();
    let rss_before = rss();
    // The RSS during the rounds: its peak, sampled every 2 ms (`WSB_PEAK=1`).
    let running = Arc::new(AtomicBool::new(true));
    let sampler = (var("WSB_PEAK", 0) == 1).then(|| {
        let running = running.clone();
        std::thread::spawn(move || {
            let start = thread_cpu_ns();
            let mut peak = 0f64;
            while running.load(Relaxed) {
                peak = peak.max(rss());
                std::thread::sleep(Duration::from_millis(2));
            }
            // Its own CPU time, which is not the server's.
            (peak, thread_cpu_ns() - start)
        })
    });
    let cpu_before = cpu_ns();
    let joiner = (gap > 0).then(|| {
        spawn_joiner(
            fanout.joiner(),
            Duration::from_micros(gap as u64),
            running.clone(),
        )
    });
    let mut per_round = Vec::new();
    for round in 0..rounds {
        fanout.publish(event(round as u64, now_us(), size));
        line.clear();
        from_client
            .read_line(&mut line)
            .expect("the client's round");
        let v: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().expect("a figure"))
            .collect();
        per_round.push(v);
    }
    running.store(false, Relaxed);
    let (waits, joiner_cpu) = joiner.map_or((Vec::new(), 0), |j| j.join().expect("the joiner"));
    let (rss_peak, sampler_cpu) = sampler.map_or((0.0, 0), |s| s.join().expect("the sampler"));
    let cpu = (cpu_ns() - cpu_before).saturating_sub(joiner_cpu + sampler_cpu);
    stop_perf(perf);
    let rss_after = rss();
    let _ = writeln!(to_client, "done");
    let _ = client.wait();
    let med = |i: usize| {
        let mut v: Vec<f64> = per_round.iter().map(|l| l[i]).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut waits = waits;
    waits.sort_unstable();
    let wait_at = |q: f64| {
        waits
            .get(((waits.len().max(1) - 1) as f64 * q) as usize)
            .map_or(0.0, |ns| *ns as f64 / 1e3)
    };
    let per_socket = |r: f64| r / (n + slow) as f64;
    let sample = Sample {
        cpu: cpu as f64 / (n * rounds) as f64,
        p50: med(0),
        p99: med(1),
        max: med(2),
        join_max: wait_at(1.0),
        join_p99: wait_at(0.99),
        joins: waits.len() as f64,
        wire: med(3),
        text: med(4),
        rss_before: per_socket(rss_before),
        rss_after: per_socket(rss_after),
        rss_peak: per_socket(rss_peak),
    };
    println!("RESULT {}", sample.line());
    std::process::exit(0);
}

async fn serve_dormant(
    server: dormant::Server,
    listener: TcpListener,
    members: Members,
    extra: Arc<OnceLock<Sender>>,
) {
    let service = hyper::service::service_fn(move |mut req| {
        let (members, extra) = (members.clone(), extra.clone());
        async move {
            let ws = match dormant::ws::WebSocketUpgrade::from_request(&mut req) {
                Ok(ws) => ws,
                Err(r) => return Ok::<_, std::convert::Infallible>(r.response::<String>()),
            };
            let sender = ws.sender();
            if req.uri().path() == "/extra" {
                assert!(extra.set(sender).is_ok(), "one extra socket");
            } else {
                match &members {
                    Members::Room(room) => room.lock().unwrap().push(sender),
                    Members::Topic(topic) => assert!(topic.subscribe(&sender)),
                }
            }
            Ok(ws.on_message((), |(), _, _| async {}).into())
        }
    });
    server.serve(listener, service).await.expect("serve");
}

async fn serve_tungstenite(
    listener: TcpListener,
    tx: tokio::sync::broadcast::Sender<Message>,
    ready: Arc<AtomicUsize>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let mut rx = tx.subscribe();
        let ready = ready.clone();
        tokio::spawn(async move {
            let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
                return;
            };
            let (mut sink, mut stream) = ws.split();
            ready.fetch_add(1, Relaxed);
            loop {
                tokio::select! {
                    message = rx.recv() => match message {
                        Ok(message) => {
                            if sink.send(message).await.is_err() {
                                return;
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(_) => return,
                    },
                    incoming = stream.next() => if incoming.is_none() {
                        return;
                    },
                }
            }
        });
    }
}

// ---------------------------------------------------------------------------
// Client process
// ---------------------------------------------------------------------------

/// The upgrade request: on `/extra` for the joiner's socket, offering
/// compression for the `-deflate` kind.
fn request(extra: bool, deflate: bool) -> Vec<u8> {
    let plain = std::str::from_utf8(WEBSOCKET).expect("ASCII");
    let mut request = plain.strip_suffix("\r\n").expect("a head").to_owned();
    if deflate {
        request.push_str(deflate::OFFER);
    }
    request.push_str("\r\n");
    if extra {
        request = request.replacen("GET / ", "GET /extra ", 1);
    }
    request.into_bytes()
}

/// What a socket reports of each message: the round, the delivery time
/// (ms), the frame's bytes and the text's.
type Delivery = (usize, f64, usize, usize);

fn client() {
    let addr: SocketAddr = std::env::var("WSB_ADDR")
        .expect("WSB_ADDR")
        .parse()
        .expect("addr");
    let (n, rounds, slow) = (var("WSB_N", 200), var("WSB_ROUNDS", 3), var("WSB_SLOW", 0));
    let (deflate, extra) = (var("WSB_DEFLATE", 0) == 1, var("WSB_EXTRA", 0) == 1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let open = |extra| async move {
            let (stream, head) = upgrade(addr, &request(extra, deflate)).await;
            assert_eq!(
                deflate::accepted(&head),
                deflate,
                "compression (not) accepted: {}",
                String::from_utf8_lossy(&head)
            );
            stream
        };
        let mut streams = Vec::new();
        for _ in 0..n + slow {
            streams.push(open(false).await);
        }
        let slow_ones: Vec<_> = streams.split_off(n);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Delivery>();
        for stream in streams {
            tokio::spawn(read_rounds(stream, Some(tx.clone())));
        }
        if extra {
            // The joiner's socket: read, not counted.
            tokio::spawn(read_rounds(open(true).await, None));
        }
        println!("connected");
        let mut per_round: Vec<Vec<Delivery>> = vec![Vec::new(); rounds];
        let mut done = 0;
        while done < rounds {
            let delivery = rx.recv().await.expect("a delivery");
            let round = delivery.0;
            per_round[round].push(delivery);
            if per_round[round].len() == n {
                let got = std::mem::take(&mut per_round[round]);
                let mut ms: Vec<f64> = got.iter().map(|d| d.1).collect();
                ms.sort_by(f64::total_cmp);
                let at = |q: f64| ms[((ms.len() - 1) as f64 * q) as usize];
                let mean = |f: fn(&Delivery) -> usize| {
                    got.iter().map(|d| f(d) as f64).sum::<f64>() / got.len() as f64
                };
                println!(
                    "round {:.3} {:.3} {:.3} {:.1} {:.1}",
                    at(0.5),
                    at(0.99),
                    ms[ms.len() - 1],
                    mean(|d| d.2),
                    mean(|d| d.3)
                );
                done += 1;
            }
        }
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        drop(slow_ones);
    });
}

thread_local! {
    /// The client's one inflater and its output (a current-thread
    /// runtime: every socket's task runs here).
    static INFLATER: RefCell<(deflate::Inflater, Vec<u8>)> =
        RefCell::new((deflate::Inflater::new(), Vec::new()));
}

/// Reads the server's text frames; reports each one's delivery to `tx`
/// (the extra socket reads without reporting).
async fn read_rounds(
    mut s: tokio::net::TcpStream,
    tx: Option<tokio::sync::mpsc::UnboundedSender<Delivery>>,
) {
    let mut buf = Vec::new();
    let mut chunk = vec![0; 64 << 10];
    loop {
        let Ok(n) = s.read(&mut chunk).await else {
            return;
        };
        if n == 0 {
            return;
        }
        // Delivered when read; inflated after.
        let now = now_us();
        buf.extend_from_slice(&chunk[..n]);
        while let Some((header, len)) = frame_len(&buf) {
            if buf.len() < header + len {
                break;
            }
            let payload = &buf[header..header + len];
            let compressed = buf[0] & deflate::RSV1 != 0;
            let (ts, round, text) = INFLATER.with(|cell| {
                let (inflater, out) = &mut *cell.borrow_mut();
                let text = if compressed {
                    inflater.inflate(payload, out);
                    &out[..]
                } else {
                    payload
                };
                (field(text, "ts"), field(text, "seq") as usize, text.len())
            });
            let ms = now.saturating_sub(ts) as f64 / 1e3;
            if let Some(tx) = &tx {
                if tx.send((round, ms, header + len, text)).is_err() {
                    return;
                }
            }
            buf.drain(..header + len);
        }
    }
}

/// A server frame's header length and payload length, once known.
fn frame_len(buf: &[u8]) -> Option<(usize, usize)> {
    match buf {
        [_, 126, a, b, ..] => Some((4, u16::from_be_bytes([*a, *b]) as usize)),
        [_, 127, rest @ ..] if rest.len() >= 8 => Some((
            10,
            u64::from_be_bytes(rest[..8].try_into().unwrap()) as usize,
        )),
        [_, len, ..] if *len < 126 => Some((2, *len as usize)),
        _ => None,
    }
}
