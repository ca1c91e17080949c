//! Test harness: a real dormant server on 127.0.0.1:0 or on a Unix socket
//! in a temporary directory, and a raw client.
#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;

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
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            thread.join().expect("server thread panicked");
        }
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

impl Serve {
    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }
}

impl ServeUnix {
    pub fn connect(&self) -> UnixClient {
        Client::connect_unix(&self.addr)
    }

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

/// Starts `service` on a dormant server built by `builder`, on its own
/// runtime thread, listening on 127.0.0.1 (a free port).
pub fn serve_with<S, B>(builder: &dormant::Builder, service: S) -> Serve
where
    S: hyper::service::Service<Request<dormant::Body>, Response = Response<B>>
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    serve_on(builder, service, None, || async {
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
    S: hyper::service::Service<Request<dormant::Body>, Response = Response<B>>
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let dir = TempDir::new();
    let path = dir.path.join("http.sock");
    let bind_at = path.clone();
    serve_on(builder, service, Some(dir), move || async move {
        let listener = dormant::UnixListener::bind(&bind_at).expect("bind the Unix socket");
        (listener, bind_at)
    })
}

/// Starts `service` on a dormant server built by `builder`, on its own
/// runtime thread, on the listener `bind` makes there (it runs inside the
/// runtime).
fn serve_on<L, A, Bind, Fut, S, B>(
    builder: &dormant::Builder,
    service: S,
    dir: Option<TempDir>,
    bind: Bind,
) -> Serve<A>
where
    L: dormant::Listener,
    A: Send + 'static,
    Bind: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = (L, A)>,
    S: hyper::service::Service<Request<dormant::Body>, Response = Response<B>>
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let server = builder.build().expect("valid config");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let srv = server.clone();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
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

/// What [`Client`] needs of its stream.
pub trait RawStream: Read + Write {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl RawStream for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
}

impl RawStream for UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
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
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (stream, _) = tokio::select! {
                    _ = &mut rx => break,
                    accepted = listener.accept() => accepted.unwrap(),
                };
                let handler = handler.clone();
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service_fn(handler))
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
