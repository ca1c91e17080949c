//! The processes of a memory bench (`idle_memory`, `upgrade_memory`) and
//! how they talk, shared so that each bench keeps only its kinds, its
//! servers and its client's exchange. Each (in `benches/experiments/`)
//! includes this file with `#[path = "../common/procs.rs"] mod procs;`,
//! next to `memory.rs` as `mod memory` (which this file uses), describes
//! itself with a [`Bench`] and calls [`main`].
//!
//! One binary plays three roles, chosen by `{PREFIX}_ROLE`:
//!
//! - unset: the *orchestrator*, which runs every kind `{PREFIX}_REPEAT`
//!   times, each in a fresh server process, reads each one's `RESULT` line
//!   and prints the rounds and a table of medians;
//! - `server`: a *server process* for one kind (`{PREFIX}_KIND`), which
//!   starts the bench's server ([`serve`]), takes the *before* readings,
//!   has its client open `{PREFIX}_N` connections in two halves, waits
//!   until each half is idle and takes readings after each (*mid*,
//!   *after*), and prints `RESULT`;
//! - `client`: that server's *client process* ([`client_main`]), which
//!   opens the connections with the bench's per-connection exchange, given
//!   the kind (`{PREFIX}_KIND`) as well.
//!
//! Children are started through `sh -c 'ulimit -n "$(ulimit -Hn)"; exec …'`,
//! which raises their soft `RLIMIT_NOFILE` to the hard limit.
//!
//! A kind is served over TCP on `127.0.0.1`; over a Unix socket if its
//! name starts with `unix-`: the server process then binds a socket in a
//! fresh directory under the system's temporary directory and removes both
//! when it ends; over TLS on TCP if its name starts with `tls-` (built with
//! a TLS feature, see `common/tls.rs`): the server process then makes a
//! self-signed certificate before anything is measured, writes it into
//! such a directory, and its client trusts that file. A bench with such
//! kinds has a listener of each transport ([`Listen`]) and an exchange on
//! a [`Conn`] (`fn(&mut Conn)`), which this file opens over the kind's
//! transport (TLS included: the exchange reads and writes plaintext), or
//! an exchange of its own that opens the connection for the kind and
//! keeps what it likes of it ([`Connect`]: `idle_memory`'s HTTP/2 kinds);
//! a TCP-only bench may take a `TcpListener` and connect by itself
//! (`fn(SocketAddr) -> TcpStream`).

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
#[cfg(feature = "tls-no-provider")]
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::memory::{Reading, env_usize, is_bench, median, wait_heap_stable};

/// The `tls-…` kinds' certificate, server configuration and client.
#[cfg(feature = "tls-no-provider")]
#[path = "tls.rs"]
pub(crate) mod tls;

const DEFAULT_N: usize = 10_000;
const DEFAULT_REPEAT: usize = 3;
const SMOKE_N: usize = 200;

/// Connections the client opens and closes, one after another, before the
/// *before* readings: one-time allocations (runtime, pools, thread caches)
/// must not count as per-connection cost.
pub(crate) const WARMUP: usize = 64;

/// What differs between the memory benches, apart from their servers. `C`
/// is the shape of the client's exchange ([`Connect`]): the default
/// connects over TCP by itself.
pub(crate) struct Bench<C = fn(SocketAddr) -> TcpStream> {
    /// Prefix of the environment variables: `IDLE` for `IDLE_N`,
    /// `IDLE_REPEAT`, `IDLE_ROLE` and `IDLE_KIND`.
    pub(crate) prefix: &'static str,
    /// What is measured, the start of the first line of the output.
    pub(crate) title: &'static str,
    /// The server kinds, in the order they run within one repetition; the
    /// first is the baseline of the ratios. Those named `unix-…` are served
    /// over a Unix socket, those named `tls-…` over TLS.
    pub(crate) kinds: &'static [&'static str],
    /// Width of the kind column.
    pub(crate) kind_width: usize,
    /// Kinds set against a baseline after the table, each with the name it
    /// goes by there. The baseline is the first kind under the longest
    /// prefix of the kind's name, up to a `-`, under which the bench has
    /// it (`tls-parked` against `tls-hyper-util` and `tls-h2-parked`
    /// against `tls-h2-hyper-util` if the first kind is `hyper-util`), else
    /// the first kind.
    pub(crate) ratios: &'static [(&'static str, &'static str)],
    /// One connection of the client process: one exchange with the server
    /// on a new connection, which stays open ([`Connect`]).
    pub(crate) connect: C,
}

impl<C> Bench<C> {
    /// `{PREFIX}_{name}`.
    fn var(&self, name: &str) -> String {
        format!("{}_{name}", self.prefix)
    }

    /// N: the first argument that is a number, or `{PREFIX}_N`, or the
    /// default (`SMOKE_N` under `cargo test`).
    fn conn_count(&self) -> usize {
        let default = if is_bench() { DEFAULT_N } else { SMOKE_N };
        std::env::args()
            .skip(1)
            .find_map(|a| a.parse().ok())
            .unwrap_or_else(|| env_usize(&self.var("N"), default))
    }

    /// This binary again, with its fd soft limit raised to the hard limit.
    fn reexec(&self, role: &str, kind: &str) -> Command {
        let exe = std::env::current_exe().expect("current_exe");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"ulimit -n "$(ulimit -Hn)" && exec "$0""#)
            .arg(exe)
            .env(self.var("ROLE"), role)
            .env(self.var("KIND"), kind);
        cmd
    }
}

/// The bench's `main`: plays the role `{PREFIX}_ROLE` asks for, `server`
/// through the bench's `server_main` (which calls [`serve`]).
pub(crate) fn main<C: Connect>(bench: &Bench<C>, server_main: fn()) {
    match std::env::var(bench.var("ROLE")).as_deref() {
        Ok("server") => server_main(),
        Ok("client") => client_main(bench),
        _ => orchestrate(bench),
    }
}

// ---------------------------------------------------------------------------
// Orchestrator: one fresh server process per measurement
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct Sample {
    heap: f64,
    allocs: f64,
    rss: f64,
    /// `None` where the allocator cannot be trimmed.
    rss_trimmed: Option<f64>,
    /// Trimmed RSS growth over the second half of the connections only.
    rss_marginal: Option<f64>,
    secs: f64,
}

impl Sample {
    /// Parses what follows `RESULT ` (see [`serve`]).
    fn parse(line: &str) -> Self {
        let v: Vec<&str> = line.split_whitespace().collect();
        let num = |x: &str| -> f64 { x.parse().expect("RESULT field") };
        Sample {
            heap: num(v[0]),
            allocs: num(v[1]),
            rss: num(v[2]),
            rss_trimmed: (v[3] != "n/a").then(|| num(v[3])),
            rss_marginal: (v[4] != "n/a").then(|| num(v[4])),
            secs: num(v[5]),
        }
    }
}

/// A figure in bytes, or `n/a`.
fn bytes_or_na(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.0}"))
}

fn orchestrate<C: Connect>(bench: &Bench<C>) {
    let n = bench.conn_count();
    let repeat = env_usize(
        &bench.var("REPEAT"),
        if is_bench() { DEFAULT_REPEAT } else { 1 },
    )
    .max(1);
    let w = bench.kind_width;
    println!("{}, N = {n}, {repeat} repetition(s), medians", bench.title);
    println!("(each measurement in a fresh server process; client in its own process)");
    // `{PREFIX}_KINDS=a,b`: those kinds alone (each with its baseline, if
    // it is to be set against one: name it too). By default, those whose
    // client is this program.
    let only = std::env::var(bench.var("KINDS")).ok();
    let chosen = |kind: &str| match only.as_deref() {
        Some(only) => only.split(',').any(|k| k == kind),
        None => bench.connect.external(kind).is_none(),
    };
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); bench.kinds.len()];
    for round in 0..repeat {
        for (k, kind) in bench.kinds.iter().enumerate() {
            if !chosen(kind) {
                continue;
            }
            let out = bench
                .reexec("server", kind)
                .env(bench.var("N"), n.to_string())
                .stdout(Stdio::piped())
                .output()
                .expect("spawning the server process");
            assert!(
                out.status.success(),
                "{kind} server process failed: {}",
                out.status
            );
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout
                .lines()
                .find_map(|l| l.strip_prefix("RESULT "))
                .unwrap_or_else(|| panic!("{kind}: no RESULT line in {stdout:?}"));
            let s = Sample::parse(line);
            println!(
                "  round {round} {kind:<w$} heap {:>8.0} B/conn  allocs {:>5.2}/conn  RSS {:>8.0} B/conn  trimmed {:>8} B/conn  2nd half {:>8} B/conn  ({:.1} s)",
                s.heap,
                s.allocs,
                s.rss,
                bytes_or_na(s.rss_trimmed),
                bytes_or_na(s.rss_marginal),
                s.secs
            );
            samples[k].push(s);
        }
    }

    let med = |k: usize, f: fn(&Sample) -> f64| median(samples[k].iter().map(f).collect());
    let med_opt = |k: usize, f: fn(&Sample) -> Option<f64>| {
        let v: Option<Vec<f64>> = samples[k].iter().map(f).collect();
        v.map(median)
    };
    println!();
    println!(
        "{:<w$} {:>6}  {:>12}  {:>12}  {:>12}  {:>18}  {:>22}",
        "kind",
        "N",
        "heap B/conn",
        "allocs/conn",
        "RSS B/conn",
        "RSS trimmed B/conn",
        "trimmed 2nd half B/conn"
    );
    for (k, kind) in bench.kinds.iter().enumerate() {
        if samples[k].is_empty() {
            continue;
        }
        println!(
            "{:<w$} {:>6}  {:>12.0}  {:>12.2}  {:>12.0}  {:>18}  {:>22}",
            kind,
            n,
            med(k, |s| s.heap),
            med(k, |s| s.allocs),
            med(k, |s| s.rss),
            bytes_or_na(med_opt(k, |s| s.rss_trimmed)),
            bytes_or_na(med_opt(k, |s| s.rss_marginal))
        );
    }
    // Ratios of medians, the baseline over each kind named.
    println!();
    let position = |kind: &str| bench.kinds.iter().position(|x| *x == kind);
    for (kind, name) in bench.ratios {
        let k = position(kind).expect("a ratio names a kind");
        // The first kind under the longest prefix that has it.
        let b = kind
            .rmatch_indices('-')
            .find_map(|(i, _)| position(&format!("{}{}", &kind[..=i], bench.kinds[0])))
            .unwrap_or(0);
        let base = bench.kinds[b];
        if samples[k].is_empty() || samples[b].is_empty() {
            continue;
        }
        let ratio = |f: fn(&Sample) -> f64| med(b, f) / med(k, f);
        println!(
            "{base} / {name}: heap {:.1}x, RSS {:.1}x",
            ratio(|s| s.heap),
            ratio(|s| s.rss)
        );
    }
}

// ---------------------------------------------------------------------------
// Server process
// ---------------------------------------------------------------------------

/// The server under test, as the server process's measuring thread sees it.
pub(crate) trait UnderTest {
    /// Waits until the server is done with the [`WARMUP`] connections the
    /// client opened and closed.
    fn wait_warmed_up(&self);

    /// Waits until the `n` connections the client opened after the warm-up
    /// have all been served and are idle.
    fn wait_idle(&self, n: usize);
}

/// The server process. Starts the bench's server on a 2-worker runtime with
/// `start(kind, listener, stop)`, called in the runtime's context (so
/// `tokio::spawn` spawns on it) with the kind to run (`{PREFIX}_KIND`), a
/// listener bound for it ([`Listen`]) and a channel that fires when the
/// server should stop; `start` returns the server as [`UnderTest`] and the
/// task serving it. Then measures, and prints one line, `RESULT` and per
/// connection: live heap bytes, live allocations, RSS bytes, RSS bytes
/// after trimming the allocator (`n/a` where it cannot be trimmed), the
/// same trimmed growth from *mid* to *after* per connection of the second
/// half, then the seconds from opening the connections to the *after*
/// readings. The *mid* reading trims too, so the untrimmed RSS growth
/// includes what the second half faulted back in of pages the first
/// half's trim returned.
pub(crate) fn serve<C: Connect, L: Listen, T: UnderTest>(
    bench: &Bench<C>,
    start: impl FnOnce(&str, L, oneshot::Receiver<()>) -> (T, JoinHandle<()>),
) {
    let n = env_usize(&bench.var("N"), DEFAULT_N);
    let kind = std::env::var(bench.var("KIND"))
        .unwrap_or_else(|_| panic!("{} is not set", bench.var("KIND")));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let unix = kind.starts_with("unix-");
    let tls = kind.starts_with("tls-");
    let temp_dir = (unix || tls).then(|| TempDir::create(bench));
    let (stop_tx, stop) = oneshot::channel::<()>();
    let (server, task, to) = {
        let _rt = rt.enter();
        let (listener, to) = match &temp_dir {
            Some(dir) if tls => listen_tls::<L>(dir),
            Some(dir) => L::listen(Some(&dir.socket())),
            None => L::listen(None),
        };
        let (server, task) = start(&kind, listener, stop);
        (server, task, to)
    };

    let mut client = Client::spawn(bench, &kind);

    client.command(&format!("cycle {WARMUP} {to}"));
    server.wait_warmed_up();
    std::thread::sleep(Duration::from_millis(200));
    wait_heap_stable();
    let before = Reading::take();

    // The connections come in two halves, with a reading in between: the
    // second half's trimmed growth is what one more connection costs once
    // the allocator's fixed overhead is paid.
    let start = Instant::now();
    let half = n / 2;
    client.command(&format!("open {half} {to}"));
    server.wait_idle(half);
    wait_heap_stable();
    let mid = Reading::take();
    client.command(&format!("open {} {to}", n - half));
    server.wait_idle(n);
    wait_heap_stable();
    let secs = start.elapsed().as_secs_f64();
    let after = Reading::take();

    let per = |a: i64, b: i64, count: usize| (b - a) as f64 / count as f64;
    let trimmed = |from: &Reading, count: usize| match (from.rss_trimmed, after.rss_trimmed) {
        (Some(a), Some(b)) => format!("{:.1}", per(a, b, count)),
        _ => "n/a".to_owned(),
    };
    println!(
        "RESULT {:.1} {:.3} {:.1} {} {} {:.2}",
        per(before.heap, after.heap, n),
        per(before.allocs, after.allocs, n),
        per(before.rss, after.rss, n),
        trimmed(&before, n),
        trimmed(&mid, n - half),
        secs
    );

    client.close();
    let _ = stop_tx.send(());
    rt.block_on(async {
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// The listener the server process binds for a kind and hands the bench's
/// `start`: a `TcpListener`, or a bench's own type for each transport.
pub(crate) trait Listen: Sized {
    /// Binds, in the runtime's context: on the Unix socket `unix` for a
    /// `unix-…` kind, else on `127.0.0.1:0`. Returns the listener and
    /// where the client connects.
    fn listen(unix: Option<&Path>) -> (Self, Endpoint);

    /// For a `tls-…` kind: TLS with `config` on `listener` (bound on
    /// `127.0.0.1:0`, [`bind_tcp`]). A bench without TLS kinds keeps this
    /// default, which refuses.
    #[cfg(feature = "tls-no-provider")]
    fn tls(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> Self {
        drop((listener, config));
        panic!("this bench has no TLS kinds")
    }
}

/// Binds a TCP listener on `127.0.0.1:0`, in the runtime's context.
pub(crate) fn bind_tcp() -> (TcpListener, SocketAddr) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("local_addr");
    let listener = TcpListener::from_std(listener).expect("listener");
    (listener, addr)
}

/// For a bench whose kinds all run over TCP (`upgrade_memory`).
impl Listen for TcpListener {
    fn listen(unix: Option<&Path>) -> (Self, Endpoint) {
        assert!(unix.is_none(), "this bench serves over TCP only");
        let (listener, addr) = bind_tcp();
        (listener, Endpoint::Tcp(addr))
    }
}

/// A `tls-…` kind's listener: a self-signed certificate written into
/// `dir`, a TCP listener with TLS on it ([`Listen::tls`]), and the
/// endpoint that tells the client the certificate to trust.
#[cfg(feature = "tls-no-provider")]
fn listen_tls<L: Listen>(dir: &TempDir) -> (L, Endpoint) {
    let tls::Identity { config, cert } = tls::Identity::self_signed(&dir.0);
    let (listener, addr) = bind_tcp();
    (
        L::tls(listener, config),
        Endpoint::Tls(addr, tls::Trust::new(cert)),
    )
}

#[cfg(not(feature = "tls-no-provider"))]
fn listen_tls<L: Listen>(_: &TempDir) -> (L, Endpoint) {
    panic!("the tls-… kinds need a TLS feature: `--features tls` or `--features tls-ring`")
}

/// A fresh directory for a `unix-…` kind's socket or a `tls-…` kind's
/// certificate under the system's temporary directory, removed with what
/// it holds when dropped, also when a measurement panics.
struct TempDir(PathBuf);

impl TempDir {
    fn create<C>(bench: &Bench<C>) -> Self {
        // The pid is unique among live processes; the clock's nanoseconds
        // keep a directory a killed run left behind (same pid, later) from
        // making `create_dir` fail.
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "dormant-{}-{}-{nanos}",
            bench.prefix.to_lowercase(),
            std::process::id()
        ));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        TempDir(dir)
    }

    fn socket(&self) -> PathBuf {
        self.0.join("http.sock")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            eprintln!("removing {}: {e}", self.0.display());
        }
    }
}

/// The server process's handle on its client process.
struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Client {
    fn spawn<C: Connect>(bench: &Bench<C>, kind: &str) -> Self {
        let mut command = (bench.connect)
            .external(kind)
            .unwrap_or_else(|| bench.reexec("client", kind));
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning the client process");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Client {
            child,
            stdin,
            stdout,
        }
    }

    /// Sends one command line and waits for `ready`.
    fn command(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").expect("client stdin");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("client stdout");
        assert_eq!(line.trim(), "ready", "client answered {line:?} to {cmd:?}");
    }

    /// Closes every connection and waits for the client to exit.
    fn close(mut self) {
        writeln!(self.stdin, "close").expect("client stdin");
        drop(self.stdin);
        let status = self.child.wait().expect("client wait");
        assert!(status.success(), "client failed: {status}");
    }
}

// ---------------------------------------------------------------------------
// Client process
// ---------------------------------------------------------------------------

/// Where the server process listens, as it tells its client process:
/// `tcp:ADDR`, `unix:PATH`, or `tls:ADDR CERT_PATH` (the certificate to
/// trust, PEM).
#[derive(Debug)]
pub(crate) enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
    #[cfg(feature = "tls-no-provider")]
    Tls(SocketAddr, tls::Trust),
}

impl Endpoint {
    /// Parses what [`Display`](fmt::Display) wrote.
    fn parse(s: &str) -> Self {
        if let Some(path) = s.strip_prefix("unix:") {
            return Endpoint::Unix(path.into());
        }
        #[cfg(feature = "tls-no-provider")]
        if let Some(rest) = s.strip_prefix("tls:") {
            let (addr, cert) = rest.split_once(' ').expect("tls:ADDR CERT_PATH");
            let addr = addr.parse().expect("addr");
            return Endpoint::Tls(addr, tls::Trust::new(cert.into()));
        }
        let addr = s.strip_prefix("tcp:").expect("an endpoint");
        Endpoint::Tcp(addr.parse().expect("addr"))
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(addr) => write!(f, "tcp:{addr}"),
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
            #[cfg(feature = "tls-no-provider")]
            Endpoint::Tls(addr, trust) => write!(f, "tls:{addr} {}", trust.cert.display()),
        }
    }
}

/// A connection of the client process, over the kind's transport.
#[derive(Debug)]
pub(crate) enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// rustls's blocking client over a `TcpStream` (boxed: the session is
    /// large and the client holds N of them).
    #[cfg(feature = "tls-no-provider")]
    Tls(Box<tls::ClientStream>),
}

impl Conn {
    /// Connects to `to`, with a read timeout, so that a server that does
    /// not answer fails the bench instead of hanging it.
    pub(crate) fn open(to: &Endpoint) -> Self {
        let timeout = Some(Duration::from_secs(10));
        match to {
            Endpoint::Tcp(addr) => {
                let s = TcpStream::connect(addr).expect("connect");
                s.set_read_timeout(timeout).expect("timeout");
                Conn::Tcp(s)
            }
            Endpoint::Unix(path) => {
                let s = UnixStream::connect(path).expect("connect");
                s.set_read_timeout(timeout).expect("timeout");
                Conn::Unix(s)
            }
            #[cfg(feature = "tls-no-provider")]
            Endpoint::Tls(addr, trust) => Conn::Tls(tls::connect(*addr, trust, timeout)),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
            #[cfg(feature = "tls-no-provider")]
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
            #[cfg(feature = "tls-no-provider")]
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.flush(),
            Conn::Unix(s) => s.flush(),
            #[cfg(feature = "tls-no-provider")]
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// The client's exchange ([`Bench::connect`]): opens one connection of
/// `kind` to the server process, does the bench's exchange on it and
/// returns what keeps it open.
pub(crate) trait Connect {
    /// What the client process holds of an open connection; dropping it
    /// closes the connection.
    type Open;

    fn connect(&self, kind: &str, to: &Endpoint) -> Self::Open;

    /// Whether `open` has been closed (by the server) since it was opened,
    /// where the exchange can tell without reading from it; the client
    /// asks before it closes everything, and fails if any was.
    fn closed(&self, open: &Self::Open) -> bool {
        let _ = open;
        false
    }

    /// A program of another language that is the client process of
    /// `kind` instead of this one (it speaks `client_main`'s protocol);
    /// `None` for this one.
    fn external(&self, kind: &str) -> Option<Command> {
        let _ = kind;
        None
    }
}

/// A TCP exchange that connects by itself, for a bench whose kinds all run
/// over TCP (its server process refuses `unix-…` kinds: [`Listen`]).
impl Connect for fn(SocketAddr) -> TcpStream {
    type Open = TcpStream;

    fn connect(&self, _: &str, to: &Endpoint) -> TcpStream {
        match to {
            Endpoint::Tcp(addr) => self(*addr),
            _ => panic!("this bench's exchange is TCP only"),
        }
    }
}

/// An exchange on a connection this file opens, over either transport,
/// the same for every kind.
impl Connect for fn(&mut Conn) {
    type Open = Conn;

    fn connect(&self, _: &str, to: &Endpoint) -> Conn {
        let mut conn = Conn::open(to);
        self(&mut conn);
        conn
    }
}

/// Commands on stdin, one per line; answers `ready` to each:
///
/// - `cycle K ENDPOINT`: K connections, one after another, each does the
///   bench's exchange ([`Bench::connect`]) and closes;
/// - `open N ENDPOINT`: N connections, one after another, each does the
///   bench's exchange and stays open;
/// - `close` (or EOF): close everything and exit; fails if the exchange
///   tells that any of them was closed meanwhile ([`Connect::closed`]).
///
/// The endpoint ([`Endpoint`]) is the rest of the line: a socket's path
/// may hold spaces.
fn client_main<C: Connect>(bench: &Bench<C>) {
    let kind = std::env::var(bench.var("KIND")).unwrap_or_default();
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    let mut open: Vec<C::Open> = Vec::new();
    for line in stdin.lock().lines() {
        let line = line.expect("stdin");
        let words: Vec<&str> = line.splitn(3, ' ').collect();
        match words.as_slice() {
            ["cycle", k, to] | ["open", k, to] => {
                let k: usize = k.parse().expect("count");
                let to = Endpoint::parse(to);
                for _ in 0..k {
                    let conn = bench.connect.connect(&kind, &to);
                    if words[0] == "open" {
                        open.push(conn);
                    }
                }
            }
            ["close"] => break,
            _ => panic!("unknown command {line:?}"),
        }
        writeln!(stdout, "ready").expect("stdout");
        stdout.flush().expect("stdout");
    }
    let closed = open.iter().filter(|c| bench.connect.closed(c)).count();
    assert_eq!(
        closed,
        0,
        "{kind}: {closed} of {} connections closed before the end",
        open.len()
    );
    drop(open);
}
