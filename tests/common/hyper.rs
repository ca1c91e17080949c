//! The reference: plain hyper (no dormant), to compare against. The same
//! handler and the same bytes in, over the same transport; what comes out
//! must match. HTTP/1 by default; HTTP/2 (prior knowledge, or over TLS
//! with ALPN `h2`) with [`Protocol::Http2`].

use std::any::Any;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::client::{Client, Endpoint};
use super::runtime::{Panics, ResponseBody, bind_tcp, server_runtime};
use super::timeout::CLIENT_TIMEOUT;

/// Sends `req` on hyper's HTTP/1 client connection `send` once it is
/// ready: the response, within [`CLIENT_TIMEOUT`].
#[cfg_attr(
    not(feature = "axum"),
    allow(
        dead_code,
        reason = "only the axum tests send with hyper's HTTP/1 client"
    )
)]
pub(crate) async fn send_http1<B: http_body::Body + 'static>(
    send: &mut hyper::client::conn::http1::SendRequest<B>,
    req: Request<B>,
) -> Response<Incoming> {
    send.ready().await.expect("the connection closed");
    tokio::time::timeout(CLIENT_TIMEOUT, send.send_request(req))
        .await
        .expect("no response")
        .expect("the response")
}

/// Which of hyper's servers serves a connection, with its defaults:
/// `http1::Builder` or `http2::Builder` (whose defaults are dormant's).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Protocol {
    Http1,
    Http2,
    /// HTTP/2 with these initial stream and connection windows (hyper's
    /// `initial_stream_window_size` and `initial_connection_window_size`).
    Http2Windows(u32, u32),
}

/// A plain hyper HTTP/1 server on a runtime thread of its own; stops on
/// drop. `A` is where it listens.
pub(crate) struct PlainHyper<A = SocketAddr> {
    pub(crate) addr: A,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    panics: Panics,
    /// What must outlive the server (a Unix socket's directory).
    _keep: Box<dyn Any + Send + Sync>,
}

impl<A: Endpoint> PlainHyper<A> {
    pub(crate) fn connect(&self) -> Client<A::Stream> {
        self.addr.connect()
    }
}

impl<A> Drop for PlainHyper<A> {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            if !std::thread::panicking() {
                thread.join().expect("plain hyper thread panicked");
                self.panics.assert_none();
            }
        }
    }
}

/// A listener of the reference server: TCP or a Unix socket.
pub(crate) trait Accept: Send + 'static {
    type Stream: Send + 'static;

    fn accept(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;

    async fn accept(&self) -> io::Result<tokio::net::TcpStream> {
        Ok(tokio::net::TcpListener::accept(self).await?.0)
    }
}

impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;

    async fn accept(&self) -> io::Result<tokio::net::UnixStream> {
        Ok(tokio::net::UnixListener::accept(self).await?.0)
    }
}

/// Serves `handler` with `hyper::server::conn::http1` (default settings)
/// over tokio on 127.0.0.1, on its own runtime thread.
pub(crate) fn serve_plain_hyper<F, Fut, B>(handler: F) -> PlainHyper
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: ResponseBody,
{
    serve_hyper(
        (),
        Protocol::Http1,
        bind_tcp,
        |tcp| async move { Some(tcp) },
        handler,
    )
}

/// Serves `handler` with hyper's `protocol` server on the listener `bind`
/// makes (inside the server's runtime; it returns the address clients
/// connect to too), over the streams `wrap` makes of each accepted
/// connection (a TLS acceptor, say; `None` drops it). `keep` lives as long
/// as the server.
pub(crate) fn serve_hyper<L, A, Bind, BindFut, Wrap, WrapFut, IO, F, Fut, B>(
    keep: impl Any + Send + Sync,
    protocol: Protocol,
    bind: Bind,
    wrap: Wrap,
    handler: F,
) -> PlainHyper<A>
where
    L: Accept,
    A: Send + 'static,
    Bind: FnOnce() -> BindFut + Send + 'static,
    BindFut: Future<Output = (L, A)>,
    Wrap: Fn(L::Stream) -> WrapFut + Clone + Send + 'static,
    WrapFut: Future<Output = Option<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: ResponseBody,
{
    let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let (rt, panics) = server_runtime(2);
        rt.block_on(async move {
            let (listener, addr) = bind().await;
            addr_tx
                .send((addr, panics))
                .unwrap_or_else(|_| panic!("the test went away"));
            loop {
                let stream = tokio::select! {
                    _ = &mut rx => break,
                    accepted = listener.accept() => accepted.unwrap(),
                };
                let (wrap, handler) = (wrap.clone(), handler.clone());
                tokio::spawn(async move {
                    let Some(io) = wrap(stream).await else {
                        return;
                    };
                    let (io, service) = (TokioIo::new(io), service_fn(handler));
                    let _ = match protocol {
                        Protocol::Http1 => {
                            hyper::server::conn::http1::Builder::new()
                                .serve_connection(io, service)
                                .await
                        }
                        Protocol::Http2 => {
                            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                .timer(TokioTimer::new())
                                .serve_connection(io, service)
                                .await
                        }
                        Protocol::Http2Windows(stream, connection) => {
                            hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                                .timer(TokioTimer::new())
                                .initial_stream_window_size(stream)
                                .initial_connection_window_size(connection)
                                .serve_connection(io, service)
                                .await
                        }
                    };
                });
            }
        });
    });
    let (addr, panics) = addr_rx.recv().expect("plain hyper started");
    PlainHyper {
        addr,
        shutdown: Some(tx),
        thread: Some(thread),
        panics,
        _keep: Box::new(keep),
    }
}
