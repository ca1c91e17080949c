//! The benchmark baseline for `hello_dormant_tls` (dormant's TLS bench
//! server): `hello_hyper` (the same handler on a plain hyper-util auto
//! server, one task per connection) over tokio-rustls, with the same
//! certificate handling and the same rustls configuration.
//!
//! ```text
//! cargo run --release --features tls --example hello_hyper_tls [ADDR [CERT_PEM KEY_PEM]]
//! TOKIO_WORKER_THREADS=1 cargo run --release --features tls --example hello_hyper_tls
//! curl --cacert /tmp/dormant-tls-hello-hyper/cert.pem https://localhost:3443/
//! ```
//!
//! `ADDR` defaults to `127.0.0.1:3443`. Without certificate files it makes
//! a self-signed certificate for `localhost` and `127.0.0.1` (rcgen's
//! defaults, `benches/common/cert.rs`), writes it to a directory under the
//! system's temporary directory and prints where. The configuration is
//! the one `dormant::tls::TlsConfig::from_pem_files` makes: the process's
//! default crypto provider, else the features' (aws-lc-rs for `tls`, ring
//! for `tls-ring`), rustls's safe default protocol versions (TLS 1.3 and
//! 1.2), no client authentication, rustls's defaults otherwise (its
//! session cache and tickets); ALPN offers `h2` and `http/1.1`, as
//! dormant does when the configuration names no protocols.
//!
//! Each accepted connection is handshaken in its own task (as dormant
//! does), then served by the auto builder (HTTP/2 or HTTP/1.1; hyper-util
//! looks at the bytes, not at ALPN). Unlike dormant, the handshake has no
//! timeout: this is `hello_hyper` with TLS and nothing else.
//!
//! Not an example of dormant: it lives with the benches that run it
//! (`TLS=1 benches/scripts/wrk.sh`) and is declared in Cargo.toml as the
//! example `hello_hyper_tls`, built only with a TLS feature. It and
//! `hello_dormant_tls` both run on tokio's multi-thread runtime, which
//! takes its worker count from `TOKIO_WORKER_THREADS`.

use std::convert::Infallible;
use std::path::Path;
use std::sync::Arc;

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

#[path = "../common/cert.rs"]
mod cert;

async fn hello(_req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:3443".to_owned());
    let config = match (args.next(), args.next()) {
        (Some(cert), Some(key)) => config_from_pem_files(cert.as_ref(), key.as_ref())?,
        (None, _) => {
            let (cert, key) = cert::self_signed("dormant-tls-hello-hyper")?;
            eprintln!(
                "self-signed certificate for localhost and 127.0.0.1: {} \
                 (curl --cacert {} https://localhost:3443/)",
                cert.display(),
                cert.display()
            );
            config_from_pem_files(&cert, &key)?
        }
        (Some(_), None) => return Err("usage: hello_hyper_tls [ADDR [CERT_PEM KEY_PEM]]".into()),
    };
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);

    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                eprintln!("accept failed: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
        };
        // dormant sets TCP_NODELAY on every connection; so does the baseline.
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(stream).await else {
                return;
            };
            let _ = builder
                .serve_connection(TokioIo::new(stream), service_fn(hello))
                .await;
        });
    }
}

/// The configuration `dormant::tls::TlsConfig::from_pem_files` makes
/// (src/tls.rs), with the ALPN protocols dormant then offers.
fn config_from_pem_files(
    cert: &Path,
    key: &Path,
) -> Result<ServerConfig, Box<dyn std::error::Error>> {
    let chain = CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate", cert.display()).into());
    }
    let key = PrivateKeyDer::from_pem_file(key)?;
    let mut config = ServerConfig::builder_with_provider(provider()?)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The process's default crypto provider if one is installed, else the
/// one the features chose, as dormant picks it.
fn provider() -> Result<Arc<CryptoProvider>, Box<dyn std::error::Error>> {
    if let Some(provider) = CryptoProvider::get_default() {
        return Ok(provider.clone());
    }
    #[cfg(feature = "tls")]
    return Ok(Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    #[cfg(all(feature = "tls-ring", not(feature = "tls")))]
    return Ok(Arc::new(rustls::crypto::ring::default_provider()));
    #[cfg(not(any(feature = "tls", feature = "tls-ring")))]
    Err("no rustls crypto provider: build with `--features tls` or `--features tls-ring`".into())
}
