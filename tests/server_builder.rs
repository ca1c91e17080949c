//! `Builder::build` validates the configuration.

use crate::common::ladder::{accepts, rejects};

#[test]
fn max_header_bytes_below_8192_is_a_config_error() {
    rejects(|b| b.max_header_bytes(100), "max_header_bytes");
    rejects(|b| b.max_header_bytes(8191), "max_header_bytes");
    accepts(|b| b.max_header_bytes(8192));
}

#[test]
fn zero_max_headers_is_a_config_error() {
    rejects(|b| b.max_headers(0), "max_headers");
    accepts(|b| b.max_headers(1));
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
    rejects(
        |b| b.max_connection_age(Duration::ZERO),
        "max_connection_age",
    );
    rejects(|b| b.max_connection_age(DAY * 21), "max_connection_age");
    rejects(
        |b| b.max_connection_age_grace(DAY * 25),
        "max_connection_age_grace",
    );
    rejects(
        |b| b.max_requests_per_connection(0),
        "max_requests_per_connection",
    );
    accepts(|b| {
        b.max_connection_age(DAY * 20)
            .max_connection_age_grace(DAY * 24)
            .max_requests_per_connection(1)
    });
}
