//! Services: an axum `Router` served unchanged through
//! `TowerToHyperService`, and the peer address in request extensions.

mod common;
use common::*;

use std::convert::Infallible;

use axum::extract::{Extension, Path};
use axum::routing::{get, post};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;

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
            assert_eq!(
                c.response(),
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{me}",
                    me.len()
                )
            );
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
