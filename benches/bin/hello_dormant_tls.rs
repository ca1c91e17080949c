//! dormant's TLS bench server: `hello_dormant` over TLS (dormant's
//! `TlsListener`, as `examples/tls.rs`), with the same settings from the
//! environment.
//!
//! ```text
//! cargo run --release --features tls --example hello_dormant_tls [ADDR [CERT_PEM KEY_PEM]]
//! curl --cacert /tmp/dormant-tls-hello-dormant/cert.pem https://localhost:3443/
//! PARK_AFTER_MS=0 cargo run --release --features tls --example hello_dormant_tls
//! ```
//!
//! `ADDR` defaults to `127.0.0.1:3443`. Without certificate files it makes
//! a self-signed certificate for `localhost` and `127.0.0.1`, writes it to
//! a directory under the system's temporary directory and prints where
//! (`TLS=1 benches/scripts/wrk.sh` makes the run's certificate this way).
//! The configuration is `dormant::tls::TlsConfig::from_pem_files`'s: ALPN
//! offers `h2` and `http/1.1`. The environment variables (`PARK_AFTER_MS`,
//! `DORMANT_AFTER_MS`, `PEER_ADDR`, `RUST_LOG`, `TOKIO_WORKER_THREADS`) are
//! described in `benches/common/server.rs`.
//!
//! Not an example of dormant: it lives with the benches that run it
//! (`TLS=1 benches/scripts/wrk.sh`), beside its baseline `hello_hyper_tls`,
//! and is declared in Cargo.toml as the example `hello_dormant_tls`, built
//! only with a TLS feature.

#[path = "../common/cert.rs"]
mod cert;
#[path = "../common/server.rs"]
mod server;

use dormant::tls::{TlsConfig, TlsListener};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() {
    server::init_tracing();
    if let Err(error) = run().await {
        eprintln!("hello_dormant_tls: {error}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:3443".to_owned());
    let config = match (args.next(), args.next()) {
        (Some(cert), Some(key)) => TlsConfig::from_pem_files(cert, key)?,
        (None, _) => {
            let (cert, key) = cert::self_signed("dormant-tls-hello-dormant")?;
            eprintln!(
                "self-signed certificate for localhost and 127.0.0.1: {} \
                 (curl --cacert {} https://localhost:3443/)",
                cert.display(),
                cert.display()
            );
            TlsConfig::from_pem_files(cert, key)?
        }
        (Some(_), None) => return Err("usage: hello_dormant_tls [ADDR [CERT_PEM KEY_PEM]]".into()),
    };
    let server = server::server()?;
    let tcp = TcpListener::bind(&addr).await?;
    println!("listening on {}", tcp.local_addr()?);
    server::serve(server, TlsListener::new(tcp, config)).await
}
