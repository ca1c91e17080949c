//! What a message costs the server when it wakes a sleeping WebSocket
//! (`dormant::ws`), beside an upgraded echo stream asleep in the same lot
//! (`examples/echo.rs`'s handler, `upgrade::Lot::sleep`) and a
//! tokio-tungstenite echo (a task per socket, which never sleeps): server
//! CPU time per message, and the round trip's latency.
//!
//! ```text
//! cargo bench --features ws --bench ws_wake
//! WSW_CONNS=100 WSW_THINK_MS=50 WSW_WINDOW_S=10 WSW_REPEAT=3 cargo bench --features ws --bench ws_wake
//! ```
//!
//! Under `cargo test --benches` (no `--bench` argument) it only checks that
//! it works: 10 connections, a 1 s window, one repetition.
//!
//! # Method
//!
//! Each measurement runs a fresh server process (this binary with
//! `WSW_ROLE=server`, a 1-worker tokio runtime) and a client process
//! (`WSW_ROLE=client`, a current-thread runtime). The client opens
//! `WSW_CONNS` connections, each of which sends a 64-byte message (a masked
//! binary frame; raw bytes to the echo stream) every `WSW_THINK_MS`
//! milliseconds, staggered, and reads its echo: every message finds its
//! socket asleep (dormant) or its task waiting (tungstenite). After a
//! warm-up of 2 s, the server's CPU time (its threads' run time,
//! `/proc/self/task/*/schedstat`) and the client's round trips are counted
//! over a `WSW_WINDOW_S` window: CPU per message, p50 and p99 of the round
//! trips. The kinds alternate, `WSW_REPEAT` times; the table has medians.
//!
//! With `WSW_CALLGRIND=1`, user-space instructions per message instead:
//! each server under valgrind's callgrind, run with two windows, the
//! difference of the instructions over the difference of the messages
//! (`WSW_CONNS` defaults to 10 there, `WSW_WINDOW_S` to 2 s and 6 s).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[path = "../common/ws.rs"]
mod ws;

use ws::{WEBSOCKET, cpu_ns, env, is_bench, upgrade};

const KINDS: [&str; 3] = ["tokio-tungstenite", "upgrade-echo", "dormant-ws"];
const MESSAGE: usize = 64;

fn main() {
    match std::env::var("WSW_ROLE").as_deref() {
        Ok("server") => server(),
        Ok("client") => client(),
        _ => orchestrate(),
    }
}

// ---------------------------------------------------------------------------
// Orchestrator
// ---------------------------------------------------------------------------

fn orchestrate() {
    if std::env::var("WSW_CALLGRIND").is_ok_and(|v| v == "1") {
        return instructions();
    }
    let bench = is_bench();
    let conns = env("WSW_CONNS", if bench { 100 } else { 10 });
    let think = env("WSW_THINK_MS", 50);
    let window = env("WSW_WINDOW_S", if bench { 10 } else { 1 });
    let repeat = env("WSW_REPEAT", if bench { 3 } else { 1 });
    println!(
        "a {MESSAGE}-byte message to a sleeping socket: {conns} connections, one message each \
         every {think} ms, {window} s windows, {repeat} repetition(s)"
    );
    let mut results: Vec<(&str, Vec<[f64; 4]>)> = KINDS.iter().map(|k| (*k, Vec::new())).collect();
    for round in 0..repeat {
        for (kind, samples) in &mut results {
            let out = Command::new(std::env::current_exe().expect("current_exe"))
                .env("WSW_ROLE", "server")
                .env("WSW_KIND", *kind)
                .env("WSW_CONNS", conns.to_string())
                .env("WSW_THINK_MS", think.to_string())
                .env("WSW_WINDOW_S", window.to_string())
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
            let sample = [v[0], v[1], v[2], v[3]];
            println!(
                "  round {round} {kind:<18} CPU {:>7.0} ns/message  round trip p50 {:>6.0} µs  \
                 p99 {:>6.0} µs  ({} messages)",
                sample[0], sample[1], sample[2], sample[3]
            );
            samples.push(sample);
        }
    }
    let median = |samples: &[[f64; 4]], i: usize| {
        let mut v: Vec<f64> = samples.iter().map(|s| s[i]).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "\n{:<18} {:>16} {:>14} {:>14}",
        "kind", "CPU ns/message", "p50 µs", "p99 µs"
    );
    for (kind, samples) in &results {
        println!(
            "{kind:<18} {:>16.0} {:>14.0} {:>14.0}",
            median(samples, 0),
            median(samples, 1),
            median(samples, 2)
        );
    }
    let cpu = |k: usize| median(&results[k].1, 0);
    println!(
        "\ndormant::ws / upgraded echo stream: CPU per message {:.2}x; \
         dormant::ws / tokio-tungstenite: {:.2}x",
        cpu(2) / cpu(1),
        cpu(2) / cpu(0)
    );
}

/// `WSW_CALLGRIND=1`: user-space instructions per message, each kind's
/// server under valgrind's callgrind (the client is not), run twice, with
/// windows of `WSW_WINDOW_S` and three times that: the difference of the
/// instructions over the difference of the messages, so that start-up,
/// the handshakes and the warm-up cancel out.
fn instructions() {
    let conns = env("WSW_CONNS", 10);
    let think = env("WSW_THINK_MS", 50);
    let window = env("WSW_WINDOW_S", 2);
    let dir = std::env::temp_dir().join(format!("ws_wake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    println!(
        "instructions per message (callgrind, differential): {conns} connections, a message \
         each every {think} ms, windows of {window} s and {} s",
        window * 3
    );
    for kind in KINDS {
        let mut runs = Vec::new();
        for w in [window, window * 3] {
            let out_file = dir.join(format!("{kind}-{w}.out"));
            let out = Command::new("valgrind")
                .arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", out_file.display()))
                .arg(std::env::current_exe().expect("current_exe"))
                .env("WSW_ROLE", "server")
                .env("WSW_KIND", kind)
                .env("WSW_CONNS", conns.to_string())
                .env("WSW_THINK_MS", think.to_string())
                .env("WSW_WINDOW_S", w.to_string())
                .stderr(Stdio::null())
                .output()
                .expect("valgrind (callgrind)");
            let text = String::from_utf8_lossy(&out.stdout);
            let messages: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .and_then(|l| l.split(' ').nth(3)?.parse().ok())
                .unwrap_or_else(|| panic!("{kind}: no result: {text}"));
            let profile = std::fs::read_to_string(&out_file).expect("the callgrind profile");
            let ir: f64 = profile
                .lines()
                .find_map(|l| {
                    l.strip_prefix("summary: ")
                        .or_else(|| l.strip_prefix("totals: "))
                })
                .and_then(|v| v.split(' ').next()?.parse().ok())
                .expect("the profile's total");
            runs.push((ir, messages));
        }
        let (a, b) = (runs[0], runs[1]);
        println!(
            "{kind:<18} {:>8.0} instructions per message ({:.0} more messages)",
            (b.0 - a.0) / (b.1 - a.1),
            b.1 - a.1
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------

fn server() {
    let kind = std::env::var("WSW_KIND").expect("WSW_KIND");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    match kind.as_str() {
        "dormant-ws" => rt.spawn(serve_ws(listener)),
        "upgrade-echo" => rt.spawn(serve_echo(listener)),
        "tokio-tungstenite" => rt.spawn(serve_tungstenite(listener)),
        other => panic!("unknown kind {other}"),
    };
    let mut client = Command::new(std::env::current_exe().expect("current_exe"))
        .env("WSW_ROLE", "client")
        .env("WSW_ADDR", addr.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the client process");
    let mut lines = BufReader::new(client.stdout.take().expect("stdout")).lines();
    let mut next = || {
        lines
            .next()
            .expect("a line from the client")
            .expect("a line")
    };
    assert_eq!(next(), "window start");
    let cpu_before = cpu_ns();
    let end = next();
    let cpu = cpu_ns() - cpu_before;
    let v: Vec<f64> = end
        .strip_prefix("window end ")
        .expect("window end")
        .split(' ')
        .map(|x| x.parse().expect("a number"))
        .collect();
    let _ = client.wait();
    let messages = v[0];
    println!(
        "RESULT {:.1} {:.1} {:.1} {messages}",
        cpu as f64 / messages,
        v[1],
        v[2]
    );
    std::process::exit(0);
}

async fn serve_ws(listener: TcpListener) {
    let server = dormant::Server::builder().build().expect("build");
    let service = hyper::service::service_fn(|mut req| async move {
        let ws = match dormant::ws::WebSocketUpgrade::from_request(&mut req) {
            Ok(ws) => ws,
            Err(r) => return Ok::<_, std::convert::Infallible>(r.response::<String>()),
        };
        Ok(ws
            .on_message((), |(), message, sender| async move {
                if let dormant::ws::Message::Binary(bytes) = message {
                    let _ = sender.send(bytes);
                }
            })
            .into())
    });
    server.serve(listener, service).await.expect("serve");
}

/// `examples/echo.rs`'s handler: after each message the stream sleeps in
/// the lot again.
async fn serve_echo(listener: TcpListener) {
    use dormant::upgrade::{self, Lot, Upgraded, Woken};

    fn sleep(lot: Lot, stream: Upgraded) {
        lot.clone().sleep(stream, move |woken| async move {
            if let Woken::Readable(mut stream) = woken {
                if let Ok(Some(bytes)) = stream.read_pooled().await {
                    if stream.write_all(&bytes).await.is_ok() {
                        drop(bytes);
                        sleep(lot, stream);
                    }
                }
            }
        });
    }

    let server = dormant::Server::builder().build().expect("build");
    let service = hyper::service::service_fn(|mut req| async move {
        let mut res = http::Response::new(String::new());
        if let Ok(upgrade) = upgrade::on(&mut req) {
            tokio::spawn(async move {
                if let Ok(parts) = upgrade.await {
                    let lot = parts.lot.clone();
                    sleep(lot, parts.into());
                }
            });
            *res.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
            res.headers_mut()
                .insert("connection", "upgrade".parse().unwrap());
            res.headers_mut().insert("upgrade", "echo".parse().unwrap());
        }
        Ok::<_, std::convert::Infallible>(res)
    });
    server.serve(listener, service).await.expect("serve");
}

async fn serve_tungstenite(listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                return;
            };
            while let Some(Ok(message)) = ws.next().await {
                if message.is_binary() && ws.send(message).await.is_err() {
                    return;
                }
            }
        });
    }
}

// ---------------------------------------------------------------------------
// Client process
// ---------------------------------------------------------------------------

fn client() {
    let addr: SocketAddr = std::env::var("WSW_ADDR")
        .expect("WSW_ADDR")
        .parse()
        .expect("addr");
    let kind = std::env::var("WSW_KIND").expect("WSW_KIND");
    let conns = env("WSW_CONNS", 10);
    let think = Duration::from_millis(env("WSW_THINK_MS", 50));
    let window = Duration::from_secs(env("WSW_WINDOW_S", 1));
    let warmup = Duration::from_secs(2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let ws = kind != "upgrade-echo";
        let start = tokio::time::Instant::now() + Duration::from_millis(500);
        let window_start = start + warmup;
        let window_end = window_start + window;
        let mut tasks = Vec::new();
        for i in 0..conns {
            let stream = connect(addr, ws).await;
            // Staggered over the think time.
            let first = start + think * i as u32 / conns as u32;
            tasks.push(tokio::spawn(exchange(
                stream,
                ws,
                first,
                think,
                window_start,
                window_end,
            )));
        }
        tokio::time::sleep_until(window_start).await;
        println!("window start");
        let mut rtts = Vec::new();
        for task in tasks {
            rtts.extend(task.await.expect("a connection's task"));
        }
        rtts.sort_unstable();
        let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
        println!("window end {} {:.1} {:.1}", rtts.len(), at(0.5), at(0.99));
    });
}

/// The upgrade of a connection: to a WebSocket, or to the echo protocol.
async fn connect(addr: SocketAddr, ws: bool) -> tokio::net::TcpStream {
    let request = if ws {
        WEBSOCKET
    } else {
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"
    };
    upgrade(addr, request).await.0
}

/// Sends a message every `think` from `first` on, reads its echo; returns
/// the round trips of those sent within the window.
async fn exchange(
    mut s: tokio::net::TcpStream,
    ws: bool,
    first: tokio::time::Instant,
    think: Duration,
    window_start: tokio::time::Instant,
    window_end: tokio::time::Instant,
) -> Vec<Duration> {
    let mask = [7, 11, 13, 17];
    let payload = [b'x'; MESSAGE];
    let mut out = Vec::new();
    if ws {
        out.extend_from_slice(&[0x82, 0x80 | MESSAGE as u8]);
        out.extend_from_slice(&mask);
        out.extend(payload.iter().zip(mask.iter().cycle()).map(|(b, m)| b ^ m));
    } else {
        out.extend_from_slice(&payload);
    }
    let echo_len = if ws { MESSAGE + 2 } else { MESSAGE };
    let mut echo = vec![0; echo_len];
    let mut rtts = Vec::new();
    let mut at = first;
    while at < window_end {
        tokio::time::sleep_until(at).await;
        let sent = Instant::now();
        s.write_all(&out).await.expect("write");
        s.read_exact(&mut echo).await.expect("the echo");
        if at >= window_start {
            rtts.push(sent.elapsed());
        }
        at += think;
    }
    rtts
}
