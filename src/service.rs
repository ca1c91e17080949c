//! The service hyper runs: the user's service plus the bookkeeping the
//! connection driver needs to know when hyper sits between messages.

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::Service;
use pin_project_lite::pin_project;

use crate::body::Body;
use crate::conn::{InFlight, Tracker};
use crate::upgrade::Pending;

/// Boxed error, as hyper takes them.
pub(crate) type BoxError = Box<dyn StdError + Send + Sync>;

/// What dormant needs of a user's service, spelled once for the crate's
/// internals (the public `Server::serve` states the same bounds in full).
pub(crate) trait HttpService<B>:
    Service<Request<Body>, Response = Response<B>, Future: Send + 'static, Error: Into<BoxError>>
    + Send
    + Sync
    + 'static
{
}

impl<S, B> HttpService<B> for S where
    S: Service<
            Request<Body>,
            Response = Response<B>,
            Future: Send + 'static,
            Error: Into<BoxError>,
        > + Send
        + Sync
        + 'static
{
}

/// What dormant needs of a response body.
pub(crate) trait ResBody:
    http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static
{
}

impl<B> ResBody for B where B: http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static {}

/// The peer's address, in every request's extensions when
/// [`Builder::peer_addr`](crate::Builder::peer_addr) is on (it is off by
/// default: an extension costs three allocations per request).
///
/// ```no_run
/// # use dormant::PeerAddr;
/// # fn handler(req: &http::Request<dormant::Body>) {
/// if let Some(PeerAddr(addr)) = req.extensions().get::<PeerAddr>() {
///     println!("request from {addr}");
/// }
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// The user's service as hyper sees it on one connection.
pub(crate) struct ConnService<S> {
    pub(crate) inner: Arc<S>,
    /// `Some` when the builder turned the `PeerAddr` extension on.
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) tracker: Arc<Tracker>,
}

impl<S, B> Service<Request<Incoming>> for ConnService<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
{
    type Response = Response<TrackedBody<B>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        let span = tracing::trace_span!("request", method = %req.method(), uri = %req.uri());
        // Kept only when enabled: a disabled span still costs its moves,
        // entries and drop on every request (`benches/instructions.sh`).
        let span = (!span.is_disabled()).then_some(span);
        let in_flight = self.tracker.request_started();
        let upgrade = Pending::check(&mut req, &self.tracker);
        if let Some(peer) = self.peer {
            req.extensions_mut().insert(PeerAddr(peer));
        }
        let req = req.map(|incoming| Body::new(incoming, Some(&self.tracker)));
        let inner = match &span {
            Some(span) => span.in_scope(|| self.inner.call(req)),
            None => self.inner.call(req),
        };
        ResponseFuture {
            inner,
            in_flight: Some(in_flight),
            upgrade,
            span,
        }
    }
}

pin_project! {
    /// The user's response future; hands the in-flight mark on to the
    /// response body.
    pub(crate) struct ResponseFuture<F> {
        #[pin]
        inner: F,
        in_flight: Option<InFlight>,
        // `Some` for an upgrade candidate only.
        upgrade: Option<Pending>,
        span: Option<tracing::Span>,
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<TrackedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _enter = this.span.as_ref().map(tracing::Span::enter);
        let res = std::task::ready!(this.inner.poll(cx));
        if let (Some(upgrade), Ok(res)) = (this.upgrade.take(), &res) {
            upgrade.respond(res.status());
        }
        let mut in_flight = this.in_flight.take();
        if let Some(in_flight) = &mut in_flight {
            in_flight.responded();
        }
        Poll::Ready(res.map(|res| {
            res.map(|inner| TrackedBody {
                inner,
                _in_flight: in_flight,
            })
        }))
    }
}

pin_project! {
    /// A response body that keeps its request counted as in flight until
    /// hyper has written it to the end and dropped it.
    pub(crate) struct TrackedBody<B> {
        #[pin]
        inner: B,
        _in_flight: Option<InFlight>,
    }
}

impl<B: http_body::Body> http_body::Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
