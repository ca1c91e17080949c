//! What every test server shares: the runtime it runs on, whose threads'
//! panics are counted (tokio catches a task's panic, so a connection killed
//! by one would otherwise pass unnoticed when its client only sees a
//! close), the services it takes, and a TCP listener.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{Request, Response};
use hyper::service::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A service as `dormant::Server::serve` takes it, answering with `B`.
pub(crate) trait Servable<B>:
    Service<
        Request<dormant::Body>,
        Response = Response<B>,
        Future: Send + 'static,
        Error: Into<BoxError>,
    > + Clone
    + Send
    + 'static
{
}

impl<S: Clone + Send + 'static, B> Servable<B> for S where
    S: Service<
            Request<dormant::Body>,
            Response = Response<B>,
            Future: Send + 'static,
            Error: Into<BoxError>,
        >
{
}

/// A response body as `dormant::Server::serve` takes it.
pub(crate) trait ResponseBody:
    http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static
{
}

impl<B> ResponseBody for B where
    B: http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static
{
}

/// The name of a test server's runtime threads.
const SERVER_THREAD: &str = "test-server";

/// Panics on test servers' threads so far, in this test binary.
pub(crate) static SERVER_PANICS: AtomicUsize = AtomicUsize::new(0);

/// Fails the test if a task of any test server in this binary panicked:
/// tokio catches a task's panic, so a connection killed by one would
/// otherwise pass unnoticed when its client only sees a close.
pub(crate) fn assert_no_server_panic() {
    let panics = SERVER_PANICS.load(Ordering::SeqCst);
    assert_eq!(panics, 0, "a test server's task panicked (message above)");
}

/// The multi-threaded runtime a test server runs on, with `workers` worker
/// threads. Panics on its threads are counted for
/// [`assert_no_server_panic`].
pub(crate) fn server_runtime(workers: usize) -> tokio::runtime::Runtime {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if std::thread::current().name() == Some(SERVER_THREAD) {
                SERVER_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(SERVER_THREAD)
        .enable_all()
        .build()
        .unwrap()
}

/// A TCP listener on 127.0.0.1 (a free port), and its address.
#[allow(dead_code, reason = "the Unix socket tests listen on no TCP port")]
pub(crate) async fn bind_tcp() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}
