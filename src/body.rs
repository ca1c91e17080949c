//! The request body type handlers receive.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;

use crate::track::{BodyEnd, Tracker};

/// The body of a request served by dormant.
///
/// It streams hyper's [`Incoming`] body unchanged. On HTTP/1 it also tells
/// the connection driver whether the body was read to its end: a connection
/// is never taken apart (parked) while a body is still being received. When
/// a body is dropped unread, hyper drains what has already arrived or, if
/// the rest is still on its way, closes the connection after the response;
/// the driver waits until hyper has done one or the other. Holding a body
/// past the response, or dropping it unread, is therefore always safe; it
/// only delays parking.
///
/// On HTTP/1 it also leads to the request's
/// [`Deadlines`](crate::Deadlines) ([`Deadlines::of`](crate::Deadlines::of)).
pub struct Body {
    inner: Incoming,
    /// The connection's tracker: the body counts as open on it while
    /// `open`, and on HTTP/1 it is where the request's deadlines are set.
    conn: Option<Arc<Tracker>>,
    /// The body has not reached its end (it is counted open on `conn`).
    open: bool,
    /// The request's number on its HTTP/1 connection; 0 on HTTP/2, where
    /// handlers choose no deadlines.
    request: u64,
}

impl Body {
    /// The body of request number `request` on an HTTP/1 connection
    /// (`None` on HTTP/2) tracked by `tracker`.
    pub(crate) fn new(inner: Incoming, tracker: &Arc<Tracker>, request: Option<u64>) -> Self {
        use http_body::Body as _;
        let open = !inner.is_end_stream();
        if open {
            tracker.body_opened();
        }
        Body {
            inner,
            conn: (open || request.is_some()).then(|| tracker.clone()),
            open,
            request: request.unwrap_or(0),
        }
    }

    /// The connection's tracker and the request's number on it, on HTTP/1
    /// (for `Deadlines`).
    pub(crate) fn request(&self) -> Option<(&Arc<Tracker>, u64)> {
        let tracker = self.conn.as_ref().filter(|_| self.request != 0)?;
        Some((tracker, self.request))
    }

    /// The body reached its end or is dropped: it no longer counts as open.
    fn close(&mut self, end: BodyEnd) {
        if self.open {
            self.open = false;
            if let Some(tracker) = &self.conn {
                tracker.body_closed(end);
            }
        }
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let res = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = res {
            self.close(BodyEnd::Complete);
        }
        res
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if self.open {
            // `is_end_stream` also covers a length-delimited body whose last
            // chunk was taken: hyper leaves the body state with that chunk.
            use http_body::Body as _;
            self.close(if self.inner.is_end_stream() {
                BodyEnd::Complete
            } else {
                BodyEnd::Abandoned
            });
        }
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Body").field("inner", &self.inner).finish()
    }
}
