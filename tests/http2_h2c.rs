//! HTTP/2: over every transport (TCP and a Unix socket with prior
//! knowledge, TLS with ALPN `h2`) served by hyper's h2 server, asleep in the
//! lot while idle and woken by the next request; over TCP, the preface
//! split across writes, and HTTP/2 turned off. (`http2_sleep.rs` tests the
//! sleep in depth.)

use crate::common::h2::post;
use crate::common::hyper::serve_plain_hyper;
use crate::common::ladder::ladder;
use crate::common::rungs::client_runtime;
use crate::common::services::{echo, echo_service};
use crate::common::tcp::{fast_park, serve_with};
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Transport, over_every_transport};

use std::time::Duration;

use dormant::Rung::{Active, Dormant, Parked};
use http::{StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::time::timeout;

over_every_transport!(an_h2_connection_sleeps_when_idle_and_wakes_for_streams);

/// An HTTP/2 connection (TCP and a Unix socket: prior knowledge; TLS:
/// ALPN `h2`) is served by hyper's h2 server, sleeps once idle (PARKED,
/// then DORMANT), wakes for concurrent streams, and closes cleanly when the
/// client goes.
fn an_h2_connection_sleeps_when_idle_and_wakes_for_streams<T: Transport>() {
    let srv = T::serve(&ladder(Duration::from_millis(10)), echo_service());
    client_runtime().block_on(async {
        let io = timeout(CLIENT_TIMEOUT, T::connect_h2(&srv.addr))
            .await
            .expect("connect timed out");
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .expect("h2 handshake");
        let conn = tokio::spawn(conn);

        for (path, body) in [("/h2/one", "first"), ("/h2/two", "")] {
            let (status, version, got) = post(&mut send, path, body).await;
            assert_eq!((status, version), (StatusCode::OK, Version::HTTP_2));
            assert_eq!(got, format!("POST {path} read={body}"));
        }
        // Asleep and DORMANT; it may also have parked between the two
        // requests (if the second came after `park_after`), and woken.
        srv.wait_for("h2 asleep and dormant", |s| {
            s.connections.total() == 1 && s.connections[Dormant] == 1 && s.parks == s.wakes + 1
        });

        // Concurrent streams on the same connection.
        let mut send2 = send.clone();
        let (a, b) = tokio::join!(
            post(&mut send, "/h2/three", "3"),
            post(&mut send2, "/h2/four", "4")
        );
        assert_eq!((a.0, a.1), (StatusCode::OK, Version::HTTP_2));
        assert_eq!((b.0, b.1), (StatusCode::OK, Version::HTTP_2));
        assert_eq!(a.2, "POST /h2/three read=3");
        assert_eq!(b.2, "POST /h2/four read=4");
        let s = srv.stats();
        assert!(s.wakes >= 1 && s.lot_wakes >= 1, "{s:?}");

        drop(send);
        drop(send2);
        timeout(CLIENT_TIMEOUT, conn)
            .await
            .expect("client connection did not end")
            .unwrap()
            .expect("h2 connection");
    });
    srv.wait_for("h2 closed", |s| s.connections.total() == 0);
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.requests, s.tls_handshakes),
        (1, 4, T::HANDSHAKES),
        "{s:?}"
    );
}

/// The preface split across two writes (the driver waits for the rest
/// before choosing the protocol).
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn h2c_preface_split_across_writes() {
    use tokio::io::AsyncWriteExt;
    let srv = serve_with(&fast_park(), echo_service());
    let mut stream = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    stream.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    // hyper's client writes the whole preface again; skip what was sent.
    let io = SkipPrefix {
        inner: stream,
        skip: 16,
    };
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let (status, version, body) = post(&mut send, "/split", "x").await;
    assert_eq!((status, version), (StatusCode::OK, Version::HTTP_2));
    assert_eq!(body, "POST /split read=x");
}

/// Drops the first `skip` bytes written (already sent by hand).
struct SkipPrefix {
    inner: tokio::net::TcpStream,
    skip: usize,
}

impl tokio::io::AsyncRead for SkipPrefix {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for SkipPrefix {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.skip > 0 {
            let n = self.skip.min(buf.len());
            self.skip -= n;
            return std::task::Poll::Ready(Ok(n));
        }
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// With `http2(false)`, the preface goes to hyper's HTTP/1 server, which
/// closes without a response (hyper sends none for a parse error of kind
/// `VersionH2`), exactly as plain hyper does.
#[test]
fn h2c_disabled_closes_like_plain_hyper() {
    let mut b = fast_park();
    b.http2(false);
    let srv = serve_with(&b, echo_service());
    let plain = serve_plain_hyper(echo::<hyper::body::Incoming>);
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut c = plain.connect();
    c.send(preface);
    assert_eq!(c.read_to_close(), "");
    let mut c = srv.connect();
    c.send(preface);
    assert_eq!(c.read_to_close(), "");
    srv.wait_for("closed", |s| {
        s.connections[Active] == 0 && s.connections[Parked] == 0
    });
}
