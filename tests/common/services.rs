//! The services the tests share.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::sync::Semaphore;

use super::runtime::Servable;

/// Answers `200` with a body describing the request: method, path, and the
/// request body it read (`read` = the body was read to its end). Generic over
/// the body so a plain hyper server can run the same handler.
pub(crate) async fn echo<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let text = match body {
        Ok(b) => format!("{method} {path} read={}", String::from_utf8_lossy(&b)),
        Err(e) => format!("{method} {path} error={e}"),
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// [`echo`] as a service of dormant's.
pub(crate) fn echo_service() -> impl Servable<Full<Bytes>> {
    service_fn(echo::<dormant::Body>)
}

/// Describes the request: method, path and query, body and trailers (what
/// the differential tests compare).
pub(crate) async fn describe<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let line = format!("{} {}", req.method(), req.uri());
    let text = match req.into_body().collect().await {
        Ok(c) => {
            let trailers = c.trailers().map(|t| format!("{t:?}")).unwrap_or_default();
            let body = c.to_bytes();
            format!(
                "{line} body={} trailers={trailers}",
                String::from_utf8_lossy(&body)
            )
        }
        Err(e) => format!("{line} error={e}"),
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// Answers `200` with the request's body byte for byte, or, for
/// `/bytes/N`, with `N` bytes of [`pattern`]; either way with the request's
/// `x-` headers copied into the response, so that a test checks header
/// blocks both ways. A request body that fails to arrive is a `400` with
/// the error (not a panic: a client's reset is not the server's failure).
pub(crate) async fn mirror(
    req: Request<dormant::Body>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = match parts.uri.path().strip_prefix("/bytes/") {
        Some(len) => pattern(len.parse().expect("/bytes/ takes a length"), 0),
        None => match body.collect().await {
            Ok(body) => body.to_bytes(),
            Err(e) => {
                let mut res = Response::new(Full::new(Bytes::from(e.to_string())));
                *res.status_mut() = http::StatusCode::BAD_REQUEST;
                return Ok(res);
            }
        },
    };
    let mut res = Response::new(Full::new(body));
    for (name, value) in &parts.headers {
        if name.as_str().starts_with("x-") {
            res.headers_mut().append(name, value.clone());
        }
    }
    Ok(res)
}

/// [`mirror`] as a service of dormant's.
pub(crate) fn mirror_service() -> impl Servable<Full<Bytes>> {
    service_fn(mirror)
}

/// `len` bytes in which a lost, repeated or reordered run shows: each byte
/// is a hash of its offset, of `len` and of `seed` (so that bodies of the
/// same length differ too).
pub(crate) fn pattern(len: usize, seed: u64) -> Bytes {
    let salt = ((len as u64) << 32) ^ seed.wrapping_mul(0xff51_afd7_ed55_8ccd);
    (0..len)
        .map(|i| ((i as u64 ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
        .collect()
}

/// `/slow` waits for a permit of `gate` (the test decides when it answers,
/// instead of a sleep); anything else answers `hello`.
pub(crate) fn gated(gate: Arc<Semaphore>, entered: Arc<AtomicUsize>) -> impl Servable<Full<Bytes>> {
    service_fn(move |req: Request<dormant::Body>| {
        let gate = gate.clone();
        let entered = entered.clone();
        async move {
            if req.uri().path() == "/slow" {
                entered.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await.unwrap().forget();
                return Ok(Response::new(Full::new(Bytes::from_static(b"slow"))));
            }
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
        }
    })
}
