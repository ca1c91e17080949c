//! The load client of `benches/scripts/load.sh` and `wake_instructions.sh`:
//! N keep-alive HTTP/1.1 (or HTTP/2) connections to one server, in clear or
//! over TLS, each sending `GET /` after an exponentially distributed think
//! time, with the latency of every request recorded.
//!
//! ```text
//! load_client [--h2] [--tls CERT_PEM] ADDR CONNS THINK WARMUP WINDOW [CONNECT_RATE]
//! load_client 127.0.0.1:3921 5000 0.2 5 20      # 5,000 connections, 200 ms mean think time
//! load_client --h2 127.0.0.1:3921 5000 3 12 20  # the same over HTTP/2 (h2c), 3 s think times
//! load_client --tls /tmp/cert.pem 127.0.0.1:3443 100 0.2 5 10 20  # HTTPS (TLS 1.3)
//! ```
//!
//! `THINK`, `WARMUP` and `WINDOW` are in seconds (fractions allowed),
//! `CONNECT_RATE` in connections per second (default 2,000).
//!
//! It opens `CONNS` connections to `ADDR` at most `CONNECT_RATE` a second, so
//! that the server's accept queue never overflows (a dropped SYN would be
//! retried by the kernel a second later; a connect that takes over 500 ms is
//! counted as slow). Each connection then loops: sleep Exp(mean `THINK`)
//! (from its own splitmix64 generator, seeded with its index), send
//! `GET / HTTP/1.1`, read the whole response (status line and
//! `Content-Length` parsed; anything else than a complete `200` response
//! with nothing after it is an error) and record the time from before the
//! write to the response's last byte. A connection that fails (connect
//! error, malformed response, close, no response within 10 s) is reported
//! on stderr (the first 10), counted, and not retried. tokio's timer has a
//! 1 ms resolution and rounds sleeps up, so the mean think time is
//! `THINK` plus about half a millisecond.
//!
//! With `--h2`, each connection speaks HTTP/2 with prior knowledge (h2c)
//! through hyper's http2 client with its default settings, and makes its
//! requests as streams of that one connection, one at a time, with the
//! same think times: the idle connections of `load.sh` then exercise
//! dormant's h2 sleep (a think time longer than `park_after` lets a
//! connection sleep, one longer than `dormant_after` lets it go DORMANT).
//! The handshake (the client's preface and SETTINGS, written without
//! waiting for the server's) is part of the connect; a failed one is a
//! connect error. A request's latency runs from before it is handed to
//! hyper to its body's last byte; anything else than a `200` response
//! whose body is `Hello, World!` is an error, as is a failure of the
//! connection (a GOAWAY, a reset stream, a close), with the same 10 s
//! bound.
//!
//! With `--tls CERT_PEM` (built with a TLS feature: `--features tls`, or
//! `tls-ring`), each connection is HTTPS: after its TCP connect it makes a
//! TLS 1.3 handshake with tokio-rustls, as `localhost`, trusting the PEM
//! certificate `CERT_PEM` alone (the one `hello_dormant_tls` and
//! `hello_hyper_tls` were given), offering ALPN `http/1.1` (`h2` alone
//! with `--h2`) and no session resumption; then the same requests go
//! through the TLS stream. As in `benches/common/tls.rs`, the crypto
//! provider is the features' (aws-lc-rs for `tls`, ring for `tls-ring`),
//! with all its TLS 1.3 suites in its order (the server follows the
//! client's: AES-256-GCM with aws-lc-rs), or only the suite
//! `TLS_SUITE` names (`TLS_SUITE=TLS13_AES_128_GCM_SHA256`). The handshake
//! is part of the connect (a failed one is a connect error, with the same
//! 10 s bound; its time is not in `max_connect_ms`), and the `connected`
//! line names the first connection's suite (`tls=…`).
//!
//! When every connection is open (or has failed), the warm-up of `WARMUP`
//! seconds starts, then the measuring window of `WINDOW` seconds: only the
//! requests that complete inside it count. The client reports on stdout,
//! one line each, at the instant it happens, so that the script can sample
//! the server's CPU time and RSS then:
//!
//! ```text
//! connected conns=5000 connect_errors=0 slow_connects=0 max_connect_ms=1.2 ramp_ms=2500
//! window start
//! window end
//! result requests=500123 p50_us=61.2 p99_us=140.3 p999_us=410.0 max_us=1200.5 errors=0 alive=5000 client_ticks=840
//! ```
//!
//! and exits after the last line, closing its connections with a reset
//! (zero linger, so that no `TIME_WAIT` outlives the run). `alive` counts
//! the connections still open at the window's end; `errors` counts every
//! failure of the run, connects included; `client_ticks` is the client's
//! own CPU time in the window (clock ticks, `/proc/self/stat`), to show
//! whether it kept up.
//!
//! One thread on a current-thread runtime: the script pins the client to
//! one CPU, where a multi-thread runtime's workers would only share that
//! core and add cross-thread wake-ups and work stealing; one thread runs all
//! connections as local tasks sharing counters without atomics or locks, the
//! cheapest way to keep ahead of a server under 5,000 connections with
//! 5 ms think times. A connection costs its task (~1 KB: a 512-byte
//! response buffer and the socket) and tokio's registration. An HTTP/2
//! connection also has hyper's two tasks (its request dispatcher, spawned
//! here, and the h2 connection it spawns through `TokioExecutor`, both on
//! this thread's runtime) and h2's buffers, and its requests cost about as
//! much CPU time as the server spends on them (at 5,000 connections and 3 s
//! think times, 6-10% of a core each): far from saturating the client's
//! core at think times of seconds, not at 5,000 connections thinking
//! 200 ms (`cli %` in `load.sh`'s tables shows whether it kept up). A TLS
//! connection also holds its tokio-rustls stream (1,104 B, boxed, and
//! rustls's keys and buffers on the heap) and encrypts and decrypts every
//! request and response.

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::client::conn::http2;
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, sleep_until, timeout};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n";
/// The HTTP/2 request's URI: its `:scheme` and `:authority` (`Host: bench`
/// of the HTTP/1.1 request).
const H2_URI: &str = "http://bench/";
/// The body of every response.
const HELLO: &[u8] = b"Hello, World!";
/// The longest response accepted (the hello response is 89 bytes).
const RESPONSE_MAX: usize = 512;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connect slower than this has most likely had its SYN dropped.
const SLOW_CONNECT: Duration = Duration::from_millis(500);
/// Errors reported one by one on stderr; the rest are only counted.
const ERRORS_SHOWN: u64 = 10;

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("load_client: {error}");
            eprintln!(
                "usage: load_client [--h2] [--tls CERT_PEM] ADDR CONNS THINK WARMUP WINDOW [CONNECT_RATE]  (seconds; connections/s)"
            );
            return ExitCode::from(2);
        }
    };
    let tls = match args.tls.as_ref().map(|cert| connector(cert, args.h2)) {
        None => None,
        Some(Ok(connector)) => Some(connector),
        Some(Err(error)) => {
            eprintln!("load_client: --tls: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("load_client: runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, run(args, tls))
}

/// The command line.
struct Args {
    /// `--h2`: HTTP/2 (with prior knowledge, or by ALPN over TLS) instead
    /// of HTTP/1.1.
    h2: bool,
    /// `--tls CERT_PEM`: TLS 1.3, trusting this certificate.
    tls: Option<PathBuf>,
    addr: SocketAddr,
    conns: usize,
    think: Duration,
    warmup: Duration,
    window: Duration,
    connect_rate: u32,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        let mut h2 = false;
        let mut tls = None;
        // Bounded: every turn removes at least one argument.
        while args.first().is_some_and(|first| first.starts_with("--")) {
            match args.remove(0).as_str() {
                "--h2" => h2 = true,
                "--tls" if !args.is_empty() => tls = Some(PathBuf::from(args.remove(0))),
                "--tls" => return Err("--tls: no CERT_PEM".into()),
                flag => return Err(format!("unknown option {flag}")),
            }
        }
        if !(5..=6).contains(&args.len()) {
            return Err(format!("{} arguments, expected 5 or 6", args.len()));
        }
        let number = |i: usize, what: &str| -> Result<f64, String> {
            match args[i].parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                _ => Err(format!("{what}: not a number of seconds: {}", args[i])),
            }
        };
        let parsed = Args {
            h2,
            tls,
            addr: args[0]
                .parse()
                .map_err(|e| format!("ADDR {}: {e}", args[0]))?,
            conns: args[1]
                .parse()
                .map_err(|e| format!("CONNS {}: {e}", args[1]))?,
            think: Duration::from_secs_f64(number(2, "THINK")?),
            warmup: Duration::from_secs_f64(number(3, "WARMUP")?),
            window: Duration::from_secs_f64(number(4, "WINDOW")?),
            connect_rate: match args.get(5) {
                Some(rate) => rate
                    .parse()
                    .map_err(|e| format!("CONNECT_RATE {rate}: {e}"))?,
                None => 2_000,
            },
        };
        if parsed.conns == 0 || parsed.connect_rate == 0 || parsed.window.is_zero() {
            return Err("CONNS, WINDOW and CONNECT_RATE must not be zero".into());
        }
        Ok(parsed)
    }
}

/// The TLS client configuration of `--tls CERT_PEM`: TLS 1.3, the
/// certificate as the only root, ALPN `http/1.1` (`h2` alone if `h2`), no
/// resumption; the provider's suites, or the one `TLS_SUITE` names (as
/// `benches/common/tls.rs`'s `Trust::client_config`).
fn connector(cert: &Path, h2: bool) -> Result<TlsConnector, String> {
    let mut roots = RootCertStore::empty();
    let certs =
        CertificateDer::pem_file_iter(cert).map_err(|e| format!("{}: {e}", cert.display()))?;
    for cert in certs {
        roots
            .add(cert.map_err(|e| format!("a PEM certificate: {e}"))?)
            .map_err(|e| format!("a root certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no certificate", cert.display()));
    }
    let mut provider = provider()?;
    if let Ok(suite) = std::env::var("TLS_SUITE") {
        provider
            .cipher_suites
            .retain(|s| format!("{:?}", s.suite()) == suite);
        if provider.cipher_suites.is_empty() {
            return Err(format!(
                "TLS_SUITE={suite}: no such suite (e.g. TLS13_AES_128_GCM_SHA256)"
            ));
        }
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| format!("TLS 1.3: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let alpn: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
    config.alpn_protocols = vec![alpn.to_vec()];
    config.resumption = Resumption::disabled();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// The process's default crypto provider if one is installed, else the
/// one the features chose (as `hello_hyper_tls` picks it).
fn provider() -> Result<CryptoProvider, String> {
    if let Some(provider) = CryptoProvider::get_default() {
        return Ok(provider.as_ref().clone());
    }
    #[cfg(feature = "tls")]
    return Ok(rustls::crypto::aws_lc_rs::default_provider());
    #[cfg(all(feature = "tls-ring", not(feature = "tls")))]
    return Ok(rustls::crypto::ring::default_provider());
    #[cfg(not(any(feature = "tls", feature = "tls-ring")))]
    Err("no rustls crypto provider: build with `--features tls` or `--features tls-ring`".into())
}

/// Opens the connections, runs the warm-up and the window, and reports.
async fn run(args: Args, tls: Option<TlsConnector>) -> ExitCode {
    let shared = Rc::new(Shared::default());
    let ramp = ramp_up(&args, tls, &shared).await;
    let settled = shared.connected.get() + shared.connect_errors.get();
    let suite = match shared.suite.get() {
        Some(suite) => format!(" tls={suite:?}"),
        None => String::new(),
    };
    println!(
        "connected conns={} connect_errors={} slow_connects={} max_connect_ms={:.1} ramp_ms={}{suite}",
        shared.connected.get(),
        shared.connect_errors.get(),
        shared.slow_connects.get(),
        shared.max_connect.get().as_secs_f64() * 1e3,
        ramp.as_millis(),
    );
    if settled < args.conns {
        eprintln!(
            "load_client: {} connects still pending after {:?}",
            args.conns - settled,
            CONNECT_TIMEOUT
        );
        return ExitCode::FAILURE;
    }
    if shared.connected.get() == 0 {
        return ExitCode::FAILURE;
    }

    let start = tokio::time::Instant::now() + args.warmup;
    let end = start + args.window;
    shared.window.set(Some((start.into_std(), end.into_std())));
    sleep_until(start).await;
    println!("window start");
    let ticks = cpu_ticks();
    sleep_until(end).await;
    println!("window end");
    let ticks = cpu_ticks().zip(ticks).map(|(end, start)| end - start);
    shared.stop.set(true);

    let histogram = shared.latencies.borrow();
    let us = |q: f64| histogram.quantile(q) as f64 / 1e3;
    println!(
        "result requests={} p50_us={:.1} p99_us={:.1} p999_us={:.1} max_us={:.1} errors={} alive={} client_ticks={}",
        histogram.count(),
        us(0.5),
        us(0.99),
        us(0.999),
        us(1.0),
        shared.errors.get(),
        shared.alive.get(),
        ticks.map_or_else(|| "?".to_owned(), |t| t.to_string()),
    );
    ExitCode::SUCCESS
}

/// The client's own user + system CPU time so far, in clock ticks (from
/// `/proc/self/stat`), to show whether it kept up; `None` if unreadable.
fn cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields 14 and 15, counted after the command name's closing parenthesis
    // (field 2, which may hold spaces).
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ').skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// Spawns one task per connection, at most `connect_rate` a second, and
/// waits until each has connected or failed (at most `CONNECT_TIMEOUT`
/// after the last was spawned). Returns how long that took.
async fn ramp_up(args: &Args, tls: Option<TlsConnector>, shared: &Rc<Shared>) -> Duration {
    let began = Instant::now();
    let mut spawned = 0;
    // Bounded: `due` reaches `conns` after conns / connect_rate seconds.
    while spawned < args.conns {
        let due = (began.elapsed().as_secs_f64() * f64::from(args.connect_rate)) as usize + 1;
        while spawned < due.min(args.conns) {
            tokio::task::spawn_local(connection(
                spawned,
                args.addr,
                args.h2,
                tls.clone(),
                args.think,
                shared.clone(),
            ));
            spawned += 1;
        }
        sleep(Duration::from_millis(1)).await;
    }
    let deadline = Instant::now() + CONNECT_TIMEOUT + Duration::from_secs(1);
    while shared.connected.get() + shared.connect_errors.get() < args.conns
        && Instant::now() < deadline
    {
        sleep(Duration::from_millis(10)).await;
    }
    began.elapsed()
}

/// What the connections share: counters and the latency histogram.
#[derive(Default)]
struct Shared {
    connected: Cell<usize>,
    connect_errors: Cell<usize>,
    slow_connects: Cell<usize>,
    max_connect: Cell<Duration>,
    /// Connections open and not failed.
    alive: Cell<usize>,
    /// Failures of any kind, connects included.
    errors: Cell<u64>,
    /// The measuring window, once the ramp is over.
    window: Cell<Option<(Instant, Instant)>>,
    /// Set at the window's end: connections stop sending.
    stop: Cell<bool>,
    /// With `--tls`: the suite of the first handshake.
    suite: Cell<Option<rustls::CipherSuite>>,
    /// Latencies of the requests completed inside the window, in ns.
    latencies: RefCell<Histogram>,
}

impl Shared {
    fn connect_failed(&self, conn: usize, error: &str) {
        self.connect_errors.set(self.connect_errors.get() + 1);
        self.fail(conn, error);
    }

    fn fail(&self, conn: usize, error: &str) {
        let errors = self.errors.get() + 1;
        self.errors.set(errors);
        if errors <= ERRORS_SHOWN {
            eprintln!("load_client: connection {conn}: {error}");
        }
        if errors == ERRORS_SHOWN {
            eprintln!("load_client: further errors only counted");
        }
    }

    fn completed(&self, sent: Instant, done: Instant) {
        if let Some((start, end)) = self.window.get() {
            if start <= done && done < end {
                let ns = u64::try_from((done - sent).as_nanos()).unwrap_or(u64::MAX);
                self.latencies.borrow_mut().record(ns);
            }
        }
    }
}

/// One connection: connect (and with `tls` the TLS handshake, with `h2` the
/// HTTP/2 handshake), then think and request until the window ends or the
/// first error.
async fn connection(
    conn: usize,
    addr: SocketAddr,
    h2: bool,
    tls: Option<TlsConnector>,
    think: Duration,
    shared: Rc<Shared>,
) {
    let began = Instant::now();
    let connected = timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await;
    let took = began.elapsed();
    let stream = match connected {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => return shared.connect_failed(conn, &format!("connect: {error}")),
        Err(_) => return shared.connect_failed(conn, "connect: timed out"),
    };
    // Zero linger: the process's exit resets the connections instead of
    // leaving thousands in TIME_WAIT for the next run.
    if let Err(error) = stream
        .set_nodelay(true)
        .and_then(|()| stream.set_zero_linger())
    {
        return shared.connect_failed(conn, &format!("socket option: {error}"));
    }
    let mut client = match timeout(CONNECT_TIMEOUT, Client::open(stream, h2, tls, &shared)).await {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => return shared.connect_failed(conn, &error),
        Err(_) => return shared.connect_failed(conn, "handshake: timed out"),
    };
    shared.connected.set(shared.connected.get() + 1);
    shared.alive.set(shared.alive.get() + 1);
    if took > SLOW_CONNECT {
        shared.slow_connects.set(shared.slow_connects.get() + 1);
    }
    shared.max_connect.set(shared.max_connect.get().max(took));

    let mut rng = SplitMix64(0x5eed_0000_0000_0000 ^ conn as u64);
    // Bounded: ends at the window's end (and with the process, right after).
    while !shared.stop.get() {
        sleep(think.mul_f64(rng.exponential())).await;
        let sent = Instant::now();
        let result = timeout(RESPONSE_TIMEOUT, client.exchange()).await;
        let done = Instant::now();
        let error = match result {
            Ok(Ok(())) => {
                shared.completed(sent, done);
                continue;
            }
            Ok(Err(error)) => error,
            Err(_) => format!("no response within {RESPONSE_TIMEOUT:?}"),
        };
        if !shared.stop.get() {
            shared.alive.set(shared.alive.get() - 1);
            shared.fail(conn, &error);
        }
        return;
    }
}

/// A connection's side of the protocol.
enum Client {
    /// HTTP/1.1, written and parsed here, with the response's buffer.
    Http1(TcpStream, Box<[u8; RESPONSE_MAX]>),
    /// HTTP/1.1 over TLS (the stream boxed: it is 1,104 B).
    Https1(Box<TlsStream<TcpStream>>, Box<[u8; RESPONSE_MAX]>),
    /// HTTP/2 with prior knowledge, or over TLS: hyper's client, a stream
    /// per request.
    Http2(http2::SendRequest<Empty<Bytes>>),
}

impl Client {
    /// The handshakes on a connected `stream`: TLS's with `tls` (noting
    /// its suite in `shared` if it is the first), HTTP/2's with `h2`.
    async fn open(
        stream: TcpStream,
        h2: bool,
        tls: Option<TlsConnector>,
        shared: &Shared,
    ) -> Result<Client, String> {
        let Some(tls) = tls else {
            if h2 {
                return Client::handshake(stream).await;
            }
            return Ok(Client::Http1(stream, Box::new([0; RESPONSE_MAX])));
        };
        let name = ServerName::try_from("localhost").expect("a valid server name");
        let stream = tls
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS handshake: {}", describe(&e)))?;
        if shared.suite.get().is_none() {
            let suite = stream.get_ref().1.negotiated_cipher_suite();
            shared.suite.set(suite.map(|suite| suite.suite()));
        }
        if h2 {
            return Client::handshake(stream).await;
        }
        Ok(Client::Https1(
            Box::new(stream),
            Box::new([0; RESPONSE_MAX]),
        ))
    }

    /// The HTTP/2 handshake on `stream`, with hyper's connection spawned on
    /// this thread.
    async fn handshake<S>(stream: S) -> Result<Client, String>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (sender, connection) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| format!("h2 handshake: {}", describe(&e)))?;
        // Its error reaches the next request (`describe` shows it).
        tokio::task::spawn_local(connection);
        Ok(Client::Http2(sender))
    }

    /// Sends one request and reads its response to the last byte.
    async fn exchange(&mut self) -> Result<(), String> {
        match self {
            Client::Http1(stream, buf) => exchange(stream, buf).await,
            Client::Https1(stream, buf) => exchange(stream.as_mut(), buf).await,
            Client::Http2(sender) => exchange_h2(sender).await,
        }
    }
}

/// One HTTP/2 request on its own stream: the response must be `200` with
/// the body `Hello, World!`.
async fn exchange_h2(sender: &mut http2::SendRequest<Empty<Bytes>>) -> Result<(), String> {
    sender
        .ready()
        .await
        .map_err(|e| format!("h2 connection: {}", describe(&e)))?;
    let request = Request::get(H2_URI)
        .body(Empty::new())
        .expect("a GET of a valid URI");
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("h2 request: {}", describe(&e)))?;
    if response.status() != StatusCode::OK {
        return Err(format!("status {}", response.status()));
    }
    let body = Limited::new(response.into_body(), RESPONSE_MAX)
        .collect()
        .await
        .map_err(|e| format!("h2 body: {e}"))?
        .to_bytes();
    if body != HELLO {
        return Err(format!("body {body:?}"));
    }
    Ok(())
}

/// An error and its causes, `: `-separated (hyper's own message is often
/// only "connection error", its cause says which).
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    // Bounded: a chain of sources is finite.
    while let Some(error) = cause {
        text.push_str(&format!(": {error}"));
        cause = error.source();
    }
    text
}

/// Sends one HTTP/1.1 request and reads its response to the last byte.
async fn exchange<S>(stream: &mut S, buf: &mut [u8; RESPONSE_MAX]) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stream
        .write_all(REQUEST)
        .await
        .map_err(|e| format!("write: {e}"))?;
    // A no-op on a TCP stream; over TLS, sends what rustls still holds.
    stream.flush().await.map_err(|e| format!("write: {e}"))?;
    let mut len = 0;
    let mut total = None;
    // Bounded: every turn reads at least one byte into a fixed buffer.
    loop {
        if len == buf.len() {
            return Err(format!("response longer than {RESPONSE_MAX} bytes"));
        }
        let n = stream
            .read(&mut buf[len..])
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!(
                "closed by the server after {len} bytes of a response"
            ));
        }
        len += n;
        if total.is_none() {
            if let Some(head) = buf[..len].windows(4).position(|w| w == b"\r\n\r\n") {
                total = Some(head + 4 + content_length(&buf[..head])?);
            }
        }
        match total {
            Some(total) if len == total => return Ok(()),
            Some(total) if len > total => {
                return Err(format!("{} bytes past the response's end", len - total));
            }
            _ => {}
        }
    }
}

/// Checks a response head (without its blank line) for a `200` status and
/// returns its `Content-Length`.
fn content_length(head: &[u8]) -> Result<usize, String> {
    let head = std::str::from_utf8(head).map_err(|_| "response head not UTF-8".to_owned())?;
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if !status.starts_with("HTTP/1.1 200 ") {
        return Err(format!("status line {status:?}"));
    }
    let mut length = None;
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("header line {line:?}"))?;
        if name.eq_ignore_ascii_case("content-length") {
            if length.is_some() {
                return Err("two content-length headers".into());
            }
            length = Some(
                value
                    .trim()
                    .parse()
                    .map_err(|_| format!("content-length {value:?}"))?,
            );
        }
    }
    length.ok_or_else(|| "response without content-length".to_owned())
}

/// splitmix64 (Steele, Lea and Flood): small, fast, and good enough to draw
/// think times.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A draw from the exponential distribution of mean 1: -ln(U) with U
    /// uniform in (0, 1].
    fn exponential(&mut self) -> f64 {
        let u = ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        -u.ln()
    }
}

/// A log-linear histogram of `u64` values: exact below 256, then 256
/// buckets per power of two (relative error below 0.4%; a value is
/// reported as its bucket's midpoint).
struct Histogram {
    counts: Vec<u64>,
    count: u64,
    max: u64,
}

const SUB_BITS: u32 = 8;
const SUB: usize = 1 << SUB_BITS;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (64 - SUB_BITS as usize + 1) * SUB],
            count: 0,
            max: 0,
        }
    }
}

impl Histogram {
    fn record(&mut self, value: u64) {
        self.counts[Self::bucket(value)] += 1;
        self.count += 1;
        self.max = self.max.max(value);
    }

    fn count(&self) -> u64 {
        self.count
    }

    fn bucket(value: u64) -> usize {
        if value < SUB as u64 {
            return value as usize;
        }
        let exp = 63 - value.leading_zeros(); // >= SUB_BITS
        let mantissa = (value >> (exp - SUB_BITS)) as usize; // in [SUB, 2 SUB)
        (exp - SUB_BITS + 1) as usize * SUB + mantissa - SUB
    }

    /// The midpoint of bucket `index`'s values.
    fn value(index: usize) -> u64 {
        if index < SUB {
            return index as u64;
        }
        let shift = (index / SUB - 1) as u32;
        let low = ((index % SUB + SUB) as u64) << shift;
        low + (1u64 << shift) / 2
    }

    /// The value at quantile `q` (the smallest with at least `q` of the
    /// values at or below it); the exact maximum for `q` = 1, 0 if empty.
    fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        if q >= 1.0 {
            return self.max;
        }
        let rank = ((q * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::value(index).min(self.max);
            }
        }
        self.max
    }
}
