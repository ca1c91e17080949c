//! What the keep-alive hello-world benches (`throughput`, `request_allocs`,
//! `idle_memory`) share: the handlers, the hyper-util baseline server and the response
//! framing the clients use. Included with
//! `#[path = "common/hello.rs"] mod hello;` (`"../common/hello.rs"` from
//! `benches/experiments/`).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

pub(crate) async fn hello_dormant(
    _req: Request<dormant::Body>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

pub(crate) async fn hello_hyper(
    _req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

/// The baseline: one hyper-util auto connection per accepted socket, until
/// `stop` resolves (`std::future::pending()`: for the whole run); counts
/// the connections it accepts in `accepted`.
pub(crate) async fn serve_hyper_util(
    listener: TcpListener,
    stop: impl Future<Output = ()>,
    accepted: Arc<AtomicUsize>,
) {
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    let mut stop = std::pin::pin!(stop);
    loop {
        let accept = tokio::select! {
            () = &mut stop => return,
            accept = listener.accept() => accept,
        };
        let Ok((stream, _)) = accept else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        accepted.fetch_add(1, Relaxed);
        let builder = builder.clone();
        tokio::spawn(async move {
            let _ = builder
                .serve_connection(TokioIo::new(stream), service_fn(hello_hyper))
                .await;
        });
    }
}

/// The length of the response at the start of `buf`, once all of it is
/// there (head plus `content-length` bytes).
pub(crate) fn complete_response(buf: &[u8]) -> Option<usize> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..head_end]).ok()?;
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    (buf.len() >= head_end + len).then_some(head_end + len)
}
