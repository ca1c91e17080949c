//! Plain hyper over each transport ([`Reference`]): the reference that the
//! differential tests hold dormant to, with the same handler on the same
//! transport (hyper over a TCP listener, over a Unix socket, over
//! tokio-rustls).

use std::convert::Infallible;
use std::future::Future;

use http::{Request, Response};
use hyper::body::Incoming;

use super::hyper::{PlainHyper, Protocol, serve_hyper};
use super::runtime::{ResponseBody, bind_tcp};
use super::temp_dir::TempDir;
use super::transport::{Tcp, Transport, Unix};

/// A transport with a reference server: plain hyper over it.
pub(crate) trait Reference: Transport {
    /// Serves `handler` with hyper's `protocol` server over this transport.
    fn serve_reference<F, Fut, B>(protocol: Protocol, handler: F) -> PlainHyper<Self::Addr>
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
        B: ResponseBody;
}

impl Reference for Tcp {
    fn serve_reference<F, Fut, B>(protocol: Protocol, handler: F) -> PlainHyper
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
        B: ResponseBody,
    {
        let plain = |tcp: tokio::net::TcpStream| async move {
            tcp.set_nodelay(true).unwrap();
            Some(tcp)
        };
        serve_hyper((), protocol, bind_tcp, plain, handler)
    }
}

impl Reference for Unix {
    fn serve_reference<F, Fut, B>(protocol: Protocol, handler: F) -> PlainHyper<std::path::PathBuf>
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
        B: ResponseBody,
    {
        let dir = TempDir::new();
        let path = dir.path.join("hyper.sock");
        serve_hyper(
            dir,
            protocol,
            move || async move {
                let listener = tokio::net::UnixListener::bind(&path).unwrap();
                (listener, path)
            },
            |unix| async move { Some(unix) },
            handler,
        )
    }
}

#[cfg(any(feature = "tls", feature = "tls-ring"))]
impl Reference for super::transport::Tls {
    /// hyper over tokio-rustls's `TlsAcceptor`, with dormant's TLS
    /// configuration (ALPN `h2` and `http/1.1`).
    fn serve_reference<F, Fut, B>(
        protocol: Protocol,
        handler: F,
    ) -> PlainHyper<super::transport::tls::TlsAddr>
    where
        F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
        B: ResponseBody,
    {
        use super::tls::{Cert, tls13};
        use super::transport::tls::TlsAddr;

        let cert = Cert::new();
        let acceptor = tokio_rustls::TlsAcceptor::from(cert.config().get());
        let (config, ca) = (tls13(&cert), cert.cert.clone());
        serve_hyper(
            cert,
            protocol,
            || async move {
                let (listener, addr) = bind_tcp().await;
                (listener, TlsAddr { addr, config, ca })
            },
            move |tcp| {
                let acceptor = acceptor.clone();
                async move { acceptor.accept(tcp).await.ok() }
            },
            handler,
        )
    }
}
