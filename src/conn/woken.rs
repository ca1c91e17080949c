//! Serving a connection the lot woke: where its first poll runs (in the
//! lot's task or in a task of its own), under `catch_unwind` when in place.
//! A wake goes from the lot to the server's owner of the lot, which counts
//! it and chooses, and back here to the driver: conn → lot → conn.

use std::future::Future;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tracing::error;

use super::{Origin, closed_while_idle, serve};
use crate::service::{HttpService, ResBody, SharedService};
use crate::state::{Open, ServeState};
use crate::transport::Seam;

/// Serves a connection the parking lot handed back with bytes waiting (or
/// the peer's close). It still counts as held.
///
/// With [`FirstPoll::InPlace`], the connection is first polled right
/// here, in the lot's task, which the readiness that woke it has just woken: what
/// hyper-util's connection task does in its own. Most wakes end in that
/// poll (the request answered, the connection parked again), with no task
/// spawned; one that does not (a service that waits, a response larger than
/// the socket's buffer) goes on in a task of its own, whose first poll
/// registers its wakers again. The owner polls in place every
/// connection on a runtime with one worker, where a spawned task would run
/// on this thread right after the lot's anyway; with more, only for the
/// last of a batch of events, which tokio would run next on this worker
/// too (the task spawned last takes the worker's LIFO slot, out of other
/// workers' reach), while the others are spawned first for idle workers to
/// take. The in-place poll runs the application's handler in the lot's
/// task; while it runs, the lot's readiness goes to a relief task, so a
/// handler that spins there holds up no other connection's wake (the
/// lot's `relief.rs`).
pub(crate) fn serve_woken<T, S, B>(
    state: &Arc<ServeState<T>>,
    stream: T,
    origin: Origin<T::Addr>,
    service: &Arc<SharedService<S>>,
    first_poll: FirstPoll,
) where
    T: Seam,
    S: HttpService<B>,
    B: ResBody,
{
    let open = Open::woken(state);
    // `getpeername` is a system call on every wake: made only for the
    // `PeerAddr` extension or a connection span that will show it.
    let wanted = state.shared.config.peer_addr
        || tracing::enabled!(target: "dormant::conn", tracing::Level::DEBUG);
    let peer = match wanted.then(|| stream.peer_addr()).transpose() {
        Ok(peer) => peer,
        Err(error) => {
            // The peer reset the connection while it waited.
            closed_while_idle("woken", Some(&error));
            return;
        }
    };
    let serve = serve(stream, peer, service.clone(), open, origin);
    if first_poll == FirstPoll::InTask {
        tokio::spawn(serve);
        return;
    }
    let mut serve = Box::pin(serve);
    // Wakers registered in this poll go nowhere: the task spawned if it is
    // pending polls it again at once, registering its own.
    let mut cx = Context::from_waker(Waker::noop());
    match panic::catch_unwind(AssertUnwindSafe(|| serve.as_mut().poll(&mut cx))) {
        Ok(Poll::Ready(())) => {}
        Ok(Poll::Pending) => {
            tokio::spawn(serve);
        }
        Err(_) => {
            // As tokio does with a task that panics: the connection is
            // dropped (closed, released), the lot's task goes on.
            error!("a woken connection's service panicked; connection closed");
        }
    }
}

/// Where a woken connection is polled first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FirstPoll {
    /// In the lot's task, under `catch_unwind` (see [`serve_woken`]).
    InPlace,
    /// In a task of its own.
    InTask,
}
