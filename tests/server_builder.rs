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
    let mut stats = server.stats();
    // Buffers kept in the threads' caches, process-wide: the other tests'
    // servers' (`PoolStats::kept`).
    stats.pool.kept = 0;
    assert_eq!(stats, dormant::Stats::default());
}

#[test]
fn connection_limits_out_of_range_are_config_errors() {
    use std::time::Duration;
    const DAY: Duration = Duration::from_secs(24 * 3600);
    type Set = fn(&mut dormant::Builder);
    let cases: [(Set, &str); 4] = [
        (
            |b| _ = b.max_connection_age(Duration::ZERO),
            "max_connection_age",
        ),
        (|b| _ = b.max_connection_age(DAY * 21), "max_connection_age"),
        (
            |b| _ = b.max_connection_age_grace(DAY * 25),
            "max_connection_age_grace",
        ),
        (
            |b| _ = b.max_requests_per_connection(0),
            "max_requests_per_connection",
        ),
    ];
    for (set, name) in cases {
        let mut b = dormant::Server::builder();
        set(&mut b);
        let err = b.build().unwrap_err();
        assert!(err.is_config(), "{err:?}");
        assert!(err.to_string().contains(name), "{err}");
    }
    let mut b = dormant::Server::builder();
    b.max_connection_age(DAY * 20)
        .max_connection_age_grace(DAY * 24)
        .max_requests_per_connection(1);
    assert!(b.build().is_ok());
}
