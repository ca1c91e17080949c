//! The hand-off: [`on`] and its future, [`OnUpgrade`], which resolves to
//! the connection's [`Parts`] once the response that switched protocols was
//! written; and [`HandOff`], the request extension through which the
//! driver sends them.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Version};
use tokio::sync::oneshot;

use super::lot::Lot;
use super::upgraded::Upgraded;
use crate::error::Error;
use crate::shutdown::Shutdown;
use crate::transport::Stream;

/// What the driver sends to the handler's [`OnUpgrade`].
pub(crate) type HandOffResult = Result<Parts, Error>;

/// Starts an upgrade of the connection that carries `req`: the returned
/// future resolves, once the handler's `101 Switching Protocols` response
/// (or a 2xx response to `CONNECT`) has been written, to the raw
/// connection.
///
/// Call it in the handler, then answer; await the future elsewhere (a
/// spawned task), since it resolves only after the response was sent:
///
/// ```no_run
/// use std::convert::Infallible;
/// use http::{Request, Response, StatusCode};
/// use http_body_util::Empty;
/// use hyper::body::Bytes;
///
/// async fn handle(mut req: Request<dormant::Body>) -> Result<Response<Empty<Bytes>>, Infallible> {
///     let mut res = Response::new(Empty::new());
///     let Ok(upgrade) = dormant::upgrade::on(&mut req) else {
///         *res.status_mut() = StatusCode::UPGRADE_REQUIRED;
///         return Ok(res);
///     };
///     tokio::spawn(async move {
///         if let Ok(parts) = upgrade.await {
///             let stream = dormant::upgrade::Upgraded::from(parts);
///             // … speak the new protocol on `stream` …
/// #           drop(stream);
///         }
///     });
///     *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
///     res.headers_mut().insert("connection", "upgrade".parse().unwrap());
///     res.headers_mut().insert("upgrade", "echo".parse().unwrap());
///     Ok(res)
/// }
/// ```
///
/// Upgrade requests are HTTP/1.1 requests with `Connection: upgrade` and an
/// `Upgrade` header, and `CONNECT` requests. For any other request, for
/// requests over HTTP/2, and when `on` was already called for this request,
/// `on` fails at once ([`Error::is_unsupported`]), so a handler knows before
/// it answers. The future fails with
///
/// - [`Error::is_declined`] if the handler answers with another status: the
///   connection then goes on serving HTTP;
/// - [`Error::is_closed`] if the connection ends before the hand-off.
///
/// If the future is dropped before the hand-off (or neither `on` nor
/// hyper's `hyper::upgrade::on` is called) and the handler answers 101
/// anyway, the connection is closed after the response: nobody is left to
/// speak the new protocol.
///
/// hyper's own `hyper::upgrade::on` works too (see the [module
/// docs](super)); a handler that calls both gets the connection through
/// this one.
pub fn on<B>(req: &mut Request<B>) -> Result<OnUpgrade, Error> {
    let version = req.version();
    on_extensions(req.extensions_mut(), version)
}

/// [`on`] for a request in parts.
pub(crate) fn on_extensions(
    extensions: &mut http::Extensions,
    version: Version,
) -> Result<OnUpgrade, Error> {
    let handle = extensions.remove::<HandOff>();
    match handle.and_then(|h| h.take()) {
        Some(rx) => Ok(OnUpgrade { rx }),
        None if version == Version::HTTP_2 => Err(Error::unsupported(
            "upgrades are not supported on HTTP/2 connections",
        )),
        None => Err(Error::unsupported(
            "not an HTTP/1.1 upgrade request (`Connection: upgrade` with an `Upgrade` header, \
             or CONNECT), or `on` was already called for it",
        )),
    }
}

/// The future of [`on`]: the upgraded connection, once the response that
/// switched protocols has been written.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct OnUpgrade {
    rx: oneshot::Receiver<HandOffResult>,
}

impl Future for OnUpgrade {
    type Output = Result<Parts, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|res| res.unwrap_or_else(|_| Err(Error::closed())))
    }
}

/// An upgraded connection, as handed off by the server.
///
/// The server keeps nothing of the connection: these parts are all there
/// is. [`Upgraded::from`] wraps the stream and the leftover bytes in one
/// `AsyncRead + AsyncWrite`.
#[derive(Debug)]
#[non_exhaustive]
pub struct Parts {
    /// The connection's socket, of whatever transport the listener yields.
    pub stream: Stream,
    /// Bytes the client sent after its upgrade request, which the server
    /// had already read: the first bytes of the new protocol. A copy, so no
    /// server buffer stays alive for them; often empty.
    pub read_buf: Bytes,
    /// The parking lot, where an idle upgraded stream can sleep.
    pub lot: Lot,
    /// Tells when the server's graceful shutdown begins.
    pub shutdown: Shutdown,
}

impl Parts {
    pub(crate) fn new(stream: Stream, read_buf: Bytes, lot: Lot, shutdown: Shutdown) -> Self {
        Parts {
            stream,
            read_buf,
            lot,
            shutdown,
        }
    }
}

impl From<Parts> for Upgraded {
    fn from(parts: Parts) -> Self {
        Upgraded::new(parts.stream, parts.read_buf)
    }
}

/// The request extension that [`on`] turns into its future; only upgrade
/// candidates carry it. Cloneable because extensions must be; the first
/// `on` takes the receiver.
#[derive(Clone)]
pub(crate) struct HandOff(Arc<Mutex<Option<oneshot::Receiver<HandOffResult>>>>);

impl HandOff {
    pub(crate) fn new(rx: oneshot::Receiver<HandOffResult>) -> Self {
        HandOff(Arc::new(Mutex::new(Some(rx))))
    }

    fn take(&self) -> Option<oneshot::Receiver<HandOffResult>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Whether [`on`] took it.
    pub(crate) fn is_taken(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
}
