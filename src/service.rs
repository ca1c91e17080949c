//! The service hyper runs: the user's service plus the bookkeeping the
//! connection driver needs to know when hyper sits between messages.

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use http::header::{CONNECTION, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::Service;
use pin_project_lite::pin_project;
use tokio::sync::oneshot;

use crate::body::Body;
use crate::error::Error;
use crate::track::{AcceptedUpgrade, InFlight, Tracker};
use crate::transport::Connected;
use crate::upgrade::{HandOff, HandOffResult};

/// Boxed error, as hyper takes them.
pub(crate) type BoxError = Box<dyn StdError + Send + Sync>;

/// What a service needs to be served by dormant
/// ([`Server::serve`](crate::Server::serve)), spelled once: a hyper
/// [`Service`] of requests with a [`Body`](crate::Body), answering with
/// responses whose body is `B` (a [`ResBody`]), `Clone + Send` as
/// hyper-util's and axum's servers take it, its futures `Send`, its error
/// one hyper can box.
///
/// Implemented for every such service: you never implement it, only
/// meet its bounds. (hyper's own `HttpService` is named for its request
/// body; this one's `B` is the response's, since dormant's requests have
/// one body type.)
pub trait HttpService<B>:
    Service<Request<Body>, Response = Response<B>, Future: Send + 'static, Error: Into<BoxError>>
    + Clone
    + Send
    + 'static
{
}

impl<S, B> HttpService<B> for S where
    S: Service<
            Request<Body>,
            Response = Response<B>,
            Future: Send + 'static,
            Error: Into<BoxError>,
        > + Clone
        + Send
        + 'static
{
}

/// The user's service, shared by a `serve` call's connections. A service
/// need only be `Clone + Send`, as hyper-util's and axum's servers take it
/// (a `tower::util::BoxCloneService` is not `Sync`): each ACTIVE phase of
/// a connection serves a clone of its own, taken under the lock (a clone
/// of an axum `Router` or of a `service_fn` is a reference count).
pub(crate) struct SharedService<S>(Mutex<S>);

impl<S: Clone> SharedService<S> {
    pub(crate) fn new(service: S) -> Self {
        SharedService(Mutex::new(service))
    }

    /// A clone of the service for one connection's phase.
    pub(crate) fn get(&self) -> S {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What dormant needs of a response body, spelled once: an
/// [`http_body::Body`] that is `Send + 'static`, with `Send` data and an
/// error hyper can box.
///
/// Implemented for every such body: you never implement it, only meet its
/// bounds.
pub trait ResBody: http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static {}

impl<B> ResBody for B where B: http_body::Body<Data: Send, Error: Into<BoxError>> + Send + 'static {}

/// The peer's address, in every request's extensions when
/// [`Builder::peer_addr`](crate::Builder::peer_addr) is on (it is off by
/// default: an extension costs three allocations per request).
///
/// Its type is the listener's address type: `PeerAddr` (that is,
/// `PeerAddr<std::net::SocketAddr>`) on TCP,
/// `PeerAddr<tokio::net::unix::SocketAddr>` on a Unix socket, whose peer
/// has a path or, usually, is unnamed.
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
pub struct PeerAddr<A = SocketAddr>(pub A);

/// The user's service as hyper sees it on one connection.
pub(crate) struct ConnService<S, A> {
    pub(crate) inner: S,
    /// `Some` when the builder turned the `PeerAddr` extension on.
    pub(crate) peer: Option<A>,
    /// `Some` when the builder turned the `TlsInfo` extension on.
    #[cfg(feature = "tls-no-provider")]
    pub(crate) tls: Option<crate::transport::TlsInfo>,
    pub(crate) tracker: Arc<Tracker>,
    /// How many requests the connection may still start in this phase
    /// (`Builder::max_requests_per_connection`); `None` without a limit.
    pub(crate) requests_left: Option<u32>,
}

impl<S, A> ConnService<S, A> {
    /// The service of one ACTIVE phase of a connection whose transport
    /// settled `connected`; `peer` is `Some` when the builder turned the
    /// `PeerAddr` extension on.
    pub(crate) fn new(
        inner: S,
        peer: Option<A>,
        connected: Connected<A>,
        tracker: Arc<Tracker>,
        requests_left: Option<u32>,
    ) -> Self {
        #[cfg(not(feature = "tls-no-provider"))]
        let _ = connected;
        ConnService {
            inner,
            peer,
            #[cfg(feature = "tls-no-provider")]
            tls: connected.tls_info,
            tracker,
            requests_left,
        }
    }
}

impl<S, B, A> Service<Request<Incoming>> for ConnService<S, A>
where
    S: Service<Request<Body>, Response = Response<B>, Error: Into<BoxError>>,
    A: Clone + Send + Sync + 'static,
{
    type Response = Response<TrackedBody<B>>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        let span = tracing::trace_span!("request", method = %req.method(), uri = %req.uri());
        // Kept only when enabled: a disabled span still costs its moves,
        // entries and drop on every request (BENCHMARKS.md, "Instructions
        // per request").
        let span = (!span.is_disabled()).then_some(span);
        let (in_flight, number) = self.tracker.request_started();
        let mut last = false;
        if let Some(left) = self.requests_left {
            if number > u64::from(left) {
                // HTTP/2 only: a stream the client opened before it saw the
                // GOAWAY the limit sent. Refused, hyper resets it with
                // REFUSED_STREAM, which tells the client it was not
                // processed and may be retried (RFC 9113, 8.7).
                return ResponseFuture {
                    inner: None,
                    in_flight: Some(in_flight),
                    upgrade: None,
                    span: None,
                    last: false,
                };
            }
            // HTTP/1: its response says `Connection: close`, and hyper
            // closes after it. (HTTP/2 has no such header: the driver sends
            // GOAWAY instead.)
            last = number == u64::from(left) && req.version() <= Version::HTTP_11;
        }
        let upgrade = Pending::check(&mut req, &self.tracker);
        if let Some(peer) = &self.peer {
            req.extensions_mut().insert(PeerAddr(peer.clone()));
        }
        #[cfg(feature = "tls-no-provider")]
        if let Some(tls) = &self.tls {
            req.extensions_mut().insert(tls.clone());
        }
        // Handlers choose deadlines on HTTP/1 only (see `Deadlines`).
        let number = (req.version() != Version::HTTP_2).then_some(number);
        let req = req.map(|incoming| Body::new(incoming, &self.tracker, number));
        let inner = match &span {
            Some(span) => span.in_scope(|| self.inner.call(req)),
            None => self.inner.call(req),
        };
        ResponseFuture {
            inner: Some(inner),
            in_flight: Some(in_flight),
            upgrade,
            span,
            last,
        }
    }
}

pin_project! {
    /// The user's response future; hands the in-flight mark on to the
    /// response body.
    pub(crate) struct ResponseFuture<F> {
        // `None` for a refused request.
        #[pin]
        inner: Option<F>,
        in_flight: Option<InFlight>,
        // `Some` for an upgrade candidate only.
        upgrade: Option<Pending>,
        span: Option<tracing::Span>,
        // The connection's last request: its response closes it.
        last: bool,
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<TrackedBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let Some(inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(Err(Box::new(h2::Error::from(h2::Reason::REFUSED_STREAM))));
        };
        let _enter = this.span.as_ref().map(tracing::Span::enter);
        let res = std::task::ready!(inner.poll(cx)).map_err(Into::into);
        if let (Some(upgrade), Ok(res)) = (this.upgrade.take(), &res) {
            upgrade.respond(res.status());
        }
        let mut in_flight = this.in_flight.take();
        if let Some(in_flight) = &mut in_flight {
            in_flight.responded();
        }
        Poll::Ready(res.map(|mut res| {
            if *this.last {
                (res.headers_mut()).insert(CONNECTION, HeaderValue::from_static("close"));
            }
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

/// One upgrade candidate on its way through the handler.
pub(crate) struct Pending {
    /// hyper's handle of the upgrade, left in the request for
    /// `hyper::upgrade::on` (and axum), cloned here for dormant's.
    hyper: hyper::upgrade::OnUpgrade,
    /// dormant's [`upgrade::on`](crate::upgrade::on), offered to the
    /// requests it serves: its sender, and the handle `on` takes.
    dormant: Option<(oneshot::Sender<HandOffResult>, HandOff)>,
    connect: bool,
    tracker: Arc<Tracker>,
}

impl Pending {
    /// Makes the request an upgrade candidate if it is one: an HTTP/1.1
    /// request hyper prepared an upgrade for (it has an `Upgrade` header, or
    /// is `CONNECT`). hyper's `OnUpgrade` stays in the request; dormant's
    /// `on` is offered beside it to those with `Connection: upgrade` and
    /// to `CONNECT`. Costs ordinary requests one look at an empty extension
    /// map.
    #[inline]
    fn check<B>(req: &mut Request<B>, tracker: &Arc<Tracker>) -> Option<Pending> {
        if req.version() != Version::HTTP_11 {
            return None;
        }
        let hyper = req.extensions().get::<hyper::upgrade::OnUpgrade>()?.clone();
        let connect = req.method() == Method::CONNECT;
        let dormant = (connect || connection_upgrade(req.headers())).then(|| {
            let (tx, rx) = oneshot::channel();
            let handle = HandOff::new(rx);
            req.extensions_mut().insert(handle.clone());
            (tx, handle)
        });
        Some(Pending {
            hyper,
            dormant,
            connect,
            tracker: tracker.clone(),
        })
    }

    /// The handler answered with `status`. An accepted upgrade goes to
    /// dormant's `on` if the handler called it, else to hyper's; a declined
    /// one fails dormant's future (hyper's fails by itself).
    fn respond(self, status: StatusCode) {
        let accepted = if self.connect {
            status.is_success()
        } else {
            status == StatusCode::SWITCHING_PROTOCOLS
        };
        let accepted = match (accepted, self.dormant) {
            (false, Some((tx, _))) => {
                let _ = tx.send(Err(Error::declined()));
                return;
            }
            (false, None) => return,
            (true, Some((tx, handle))) if handle.is_taken() => {
                AcceptedUpgrade::Dormant { tx, on: self.hyper }
            }
            (true, _) => {
                self.tracker.hand_to_hyper();
                AcceptedUpgrade::Hyper
            }
        };
        self.tracker.upgrade.put(accepted);
    }
}

/// Whether a `Connection` header lists `upgrade`.
fn connection_upgrade(headers: &HeaderMap) -> bool {
    headers.get_all(CONNECTION).iter().any(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"upgrade"))
    })
}
