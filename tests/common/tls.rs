//! What the TLS tests share: the crypto provider, certificates
//! made in the test (rcgen), client configurations, the client runtime,
//! reading TLS records off the wire, and a client TCP stream whose writes
//! a test can hold back or cut ([`Tap`]). Built only with a crypto provider
//! (features `tls` or `tls-ring`).

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use dormant::tls::TlsConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::version::{TLS12, TLS13};
use tokio_rustls::rustls::{ClientConfig, RootCertStore, SupportedProtocolVersion};

use super::temp_dir::TempDir;
use super::timeout::CLIENT_TIMEOUT;

/// The crypto provider dormant's features chose, for the tests' own
/// configurations.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    #[cfg(feature = "tls")]
    return Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
    #[cfg(not(feature = "tls"))]
    Arc::new(tokio_rustls::rustls::crypto::ring::default_provider())
}

/// A self-signed certificate and its key, as PEM files in a temporary
/// directory (as `TlsConfig::from_pem_files` and the examples take them).
pub(crate) struct Cert {
    pub(crate) der: CertificateDer<'static>,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    _dir: TempDir,
}

impl Cert {
    /// A certificate for `localhost`.
    pub(crate) fn new() -> Cert {
        Cert::for_names(&["localhost"])
    }

    /// A certificate for `names` (DNS names or IP addresses).
    pub(crate) fn for_names(names: &[&str]) -> Cert {
        let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
        let made = rcgen::generate_simple_self_signed(names).expect("make a certificate");
        let dir = TempDir::new();
        let (cert, key) = (dir.path.join("cert.pem"), dir.path.join("key.pem"));
        std::fs::write(&cert, made.cert.pem()).unwrap();
        std::fs::write(&key, made.key_pair.serialize_pem()).unwrap();
        Cert {
            der: made.cert.der().clone(),
            cert,
            key,
            _dir: dir,
        }
    }

    /// The server's configuration, from the PEM files.
    pub(crate) fn config(&self) -> TlsConfig {
        TlsConfig::from_pem_files(&self.cert, &self.key).expect("load the PEM files")
    }
}

/// A client configuration trusting `trust`, limited to `versions` (all
/// that rustls supports if empty), offering `alpn`. Each call makes a new
/// one, with a session cache of its own.
pub(crate) fn client_config(
    trust: &[&Cert],
    versions: &[&'static SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in trust {
        roots.add(cert.der.clone()).unwrap();
    }
    let versions = if versions.is_empty() {
        &[&TLS13, &TLS12][..]
    } else {
        versions
    };
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS 1.3 client trusting `cert`, without ALPN.
pub(crate) fn tls13(cert: &Cert) -> Arc<ClientConfig> {
    client_config(&[cert], &[&TLS13], &[])
}

/// The runtime every TLS client of the tests runs on: each call
/// blocks on it, so the tests read like the raw-socket suites.
pub(crate) fn client_rt() -> &'static tokio::runtime::Runtime {
    static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    });
    &RT
}

/// Runs `f` on the client runtime; panics if it takes longer than
/// [`CLIENT_TIMEOUT`], so a hang fails the test.
pub(crate) fn block<F: Future>(what: &str, f: F) -> F::Output {
    client_rt().block_on(async {
        tokio::time::timeout(CLIENT_TIMEOUT, f)
            .await
            .unwrap_or_else(|_| panic!("{what}: timed out"))
    })
}

/// TLS's `application_data` content type (every TLS 1.3 record after the
/// handshake has it on the outside).
pub(crate) const APPLICATION_DATA: u8 = 23;

/// The TLS records in `bytes`: each one's content type and length.
pub(crate) fn records(mut bytes: &[u8]) -> Vec<(u8, usize)> {
    let mut records = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 5, "a record header cut short: {bytes:?}");
        let len = usize::from(u16::from_be_bytes([bytes[3], bytes[4]]));
        assert!(bytes.len() >= 5 + len, "a record cut short");
        records.push((bytes[0], len));
        bytes = &bytes[5 + len..];
    }
    records
}

/// A TCP stream whose writes the test can hold back, to send the
/// ciphertext itself (cut where it likes), or cut in two with a pause.
pub(crate) struct Tap {
    pub(crate) tcp: TcpStream,
    /// Bytes that go out in front of the first write, in the same TCP
    /// write (a PROXY header with the ClientHello).
    pub(crate) prefix: Option<Vec<u8>>,
    /// Writes go here instead of the socket while it is `Some`.
    pub(crate) held: Option<Vec<u8>>,
    /// Cut the write with this index after this many bytes, then pause.
    pub(crate) cut: Option<(usize, usize, Duration)>,
    /// Writes made so far (the rest of a cut write is one more).
    pub(crate) writes: usize,
    /// The bytes of the last write.
    pub(crate) last_write: Vec<u8>,
    /// Writes cut so far.
    pub(crate) cuts: usize,
    /// The pause after a cut write, before the next one.
    pausing: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Tap {
    pub(crate) fn new(tcp: TcpStream) -> Tap {
        Tap {
            tcp,
            prefix: None,
            held: None,
            cut: None,
            writes: 0,
            last_write: Vec::new(),
            cuts: 0,
            pausing: None,
        }
    }
}

impl AsyncRead for Tap {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tap {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let Some(prefix) = &this.prefix {
            let write = [prefix.as_slice(), buf].concat();
            let n = ready!(Pin::new(&mut this.tcp).poll_write(cx, &write))?;
            assert_eq!(n, write.len(), "a short write on loopback");
            this.prefix = None;
            this.writes += 1;
            this.last_write = write;
            return Poll::Ready(Ok(buf.len()));
        }
        if let Some(held) = &mut this.held {
            held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        if let Some(sleep) = &mut this.pausing {
            ready!(sleep.as_mut().poll(cx));
            this.pausing = None;
        }
        let cut = this
            .cut
            .filter(|&(index, at, _)| index == this.writes && at < buf.len());
        let buf = match cut {
            Some((_, at, _)) => &buf[..at],
            None => buf,
        };
        let n = ready!(Pin::new(&mut this.tcp).poll_write(cx, buf))?;
        this.writes += 1;
        this.last_write = buf[..n].to_vec();
        if let Some((_, at, pause)) = cut {
            assert_eq!(n, at, "a short write on loopback");
            this.cuts += 1;
            this.pausing = Some(Box::pin(tokio::time::sleep(pause)));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}
