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
pub struct Body {
    inner: Incoming,
    /// `Some` while the body has not reached its end on an HTTP/1
    /// connection that may park.
    watch: Option<Arc<Tracker>>,
}

impl Body {
    pub(crate) fn new(inner: Incoming, tracker: Option<&Arc<Tracker>>) -> Self {
        use http_body::Body as _;
        let watch = if inner.is_end_stream() {
            None
        } else {
            tracker.cloned()
        };
        if let Some(tracker) = &watch {
            tracker.body_opened();
        }
        Body { inner, watch }
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
            if let Some(tracker) = self.watch.take() {
                tracker.body_closed(BodyEnd::Complete);
            }
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
        if let Some(tracker) = self.watch.take() {
            // `is_end_stream` also covers a length-delimited body whose last
            // chunk was taken: hyper leaves the body state with that chunk.
            use http_body::Body as _;
            tracker.body_closed(if self.inner.is_end_stream() {
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
