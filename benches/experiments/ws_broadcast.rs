//! A broadcast to N idle WebSockets: `dormant::ws`, whose sockets sleep in
//! the parking lot and take the message where they sleep, against a
//! tokio-tungstenite fan-out (a task per socket waiting on a
//! `tokio::sync::broadcast` channel, as tokio's chat examples do it).
//! Same N, same run, the kinds alternating.
//!
//! ```text
//! cargo bench --features ws --bench ws_broadcast
//! WSB_N=10000 WSB_ROUNDS=30 WSB_REPEAT=3 WSB_SLOW=1 cargo bench --features ws --bench ws_broadcast
//! ```
//!
//! Under `cargo test --benches` (no `--bench` argument) it only checks that
//! it works: N = 200, 3 rounds, one repetition.
//!
//! # Method
//!
//! Each measurement runs a fresh server process (this binary with
//! `WSB_ROLE=server`) on a 1-worker tokio runtime, which starts a client
//! process (`WSB_ROLE=client`, a current-thread runtime with a task per
//! socket). The client opens N WebSockets (the handshake, then nothing)
//! and `WSB_SLOW` more that never read. Once all are idle (the dormant
//! kind: all asleep), the server broadcasts `WSB_ROUNDS` messages of
//! `WSB_SIZE` bytes, one at a time: it notes the time, encodes the message
//! once (the dormant kind: one `Frame` for every socket; tungstenite: one
//! `Message` into the channel) and sends it to every socket; the message
//! carries the send time, and the client notes when each socket got it.
//! A round ends when every reading socket has the message; the client then
//! reports the round's delivery times (p50, p99, max over the N sockets),
//! and the server starts the next.
//!
//! - **CPU per delivered message**: the server process's CPU time (the sum
//!   of its threads' run time, `/proc/self/task/*/schedstat`) from before
//!   the first round to after the last, over N × rounds messages.
//! - **RSS** before the first round and after the last (the server's
//!   `VmRSS`), per socket; with `WSB_PEAK=1`, its peak during the rounds
//!   too, sampled every 2 ms by a thread whose own CPU time is taken out
//!   of the server's (`0` without: reading `/proc/self/status` that often
//!   slows the server: 4% more CPU per message, 5,066 against 4,855 ns,
//!   in one run each).
//!
//! The slow sockets' kernel buffers fill once the rounds' bytes pass them
//! (a few hundred KiB each: use large `WSB_SIZE` and many rounds); the
//! dormant kind then queues for them and closes them (1008) past its
//! `max_queued`, tungstenite's tasks wait on their full sockets with their
//! channel's backlog. Either way, the reading sockets' delivery times are
//! what the slow ones cost the others.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

#[path = "../common/ws.rs"]
mod ws;

use ws::{WEBSOCKET, cpu_ns, env, is_bench, upgrade};

/// A setting of this bench.
fn var(name: &str, default: usize) -> usize {
    env(name, default as u64) as usize
}

const KINDS: [&str; 2] = ["tokio-tungstenite", "dormant-ws"];

fn main() {
    match std::env::var("WSB_ROLE").as_deref() {
        Ok("server") => server(),
        Ok("client") => client(),
        _ => orchestrate(),
    }
}

// ---------------------------------------------------------------------------
// Orchestrator
// ---------------------------------------------------------------------------

fn orchestrate() {
    let bench = is_bench();
    let n = var("WSB_N", if bench { 10_000 } else { 200 });
    let rounds = var("WSB_ROUNDS", if bench { 30 } else { 3 });
    let repeat = var("WSB_REPEAT", if bench { 3 } else { 1 });
    let size = var("WSB_SIZE", 64).max(16);
    let slow = var("WSB_SLOW", 0);
    println!(
        "broadcast to N = {n} idle WebSockets (+{slow} that never read), {rounds} rounds of \
         {size} B, {repeat} repetition(s)"
    );
    let mut results: Vec<(&str, Vec<[f64; 7]>)> = KINDS.iter().map(|k| (*k, Vec::new())).collect();
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
                .stderr(Stdio::inherit())
                .output()
                .expect("the server process");
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .unwrap_or_else(|| panic!("{kind}: no result: {text}"));
            let v: Vec<f64> = line
                .split(' ')
                .map(|x| x.parse().expect("a number"))
                .collect();
            let sample = [v[0], v[1], v[2], v[3], v[4], v[5], v[6]];
            println!(
                "  round {round} {kind:<18} CPU {:>7.0} ns/message  delivery p50 {:>6.2} ms  \
                 p99 {:>6.2} ms  max {:>6.2} ms  RSS {:>7.0} -> {:>7.0} B/socket, peak {:>7.0}",
                sample[0], sample[1], sample[2], sample[3], sample[4], sample[5], sample[6]
            );
            samples.push(sample);
        }
    }
    println!(
        "\n{:<18} {:>7} {:>16} {:>10} {:>10} {:>10} {:>30}",
        "kind",
        "N",
        "CPU ns/message",
        "p50 ms",
        "p99 ms",
        "max ms",
        "RSS B/socket before/peak/after"
    );
    let median = |samples: &[[f64; 7]], i: usize| {
        let mut v: Vec<f64> = samples.iter().map(|s| s[i]).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    for (kind, samples) in &results {
        println!(
            "{kind:<18} {n:>7} {:>16.0} {:>10.2} {:>10.2} {:>10.2} {:>14.0} / {:.0} / {:.0}",
            median(samples, 0),
            median(samples, 1),
            median(samples, 2),
            median(samples, 3),
            median(samples, 4),
            median(samples, 6),
            median(samples, 5)
        );
    }
    let (t, d) = (&results[0].1, &results[1].1);
    println!(
        "\ntokio-tungstenite / dormant::ws: CPU per message {:.2}x, p99 delivery {:.2}x",
        median(t, 0) / median(d, 0),
        median(t, 2) / median(d, 2)
    );
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

/// The sockets the server sends to.
enum Fanout {
    Dormant(Arc<Mutex<Vec<dormant::ws::Sender>>>),
    Tungstenite(
        tokio::sync::broadcast::Sender<tokio_tungstenite::tungstenite::Message>,
        Arc<AtomicUsize>,
    ),
}

fn server() {
    let kind = std::env::var("WSB_KIND").expect("WSB_KIND");
    let (n, rounds, size, slow) = (
        var("WSB_N", 200),
        var("WSB_ROUNDS", 3),
        var("WSB_SIZE", 64),
        var("WSB_SLOW", 0),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let fanout = match kind.as_str() {
        "dormant-ws" => {
            let senders = Arc::new(Mutex::new(Vec::new()));
            rt.spawn(serve_dormant(listener, senders.clone()));
            Fanout::Dormant(senders)
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
    // Idle: every socket handed over and waiting.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let idle = match &fanout {
            Fanout::Dormant(senders) => {
                let senders = senders.lock().unwrap();
                senders.len() == n + slow && senders.iter().all(|s| s.is_asleep())
            }
            Fanout::Tungstenite(_, ready) => ready.load(Relaxed) == n + slow,
        };
        if idle {
            break;
        }
        assert!(Instant::now() < deadline, "the sockets never went idle");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let rss_before = rss();
    // The RSS during the rounds: its peak, sampled every 2 ms (`WSB_PEAK=1`).
    let peak_rss = var("WSB_PEAK", 0) == 1;
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = peak_rss.then(|| {
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let own = || {
                let text =
                    std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
                text.split(' ')
                    .next()
                    .and_then(|t| t.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let start = own();
            let mut peak = 0f64;
            while sampling.load(Relaxed) {
                peak = peak.max(rss());
                std::thread::sleep(Duration::from_millis(2));
            }
            // Its own CPU time, which is not the server's.
            (peak, own() - start)
        })
    });
    let cpu_before = cpu_ns();
    let mut lat = Vec::new();
    for round in 0..rounds {
        let sent = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let mut payload = vec![b'x'; size];
        payload[..8].copy_from_slice(&sent.to_be_bytes());
        payload[8..16].copy_from_slice(&(round as u64).to_be_bytes());
        match &fanout {
            Fanout::Dormant(senders) => {
                let frame = dormant::ws::Frame::binary(payload);
                for sender in senders.lock().unwrap().iter() {
                    let _ = sender.send(&frame);
                }
            }
            Fanout::Tungstenite(tx, _) => {
                let _ = tx.send(tokio_tungstenite::tungstenite::Message::binary(payload));
            }
        }
        line.clear();
        from_client
            .read_line(&mut line)
            .expect("the client's round");
        let v: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().expect("ms"))
            .collect();
        lat.push(v);
    }
    let cpu = cpu_ns() - cpu_before;
    sampling.store(false, Relaxed);
    let (rss_during, sampler_cpu) =
        sampler.map_or((0.0, 0), |sampler| sampler.join().expect("the RSS sampler"));
    let cpu = cpu.saturating_sub(sampler_cpu);
    let rss_after = rss();
    let _ = writeln!(to_client, "done");
    let _ = client.wait();
    let per_msg = cpu as f64 / (n * rounds) as f64;
    let med = |i: usize| {
        let mut v: Vec<f64> = lat.iter().map(|l| l[i]).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let per_socket = |r: f64| r / (n + slow) as f64;
    println!(
        "RESULT {per_msg:.1} {:.3} {:.3} {:.3} {:.1} {:.1} {:.1}",
        med(0),
        med(1),
        med(2),
        per_socket(rss_before),
        per_socket(rss_after),
        per_socket(rss_during)
    );
    std::process::exit(0);
}

async fn serve_dormant(listener: TcpListener, senders: Arc<Mutex<Vec<dormant::ws::Sender>>>) {
    let server = dormant::Server::builder().build().expect("build");
    let service = hyper::service::service_fn(move |mut req| {
        let senders = senders.clone();
        async move {
            let ws = match dormant::ws::WebSocketUpgrade::from_request(&mut req) {
                Ok(ws) => ws,
                Err(r) => return Ok::<_, std::convert::Infallible>(r.response::<String>()),
            };
            senders.lock().unwrap().push(ws.sender());
            Ok(ws.on_message((), |(), _, _| async {}).into())
        }
    });
    server.serve(listener, service).await.expect("serve");
}

async fn serve_tungstenite(
    listener: TcpListener,
    tx: tokio::sync::broadcast::Sender<tokio_tungstenite::tungstenite::Message>,
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

fn client() {
    let addr: SocketAddr = std::env::var("WSB_ADDR")
        .expect("WSB_ADDR")
        .parse()
        .expect("addr");
    let (n, rounds, slow) = (var("WSB_N", 200), var("WSB_ROUNDS", 3), var("WSB_SLOW", 0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut streams = Vec::new();
        for _ in 0..n + slow {
            streams.push(upgrade(addr, WEBSOCKET).await);
        }
        let slow_ones: Vec<_> = streams.split_off(n);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, f64)>();
        for stream in streams {
            tokio::spawn(read_rounds(stream, tx.clone()));
        }
        println!("connected");
        let mut per_round: Vec<Vec<f64>> = vec![Vec::new(); rounds];
        let mut done = 0;
        while done < rounds {
            let (round, ms) = rx.recv().await.expect("a delivery");
            per_round[round].push(ms);
            if per_round[round].len() == n {
                let mut v = std::mem::take(&mut per_round[round]);
                v.sort_by(f64::total_cmp);
                let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
                println!("round {:.3} {:.3} {:.3}", at(0.5), at(0.99), v[v.len() - 1]);
                done += 1;
            }
        }
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        drop(slow_ones);
    });
}

/// Reads the server's binary frames; reports each one's delivery time.
async fn read_rounds(
    mut s: tokio::net::TcpStream,
    tx: tokio::sync::mpsc::UnboundedSender<(usize, f64)>,
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
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        buf.extend_from_slice(&chunk[..n]);
        while let Some((header, len)) = frame_len(&buf) {
            if buf.len() < header + len {
                break;
            }
            let payload = &buf[header..header + len];
            let sent = u64::from_be_bytes(payload[..8].try_into().unwrap());
            let round = u64::from_be_bytes(payload[8..16].try_into().unwrap()) as usize;
            let ms = now.saturating_sub(sent) as f64 / 1e6;
            if tx.send((round, ms)).is_err() {
                return;
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
