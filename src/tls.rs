//! TLS (features `tls`, `tls-ring`, `tls-no-provider`): serving a
//! listener's connections over rustls, with the whole idle ladder.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use dormant::tls::{TlsConfig, TlsListener};
//!
//! let config = TlsConfig::from_pem_files("cert.pem", "key.pem")?;
//! let tcp = tokio::net::TcpListener::bind("0.0.0.0:443").await?;
//! let listener = TlsListener::new(tcp, config.clone());
//! // … dormant::Server::serve(listener, service) …
//! // Later, a renewed certificate: new connections use it.
//! config.reload_from_pem_files("cert.pem", "key.pem")?;
//! # Ok(()) }
//! ```
//!
//! Sessions run on rustls's unbuffered API, so an idle TLS connection keeps
//! its session state and no record buffer (see [`TlsStream`]). After a TLS
//! 1.3 handshake the session leaves rustls: dormant protects its records
//! with the crypto provider's ciphers, and a sleeping connection keeps its
//! traffic secrets and keys, a few hundred bytes, instead of a rustls
//! session (`docs/tls.md` says what is kept and why it is as safe as
//! rustls's record layer; TLS 1.2 sessions stay in rustls, counted in
//! [`Stats::tls_kept_by_rustls`](crate::Stats::tls_kept_by_rustls)). The
//! handshake happens in the connection's task, never in the accept loop,
//! and is bounded by the server's
//! [`handshake_timeout`](crate::Builder::handshake_timeout)
//! (default 10 s) and its
//! [`header_read_timeout`](crate::Builder::header_read_timeout), both
//! counted from accept. ALPN decides between HTTP/2 and HTTP/1.1: unless
//! your configuration names protocols itself, dormant offers `h2` and
//! `http/1.1` (only `http/1.1` when the server's HTTP/2 is off).
//!
//! Handlers that need to know what a connection's handshake negotiated
//! (the server name the client asked for, the TLS version, the client's
//! certificate with mutual TLS) turn on
//! [`Builder::tls_info`](crate::Builder::tls_info) and read the
//! [`TlsInfo`] extension of each request.

use std::io;
use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::listener::{Addr, Listener};
use crate::transport::{RecordSecrets, RecordServerName, Transport};
pub use crate::transport::{TlsInfo, TlsStream};

/// The rustls dormant is built with, so that a `ServerConfig` for
/// [`TlsConfig::new`] needs no dependency of your own on the same version:
/// `dormant::tls::rustls::ServerConfig`.
pub use rustls;

/// A rustls server configuration that can be replaced while serving: new
/// connections use the newest one, established connections keep theirs.
///
/// Cloning is cheap; clones share the configuration (keep one to
/// [`reload`](Self::reload) while a [`TlsListener`] serves with another).
#[derive(Clone, Debug)]
pub struct TlsConfig {
    current: Arc<RwLock<Configs>>,
}

/// The configuration as given, and the one for servers whose HTTP/2 is
/// off (the same one when the user chose the ALPN protocols).
#[derive(Debug)]
struct Configs {
    both: Arc<ServerConfig>,
    http1: Arc<ServerConfig>,
}

impl Configs {
    fn new(config: impl Into<Arc<ServerConfig>>) -> Self {
        let mut both = Arc::unwrap_or_clone(config.into());
        both.cert_resolver = Arc::new(RecordServerName(both.cert_resolver.clone()));
        // After the handshake, the session's keys move to dormant's record
        // layer (see `docs/tls.md`); they are never handed out further.
        both.enable_secret_extraction = true;
        // And their traffic secrets, to update them (the user's key log is
        // told everything it was before).
        both.key_log = Arc::new(RecordSecrets(both.key_log.clone()));
        if !both.alpn_protocols.is_empty() {
            let both = Arc::new(both);
            return Configs {
                http1: both.clone(),
                both,
            };
        }
        let mut http1 = both.clone();
        both.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        http1.alpn_protocols = vec![b"http/1.1".to_vec()];
        Configs {
            both: Arc::new(both),
            http1: Arc::new(http1),
        }
    }
}

impl TlsConfig {
    /// Serves with `config`. Its ALPN protocols are used as they are; if it
    /// has none, dormant offers `h2` and `http/1.1`. Its
    /// `enable_secret_extraction` is turned on in dormant's copy: after
    /// the handshake, a session's keys move from rustls to dormant's record
    /// layer, which keeps a waiting connection at a fraction of rustls's
    /// session (see `docs/tls.md`).
    pub fn new(config: impl Into<Arc<ServerConfig>>) -> Self {
        TlsConfig {
            current: Arc::new(RwLock::new(Configs::new(config))),
        }
    }

    /// Makes a configuration with the certificate chain and private key in two
    /// PEM files (no client authentication), on the process's default
    /// crypto provider, or the one the crate's features chose.
    ///
    /// # Errors
    ///
    /// When a file cannot be read, holds no certificate or no key, or the
    /// key does not fit the certificate; the error names the file.
    pub fn from_pem_files(cert: impl AsRef<Path>, key: impl AsRef<Path>) -> io::Result<Self> {
        Ok(TlsConfig::new(config_from_pem_files(
            cert.as_ref(),
            key.as_ref(),
        )?))
    }

    /// Replaces the configuration: connections accepted from now on use
    /// `config`.
    pub fn reload(&self, config: impl Into<Arc<ServerConfig>>) {
        let configs = Configs::new(config);
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = configs;
    }

    /// Replaces the configuration with one made from PEM files, as
    /// [`from_pem_files`](Self::from_pem_files) makes it. On error the
    /// current configuration stays.
    ///
    /// # Errors
    ///
    /// As [`from_pem_files`](Self::from_pem_files).
    pub fn reload_from_pem_files(
        &self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> io::Result<()> {
        self.reload(config_from_pem_files(cert.as_ref(), key.as_ref())?);
        Ok(())
    }

    /// Returns the configuration new connections get: the one given, with
    /// dormant's ALPN protocols if it named none, its certificate resolver
    /// wrapped in one that notes the server name the client asked for (for
    /// [`TlsInfo`]; it answers as yours does), `enable_secret_extraction`
    /// on, and its key log wrapped in one that passes a TLS 1.3 session's
    /// traffic secrets to dormant's record layer (and tells yours all it
    /// was told before): see the module docs.
    pub fn get(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .both
            .clone()
    }

    /// The configuration a new connection starts with, and the one it
    /// starts over with if the server's HTTP/2 is off, when it differs.
    fn for_accept(&self) -> (Arc<ServerConfig>, Option<Arc<ServerConfig>>) {
        let configs = self.current.read().unwrap_or_else(|e| e.into_inner());
        let http1 = (!Arc::ptr_eq(&configs.both, &configs.http1)).then(|| configs.http1.clone());
        (configs.both.clone(), http1)
    }
}

/// The crypto provider for configurations dormant makes: the process's
/// default if one is installed, else the one the crate's features chose.
fn provider() -> io::Result<Arc<CryptoProvider>> {
    if let Some(provider) = CryptoProvider::get_default() {
        return Ok(provider.clone());
    }
    #[cfg(feature = "tls")]
    return Ok(Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    #[cfg(all(feature = "tls-ring", not(feature = "tls")))]
    return Ok(Arc::new(rustls::crypto::ring::default_provider()));
    #[cfg(not(any(feature = "tls", feature = "tls-ring")))]
    Err(io::Error::other(
        "no rustls crypto provider: install one with CryptoProvider::install_default, \
         or enable dormant's `tls` or `tls-ring` feature",
    ))
}

fn config_from_pem_files(cert: &Path, key: &Path) -> io::Result<ServerConfig> {
    let about = |path: &Path, what: &str, error: &dyn std::fmt::Display| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}: {error}", path.display()),
        )
    };
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| about(cert, "cannot read a PEM certificate chain", &e))?;
    if chain.is_empty() {
        return Err(about(
            cert,
            "no certificate",
            &"the file has no CERTIFICATE block",
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| about(key, "cannot read a PEM private key", &e))?;
    ServerConfig::builder_with_provider(provider()?)
        .with_safe_default_protocol_versions()
        .and_then(|builder| {
            builder
                .with_no_client_auth()
                .with_single_cert(chain, key_der)
        })
        .map_err(|e| about(key, "the key does not fit the certificate", &e))
}

/// Serves the connections of a plain listener over TLS.
///
/// Accepting does not wait for the handshake: each connection's handshake
/// runs in its own task (see the [module docs](self)).
#[derive(Debug)]
pub struct TlsListener<L> {
    inner: L,
    config: TlsConfig,
}

impl<L> TlsListener<L> {
    /// Serves TLS over `listener`'s connections, with `config`.
    pub fn new(listener: L, config: TlsConfig) -> Self {
        TlsListener {
            inner: listener,
            config,
        }
    }

    /// Returns the listener underneath.
    pub fn get_ref(&self) -> &L {
        &self.inner
    }
}

impl<L> Listener for TlsListener<L>
where
    L: Listener,
    TlsStream<L::Io>: Transport<Addr = Addr<L>>,
{
    type Io = TlsStream<L::Io>;

    async fn accept(&mut self) -> io::Result<(TlsStream<L::Io>, Addr<L>)> {
        let (io, peer) = self.inner.accept().await?;
        let (config, http1) = self.config.for_accept();
        let stream = TlsStream::new(io, config, http1)?;
        Ok((stream, peer))
    }

    fn local_addr(&self) -> io::Result<Addr<L>> {
        self.inner.local_addr()
    }
}
