//! With a subscriber that enables them, a handler's events sit in the
//! connection's `conn` span and the request's `request` span (dormant
//! skips both when they are disabled, so this pins that they still exist
//! when they are not), also on a connection woken after a park; behind a
//! PROXY header (feature `proxy-protocol`), the span's peer is the
//! header's client. The subscriber is global: each test runs alone in a
//! process of its own ([`in_own_process`]), so that no other test logs
//! through it.

use crate::common::process::in_own_process;
#[cfg(feature = "proxy-protocol")]
use crate::common::runtime::bind_tcp;
use crate::common::servers::Serve;
#[cfg(feature = "proxy-protocol")]
use crate::common::servers::{Hooks, serve_on};
use crate::common::tcp::{fast_park, serve_with};

use std::convert::Infallible;
use std::io::Write;
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// What the subscriber of this process writes; installed once.
    fn installed() -> &'static Captured {
        static CAPTURED: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
        CAPTURED.get_or_init(|| {
            let captured = Captured::default();
            let writer = captured.clone();
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .init();
            captured
        })
    }

    fn lines_with(&self, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|line| line.contains(needle))
            .map(str::to_owned)
            .collect()
    }
}

/// Logs `handling {path}` from the handler, and answers `ok`.
async fn handle(req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    tracing::info!("handling {}", req.uri().path());
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

/// On one connection to `srv`, `GET {root}/first` (after `header`, in the
/// same write), a park, then `GET {root}/woken`: the handler's event of
/// each sits in `conn{peer=…}:request{…}`, `peer` being the header's client
/// if given, else the connection's own.
fn events_across_a_park(
    srv: &Serve,
    captured: &Captured,
    header: &str,
    root: &str,
    peer: Option<&str>,
) {
    let mut c = srv.connect();
    let peer = peer.map_or_else(|| c.stream.local_addr().unwrap().to_string(), str::to_owned);
    let (first, woken) = (format!("{root}/first"), format!("{root}/woken"));
    c.send(format!("{header}GET {first} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    assert!(c.response().ends_with("\r\n\r\nok"));
    srv.wait_for("park", |s| s.parks >= 1);
    c.send(format!("GET {woken} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    assert!(c.response().ends_with("\r\n\r\nok"));

    for path in [first, woken] {
        let lines = captured.lines_with(&format!("handling {path}"));
        assert_eq!(lines.len(), 1, "{lines:?}");
        let expected = format!("conn{{peer={peer}}}:request{{method=GET uri={path}}}:");
        assert!(
            lines[0].contains(&expected),
            "{expected} not in {:?}",
            lines[0]
        );
    }
}

#[test]
fn handler_events_sit_in_the_conn_and_request_spans() {
    if !in_own_process() {
        return;
    }
    let captured = Captured::installed();
    let srv = serve_with(&fast_park(), service_fn(handle));
    events_across_a_park(&srv, captured, "", "", None);
}

#[cfg(feature = "proxy-protocol")]
#[test]
fn the_conn_span_of_a_proxied_connection_shows_the_headers_client() {
    if !in_own_process() {
        return;
    }
    let captured = Captured::installed();
    let srv = serve_on(
        &fast_park(),
        service_fn(handle),
        2,
        (),
        || async {
            let (tcp, addr) = bind_tcp().await;
            (dormant::proxy::ProxyProtocol::new(tcp), addr)
        },
        Hooks::default(),
    );
    events_across_a_park(
        &srv,
        captured,
        "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n",
        "/proxied",
        Some("192.168.0.1:56324"),
    );
}
