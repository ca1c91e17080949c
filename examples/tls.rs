//! Answers every request with `200 Hello, World!` over TLS, like `hello`.
//!
//! ```text
//! cargo run --release --features tls --example tls [ADDR [CERT_PEM KEY_PEM]]
//! curl --cacert /tmp/dormant-tls-example/cert.pem https://localhost:3443/
//! ```
//!
//! `ADDR` defaults to `127.0.0.1:3443`. Without certificate files it makes
//! a self-signed certificate for `localhost` and `127.0.0.1`, writes it to
//! a directory under the system's temporary directory, and prints where, so
//! that a client can trust it (`curl --cacert PATH`). HTTP/2 and HTTP/1.1
//! are both offered (ALPN).

use std::convert::Infallible;
use std::path::PathBuf;

use dormant::tls::{TlsConfig, TlsListener};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::net::TcpListener;
use tracing_subscriber::EnvFilter;

async fn hello(_req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    if let Err(error) = run().await {
        eprintln!("tls: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:3443".to_owned());
    let config = match (args.next(), args.next()) {
        (Some(cert), Some(key)) => TlsConfig::from_pem_files(cert, key)?,
        (None, _) => {
            let (cert, key) = self_signed()?;
            eprintln!(
                "self-signed certificate for localhost and 127.0.0.1: {} \
                 (curl --cacert {} https://localhost:3443/)",
                cert.display(),
                cert.display()
            );
            TlsConfig::from_pem_files(cert, key)?
        }
        (Some(_), None) => return Err("usage: tls [ADDR [CERT_PEM KEY_PEM]]".into()),
    };
    let tcp = TcpListener::bind(&addr).await?;
    println!("listening on {}", tcp.local_addr()?);
    let server = dormant::Server::builder().build()?;
    server
        .serve(TlsListener::new(tcp, config), service_fn(hello))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// Makes a self-signed certificate and writes it and its key as PEM files;
/// returns their paths.
fn self_signed() -> Result<(PathBuf, PathBuf), Box<dyn std::error::Error>> {
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let certified = rcgen::generate_simple_self_signed(names)?;
    let dir = std::env::temp_dir().join("dormant-tls-example");
    std::fs::create_dir_all(&dir)?;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem())?;
    std::fs::write(&key, certified.key_pair.serialize_pem())?;
    Ok((cert, key))
}
