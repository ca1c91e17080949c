//! ACTIVE on HTTP/2 (h2c with prior knowledge): hyper's http2 server.
//! h2 connections never park yet. With an idle timeout, a connection with
//! no request open for that long is shut down gracefully (GOAWAY).

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::Poll;
use std::time::Duration;

use tracing::debug;

use crate::io::{CloseWatch, ConnIo, Replay};
use crate::service::{ConnService, HttpService, ResBody};
use crate::shutdown::Level;
use crate::state::ServeState;
use crate::timeout::{Timeouts, Watchdog};
use crate::track::Tracker;
use crate::transport::Seam;

/// Serves an HTTP/2 connection until it ends.
pub(super) async fn serve<T, S, B>(
    stream: T,
    replay: Replay,
    peer: Option<T::Addr>,
    service: Arc<S>,
    state: &ServeState<T>,
) where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    let tracker = Arc::new(Tracker::default());
    // h2 reads all the time and sees the close itself.
    #[cfg(feature = "tls-no-provider")]
    let tls = stream.connected().tls_info;
    let io = ConnIo::new(stream, replay, tracker.clone(), CloseWatch::Off);
    let svc = ConnService {
        inner: service,
        peer,
        #[cfg(feature = "tls-no-provider")]
        tls,
        tracker: tracker.clone(),
    };
    let mut conn = pin!(state.shared.http2.serve_connection(io, svc));
    let idle_only = Timeouts {
        idle: state.shared.config.timeouts.idle,
        ..Timeouts::default()
    };
    let mut watchdog = Watchdog::new(idle_only, None, None);
    let mut timer = pin!(tokio::time::sleep(Duration::ZERO));
    let mut watch = pin!(state.signal.watch());
    let mut closing = false;
    poll_fn(|cx| {
        match watch.as_mut().poll_level(cx) {
            Level::Running => {}
            Level::Draining if closing => {}
            Level::Draining => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
            Level::Forced => return Poll::Ready(()),
        }
        match conn.as_mut().poll(cx) {
            Poll::Ready(Ok(())) => return Poll::Ready(()),
            Poll::Ready(Err(error)) => {
                debug!(%error, "h2 connection error");
                return Poll::Ready(());
            }
            Poll::Pending => {}
        }
        if closing {
            return Poll::Pending;
        }
        if let Poll::Ready(why) = watchdog.poll(cx, timer.as_mut(), tracker.observe_streams()) {
            debug!(?why, "h2 idle timeout");
            why.count(&state.shared.stats);
            closing = true;
            conn.as_mut().graceful_shutdown();
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    })
    .await;
    state
        .shared
        .stats
        .requests
        .fetch_add(tracker.requests(), Relaxed);
}
