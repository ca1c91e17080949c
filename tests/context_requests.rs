//! The context map over real connections: values stay with their request.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::client::Endpoint;
use crate::common::runtime::Servable;

use crate::common::tcp::{fast_park, serve_with};
use dormant::context::{ContextExt, Key};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;

static SEEN: Key<String> = Key::new();
static TRACKED: Key<DropCount> = Key::new();
/// A value without drop glue: a clear hides it rather than dropping it.
static PATH_LEN: Key<u64> = Key::new();
/// A value well over 16 bytes.
static WIDE: Key<[u64; 8]> = Key::new();

struct DropCount(Arc<AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Reports what the request's context held on arrival (must be nothing),
/// then stores the path, a drop counter, a plain `u64` and a 64-byte array.
fn service(drops: Arc<AtomicUsize>) -> impl Servable<Full<Bytes>> {
    service_fn(move |mut req: Request<dormant::Body>| {
        let before = match req.context() {
            Some(c) if !c.is_empty() => format!(
                "{:?} {:?} {:?}",
                c.get(&SEEN),
                c.get(&PATH_LEN),
                c.get(&WIDE)
            ),
            _ => "nothing".to_owned(),
        };
        let path = req.uri().path().to_owned();
        let ctx = req.context_mut();
        ctx.insert(&SEEN, path.clone());
        ctx.insert(&TRACKED, DropCount(drops.clone()));
        ctx.insert(&PATH_LEN, path.len() as u64);
        ctx.insert(&WIDE, [path.len() as u64; 8]);
        let now = ctx.get(&SEEN).cloned().unwrap_or_default();
        async move {
            drop(req);
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(format!(
                "{before} then {now}"
            )))))
        }
    })
}

#[test]
fn values_stay_with_their_request_and_drop_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let srv = serve_with(&fast_park(), service(drops.clone()));
    let mut c = srv.connect();
    for (i, path) in ["/a", "/b", "/c"].iter().enumerate() {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
        let body = format!("nothing then {path}");
        assert_eq!(
            c.response(),
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        );
        assert_eq!(
            drops.load(Ordering::SeqCst),
            i + 1,
            "dropped exactly once, at request end"
        );
        if i == 1 {
            srv.wait_for("park", |s| s.parks >= 1);
        }
    }
}

#[test]
fn many_concurrent_connections_keep_their_own_values() {
    let drops = Arc::new(AtomicUsize::new(0));
    let srv = serve_with(&fast_park(), service(drops.clone()));
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let addr = srv.addr;
            std::thread::spawn(move || {
                let mut c = addr.connect();
                for i in 0..50 {
                    let path = format!("/{t}/{i}");
                    // Pipelined pairs: two requests in flight on one connection.
                    c.send(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\nGET {path}/2 HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
                    for p in [path.clone(), format!("{path}/2")] {
                        let body = format!("nothing then {p}");
                        assert_eq!(
                            c.response(),
                            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len())
                        );
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("exact responses");
    }
    assert_eq!(drops.load(Ordering::SeqCst), 16 * 50 * 2);
}
