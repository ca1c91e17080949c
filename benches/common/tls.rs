//! TLS for the memory benches' `tls-…` kinds (built with a TLS feature:
//! `tls`, `tls-ring`): the server process's self-signed certificate and
//! configuration, and the client process's blocking rustls connection.
//! `common/procs.rs` includes this file as its `tls` module.
//!
//! The server process makes the certificate with rcgen when it starts
//! (before the warm-up, so outside the *before* readings) and writes it as
//! PEM into the measurement's temporary directory; the client process
//! trusts that file alone. The client speaks TLS 1.3 only, offers ALPN
//! `http/1.1` (or `h2` alone, for a bench's own HTTP/2 client:
//! [`Trust::client_config`]) and does not resume sessions: every
//! connection is a new client with a full handshake.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::client::Resumption;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, StreamOwned};

/// The crypto provider the crate's features chose: aws-lc-rs for `tls`
/// (as rustls's default), ring for `tls-ring`.
#[cfg(feature = "tls")]
fn feature_provider() -> Option<CryptoProvider> {
    Some(rustls::crypto::aws_lc_rs::default_provider())
}

#[cfg(all(feature = "tls-ring", not(feature = "tls")))]
fn feature_provider() -> Option<CryptoProvider> {
    Some(rustls::crypto::ring::default_provider())
}

/// `tls-no-provider` alone: the bench has no provider to install.
#[cfg(not(any(feature = "tls", feature = "tls-ring")))]
fn feature_provider() -> Option<CryptoProvider> {
    None
}

/// Installs the features' provider as the process's default, unless one
/// is installed already, so that `ServerConfig::builder()` and
/// `ClientConfig::builder…()` do not panic.
fn install_provider() {
    if CryptoProvider::get_default().is_some() {
        return;
    }
    let provider = feature_provider().expect(
        "the tls-… kinds need a crypto provider: build with `--features tls` or `--features tls-ring`",
    );
    // Another thread may have installed one meanwhile: either will do.
    let _ = provider.install_default();
}

/// A `tls-…` kind's server side: a self-signed certificate for
/// `localhost`, its server configuration and the PEM file its client
/// trusts.
#[derive(Debug)]
pub(crate) struct Identity {
    /// One certificate, no client authentication, rustls's defaults
    /// otherwise (TLS 1.2 and 1.3, 2 session tickets, a 256-session
    /// cache) and no ALPN protocols: each server sets its own.
    pub(crate) config: Arc<ServerConfig>,
    /// The certificate, PEM.
    pub(crate) cert: PathBuf,
}

impl Identity {
    /// Makes the certificate and writes it as `cert.pem` into `dir`.
    pub(crate) fn self_signed(dir: &Path) -> Self {
        install_provider();
        let (pem, der, key) = localhost_certificate();
        let cert = dir.join("cert.pem");
        std::fs::write(&cert, pem).unwrap_or_else(|e| panic!("writing {}: {e}", cert.display()));
        let config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![der], key)
            .expect("server configuration");
        Identity {
            config: Arc::new(config),
            cert,
        }
    }
}

/// A self-signed certificate for `localhost`, as PEM and DER, and its key,
/// made by rcgen with the provider the features chose.
#[cfg(any(feature = "tls", feature = "tls-ring"))]
fn localhost_certificate() -> (String, CertificateDer<'static>, PrivateKeyDer<'static>) {
    use rustls::pki_types::PrivatePkcs8KeyDer;
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])
        .expect("a self-signed certificate");
    let key = PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der());
    (
        certified.cert.pem(),
        certified.cert.der().clone(),
        key.into(),
    )
}

/// `tls-no-provider` alone: rcgen has no provider to make a key with
/// (tests/Cargo.toml gives it the one of `tls` or `tls-ring`), and
/// `install_provider` has panicked before.
#[cfg(not(any(feature = "tls", feature = "tls-ring")))]
fn localhost_certificate() -> (String, CertificateDer<'static>, PrivateKeyDer<'static>) {
    unreachable!("the tls-… kinds need a crypto provider")
}

/// What the client process trusts: the server's certificate file, and
/// the client configurations made from it on first use (ALPN `http/1.1`,
/// ALPN `h2`).
#[derive(Debug)]
pub(crate) struct Trust {
    pub(crate) cert: PathBuf,
    http1: OnceLock<Arc<ClientConfig>>,
    h2: OnceLock<Arc<ClientConfig>>,
}

impl Trust {
    pub(crate) fn new(cert: PathBuf) -> Self {
        Trust {
            cert,
            http1: OnceLock::new(),
            h2: OnceLock::new(),
        }
    }

    /// TLS 1.3, ALPN `http/1.1` (`h2` alone if `h2`), no resumption, the
    /// certificate as the only root; the provider's suites, or the one
    /// `TLS_SUITE` names (`TLS13_AES_128_GCM_SHA256`, …).
    pub(crate) fn client_config(&self, h2: bool) -> &Arc<ClientConfig> {
        let config = if h2 { &self.h2 } else { &self.http1 };
        config.get_or_init(|| {
            install_provider();
            let mut roots = RootCertStore::empty();
            let certs = CertificateDer::pem_file_iter(&self.cert)
                .unwrap_or_else(|e| panic!("reading {}: {e}", self.cert.display()));
            for cert in certs {
                roots.add(cert.expect("a PEM certificate")).expect("a root");
            }
            let mut provider = rustls::crypto::CryptoProvider::get_default()
                .expect("a provider, installed above")
                .as_ref()
                .clone();
            if let Ok(suite) = std::env::var("TLS_SUITE") {
                provider
                    .cipher_suites
                    .retain(|s| format!("{:?}", s.suite()) == suite);
                assert!(
                    !provider.cipher_suites.is_empty(),
                    "TLS_SUITE={suite}: no such suite (e.g. TLS13_AES_128_GCM_SHA256)"
                );
            }
            let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&[&rustls::version::TLS13])
                .expect("TLS 1.3")
                .with_root_certificates(roots)
                .with_no_client_auth();
            let alpn: &[u8] = if h2 { b"h2" } else { b"http/1.1" };
            config.alpn_protocols = vec![alpn.to_vec()];
            config.resumption = Resumption::disabled();
            Arc::new(config)
        })
    }
}

/// A client connection: rustls's blocking API over std's `TcpStream`.
pub(crate) type ClientStream = StreamOwned<ClientConnection, TcpStream>;

/// Connects to `addr` as `localhost` with `timeout` on reads; the
/// handshake happens with the first write.
pub(crate) fn connect(
    addr: SocketAddr,
    trust: &Trust,
    timeout: Option<Duration>,
) -> Box<ClientStream> {
    let tcp = TcpStream::connect(addr).expect("connect");
    tcp.set_read_timeout(timeout).expect("timeout");
    // The client's Finished and the request are two writes.
    tcp.set_nodelay(true).expect("nodelay");
    let name = ServerName::try_from("localhost").expect("server name");
    let conn =
        ClientConnection::new(trust.client_config(false).clone(), name).expect("client connection");
    Box::new(StreamOwned::new(conn, tcp))
}
