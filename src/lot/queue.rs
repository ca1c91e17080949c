//! The lot's timers: FIFO deadline queues on a 32-bit millisecond clock, one
//! per [`Timer`].
//!
//! Every deadline of one timer is pushed with the same delay (the server's
//! `dormant_after`, its idle timeout, its keep-alive interval, a sleeper's
//! delay), so deadlines arrive in order and a queue is a `VecDeque`: push
//! at the back, expire from the front, no heap and no timer per
//! connection. An entry names a slab key and may outlive its connection
//! (woken, closed, key reused); the driver checks that the key still holds
//! a connection with that deadline before acting on it.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// Wrapping 32-bit milliseconds since a [`Clock`]'s epoch: comparisons are
/// correct while deadlines are less than ~24 days apart, which
/// `Builder::build` guarantees by bounding the idle timeout.
pub(crate) type Millis = u32;

/// Whether wrapping millisecond `a` is before `b`.
pub(crate) fn before(a: Millis, b: Millis) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The earlier of two optional deadlines.
pub(crate) fn earliest(a: Option<Millis>, b: Option<Millis>) -> Option<Millis> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if before(b, a) { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// A duration on the lot's clock, at most 24 days.
pub(crate) fn millis(d: Duration) -> Millis {
    d.as_millis().min(i32::MAX as u128) as Millis
}

/// Turns instants into [`Millis`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    epoch: Instant,
}

impl Clock {
    pub(crate) fn new(epoch: Instant) -> Self {
        Clock { epoch }
    }

    pub(crate) fn millis(&self, at: Instant) -> Millis {
        // Truncation is the wrapping clock.
        at.saturating_duration_since(self.epoch).as_millis() as Millis
    }
}

/// A deadline queue: deadlines in FIFO order, each naming a slab key. Every
/// entry of one queue was pushed with the same delay, so pushes come in
/// deadline order but for races, which `push` evens out.
#[derive(Debug, Default)]
pub(crate) struct Fifo {
    queue: VecDeque<(Millis, u32)>,
}

impl Fifo {
    /// Queues `deadline` for `key`; returns the deadline as queued. A
    /// deadline earlier than the back of the queue (two connections raced
    /// to it) is moved to the back's: the queue stays in order, and a
    /// connection is never acted on early.
    pub(crate) fn push(&mut self, deadline: Millis, key: u32) -> Millis {
        let deadline = match self.queue.back() {
            Some(&(back, _)) if before(deadline, back) => back,
            _ => deadline,
        };
        // By a quarter, as the slab grows (`slab::grow`): with an idle
        // timeout, every DORMANT connection has an entry here.
        if self.queue.len() == self.queue.capacity() {
            self.queue.reserve_exact((self.queue.len() / 4).max(16));
        }
        self.queue.push_back((deadline, key));
        deadline
    }

    /// Takes the front entry if its deadline is not after `now`.
    pub(crate) fn pop_due(&mut self, now: Millis) -> Option<(Millis, u32)> {
        let &(deadline, _) = self.queue.front()?;
        if before(now, deadline) {
            return None;
        }
        self.queue.pop_front()
    }

    /// How long from `now` until the front deadline, if any.
    pub(crate) fn next_in(&self, now: Millis) -> Option<Duration> {
        let &(deadline, _) = self.queue.front()?;
        let left = deadline.wrapping_sub(now) as i32;
        Some(Duration::from_millis(left.max(0) as u64))
    }

    /// Puts back at the front an entry taken from it while its connection
    /// was away from its slot: it was due, and is acted on first.
    pub(crate) fn push_front(&mut self, deadline: Millis, key: u32) {
        self.queue.push_front((deadline, key));
    }

    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

/// What a deadline is for: each has its own queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A PARKED connection goes DORMANT, or is closed if its idle
    /// deadline comes first.
    Parked,
    /// A DORMANT connection's idle deadline.
    Dormant,
    /// A carrying connection's keep-alive ping is due.
    Ping,
    /// Its ping's answer is late.
    Answer,
    /// A sleeper's deadline, this many milliseconds after its last: a
    /// queue per delay (a few, one per keep-alive setting of the sleepers'
    /// protocol).
    Sleeper(Millis),
}

/// Every deadline of a lot: a [`Fifo`] per [`Timer`]; a sleeper delay's
/// is made when a first deadline comes for it.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    /// [`Timer::Parked`], [`Timer::Dormant`], [`Timer::Ping`],
    /// [`Timer::Answer`]: every park pushes one and every pass pops it, so
    /// they are found without a search.
    fixed: [Fifo; 4],
    /// [`Timer::Sleeper`]'s, by delay.
    sleepers: Vec<(Millis, Fifo)>,
}

/// The timers of [`Timers::fixed`], in its order.
const FIXED: [Timer; 4] = [Timer::Parked, Timer::Dormant, Timer::Ping, Timer::Answer];

impl Timers {
    /// Queues `deadline` for `key` on `timer`: the deadline as queued (see
    /// [`Fifo::push`]), and whether it is its queue's only entry, a front
    /// the driver's timer does not know.
    pub(crate) fn push(&mut self, timer: Timer, deadline: Millis, key: u32) -> (Millis, bool) {
        let queue = self.queue(timer);
        let queued = queue.push(deadline, key);
        (queued, queue.len() == 1)
    }

    /// Puts back an entry [`pop_due`](Self::pop_due) gave while its
    /// connection was away from its slot (see `Synced::missed`).
    pub(crate) fn push_front(&mut self, timer: Timer, deadline: Millis, key: u32) {
        self.queue(timer).push_front(deadline, key);
    }

    fn queue(&mut self, timer: Timer) -> &mut Fifo {
        let delay = match timer {
            Timer::Parked => return &mut self.fixed[0],
            Timer::Dormant => return &mut self.fixed[1],
            Timer::Ping => return &mut self.fixed[2],
            Timer::Answer => return &mut self.fixed[3],
            Timer::Sleeper(delay) => delay,
        };
        let i = match self.sleepers.iter().position(|(d, _)| *d == delay) {
            Some(i) => i,
            None => {
                self.sleepers.push((delay, Fifo::default()));
                self.sleepers.len() - 1
            }
        };
        &mut self.sleepers[i].1
    }

    /// An entry whose deadline is not after `now`, if any: each queue's in
    /// its order, the queues one after another (each entry is checked
    /// against its slot, so the order between timers does not matter).
    pub(crate) fn pop_due(&mut self, now: Millis) -> Option<(Timer, Millis, u32)> {
        for (timer, queue) in FIXED.iter().zip(&mut self.fixed) {
            if let Some((deadline, key)) = queue.pop_due(now) {
                return Some((*timer, deadline, key));
            }
        }
        for (delay, queue) in &mut self.sleepers {
            if let Some((deadline, key)) = queue.pop_due(now) {
                return Some((Timer::Sleeper(*delay), deadline, key));
            }
        }
        None
    }

    /// How long from `now` until the earliest deadline, if any.
    pub(crate) fn next_in(&self, now: Millis) -> Option<Duration> {
        let sleepers = self.sleepers.iter().map(|(_, q)| q);
        self.fixed
            .iter()
            .chain(sleepers)
            .filter_map(|q| q.next_in(now))
            .min()
    }

    /// Forgets every deadline and frees the queues' memory.
    pub(crate) fn clear(&mut self) {
        *self = Timers::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_entries_leave_in_order() {
        let mut q = Fifo::default();
        q.push(10, 1);
        q.push(20, 2);
        q.push(20, 3);
        assert_eq!(q.next_in(5), Some(Duration::from_millis(5)));
        assert_eq!(q.pop_due(9), None);
        assert_eq!(q.pop_due(10), Some((10, 1)));
        assert_eq!(q.pop_due(15), None);
        assert_eq!(q.next_in(15), Some(Duration::from_millis(5)));
        assert_eq!(q.pop_due(25), Some((20, 2)));
        assert_eq!(q.pop_due(25), Some((20, 3)));
        assert_eq!(q.pop_due(25), None);
        assert_eq!((q.next_in(25), q.len()), (None, 0));
    }

    #[test]
    fn an_earlier_deadline_queues_behind_the_back() {
        let mut q = Fifo::default();
        assert_eq!(q.push(30, 1), 30);
        assert_eq!(q.push(25, 2), 30, "raced: never acted on early");
        assert_eq!(q.pop_due(29), None);
        assert_eq!(q.pop_due(30), Some((30, 1)));
        assert_eq!(q.pop_due(30), Some((30, 2)));
    }

    #[test]
    fn a_passed_front_is_due_now() {
        let mut q = Fifo::default();
        q.push(10, 1);
        assert_eq!(q.next_in(50), Some(Duration::ZERO));
    }

    #[test]
    fn the_clock_wraps() {
        let near_end = u32::MAX - 5;
        let mut q = Fifo::default();
        q.push(near_end, 1);
        q.push(near_end.wrapping_add(10), 2);
        assert!(before(near_end, near_end.wrapping_add(10)));
        assert_eq!(q.pop_due(near_end), Some((near_end, 1)));
        assert_eq!(q.next_in(near_end), Some(Duration::from_millis(10)));
        assert_eq!(q.pop_due(3), None);
        assert_eq!(q.pop_due(4), Some((near_end.wrapping_add(10), 2)));
        assert_eq!(
            earliest(Some(near_end.wrapping_add(10)), Some(near_end)),
            Some(near_end)
        );
        assert_eq!(earliest(None, Some(7)), Some(7));
    }

    #[test]
    fn a_deadline_across_the_wrap_keeps_its_order() {
        let wrapped = 3;
        let mut q = Fifo::default();
        assert_eq!(q.push(u32::MAX - 2, 1), u32::MAX - 2);
        assert_eq!(q.push(wrapped, 2), wrapped, "later, though smaller");
        assert_eq!(q.push(u32::MAX, 3), wrapped, "earlier, though larger");
        assert_eq!(q.pop_due(u32::MAX), Some((u32::MAX - 2, 1)));
        assert_eq!(q.pop_due(u32::MAX), None);
        assert_eq!(q.next_in(u32::MAX), Some(Duration::from_millis(4)));
        assert_eq!(q.pop_due(wrapped), Some((wrapped, 2)));
        assert_eq!(q.pop_due(wrapped), Some((wrapped, 3)));
    }

    #[test]
    fn the_clock_counts_whole_milliseconds_from_its_epoch() {
        let start = Instant::now();
        let clock = Clock::new(start + Duration::from_millis(10));
        assert_eq!(clock.millis(start), 0, "before the epoch");
        assert_eq!(clock.millis(start + Duration::from_micros(11_999)), 1);
        // Past 2^32 ms (49.7 days), it wraps.
        let wrap = Duration::from_millis(1 << 32);
        assert_eq!(clock.millis(start + wrap + Duration::from_millis(15)), 5);
        assert!(before(
            clock.millis(start + wrap),
            clock.millis(start + wrap + wrap / 4)
        ));
    }

    #[test]
    fn deadlines_pop_every_due_entry_of_every_timer() {
        let mut d = Timers::default();
        assert_eq!(d.push(Timer::Dormant, 30, 1), (30, true));
        assert_eq!(d.push(Timer::Parked, 10, 2), (10, true));
        assert_eq!(d.push(Timer::Parked, 20, 3), (20, false));
        assert_eq!(d.push(Timer::Sleeper(5), 15, 4), (15, true));
        assert_eq!(d.push(Timer::Sleeper(7), 25, 5), (25, true));
        assert_eq!(d.next_in(0), Some(Duration::from_millis(10)));
        assert_eq!(d.pop_due(9), None);
        let popped: Vec<_> = std::iter::from_fn(|| d.pop_due(27)).collect();
        // Each timer's in its order; the Dormant one is not due.
        assert_eq!(
            popped,
            [
                (Timer::Parked, 10, 2),
                (Timer::Parked, 20, 3),
                (Timer::Sleeper(5), 15, 4),
                (Timer::Sleeper(7), 25, 5),
            ]
        );
        assert_eq!(d.next_in(27), Some(Duration::from_millis(3)));
        // An entry put back while its connection was away is due first.
        d.push_front(Timer::Parked, 20, 3);
        assert_eq!(d.next_in(27), Some(Duration::ZERO));
        assert_eq!(d.pop_due(27), Some((Timer::Parked, 20, 3)));
        d.clear();
        assert_eq!((d.next_in(0), d.pop_due(u32::MAX / 2)), (None, None));
    }
}
