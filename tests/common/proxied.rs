//! The transports of the PROXY protocol tests: a `ProxyProtocol` listener
//! over TCP on 127.0.0.1, over a Unix socket in a temporary directory,
//! and under TLS (`TlsListener<ProxyProtocol<TcpListener>>`, with a crypto
//! provider); clients that send a PROXY header first, whole, with the
//! bytes that follow it in one write, or byte by byte; and
//! [`over_every_proxied_transport!`], which stamps out a test per
//! transport from one generic body.

use std::convert::Infallible;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use dormant::PeerAddr;
use dormant::proxy::ProxyProtocol;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

use super::client::{Client, Stream};
use super::runtime::{Servable, bind_tcp};
use super::servers::{Hooks, Serve, serve_on};
use super::temp_dir::TempDir;
use super::transport::AsyncStream;

/// How a client sends its PROXY header.
#[derive(Clone, Copy, Debug)]
pub(crate) enum HeaderWrite {
    /// In a write of its own, before anything else.
    Apart,
    /// In the same write as the bytes that follow it: the first request
    /// (TCP, Unix socket) or the ClientHello (TLS).
    Together,
    /// One byte per write, each a moment after the last, so that the
    /// server reads it in pieces.
    ByteByByte,
}

/// A server behind a `ProxyProtocol` listener, and its clients.
pub(crate) trait Proxied {
    /// Where its servers listen, as clients reach them.
    type Addr: Clone + Send + Sync + 'static;
    /// The peer address type its handlers get in `PeerAddr`.
    type Peer: fmt::Debug + Clone + Send + Sync + 'static;
    /// A client's stream once the header is sent (over TLS, after the
    /// handshake).
    type Stream: Stream;
    /// A plain socket to the server (TCP under TLS), for bytes written by
    /// hand.
    type Socket: Stream;

    /// Starts `service` on a dormant server built by `builder`, on a
    /// runtime of its own with two workers.
    fn serve(builder: &dormant::Builder) -> Serve<Self::Addr> {
        Self::serve_with_workers(builder, 2)
    }

    /// [`serve`](Proxied::serve), on a runtime of `workers` worker
    /// threads.
    fn serve_with_workers(builder: &dormant::Builder, workers: usize) -> Serve<Self::Addr> {
        Self::serve_hooked(builder, workers, Hooks::default())
    }

    /// [`serve_with_workers`](Proxied::serve_with_workers), with `hooks`
    /// set on the `serve` call.
    fn serve_hooked(builder: &dormant::Builder, workers: usize, hooks: Hooks) -> Serve<Self::Addr>;

    /// A new connection that sent `header` the way `send` says; over TLS,
    /// then a handshake.
    fn connect(addr: &Self::Addr, header: &[u8], send: HeaderWrite) -> Client<Self::Stream>;

    /// A new connection that sends `pieces` (of a header) one write each,
    /// calling `pause` with the piece's index after every piece but the
    /// last; over TLS, then a handshake.
    fn connect_in_pieces(
        addr: &Self::Addr,
        pieces: &[&[u8]],
        pause: impl FnMut(usize),
    ) -> Client<Self::Stream>;

    /// A plain socket to the server.
    fn socket(addr: &Self::Addr) -> Client<Self::Socket>;

    /// The client's own address as the server sees its socket's peer: what
    /// `PeerAddr` shows when the header carries none.
    fn own_peer(client: &Client<Self::Stream>) -> String;

    /// An async connection for hyper's HTTP/2 client, after `header`: over
    /// TLS with ALPN `h2` (which the server must have chosen), else for
    /// HTTP/2 with prior knowledge.
    async fn connect_h2(addr: &Self::Addr, header: &[u8]) -> TokioIo<Box<dyn AsyncStream>>;
}

/// Answers every request with `{peer} {path} {body}`: the request's
/// `PeerAddr<P>` (`Debug`), or `none`.
pub(crate) fn peer_service<P>() -> impl Servable<Full<Bytes>>
where
    P: fmt::Debug + Clone + Send + Sync + 'static,
{
    service_fn(|req: Request<dormant::Body>| async move {
        let peer = req.extensions().get::<PeerAddr<P>>();
        let peer = peer.map_or_else(|| "none".to_owned(), |PeerAddr(peer)| format!("{peer:?}"));
        let (parts, body) = req.into_parts();
        let body = body
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = format!(
            "{peer} {} {}",
            parts.uri.path(),
            String::from_utf8_lossy(&body)
        );
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
    })
}

/// A client stream that sends `prefix` in front of its first write, in
/// the same write.
pub(crate) struct Prefixed<S> {
    pub(crate) stream: S,
    prefix: Vec<u8>,
}

impl<S: Read> Read for Prefixed<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }
}

impl<S: Write> Write for Prefixed<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.prefix.is_empty() {
            return self.stream.write(buf);
        }
        let write = [self.prefix.as_slice(), buf].concat();
        self.stream.write_all(&write)?;
        self.prefix.clear();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

impl<S: Stream> Stream for Prefixed<S> {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(timeout)
    }

    fn close_write(&mut self) -> io::Result<()> {
        self.stream.close_write()
    }

    fn local(&self) -> Option<SocketAddr> {
        self.stream.local()
    }

    fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.socket()
    }
}

/// Sends `header` on a plain socket as `send` says; the client sends what
/// is left of it with its first write.
fn plain<S: Stream>(mut stream: S, header: &[u8], send: HeaderWrite) -> Client<Prefixed<S>> {
    let prefix = match send {
        HeaderWrite::Apart => {
            stream.write_all(header).unwrap();
            Vec::new()
        }
        HeaderWrite::Together => header.to_vec(),
        HeaderWrite::ByteByByte => {
            for byte in header {
                stream.write_all(std::slice::from_ref(byte)).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            Vec::new()
        }
    };
    Client::new(Prefixed { stream, prefix })
}

/// Writes `pieces` on a plain socket, one write each, calling `pause`
/// after every piece but the last.
fn in_pieces<S: Write>(stream: &mut S, pieces: &[&[u8]], mut pause: impl FnMut(usize)) {
    for (i, piece) in pieces.iter().enumerate() {
        stream.write_all(piece).unwrap();
        if i + 1 < pieces.len() {
            pause(i);
        }
    }
}

/// `ProxyProtocol<TcpListener>` on 127.0.0.1.
pub(crate) struct Tcp;

impl Proxied for Tcp {
    type Addr = SocketAddr;
    type Peer = SocketAddr;
    type Stream = Prefixed<TcpStream>;
    type Socket = TcpStream;

    fn serve_hooked(builder: &dormant::Builder, workers: usize, hooks: Hooks) -> Serve<SocketAddr> {
        let bind = || async {
            let (tcp, addr) = bind_tcp().await;
            (ProxyProtocol::new(tcp), addr)
        };
        serve_on(
            builder,
            peer_service::<SocketAddr>(),
            workers,
            (),
            bind,
            hooks,
        )
    }

    fn connect(addr: &SocketAddr, header: &[u8], send: HeaderWrite) -> Client<Prefixed<TcpStream>> {
        plain(Self::socket(addr).stream, header, send)
    }

    fn connect_in_pieces(
        addr: &SocketAddr,
        pieces: &[&[u8]],
        pause: impl FnMut(usize),
    ) -> Client<Prefixed<TcpStream>> {
        let mut stream = Self::socket(addr).stream;
        in_pieces(&mut stream, pieces, pause);
        plain(stream, &[], HeaderWrite::Apart)
    }

    fn socket(addr: &SocketAddr) -> Client<TcpStream> {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        Client::new(stream)
    }

    fn own_peer(client: &Client<Prefixed<TcpStream>>) -> String {
        format!("{:?}", client.stream.stream.local_addr().unwrap())
    }

    async fn connect_h2(addr: &SocketAddr, header: &[u8]) -> TokioIo<Box<dyn AsyncStream>> {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.set_nodelay(true).unwrap();
        tcp.write_all(header).await.unwrap();
        TokioIo::new(Box::new(tcp))
    }
}

/// `ProxyProtocol<dormant::UnixListener>` at a fresh path in a fresh
/// temporary directory.
pub(crate) struct Unix;

impl Proxied for Unix {
    type Addr = PathBuf;
    type Peer = dormant::proxy::UnixPeer;
    type Stream = Prefixed<UnixStream>;
    type Socket = UnixStream;

    fn serve_hooked(builder: &dormant::Builder, workers: usize, hooks: Hooks) -> Serve<PathBuf> {
        let dir = TempDir::new();
        let path = dir.path.join("http.sock");
        let service = peer_service::<dormant::proxy::UnixPeer>();
        let bind = move || async move {
            let listener = dormant::UnixListener::bind(&path).expect("bind the Unix socket");
            (ProxyProtocol::new(listener), path)
        };
        serve_on(builder, service, workers, dir, bind, hooks)
    }

    fn connect(addr: &PathBuf, header: &[u8], send: HeaderWrite) -> Client<Prefixed<UnixStream>> {
        plain(Self::socket(addr).stream, header, send)
    }

    fn connect_in_pieces(
        addr: &PathBuf,
        pieces: &[&[u8]],
        pause: impl FnMut(usize),
    ) -> Client<Prefixed<UnixStream>> {
        let mut stream = Self::socket(addr).stream;
        in_pieces(&mut stream, pieces, pause);
        plain(stream, &[], HeaderWrite::Apart)
    }

    fn socket(addr: &PathBuf) -> Client<UnixStream> {
        let stream = UnixStream::connect(addr)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", addr.display()));
        Client::new(stream)
    }

    fn own_peer(client: &Client<Prefixed<UnixStream>>) -> String {
        // The client's socket has no name: tokio's address shows as std's.
        format!("{:?}", client.stream.stream.local_addr().unwrap())
    }

    async fn connect_h2(addr: &PathBuf, header: &[u8]) -> TokioIo<Box<dyn AsyncStream>> {
        let mut unix = tokio::net::UnixStream::connect(addr)
            .await
            .expect("connect");
        unix.write_all(header).await.unwrap();
        TokioIo::new(Box::new(unix))
    }
}

#[cfg(any(feature = "tls", feature = "tls-ring"))]
pub(crate) use tls::Tls;

#[cfg(any(feature = "tls", feature = "tls-ring"))]
mod tls {
    use std::sync::Arc;

    use tokio_rustls::TlsConnector;
    use tokio_rustls::rustls::ClientConfig;
    use tokio_rustls::rustls::pki_types::ServerName;

    use super::super::tls::{Cert, Tap, block, tls13};
    use super::super::tls_client::{TlsStream, tcp};
    use super::super::transport::tls::TlsAddr;
    use super::*;

    /// `TlsListener<ProxyProtocol<TcpListener>>` on 127.0.0.1, with a
    /// certificate made for it: the header comes before the ClientHello.
    pub(crate) struct Tls;

    impl Proxied for Tls {
        type Addr = TlsAddr;
        type Peer = SocketAddr;
        type Stream = TlsStream;
        type Socket = TcpStream;

        fn serve_hooked(
            builder: &dormant::Builder,
            workers: usize,
            hooks: Hooks,
        ) -> Serve<TlsAddr> {
            let cert = Cert::new();
            let (server, client, ca) = (cert.config(), tls13(&cert), cert.cert.clone());
            let service = peer_service::<SocketAddr>();
            let bind = move || async move {
                let (tcp, addr) = bind_tcp().await;
                let listener = dormant::tls::TlsListener::new(ProxyProtocol::new(tcp), server);
                let addr = TlsAddr {
                    addr,
                    config: client,
                    ca,
                };
                (listener, addr)
            };
            serve_on(builder, service, workers, cert, bind, hooks)
        }

        fn connect(addr: &TlsAddr, header: &[u8], send: HeaderWrite) -> Client<TlsStream> {
            let mut tcp = tcp(addr.addr);
            let tap = match send {
                HeaderWrite::Apart => {
                    block("send the header", tcp.write_all(header)).unwrap();
                    Tap::new(tcp)
                }
                HeaderWrite::Together => {
                    let mut tap = Tap::new(tcp);
                    tap.prefix = Some(header.to_vec());
                    tap
                }
                HeaderWrite::ByteByByte => {
                    for byte in header {
                        block("send a byte", tcp.write_all(std::slice::from_ref(byte))).unwrap();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Tap::new(tcp)
                }
            };
            let tls = TlsStream::handshake(tap, &addr.config, "localhost").expect("TLS handshake");
            Client::new(tls)
        }

        fn connect_in_pieces(
            addr: &TlsAddr,
            pieces: &[&[u8]],
            mut pause: impl FnMut(usize),
        ) -> Client<TlsStream> {
            let mut tcp = tcp(addr.addr);
            for (i, piece) in pieces.iter().enumerate() {
                block("send a piece", tcp.write_all(piece)).unwrap();
                if i + 1 < pieces.len() {
                    pause(i);
                }
            }
            let tls = TlsStream::handshake(Tap::new(tcp), &addr.config, "localhost")
                .expect("TLS handshake");
            Client::new(tls)
        }

        fn socket(addr: &TlsAddr) -> Client<TcpStream> {
            Tcp::socket(&addr.addr)
        }

        fn own_peer(client: &Client<TlsStream>) -> String {
            format!(
                "{:?}",
                client.stream.tls.get_ref().0.tcp.local_addr().unwrap()
            )
        }

        async fn connect_h2(addr: &TlsAddr, header: &[u8]) -> TokioIo<Box<dyn AsyncStream>> {
            let mut config = ClientConfig::clone(&addr.config);
            config.alpn_protocols = vec![b"h2".to_vec()];
            let mut tcp = tokio::net::TcpStream::connect(addr.addr)
                .await
                .expect("connect");
            tcp.set_nodelay(true).unwrap();
            tcp.write_all(header).await.unwrap();
            let name = ServerName::try_from("localhost").unwrap();
            let tls = TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .expect("TLS handshake");
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
            TokioIo::new(Box::new(tls))
        }
    }
}

/// Stamps out, for each generic behaviour `fn name<T: Proxied>()` of the
/// test file, a test per transport: `tcp::name`, `unix::name`, and
/// `tls::name` when a crypto provider is built in.
macro_rules! over_every_proxied_transport {
    ($($name:ident),* $(,)?) => {
        mod tcp {
            $(#[test]
            fn $name() {
                super::$name::<crate::common::proxied::Tcp>();
            })*
        }

        mod unix {
            $(#[test]
            fn $name() {
                super::$name::<crate::common::proxied::Unix>();
            })*
        }

        #[cfg(any(feature = "tls", feature = "tls-ring"))]
        mod tls {
            $(#[test]
            fn $name() {
                super::$name::<crate::common::proxied::Tls>();
            })*
        }
    };
}

pub(crate) use over_every_proxied_transport;
