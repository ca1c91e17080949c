//! What handlers chose: the read and write deadlines of a connection's
//! current request, set through `Deadlines` (Go's `ResponseController`),
//! and the waker of the connection's task, woken when they move. Made the
//! first time a handler on the connection asks; the watchdog looks at it
//! only for a body or response phase it sees.

use std::sync::{Mutex, OnceLock};
use std::task::Waker;

use tokio::time::Instant;

/// The side of a request whose deadline a handler may choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The request body, until read to its end (the server's `read_timeout`).
    Read,
    /// The response, until flushed to its end (the server's `write_timeout`).
    Write,
}

/// A phase's deadline as a handler left it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Limit {
    /// Not chosen: the server's timeout applies.
    #[default]
    Server,
    /// This deadline, instead of the server's timeout.
    At(Instant),
    /// No deadline at all.
    Lifted,
}

/// What handlers chose on one ACTIVE HTTP/1 connection: the deadlines of
/// one request (its number on the connection) and the waker of the task
/// that serves the connection, woken when they move. Requests follow each
/// other on an HTTP/1 connection, so one request's choice is enough.
#[derive(Debug, Default)]
pub(crate) struct Chosen(Mutex<ChosenState>);

/// Where a connection's [`Chosen`] lives: made when a handler first asks.
pub(crate) type ChosenCell = OnceLock<Box<Chosen>>;

#[derive(Debug, Default)]
struct ChosenState {
    request: u64,
    read: Limit,
    write: Limit,
    waker: Option<Waker>,
}

impl Chosen {
    fn lock(&self) -> std::sync::MutexGuard<'_, ChosenState> {
        // A panic while holding it leaves plain values.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the deadline of `request`'s `phase` (`None` lifts it) and wakes
    /// the connection's task, whose watchdog then looks again. A deadline
    /// that has passed stays passed, as in Go: the connection is closed,
    /// or is about to be. An earlier request's choice changes nothing.
    pub(crate) fn set(&self, request: u64, side: Side, deadline: Option<Instant>) {
        let waker = {
            let mut state = self.lock();
            if request < state.request {
                return;
            }
            if request > state.request {
                *state = ChosenState {
                    request,
                    waker: state.waker.take(),
                    ..ChosenState::default()
                };
            }
            let limit = match side {
                Side::Read => &mut state.read,
                Side::Write => &mut state.write,
            };
            if let Limit::At(at) = *limit {
                if at <= Instant::now() {
                    return;
                }
            }
            *limit = deadline.map_or(Limit::Lifted, Limit::At);
            state.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The read and write limits of `request`, with `waker` registered to
    /// be woken when a handler moves them.
    pub(super) fn look(&self, request: u64, waker: &Waker) -> (Limit, Limit) {
        let mut state = self.lock();
        if !state.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
            state.waker = Some(waker.clone());
        }
        if state.request == request {
            (state.read, state.write)
        } else {
            (Limit::Server, Limit::Server)
        }
    }
}
