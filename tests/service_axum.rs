//! Services: an axum `Router` served unchanged through
//! `TowerToHyperService`, the peer address in request extensions, and an
//! axum handler's `Deadlines`.

use crate::common::timeout::CLIENT_TIMEOUT;

use crate::common::tcp::{fast_park, serve_with};

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Extension, Path};
use axum::routing::{get, post};
use dormant::Rung::Dormant;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::time::timeout;

fn text(body: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn axum_router_served_unchanged() {
    let app = axum::Router::new()
        .route(
            "/users/{id}",
            get(|Path(id): Path<String>| async move { format!("user {id}") }),
        )
        .route("/echo", post(|body: String| async move { body }))
        .route(
            "/peer",
            get(
                |Extension(dormant::PeerAddr(addr)): Extension<dormant::PeerAddr>| async move {
                    addr.to_string()
                },
            ),
        );
    let mut builder = fast_park();
    builder.peer_addr(true);
    let srv = serve_with(&builder, dormant::TowerToHyperService::new(app));
    let mut c = srv.connect();
    c.send(b"GET /users/42 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), text("user 42"));
    srv.wait_for("park", |s| s.parks == 1);

    c.send(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello axum!");
    assert_eq!(c.response(), text("hello axum!"));
    srv.wait_for("park", |s| s.parks == 2);

    c.send(b"GET /peer HTTP/1.1\r\nHost: x\r\n\r\n");
    let me = c.stream.local_addr().unwrap().to_string();
    assert_eq!(c.response(), text(&me));

    c.send(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(
        c.response(),
        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
    );
}

/// Answers with the request's `PeerAddr` extension, or `none`.
async fn peer(req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    let peer = match req.extensions().get::<dormant::PeerAddr>() {
        Some(dormant::PeerAddr(addr)) => addr.to_string(),
        None => "none".to_owned(),
    };
    Ok(Response::new(Full::new(Bytes::from(peer))))
}

/// What `peer` answers a client at `me`.
fn peer_response(me: &str) -> String {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{me}",
        me.len()
    )
}

#[test]
fn peer_addr_reaches_a_hyper_handler() {
    let mut builder = fast_park();
    builder.peer_addr(true);
    let srv = serve_with(&builder, service_fn(peer));
    for _ in 0..2 {
        let mut c = srv.connect();
        let me = c.stream.local_addr().unwrap().to_string();
        for _ in 0..2 {
            c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            assert_eq!(c.response(), peer_response(&me));
            // Also after the connection parked and woke.
            let parks = srv.stats().parks;
            srv.wait_for("park", |s| s.parks > parks);
        }
    }
}

#[test]
fn peer_addr_is_off_by_default() {
    let srv = serve_with(&fast_park(), service_fn(peer));
    let mut c = srv.connect();
    for _ in 0..2 {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            c.response(),
            "HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nnone"
        );
        let parks = srv.stats().parks;
        srv.wait_for("park", |s| s.parks > parks);
    }
}

/// A connection woken in the parking lot looks its peer address up again
/// (it is not kept while DORMANT).
#[test]
fn peer_addr_reaches_a_handler_after_dormancy() {
    let mut builder = dormant::Server::builder();
    builder
        .park_after(Duration::from_millis(2))
        .dormant_after(Duration::from_millis(10))
        .peer_addr(true);
    let srv = serve_with(&builder, service_fn(peer));
    let mut c = srv.connect();
    let me = c.stream.local_addr().unwrap().to_string();
    for round in 1..=2 {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response(), peer_response(&me));
        srv.wait_for("dormant", |s| {
            s.dormancies == round && s.connections[Dormant] == 1
        });
    }
    assert_eq!(srv.stats().lot_wakes, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn peer_addr_reaches_an_h2_handler() {
    let mut builder = fast_park();
    builder.peer_addr(true);
    let srv = serve_with(&builder, service_fn(peer));
    let stream = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    let me = stream.local_addr().unwrap().to_string();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let req = Request::get("http://x/")
        .body(Full::<Bytes>::default())
        .unwrap();
    let res = timeout(CLIENT_TIMEOUT, send.send_request(req))
        .await
        .expect("response timed out")
        .expect("h2 response");
    let body = timeout(CLIENT_TIMEOUT, res.into_body().collect())
        .await
        .expect("body timed out")
        .expect("h2 body")
        .to_bytes();
    assert_eq!(body, me);
}

/// An axum handler takes `Deadlines` from its extensions, where a step in
/// front of the router put it for `/events` (dormant's body, which leads
/// to the handle, is gone once axum has the request): its stream of 1.5 s
/// runs past a 300 ms `write_timeout` because it lifted it, and a route
/// that did not ask has no handle.
#[test]
fn an_axum_handler_lifts_its_write_deadline() {
    use dormant::Deadlines;
    use tower::ServiceBuilder;

    let events = |Extension(deadlines): Extension<Deadlines>| async move {
        deadlines.set_write_deadline(None);
        let events = futures_util::stream::unfold(0, |n| async move {
            if n == 15 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((Ok::<_, Infallible>(format!("data: {n}\n\n")), n + 1))
        });
        axum::body::Body::from_stream(events)
    };
    let other = |deadlines: Option<Extension<Deadlines>>| async move {
        if deadlines.is_some() { "some" } else { "none" }
    };
    let router = axum::Router::new()
        .route("/events", get(events))
        .route("/other", get(other));
    let app = ServiceBuilder::new()
        .map_request(|mut req: Request<dormant::Body>| {
            if req.uri().path() == "/events" {
                if let Some(deadlines) = Deadlines::of(&req) {
                    req.extensions_mut().insert(deadlines);
                }
            }
            req
        })
        .service(router);
    let mut builder = fast_park();
    builder.write_timeout(Duration::from_millis(300));
    let srv = serve_with(&builder, dormant::TowerToHyperService::new(app));
    let mut c = srv.connect();
    c.send(b"GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
    let res = c.response();
    assert!(res.starts_with("HTTP/1.1 200 OK\r\n"), "{res}");
    assert_eq!(res.matches("data: ").count(), 15, "{res}");
    assert_eq!(srv.stats().write_timeouts, 0);
    c.send(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), text("none"));
}

/// A service need only be `Clone + Send`, as hyper-util and axum take it:
/// tower's `BoxCloneService` (not `Sync`) around a router, and a
/// `service_fn` that counts in a `Cell`, serve across parks (a connection
/// serves a clone while ACTIVE: the count restarts after each park).
#[test]
fn services_that_are_not_sync_are_served() {
    use std::cell::Cell;
    use tower::util::BoxCloneService;

    let router = axum::Router::new().route("/", get(|| async { "boxed" }));
    let boxed: BoxCloneService<Request<dormant::Body>, axum::response::Response, Infallible> =
        BoxCloneService::new(router);
    let srv = serve_with(&fast_park(), dormant::TowerToHyperService::new(boxed));
    let mut c = srv.connect();
    for round in 1..=2 {
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(c.response(), text("boxed"));
        srv.wait_for("park", |s| s.parks == round);
    }

    let served = Cell::new(0u32);
    let counting = service_fn(move |_req: Request<dormant::Body>| {
        served.set(served.get() + 1);
        let body = served.get().to_string();
        async move { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body)))) }
    });
    let srv = serve_with(&fast_park(), counting);
    let mut c = srv.connect();
    let plain = |n: &str| format!("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n{n}");
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), plain("1"));
    assert_eq!(c.response(), plain("2"));
    srv.wait_for("park", |s| s.parks == 1);
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(c.response(), plain("1"));
}
