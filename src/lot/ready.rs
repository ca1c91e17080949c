//! A served connection's readiness, as the lot's driver reports it, and
//! its [`Registration`]: the handle its transport reads and writes with.
//!
//! Every connection is registered once, edge-triggered for reading and
//! writing, in the lot's poll, from accept to close. While a task serves
//! it, the lot's driver turns its events into a [`Cell`]: per direction a
//! ready flag, a tick that counts events, and the waker of the task that
//! waits. This is tokio's `ScheduledIo` protocol, with a mutex instead of
//! atomics: a reader polls the flag (`Ready(tick)`, or `Pending` with its
//! waker stored), makes the system call, and on `WouldBlock` clears the
//! flag only if the tick did not move, so an event that came in between is
//! never lost.
//!
//! A read that finds the socket empty, or drains it (a short read),
//! clears the flag: a reader that waits again waits for the next event.
//! The flag stays only when a read may have left bytes (a full read), or
//! for the peer's close, which every later read finds. A flag left set
//! by a read that found nothing would end every wait at once (tests:
//! tests/taskless_park.rs,
//! `a_wake_that_brings_nothing_parks_again_and_keeps_no_worker_busy`).

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use super::queue::Millis;

/// A direction of a connection's readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Read = 0,
    Write = 1,
}

#[derive(Debug, Default)]
struct Half {
    ready: bool,
    /// The peer closed this direction, or the socket failed: final, so
    /// never cleared (a read past the close still finds it).
    closed: bool,
    tick: u32,
    waker: Option<Waker>,
}

/// What an event reports for one side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Report {
    Nothing,
    Ready,
    /// Ready for good: the peer's close, or an error.
    Closed,
}

/// A cell's state behind its lock.
#[derive(Debug, Default)]
struct Readiness {
    sides: [Half; 2],
    /// While the connection is task-less PARKED: when the lot acts on it
    /// (moves it to DORMANT or closes it), and its idle deadline. Kept here
    /// rather than in the lot's slot, which every connection has.
    due: Option<Millis>,
    idle: Option<Millis>,
    /// When it last parked task-less: how long it slept, once woken.
    parked_at: Millis,
}

/// The readiness of a registered connection: set by the lot's driver,
/// cleared by its reader and writer.
#[derive(Debug, Default)]
pub(crate) struct Cell {
    state: Mutex<Readiness>,
    /// The fd is registered for writing too (see [`Registration::poll_io`]).
    writes_watched: AtomicBool,
}

impl Cell {
    /// Readies a new connection's cell: writes try the socket, reads wait
    /// for the event registering it reports (at once if bytes came
    /// already).
    pub(super) fn set_registered(&self) {
        self.lock().sides[Direction::Write as usize].ready = true;
    }

    fn lock(&self) -> MutexGuard<'_, Readiness> {
        // A panic while holding it leaves flags and wakers consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection parks without its task at `now`: notes its
    /// deadlines, and drops the wakers its task left, which would keep the
    /// task's memory.
    pub(super) fn park(&self, now: Millis, due: Option<Millis>, idle: Option<Millis>) {
        let mut state = self.lock();
        state.parked_at = now;
        state.due = due;
        state.idle = idle;
        for side in &mut state.sides {
            side.waker = None;
        }
    }

    /// The deadlines noted at [`park`](Self::park).
    pub(super) fn parked(&self) -> (Option<Millis>, Option<Millis>) {
        let state = self.lock();
        (state.due, state.idle)
    }

    /// Marks the sides an event reports and moves their wakers to `wake`.
    pub(super) fn set(&self, read: Report, write: Report, wake: &mut Vec<Waker>) {
        let mut state = self.lock();
        for (side, report) in state.sides.iter_mut().zip([read, write]) {
            if report != Report::Nothing {
                side.ready = true;
                side.closed |= report == Report::Closed;
                side.tick = side.tick.wrapping_add(1);
                wake.extend(side.waker.take());
            }
        }
    }

    /// Whether an event came since the reader last found the socket empty.
    pub(super) fn read_ready(&self) -> bool {
        let side = &self.lock().sides[Direction::Read as usize];
        side.ready || side.closed
    }

    /// Marks both sides ready, for a task-less connection woken by an
    /// event the lot consumed: its first read must reach the socket, and
    /// the events it missed while task-less (room to write) went nowhere.
    /// `read`: whether the event also reported the peer's close, or
    /// `Nothing` if the lot read the socket empty itself (its next read
    /// waits for the next event). Returns when the connection parked
    /// ([`park`](Self::park)).
    pub(super) fn set_woken(&self, read: Report) -> Millis {
        let mut state = self.lock();
        for side in state.sides.iter_mut() {
            side.ready = true;
            side.tick = side.tick.wrapping_add(1);
        }
        let reader = &mut state.sides[Direction::Read as usize];
        reader.ready = read != Report::Nothing;
        reader.closed |= read == Report::Closed;
        state.parked_at
    }
}

/// What a registration's handle tells the lot it belongs to.
pub(crate) trait Table: Send + Sync {
    /// The connection at `key` closed: its slot is free.
    fn release(&self, key: u32);
    /// From now on, the poll reports when the fd at `key` has room to
    /// write, too.
    fn watch_writes(&self, key: u32, fd: BorrowedFd<'_>) -> io::Result<()>;
    /// The connection at `key` leaves the lot for good (an upgrade hands
    /// it to tokio): its fd is taken out of the poll and its slot freed.
    fn deregister(&self, key: u32, fd: BorrowedFd<'_>) -> io::Result<()>;
}

/// A served connection's handle on its registration: the readiness its
/// transport waits for. Dropping it frees the connection's slot in the
/// lot (the transport closes its fd first, which takes it out of the
/// poll).
pub struct Registration {
    key: u32,
    cell: Arc<Cell>,
    /// `None` once the slot is the lot's again (the connection parked).
    table: Option<Arc<dyn Table>>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Registration {
    pub(super) fn new(key: u32, cell: Arc<Cell>, table: Arc<dyn Table>) -> Self {
        Registration {
            key,
            cell,
            table: Some(table),
        }
    }

    /// Hands the slot back to the lot without freeing it: the lot keeps
    /// the connection.
    pub(super) fn into_slot(mut self) -> (u32, Arc<Cell>) {
        self.table = None;
        (self.key, self.cell.clone())
    }

    /// `Ready(tick)` once `dir` is ready; `Pending` with the waker stored
    /// otherwise.
    pub(crate) fn poll_ready(&self, dir: Direction, cx: &mut Context<'_>) -> Poll<u32> {
        let mut state = self.cell.lock();
        let side = &mut state.sides[dir as usize];
        if side.ready || side.closed {
            return Poll::Ready(side.tick);
        }
        match &mut side.waker {
            Some(waker) => waker.clone_from(cx.waker()),
            slot @ None => *slot = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Clears `dir` unless an event came since `tick` was read.
    pub(crate) fn clear(&self, dir: Direction, tick: u32) {
        let mut state = self.cell.lock();
        let side = &mut state.sides[dir as usize];
        if side.tick == tick {
            side.ready = false;
        }
    }

    /// Whether the read side is ready (see [`Cell::read_ready`]).
    pub(crate) fn read_ready(&self) -> bool {
        self.cell.read_ready()
    }

    /// Runs `op` on `fd` once `dir` is ready, until it does not find the
    /// socket empty (or full); `short` says whether a result means the
    /// socket was drained (a read or write shorter than asked), which
    /// clears the readiness as `WouldBlock` does and saves the system call
    /// that would find it so.
    ///
    /// A connection is registered for reading only: most responses fit in
    /// the socket's buffer, and every ACK of one would otherwise wake the
    /// lot. The first write that finds the socket full registers it for
    /// writing too (the poll then reports room at once if there is some
    /// already), for the rest of its life.
    pub(crate) fn poll_io<R>(
        &self,
        fd: BorrowedFd<'_>,
        dir: Direction,
        cx: &mut Context<'_>,
        mut op: impl FnMut() -> io::Result<R>,
        short: impl Fn(&R) -> bool,
    ) -> Poll<io::Result<R>> {
        loop {
            let tick = std::task::ready!(self.poll_ready(dir, cx));
            match op() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.clear(dir, tick);
                    if dir == Direction::Write && !self.cell.writes_watched.swap(true, Relaxed) {
                        if let Some(table) = &self.table {
                            table.watch_writes(self.key, fd)?;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                res => {
                    if res.as_ref().is_ok_and(&short) {
                        self.clear(dir, tick);
                    }
                    return Poll::Ready(res);
                }
            }
        }
    }

    /// Takes `fd` out of the lot's poll and frees its slot, for a
    /// connection that leaves the lot for good.
    pub(crate) fn deregister(mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        match self.table.take() {
            Some(table) => table.deregister(self.key, fd),
            None => Ok(()),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(table) = self.table.take() {
            table.release(self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::Wake;

    struct Count(std::sync::atomic::AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    struct NoTable;

    impl Table for NoTable {
        fn release(&self, _: u32) {}
        fn watch_writes(&self, _: u32, _: BorrowedFd<'_>) -> io::Result<()> {
            Ok(())
        }
        fn deregister(&self, _: u32, _: BorrowedFd<'_>) -> io::Result<()> {
            Ok(())
        }
    }

    fn fd() -> BorrowedFd<'static> {
        // Any fd: `NoTable` makes no system call with it.
        static STDIN: std::sync::LazyLock<std::io::Stdin> =
            std::sync::LazyLock::new(std::io::stdin);
        std::os::fd::AsFd::as_fd(&*STDIN)
    }

    fn registration(cell: &Arc<Cell>) -> Registration {
        Registration::new(0, cell.clone(), Arc::new(NoTable))
    }

    #[test]
    fn an_event_between_the_poll_and_the_clear_is_kept() {
        let cell = Arc::new(Cell::default());
        let reg = registration(&cell);
        let count = Arc::new(Count(Default::default()));
        let waker = Waker::from(count.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(reg.poll_ready(Direction::Read, &mut cx).is_pending());
        let mut wake = Vec::new();
        cell.set(Report::Ready, Report::Nothing, &mut wake);
        assert_eq!(wake.len(), 1, "the reader's waker is handed out");
        wake.drain(..).for_each(Waker::wake);
        assert_eq!(count.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        let Poll::Ready(tick) = reg.poll_ready(Direction::Read, &mut cx) else {
            panic!("ready after the event");
        };
        // Another event, then the reader's `WouldBlock` from before it.
        cell.set(Report::Ready, Report::Nothing, &mut wake);
        reg.clear(Direction::Read, tick);
        assert!(reg.read_ready(), "the later event stays");
        let Poll::Ready(tick) = reg.poll_ready(Direction::Read, &mut cx) else {
            panic!("still ready");
        };
        reg.clear(Direction::Read, tick);
        assert!(!reg.read_ready());
        assert!(
            reg.poll_ready(Direction::Write, &mut cx).is_pending(),
            "the sides are apart"
        );
    }

    #[test]
    fn poll_io_retries_after_would_block_and_clears_on_short() {
        let cell = Arc::new(Cell::default());
        cell.set_woken(Report::Ready);
        let reg = registration(&cell);
        let waker = Waker::from(Arc::new(Count(Default::default())));
        let mut cx = Context::from_waker(&waker);
        let mut calls = 0;
        let res = reg.poll_io(
            fd(),
            Direction::Read,
            &mut cx,
            || {
                calls += 1;
                Ok::<usize, io::Error>(3)
            },
            |&n| n < 10,
        );
        assert!(matches!(res, Poll::Ready(Ok(3))));
        assert_eq!(calls, 1);
        assert!(!reg.read_ready(), "a short read cleared the flag");
        let res = reg.poll_io(
            fd(),
            Direction::Read,
            &mut cx,
            || Ok::<usize, io::Error>(1),
            |_| false,
        );
        assert!(res.is_pending(), "no system call without readiness");
        cell.set_woken(Report::Ready);
        let res: Poll<io::Result<usize>> = reg.poll_io(
            fd(),
            Direction::Read,
            &mut cx,
            || Err(io::ErrorKind::WouldBlock.into()),
            |_| false,
        );
        assert!(res.is_pending());
        assert!(!reg.read_ready(), "WouldBlock cleared the flag");

        // The peer's close stays: a short read before it does not hide it.
        let mut wake = Vec::new();
        cell.set(Report::Closed, Report::Nothing, &mut wake);
        let res = reg.poll_io(
            fd(),
            Direction::Read,
            &mut cx,
            || Ok::<usize, io::Error>(2),
            |_| true,
        );
        assert!(matches!(res, Poll::Ready(Ok(2))));
        assert!(reg.read_ready(), "closed is final");
        assert!(
            reg.poll_io(
                fd(),
                Direction::Read,
                &mut cx,
                || Ok::<usize, io::Error>(0),
                |_| true
            )
            .is_ready()
        );
    }

    #[test]
    fn parking_lets_go_of_the_task() {
        // A task-less connection's cell must not keep its last task alive
        // through the waker that task left.
        let cell = Arc::new(Cell::default());
        let reg = registration(&cell);
        let task = Arc::new(Count(Default::default()));
        let waker = Waker::from(task.clone());
        assert!(
            reg.poll_ready(Direction::Read, &mut Context::from_waker(&waker))
                .is_pending()
        );
        drop(waker);
        assert_eq!(Arc::strong_count(&task), 2, "the cell keeps the waker");
        cell.park(0, Some(7), None);
        assert_eq!(Arc::strong_count(&task), 1, "parked: the waker is gone");
        assert_eq!(cell.parked(), (Some(7), None));
    }
}
