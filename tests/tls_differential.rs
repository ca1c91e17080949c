//! The differential test of tests/http1_differential.rs over TLS 1.3: the
//! same stream of pipelined requests, cut at the same points (every
//! two-way split and the same seeded three-way splits), each part of the
//! plaintext sent as a TLS record of its own (its own TCP write) with a
//! pause longer than `park_after` between them, to dormant
//! (`dormant::tls::TlsListener`, which may park between the records) and to
//! plain hyper's HTTP/1 server over tokio-rustls's `TlsAcceptor`, with the
//! same certificate and the same handler; the bytes that come back
//! (`date` removed) must be identical, and so must the way each server
//! ends the connection (`close_notify`).
//!
//! Built only with a crypto provider (features `tls` or `tls-ring`), as
//! tests/tls.rs.
#![cfg(all(
    feature = "tls-no-provider",
    any(feature = "tls", feature = "tls-ring")
))]

mod common;
use common::tls::*;
use common::*;

use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use common::differential::{CONCURRENCY, PAUSE, STREAM, describe, split_cases};
use dormant::tls::{TlsConfig, TlsListener};
use hyper::service::service_fn;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, ProtocolVersion, ServerConfig};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// `park_after` of dormant, as in tests/http1_differential.rs.
const PARK_AFTER: Duration = Duration::from_millis(1);

/// A TCP stream that keeps a copy of what it writes, to check that each
/// part went out as one TLS record in one TCP write.
struct Recorded {
    tcp: TcpStream,
    /// The bytes of each write.
    writes: Vec<Vec<u8>>,
}

impl AsyncRead for Recorded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Recorded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let n = std::task::ready!(Pin::new(&mut this.tcp).poll_write(cx, buf))?;
        this.writes.push(buf[..n].to_vec());
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// How a TLS client saw its connection end.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// The server sent `close_notify`.
    CloseNotify,
    /// The server closed the socket without `close_notify`.
    Closed,
}

/// Sends `STREAM` over a new TLS 1.3 connection to `addr`, cut at `cuts`
/// (ascending): each part of the plaintext one record in one TCP write,
/// with [`PAUSE`] between them. Reads until the server ends the
/// connection; returns what was read (`date` removed) and how it ended.
fn run(addr: SocketAddr, config: &Arc<ClientConfig>, cuts: &[usize]) -> (String, End) {
    let tcp = block("connect", TcpStream::connect(addr)).expect("connect");
    tcp.set_nodelay(true).unwrap();
    let io = Recorded {
        tcp,
        writes: Vec::new(),
    };
    let name = ServerName::try_from("localhost").unwrap();
    let mut tls = block(
        "handshake",
        TlsConnector::from(config.clone()).connect(name, io),
    )
    .expect("TLS handshake");
    assert_eq!(
        tls.get_ref().1.protocol_version(),
        Some(ProtocolVersion::TLSv1_3)
    );
    tls.get_mut().0.writes.clear();

    let mut start = 0;
    let mut parts = 0;
    for &cut in cuts.iter().chain([STREAM.len()].iter()) {
        if start > 0 {
            std::thread::sleep(PAUSE);
        }
        block("write", async {
            tls.write_all(&STREAM[start..cut]).await?;
            tls.flush().await
        })
        .expect("write");
        start = cut;
        parts += 1;
    }
    let writes = &tls.get_ref().0.writes;
    assert_eq!(writes.len(), parts, "one TCP write a part, cuts {cuts:?}");
    for write in writes {
        let recs = records(write);
        assert!(
            recs.len() == 1 && recs[0].0 == APPLICATION_DATA,
            "one record a write, cuts {cuts:?}: {recs:?}"
        );
    }

    let mut buf = Vec::new();
    let end = loop {
        let mut chunk = [0u8; 8192];
        match block(
            &format!("read from {addr}, cuts {cuts:?}"),
            tls.read(&mut chunk),
        ) {
            Ok(0) => break End::CloseNotify,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => break End::Closed,
            Err(e) => panic!(
                "read until the end: {e}; got {:?}",
                String::from_utf8_lossy(&buf)
            ),
        }
    };
    (strip_date(&String::from_utf8_lossy(&buf)), end)
}

/// The reference: hyper's HTTP/1 server (default settings, as the plain
/// differential test's reference) over tokio-rustls's `TlsAcceptor`.
fn serve_hyper_tls(config: ServerConfig) -> PlainHyper {
    let acceptor = TlsAcceptor::from(Arc::new(config));
    serve_hyper_over(
        move |tcp| {
            let acceptor = acceptor.clone();
            async move { acceptor.accept(tcp).await.ok() }
        },
        describe::<hyper::body::Incoming>,
    )
}

#[test]
fn split_pipelines_over_tls_match_hyper_over_tokio_rustls() {
    split_pipelines_over_tls_on(2);
}

/// On one worker a woken connection is first polled in the lot's task.
#[test]
fn split_pipelines_over_tls_match_hyper_over_tokio_rustls_on_one_worker() {
    split_pipelines_over_tls_on(1);
}

fn split_pipelines_over_tls_on(workers: usize) {
    let cert = Cert::new();
    let mut b = dormant::Server::builder();
    b.park_after(PARK_AFTER);
    let config = TlsConfig::new(cert.server_config());
    let srv = serve_listener_with(
        &b,
        service_fn(describe::<dormant::Body>),
        workers,
        move || async move {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = tcp.local_addr().unwrap();
            (TlsListener::new(tcp, config), addr)
        },
    );
    let reference = serve_hyper_tls(cert.server_config());
    let (to_dormant, to_hyper) = (tls13(&cert), tls13(&cert));

    println!("dormant on {}, reference on {}", srv.addr, reference.addr);
    // The reference: hyper over tokio-rustls, one record.
    let want = run(reference.addr, &to_hyper, &[]);
    assert_eq!(want.0.matches("HTTP/1.1 200 OK").count(), 6, "{want:?}");
    assert!(want.0.contains("HTTP/1.1 100 Continue\r\n\r\n"), "{want:?}");
    assert!(want.0.contains("body=hello world trailers="), "{want:?}");
    assert_eq!(want.1, End::CloseNotify, "{want:?}");
    assert_eq!(run(srv.addr, &to_dormant, &[]), want, "dormant, one record");

    let cases = split_cases();

    for batch in cases.chunks(CONCURRENCY) {
        std::thread::scope(|s| {
            for cuts in batch {
                let (srv, reference, want) = (&srv, &reference, &want);
                let (to_dormant, to_hyper) = (&to_dormant, &to_hyper);
                s.spawn(move || {
                    let hyper_out = run(reference.addr, to_hyper, cuts);
                    let dormant_out = run(srv.addr, to_dormant, cuts);
                    assert_eq!(hyper_out, *want, "hyper over TLS, cuts {cuts:?}");
                    assert_eq!(dormant_out, *want, "dormant over TLS, cuts {cuts:?}");
                });
            }
        });
    }
    let s = srv.stats();
    println!(
        "{} split cases over TLS 1.3 ({} two-way, {} three-way); dormant on {workers} workers parked {} times",
        cases.len(),
        STREAM.len() - 1,
        cases.len() - (STREAM.len() - 1),
        s.parks
    );
    assert!(s.parks > 0, "no case parked: {s:?}");
    assert_eq!(
        (s.tls_handshakes, s.tls_handshake_failures),
        (cases.len() as u64 + 1, 0),
        "{s:?}"
    );
}
