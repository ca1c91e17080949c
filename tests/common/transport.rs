//! The transports every ladder behaviour runs over: TCP on 127.0.0.1, a
//! Unix socket in a temporary directory, and TLS (with a crypto provider:
//! features `tls` or `tls-ring`); and [`over_every_transport!`], which
//! stamps out a test per transport from one generic body.

use std::net::SocketAddr;
use std::path::PathBuf;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::client::Endpoint;
use super::runtime::{ResponseBody, Servable, bind_tcp};
use super::servers::{Hooks, Serve, serve_on};
use super::temp_dir::TempDir;
use super::timeout::CLIENT_TIMEOUT;

/// A way for clients to reach a dormant server.
pub(crate) trait Transport {
    /// Where its servers listen, as clients reach them.
    type Addr: Endpoint + Clone + Send + Sync + 'static;

    /// The address type of the server's listener (`dormant::Addr`): what
    /// `PeerAddr` and axum's `ConnectInfo` carry.
    type ServerAddr: Clone + std::fmt::Debug + Send + Sync + 'static;

    /// TLS handshakes the server counts for each connection
    /// (`Stats::tls_handshakes`).
    const HANDSHAKES: u64;

    /// Whether the lot tells a client's close from new bytes on a sleeping
    /// connection by itself: a TCP peek finds the end, and the lot closes
    /// the connection (`lot_closes`). A Unix socket cannot be peeked, and a
    /// TLS session cannot tell a close without decrypting: the lot hands
    /// the connection back to tokio (`lot_wakes`), whose first read finds
    /// the end.
    const PEEKS: bool;
    /// Whether a sleeping HTTP/2 connection on this transport answers a
    /// PING (and the ACK of the lot's keep-alive PING) without waking: the
    /// lot reads a plain socket in its parked form; a TLS session's records
    /// are its own to decrypt, and wake the connection.
    const ANSWERS_ASLEEP: bool;

    /// Starts `service` on a dormant server built by `builder`, on a
    /// runtime of its own with `workers` worker threads (with one, the
    /// server serves a woken connection's first poll in the lot's task).
    fn serve_with_workers<B: ResponseBody>(
        builder: &dormant::Builder,
        service: impl Servable<B>,
        workers: usize,
    ) -> Serve<Self::Addr> {
        Self::serve_hooked(builder, service, workers, Hooks::default())
    }

    /// [`serve_with_workers`](Transport::serve_with_workers), with `hooks`
    /// set on the `serve` call.
    fn serve_hooked<B: ResponseBody>(
        builder: &dormant::Builder,
        service: impl Servable<B>,
        workers: usize,
        hooks: Hooks,
    ) -> Serve<Self::Addr>;

    /// An async connection to `addr` for hyper's HTTP/2 client, on the
    /// caller's runtime: over TLS, after a handshake offering ALPN `h2`,
    /// which the server must have chosen; over TCP and a Unix socket, for
    /// HTTP/2 with prior knowledge.
    async fn connect_h2(addr: &Self::Addr) -> TokioIo<Box<dyn AsyncStream>>;

    /// An async connection to `addr` for an HTTP/1.1 client, on the
    /// caller's runtime: over TLS, after a handshake offering ALPN
    /// `http/1.1`.
    async fn connect_http1(addr: &Self::Addr) -> Box<dyn AsyncStream>;

    /// A connection of hyper's HTTP/2 client (its defaults: a 5 MiB
    /// connection window, 2 MiB stream windows) to `addr`, for request
    /// bodies of type `B`, driven by a task of its own on the caller's
    /// runtime.
    async fn hyper_h2<B>(
        addr: &Self::Addr,
    ) -> (
        hyper::client::conn::http2::SendRequest<B>,
        JoinHandle<hyper::Result<()>>,
    )
    where
        B: http_body::Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
            + Send
            + Unpin
            + 'static,
    {
        let io = timeout(CLIENT_TIMEOUT, Self::connect_h2(addr))
            .await
            .expect("connect timed out");
        let (send, conn) = timeout(
            CLIENT_TIMEOUT,
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io),
        )
        .await
        .expect("h2 handshake timed out")
        .expect("h2 handshake");
        (send, tokio::spawn(conn))
    }

    /// [`serve_with_workers`](Transport::serve_with_workers) with two
    /// workers.
    fn serve<B: ResponseBody>(
        builder: &dormant::Builder,
        service: impl Servable<B>,
    ) -> Serve<Self::Addr> {
        Self::serve_with_workers(builder, service, 2)
    }
}

/// The request side of hyper's HTTP/2 client connection.
pub(crate) type HyperSend = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// A client's async stream, whatever the transport.
pub(crate) trait AsyncStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<S: AsyncRead + AsyncWrite + Send + Unpin + 'static> AsyncStream for S {}

/// Reads from `io`, byte by byte, up to the end of `end` (a response head;
/// the bytes after it are the stream's): what it read.
pub(crate) async fn read_until(io: &mut Box<dyn AsyncStream>, end: &[u8]) -> String {
    let mut read = Vec::new();
    while !read.ends_with(end) {
        let mut byte = [0];
        timeout(CLIENT_TIMEOUT, io.read_exact(&mut byte))
            .await
            .expect("nothing came")
            .expect("read");
        read.push(byte[0]);
    }
    String::from_utf8(read).unwrap()
}

/// TCP on 127.0.0.1 (a free port).
pub(crate) struct Tcp;

impl Transport for Tcp {
    type Addr = SocketAddr;
    type ServerAddr = SocketAddr;
    const HANDSHAKES: u64 = 0;
    const PEEKS: bool = true;
    const ANSWERS_ASLEEP: bool = true;

    fn serve_hooked<B: ResponseBody>(
        builder: &dormant::Builder,
        service: impl Servable<B>,
        workers: usize,
        hooks: Hooks,
    ) -> Serve<SocketAddr> {
        serve_on(builder, service, workers, (), bind_tcp, hooks)
    }

    async fn connect_h2(addr: &SocketAddr) -> TokioIo<Box<dyn AsyncStream>> {
        TokioIo::new(Self::connect_http1(addr).await)
    }

    async fn connect_http1(addr: &SocketAddr) -> Box<dyn AsyncStream> {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.set_nodelay(true).unwrap();
        Box::new(tcp)
    }
}

/// A `dormant::UnixListener` at a fresh path (`http.sock`) in a fresh
/// temporary directory, removed with the server.
pub(crate) struct Unix;

impl Transport for Unix {
    type Addr = PathBuf;
    type ServerAddr = tokio::net::unix::SocketAddr;
    const HANDSHAKES: u64 = 0;
    const PEEKS: bool = false;
    const ANSWERS_ASLEEP: bool = true;

    fn serve_hooked<B: ResponseBody>(
        builder: &dormant::Builder,
        service: impl Servable<B>,
        workers: usize,
        hooks: Hooks,
    ) -> Serve<PathBuf> {
        let dir = TempDir::new();
        let path = dir.path.join("http.sock");
        let bind = move || async move {
            let listener = dormant::UnixListener::bind(&path).expect("bind the Unix socket");
            (listener, path)
        };
        serve_on(builder, service, workers, dir, bind, hooks)
    }

    async fn connect_h2(addr: &PathBuf) -> TokioIo<Box<dyn AsyncStream>> {
        TokioIo::new(Self::connect_http1(addr).await)
    }

    async fn connect_http1(addr: &PathBuf) -> Box<dyn AsyncStream> {
        let unix = tokio::net::UnixStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", addr.display()));
        Box::new(unix)
    }
}

#[cfg(any(feature = "tls", feature = "tls-ring"))]
pub(crate) use tls::Tls;

#[cfg(any(feature = "tls", feature = "tls-ring"))]
pub(crate) mod tls {
    use std::sync::Arc;

    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::ClientConfig;
    use tokio_rustls::rustls::pki_types::ServerName;

    use super::super::client::Client;
    use super::super::tls::{Cert, Tap, tls13};
    use super::super::tls_client::{TlsStream, tcp};
    use super::*;

    /// Where a TLS test server listens, and the client configuration its
    /// clients connect with (trusting its certificate).
    #[derive(Clone)]
    pub(crate) struct TlsAddr {
        pub(crate) addr: SocketAddr,
        pub(crate) config: Arc<ClientConfig>,
        /// The server's certificate as a PEM file, for clients of other
        /// processes to trust (it lives as long as the server).
        pub(crate) ca: PathBuf,
    }

    impl Endpoint for TlsAddr {
        type Stream = TlsStream;

        fn try_connect(&self) -> std::io::Result<Client<TlsStream>> {
            let tls = TlsStream::handshake(Tap::new(tcp(self.addr)), &self.config, "localhost")?;
            Ok(Client::new(tls))
        }

        fn refuses(&self) -> bool {
            self.addr.refuses()
        }
    }

    /// TLS 1.3 with a certificate made for the server (its PEM files
    /// loaded as `TlsConfig::from_pem_files` loads them) on 127.0.0.1, and
    /// clients that trust it.
    pub(crate) struct Tls;

    impl Transport for Tls {
        type Addr = TlsAddr;
        type ServerAddr = SocketAddr;
        const HANDSHAKES: u64 = 1;
        const PEEKS: bool = false;
        const ANSWERS_ASLEEP: bool = false;

        fn serve_hooked<B: ResponseBody>(
            builder: &dormant::Builder,
            service: impl Servable<B>,
            workers: usize,
            hooks: Hooks,
        ) -> Serve<TlsAddr> {
            let cert = Cert::new();
            let (server, client, ca) = (cert.config(), tls13(&cert), cert.cert.clone());
            let bind = move || async move {
                let (tcp, addr) = bind_tcp().await;
                let listener = dormant::tls::TlsListener::new(tcp, server);
                (
                    listener,
                    TlsAddr {
                        addr,
                        config: client,
                        ca,
                    },
                )
            };
            serve_on(builder, service, workers, cert, bind, hooks)
        }

        async fn connect_h2(addr: &TlsAddr) -> TokioIo<Box<dyn AsyncStream>> {
            let tls = connect(addr, b"h2").await;
            assert_eq!(
                tls.get_ref().1.alpn_protocol(),
                Some(&b"h2"[..]),
                "the server chose h2"
            );
            TokioIo::new(Box::new(tls))
        }

        async fn connect_http1(addr: &TlsAddr) -> Box<dyn AsyncStream> {
            Box::new(connect(addr, b"http/1.1").await)
        }
    }

    /// A TLS connection to `addr` offering ALPN `alpn`.
    async fn connect(
        addr: &TlsAddr,
        alpn: &[u8],
    ) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let mut config = ClientConfig::clone(&addr.config);
        config.alpn_protocols = vec![alpn.to_vec()];
        let tcp = tokio::net::TcpStream::connect(addr.addr)
            .await
            .expect("connect");
        tcp.set_nodelay(true).unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        TlsConnector::from(Arc::new(config))
            .connect(name, tcp)
            .await
            .expect("TLS handshake")
    }
}

/// Stamps out, for each generic behaviour `fn name<T: Transport>()` of the
/// test file, a test per transport: `tcp::name`, `unix::name`, and
/// `tls::name` when a crypto provider is built in.
macro_rules! over_every_transport {
    ($($name:ident),* $(,)?) => {
        mod tcp {
            $(#[test]
            fn $name() {
                super::$name::<crate::common::transport::Tcp>();
            })*
        }

        mod unix {
            $(#[test]
            fn $name() {
                super::$name::<crate::common::transport::Unix>();
            })*
        }

        #[cfg(any(feature = "tls", feature = "tls-ring"))]
        mod tls {
            $(#[test]
            fn $name() {
                super::$name::<crate::common::transport::Tls>();
            })*
        }
    };
}

pub(crate) use over_every_transport;
