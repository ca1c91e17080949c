//! Test harness: a real dormant server on 127.0.0.1:0 or on a Unix socket
//! in a temporary directory (on a runtime thread of its own, [`Serve`], or
//! on a runtime the test owns, [`Harness`]), a raw client, and the services
//! and checks that several test files share.
#![allow(dead_code, unreachable_pub)]

pub mod differential;
#[cfg(all(
    feature = "tls-no-provider",
    any(feature = "tls", feature = "tls-ring")
))]
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dormant::upgrade::{self, Lot, Upgraded, Woken};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

/// How long a raw client waits for bytes before the test fails instead of
/// hanging.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// A running server; shuts down (and joins its runtime) on drop. `A` is
/// where it listens: a TCP address, or the path of a Unix socket
/// ([`ServeUnix`]).
pub struct Serve<A = SocketAddr> {
    pub addr: A,
    pub server: dormant::Server,
    /// The server's runtime (for its task metrics).
    pub handle: tokio::runtime::Handle,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// The temporary directory of a Unix socket; dropped (removed) after
    /// the server stopped, since fields drop after `Drop::drop`.
    dir: Option<TempDir>,
}

/// A server on a Unix socket; `addr` is the socket's path.
pub type ServeUnix = Serve<PathBuf>;

impl<A> Serve<A> {
    pub fn stats(&self) -> dormant::Stats {
        self.server.stats()
    }

    /// Starts graceful shutdown and waits until `serve` has returned.
    pub fn shutdown(mut self) {
        self.stop();
    }

    /// Starts graceful shutdown without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Waits (bounded) until `serve` has returned; panics if it does not.
    pub fn wait_stopped(&mut self) {
        let thread = self.thread.take().expect("server thread");
        let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
        while !thread.is_finished() {
            assert!(
                std::time::Instant::now() < deadline,
                "serve did not return after shutdown: {:?}",
                self.stats()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        thread.join().expect("server thread panicked");
        assert_no_server_panic();
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().expect("server thread panicked");
        }
        assert_no_server_panic();
    }

    /// Waits (polling, bounded) until `cond(stats)` holds; panics with the
    /// last stats otherwise.
    pub fn wait_for(&self, what: &str, cond: impl Fn(&dormant::Stats) -> bool) {
        let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
        loop {
            let stats = self.stats();
            if cond(&stats) {
                return;
            }
            if std::time::Instant::now() > deadline {
                panic!("timed out waiting for {what}: {stats:?}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl<A: Endpoint> Serve<A> {
    pub fn connect(&self) -> Client<A::Stream> {
        self.addr.connect()
    }
}

impl ServeUnix {
    /// The socket file's path.
    pub fn path(&self) -> &Path {
        &self.addr
    }

    /// The temporary directory the socket is in.
    pub fn dir(&self) -> &Path {
        &self
            .dir
            .as_ref()
            .expect("a Unix server has a directory")
            .path
    }
}

impl<A> Drop for Serve<A> {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        // Don't join while panicking: a stuck server must not hide the
        // original failure.
        if !std::thread::panicking() {
            self.stop();
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A service as `dormant::Server::serve` takes it, answering with `B`.
pub trait Servable<B>:
    hyper::service::Service<
        Request<dormant::Body>,
        Response = Response<B>,
        Future: Send + 'static,
        Error: Into<BoxError>,
    > + Send
    + Sync
    + 'static
{
}

impl<S, B> Servable<B> for S where
    S: hyper::service::Service<
            Request<dormant::Body>,
            Response = Response<B>,
            Future: Send + 'static,
            Error: Into<BoxError>,
        > + Send
        + Sync
        + 'static
{
}

/// A response body as `dormant::Server::serve` takes it.
pub trait ResponseBody:
    http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static
{
}

impl<B> ResponseBody for B where
    B: http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static
{
}

/// Starts `service` on a dormant server built by `builder`, on its own
/// runtime thread, listening on 127.0.0.1 (a free port).
pub fn serve_with<S, B>(builder: &dormant::Builder, service: S) -> Serve
where
    S: Servable<B>,
    B: ResponseBody,
{
    serve_with_workers(builder, service, 2)
}

/// Starts `service` as [`serve_with`] does, on a runtime of `workers`
/// worker threads. With one, the server serves a woken connection's first
/// poll in the lot's task instead of spawning it.
pub fn serve_with_workers<S, B>(builder: &dormant::Builder, service: S, workers: usize) -> Serve
where
    S: Servable<B>,
    B: ResponseBody,
{
    serve_on(builder, service, workers, None, || async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (listener, addr)
    })
}

/// Starts `service` as [`serve_with`] does, on a `dormant::UnixListener`
/// at a fresh path in a fresh temporary directory (removed when the
/// server is dropped).
pub fn serve_unix_with<S, B>(builder: &dormant::Builder, service: S) -> ServeUnix
where
    S: Servable<B>,
    B: ResponseBody,
{
    let dir = TempDir::new();
    let path = dir.path.join("http.sock");
    let bind_at = path.clone();
    serve_on(builder, service, 2, Some(dir), move || async move {
        let listener = dormant::UnixListener::bind(&bind_at).expect("bind the Unix socket");
        (listener, bind_at)
    })
}

/// Starts `service` as [`serve_with`] does, on a runtime of `workers`
/// worker threads (see [`serve_with_workers`]), on a listener of the
/// test's own (a `dormant::tls::TlsListener`, say): `bind` runs inside the
/// server's runtime and returns the listener and the address clients
/// connect to.
pub fn serve_listener_with<L, A, Bind, Fut, S, B>(
    builder: &dormant::Builder,
    service: S,
    workers: usize,
    bind: Bind,
) -> Serve<A>
where
    L: dormant::Listener,
    A: Send + 'static,
    Bind: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = (L, A)>,
    S: Servable<B>,
    B: ResponseBody,
{
    serve_on(builder, service, workers, None, bind)
}

/// Starts `service` on a dormant server built by `builder`, on its own
/// runtime of `workers` worker threads, on the listener `bind` makes there
/// (it runs inside the runtime).
fn serve_on<L, A, Bind, Fut, S, B>(
    builder: &dormant::Builder,
    service: S,
    workers: usize,
    dir: Option<TempDir>,
    bind: Bind,
) -> Serve<A>
where
    L: dormant::Listener,
    A: Send + 'static,
    Bind: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = (L, A)>,
    S: Servable<B>,
    B: ResponseBody,
{
    let server = builder.build().expect("valid config");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let srv = server.clone();
    let thread = std::thread::spawn(move || {
        let rt = server_runtime_with(workers);
        rt.block_on(async move {
            let (listener, addr) = bind().await;
            addr_tx
                .send((addr, tokio::runtime::Handle::current()))
                .unwrap_or_else(|_| panic!("the test went away"));
            srv.serve(listener, service)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
    });
    let (addr, handle) = addr_rx.recv().expect("server started");
    Serve {
        addr,
        server,
        handle,
        shutdown: Some(tx),
        thread: Some(thread),
        dir,
    }
}

/// The name of a test server's runtime threads.
const SERVER_THREAD: &str = "test-server";

/// Panics on test servers' threads so far, in this test binary.
static SERVER_PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Fails the test if a task of any test server in this binary panicked:
/// tokio catches a task's panic, so a connection killed by one would
/// otherwise pass unnoticed when its client only sees a close.
pub fn assert_no_server_panic() {
    let panics = SERVER_PANICS.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(panics, 0, "a test server's task panicked (message above)");
}

/// Takes back the one panic the test just caused on purpose (a service
/// that panics), after checking it was counted. Only for a test binary of
/// its own, where no other test's panic can be counted meanwhile.
pub fn forgive_one_server_panic() {
    let panics = SERVER_PANICS.swap(0, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(panics, 1, "the one panic the test caused");
}

/// The multi-threaded runtime a test server runs on (two workers). Panics
/// on its threads are counted for [`assert_no_server_panic`].
pub fn server_runtime() -> tokio::runtime::Runtime {
    server_runtime_with(2)
}

/// [`server_runtime`] with `workers` worker threads.
pub fn server_runtime_with(workers: usize) -> tokio::runtime::Runtime {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(SERVER_THREAD) {
                SERVER_PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            previous(info);
        }));
    });
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(SERVER_THREAD)
        .enable_all()
        .build()
        .unwrap()
}

/// A server on a runtime owned by the test, which keeps running after
/// `serve` returned (for upgraded streams, which outlive `serve`). `A` is
/// where it listens, as for [`Serve`].
pub struct Harness<A = SocketAddr> {
    pub rt: tokio::runtime::Runtime,
    pub addr: A,
    pub server: dormant::Server,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serving: Option<tokio::task::JoinHandle<()>>,
    /// The temporary directory of a Unix socket; removed after the
    /// runtime (and with it the listener) is gone.
    dir: Option<TempDir>,
}

impl Harness {
    /// Serves `service` on 127.0.0.1 (a free port).
    pub fn start<S, B>(builder: &dormant::Builder, service: S) -> Harness
    where
        S: Servable<B>,
        B: ResponseBody,
    {
        Harness::start_on(builder, service, None, |rt| {
            let listener = rt
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .unwrap();
            let addr = listener.local_addr().unwrap();
            (listener, addr)
        })
    }
}

impl Harness<PathBuf> {
    /// Serves `service` on a `dormant::UnixListener` at a fresh path in a
    /// fresh temporary directory.
    pub fn start_unix<S, B>(builder: &dormant::Builder, service: S) -> Harness<PathBuf>
    where
        S: Servable<B>,
        B: ResponseBody,
    {
        let dir = TempDir::new();
        let path = dir.path.join("http.sock");
        Harness::start_on(builder, service, Some(dir), |rt| {
            let _enter = rt.enter();
            let listener = dormant::UnixListener::bind(&path).expect("bind the Unix socket");
            (listener, path)
        })
    }
}

impl<A> Harness<A> {
    /// Serves `service` on a listener of the test's own (a
    /// `dormant::tls::TlsListener`, say): `bind` runs on the harness's
    /// runtime and returns the listener and the address clients connect
    /// to.
    pub fn start_listener<L, S, B, Fut>(
        builder: &dormant::Builder,
        service: S,
        bind: impl FnOnce() -> Fut,
    ) -> Harness<A>
    where
        L: dormant::Listener,
        Fut: Future<Output = (L, A)>,
        S: Servable<B>,
        B: ResponseBody,
    {
        Harness::start_on(builder, service, None, |rt| rt.block_on(bind()))
    }

    fn start_on<L, S, B>(
        builder: &dormant::Builder,
        service: S,
        dir: Option<TempDir>,
        bind: impl FnOnce(&tokio::runtime::Runtime) -> (L, A),
    ) -> Harness<A>
    where
        L: dormant::Listener,
        S: Servable<B>,
        B: ResponseBody,
    {
        let rt = server_runtime();
        let server = builder.build().unwrap();
        let (listener, addr) = bind(&rt);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serve = server
            .serve(listener, service)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            });
        let serving = rt.spawn(async move { serve.await.unwrap() });
        Harness {
            rt,
            addr,
            server,
            stop: Some(stop),
            serving: Some(serving),
            dir,
        }
    }

    pub fn stats(&self) -> dormant::Stats {
        self.server.stats()
    }

    pub fn wait_for(&self, what: &str, cond: impl Fn(&dormant::Stats) -> bool) {
        wait(what, || cond(&self.stats()));
    }

    /// Graceful shutdown; waits (bounded) until `serve` has returned.
    pub fn shutdown(&mut self) {
        let _ = self.stop.take().expect("running").send(());
        let serving = self.serving.take().expect("running");
        self.rt
            .block_on(async { tokio::time::timeout(CLIENT_TIMEOUT, serving).await })
            .expect("serve did not return after shutdown")
            .expect("serve panicked");
        assert_no_server_panic();
    }
}

impl<A: Endpoint> Harness<A> {
    pub fn connect(&self) -> Client<A::Stream> {
        self.addr.connect()
    }
}

/// Waits (polling, bounded) until `cond` holds.
pub fn wait(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A fresh directory under the system's temporary directory, removed
/// (with what is left in it) when dropped.
#[derive(Debug)]
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "dormant-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // A directory left by an earlier process with the same pid.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).expect("create a temporary directory");
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A builder that parks quickly, so tests need short pauses only.
pub fn fast_park() -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(5));
    b
}

/// Answers `200` with a body describing the request: method, path, and the
/// request body it read (`read` = the body was read to its end). Generic over
/// the body so a plain hyper server can run the same handler.
pub async fn echo<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let text = match body {
        Ok(b) => format!("{method} {path} read={}", String::from_utf8_lossy(&b)),
        Err(e) => format!("{method} {path} error={e}"),
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// Answers `200 hello` without touching the request body.
pub async fn hello(_req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"hello"))))
}

pub fn echo_service() -> impl hyper::service::Service<
    Request<dormant::Body>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Send
+ Sync
+ Clone
+ 'static {
    service_fn(echo::<dormant::Body>)
}

/// Open file descriptors of this process (the server runs in-process).
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// Waits (bounded) until the process has `want` open descriptors.
pub fn wait_for_fds(want: usize, what: &str) {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    loop {
        let now = fd_count();
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {now} descriptors open, want {want}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A blocking raw-bytes client with a read timeout, over TCP or a Unix
/// socket ([`UnixClient`]).
pub struct Client<S = TcpStream> {
    pub stream: S,
    buf: Vec<u8>,
}

/// A raw client over a Unix socket.
pub type UnixClient = Client<UnixStream>;

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        Client::new(stream)
    }
}

impl UnixClient {
    pub fn connect_unix(path: &Path) -> UnixClient {
        let stream = UnixStream::connect(path)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", path.display()));
        Client::new(stream)
    }
}

/// Where a test server listens (a TCP address, or a Unix socket's path),
/// and how a raw client connects there.
pub trait Endpoint {
    type Stream: RawStream;

    fn connect(&self) -> Client<Self::Stream>;
}

impl Endpoint for SocketAddr {
    type Stream = TcpStream;

    fn connect(&self) -> Client {
        Client::connect(*self)
    }
}

impl Endpoint for PathBuf {
    type Stream = UnixStream;

    fn connect(&self) -> UnixClient {
        Client::connect_unix(self)
    }
}

/// What [`Client`] needs of its stream.
pub trait RawStream: Read + Write + Send + Sized + 'static {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;

    fn try_clone(&self) -> io::Result<Self>;
}

impl RawStream for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }

    fn try_clone(&self) -> io::Result<Self> {
        TcpStream::try_clone(self)
    }
}

impl RawStream for UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }

    fn try_clone(&self) -> io::Result<Self> {
        UnixStream::try_clone(self)
    }
}

impl<S: RawStream> Client<S> {
    /// Wraps a connected stream, with the read timeout set.
    pub fn new(stream: S) -> Client<S> {
        stream.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Reads one full response (head plus content-length or chunked body);
    /// returns it with the `date` header removed.
    pub fn response(&mut self) -> String {
        loop {
            if let Some(len) = complete_response(&self.buf) {
                let resp: Vec<u8> = self.buf.drain(..len).collect();
                return strip_date(&String::from_utf8_lossy(&resp));
            }
            let mut chunk = [0u8; 8192];
            let n = self
                .stream
                .read(&mut chunk)
                .expect("read response (timed out?)");
            assert!(
                n > 0,
                "connection closed before a full response; got {:?}",
                String::from_utf8_lossy(&self.buf)
            );
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads one response head only (for `HEAD` requests, whose responses
    /// announce a length but carry no body); `date` removed.
    pub fn response_head(&mut self) -> String {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head: Vec<u8> = self.buf.drain(..end + 4).collect();
                return strip_date(&String::from_utf8_lossy(&head));
            }
            let mut chunk = [0u8; 8192];
            let n = self
                .stream
                .read(&mut chunk)
                .expect("read head (timed out?)");
            assert!(
                n > 0,
                "connection closed before a full head; got {:?}",
                String::from_utf8_lossy(&self.buf)
            );
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads exactly `n` raw bytes (after whatever a response read left
    /// over), for streams that stopped speaking HTTP.
    pub fn read_exact_bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            let mut chunk = [0u8; 8192];
            let got = self
                .stream
                .read(&mut chunk)
                .expect("read bytes (timed out?)");
            assert!(
                got > 0,
                "connection closed after {} of {n} bytes: {:?}",
                self.buf.len(),
                String::from_utf8_lossy(&self.buf)
            );
            self.buf.extend_from_slice(&chunk[..got]);
        }
        self.buf.drain(..n).collect()
    }

    /// Reads until the server closes the connection; returns what was read
    /// (with `date` headers removed).
    pub fn read_to_close(&mut self) -> String {
        loop {
            let mut chunk = [0u8; 8192];
            match self.stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                Err(e) => panic!(
                    "read until close: {e}; got {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
            }
        }
        strip_date(&String::from_utf8_lossy(&std::mem::take(&mut self.buf)))
    }
}

/// Removes `date:` header lines.
pub fn strip_date(s: &str) -> String {
    s.split_inclusive("\r\n")
        .filter(|line| !line.to_ascii_lowercase().starts_with("date:"))
        .collect()
}

/// The length of the first complete HTTP/1 response in `buf`, if any.
pub fn complete_response(buf: &[u8]) -> Option<usize> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status_line = head.lines().next()?;
    let informational = status_line
        .split(' ')
        .nth(1)
        .is_some_and(|s| s.starts_with('1'));
    let no_body = informational
        || status_line.contains(" 204 ")
        || status_line.contains(" 304 ")
        || head.contains("x-head-request: 1");
    if no_body {
        return Some(head_end);
    }
    if let Some(cl) = head.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .map(|v| v.trim().parse::<usize>().unwrap())
    }) {
        return (buf.len() >= head_end + cl).then_some(head_end + cl);
    }
    if head.contains("transfer-encoding: chunked") {
        let mut pos = head_end;
        loop {
            let line_end = buf[pos..].windows(2).position(|w| w == b"\r\n")? + pos;
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[pos..line_end]).ok()?.trim(), 16)
                    .ok()?;
            pos = line_end + 2;
            if size == 0 {
                return (buf.len() >= pos + 2).then_some(pos + 2);
            }
            pos += size + 2;
            if buf.len() < pos {
                return None;
            }
        }
    }
    // No framing: the body runs to close.
    None
}

/// A plain hyper HTTP/1 server (no dormant), to compare against: same
/// handler, same bytes in, the output must match.
pub struct PlainHyper {
    pub addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PlainHyper {
    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }
}

impl Drop for PlainHyper {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            if !std::thread::panicking() {
                thread.join().expect("plain hyper thread panicked");
            }
        }
    }
}

/// Serves `handler` with `hyper::server::conn::http1` (default settings)
/// over tokio, on its own runtime thread.
pub fn serve_plain_hyper<F, Fut>(handler: F) -> PlainHyper
where
    F: Fn(Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    serve_hyper_over(|tcp| async move { Some(tcp) }, handler)
}

/// [`serve_plain_hyper`] over the streams `accept` makes of each accepted
/// TCP connection (`None` drops it): a TLS acceptor, for one.
pub fn serve_hyper_over<A, AFut, IO, F, Fut>(accept: A, handler: F) -> PlainHyper
where
    A: Fn(tokio::net::TcpStream) -> AFut + Clone + Send + 'static,
    AFut: std::future::Future<Output = Option<IO>> + Send + 'static,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = server_runtime();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (stream, _) = tokio::select! {
                    _ = &mut rx => break,
                    accepted = listener.accept() => accepted.unwrap(),
                };
                let (accept, handler) = (accept.clone(), handler.clone());
                tokio::spawn(async move {
                    let Some(io) = accept(stream).await else {
                        return;
                    };
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(io), service_fn(handler))
                        .await;
                });
            }
        });
    });
    PlainHyper {
        addr: addr_rx.recv().expect("plain hyper started"),
        shutdown: Some(tx),
        thread: Some(thread),
    }
}

/// `200 OK` with `body`, as the echo and hello services answer.
pub fn ok(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A keep-alive `GET` of `path`.
pub fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")
}

/// Whether the kernel still holds a server-side socket `server` ⇄ `client`
/// that is not closed (any state but TIME_WAIT and CLOSE; CLOSE_WAIT, the
/// state of a socket the peer closed and the server did not, counts).
pub fn server_socket_open(server: u16, client: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table.lines().skip(1).any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next().unwrap(), 16).unwrap();
        let state = f[3];
        port(f[1]) == server && port(f[2]) == client && state != "06" && state != "07"
    })
}

/// `n` connections to an echo server, each served one `GET /{i}`, kept open.
pub fn connect_served(srv: &Serve, n: usize) -> Vec<Client> {
    (0..n)
        .map(|i| {
            let mut c = srv.connect();
            c.send(get(&format!("/{i}")).as_bytes());
            assert_eq!(c.response(), ok(&format!("GET /{i} read=")));
            c
        })
        .collect()
}

/// The first request of a connection arrives in two writes, split at
/// several points; between them the connection parks with the first part
/// carried and no pool buffer held. `srv` serves [`echo_service`].
pub fn check_first_request_split_across_a_park<A: Endpoint>(srv: &Serve<A>) {
    for split in [1usize, 3, 9, 17, 28] {
        let before = srv.stats().parks;
        let req = b"GET /split HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut c = srv.connect();
        c.send(&req[..split]);
        srv.wait_for("park with a partial head", |s| s.parks > before);
        assert_eq!(srv.stats().pool.in_use, 0);
        c.send(&req[split..]);
        assert_eq!(c.response(), ok("GET /split read="), "split at {split}");
    }
}

/// A request that gated handlers hold until the test releases them.
pub const WAIT: &[u8] = b"GET /wait HTTP/1.1\r\nHost: x\r\n\r\n";

/// What gated handlers report to the test, and what releases them.
pub struct Probes {
    started: Mutex<Sender<()>>,
    dropped: Mutex<Sender<&'static str>>,
    pub release: Notify,
}

impl Probes {
    /// New probes, with the receivers of what they report: the starts of
    /// gated handlers, and the drops of [`DropProbe`]s.
    pub fn new() -> (Arc<Probes>, Receiver<()>, Receiver<&'static str>) {
        let (started_tx, started) = mpsc::channel();
        let (dropped_tx, dropped) = mpsc::channel();
        let probes = Arc::new(Probes {
            started: Mutex::new(started_tx),
            dropped: Mutex::new(dropped_tx),
            release: Notify::new(),
        });
        (probes, started, dropped)
    }

    /// A probe that reports `what` when dropped, unless defused.
    pub fn probe(&self, what: &'static str) -> DropProbe {
        DropProbe(what, Some(self.dropped.lock().unwrap().clone()))
    }

    /// A gated handler: reports its start and waits until the test
    /// releases it; if it is dropped before, reports `handler`.
    pub async fn gate(&self) {
        let probe = self.probe("handler");
        self.started.lock().unwrap().send(()).unwrap();
        self.release.notified().await;
        probe.defuse();
    }
}

/// Reports on its channel when dropped, unless defused.
pub struct DropProbe(&'static str, Option<Sender<&'static str>>);

impl DropProbe {
    pub fn defuse(mut self) {
        self.1 = None;
    }
}

impl Drop for DropProbe {
    fn drop(&mut self) {
        if let Some(tx) = &self.1 {
            let _ = tx.send(self.0);
        }
    }
}

/// Waits (bounded) until a gated handler started.
pub fn handler_started(started: &Receiver<()>) {
    started
        .recv_timeout(CLIENT_TIMEOUT)
        .expect("handler started");
}

/// Waits (bounded) for the next drop report.
pub fn next_drop(dropped: &Receiver<&'static str>) -> &'static str {
    dropped
        .recv_timeout(CLIENT_TIMEOUT)
        .expect("nothing was dropped after the client closed")
}

/// An upgrade request to the echo protocol of [`sleepy_service`].
pub const UPGRADE: &str =
    "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n";
/// The answer to [`UPGRADE`].
pub const SWITCHED: &str =
    "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n";

/// `n` connections to `srv`, each upgraded with [`UPGRADE`], kept open.
pub fn connect_upgraded<A: Endpoint>(srv: &Harness<A>, n: usize) -> Vec<Client<A::Stream>> {
    (0..n)
        .map(|_| {
            let mut c = srv.connect();
            c.send(UPGRADE.as_bytes());
            assert_eq!(c.response(), SWITCHED);
            c
        })
        .collect()
}

/// `c`'s upgraded stream, asleep in the lot ([`sleepy_service`]), echoes
/// messages with one wake each, then a burst far longer than one pool
/// buffer (many wakes) without losing a byte, and sleeps again.
pub fn check_sleeping_echo<S: RawStream>(c: &mut Client<S>, s: &Sleepers) {
    for i in 0..3 {
        let before = s.wakes.load(Ordering::SeqCst);
        let msg = format!("message {i}");
        c.send(msg.as_bytes());
        assert_eq!(c.read_exact_bytes(msg.len()), msg.as_bytes());
        wait("asleep again", || s.sleeping() == 1);
        assert_eq!(
            s.wakes.load(Ordering::SeqCst),
            before + 1,
            "one wake per message"
        );
    }

    // Far more than one pool buffer: many wakes, no byte lost.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut writer = c.stream.try_clone().unwrap();
    let sent = big.clone();
    let writing = std::thread::spawn(move || writer.write_all(&sent).unwrap());
    assert_eq!(c.read_exact_bytes(big.len()), big);
    writing.join().unwrap();
    wait("asleep after the burst", || s.sleeping() == 1);
}

/// Counts drops of the [`Dropped`] tokens it hands out.
#[derive(Clone, Default)]
pub struct DropCount(Arc<AtomicUsize>);

impl DropCount {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    pub fn token(&self) -> Dropped {
        Dropped(self.0.clone())
    }
}

/// Adds one to its counter when dropped.
#[derive(Clone)]
pub struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// The state a sleeping echo stream carries between messages.
struct Sleepy {
    wakes: Arc<AtomicUsize>,
    events: Sender<String>,
    _dropped: Dropped,
}

/// Puts `stream` to sleep; each wake-up echoes one read and sleeps again.
fn sleep_echo(lot: Lot, stream: Upgraded, state: Sleepy) {
    lot.clone().sleep(stream, move |woken| async move {
        state.wakes.fetch_add(1, Ordering::SeqCst);
        let report = |event: String| {
            let _ = state.events.send(event);
        };
        match woken {
            Woken::Readable(mut stream) => match stream.read_pooled().await {
                Ok(Some(bytes)) => {
                    if stream.write_all(&bytes).await.is_ok() {
                        drop(bytes);
                        sleep_echo(lot, stream, state);
                    }
                }
                Ok(None) => report("readable, then a read found EOF".into()),
                Err(e) => report(format!("read failed: {e}")),
            },
            Woken::Eof(_) => report("eof".into()),
            Woken::Shutdown(mut stream) => {
                report("shutdown".into());
                let _ = stream.write_all(b"bye").await;
            }
            Woken::Failed(e) => report(format!("failed {e}")),
            _ => report("unknown".into()),
        }
    });
}

/// What the test watches of the upgraded streams of [`sleepy_service`].
pub struct Sleepers {
    /// What the sleeping streams' callbacks report.
    pub events: Receiver<String>,
    /// One report a hand-off: the kind of stream, and its leftover bytes.
    pub hand_offs: Receiver<String>,
    /// The lot, once a stream was handed off.
    pub lot: Arc<Mutex<Option<Lot>>>,
    /// Callbacks called.
    pub wakes: Arc<AtomicUsize>,
    /// States dropped.
    pub drops: DropCount,
}

impl Sleepers {
    pub fn sleeping(&self) -> usize {
        self.lot.lock().unwrap().as_ref().map_or(0, Lot::sleeping)
    }

    /// The next event of a callback.
    pub fn next(&self) -> String {
        self.events
            .recv_timeout(CLIENT_TIMEOUT)
            .expect("handler event")
    }

    /// The next hand-off.
    pub fn hand_off(&self) -> String {
        self.hand_offs
            .recv_timeout(CLIENT_TIMEOUT)
            .expect("hand-off")
    }
}

/// A service that upgrades every request and puts the stream to sleep in
/// the lot between messages ([`sleep_echo`]).
pub fn sleepy_service() -> (impl Servable<Empty<Bytes>>, Sleepers) {
    let (events_tx, events) = mpsc::channel();
    let (hand_offs_tx, hand_offs) = mpsc::channel();
    let lot_seen = Arc::new(Mutex::new(None));
    let wakes = Arc::new(AtomicUsize::new(0));
    let drops = DropCount::default();
    let service = {
        let (lot_seen, wakes, drops) = (lot_seen.clone(), wakes.clone(), drops.clone());
        service_fn(move |mut req: Request<dormant::Body>| {
            let upgrade = upgrade::on(&mut req).expect("an upgrade request");
            let state = Sleepy {
                wakes: wakes.clone(),
                events: events_tx.clone(),
                _dropped: drops.token(),
            };
            let lot_seen = lot_seen.clone();
            let hand_offs = hand_offs_tx.clone();
            tokio::spawn(async move {
                let parts = upgrade.await.expect("hand-off");
                let unix = parts.stream.as_unix().is_some() && parts.stream.as_tcp().is_none();
                let _ = hand_offs.send(format!(
                    "handed off: unix={unix} read_buf={:?}",
                    parts.read_buf
                ));
                *lot_seen.lock().unwrap() = Some(parts.lot.clone());
                let lot = parts.lot.clone();
                sleep_echo(lot, Upgraded::from(parts), state);
            });
            async {
                Ok::<_, Infallible>(
                    Response::builder()
                        .status(StatusCode::SWITCHING_PROTOCOLS)
                        .header("connection", "upgrade")
                        .header("upgrade", "echo")
                        .body(Empty::<Bytes>::new())
                        .unwrap(),
                )
            }
        })
    };
    let sleepers = Sleepers {
        events,
        hand_offs,
        lot: lot_seen,
        wakes,
        drops,
    };
    (service, sleepers)
}
