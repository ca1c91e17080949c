//! The integration tests of dormant, as one test binary: a module per area
//! (`<area>_<topic>`, as tokio names its test files), and `common`, the
//! helpers they share, split by role. One binary links the crate and the
//! dev-dependencies once (each test file of its own was a binary linked
//! anew, with a `mod common` header of its own), as cargo's and
//! rust-analyzer's suites do (`tests/it/`).
//!
//! A test that needs the process to itself (it counts the process's
//! descriptors, or installs tracing's global subscriber) runs alone in a
//! child process of this binary (`common::process`); a test server counts
//! the panics of its own threads, not the process's.
//!
//! `cargo test --features tls,proxy-protocol,axum,ws-deflate` at the
//! repository's root runs them all; `cargo test --test it -- MODULE::`, one
//! module.

mod common;

mod accept_emfile;
mod admission_example;
#[cfg(feature = "axum")]
mod axum_app;
#[cfg(feature = "axum")]
mod axum_two_servers;
mod conn_fds;
mod connection_hooks;
mod connection_hooks_panic;
mod connection_limits;
mod context_requests;
mod grpc_health;
mod http1_body;
mod http1_client_close;
mod http1_differential;
mod http1_park;
mod http1_semantics;
mod http2_clients;
mod http2_differential;
mod http2_generated;
mod http2_h2c;
mod http2_options;
mod http2_sleep;
mod layering;
mod lot_dormant;
mod lot_first_poll;
#[cfg(feature = "proxy-protocol")]
mod proxy_protocol;
mod request_deadlines;
mod server_builder;
mod server_shutdown;
mod service_axum;
mod service_panic;
mod sse_example;
mod taskless_park;
mod timeouts;
#[cfg(any(feature = "tls", feature = "tls-ring"))]
mod tls_clients;
#[cfg(any(feature = "tls", feature = "tls-ring"))]
mod tls_records;
#[cfg(any(feature = "tls", feature = "tls-ring"))]
mod tls_session;
#[cfg(any(feature = "tls", feature = "tls-ring"))]
mod tls_upgrade;
mod tracing_spans;
mod unix_socket;
mod upgrade;
mod upgrade_examples;
mod upgrade_hyper;
#[cfg(all(feature = "ws", feature = "axum"))]
mod ws_axum;
#[cfg(feature = "ws")]
mod ws_chat_example;
#[cfg(feature = "ws")]
mod ws_clients;
#[cfg(feature = "ws")]
mod ws_sleep;
