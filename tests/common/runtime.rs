//! What every test server shares: the runtime it runs on, whose threads'
//! panics are counted ([`Panics`]), the services it takes, and a TCP
//! listener.

use std::cell::OnceCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};

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

thread_local! {
    /// The panics of the test server whose runtime this thread is of.
    static PANICS: OnceCell<Panics> = const { OnceCell::new() };
}

/// Panics on the threads of one test server's runtime: tokio catches a
/// task's panic, so a connection killed by one would otherwise pass
/// unnoticed when its client only sees a close. Counted per server, so that
/// a test that causes one on purpose takes it back, and another test's
/// server is not blamed.
#[derive(Clone, Default)]
pub(crate) struct Panics(Arc<AtomicUsize>);

impl Panics {
    /// Takes back the panics counted so far: how many.
    pub(crate) fn take(&self) -> usize {
        self.0.swap(0, Ordering::SeqCst)
    }

    /// Fails the test if a task of the server panicked.
    pub(crate) fn assert_none(&self) {
        let panics = self.0.load(Ordering::SeqCst);
        assert_eq!(
            panics, 0,
            "a task of the test server panicked (message above)"
        );
    }
}

/// The multi-threaded runtime a test server runs on, with `workers` worker
/// threads, and the panics on its threads.
pub(crate) fn server_runtime(workers: usize) -> (tokio::runtime::Runtime, Panics) {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = PANICS.try_with(|panics| {
                if let Some(Panics(count)) = panics.get() {
                    count.fetch_add(1, Ordering::SeqCst);
                }
            });
            previous(info);
        }));
    });
    let panics = Panics::default();
    let counted = panics.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("test-server")
        .on_thread_start(move || {
            PANICS.with(|panics| {
                let _ = panics.set(counted.clone());
            });
        })
        .enable_all()
        .build()
        .unwrap();
    (rt, panics)
}

/// A TCP listener on 127.0.0.1 (a free port), and its address.
pub(crate) async fn bind_tcp() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}
