//! An axum application served by `dormant::axum` (feature `axum`) finds
//! what it expects of `axum::serve`: `ConnectInfo` of the listener's
//! address type and the request's `Deadlines` in its handlers, over every
//! transport, on connections that slept between requests; and
//! `dormant::axum::serve(listener, app)` serves and shuts down as
//! `axum::serve` does.

use std::future::IntoFuture;

use crate::common::hyper::send_http1;
use crate::common::ladder::ladder;
use crate::common::rungs::{DORMANT_AFTER, all_closed, client_runtime, sleep_until, woke};
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{AsyncStream, Transport, over_every_transport};
use axum::extract::ConnectInfo;
use axum::routing::get;
use dormant::Deadlines;
use dormant::Rung;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::time::timeout;

over_every_transport!(
    connect_info_and_deadlines_reach_axum_handlers_across_sleeps,
    connect_info_needs_the_peer_address,
);

/// `/peer` answers its `ConnectInfo` (axum's extractor: a 500 if it is
/// missing), `/deadlines` whether `Deadlines::of` found the request's
/// handle.
fn app<A: Clone + std::fmt::Debug + Send + Sync + 'static>() -> axum::Router {
    axum::Router::new()
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<A>| async move { format!("{peer:?}") }),
        )
        .route(
            "/deadlines",
            get(|req: Request<axum::body::Body>| async move {
                match Deadlines::of(&req) {
                    Some(_) => "some",
                    None => "none",
                }
            }),
        )
}

async fn client(io: Box<dyn AsyncStream>) -> SendRequest<Empty<Bytes>> {
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    send
}

/// `GET path`: its status and body.
async fn get_text(send: &mut SendRequest<Empty<Bytes>>, path: &str) -> (StatusCode, String) {
    let req = Request::get(path)
        .header(header::HOST, "localhost")
        .body(Empty::new())
        .unwrap();
    let res = send_http1(send, req).await;
    let status = res.status();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// The same peer, and a handle on the deadlines, on a new connection, and
/// after it slept (PARKED, then DORMANT: a woken connection looks its peer
/// up again).
fn connect_info_and_deadlines_reach_axum_handlers_across_sleeps<T: Transport>() {
    let mut builder = ladder(DORMANT_AFTER);
    builder.peer_addr(true);
    let srv = T::serve(&builder, dormant::axum::App::new(app::<T::ServerAddr>()));
    client_runtime().block_on(async {
        let mut send = client(T::connect_http1(&srv.addr).await).await;
        let (status, first) = get_text(&mut send, "/peer").await;
        assert_eq!(status, StatusCode::OK, "{first}");
        assert!(!first.is_empty());
        assert_eq!(get_text(&mut send, "/deadlines").await.1, "some");
        for rung in [Rung::Parked, Rung::Dormant] {
            sleep_until(&srv, rung, srv.stats());
            let before = srv.stats();
            assert_eq!(
                get_text(&mut send, "/peer").await,
                (StatusCode::OK, first.clone()),
                "from {rung:?}"
            );
            woke(&srv, rung, before);
            assert_eq!(get_text(&mut send, "/deadlines").await.1, "some");
        }
    });
    all_closed(&srv);
}

/// A server built without `peer_addr` gives axum no `ConnectInfo`: axum's
/// extractor answers 500, as with `axum::serve` without connect info.
fn connect_info_needs_the_peer_address<T: Transport>() {
    let srv = T::serve(
        &ladder(DORMANT_AFTER),
        dormant::axum::App::new(app::<T::ServerAddr>()),
    );
    client_runtime().block_on(async {
        let mut send = client(T::connect_http1(&srv.addr).await).await;
        let (status, body) = get_text(&mut send, "/peer").await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    });
    all_closed(&srv);
}

/// `dormant::axum::serve(listener, app)`, as `axum::serve` reads: the
/// client's own address as `ConnectInfo`, then a graceful shutdown that
/// ends the future.
#[test]
fn serve_reads_as_axum_serve() {
    client_runtime().block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(
            dormant::axum::serve(listener, app::<std::net::SocketAddr>())
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .into_future(),
        );
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let me = tcp.local_addr().unwrap();
        let mut send = client(Box::new(tcp)).await;
        assert_eq!(
            get_text(&mut send, "/peer").await,
            (StatusCode::OK, format!("{me:?}"))
        );
        drop(send);
        stop.send(()).unwrap();
        timeout(CLIENT_TIMEOUT, serving)
            .await
            .expect("serve did not end after shutdown")
            .expect("serve panicked")
            .expect("serve failed");
    });
}
