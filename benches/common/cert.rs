//! The self-signed certificate of the TLS bench servers (`hello_dormant_tls`,
//! `hello_hyper_tls`) when they are given none. Each includes this file
//! with `#[path = "../common/cert.rs"] mod cert;`.

use std::path::PathBuf;

/// Makes a self-signed certificate for `localhost` and `127.0.0.1`
/// (rcgen's defaults, as `examples/tls.rs`) and writes it and its key as
/// `cert.pem` and `key.pem` into the directory `dir` under the system's
/// temporary directory; returns their paths.
#[cfg(any(feature = "tls", feature = "tls-ring"))]
pub(crate) fn self_signed(dir: &str) -> Result<(PathBuf, PathBuf), Box<dyn std::error::Error>> {
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let certified = rcgen::generate_simple_self_signed(names)?;
    let dir = std::env::temp_dir().join(dir);
    std::fs::create_dir_all(&dir)?;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem())?;
    std::fs::write(&key, certified.key_pair.serialize_pem())?;
    Ok((cert, key))
}

/// `tls-no-provider` alone: rcgen has no crypto provider to make the key
/// with (tests/Cargo.toml gives it the one of `tls` or `tls-ring`).
#[cfg(not(any(feature = "tls", feature = "tls-ring")))]
pub(crate) fn self_signed(_dir: &str) -> Result<(PathBuf, PathBuf), Box<dyn std::error::Error>> {
    Err("a self-signed certificate needs a crypto provider: build with `--features tls` or `--features tls-ring`".into())
}
