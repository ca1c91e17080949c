//! Servers on TCP alone, for the tests of what is the same over every
//! transport (HTTP semantics, services).

use std::net::SocketAddr;
use std::time::Duration;

use super::runtime::{ResponseBody, Servable, bind_tcp};
use super::servers::{Hooks, Serve, serve_on};

/// Starts `service` on a dormant server built by `builder`, on its own
/// runtime thread (two workers), listening on 127.0.0.1 (a free port).
pub(crate) fn serve_with<B: ResponseBody>(
    builder: &dormant::Builder,
    service: impl Servable<B>,
) -> Serve<SocketAddr> {
    serve_on(builder, service, 2, (), bind_tcp, Hooks::default())
}

/// A builder that parks quickly, so tests need short pauses only.
pub(crate) fn fast_park() -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(5));
    b
}
