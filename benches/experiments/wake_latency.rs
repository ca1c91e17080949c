//! Request → response latency on an ACTIVE, a PARKED and a DORMANT
//! connection, same run.
//!
//! One keep-alive connection sends `REQUESTS` sequential GETs with a think
//! time between them; the server is configured so that during the think time
//! the connection stays ACTIVE (`park_after: None`), parks right after each
//! response (`park_after: 0`, `dormant_after: None`) or goes dormant right
//! after parking (`park_after: 0`, `dormant_after: 0`), so every request of
//! the last two rows pays the wake from its rung. Each row prints p50 and p99
//! of the client's write → full response time; the server's stats prove
//! which rung was used. Rows alternate in two rounds to spread the machine's
//! noise.
//!
//! The `h2 …` rows do the same over HTTP/2 (h2c with prior knowledge), with
//! hyper's http2 client on a runtime of its own: an h2 connection *sleeps*
//! where an HTTP/1 one parks, after the client has acknowledged the
//! server's `SETTINGS_HEADER_TABLE_SIZE = 0` (a round trip the client's
//! connection task answers during the think time), and each of its
//! requests then wakes a fresh hyper connection.
//!
//! The `tls …` rows (built with a TLS feature) do the HTTP/1.1 rows over
//! TLS 1.3 (`TlsListener`, the client's handshake before the first
//! request), where a wake also rebuilds the session's decrypter.
//!
//! ```text
//! cargo bench --bench wake_latency            # REQUESTS=2000 per row, THINK_MS=2
//! cargo bench --features tls --bench wake_latency   # with the TLS rows
//! ```

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;

const RESPONSE_LEN: usize = 79; // "HTTP/1.1 200 OK" + content-length + date + body

async fn hello(_req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A client's connection: plain TCP, or TLS over it.
trait Conn: Read + Write {}

impl<T: Read + Write> Conn for T {}

/// Where `row`'s server listens: over TCP, or over TLS with this
/// certificate (and the client's trust in it).
#[cfg(feature = "tls-no-provider")]
type Tls<'a> = Option<&'a (tls::Identity, tls::Trust)>;
#[cfg(not(feature = "tls-no-provider"))]
type Tls<'a> = Option<&'a std::convert::Infallible>;

fn row(name: &str, builder: &dormant::Builder, requests: u64, think: Duration, over: Tls<'_>) {
    let server = builder.build().expect("valid config");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let mut conn: Box<dyn Conn> = match over {
        None => {
            rt.spawn(server.serve(listener, service_fn(hello)).into_future());
            let conn = TcpStream::connect(addr).unwrap();
            conn.set_nodelay(true).unwrap();
            Box::new(conn)
        }
        #[cfg(feature = "tls-no-provider")]
        Some((identity, trust)) => {
            let config = dormant::tls::TlsConfig::new(identity.config.clone());
            let listener = dormant::tls::TlsListener::new(listener, config);
            rt.spawn(server.serve(listener, service_fn(hello)).into_future());
            tls::connect(addr, trust, None)
        }
        #[cfg(not(feature = "tls-no-provider"))]
        Some(never) => match *never {},
    };
    let mut buf = [0u8; 256];
    let mut samples = Vec::with_capacity(requests as usize);
    for _ in 0..requests {
        std::thread::sleep(think);
        let start = Instant::now();
        conn.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut got = 0;
        while got < RESPONSE_LEN {
            let n = conn.read(&mut buf[got..]).unwrap();
            assert!(n > 0, "server closed");
            got += n;
        }
        samples.push(start.elapsed());
    }
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize];
    let s = server.stats();
    println!(
        "{name:<11} p50 {:>7.1} µs   p99 {:>7.1} µs   (parks {}, dormancies {}, lot wakes {})",
        pct(0.50).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        s.parks,
        s.dormancies,
        s.lot_wakes,
    );
    drop(conn);
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// [`row`] over HTTP/2: one h2c connection, `requests` sequential GETs.
fn h2_row(name: &str, builder: &dormant::Builder, requests: u64, think: Duration) {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let server = builder.build().expect("valid config");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(server.serve(listener, service_fn(hello)).into_future());

    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut samples = Vec::with_capacity(requests as usize);
    client.block_on(async {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("h2 handshake");
        tokio::spawn(conn);
        for _ in 0..requests {
            // Async, so that the client's connection task answers what the
            // server sends meanwhile (its SETTINGS, the fence).
            tokio::time::sleep(think).await;
            let start = Instant::now();
            let req = Request::get("http://localhost/")
                .body(Empty::<Bytes>::new())
                .unwrap();
            let res = send.send_request(req).await.expect("h2 response");
            let body = res.into_body().collect().await.expect("h2 body");
            assert_eq!(body.to_bytes(), "Hello, World!");
            samples.push(start.elapsed());
        }
    });
    samples.sort();
    let pct = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize];
    let s = server.stats();
    println!(
        "{name:<11} p50 {:>7.1} µs   p99 {:>7.1} µs   (sleeps {}, dormancies {}, lot wakes {}, declines {:?})",
        pct(0.50).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        s.parks,
        s.dormancies,
        s.lot_wakes,
        s.h2_sleep_declines,
    );
    drop(client);
    rt.shutdown_timeout(Duration::from_secs(1));
}

#[cfg(feature = "tls-no-provider")]
#[path = "../common/tls.rs"]
mod tls;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` probes every bench binary.
    }
    #[cfg(feature = "tls-no-provider")]
    let dir = std::env::temp_dir().join(format!("dormant-wake-latency-{}", std::process::id()));
    #[cfg(feature = "tls-no-provider")]
    let over_tls = {
        std::fs::create_dir_all(&dir).unwrap();
        let identity = tls::Identity::self_signed(&dir);
        let trust = tls::Trust::new(identity.cert.clone());
        (identity, trust)
    };
    let requests = env("REQUESTS", 2000);
    let think = Duration::from_millis(env("THINK_MS", 2));
    println!("{requests} sequential requests, think time {think:?}, server on 1 worker thread");
    let ms = Duration::from_millis;
    let mut active = dormant::Server::builder();
    active.park_after(None).dormant_after(None);
    let mut parked = dormant::Server::builder();
    parked.park_after(ms(0)).dormant_after(None);
    let mut asleep = dormant::Server::builder();
    asleep.park_after(ms(0)).dormant_after(ms(0));
    // Interleave rows to spread the machine's noise over all three.
    for round in 0..2 {
        println!("round {}", round + 1);
        row("ACTIVE", &active, requests / 2, think, None);
        row("PARKED", &parked, requests / 2, think, None);
        row("DORMANT", &asleep, requests / 2, think, None);
        #[cfg(feature = "tls-no-provider")]
        {
            row("tls ACTIVE", &active, requests / 2, think, Some(&over_tls));
            row("tls PARKED", &parked, requests / 2, think, Some(&over_tls));
            row("tls DORMANT", &asleep, requests / 2, think, Some(&over_tls));
        }
        h2_row("h2 ACTIVE", &active, requests / 2, think);
        h2_row("h2 PARKED", &parked, requests / 2, think);
        h2_row("h2 DORMANT", &asleep, requests / 2, think);
    }
    #[cfg(feature = "tls-no-provider")]
    let _ = std::fs::remove_dir_all(&dir);
}
