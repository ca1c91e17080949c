//! Where a woken connection's first poll runs, and why it cannot stop the
//! lot: the readiness of the lot's poll wakes a [`Rouser`], not the lot's
//! task directly.
//!
//! The lot's task hands the last connection of a batch of events to its
//! owner, which may poll it right there, in the lot's task (what
//! hyper-util's connection task does in its own, and most of a wake's
//! saving: no task spawned when the request is answered in that poll).
//! That poll runs the application's handler. A handler that spins in its
//! first poll (a password hash, a large serialization) would hold up the
//! lot's task, and with it every other connection's readiness, for as
//! long as it spins: no other worker can poll a task that is running.
//!
//! So while the lot's task polls in place ([`Rouser::in_place`]), the
//! poll's readiness does not wait for it: the [`Rouser`], the waker the
//! poll's readiness is registered with, spawns a relief task, which
//! collects the events and acts on them as the lot's task would, except
//! that it serves every connection they wake in a task of its own. The
//! relief ends once no event is left, and another is spawned at the next
//! readiness if the lot's task is still polling in place. The lot's
//! deadlines wait for the lot's task (they are acted on in batches, up to
//! the lot's slack late, anyway).
//!
//! On a runtime with one worker, a handler that spins stops every task of
//! the runtime, the relief among them, as it would on any tokio server:
//! the rule bounds the delay on a runtime with other workers free.
//!
//! The normal path costs an atomic `fetch_or` per readiness and two per
//! in-place poll.

use std::io;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll as Ready, Wake, Waker};
use std::time::Duration;

use mio::{Events, Poll};
use tokio::io::unix::AsyncFd;
use tracing::debug;

/// Events collected per `epoll_wait`.
const EVENTS: usize = 256;

/// The lot's task is polling a woken connection in place.
const IN_PLACE: u8 = 1;
/// A relief task is spawned or running.
const RELIEF: u8 = 2;
/// The poll turned readable since its readiness was last looked at.
const ROUSED: u8 = 4;

/// The lot's poll and its events' buffer, held by whoever collects them:
/// the lot's task, or a relief task.
pub(super) struct Poller {
    poll: AsyncFd<Poll>,
    events: Events,
}

/// What a relief task does with the lot it relieves (the driver's part).
pub(super) trait Relieve: Send + Sync + Sized + 'static {
    /// Collects a batch of events with `rouser` ([`Rouser::collect`]) and
    /// acts on all of it, serving each connection it wakes in a task of
    /// its own: what `collect` returned.
    fn relieve(self: Arc<Self>, rouser: &Rouser<Self>, waker: &Waker) -> Ready<io::Result<bool>>;
}

/// What the readiness of the lot's poll wakes.
pub(super) struct Rouser<L> {
    flags: AtomicU8,
    /// The waker registered with the poll's readiness ([`Rousing`]).
    waker: Waker,
    /// The lot's task.
    task: Mutex<Option<Waker>>,
    poller: Mutex<Poller>,
    lot: Weak<L>,
    runtime: tokio::runtime::Handle,
}

impl<L: Relieve> Rouser<L> {
    /// A rouser for `lot`, whose poll is `poll`; the lot's driver runs on
    /// the current runtime, where relief tasks are spawned.
    pub(super) fn new(lot: &Arc<L>, poll: Poll) -> io::Result<Arc<Self>> {
        // Deprecated in tokio 1.54 because an arbitrary `AsRawFd` type
        // might close or swap its fd while registered; `mio::Poll` owns
        // its epoll fd for its whole life and always returns that one,
        // which is the condition the `unsafe` replacement asks callers to
        // promise. The way out, once tokio 2 removes it: `AsyncFd::new`
        // on an `OwnedFd` dup of the epoll fd, polled with `mio::Poll`'s
        // own `poll`, needs `mio::Poll::from_raw_fd`, which is `unsafe`
        // (this crate forbids it); or a `mio` release whose `Poll` is
        // `AsFd`.
        #[allow(deprecated)]
        let poll = AsyncFd::with_interest(poll, tokio::io::Interest::READABLE)?;
        Ok(Arc::new_cyclic(|rouser| Rouser {
            flags: AtomicU8::new(0),
            waker: Waker::from(Arc::new(Rousing(rouser.clone()))),
            task: Mutex::new(None),
            poller: Mutex::new(Poller {
                poll,
                events: Events::with_capacity(EVENTS),
            }),
            lot: Arc::downgrade(lot),
            runtime: tokio::runtime::Handle::current(),
        }))
    }

    /// Collects a batch of events and gives it to `on_events`:
    /// `Ready(Ok(true))` if the poll was readable, `Ready(Ok(false))` if
    /// another collects now, `Pending` with `waker` registered for the
    /// next readiness.
    pub(super) fn collect(
        &self,
        waker: &Waker,
        on_events: impl FnOnce(&Events),
    ) -> Ready<io::Result<bool>> {
        self.flags.fetch_and(!ROUSED, AcqRel);
        let Some(mut poller) = self.lock_poller() else {
            return Ready::Ready(Ok(false));
        };
        let Poller { poll, events } = &mut *poller;
        let mut cx = Context::from_waker(waker);
        let mut guard = match poll.poll_read_ready_mut(&mut cx) {
            Ready::Ready(guard) => guard?,
            Ready::Pending => return Ready::Pending,
        };
        events.clear();
        match guard.get_inner_mut().poll(events, Some(Duration::ZERO)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ready::Ready(Ok(true)),
            Err(e) => return Ready::Ready(Err(e)),
        }
        // A full batch may have left events behind: look again before
        // waiting for the next edge.
        if events.iter().count() < EVENTS {
            guard.clear_ready();
        }
        drop(guard);
        on_events(events);
        // The waker is registered only by a poll that finds no readiness:
        // registered now, readiness that comes while the batch is handed
        // over (an in-place poll among it) reaches the rouser.
        if poll.poll_read_ready(&mut cx).is_ready() {
            self.flags.fetch_or(ROUSED, AcqRel);
        }
        Ready::Ready(Ok(true))
    }

    /// The poller, unless another holds it (a relief, or the lot's task):
    /// that one collects what is there.
    fn lock_poller(&self) -> Option<MutexGuard<'_, Poller>> {
        match self.poller.try_lock() {
            Ok(guard) => Some(guard),
            // Nothing that panics while holding it leaves it inconsistent:
            // the events are collected anew each time.
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Notes the lot's task's waker, which every readiness wakes.
    pub(super) fn set_task(&self, waker: &Waker) {
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        match &mut *task {
            Some(task) => task.clone_from(waker),
            slot @ None => *slot = Some(waker.clone()),
        }
    }

    fn wake_task(&self) {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(task) = &*task {
            task.wake_by_ref();
        }
    }

    /// Runs `poll` as the lot's task's in-place poll of a woken
    /// connection: readiness that comes meanwhile goes to a relief task.
    pub(super) fn in_place<R>(self: &Arc<Self>, poll: impl FnOnce() -> R) -> R {
        let before = self.flags.fetch_or(IN_PLACE, AcqRel);
        // Readiness came after this batch was collected: its events would
        // wait for the poll.
        if before & ROUSED != 0 {
            self.relieve();
        }
        let res = poll();
        self.flags.fetch_and(!IN_PLACE, AcqRel);
        res
    }

    /// Spawns a relief task, unless one runs.
    fn relieve(self: &Arc<Self>) {
        if self.flags.fetch_or(RELIEF, AcqRel) & RELIEF != 0 {
            return;
        }
        let Some(lot) = self.lot.upgrade() else {
            self.flags.fetch_and(!RELIEF, AcqRel);
            return;
        };
        let rouser = self.clone();
        self.runtime.spawn(async move { rouser.relief(lot) });
    }

    /// A relief task's work: collects and acts on events while the lot's
    /// task polls in place.
    fn relief(self: Arc<Self>, lot: Arc<L>) {
        loop {
            match lot.clone().relieve(&self, &self.waker) {
                Ready::Ready(Ok(true)) if self.flags.load(Acquire) & IN_PLACE != 0 => continue,
                Ready::Ready(Err(error)) => debug!(%error, "the lot's poll failed in a relief"),
                Ready::Ready(Ok(_)) | Ready::Pending => {}
            }
            // Done; unless readiness came while this one ran and the lot's
            // task still polls in place (its wake saw a relief running).
            let before = self.flags.fetch_and(!RELIEF, AcqRel);
            let again = IN_PLACE | ROUSED;
            if before & again != again || self.flags.fetch_or(RELIEF, AcqRel) & RELIEF != 0 {
                // The lot's task may have found the poller held: it
                // collects what is left.
                self.wake_task();
                return;
            }
        }
    }
}

impl<L: Relieve> Rouser<L> {
    /// The waker to register with the poll's readiness.
    pub(super) fn waker(&self) -> &Waker {
        &self.waker
    }

    /// The poll turned readable: a relief takes it if the lot's task polls
    /// in place; the lot's task is woken either way.
    fn rouse(self: &Arc<Self>) {
        let before = self.flags.fetch_or(ROUSED, AcqRel);
        if before & IN_PLACE != 0 && before & RELIEF == 0 {
            self.relieve();
        }
        // The lot's task, always: back from its poll, it collects again
        // (finding nothing, if a relief collected meanwhile).
        self.wake_task();
    }
}

/// The waker registered with the poll's readiness: the rouser, held
/// weakly. tokio keeps a registered waker in the poll's `ScheduledIo`,
/// which the rouser's `AsyncFd` keeps; a strong reference there would be a
/// cycle that keeps the rouser, its `AsyncFd` and the epoll fd alive after
/// the lot's driver ends (tokio clears a registration's wakers when the
/// registration drops, which the cycle never lets happen:
/// tokio-rs/tokio#3481).
struct Rousing<L>(Weak<Rouser<L>>);

impl<L: Relieve> Wake for Rousing<L> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(rouser) = self.0.upgrade() {
            rouser.rouse();
        }
    }
}
