//! [`Deadlines`]: a handler's hold on its own request's read and write
//! deadlines, the shape of Go's `http.ResponseController`.
//!
//! The handle is made only when a handler asks for it, from what every
//! HTTP/1 request already carries: its [`Body`] holds the connection's
//! `Tracker` and the request's number on the connection. What handlers
//! chose lives in the tracker's `Chosen` (see `timeout`), made the first
//! time a handler on the connection asks; the watchdog reads it only for a
//! body or response phase it sees. A server whose handlers never ask pays
//! no allocation, no timer work and no indirect call for it: the body's
//! reference to the tracker (a reference count, taken per request) is all.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use http::Request;
use tokio::time::Instant;

use crate::body::Body;
use crate::timeout::Side;
use crate::track::Tracker;

/// A handle on one request's read and write deadlines, with which its
/// handler lifts, moves or shortens them: Go's `http.ResponseController`
/// (`SetReadDeadline`, `SetWriteDeadline`).
///
/// A server's [`write_timeout`](crate::Builder::write_timeout) protects it
/// from clients that stop reading, and its
/// [`read_timeout`](crate::Builder::read_timeout) from clients that send
/// too slowly; a server-sent events stream, a long download or a large
/// upload needs more time than the rest of the API. With this handle, the
/// handler of such a request chooses that request's deadlines, and every
/// other request keeps the server's.
///
/// # Semantics
///
/// Deadlines are absolute, as in Go; `None` means no deadline.
///
/// - [`set_write_deadline`](Self::set_write_deadline) replaces the server's
///   `write_timeout` for this request's response: if the response is still
///   being written at the deadline (from when the handler returns it until
///   its last byte is flushed to the socket, the waits of a streaming body
///   included), the connection is closed.
/// - [`set_read_deadline`](Self::set_read_deadline) replaces the server's
///   `read_timeout` for this request's body: if the body has not been read
///   to its end (or dropped) at the deadline, the connection is closed, and
///   a handler still reading gets an error from the body.
/// - Until a handler sets one, the server's timeout applies. A deadline
///   takes effect at once: a shorter one wakes the connection, which moves
///   its timer.
/// - A deadline that has passed stays passed: setting another one after it
///   changes nothing (Go's rule), so a late extension never races the
///   connection's close.
/// - The check is the server's own, made when the connection waits: a
///   response written and flushed at once is never cut, whatever its
///   deadline, as with `write_timeout`.
/// - A connection closed this way is counted in
///   [`Stats::write_timeouts`](crate::Stats::write_timeouts) or
///   [`Stats::read_timeouts`](crate::Stats::read_timeouts), like one the
///   server's timeouts close.
///
/// Deadlines belong to one request. Once its response is written to its
/// end (for the write deadline) or its body read (for the read deadline),
/// setting one does nothing; they never carry over to the next request on
/// the connection, and a connection parks only with no request in flight,
/// so parking has nothing to keep. A handle kept past its request is
/// harmless and does nothing.
///
/// A lifted deadline does not lift shutdown's: a graceful shutdown waits
/// for a response in flight, an endless stream included, as long as
/// [`shutdown_grace`](crate::Builder::shutdown_grace) allows, then closes
/// its connection.
///
/// # HTTP/2
///
/// There is no handle on HTTP/2 ([`Deadlines::of`] returns `None`): the
/// server's read and write timeouts apply to HTTP/1 connections only, and
/// an HTTP/2 connection knows only the idle timeout, counted while no
/// stream is open. So a stream has no deadline to lift, and one that a
/// client stops reading stalls on its own flow-control window without
/// holding up the connection's other streams. Cutting such a stream would
/// take resetting it from outside: hyper resets a stream only when its
/// response body fails, and does not poll the body of a stream that waits
/// for the client's window.
///
/// # Cost
///
/// Making a handle clones a reference; the first one of a connection's
/// ACTIVE phase allocates the small state that handlers' deadlines share
/// with the connection. Setting a deadline takes a lock and wakes the
/// connection's task. Requests whose handlers do not ask cost no
/// allocation and no timer work.
///
/// Make the handle in the handler, and move it (it is `Clone`, `Send` and
/// `Sync`) into the task that streams the response: the connection looks
/// for handles when it runs, so one first made in another task is seen at
/// the connection's next turn.
///
/// # Example
///
/// A server-sent events stream that is not cut by the server's
/// `write_timeout`, but by a deadline it pushes forward with each event,
/// so that a client that stops reading is still closed (examples/sse.rs
/// runs this):
///
/// ```no_run
/// use std::convert::Infallible;
/// use std::time::Duration;
///
/// use bytes::Bytes;
/// use dormant::Deadlines;
/// use futures_util::stream;
/// use http::{Request, Response};
/// use http_body_util::StreamBody;
/// use hyper::body::Frame;
/// use tokio::sync::mpsc;
/// use tokio::time::Instant;
///
/// async fn events(
///     req: Request<dormant::Body>,
/// ) -> Result<Response<impl http_body::Body<Data = Bytes, Error = Infallible>>, Infallible> {
///     let (tx, rx) = mpsc::channel::<Bytes>(1);
///     let deadlines = Deadlines::of(&req);
///     tokio::spawn(async move {
///         let mut tick = tokio::time::interval(Duration::from_secs(1));
///         for n in 0.. {
///             tick.tick().await;
///             if tx.send(Bytes::from(format!("data: {n}\n\n"))).await.is_err() {
///                 break; // the connection is gone
///             }
///             // The body took the event: give the client 10 s for the next.
///             if let Some(deadlines) = &deadlines {
///                 deadlines.set_write_deadline(Instant::now() + Duration::from_secs(10));
///             }
///         }
///     });
///     let frames = stream::unfold(rx, |mut rx| async move {
///         let event = rx.recv().await?;
///         Some((Ok(Frame::data(event)), rx))
///     });
///     Ok(Response::new(StreamBody::new(frames)))
/// }
/// ```
///
/// In an axum application served with the `axum` feature
/// (`dormant::axum`), [`Deadlines::of`] finds the handle in a handler as it
/// is. Served otherwise (through [`TowerToHyperService`](crate::TowerToHyperService)),
/// its handlers see axum's body instead of dormant's: a step in front of
/// the router (a `tower::ServiceBuilder::map_request`) puts the handle
/// taken from dormant's body, `Deadlines::of(&req)`, in the request's
/// extensions, where [`Deadlines::of`] finds it.
#[derive(Clone)]
pub struct Deadlines {
    tracker: Arc<Tracker>,
    /// The request's number on its connection.
    request: u64,
}

impl Deadlines {
    /// Returns a handle on `req`'s deadlines: one in its extensions, or
    /// else one made from its body, which on HTTP/1 is dormant's [`Body`]
    /// until a framework replaces it.
    ///
    /// Returns `None` for a request on HTTP/2 (see the type's docs), or one
    /// that did not come from a dormant server (in a unit test, say).
    #[must_use]
    pub fn of<B: 'static>(req: &Request<B>) -> Option<Deadlines> {
        let deadlines = match req.extensions().get::<Deadlines>() {
            Some(deadlines) => deadlines.clone(),
            None => Deadlines::unregistered(req)?,
        };
        // Made now, so that the connection registers to be woken when the
        // handler sets a deadline (see the type's docs).
        deadlines.tracker.chosen();
        Some(deadlines)
    }

    /// The handle made from `req`'s body, dormant's [`Body`], without
    /// registering the connection to be woken when a deadline is set: that
    /// waits until a handler asks for it ([`Deadlines::of`]).
    pub(crate) fn unregistered<B: 'static>(req: &Request<B>) -> Option<Deadlines> {
        let (tracker, request) = (req.body() as &dyn Any).downcast_ref::<Body>()?.request()?;
        Some(Deadlines {
            tracker: tracker.clone(),
            request,
        })
    }

    /// Sets the deadline for writing this request's response: the
    /// connection is closed if the response is still being written then.
    /// `None` lifts it: the response may take as long as it likes. Until
    /// this is called, the server's
    /// [`write_timeout`](crate::Builder::write_timeout) applies.
    ///
    /// A streaming response that pushes its deadline forward as each part
    /// is taken (say, each event of a server-sent events stream) runs as
    /// long as its client reads, and is closed once the client has stopped
    /// reading for that long: the socket's buffers fill, the body is no
    /// longer polled, and the deadline passes. See the type's docs for a
    /// passed deadline, the end of the response and HTTP/2.
    pub fn set_write_deadline(&self, deadline: impl Into<Option<Instant>>) {
        self.set(Side::Write, deadline.into());
    }

    /// Sets the deadline for reading this request's body: the connection
    /// is closed if the body has not been read to its end by then, and a
    /// handler still reading it gets an error. `None` lifts it: a large
    /// upload may take as long as it likes. Until this is called, the
    /// server's [`read_timeout`](crate::Builder::read_timeout) applies.
    ///
    /// See the type's docs for a passed deadline, the end of the body and
    /// HTTP/2.
    pub fn set_read_deadline(&self, deadline: impl Into<Option<Instant>>) {
        self.set(Side::Read, deadline.into());
    }

    fn set(&self, side: Side, deadline: Option<Instant>) {
        // A later request has started: this one is over.
        if self.tracker.requests() == self.request {
            self.tracker.chosen().set(self.request, side, deadline);
        }
    }
}

impl fmt::Debug for Deadlines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadlines")
            .field("request", &self.request)
            .finish_non_exhaustive()
    }
}
