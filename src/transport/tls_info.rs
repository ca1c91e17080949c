//! What a TLS handshake negotiated, for handlers ([`TlsInfo`]), and how
//! the server name the client asked for is learnt: rustls's unbuffered
//! connection does not say it, so the configuration's certificate resolver
//! is wrapped to note it ([`RecordServerName`]).

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{CipherSuite, CommonState, HandshakeKind, ProtocolVersion};

/// What a request's TLS connection negotiated: in every request's
/// extensions when [`Builder::tls_info`](crate::Builder::tls_info) is on
/// (it is off by default, like [`PeerAddr`](crate::PeerAddr)).
///
/// Made once per connection, when its handshake completes, and shared by
/// its requests (a clone is a reference count). A connection keeps it
/// while it waits, parked or dormant: the client's certificate chain, if
/// any, is part of what an idle connection holds.
///
/// ```no_run
/// # use dormant::tls::TlsInfo;
/// # fn handler(req: &http::Request<dormant::Body>) {
/// if let Some(tls) = req.extensions().get::<TlsInfo>() {
///     println!("{:?} for {:?}", tls.protocol_version(), tls.server_name());
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct TlsInfo(Arc<TlsDetails>);

/// What a completed handshake negotiated, shared by the clones of a
/// [`TlsInfo`].
struct TlsDetails {
    server_name: Option<Box<str>>,
    alpn_protocol: Option<Box<[u8]>>,
    protocol_version: ProtocolVersion,
    cipher_suite: CipherSuite,
    handshake_kind: HandshakeKind,
    peer_certificates: Option<Box<[CertificateDer<'static>]>>,
}

impl TlsInfo {
    /// What the session `conn` negotiated, once its handshake is complete
    /// (`None` before), with the server name its ClientHello asked for.
    pub(crate) fn new(conn: &CommonState, server_name: Option<Box<str>>) -> Option<TlsInfo> {
        Some(TlsInfo(Arc::new(TlsDetails {
            server_name,
            alpn_protocol: conn.alpn_protocol().map(Box::from),
            protocol_version: conn.protocol_version()?,
            cipher_suite: conn.negotiated_cipher_suite()?.suite(),
            handshake_kind: conn.handshake_kind()?,
            peer_certificates: conn.peer_certificates().map(Box::from),
        })))
    }

    /// Returns the server name the client asked for (SNI), if it sent one (clients
    /// that connect to an IP address send none).
    pub fn server_name(&self) -> Option<&str> {
        self.0.server_name.as_deref()
    }

    /// Returns the application protocol agreed on with ALPN (`b"h2"`,
    /// `b"http/1.1"`), if the client offered any.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.0.alpn_protocol.as_deref()
    }

    /// Returns the TLS version: `TLSv1_3` or `TLSv1_2`.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.0.protocol_version
    }

    /// Returns the cipher suite.
    pub fn cipher_suite(&self) -> CipherSuite {
        self.0.cipher_suite
    }

    /// Returns whether the handshake was a full one or resumed a session.
    pub fn handshake_kind(&self) -> HandshakeKind {
        self.0.handshake_kind
    }

    /// Returns the client's certificate chain, its own certificate first, when the
    /// configuration asked for one (mutual TLS: a `ServerConfig` built
    /// with a client certificate verifier) and the client sent it. The
    /// verifier has checked it before the first request.
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.0.peer_certificates.as_deref()
    }
}

impl fmt::Debug for TlsInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsInfo")
            .field("server_name", &self.server_name())
            .field(
                "alpn_protocol",
                &self.alpn_protocol().map(String::from_utf8_lossy),
            )
            .field("protocol_version", &self.protocol_version())
            .field("cipher_suite", &self.cipher_suite())
            .field("handshake_kind", &self.handshake_kind())
            .field(
                "peer_certificates",
                &self.peer_certificates().map(<[_]>::len),
            )
            .finish()
    }
}

thread_local! {
    /// `Some` while [`recording_server_name`] runs on this thread: the
    /// server name of a ClientHello processed meanwhile, if any.
    static SERVER_NAME: RefCell<Option<Option<Box<str>>>> = const { RefCell::new(None) };
}

/// Runs `process`, in which rustls processes one connection's records on
/// this thread, and returns the server name of the ClientHello it
/// processed, if any.
///
/// rustls's unbuffered server connection does not say which server name
/// the client asked for; its certificate resolver is told, on every
/// handshake, full or resumed, and runs inside the processing, on the
/// same thread: [`RecordServerName`] passes the name on from there.
pub(crate) fn recording_server_name<R>(process: impl FnOnce() -> R) -> (R, Option<Box<str>>) {
    SERVER_NAME.with(|name| *name.borrow_mut() = Some(None));
    let result = process();
    let name = SERVER_NAME.with(|name| name.borrow_mut().take().flatten());
    (result, name)
}

/// The user's certificate resolver, noting the server name of each
/// ClientHello for [`recording_server_name`].
#[derive(Debug)]
pub(crate) struct RecordServerName(pub(crate) Arc<dyn ResolvesServerCert>);

impl ResolvesServerCert for RecordServerName {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(asked) = client_hello.server_name() {
            // Outside `recording_server_name` nobody asks: no copy.
            let _ = SERVER_NAME.try_with(|name| {
                if let Some(name) = name.borrow_mut().as_mut() {
                    *name = Some(asked.into());
                }
            });
        }
        self.0.resolve(client_hello)
    }

    fn only_raw_public_keys(&self) -> bool {
        self.0.only_raw_public_keys()
    }
}
