//! An HTTP/2 client's request and its connection's end, bounded so that a
//! hang fails.

use http::{Request, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http2::SendRequest;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::timeout::CLIENT_TIMEOUT;

/// Sends `POST path` with `body` on an HTTP/2 client connection; returns
/// the status, version and body of the answer.
pub(crate) async fn post(
    send: &mut SendRequest<Full<Bytes>>,
    path: &str,
    body: &'static str,
) -> (StatusCode, Version, Bytes) {
    let req = Request::post(format!("http://localhost{path}"))
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .unwrap();
    let res = timeout(CLIENT_TIMEOUT, send.send_request(req))
        .await
        .expect("response timed out")
        .expect("h2 response");
    let (parts, body) = res.into_parts();
    let body = timeout(CLIENT_TIMEOUT, body.collect())
        .await
        .expect("body timed out")
        .expect("h2 body")
        .to_bytes();
    (parts.status, parts.version, body)
}

/// Ends hyper's client connection as a client does when done with it:
/// drops `client` (its last `SendRequest`: a GOAWAY goes out), and waits
/// for the connection's task `conn` to end without an error.
pub(crate) async fn close<C>(client: C, conn: JoinHandle<hyper::Result<()>>) {
    drop(client);
    timeout(CLIENT_TIMEOUT, conn)
        .await
        .expect("the client connection did not end")
        .unwrap()
        .expect("the client connection ended in an error");
}
