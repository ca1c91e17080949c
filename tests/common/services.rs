//! The services the tests share.

use std::convert::Infallible;

use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;

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
#[allow(
    dead_code,
    reason = "the binaries whose handlers call `echo` themselves do not serve it alone"
)]
pub(crate) fn echo_service() -> impl Servable<Full<Bytes>> + Clone {
    service_fn(echo::<dormant::Body>)
}
