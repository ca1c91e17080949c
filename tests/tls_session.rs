//! TLS sessions over the idle ladder (`dormant::tls::TlsListener`), with
//! a real TLS client (tokio-rustls) and certificates made in the test
//! (rcgen): what only TLS has. TLS records cut across TCP writes and parks
//! (the start of a record travels with the parked and the dormant
//! session), pipelined requests in one record and across records, the
//! handshake's records cut, TLS 1.2 and 1.3, ALPN (HTTP/1.1, none),
//! stalled handshakes, plaintext on the TLS port, a corrupted record, a
//! certificate reload, KeyUpdate, graceful shutdown in the middle of a
//! record or a handshake, session resumption, and what handlers learn of
//! the handshake (`TlsInfo`: server name, ALPN, version, cipher suite, the
//! client's certificate with mutual TLS). The ladder's behaviours over
//! TLS (keep-alive, pipelining, split requests, client close, descriptors,
//! timeouts, shutdown, the differential against hyper) are in the files
//! of each behaviour, which run over every transport.
//!
//! Built only with a crypto provider (features `tls` or `tls-ring`): with
//! `tls-no-provider` alone neither the server's PEM loader nor the test's
//! client has one.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::common::client::{Client, End, Endpoint, get, ok};
use crate::common::h2::post;
use crate::common::ladder::ladder;
use crate::common::rungs::none_open;
use crate::common::runtime::{ResponseBody, Servable, bind_tcp};
use crate::common::servers::{Hooks, Serve, serve_on};
use crate::common::services::echo_service;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::tls::{
    APPLICATION_DATA, Cert, Tap, block, client_config, provider, records, tls13,
};
use crate::common::tls_client::{TlsStream, tcp};
use crate::common::xorshift::XorShift;
use dormant::Rung::{Active, Dormant, Parked};
use dormant::tls::{TlsConfig, TlsInfo, TlsListener};
use http::{Request, StatusCode, Version};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncWriteExt;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::version::{TLS12, TLS13};
use tokio_rustls::rustls::{
    CipherSuite, ClientConfig, ClientConnection, HandshakeKind, ProtocolVersion, RootCertStore,
    ServerConfig,
};

/// Longer than `park_after` of [`ladder`], many times over.
const PAUSE: Duration = Duration::from_millis(30);

/// The echo service over TLS with a certificate made for it (from its PEM
/// files), served as `builder` says; the certificate and the server.
fn echo_over_tls(builder: &dormant::Builder) -> (Cert, Serve<SocketAddr>) {
    let cert = Cert::new();
    let srv = serve_tls(builder, &cert.config(), echo_service());
    (cert, srv)
}

/// A TLS client, blocking on the client runtime, through a [`Tap`].
type TlsClient = Client<TlsStream>;

/// Connects to `addr` as the server `name` and completes the handshake.
fn connect_as(addr: SocketAddr, config: &Arc<ClientConfig>, name: &str) -> TlsClient {
    let tls = TlsStream::handshake(Tap::new(tcp(addr)), config, name).expect("TLS handshake");
    Client::new(tls)
}

/// Connects to `addr` as `localhost` and completes the handshake.
fn connect(addr: SocketAddr, config: &Arc<ClientConfig>) -> TlsClient {
    connect_as(addr, config, "localhost")
}

/// What these tests do with a TLS client beyond HTTP/1 bytes.
trait Session {
    /// The client's session.
    fn conn(&self) -> &ClientConnection;

    /// Reads once; returns the plaintext's length, or the error.
    fn read_some(&mut self) -> io::Result<usize>;

    /// Sends `plain` as the TLS records the client makes of it, but takes
    /// them back instead of writing them: the ciphertext, for
    /// [`raw`](Self::raw).
    fn seal(&mut self, plain: &[&[u8]]) -> Vec<u8>;

    /// Writes `bytes` to the socket as they are, in one write.
    fn raw(&mut self, bytes: &[u8]);

    /// Sends a TLS 1.3 KeyUpdate (asking the server for one too).
    fn key_update(&mut self);

    /// `GET path` and its exact answer from the echo service.
    fn get_ok(&mut self, path: &str);
}

impl Session for TlsClient {
    fn conn(&self) -> &ClientConnection {
        self.stream.tls.get_ref().1
    }

    fn read_some(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 8192];
        self.stream.read(&mut chunk)
    }

    fn seal(&mut self, plain: &[&[u8]]) -> Vec<u8> {
        self.stream.tls.get_mut().0.held = Some(Vec::new());
        for part in plain {
            self.send(part);
        }
        self.stream.tls.get_mut().0.held.take().unwrap()
    }

    fn raw(&mut self, bytes: &[u8]) {
        let tcp = &mut self.stream.tls.get_mut().0.tcp;
        block("raw write", tcp.write_all(bytes)).expect("raw write");
    }

    fn key_update(&mut self) {
        self.stream
            .tls
            .get_mut()
            .1
            .refresh_traffic_keys()
            .expect("refresh_traffic_keys");
        block("flush KeyUpdate", self.stream.tls.flush()).expect("flush KeyUpdate");
    }

    fn get_ok(&mut self, path: &str) {
        self.send(get(path).as_bytes());
        assert_eq!(self.response(), ok(&format!("GET {path} read=")));
    }
}

/// Serves `service` over TLS with `config` on 127.0.0.1 (a free port).
fn serve_tls<B: ResponseBody>(
    builder: &dormant::Builder,
    config: &TlsConfig,
    service: impl Servable<B>,
) -> Serve<SocketAddr> {
    let config = config.clone();
    serve_on(
        builder,
        service,
        2,
        (),
        move || async move {
            let (tcp, addr) = bind_tcp().await;
            (TlsListener::new(tcp, config), addr)
        },
        Hooks::default(),
    )
}

/// Reads a raw socket until the server closes it; returns the bytes.
fn raw_to_close(stream: &mut StdTcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    let mut got = Vec::new();
    loop {
        let mut chunk = [0u8; 8192];
        match stream.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("read until close (timed out?): {e}; got {got:?}"),
        }
    }
}

/// A ClientHello as a rustls client with `config` sends it.
fn client_hello(config: &Arc<ClientConfig>) -> Vec<u8> {
    let mut conn =
        ClientConnection::new(config.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    assert_eq!(
        records(&hello),
        [(22, hello.len() - 5)],
        "one handshake record"
    );
    hello
}

/// The pipelined requests of test 2, one with a `Content-Length` body and
/// one chunked, and their answers.
const PIPELINED: &[u8] = b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\n\
    POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc\
    GET /3 HTTP/1.1\r\nHost: x\r\n\r\n\
    PUT /4 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n";

fn pipelined_answers(c: &mut TlsClient) {
    assert_eq!(c.response(), ok("GET /1 read="));
    assert_eq!(c.response(), ok("POST /2 read=abc"));
    assert_eq!(c.response(), ok("GET /3 read="));
    assert_eq!(c.response(), ok("PUT /4 read=hi"));
}

/// 2. Pipelined requests in one TLS record, and in records cut anywhere
///    (inside a request line, a header, a body), all in one TCP write:
///    exact responses, in order; then the connection parks and serves
///    more.
#[test]
fn pipelined_requests_in_one_record_and_across_records() {
    let (cert, srv) = echo_over_tls(&ladder(None));
    let config = tls13(&cert);

    let mut c = connect(srv.addr, &config);
    let sealed = c.seal(&[PIPELINED]);
    assert_eq!(records(&sealed).len(), 1, "one record");
    c.raw(&sealed);
    pipelined_answers(&mut c);
    srv.wait_for("park", |s| {
        s.parks == 1 && s.connections[Parked] == 1 && s.requests == 4
    });
    assert_eq!(srv.stats().pool.in_use, 0);
    c.get_ok("/5");

    // Records cut at awkward places: in the first request line, in a
    // header name, between the head and the body, inside the body, in the
    // chunked framing.
    let cuts = [5, 31, 79, 81, 112, 170, PIPELINED.len() - 1];
    let mut parts = Vec::new();
    let mut from = 0;
    for to in cuts.into_iter().chain([PIPELINED.len()]) {
        parts.push(&PIPELINED[from..to]);
        from = to;
    }
    let mut c = connect(srv.addr, &config);
    let sealed = c.seal(&parts);
    let recs = records(&sealed);
    assert_eq!(recs.len(), parts.len(), "one record a part: {recs:?}");
    assert!(recs.iter().all(|&(kind, _)| kind == APPLICATION_DATA));
    c.raw(&sealed);
    pipelined_answers(&mut c);
    srv.wait_for("park", |s| {
        s.parks == 3 && s.connections[Parked] == 2 && s.requests == 9
    });
    c.send(b"GET /6 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(
        c.read_to_end(),
        (
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 12\r\n\r\nGET /6 read="
                .to_owned(),
            End::Clean
        ),
        "a closing connection sends close_notify"
    );
    assert_eq!(srv.stats().pool.in_use, 0);
}

/// How many places test 3 cuts a record at.
const CUTS: usize = 5;

/// Where test 3 cuts a record of `len` bytes: in its header, right after
/// it, in the payload, before its last byte.
fn record_cuts(len: usize) -> [usize; CUTS] {
    [1, 4, 5, 12, len - 1]
}

/// 3. A TLS record cut in two TCP writes with a pause longer than
///    `park_after` between them, the ciphertext written by the test: the
///    start of the record waits in the session, and the request is
///    answered exactly. On a new connection (PARKED in its task since
///    accept), on a DORMANT one (the start wakes it, the rest comes after
///    the pause), and on an ACTIVE one (the start comes with the previous
///    request; the connection parks without its task and goes DORMANT
///    holding it).
#[test]
fn a_record_split_across_tcp_writes_and_a_park() {
    let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(20)));
    let config = tls13(&cert);

    // A new connection's first request.
    let req = get("/new");
    for i in 0..CUTS {
        let mut c = connect(srv.addr, &config);
        let sealed = c.seal(&[req.as_bytes()]);
        let cut = record_cuts(sealed.len())[i];
        c.raw(&sealed[..cut]);
        std::thread::sleep(PAUSE);
        srv.wait_for("no buffer held", |s| s.pool.in_use == 0);
        c.raw(&sealed[cut..]);
        assert_eq!(c.response(), ok("GET /new read="), "cut at {cut}");
    }

    // A DORMANT connection woken by the start of a record.
    srv.wait_for("new connections closed", none_open);
    let mut c = connect(srv.addr, &config);
    c.get_ok("/0");
    for i in 0..CUTS {
        srv.wait_for("dormant", |s| {
            s.connections[Dormant] == 1 && s.connections[Parked] + s.connections[Active] == 0
        });
        let woken = srv.stats().lot_wakes;
        let path = format!("/dor/{i}");
        let sealed = c.seal(&[get(&path).as_bytes()]);
        let cut = record_cuts(sealed.len())[i];
        c.raw(&sealed[..cut]);
        srv.wait_for("woken", |s| s.lot_wakes > woken);
        // The start of a record is nothing for HTTP: the connection goes
        // back to sleep holding it, and no buffer.
        srv.wait_for("dormant again, holding the record's start", |s| {
            s.connections[Dormant] == 1
                && s.connections[Parked] + s.connections[Active] == 0
                && s.pool.in_use == 0
        });
        c.raw(&sealed[cut..]);
        assert_eq!(
            c.response(),
            ok(&format!("GET {path} read=")),
            "cut at {cut}"
        );
    }

    // The start of a record arrives with the previous request: the
    // connection parks without its task and goes DORMANT holding it.
    for i in 0..CUTS {
        srv.wait_for("dormant", |s| {
            s.connections[Dormant] == 1 && s.connections[Parked] + s.connections[Active] == 0
        });
        let before = srv.stats();
        let sealed = c.seal(&[get("/a").as_bytes(), get("/b").as_bytes()]);
        let recs = records(&sealed);
        assert_eq!(recs.len(), 2, "{recs:?}");
        let first = 5 + recs[0].1;
        let cut = record_cuts(sealed.len() - first)[i];
        c.raw(&sealed[..first + cut]);
        assert_eq!(c.response(), ok("GET /a read="));
        srv.wait_for("parked, then dormant, with the record's start", |s| {
            s.parks == before.parks + 1
                && s.dormancies == before.dormancies + 1
                && s.connections[Dormant] == 1
        });
        assert_eq!(srv.stats().pool.in_use, 0);
        c.raw(&sealed[first + cut..]);
        assert_eq!(c.response(), ok("GET /b read="), "round {i}, cut at {cut}");
    }
    let s = srv.stats();
    assert_eq!(s.lot_closes, 0, "{s:?}");
}

/// 2b. A record sent byte by byte, the connection asleep between its
///     bytes: each byte wakes the DORMANT connection, which goes back to
///     sleep holding the record's start (parking first, in its task, then
///     leaving it), until the last byte completes the request, which is
///     answered exactly. Then the same for the next request, so that the
///     keys rebuilt at each wake read a record that spans many sleeps.
#[test]
fn a_record_sent_byte_by_byte_sleeps_between_its_bytes() {
    let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(5)));
    let mut c = connect(srv.addr, &tls13(&cert));
    c.get_ok("/0");
    for round in 1..=2 {
        let path = format!("/byte-by-byte/{round}");
        let sealed = c.seal(&[get(&path).as_bytes()]);
        for (i, byte) in sealed.iter().enumerate() {
            srv.wait_for("dormant, holding what came", |s| {
                s.connections[Dormant] == 1
                    && s.connections[Parked] + s.connections[Active] == 0
                    && s.pool.in_use == 0
            });
            let before = srv.stats();
            c.raw(&[*byte]);
            if i + 1 < sealed.len() {
                srv.wait_for("woken, parked and dormant again", |s| {
                    s.lot_wakes > before.lot_wakes && s.dormancies > before.dormancies
                });
            }
        }
        assert_eq!(c.response(), ok(&format!("GET {path} read=")));
    }
    let s = srv.stats();
    assert_eq!((s.lot_closes, s.tls_kept_by_rustls), (0, 0), "{s:?}");
}

/// 3. The handshake's records cut across TCP writes with a pause between
///    the parts, in their header and after it: the ClientHello, and each
///    write of the client's last flight (TLS 1.3: ChangeCipherSpec,
///    Finished; TLS 1.2: ClientKeyExchange, ChangeCipherSpec, Finished).
#[test]
fn handshake_records_split_across_tcp_writes() {
    let (cert, srv) = echo_over_tls(&ladder(None));
    for version in [&TLS13, &TLS12] {
        let config = client_config(&[&cert], &[version], &[]);
        for at in [1, 5] {
            // Cut the first write, then the next, until the handshake has
            // no write left to cut.
            let mut write = 0;
            loop {
                let mut tap = Tap::new(tcp(srv.addr));
                tap.cut = Some((write, at, PAUSE));
                let mut c = Client::new(
                    TlsStream::handshake(tap, &config, "localhost").expect("TLS handshake"),
                );
                let cut = c.stream.tls.get_ref().0.cuts == 1;
                c.get_ok("/hs");
                if !cut {
                    break;
                }
                write += 1;
            }
            assert!(write >= 2, "{version:?}: only {write} handshake writes cut");
        }
    }
    let s = srv.stats();
    assert_eq!(s.tls_handshake_failures, 0, "{s:?}");
}

/// 4. TLS 1.2 and TLS 1.3, each client limited to one: the version is
///    the one asked for, and the session survives PARKED and DORMANT.
#[test]
fn tls12_and_tls13() {
    let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(20)));
    for (version, want) in [
        (&TLS12, ProtocolVersion::TLSv1_2),
        (&TLS13, ProtocolVersion::TLSv1_3),
    ] {
        srv.wait_for("the last client's connection closed", none_open);
        let before = srv.stats();
        let mut c = connect(srv.addr, &client_config(&[&cert], &[version], &[]));
        assert_eq!(c.conn().protocol_version(), Some(want));
        assert_eq!(
            c.conn()
                .negotiated_cipher_suite()
                .map(|s| s.version().version),
            Some(want)
        );
        c.get_ok("/0");
        srv.wait_for("parked", |s| s.parks == before.parks + 1);
        c.get_ok("/1");
        srv.wait_for("dormant", |s| s.dormancies == before.dormancies + 1);
        c.get_ok("/2");
        srv.wait_for("dormant again", |s| s.dormancies == before.dormancies + 2);
        c.get_ok("/3");
        let s = srv.stats();
        assert_eq!(s.lot_wakes, before.lot_wakes + 2, "{want:?}: {s:?}");
    }
}

/// 5. ALPN: `http/1.1` or no ALPN gets HTTP/1.1 (parked like any), no
///    ALPN and HTTP/2's preface gets HTTP/2 with prior knowledge, HTTP/2's
///    preface after agreeing on `http/1.1` is refused; a server with
///    HTTP/2 off picks `http/1.1` from a client offering both. (ALPN `h2`,
///    and the connection never parked, is in `http2_h2c.rs`, over every
///    transport.)
#[test]
fn alpn_http1_and_none() {
    let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(10)));

    for (alpn, agreed) in [
        (&[&b"http/1.1"[..]][..], Some(&b"http/1.1"[..])),
        (&[], None),
    ] {
        srv.wait_for("the last client's connection closed", none_open);
        let before = srv.stats();
        let mut c = connect(srv.addr, &client_config(&[&cert], &[], alpn));
        assert_eq!(c.conn().alpn_protocol(), agreed);
        c.get_ok("/one");
        srv.wait_for("parked", |s| s.parks == before.parks + 1);
        c.get_ok("/two");
    }

    // No ALPN, and HTTP/2's preface: HTTP/2 with prior knowledge.
    srv.wait_for("the last client's connection closed", none_open);
    let c = connect(srv.addr, &client_config(&[&cert], &[], &[]));
    assert_eq!(c.conn().alpn_protocol(), None);
    block("h2 with prior knowledge", async {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(c.stream.tls))
                .await
                .expect("h2 handshake");
        let conn = tokio::spawn(conn);
        let (status, version, got) = post(&mut send, "/prior", "knowledge").await;
        assert_eq!((status, version), (StatusCode::OK, Version::HTTP_2));
        assert_eq!(got, "POST /prior read=knowledge");
        drop(send);
        conn.await.unwrap().expect("h2 connection");
    });

    // HTTP/2's preface on a connection that agreed on HTTP/1.1: hyper's
    // HTTP/1 parser rejects it, and the connection closes without a
    // response.
    let mut c = connect(srv.addr, &client_config(&[&cert], &[], &[b"http/1.1"]));
    c.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
    let (got, _) = c.read_to_end();
    assert_eq!(got, "", "closed without a response");

    let mut b = ladder(None);
    b.http2(false);
    let srv = serve_tls(&b, &cert.config(), echo_service());
    let mut c = connect(
        srv.addr,
        &client_config(&[&cert], &[], &[b"h2", b"http/1.1"]),
    );
    assert_eq!(c.conn().alpn_protocol(), Some(&b"http/1.1"[..]));
    c.get_ok("/h1-only");
}

/// Three clients that stall the handshake: one sends nothing, one half a
/// ClientHello, one a whole ClientHello and then never answers the
/// server's flight.
struct Stalled {
    silent: StdTcpStream,
    half: StdTcpStream,
    whole: StdTcpStream,
}

impl Stalled {
    fn connect(addr: SocketAddr, config: &Arc<ClientConfig>) -> Stalled {
        let hello = client_hello(config);
        let silent = StdTcpStream::connect(addr).unwrap();
        let mut half = StdTcpStream::connect(addr).unwrap();
        half.write_all(&hello[..hello.len() / 2]).unwrap();
        let mut whole = StdTcpStream::connect(addr).unwrap();
        whole.write_all(&hello).unwrap();
        Stalled {
            silent,
            half,
            whole,
        }
    }

    /// Each is closed: the first two got nothing, the third the server's
    /// flight (handshake records) and then the close.
    fn closed(mut self) {
        assert_eq!(
            raw_to_close(&mut self.silent),
            b"",
            "nothing sent, nothing back"
        );
        assert_eq!(
            raw_to_close(&mut self.half),
            b"",
            "half a hello, nothing back"
        );
        let flight = raw_to_close(&mut self.whole);
        assert_eq!(
            flight.first(),
            Some(&22),
            "a handshake record, then the close"
        );
    }
}

/// 7. Stalled handshakes are closed by the header read timeout, which
///    counts from accept; a normal client is served meanwhile, and goes
///    dormant and comes back after.
#[test]
fn stalled_handshakes_are_closed_by_the_header_read_timeout() {
    let mut b = ladder(Duration::from_millis(10));
    b.header_read_timeout(Duration::from_millis(500));
    let (cert, srv) = echo_over_tls(&b);
    let config = tls13(&cert);
    let stalled = Stalled::connect(srv.addr, &config);

    let mut c = connect(srv.addr, &config);
    c.get_ok("/meanwhile");
    srv.wait_for("dormant", |s| s.connections[Dormant] == 1);

    stalled.closed();
    // A session counts its failed handshake when it is dropped, just
    // after the driver counted the timeout that closed it.
    srv.wait_for("timed out", |s| {
        s.header_read_timeouts == 3 && s.tls_handshake_failures == 3
    });
    c.get_ok("/after");
    let s = srv.stats();
    assert_eq!(
        (
            s.accepted,
            s.header_read_timeouts,
            s.lot_wakes,
            s.tls_handshake_timeouts
        ),
        (4, 3, 1, 0),
        "{s:?}"
    );
    assert_eq!(
        (s.tls_handshakes, s.tls_handshake_failures),
        (1, 3),
        "{s:?}"
    );
}

/// 7. Stalled handshakes are closed by the TLS handshake timeout, which
///    counts from accept, when the header read timeout is longer; a client
///    whose handshake completed in time may send its first request later
///    than that.
#[test]
fn stalled_handshakes_are_closed_by_the_handshake_timeout() {
    let mut b = ladder(Duration::from_millis(10));
    b.header_read_timeout(Duration::from_secs(30))
        .handshake_timeout(Duration::from_millis(500));
    let (cert, srv) = echo_over_tls(&b);
    let config = tls13(&cert);
    let stalled = Stalled::connect(srv.addr, &config);

    let mut c = connect(srv.addr, &config);
    stalled.closed();
    srv.wait_for("timed out", |s| {
        s.tls_handshake_timeouts == 3 && s.tls_handshake_failures == 3
    });
    // Its handshake completed in time: the first request may come after
    // the handshake timeout.
    c.get_ok("/late-first-request");
    srv.wait_for("dormant", |s| s.connections[Dormant] == 1);
    c.get_ok("/after");
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.header_read_timeouts, s.tls_handshake_timeouts),
        (4, 0, 3),
        "{s:?}"
    );
    assert_eq!(
        (s.tls_handshakes, s.tls_handshake_failures),
        (1, 3),
        "{s:?}"
    );
}

/// 8. Plaintext sent to the TLS port (an HTTP/1.1 request, HTTP/2's
///    preface): no HTTP answer, a `decode_error` alert and the close, a
///    failed handshake counted; a TLS client after each is served.
///
///    It found a bug (fixed): after rustls's error, `TlsStream::process`
///    encoded the queued alert and then handed rustls the same bad bytes
///    again; rustls queued a second fatal alert and its
///    `debug_assert!(!self.sent_fatal_alert)` panicked the connection's
///    task before the alert was written (no alert, no failure counted).
#[test]
fn plaintext_on_the_tls_port_is_closed() {
    let (cert, srv) = echo_over_tls(&ladder(None));
    let config = tls13(&cert);
    let mut served = Vec::new();
    for (i, plain) in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ]
    .into_iter()
    .enumerate()
    {
        let mut raw = srv.connect();
        raw.send(plain);
        // A fatal (2) decode_error (50) alert record, then the close.
        assert_eq!(
            raw_to_close(&mut raw.stream),
            [21, 3, 3, 0, 2, 2, 50],
            "{:?}",
            String::from_utf8_lossy(plain)
        );
        srv.wait_for("a failed handshake", |s| {
            s.tls_handshake_failures == i as u64 + 1
        });
        let mut c = connect(srv.addr, &config);
        c.get_ok("/tls");
        served.push(c);
    }
    srv.wait_for("plaintext connections closed", |s| {
        s.connections[Parked] == 2
            && s.connections[Active] + s.connections[Dormant] == 0
            && s.parks == 2
    });
    for c in &mut served {
        c.get_ok("/again");
    }
    let s = srv.stats();
    assert_eq!(
        (s.tls_handshakes, s.tls_handshake_failures),
        (2, 2),
        "{s:?}"
    );
}

/// 8. A record that fails to decrypt (a byte flipped on the way) on an
///    established session, woken from DORMANT: the server answers with a
///    `bad_record_mac` alert and closes that connection only (the same
///    bug as the test above).
#[test]
fn a_corrupted_record_closes_its_connection_with_an_alert() {
    let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(10)));
    let config = tls13(&cert);
    let mut other = connect(srv.addr, &config);
    other.get_ok("/other");
    let mut c = connect(srv.addr, &config);
    c.get_ok("/0");
    srv.wait_for("dormant", |s| s.connections[Dormant] == 2);
    let mut sealed = c.seal(&[get("/1").as_bytes()]);
    sealed[10] ^= 1;
    c.raw(&sealed);
    let mut chunk = [0u8; 64];
    let error = c.stream.read(&mut chunk).expect_err("an alert");
    assert!(
        error.to_string().contains("BadRecordMac"),
        "not a bad_record_mac alert: {error:?}"
    );
    srv.wait_for("closed", |s| {
        s.connections[Dormant] == 1 && s.connections[Active] + s.connections[Parked] == 0
    });
    other.get_ok("/other/again");
}

/// 9. `TlsConfig::reload` with a new certificate: a new connection gets
///    it, an established one (dormant across the reload) keeps working on
///    its session; `reload_from_pem_files` likewise, and one that fails
///    keeps the configuration.
#[test]
fn reload_serves_new_connections_with_the_new_certificate() {
    let (a, b, c3) = (Cert::new(), Cert::new(), Cert::new());
    let config = a.config();
    let srv = serve_tls(&ladder(Duration::from_millis(10)), &config, echo_service());
    // Each client its own configuration: none resumes another's session.
    let client = || client_config(&[&a, &b, &c3], &[&TLS13], &[]);
    let peer = |c: &TlsClient| c.conn().peer_certificates().unwrap()[0].clone();

    let mut old = connect(srv.addr, &client());
    assert_eq!(peer(&old), a.der);
    old.get_ok("/old/0");
    srv.wait_for("dormant", |s| s.connections[Dormant] == 1);

    config.reload(server_config(&b));
    let mut new = connect(srv.addr, &client());
    assert_eq!(peer(&new), b.der, "a new connection after the reload");
    new.get_ok("/new/0");
    old.get_ok("/old/1");
    assert_eq!(config.get().alpn_protocols, [&b"h2"[..], b"http/1.1"]);

    let missing = c3.key.with_file_name("missing.pem");
    let error = config
        .reload_from_pem_files(&c3.cert, &missing)
        .expect_err("a missing key file");
    assert!(
        error.to_string().contains("missing.pem"),
        "the error names the file: {error}"
    );
    let mut c = connect(srv.addr, &client());
    assert_eq!(peer(&c), b.der, "a failed reload keeps the configuration");
    c.get_ok("/still-b");

    config.reload_from_pem_files(&c3.cert, &c3.key).unwrap();
    let mut c = connect(srv.addr, &client());
    assert_eq!(peer(&c), c3.der);
    c.get_ok("/c");
    srv.wait_for("all four dormant", |s| s.connections[Dormant] == 4);
    old.get_ok("/old/2");
    new.get_ok("/new/1");
}

/// Two records in one TCP write, the first only the start of the HTTP/2
/// preface ("P", no ALPN): the driver reads the first, waits for more, and
/// must find the second already buffered in the session, though the socket
/// has nothing more to say (a hang before it was fixed).
#[test]
fn a_record_buffered_behind_the_first_is_not_waited_for() {
    let (cert, srv) = echo_over_tls(&ladder(None));
    for (first, rest) in [
        (
            &b"P"[..],
            &b"OST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"[..],
        ),
        (&b"PRI"[..], &b"NT /q HTTP/1.1\r\nHost: x\r\n\r\n"[..]),
    ] {
        let mut c = connect(srv.addr, &tls13(&cert));
        let sealed = c.seal(&[first, rest]);
        assert_eq!(records(&sealed).len(), 2);
        c.raw(&sealed);
        let line = String::from_utf8_lossy(first).to_string() + &String::from_utf8_lossy(rest);
        let method_path = line.split(" HTTP/1.1").next().unwrap().to_owned();
        assert_eq!(c.response(), ok(&format!("{method_path} read=")));
    }
}

/// A connection woken by TLS records alone (a KeyUpdate: nothing for
/// HTTP) goes back to the lot without its task, and on to DORMANT again,
/// instead of waiting in a task until its next request.
#[test]
fn a_key_update_alone_lets_the_connection_sleep_again() {
    let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(10)));
    let mut c = connect(srv.addr, &tls13(&cert));
    c.get_ok("/0");
    srv.wait_for("dormant", |s| {
        s.connections[Dormant] == 1 && s.dormancies == 1
    });
    c.key_update();
    srv.wait_for("woken by the KeyUpdate", |s| s.lot_wakes == 1);
    srv.wait_for("dormant again, with no request", |s| {
        s.connections[Dormant] == 1
            && s.dormancies == 2
            && s.connections[Parked] == 0
            && s.connections[Active] == 0
    });
    c.get_ok("/after");
    srv.wait_for("the request counted once the connection parks", |s| {
        s.requests == 2 && s.wakes == 1
    });
}

/// 10. KeyUpdate after a dormancy: alone (it wakes the connection, which
///     answers with its own), and with a request in the same flush;
///     requests keep working on the new keys, and the connection goes
///     dormant again.
#[test]
fn key_update_after_dormancy() {
    let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(10)));
    let mut c = connect(srv.addr, &tls13(&cert));
    c.get_ok("/0");
    for i in 1..=3u64 {
        srv.wait_for("dormant", |s| {
            s.connections[Dormant] == 1 && s.dormancies == i
        });
        c.key_update();
        srv.wait_for("woken by the KeyUpdate", |s| s.lot_wakes == i);
        c.get_ok(&format!("/after-key-update/{i}"));
    }
    srv.wait_for("dormant", |s| {
        s.connections[Dormant] == 1 && s.dormancies == 4
    });
    // KeyUpdate and a request in one flush.
    c.stream
        .tls
        .get_mut()
        .1
        .refresh_traffic_keys()
        .expect("refresh_traffic_keys");
    c.get_ok("/with-key-update");
    srv.wait_for("dormant", |s| {
        s.connections[Dormant] == 1 && s.dormancies == 5
    });
    c.get_ok("/last");
    let s = srv.stats();
    assert_eq!((s.lot_wakes, s.lot_closes), (5, 0), "{s:?}");
}

/// 10a. A KeyUpdate asking for the server's, sent in the same write as
///      the client's Finished (and a request right behind it): the session
///      leaves rustls where the handshake ends, before rustls reads the
///      KeyUpdate (rustls would answer it only with its next write, and
///      the answer would be lost with the move), so the server's answer
///      and its new keys reach the client, and the response decrypts.
#[test]
fn a_key_update_sent_with_the_clients_finished_is_answered() {
    let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(10)));
    let mut tcp = StdTcpStream::connect(srv.addr).unwrap();
    tcp.set_nodelay(true).unwrap();
    tcp.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut conn = ClientConnection::new(tls13(&cert), name).unwrap();
    // The ClientHello out, the server's flight in: the client's Finished
    // is then queued, not written.
    while conn.is_handshaking() {
        if conn.wants_write() {
            conn.write_tls(&mut tcp).unwrap();
        } else {
            conn.read_tls(&mut tcp).unwrap();
            conn.process_new_packets().unwrap();
        }
    }
    conn.refresh_traffic_keys()
        .expect("a KeyUpdate after the Finished");
    conn.writer()
        .write_all(get("/after-key-update").as_bytes())
        .unwrap();
    let mut queued = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut queued).unwrap();
    }
    tcp.write_all(&queued).unwrap();
    let body = "GET /after-key-update read=";
    let mut got = Vec::new();
    while !got.ends_with(body.as_bytes()) {
        assert_ne!(conn.read_tls(&mut tcp).unwrap(), 0, "closed; got {got:?}");
        conn.process_new_packets()
            .expect("the server's records decrypt");
        let mut chunk = [0; 1024];
        match conn.reader().read(&mut chunk) {
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("reading the response: {e}"),
        }
    }
    // The response as the echo service gives it, its `date` aside.
    let got = String::from_utf8_lossy(&got);
    let without_date: Vec<&str> = got
        .split("\r\n")
        .filter(|line| !line.starts_with("date:"))
        .collect();
    assert_eq!(without_date.join("\r\n"), ok(body));
    let s = srv.stats();
    assert_eq!(
        (s.tls_handshake_failures, s.tls_kept_by_rustls),
        (0, 0),
        "{s:?}"
    );
}

/// 10b. Key updates both ways under each TLS 1.3 suite, across DORMANT:
///      AES-128-GCM's next keys come from rustls's `KernelConnection`,
///      AES-256-GCM's and ChaCha20-Poly1305's from the traffic secrets
///      dormant keeps (derived by the suite's HKDF). The client (rustls)
///      asks for the server's update each time: both directions must
///      derive what rustls derives, or the next request fails.
#[test]
fn key_updates_under_each_tls13_suite() {
    for suite in [
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(10)));
        let mut provider = (*provider()).clone();
        provider.cipher_suites.retain(|s| s.suite() == suite);
        let mut roots = RootCertStore::empty();
        roots.add(cert.der.clone()).unwrap();
        let config = ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut c = connect(srv.addr, &Arc::new(config));
        assert_eq!(
            c.conn().negotiated_cipher_suite().map(|s| s.suite()),
            Some(suite)
        );
        c.get_ok("/0");
        for i in 1..=3u64 {
            srv.wait_for("dormant", |s| {
                s.connections[Dormant] == 1 && s.dormancies == i
            });
            c.key_update();
            c.get_ok(&format!("/{suite:?}/{i}"));
        }
        let s = srv.stats();
        assert_eq!(
            (s.tls_kept_by_rustls, s.lot_wakes),
            (0, 3),
            "{suite:?}: {s:?}"
        );
    }
}

/// 10c. A crypto provider that does not hand out its keys (its AEADs'
///      `extract_keys` is unsupported, as a hardware-backed provider's may
///      be): the session stays in rustls for its life, counted in
///      `tls_kept_by_rustls`, and serves across PARKED and DORMANT as any
///      other; the handshake does not fail because of it.
#[test]
fn a_provider_that_keeps_its_keys_leaves_the_session_in_rustls() {
    use tokio_rustls::rustls::crypto::cipher::{
        AeadKey, Iv, MessageDecrypter, MessageEncrypter, Tls13AeadAlgorithm,
        UnsupportedOperationError,
    };
    use tokio_rustls::rustls::{
        CipherSuiteCommon, ConnectionTrafficSecrets, SupportedCipherSuite, Tls13CipherSuite,
    };

    /// An AEAD that encrypts as `0` does and keeps its keys to itself.
    struct KeepsKeys(&'static dyn Tls13AeadAlgorithm);

    impl Tls13AeadAlgorithm for KeepsKeys {
        fn encrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageEncrypter> {
            self.0.encrypter(key, iv)
        }
        fn decrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageDecrypter> {
            self.0.decrypter(key, iv)
        }
        fn key_len(&self) -> usize {
            self.0.key_len()
        }
        fn extract_keys(
            &self,
            _: AeadKey,
            _: Iv,
        ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
            Err(UnsupportedOperationError)
        }
    }

    let mut keeping = (*provider()).clone();
    keeping.cipher_suites = keeping
        .cipher_suites
        .iter()
        .filter_map(|suite| suite.tls13())
        .map(|suite| {
            let suite: &'static Tls13CipherSuite = Box::leak(Box::new(Tls13CipherSuite {
                common: CipherSuiteCommon {
                    suite: suite.common.suite,
                    hash_provider: suite.common.hash_provider,
                    confidentiality_limit: suite.common.confidentiality_limit,
                },
                hkdf_provider: suite.hkdf_provider,
                aead_alg: Box::leak(Box::new(KeepsKeys(suite.aead_alg))),
                quic: suite.quic,
            }));
            SupportedCipherSuite::Tls13(suite)
        })
        .collect();
    let cert = Cert::new();
    let config = ServerConfig::builder_with_provider(Arc::new(keeping))
        .with_protocol_versions(&[&TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der.clone()],
            PrivateKeyDer::from_pem_file(&cert.key).unwrap(),
        )
        .unwrap();
    let srv = serve_tls(
        &ladder(Duration::from_millis(10)),
        &TlsConfig::new(config),
        echo_service(),
    );
    let mut c = connect(srv.addr, &tls13(&cert));
    c.get_ok("/0");
    for i in 1..=2u64 {
        srv.wait_for("dormant", |s| {
            s.connections[Dormant] == 1 && s.dormancies == i
        });
        c.get_ok(&format!("/{i}"));
    }
    let s = srv.stats();
    assert_eq!(
        (
            s.tls_handshakes,
            s.tls_handshake_failures,
            s.tls_kept_by_rustls
        ),
        (1, 0, 1),
        "{s:?}"
    );
}

/// 11. Graceful shutdown with TLS connections still in the middle of a
///     record, or of their handshake (every idle rung of an established
///     session: tests/server_shutdown.rs): a session whose client sent the
///     start of a record says goodbye with `close_notify`, one before its
///     handshake is just closed, and `serve` returns.
#[test]
fn graceful_shutdown_closes_sessions_mid_record_and_before_their_handshake() {
    let (cert, mut srv) = echo_over_tls(&ladder(Duration::from_millis(250)));
    let config = tls13(&cert);
    let mut established = connect(srv.addr, &config);
    established.get_ok("/established");
    let mut cut = connect(srv.addr, &config);
    let sealed = cut.seal(&[get("/cut").as_bytes()]);
    cut.raw(&sealed[..9]);
    let mut before_handshake = StdTcpStream::connect(srv.addr).unwrap();
    srv.wait_for("3 parked", |s| {
        s.connections[Parked] == 3 && s.parks == 1 && s.connections[Active] == 0
    });

    srv.begin_shutdown();
    for c in [&mut established, &mut cut] {
        assert_eq!(c.read_to_end(), (String::new(), End::Clean));
    }
    assert_eq!(raw_to_close(&mut before_handshake), b"");
    srv.wait_stopped();
    let s = srv.stats();
    assert_eq!(s.connections.total(), 0, "{s:?}");
    assert!(srv.addr.refuses(), "connect after shutdown");
}

/// 12. A resumed session: a second connection with the first one's client
///     configuration resumes (a TLS 1.3 ticket; a TLS 1.2 session) after
///     the first went dormant; both keep working across the ladder.
#[test]
fn resumed_session_after_the_first_went_dormant() {
    let (cert, srv) = echo_over_tls(&ladder(Duration::from_millis(10)));
    for version in [&TLS13, &TLS12] {
        srv.wait_for("the last clients' connections closed", none_open);
        let before = srv.stats();
        let config = client_config(&[&cert], &[version], &[]);
        let mut first = connect(srv.addr, &config);
        assert_eq!(first.conn().handshake_kind(), Some(HandshakeKind::Full));
        // Reading the answer reads the session tickets sent before it.
        first.get_ok("/first");
        srv.wait_for("dormant", |s| s.dormancies == before.dormancies + 1);

        let mut second = connect(srv.addr, &config);
        assert_eq!(
            second.conn().handshake_kind(),
            Some(HandshakeKind::Resumed),
            "{version:?}"
        );
        second.get_ok("/second");
        first.get_ok("/first/again");
        srv.wait_for("both dormant", |s| s.dormancies == before.dormancies + 3);
        second.get_ok("/second/again");
        first.get_ok("/first/last");
    }
}

/// Answers with what the request's [`TlsInfo`] says (`none` without one):
/// `sni=… alpn=… version=… suite=… kind=… certs=…`, the certificates as
/// hex, each one's DER.
fn info_service() -> impl Servable<Full<Bytes>> {
    service_fn(|req: Request<dormant::Body>| async move {
        let text = match req.extensions().get::<TlsInfo>() {
            None => "none".to_owned(),
            Some(tls) => describe_info(
                tls.server_name(),
                tls.alpn_protocol(),
                tls.protocol_version(),
                tls.cipher_suite(),
                tls.handshake_kind(),
                tls.peer_certificates(),
            ),
        };
        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(Bytes::from(text))))
    })
}

fn describe_info(
    sni: Option<&str>,
    alpn: Option<&[u8]>,
    version: ProtocolVersion,
    suite: CipherSuite,
    kind: HandshakeKind,
    certs: Option<&[CertificateDer<'_>]>,
) -> String {
    let hex = |der: &CertificateDer<'_>| der.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let certs = certs.map(|certs| certs.iter().map(hex).collect::<Vec<_>>());
    format!(
        "sni={sni:?} alpn={:?} version={version:?} suite={suite:?} kind={kind:?} certs={certs:?}",
        alpn.map(String::from_utf8_lossy)
    )
}

impl TlsClient {
    /// What [`info_service`] should answer this client, presenting
    /// `certs`: the facts its own session negotiated, with `sni`.
    fn expected_info(&self, sni: Option<&str>, certs: Option<&[CertificateDer<'_>]>) -> String {
        let conn = self.conn();
        describe_info(
            sni,
            conn.alpn_protocol(),
            conn.protocol_version().unwrap(),
            conn.negotiated_cipher_suite().unwrap().suite(),
            conn.handshake_kind().unwrap(),
            certs,
        )
    }

    /// `GET path` from [`info_service`]: the body.
    fn get_info(&mut self, path: &str) -> String {
        self.send(get(path).as_bytes());
        let response = self.response();
        let (head, body) = response.split_once("\r\n\r\n").expect("a response");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        body.to_owned()
    }
}

/// 13. `TlsInfo`: off by default; when on, every request carries what its
///     connection's handshake negotiated — the server name the client
///     asked for (none for an IP address), ALPN, version, cipher suite,
///     full or resumed — on HTTP/1.1 and HTTP/2, the same after the
///     connection went dormant and woke.
#[test]
fn tls_info_reports_what_the_handshake_negotiated() {
    let cert = Cert::for_names(&["localhost", "127.0.0.1"]);
    let off = serve_tls(&ladder(None), &cert.config(), info_service());
    let mut c = connect(off.addr, &tls13(&cert));
    assert_eq!(c.get_info("/off"), "none");

    let mut b = ladder(Duration::from_millis(10));
    b.tls_info(true);
    let srv = serve_tls(&b, &cert.config(), info_service());
    // The name the client connects to, its TLS version and ALPN offer,
    // the server name the handler should see.
    let http1: &[&[u8]] = &[b"http/1.1"];
    let cases = [
        ("localhost", &TLS13, http1, Some("localhost")),
        ("localhost", &TLS12, &[], Some("localhost")),
        ("127.0.0.1", &TLS13, http1, None),
        ("127.0.0.1", &TLS12, http1, None),
    ];
    for (name, version, alpn, sni) in cases {
        srv.wait_for("the last client's connection closed", none_open);
        let before = srv.stats();
        let config = client_config(&[&cert], &[version], alpn);
        let mut c = connect_as(srv.addr, &config, name);
        let expected = c.expected_info(sni, None);
        assert_eq!(c.get_info("/one"), expected, "{name} {version:?}");
        srv.wait_for("dormant", |s| s.dormancies == before.dormancies + 1);
        assert_eq!(c.get_info("/two"), expected, "{name} {version:?}, woken");

        // A second client resumes the first one's session: a resumed
        // handshake, the same server name.
        let mut resumed = connect_as(srv.addr, &config, name);
        assert_eq!(
            resumed.conn().handshake_kind(),
            Some(HandshakeKind::Resumed)
        );
        let expected = resumed.expected_info(sni, None);
        assert!(expected.contains("kind=Resumed"), "{expected}");
        assert_eq!(resumed.get_info("/resumed"), expected, "{name} {version:?}");
    }

    let c = connect(srv.addr, &client_config(&[&cert], &[&TLS13], &[b"h2"]));
    let expected = c.expected_info(Some("localhost"), None);
    assert!(expected.contains("alpn=Some(\"h2\")"), "{expected}");
    block("h2", async {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(c.stream.tls))
                .await
                .expect("h2 handshake");
        let conn = tokio::spawn(conn);
        for path in ["/h2/one", "/h2/two"] {
            let (status, version, got) = post(&mut send, path, "").await;
            assert_eq!((status, version), (StatusCode::OK, Version::HTTP_2));
            assert_eq!(got, expected);
        }
        drop(send);
        conn.await.unwrap().expect("h2 connection");
    });
}

/// `cert`'s server configuration made by the test itself (no ALPN, no
/// client authentication).
fn server_config(cert: &Cert) -> ServerConfig {
    ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der.clone()],
            PrivateKeyDer::from_pem_file(&cert.key).unwrap(),
        )
        .unwrap()
}

/// A certificate authority and a client certificate it signed, for
/// mutual TLS.
struct ClientCa {
    ca: CertificateDer<'static>,
    client: CertificateDer<'static>,
    client_key: PrivateKeyDer<'static>,
}

impl ClientCa {
    fn new() -> ClientCa {
        ClientCa::with_padding(0)
    }

    /// An authority whose client certificate carries `padding` bytes more
    /// (a non-critical extension of the test's own).
    fn with_padding(padding: usize) -> ClientCa {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&ca_key).unwrap();
        let client_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["client".to_owned()]).unwrap();
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        if padding > 0 {
            params.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 55555, 1],
                vec![0; padding],
            )];
        }
        let client = params.signed_by(&client_key, &ca, &ca_key).unwrap();
        ClientCa {
            ca: ca.der().clone(),
            client: client.der().clone(),
            client_key: PrivateKeyDer::try_from(client_key.serialize_der()).unwrap(),
        }
    }

    /// `cert`'s server configuration, requiring a client certificate
    /// signed by this authority.
    fn server_config(&self, cert: &Cert) -> ServerConfig {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.clone()).unwrap();
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .unwrap();
        ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![cert.der.clone()],
                PrivateKeyDer::from_pem_file(&cert.key).unwrap(),
            )
            .unwrap()
    }

    /// A TLS 1.3 client trusting `cert`, presenting the client
    /// certificate.
    fn client_config(&self, cert: &Cert) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(cert.der.clone()).unwrap();
        let config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![self.client.clone()], self.client_key.clone_key())
            .unwrap();
        Arc::new(config)
    }
}

/// 14. Mutual TLS: the client's certificate reaches the handler (before
///     and after a dormancy); a client without one fails its handshake
///     (counted) and the other is served on.
#[test]
fn mutual_tls_shows_the_client_certificate_to_the_handler() {
    let cert = Cert::new();
    let ca = ClientCa::new();
    let mut b = ladder(Duration::from_millis(10));
    b.tls_info(true);
    let srv = serve_tls(&b, &TlsConfig::new(ca.server_config(&cert)), info_service());

    let mut c = connect(srv.addr, &ca.client_config(&cert));
    let expected = c.expected_info(Some("localhost"), Some(std::slice::from_ref(&ca.client)));
    assert_eq!(c.get_info("/first"), expected);
    srv.wait_for("dormant", |s| s.dormancies == 1);
    assert_eq!(c.get_info("/after-dormancy"), expected);

    // TLS 1.3: the client's handshake ends before the server checks its
    // (missing) certificate; the server's answer is an alert. (A request
    // sent at once could reach the server after it closed, and the reset
    // that answers it would discard the alert on the client's side.)
    let before = srv.stats();
    let mut anonymous = connect(srv.addr, &tls13(&cert));
    let error = anonymous.read_some().expect_err("refused");
    assert!(error.to_string().contains("CertificateRequired"), "{error}");
    srv.wait_for("the failed handshake counted", |s| {
        s.tls_handshake_failures == before.tls_handshake_failures + 1
    });
    assert_eq!(c.get_info("/still"), expected);
}

/// What a handshake with `config` came to: the server's answer to a
/// `GET /`, or the client's error.
fn handshake_outcome(addr: SocketAddr, config: &Arc<ClientConfig>) -> Result<String, String> {
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    let name = ServerName::try_from("localhost").unwrap();
    block("a handshake and a request", async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut answer)
            .await
            .map_err(|e| e.to_string())?;
        let answer = String::from_utf8_lossy(&answer);
        Ok(answer.lines().next().unwrap_or_default().to_owned())
    })
}

/// Plain hyper over tokio-rustls with `config` on 127.0.0.1, serving on
/// the client runtime for the rest of the test binary.
fn rustls_reference(config: ServerConfig) -> SocketAddr {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = block("bind", tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    crate::common::tls::client_rt().spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let hello = service_fn(|_: Request<hyper::body::Incoming>| async {
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                            Bytes::from_static(b"hello"),
                        )))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), hello)
                        .await;
                }
            });
        }
    });
    addr
}

/// `n` ALPN protocols of 255 bytes, and `http/1.1`: a ClientHello of
/// about `n` × 256 bytes.
fn many_protocols(n: usize) -> Vec<Vec<u8>> {
    let mut protocols: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut protocol = vec![b'x'; 255];
            protocol[..8].copy_from_slice(format!("{i:08}").as_bytes());
            protocol
        })
        .collect();
    protocols.push(b"http/1.1".to_vec());
    protocols
}

/// A ClientHello whose extensions are padded (an extension of a type no
/// server knows) to `size` bytes of message, in records of 16 KiB.
fn padded_client_hello(config: &Arc<ClientConfig>, size: usize) -> Vec<u8> {
    let hello = client_hello(config);
    let mut message = hello[5..].to_vec();
    // type (1), length (3), version (2), random (32), session id.
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(message[at]);
    at += 2 + usize::from(u16::from_be_bytes([message[at], message[at + 1]]));
    at += 1 + usize::from(message[at]);
    let extensions = at;
    let grow = size - message.len();
    let pad = grow - 4;
    let old = usize::from(u16::from_be_bytes([message[at], message[at + 1]]));
    let new = u16::try_from(old + grow).expect("extensions fit their u16 length");
    message[extensions..extensions + 2].copy_from_slice(&new.to_be_bytes());
    message.extend_from_slice(&0x7a7au16.to_be_bytes());
    message.extend_from_slice(&u16::try_from(pad).unwrap().to_be_bytes());
    message.resize(size, 0);
    let body = u32::try_from(size - 4).unwrap().to_be_bytes();
    message[1..4].copy_from_slice(&body[1..]);
    let mut records = Vec::new();
    for chunk in message.chunks(16 * 1024) {
        records.extend_from_slice(&[22, 3, 1]);
        records.extend_from_slice(&u16::try_from(chunk.len()).unwrap().to_be_bytes());
        records.extend_from_slice(chunk);
    }
    records
}

/// The kind of the first record a server answers `hello` with, if any
/// before it closes.
fn answer_to(addr: SocketAddr, hello: &[u8]) -> Option<u8> {
    let mut raw = StdTcpStream::connect(addr).unwrap();
    raw.write_all(hello).unwrap();
    raw.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
    let mut first = [0; 1];
    match raw.read(&mut first) {
        Ok(0) => None,
        Ok(_) => Some(first[0]),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => None,
        Err(e) => panic!("no answer to a ClientHello (timed out?): {e}"),
    }
}

/// 15. Handshake messages larger than a record, up to rustls's limit of 64
///     KiB: a ClientHello of 32 KiB (ALPN protocols) and a client
///     certificate chain of 40 KiB complete their handshakes, on dormant
///     as on plain rustls; a ClientHello over the limit is refused as
///     rustls refuses it; the others are served on.
#[test]
fn handshake_messages_larger_than_a_record_up_to_rustls_limit() {
    let cert = Cert::new();
    let ca = ClientCa::with_padding(40 * 1024);
    let b = ladder(Duration::from_millis(10));
    let config = TlsConfig::new(ca.server_config(&cert));
    let srv = serve_tls(&b, &config, echo_service());
    let reference = rustls_reference(ca.server_config(&cert));

    // 40 KiB of client certificate.
    let mtls = ca.client_config(&cert);
    for addr in [srv.addr, reference] {
        assert_eq!(
            handshake_outcome(addr, &mtls).as_deref(),
            Ok("HTTP/1.1 200 OK")
        );
    }

    // A ClientHello of 32 KiB, from a real client.
    let mut config = ClientConfig::clone(&ca.client_config(&cert));
    config.alpn_protocols = many_protocols(128);
    let large = Arc::new(config);
    let mut conn =
        ClientConnection::new(large.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    let message: usize = records(&hello).iter().map(|(_, len)| len).sum();
    assert!(message > 32 * 1024, "a ClientHello of {message} bytes");
    for addr in [srv.addr, reference] {
        assert_eq!(
            handshake_outcome(addr, &large).as_deref(),
            Ok("HTTP/1.1 200 OK")
        );
    }

    // Near the limit, and over it: rustls answers the first with its
    // ServerHello, and refuses the second at its header, sending no
    // alert (its deframer refuses it before its state machine, which
    // sends the alerts, sees it).
    for (size, answer) in [(60 * 1024, Some(22)), (0xffff + 5, None)] {
        let hello = padded_client_hello(&tls13(&cert), size);
        assert_eq!(answer_to(reference, &hello), answer, "rustls, {size} bytes");
        assert_eq!(answer_to(srv.addr, &hello), answer, "dormant, {size} bytes");
    }
    // At the limit: a message of 64 KiB - 1 after its header. rustls's
    // unbuffered API (dormant's) joins it; tokio-rustls's buffer, which
    // counts the records' headers too, stops short of it.
    let hello = padded_client_hello(&tls13(&cert), 0xffff + 4);
    assert_eq!(answer_to(srv.addr, &hello), Some(22));
    // A client certificate chain over the limit (the 40 KiB certificate
    // and a 30 KiB one after it): refused as rustls refuses it.
    let extra = ClientCa::with_padding(30 * 1024).client;
    let over = {
        let mut roots = RootCertStore::empty();
        roots.add(cert.der.clone()).unwrap();
        let config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&TLS13])
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![ca.client.clone(), extra], ca.client_key.clone_key())
            .unwrap();
        Arc::new(config)
    };
    let ours = handshake_outcome(srv.addr, &over);
    let theirs = handshake_outcome(reference, &over);
    assert!(ours.is_err(), "{ours:?}");
    assert_eq!(ours, theirs);
    assert_eq!(
        handshake_outcome(srv.addr, &mtls).as_deref(),
        Ok("HTTP/1.1 200 OK"),
        "the others are served on"
    );
}

/// What a server sends back to a ClientHello (and the client's FIN after
/// it, if `fin`: a ClientHello the server takes waits for the client's
/// next flight) before it closes: each record's type, with a plaintext
/// alert's payload (a ServerHello and its encrypted flight differ in their
/// bytes, not their kinds).
fn answer_kinds(addr: SocketAddr, hello: &[u8], fin: bool) -> Vec<(u8, Vec<u8>)> {
    let mut raw = StdTcpStream::connect(addr).unwrap();
    raw.write_all(hello).unwrap();
    if fin {
        raw.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let got = raw_to_close(&mut raw);
    let mut kinds = Vec::new();
    let mut rest = &got[..];
    while let [typ, _, _, high, low, ..] = *rest {
        let len = usize::from(u16::from_be_bytes([high, low]));
        let Some(record) = rest.get(5..5 + len) else {
            break;
        };
        kinds.push((
            typ,
            if typ == 21 {
                record.to_vec()
            } else {
                Vec::new()
            },
        ));
        rest = &rest[5 + len..];
    }
    kinds
}

/// Where the fields of a ClientHello message (its record's header
/// stripped) start: its extensions' length.
fn extensions_at(message: &[u8]) -> usize {
    let mut at = 4 + 2 + 32;
    at += 1 + usize::from(message[at]);
    at += 2 + usize::from(u16::from_be_bytes([message[at], message[at + 1]]));
    at + 1 + usize::from(message[at])
}

/// `hello` (one record) with its message changed by `change`, the lengths
/// of the message and the record made to fit.
fn rewritten(hello: &[u8], change: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut message = hello[5..].to_vec();
    change(&mut message);
    let body = u32::try_from(message.len() - 4).unwrap().to_be_bytes();
    message[1..4].copy_from_slice(&body[1..]);
    let mut record = vec![22, 3, 1];
    record.extend_from_slice(&u16::try_from(message.len()).unwrap().to_be_bytes());
    record.extend_from_slice(&message);
    record
}

/// `hello` with the extension `typ` (its payload `payload`) added.
fn with_extension(hello: &[u8], typ: u16, payload: &[u8]) -> Vec<u8> {
    rewritten(hello, |message| {
        let at = extensions_at(message);
        let len = u16::from_be_bytes([message[at], message[at + 1]]);
        let len = len + 4 + u16::try_from(payload.len()).unwrap();
        message[at..at + 2].copy_from_slice(&len.to_be_bytes());
        message.extend_from_slice(&typ.to_be_bytes());
        message.extend_from_slice(&u16::try_from(payload.len()).unwrap().to_be_bytes());
        message.extend_from_slice(payload);
    })
}

/// `hello` with the payload of its extension `typ` replaced.
fn with_extension_replaced(hello: &[u8], typ: u16, payload: &[u8]) -> Vec<u8> {
    rewritten(hello, |message| {
        let start = extensions_at(message);
        let mut at = start + 2;
        let mut extensions = Vec::new();
        while at + 4 <= message.len() {
            let kind = u16::from_be_bytes([message[at], message[at + 1]]);
            let len = usize::from(u16::from_be_bytes([message[at + 2], message[at + 3]]));
            let body = if kind == typ {
                payload.to_vec()
            } else {
                message[at + 4..at + 4 + len].to_vec()
            };
            extensions.extend_from_slice(&kind.to_be_bytes());
            extensions.extend_from_slice(&u16::try_from(body.len()).unwrap().to_be_bytes());
            extensions.extend_from_slice(&body);
            at += 4 + len;
        }
        message.truncate(start);
        message.extend_from_slice(&u16::try_from(extensions.len()).unwrap().to_be_bytes());
        message.extend_from_slice(&extensions);
    })
}

/// 16. Handshakes that fail get the alerts rustls sends, before and after
///     the ServerHello (its flight first, then the alert under the
///     handshake keys): no cipher suite or signature scheme in common, an
///     unknown ALPN protocol, an old version, and ClientHellos with bytes
///     changed at random (seeded), sent to dormant and to tokio-rustls
///     with the same certificate; early data that does not decrypt.
#[test]
fn handshake_errors_get_the_alerts_rustls_sends() {
    let cert = Cert::new();
    let srv = serve_tls(&ladder(None), &cert.config(), echo_service());
    let mut reference_config = server_config(&cert);
    reference_config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let reference = rustls_reference(reference_config);

    let hello = client_hello(&client_config(&[&cert], &[&TLS13], &[b"h2"]));
    let mut cases: Vec<(String, Vec<u8>)> = vec![
        // TLS_AES_128_GCM_SHA256 alone, with a suite list of no suite
        // rustls has.
        ("no cipher suite in common".into(), {
            rewritten(&hello, |message| {
                let at = 4 + 2 + 32;
                let at = at + 1 + usize::from(message[at]);
                let len = usize::from(u16::from_be_bytes([message[at], message[at + 1]]));
                message.splice(at..at + 2 + len, [0, 2, 0x13, 0x05]);
            })
        }),
        // rsa_pkcs1_sha256 alone: not for TLS 1.3, nor the test's ECDSA key.
        (
            "no signature scheme in common".into(),
            with_extension_replaced(&hello, 13, &[0, 2, 4, 1]),
        ),
        (
            "an unknown ALPN protocol".into(),
            with_extension_replaced(&hello, 16, &[0, 4, 3, b'x', b'y', b'z']),
        ),
        (
            "TLS 1.0 alone".into(),
            with_extension_replaced(&hello, 43, &[2, 3, 1]),
        ),
    ];
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for i in 0..120 {
        let mut mutated = hello.clone();
        for _ in 0..1 + rng.below(3) {
            let at = 5 + rng.below(mutated.len() - 5);
            mutated[at] ^= 1 << rng.below(8);
        }
        if i % 4 == 0 {
            let len = 5 + 4 + rng.below(mutated.len() - 9);
            mutated.truncate(len);
            let record = u16::try_from(len - 5).unwrap().to_be_bytes();
            mutated[3..5].copy_from_slice(&record);
        }
        cases.push((format!("random change {i}"), mutated));
    }
    let mut differ = Vec::new();
    for (what, bytes) in &cases {
        let ours = answer_kinds(srv.addr, bytes, true);
        let theirs = answer_kinds(reference, bytes, true);
        if ours != theirs {
            differ.push(format!("{what}: dormant {ours:?}, rustls {theirs:?}"));
        }
    }
    assert!(
        differ.is_empty(),
        "{} differ:\n{}",
        differ.len(),
        differ.join("\n")
    );
    // The named cases failed, each with an alert.
    for (what, bytes) in &cases[..4] {
        let kinds = answer_kinds(srv.addr, bytes, true);
        assert!(
            kinds
                .last()
                .is_some_and(|(typ, _)| *typ == 21 || *typ == 23),
            "{what}: {kinds:?}"
        );
    }
    // Early data that does not decrypt, after a ClientHello that offers it:
    // with no PSK it is refused, and the server skips records until they
    // exceed what it would have accepted, then sends `bad_record_mac` after
    // its flight, under the handshake keys (a record of 19 bytes: the
    // alert, its type, the tag). rustls queues the alert; tokio-rustls's
    // handshake closes without it here, while rustls's unbuffered API,
    // dormant's, hands it out.
    let mut early = with_extension(&hello, 42, &[]);
    for _ in 0..2 {
        early.extend_from_slice(&[23, 3, 3, 0x40, 0x00]);
        early.extend(std::iter::repeat_n(0x5a, 0x4000));
    }
    let mut raw = StdTcpStream::connect(srv.addr).unwrap();
    raw.write_all(&early).unwrap();
    let kinds = records(&raw_to_close(&mut raw));
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    assert_eq!(kinds[..2], [(22, kinds[0].1), (20, 1)], "{kinds:?}");
    assert_eq!(kinds[3], (23, 19), "an alert after the flight: {kinds:?}");
    connect(srv.addr, &tls13(&cert)).get_ok("/after");
}
