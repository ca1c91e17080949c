//! The `http2_*` settings of `Builder`: what the server advertises in its
//! SETTINGS frame and connection WINDOW_UPDATE (read as raw frames, over h2c
//! and over TLS with ALPN `h2`), the stream limit, the keep-alive PING and
//! its timeout, and the values `build` rejects.
//!
//! Self-contained: a server on the test's runtime, raw HTTP/2 frames
//! written and read by hand, every read bounded so that a hang fails.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::ladder::{accepts, rejects};

use dormant::Rung::Active;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Bytes;
use hyper::client::conn::http2::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

/// Bounds every wait of a test: long enough for a loaded machine, short
/// enough that a hang fails.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types and flags (RFC 9113, 6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const ACK: u8 = 0x1;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

// SETTINGS identifiers.
const MAX_CONCURRENT_STREAMS: u16 = 0x3;
const INITIAL_WINDOW_SIZE: u16 = 0x4;
const MAX_FRAME_SIZE: u16 = 0x5;
const MAX_HEADER_LIST_SIZE: u16 = 0x6;

const REFUSED_STREAM: u32 = 0x7;

/// Answers `200 ok`; `/hold` never answers; `/count` answers after a short
/// pause, counting how many such requests run at once.
#[derive(Clone, Default)]
struct Handler {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Handler {
    async fn call(self, req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
        match req.uri().path() {
            "/hold" => std::future::pending().await,
            "/count" => {
                let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
                self.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                self.running.fetch_sub(1, Ordering::SeqCst);
            }
            _ => {}
        }
        Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }
}

/// Serves `handler` with `builder` on 127.0.0.1 (a free port), on the
/// test's runtime: the server stops with it.
async fn start(builder: &dormant::Builder, handler: Handler) -> (SocketAddr, dormant::Server) {
    let server = builder.build().expect("valid config");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = service_fn(move |req| handler.clone().call(req));
    tokio::spawn(std::future::IntoFuture::into_future(
        server.serve(listener, svc),
    ));
    (addr, server)
}

/// One HTTP/2 frame as read off the wire.
#[derive(Debug)]
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

impl Frame {
    /// The identifier-value pairs of a SETTINGS frame.
    fn settings(&self) -> HashMap<u16, u32> {
        assert_eq!(self.kind, SETTINGS, "{self:?}");
        self.payload
            .chunks_exact(6)
            .map(|s| {
                let id = u16::from_be_bytes([s[0], s[1]]);
                (id, u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
            })
            .collect()
    }

    /// The first 31-bit field of the payload: a WINDOW_UPDATE's
    /// increment, a RST_STREAM's error code.
    fn word(&self) -> u32 {
        u32::from_be_bytes(self.payload[..4].try_into().unwrap()) & 0x7fff_ffff
    }
}

/// Reads one frame, or `None` at the end of the stream; fails on a hang.
async fn read_frame<S: AsyncRead + Unpin>(io: &mut S) -> Option<Frame> {
    timeout(CLIENT_TIMEOUT, async {
        let mut head = [0u8; 9];
        match io.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
            // A reset after the server dropped the connection counts as its
            // end too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("read a frame: {e}"),
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0; len];
        io.read_exact(&mut payload).await.expect("frame payload");
        Some(Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
            payload,
        })
    })
    .await
    .expect("no frame from the server in time")
}

async fn write_frame<S: AsyncWrite + Unpin>(
    io: &mut S,
    kind: u8,
    flags: u8,
    stream: u32,
    payload: &[u8],
) {
    let len = (payload.len() as u32).to_be_bytes();
    let mut frame = vec![len[1], len[2], len[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    io.write_all(&frame).await.unwrap();
    io.flush().await.unwrap();
}

/// Writes the client preface and an empty SETTINGS frame, and returns the
/// server's SETTINGS frame (the first frame it sends).
async fn open<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S) -> HashMap<u16, u32> {
    io.write_all(PREFACE).await.unwrap();
    write_frame(io, SETTINGS, 0, 0, &[]).await;
    let first = read_frame(io).await.expect("the server's SETTINGS");
    assert_eq!((first.kind, first.flags), (SETTINGS, 0), "{first:?}");
    first.settings()
}

/// The increment of the server's WINDOW_UPDATE on stream 0 among `frames`.
fn connection_window_update(frames: &[Frame]) -> Option<u32> {
    let mut updates = frames
        .iter()
        .filter(|f| f.kind == WINDOW_UPDATE && f.stream == 0);
    let update = updates.next().map(Frame::word);
    assert!(updates.next().is_none(), "{frames:?}");
    update
}

/// `GET /path` on `stream`, as an HPACK block of static-table entries and
/// one literal (`:method GET`, `:scheme http`, `:path`).
async fn get<S: AsyncWrite + Unpin>(io: &mut S, stream: u32, path: &str) {
    let mut block = vec![0x82, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    write_frame(io, HEADERS, END_HEADERS | END_STREAM, stream, &block).await;
}

/// Reads frames until the response on `stream` ends; returns its status
/// (HPACK: `:status 200` is static entry 8, sent as 0x88) and every frame
/// read.
async fn response<S: AsyncRead + Unpin>(io: &mut S, stream: u32) -> (u8, Vec<Frame>) {
    let mut status = None;
    let mut frames = Vec::new();
    loop {
        let frame = read_frame(io).await.expect("the server closed");
        if frame.stream == stream {
            match frame.kind {
                HEADERS => status = Some(frame.payload[0]),
                DATA => {}
                other => panic!("frame {other} on stream {stream}: {frame:?}"),
            }
            if frame.flags & END_STREAM != 0 {
                frames.push(frame);
                return (status.expect("response headers"), frames);
            }
        }
        frames.push(frame);
    }
}

/// Checks what a server built with `builder` advertises on `io` (a fresh
/// connection to it), then that it serves a request. h2 queues its
/// connection WINDOW_UPDATE when the connection starts and writes window
/// updates before stream frames, so it comes before the first response.
async fn check_advertised<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    streams: Option<u32>,
    stream_window: u32,
    connection_window: u32,
    frame_size: u32,
    header_list: u32,
) {
    let settings = open(io).await;
    assert_eq!(settings.get(&MAX_CONCURRENT_STREAMS), streams.as_ref());
    assert_eq!(settings[&INITIAL_WINDOW_SIZE], stream_window);
    assert_eq!(settings[&MAX_FRAME_SIZE], frame_size);
    assert_eq!(settings[&MAX_HEADER_LIST_SIZE], header_list);
    write_frame(io, SETTINGS, ACK, 0, &[]).await;
    get(io, 1, "/").await;
    let (status, frames) = response(io, 1).await;
    assert_eq!(status, 0x88, "{frames:?}");
    let grant = connection_window.checked_sub(65_535).filter(|&g| g > 0);
    assert_eq!(connection_window_update(&frames), grant, "{frames:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_and_connection_window_follow_the_builder() {
    // hyper's defaults, as the setters' docs state them.
    let (addr, _server) = start(&dormant::Server::builder(), Handler::default()).await;
    let mut io = TcpStream::connect(addr).await.unwrap();
    check_advertised(&mut io, Some(200), 1 << 20, 1 << 20, 16_384, 16_384).await;

    let mut builder = dormant::Server::builder();
    builder
        .http2_max_concurrent_streams(7)
        .http2_initial_stream_window_size(100_000)
        .http2_initial_connection_window_size(3_000_000)
        .http2_max_frame_size(32_768)
        .http2_max_header_list_size(9_000);
    let (addr, _server) = start(&builder, Handler::default()).await;
    let mut io = TcpStream::connect(addr).await.unwrap();
    check_advertised(&mut io, Some(7), 100_000, 3_000_000, 32_768, 9_000).await;

    // No limit advertised; HTTP/2's largest window and frame size.
    let mut builder = dormant::Server::builder();
    builder
        .http2_max_concurrent_streams(None)
        .http2_initial_stream_window_size((1 << 31) - 1)
        .http2_initial_connection_window_size((1 << 31) - 1)
        .http2_max_frame_size(16_777_215);
    let (addr, _server) = start(&builder, Handler::default()).await;
    let mut io = TcpStream::connect(addr).await.unwrap();
    let max = (1 << 31) - 1;
    check_advertised(&mut io, None, max, max, 16_777_215, 16_384).await;
}

/// The adaptive window starts at HTTP/2's own windows, whatever initial
/// windows were set and in whichever order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_window_starts_at_the_protocol_windows() {
    let mut builder = dormant::Server::builder();
    builder
        .http2_adaptive_window(true)
        .http2_initial_stream_window_size(100_000)
        .http2_initial_connection_window_size(3_000_000);
    let (addr, _server) = start(&builder, Handler::default()).await;
    let mut io = TcpStream::connect(addr).await.unwrap();
    check_advertised(&mut io, Some(200), 65_535, 65_535, 16_384, 16_384).await;
}

/// The same builder serves HTTP/2 over TLS (ALPN `h2`).
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_apply_over_tls() {
    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::crypto::aws_lc_rs::default_provider;
    use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore, ServerConfig};

    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.key_pair.serialize_der()));
    let server_config = ServerConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![made.cert.der().clone()], key)
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let mut client_config = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client_config.alpn_protocols = vec![b"h2".to_vec()];

    let mut builder = dormant::Server::builder();
    builder
        .http2_max_concurrent_streams(9)
        .http2_initial_stream_window_size(200_000)
        .http2_initial_connection_window_size(5_000_000)
        .http2_max_frame_size(65_536)
        .http2_max_header_list_size(20_000);
    let server = builder.build().unwrap();
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let listener = dormant::tls::TlsListener::new(tcp, dormant::tls::TlsConfig::new(server_config));
    let handler = Handler::default();
    let svc = service_fn(move |req| handler.clone().call(req));
    tokio::spawn(std::future::IntoFuture::into_future(
        server.serve(listener, svc),
    ));

    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut io = timeout(
        CLIENT_TIMEOUT,
        TlsConnector::from(Arc::new(client_config)).connect(name, tcp),
    )
    .await
    .expect("TLS handshake timed out")
    .expect("TLS handshake");
    assert_eq!(io.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    check_advertised(&mut io, Some(9), 200_000, 5_000_000, 65_536, 20_000).await;
}

/// A stream beyond the limit is refused (REFUSED_STREAM, which a client may
/// retry), and a client that honours the limit has its requests queued
/// (by the client, as RFC 9113 has it) and all served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_max_concurrent_streams_are_refused() {
    let mut builder = dormant::Server::builder();
    builder.http2_max_concurrent_streams(1);
    let handler = Handler::default();
    let (addr, _server) = start(&builder, handler.clone()).await;

    let mut io = TcpStream::connect(addr).await.unwrap();
    let settings = open(&mut io).await;
    assert_eq!(settings[&MAX_CONCURRENT_STREAMS], 1);
    // The limit holds once the client acknowledged it.
    write_frame(&mut io, SETTINGS, ACK, 0, &[]).await;
    get(&mut io, 1, "/hold").await;
    get(&mut io, 3, "/").await;
    let refused = loop {
        let frame = read_frame(&mut io).await.expect("the server closed");
        if frame.stream == 3 {
            break frame;
        }
    };
    assert_eq!((refused.kind, refused.word()), (RST_STREAM, REFUSED_STREAM));

    // hyper's client waits for a stream to close before opening the next,
    // once it knows the limit: requests it sends before the server's
    // SETTINGS arrive may be refused (RFC 9113, 5.1.2), and hyper does not
    // retry them. One request first, then the rest at once.
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let count = |mut send: SendRequest<Empty<Bytes>>| async move {
        let req = Request::get("http://x/count")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let res = send.send_request(req).await.expect("response");
        let status = res.status();
        res.into_body().collect().await.expect("body");
        status
    };
    let first = timeout(CLIENT_TIMEOUT, count(send.clone()))
        .await
        .expect("request timed out");
    assert_eq!(first, StatusCode::OK);
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..4 {
        requests.spawn(count(send.clone()));
    }
    let statuses = timeout(CLIENT_TIMEOUT, requests.join_all())
        .await
        .expect("requests timed out");
    assert_eq!(statuses, [StatusCode::OK; 4]);
    assert_eq!(handler.most.load(Ordering::SeqCst), 1);
}

/// An idle connection gets the server's PING; answered, the connection
/// lives on and is pinged again; unanswered, it is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_pings_idle_connections_and_closes_silent_ones() {
    let mut builder = dormant::Server::builder();
    builder
        .http2_keep_alive_interval(Duration::from_millis(20))
        .http2_keep_alive_timeout(Duration::from_secs(1));
    let (addr, server) = start(&builder, Handler::default()).await;
    let mut io = TcpStream::connect(addr).await.unwrap();
    open(&mut io).await;
    write_frame(&mut io, SETTINGS, ACK, 0, &[]).await;

    let ping = next_ping(&mut io).await;
    write_frame(&mut io, PING, ACK, 0, &ping.payload).await;
    next_ping(&mut io).await;

    // Silent now: the server gives up on the connection.
    loop {
        match read_frame(&mut io).await {
            None => break,
            Some(frame) => assert!(matches!(frame.kind, PING | GOAWAY), "{frame:?}"),
        }
    }
    timeout(CLIENT_TIMEOUT, async {
        while server.stats().connections[Active] != 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the connection is still counted");
}

/// Reads frames until the server's next PING.
async fn next_ping(io: &mut TcpStream) -> Frame {
    loop {
        let frame = read_frame(io).await.expect("closed before a PING");
        if frame.kind == PING {
            assert_eq!(frame.flags, 0, "{frame:?}");
            return frame;
        }
    }
}

/// Asserts that `build` rejects the setting `set` makes, naming it.
#[test]
fn build_checks_max_concurrent_streams_and_header_list_size() {
    rejects(
        |b| b.http2_max_concurrent_streams(0),
        "http2_max_concurrent_streams",
    );
    accepts(|b| b.http2_max_concurrent_streams(1));
    accepts(|b| b.http2_max_concurrent_streams(u32::MAX));
    accepts(|b| b.http2_max_concurrent_streams(None));
    rejects(
        |b| b.http2_max_header_list_size(0),
        "http2_max_header_list_size",
    );
    accepts(|b| b.http2_max_header_list_size(1));
    accepts(|b| b.http2_max_header_list_size(u32::MAX));
}

#[test]
fn build_checks_windows() {
    let max = (1 << 31) - 1;
    for size in [max + 1, u32::MAX] {
        rejects(
            |b| b.http2_initial_stream_window_size(size),
            "http2_initial_stream_window_size",
        );
        rejects(
            |b| b.http2_initial_connection_window_size(size),
            "http2_initial_connection_window_size",
        );
        // Checked even when the adaptive window leaves them unused.
        rejects(
            |b| {
                b.http2_adaptive_window(true)
                    .http2_initial_stream_window_size(size)
            },
            "http2_initial_stream_window_size",
        );
    }
    for size in [0, 65_535, max] {
        accepts(|b| {
            b.http2_initial_stream_window_size(size)
                .http2_initial_connection_window_size(size)
        });
    }
    accepts(|b| b.http2_adaptive_window(true));
}

#[test]
fn build_checks_max_frame_size() {
    for size in [0, 16_383, 16_777_216, u32::MAX] {
        rejects(|b| b.http2_max_frame_size(size), "http2_max_frame_size");
    }
    for size in [16_384, 1 << 20, 16_777_215] {
        accepts(|b| b.http2_max_frame_size(size));
    }
}

#[test]
fn build_checks_keep_alive() {
    let day = Duration::from_secs(24 * 3600);
    // Zero, and more than 24 days.
    for out in [
        Duration::ZERO,
        24 * day + Duration::from_secs(1),
        Duration::MAX,
    ] {
        rejects(|b| b.http2_keep_alive_interval(out), "keep_alive_interval");
        rejects(|b| b.http2_keep_alive_timeout(out), "keep_alive_timeout");
    }
    accepts(|b| {
        b.http2_keep_alive_interval(24 * day)
            .http2_keep_alive_timeout(24 * day)
    });
    accepts(|b| {
        b.http2_keep_alive_interval(Duration::from_millis(1))
            .http2_keep_alive_timeout(Duration::from_millis(1))
    });
    accepts(|b| b.http2_keep_alive_interval(None));
}
