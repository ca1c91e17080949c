//! dormant's TLS record layer (what a session runs on once its handshake
//! is over) against rustls's own, with generated input: the bytes a client
//! can send after the handshake.
//!
//! Each seeded case opens a TLS 1.3 connection to dormant and one to plain
//! hyper over tokio-rustls, takes the client's traffic keys (rustls's
//! `dangerous_extract_secrets`), and sends both servers the same records:
//! data, alerts, handshake messages (key updates, renegotiation, garbage),
//! `change_cipher_spec`, empty records, records of unknown types, records
//! whose tag is wrong, bytes that are not records, cut at random points
//! with pauses that let dormant's connection park and sleep between the
//! pieces. What each server sends back (decrypted: the data, the alerts,
//! a key update) and how it closes must be the same. Every case ends with
//! a request that closes the connection, so a case whose records were
//! accepted ends with its response.
//!
//! The client's suite is ChaCha20-Poly1305: its keys can be used from any
//! sequence number (aws-lc's AES-GCM seal insists on starting at 0).
#![cfg(any(feature = "tls", feature = "tls-ring"))]

#[allow(
    dead_code,
    reason = "the shared clients and servers: this file drives its own client"
)]
mod common {
    pub(crate) mod client;
    pub(crate) mod hyper;
    pub(crate) mod reference;
    pub(crate) mod runtime;
    pub(crate) mod servers;
    pub(crate) mod temp_dir;
    pub(crate) mod timeout;
    pub(crate) mod tls;
    pub(crate) mod tls_client;
    #[allow(
        unused_macros,
        unused_imports,
        reason = "one transport only: what TLS does after its handshake"
    )]
    pub(crate) mod transport;
    pub(crate) mod unix;
    pub(crate) mod xorshift;
}

use std::convert::Infallible;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use common::hyper::Protocol;
use common::reference::Reference;
use common::timeout::CLIENT_TIMEOUT;
use common::tls::provider;
use common::transport::{Tls, Transport};
use common::xorshift::XorShift;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio_rustls::rustls::crypto::cipher::{
    InboundOpaqueMessage, MessageDecrypter, MessageEncrypter, OutboundChunks, OutboundPlainMessage,
};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{
    CipherSuite, ClientConfig, ClientConnection, ConnectionTrafficSecrets, ContentType,
    ProtocolVersion, SupportedCipherSuite,
};

/// Every case's pieces are written with this pause between them: many
/// times dormant's `park_after` and `dormant_after`.
const PAUSE: Duration = Duration::from_millis(8);

/// How many seeded cases run, and how many at once.
const CASES: usize = 480;
const CONCURRENCY: usize = 12;

async fn describe<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let line = format!("{} {}", req.method(), req.uri());
    let text = match req.into_body().collect().await {
        Ok(body) => format!("{line} body={}", String::from_utf8_lossy(&body.to_bytes())),
        Err(e) => format!("{line} error={e}"),
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// A TLS 1.3 client past its handshake, holding its own traffic keys.
struct Raw {
    tcp: TcpStream,
    suite: SupportedCipherSuite,
    tx: Box<dyn MessageEncrypter>,
    tx_seq: u64,
    rx: Box<dyn MessageDecrypter>,
    rx_seq: u64,
}

/// A TLS 1.3 client configuration offering only ChaCha20-Poly1305, whose
/// keys can be taken.
fn chacha_client(ca: &std::path::Path) -> Arc<ClientConfig> {
    use tokio_rustls::rustls::RootCertStore;
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    let mut provider = (*provider()).clone();
    provider
        .cipher_suites
        .retain(|s| s.suite() == CipherSuite::TLS13_CHACHA20_POLY1305_SHA256);
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(ca).expect("read the CA"))
        .unwrap();
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&tokio_rustls::rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config.enable_secret_extraction = true;
    Arc::new(config)
}

/// `GET /sync`, and the exact answer both servers give it.
const SYNC: &[u8] = b"GET /sync HTTP/1.1\r\nHost: x\r\n\r\n";

impl Raw {
    /// Connects, completes the handshake, exchanges two requests (so that
    /// the client has read everything the server sent after the handshake:
    /// tickets, dormant's key update), then takes the client's keys.
    fn connect(addr: SocketAddr, config: &Arc<ClientConfig>) -> Raw {
        let mut tcp = TcpStream::connect(addr).expect("connect");
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(CLIENT_TIMEOUT)).unwrap();
        let name = ServerName::try_from("localhost").unwrap();
        let mut conn = ClientConnection::new(config.clone(), name).unwrap();
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp).expect("handshake");
        }
        // Two exchanges: dormant's session leaves rustls at the latest when
        // the second request is read, and its first record after that is
        // its key update.
        for _ in 0..2 {
            conn.writer().write_all(SYNC).unwrap();
            while conn.wants_write() {
                conn.write_tls(&mut tcp).unwrap();
            }
            let mut got = Vec::new();
            while !response_complete(&got) {
                conn.read_tls(&mut tcp).expect("read the sync response");
                conn.process_new_packets().expect("the sync response");
                let mut chunk = [0; 4096];
                loop {
                    match conn.reader().read(&mut chunk) {
                        Ok(0) => panic!("the server closed during the sync request"),
                        Ok(n) => got.extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) => panic!("sync response: {e}"),
                    }
                }
            }
        }
        let suite = conn.negotiated_cipher_suite().unwrap();
        let secrets = conn.dangerous_extract_secrets().expect("take the keys");
        let aead = suite.tls13().unwrap().aead_alg;
        let (key, iv) = match secrets.tx.1 {
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key, iv),
            _ => panic!("the client offered ChaCha20-Poly1305 only"),
        };
        let tx = aead.encrypter(key, iv);
        let (key, iv) = match secrets.rx.1 {
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key, iv),
            _ => panic!("the client offered ChaCha20-Poly1305 only"),
        };
        let rx = aead.decrypter(key, iv);
        Raw {
            tcp,
            suite,
            tx,
            tx_seq: secrets.tx.0,
            rx,
            rx_seq: secrets.rx.0,
        }
    }

    /// One record of inner type `inner` (outer type `outer`), encrypted;
    /// its last byte flipped if `corrupt`.
    fn seal(&mut self, outer: u8, inner: u8, payload: &[u8], corrupt: bool) -> Vec<u8> {
        let message = OutboundPlainMessage {
            typ: ContentType::from(inner),
            version: ProtocolVersion::TLSv1_2,
            payload: OutboundChunks::Single(payload),
        };
        let mut record = self.tx.encrypt(message, self.tx_seq).unwrap().encode();
        self.tx_seq += 1;
        record[0] = outer;
        if corrupt {
            *record.last_mut().unwrap() ^= 1;
        }
        record
    }

    /// Reads what the server sent: until it closes if `to_end`, else
    /// what has arrived. Whether it closed.
    fn receive(&mut self, got: &mut Vec<u8>, to_end: bool) -> Option<&'static str> {
        self.tcp.set_nonblocking(!to_end).unwrap();
        let closed = loop {
            let mut chunk = [0; 8192];
            match self.tcp.read(&mut chunk) {
                Ok(0) => break Some("closed"),
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break None,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break Some("reset"),
                Err(e) => panic!("reading what the server sent: {e}"),
            }
        };
        self.tcp.set_nonblocking(false).unwrap();
        closed
    }

    /// What the server sent, decrypted.
    fn outcome(&mut self, mut bytes: Vec<u8>, closed: &'static str) -> Outcome {
        let mut outcome = Outcome::default();
        let mut rest = &mut bytes[..];
        while rest.len() >= 5 {
            let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
            if rest.len() < 5 + len {
                break;
            }
            let (record, after) = rest.split_at_mut(5 + len);
            rest = after;
            if outcome.key_update {
                outcome.after_key_update = true;
                continue;
            }
            let (typ, version) = (ContentType::from(record[0]), ProtocolVersion::from(0x0303));
            let message = InboundOpaqueMessage::new(typ, version, &mut record[5..]);
            let plain = match self.rx.decrypt(message, self.rx_seq) {
                Ok(plain) => plain,
                Err(e) => panic!("a record the server sent does not decrypt: {e}"),
            };
            self.rx_seq += 1;
            match plain.typ {
                ContentType::ApplicationData => outcome.data.extend_from_slice(plain.payload),
                ContentType::Alert => outcome.alerts.push(plain.payload.to_vec()),
                ContentType::Handshake if plain.payload.first() == Some(&24) => {
                    outcome.key_update = true
                }
                other => panic!("the server sent a record of type {other:?}"),
            }
        }
        outcome.trailing = rest.len();
        outcome.closed = closed;
        outcome
    }
}

/// What a server sent back after the handshake, and how it closed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Outcome {
    /// Its HTTP bytes, `date` removed.
    data: Vec<u8>,
    alerts: Vec<Vec<u8>>,
    /// It sent a key update; what followed is under keys the client does
    /// not derive.
    key_update: bool,
    after_key_update: bool,
    /// Bytes after the last whole record.
    trailing: usize,
    /// `closed`, or `reset` when the server closed with bytes of ours
    /// unread (what it sent last may then be lost).
    closed: &'static str,
}

impl Outcome {
    /// Whether the two servers did the same; a reset may lose the end of
    /// what a server sent.
    fn matches(&self, other: &Outcome) -> bool {
        let prefix = |short: &Outcome, long: &Outcome| {
            long.data.starts_with(&short.data)
                && long.alerts.starts_with(&short.alerts)
                && (short.key_update <= long.key_update)
        };
        match (self.closed, other.closed) {
            ("reset", "reset") => prefix(self, other) || prefix(other, self),
            ("reset", _) => prefix(self, other),
            (_, "reset") => prefix(other, self),
            _ => self == other,
        }
    }

    fn show(&self) -> String {
        format!(
            "data {:?}, alerts {:?}, key update {}/{}, trailing {}, {}",
            String::from_utf8_lossy(&self.data),
            self.alerts,
            self.key_update,
            self.after_key_update,
            self.trailing,
            self.closed
        )
    }

    fn normalized(mut self) -> Outcome {
        let text = String::from_utf8_lossy(&self.data).into_owned();
        let text: Vec<&str> = text
            .split("\r\n")
            .filter(|line| !line.to_ascii_lowercase().starts_with("date:"))
            .collect();
        self.data = text.join("\r\n").into_bytes();
        self
    }
}

/// Whether `got` holds a whole response with a `content-length` body.
fn response_complete(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some(end) = text.find("\r\n\r\n") else {
        return false;
    };
    let len = text[..end]
        .split("\r\n")
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    got.len() >= end + 4 + len
}

/// One thing a case sends.
#[derive(Clone, Debug)]
enum Piece {
    /// A record: outer type, inner type, payload, tag broken.
    Record(u8, u8, Vec<u8>, bool),
    /// Bytes as they are.
    Raw(Vec<u8>),
}

const LAST: &[u8] = b"GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// A seeded case: a few pieces, then the last request in data records.
fn case(rng: &mut XorShift) -> Vec<Piece> {
    let mut pieces = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let piece = match rng.below(14) {
            0..=3 => {
                // A request in data records, some of them empty.
                let request = format!("GET /r{} HTTP/1.1\r\nHost: x\r\n\r\n", rng.below(100));
                let cut = rng.below(request.len());
                let (a, b) = request.as_bytes().split_at(cut);
                pieces.push(Piece::Record(23, 23, a.to_vec(), false));
                Piece::Record(23, 23, b.to_vec(), false)
            }
            4 => Piece::Record(23, 23, Vec::new(), false),
            5 => {
                let alert = [[1, 0], [2, 0], [1, 90], [1, 10], [2, 10], [3, 0], [2, 40]]
                    [rng.below(7)]
                .to_vec();
                if alert[1] == 0 {
                    // A client sends nothing after its `close_notify`.
                    pieces.push(Piece::Record(23, 21, alert, false));
                    return pieces;
                }
                Piece::Record(23, 21, alert, false)
            }
            6 => {
                let len = [0, 1, 3][rng.below(3)];
                Piece::Record(23, 21, rng.bytes(len), false)
            }
            7 => {
                // A key update (asking for ours, or not; sometimes not
                // alone in its record, or cut over two records).
                let update = vec![24, 0, 0, 1, rng.below(3) as u8];
                match rng.below(3) {
                    0 => Piece::Record(23, 22, update, false),
                    1 => {
                        let mut more = update.clone();
                        more.extend_from_slice(&update);
                        Piece::Record(23, 22, more, false)
                    }
                    _ => {
                        let cut = 1 + rng.below(4);
                        pieces.push(Piece::Record(23, 22, update[..cut].to_vec(), false));
                        if rng.below(2) == 0 {
                            pieces.push(Piece::Record(23, 23, b"x".to_vec(), false));
                        }
                        Piece::Record(23, 22, update[cut..].to_vec(), false)
                    }
                }
            }
            8 => {
                let len = 1 + rng.below(40);
                let mut message = rng.bytes(len);
                message[0] = [1, 2, 4, 20, 24, 0][rng.below(6)];
                Piece::Record(23, 22, message, false)
            }
            9 => Piece::Record(20, 20, vec![1], false),
            10 => {
                let inner = [0, 20, 24, 99, 255][rng.below(5)];
                let len = rng.below(4);
                Piece::Record(23, inner, rng.bytes(len), false)
            }
            11 => Piece::Record(23, 23, b"GET /bad HTTP/1.1\r\n".to_vec(), true),
            12 => {
                // A header as it comes, with a body or not.
                let mut header = vec![[20, 21, 22, 23, 24, 0][rng.below(6)], 3, 3];
                let len = [0u16, 1, 17, 16 * 1024 + 256, 16 * 1024 + 2048, 0xffff][rng.below(6)];
                header.extend_from_slice(&len.to_be_bytes());
                // A record the server can wait for is whole (its tag is
                // wrong); one it must refuse at its header is not.
                let body = if usize::from(len) < 16 * 1024 + 2048 {
                    len.into()
                } else {
                    64
                };
                header.extend(rng.bytes(body));
                Piece::Raw(header)
            }
            _ => {
                let len = 1 + rng.below(30);
                Piece::Raw(rng.bytes(len))
            }
        };
        pieces.push(piece);
    }
    pieces.push(Piece::Record(23, 23, LAST.to_vec(), false));
    pieces
}

/// Sends `pieces` over `raw`, cut in `cuts` writes with pauses between
/// them, and stops once the server closed; what came back.
fn run(mut raw: Raw, pieces: &[Piece], cuts: usize, rng_seed: u64) -> Outcome {
    assert_eq!(
        raw.suite.suite(),
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
    );
    let mut bytes = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Record(outer, inner, payload, corrupt) => {
                let record = raw.seal(*outer, *inner, payload, *corrupt);
                bytes.extend_from_slice(&record);
            }
            Piece::Raw(raw_bytes) => bytes.extend_from_slice(raw_bytes),
        }
    }
    let mut rng = XorShift(rng_seed);
    let mut points: Vec<usize> = (0..cuts).map(|_| 1 + rng.below(bytes.len() - 1)).collect();
    points.sort_unstable();
    points.dedup();
    let (mut got, mut start, mut closed) = (Vec::new(), 0, None);
    for end in points.into_iter().chain([bytes.len()]) {
        if start > 0 {
            std::thread::sleep(PAUSE);
            closed = raw.receive(&mut got, false);
            if closed.is_some() {
                break;
            }
        }
        if raw.tcp.write_all(&bytes[start..end]).is_err() {
            break;
        }
        start = end;
    }
    let closed = match closed {
        Some(closed) => closed,
        None => raw
            .receive(&mut got, true)
            .unwrap_or_else(|| panic!("the server did not close: {pieces:?}")),
    };
    raw.outcome(got, closed).normalized()
}

#[test]
fn records_after_the_handshake_get_what_rustls_gives_them() {
    let mut builder = dormant::Server::builder();
    builder
        .park_after(Duration::from_millis(1))
        .dormant_after(Duration::from_millis(2));
    let srv = Tls::serve(&builder, service_fn(describe::<dormant::Body>));
    let reference = Tls::serve_reference(Protocol::Http1, describe::<hyper::body::Incoming>);
    let config = chacha_client(&srv.addr.ca);
    let reference_config = chacha_client(&reference.addr.ca);

    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    let cases: Vec<(Vec<Piece>, usize, u64)> = (0..CASES)
        .map(|_| (case(&mut rng), rng.below(4), rng.next()))
        .collect();
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for chunk in cases.chunks(CASES.div_ceil(CONCURRENCY)) {
            let (srv, reference, failures) = (&srv, &reference, &failures);
            let (config, reference_config) = (&config, &reference_config);
            scope.spawn(move || {
                for (pieces, cuts, seed) in chunk {
                    let ours = run(Raw::connect(srv.addr.addr, config), pieces, *cuts, *seed);
                    let theirs = run(
                        Raw::connect(reference.addr.addr, reference_config),
                        pieces,
                        *cuts,
                        *seed,
                    );
                    if !ours.matches(&theirs) {
                        failures.lock().unwrap().push(format!(
                            "{pieces:?} in {cuts} cuts:\n  dormant: {}\n  rustls:  {}",
                            ours.show(),
                            theirs.show()
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {CASES} cases differ; the first ones:\n{}",
        failures.len(),
        failures[..failures.len().min(5)].join("\n")
    );
    let s = srv.stats();
    assert!(s.parks > 0 && s.dormancies > 0, "no case slept: {s:?}");
    assert_eq!(s.tls_kept_by_rustls, 0, "{s:?}");
}
