//! Connection hooks: admission at accept ([`Serve::on_accept`]) and the
//! changes of a connection's state, for metrics ([`Serve::on_conn_state`],
//! Go's `Server.ConnState`).
//!
//! Unset, they cost nothing: the accept loop and the driver look at an
//! `Option` that is `None`, and no connection carries anything more.
//!
//! With a state hook, each connection carries a [`Watched`] from accept to
//! close: the hook and the peer's address, boxed once per connection. It
//! travels with the connection on every rung (in its task while it is
//! served or PARKED there, with what a task-less connection carries in the
//! parking lot otherwise, see `kept`), and reports
//! [`ConnState::Closed`] when it is dropped, wherever that happens: the
//! connection's task ending, the lot closing it (the peer's close, an idle
//! timeout, its age, shutdown). A connection handed to an upgrade reports
//! [`ConnState::Upgraded`] last: the stream is its handler's.
//!
//! What a connection carries from phase to phase, its `Watched` with the
//! rest, is `kept`'s.
//!
//! A hook runs on the connection's task or the lot's, so it must be quick
//! (count, not log to a slow sink). One that panics closes that connection
//! only: an admission hook that panics rejects it.
//!
//! [`Serve::on_accept`]: crate::Serve::on_accept
//! [`Serve::on_conn_state`]: crate::Serve::on_conn_state

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tracing::{error, trace};

use crate::ladder::Rung;

/// What an admission hook ([`Serve::on_accept`](crate::Serve::on_accept))
/// decides for a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Serve it.
    Accept,
    /// Close it before reading a byte, or, behind a PROXY header, once the
    /// header is read (counted in
    /// [`Stats::rejected`](crate::Stats::rejected)).
    Reject,
}

/// A connection's state, as a state hook
/// ([`Serve::on_conn_state`](crate::Serve::on_conn_state)) sees it.
///
/// A connection goes `New`, then between the rungs of the idle ladder
/// (`On(Rung::Active)` and `On(Rung::Parked)`, and `On(Rung::Dormant)`
/// from `Parked`) for as long as it lives, and ends `Closed`, or
/// `Upgraded`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnState {
    /// Accepted (and admitted); nothing read yet. Go's `StateNew`.
    New,
    /// On a rung of the idle ladder: [`Rung::Active`] once bytes of a
    /// request arrived and hyper serves it (Go's `StateActive`);
    /// [`Rung::Parked`] idle between requests without hyper's state (an
    /// HTTP/2 connection asleep too; Go's `StateIdle`); [`Rung::Dormant`]
    /// idle for `dormant_after`, in the parking lot.
    On(Rung),
    /// Handed to an upgrade's handler ([`upgrade::on`](crate::upgrade::on)):
    /// the last state reported, as Go's `StateHijacked`.
    Upgraded,
    /// Closed, by either side. Go's `StateClosed`.
    Closed,
}

/// An admission hook.
pub(crate) type AcceptHook<A> = Box<dyn Fn(&A) -> Admit + Send + Sync>;

/// A state hook.
pub(crate) type StateHook<A> = Box<dyn Fn(&A, ConnState) + Send + Sync>;

/// The hooks of a `serve` call, for peers of address type `A`.
pub(crate) struct Hooks<A> {
    pub(crate) accept: Option<AcceptHook<A>>,
    pub(crate) state: Option<Arc<StateHook<A>>>,
}

impl<A> Default for Hooks<A> {
    fn default() -> Self {
        Hooks {
            accept: None,
            state: None,
        }
    }
}

impl<A> fmt::Debug for Hooks<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("accept", &self.accept.is_some())
            .field("state", &self.state.is_some())
            .finish()
    }
}

impl<A> Hooks<A> {
    /// Whether any hook is set.
    pub(crate) fn any(&self) -> bool {
        self.accept.is_some() || self.state.is_some()
    }

    /// What the hooks decide for a new connection from `peer`: the
    /// admission hook first (a rejection is counted in `rejected`), then
    /// the state hook's [`ConnState::New`]. The one place both run, for
    /// connections admitted at accept and for those whose peer came in a
    /// PROXY header.
    pub(crate) fn open(&self, peer: &A, rejected: &AtomicU64) -> Admitted<A>
    where
        A: Clone + fmt::Debug,
    {
        if self.admit(peer) == Admit::Reject {
            trace!(?peer, "connection rejected by the admission hook");
            rejected.fetch_add(1, Relaxed);
            return Admitted::Close;
        }
        let Some(hook) = &self.state else {
            return Admitted::Serve(None);
        };
        let watched = Box::new(Watched {
            hook: hook.clone(),
            peer: peer.clone(),
            upgraded: false,
        });
        match watched.report(ConnState::New) {
            true => Admitted::Serve(Some(watched)),
            // The state hook panicked.
            false => Admitted::Close,
        }
    }

    /// What the admission hook decides for `peer`; [`Admit::Reject`] if
    /// it panics.
    fn admit(&self, peer: &A) -> Admit {
        let Some(accept) = &self.accept else {
            return Admit::Accept;
        };
        panic::catch_unwind(AssertUnwindSafe(|| accept(peer))).unwrap_or_else(|_| {
            error!("the admission hook panicked; connection rejected");
            Admit::Reject
        })
    }
}

/// What the hooks decided for a new connection ([`Hooks::open`]).
pub(crate) enum Admitted<A> {
    /// Serve it, with its link to the state hook if there is one.
    Serve(Option<Box<Watched<A>>>),
    /// Close it: rejected, or the state hook panicked.
    Close,
}

/// A connection's link to its `serve` call's state hook: reports its
/// states, and [`ConnState::Closed`] when dropped.
pub(crate) struct Watched<A> {
    hook: Arc<StateHook<A>>,
    peer: A,
    /// Handed to an upgrade: `Closed` is not the server's to report.
    upgraded: bool,
}

impl<A> Watched<A> {
    /// Reports `state`; `false` if the hook panicked (the connection is to
    /// be closed).
    #[must_use]
    pub(crate) fn report(&self, state: ConnState) -> bool {
        let reported = panic::catch_unwind(AssertUnwindSafe(|| (self.hook)(&self.peer, state)));
        if reported.is_err() {
            error!(
                ?state,
                "the connection state hook panicked; connection closed"
            );
        }
        reported.is_ok()
    }

    /// Reports [`ConnState::Upgraded`], the last state: the stream is the
    /// handler's now.
    pub(crate) fn upgraded(&mut self) {
        self.upgraded = true;
        let _ = self.report(ConnState::Upgraded);
    }
}

impl<A> fmt::Debug for Watched<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watched").finish_non_exhaustive()
    }
}

impl<A> Drop for Watched<A> {
    fn drop(&mut self) {
        // Never a hook's panic during another's unwinding, which would
        // abort the process (a connection is not dropped while its task
        // unwinds: tokio and the lot's owner catch the panic first).
        if !self.upgraded && !std::thread::panicking() {
            let _ = self.report(ConnState::Closed);
        }
    }
}
