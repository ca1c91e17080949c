//! `Builder::build` validates the configuration.

#[test]
fn max_header_bytes_below_8192_is_a_config_error() {
    let err = dormant::Server::builder()
        .max_header_bytes(100)
        .build()
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
    assert!(err.to_string().contains("max_header_bytes"), "{err}");
    assert!(
        dormant::Server::builder()
            .max_header_bytes(8191)
            .build()
            .is_err()
    );
    assert!(
        dormant::Server::builder()
            .max_header_bytes(8192)
            .build()
            .is_ok()
    );
}

#[test]
fn zero_max_headers_is_a_config_error() {
    let err = dormant::Server::builder()
        .max_headers(0)
        .build()
        .unwrap_err();
    assert!(err.is_config(), "{err:?}");
    assert!(dormant::Server::builder().max_headers(1).build().is_ok());
}

#[test]
fn defaults_build() {
    let server = dormant::Server::builder()
        .build()
        .expect("defaults are valid");
    assert_eq!(server.stats(), dormant::Stats::default());
}
