//! The driver's deadlines under a clock the test sets: connections park at
//! a chosen time with chosen [`Due`]s, and [`ParkingLot::expire`] is given the
//! time to act at. Nothing runs the lot's poll: no event reaches it.
//!
//! A connection is one end of a Unix socket pair, served through the lot
//! as `transport::Socket` serves it; the test holds the other end and reads
//! what the lot wrote, and whether it closed the socket.
//!
//! The tests of lent connections (`slots.rs`) act on the lot from inside a
//! connection's socket call ([`in_socket_calls`]): events, deadlines and
//! the lot's close that come while the connection is away from its slot.

use std::cell::Cell as Flag;
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::Batch;
use crate::lot::{
    Answered, Callback, Carry, Closed, Direction, Due, Owner, Parkable, ParkingLot, Pings,
    Registration, Rung, Slot, Wakeup, Woke, Wrote,
};

thread_local! {
    /// What a test runs in each socket call of a task-less connection
    /// (taken out while it runs: a call it makes runs nothing).
    static IN_SOCKET_CALL: RefCell<Option<Box<dyn FnMut()>>> = RefCell::new(None);
}

/// Runs `f` in every socket call of a task-less connection from now on,
/// on this thread.
fn in_socket_calls(f: impl FnMut() + 'static) {
    IN_SOCKET_CALL.with(|call| *call.borrow_mut() = Some(Box::new(f)));
}

fn socket_call() {
    let f = IN_SOCKET_CALL.with(|call| call.borrow_mut().take());
    if let Some(mut f) = f {
        f();
        IN_SOCKET_CALL.with(|call| *call.borrow_mut() = Some(f));
    }
}

/// A Unix socket served through the lot.
struct TestConn {
    io: UnixStream,
    registration: Registration,
}

impl Parkable for TestConn {
    type Dormant = UnixStream;

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        (self.registration)
            .poll_ready(Direction::Read, cx)
            .map(|_| Ok(()))
    }

    fn read_ready(&self) -> bool {
        self.registration.read_ready()
    }

    fn into_dormant(self) -> Result<(UnixStream, Registration), Self> {
        Ok((self.io, self.registration))
    }

    fn from_dormant(io: UnixStream, registration: Registration) -> Self {
        TestConn { io, registration }
    }

    fn peer_closed(_: &UnixStream) -> Option<io::Result<bool>> {
        socket_call();
        None
    }

    fn close_dormant(io: UnixStream, goodbye: &[u8]) {
        socket_call();
        if !goodbye.is_empty() {
            let _ = (&io).write(goodbye);
        }
    }

    fn send_dormant(io: &mut UnixStream, bytes: &[u8]) -> io::Result<()> {
        socket_call();
        match io.write(bytes)? {
            n if n == bytes.len() => Ok(()),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_dormant(io: &mut UnixStream, bytes: &[u8]) -> io::Result<Wrote> {
        socket_call();
        let taken = io.write(bytes)?;
        Ok(Wrote { taken, held: false })
    }

    fn read_dormant(io: &mut UnixStream, buf: &mut [u8]) -> Option<io::Result<usize>> {
        socket_call();
        Some(io.read(buf))
    }
}

/// What the lot told its owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Told {
    Woken,
    Closed(Rung, Closed, usize),
    WentDormant(usize),
}

/// An owner that notes what it is told.
#[derive(Clone, Default)]
struct Reports(Arc<Mutex<Vec<Told>>>);

impl Reports {
    /// What the lot said since the last look, but for the reports of no
    /// connection that it makes after every pass.
    fn take(&self) -> Vec<Told> {
        let mut notes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let told = notes.drain(..);
        told.filter(|t| !matches!(t, Told::Closed(_, _, 0) | Told::WentDormant(0)))
            .collect()
    }

    fn note(&self, told: Told) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(told);
    }
}

impl Owner<TestConn, Carrying> for Reports {
    fn woken(&self, _: TestConn, _: Option<Carrying>, _: Woke) {
        self.note(Told::Woken);
    }

    fn closed(&self, from: Rung, why: Closed, n: usize) {
        self.note(Told::Closed(from, why, n));
    }

    fn went_dormant(&self, n: usize) {
        self.note(Told::WentDormant(n));
    }
}

/// What a carrying connection's protocol would keep: an end, and whether
/// it agrees to go DORMANT. It says `GOODBYE` and pings with `PING`.
struct Carrying {
    ends_at: Option<Instant>,
    goes_dormant: bool,
    /// Answers `PING` with `PONG` where it sleeps, and takes `PONG` as
    /// the answer to its own.
    answers: bool,
}

const GOODBYE: &[u8] = b"goodbye";
const PING: &[u8] = b"ping";
const PONG: &[u8] = b"pong";

impl Carrying {
    fn new() -> Self {
        Carrying {
            ends_at: None,
            goes_dormant: true,
            answers: false,
        }
    }

    fn ending_at(at: Instant) -> Self {
        Carrying {
            ends_at: Some(at),
            ..Carrying::new()
        }
    }
}

impl Carry for Carrying {
    fn goodbye(&self) -> Vec<u8> {
        GOODBYE.to_vec()
    }

    fn ping(&mut self) -> Vec<u8> {
        PING.to_vec()
    }

    fn went_dormant(&mut self) -> bool {
        self.goes_dormant
    }

    fn answer(&self, read: &[u8], reply: &mut Vec<u8>) -> Option<Answered> {
        match read {
            PING => reply.extend_from_slice(PONG),
            PONG => return Some(Answered { pongs: 1 }),
            _ => return None,
        }
        Some(Answered { pongs: 0 })
    }

    fn answers(&self) -> bool {
        self.answers
    }

    fn answered(&mut self, _: Answered) {}

    fn ends_at(&self) -> Option<Instant> {
        self.ends_at
    }
}

/// No sleepers here.
struct NoCallback;

impl Callback<TestConn> for NoCallback {
    fn call(self, _: Wakeup<UnixStream>) {}

    fn due(&mut self, _: &mut UnixStream) -> Option<Duration> {
        None
    }
}

/// A lot, its owner's notes, and the time connections park at.
struct Rig {
    lot: ParkingLot<TestConn, NoCallback, Carrying>,
    poll: Arc<Mutex<mio::Poll>>,
    notes: Reports,
    /// When connections park: the tests' times are milliseconds after it.
    t0: Instant,
}

const NOT_DUE: Due = Due {
    dormant_at: None,
    idle_at: None,
    ping_at: None,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Rig {
    fn new(pings: Pings, sweep_every: Option<Duration>) -> Rig {
        let poll = mio::Poll::new().expect("an epoll instance");
        let registry = poll.registry().try_clone().expect("the poll's registry");
        let notes = Reports::default();
        let owner = Box::new(notes.clone());
        let lot = ParkingLot::new(owner, Duration::ZERO, pings, sweep_every, registry);
        Rig {
            lot,
            poll: Arc::new(Mutex::new(poll)),
            notes,
            // After the lot's clock began.
            t0: Instant::now(),
        }
    }

    fn at(&self, after: u64) -> Instant {
        self.t0 + ms(after)
    }

    /// A connection registered and parked at `t0`: its key and its peer.
    fn park(&self, due: Due, carries: Option<Carrying>) -> (u32, UnixStream) {
        let (conn, peer) = pair();
        self.park_conn(conn, due, carries, peer)
    }

    fn park_conn(
        &self,
        io: UnixStream,
        due: Due,
        carries: Option<Carrying>,
        peer: UnixStream,
    ) -> (u32, UnixStream) {
        // The key `register` takes.
        let key = self.lot.0.lock().slots.vacant_key().expect("a vacant key");
        let registration = self.lot.register(io.as_fd()).expect("registered");
        let conn = TestConn { io, registration };
        let parked = self.lot.park(conn, carries, self.t0, due).is_ok();
        assert!(parked, "a connection with nothing to read parks");
        (key, peer)
    }

    /// The lot acts on its deadlines `after` milliseconds after `t0`;
    /// returns how long until the next.
    fn expire(&self, after: u64) -> Option<Duration> {
        self.lot.expire(self.at(after))
    }

    /// The lot acts on the events its poll has now, as its driver would.
    fn events(&self) {
        events(&self.lot, &self.poll);
    }

    /// Where the connection at `key` waits; `None` once it left the lot.
    fn rung(&self, key: u32) -> Option<Rung> {
        self.lot.0.lock().slots.get(key).and_then(Slot::rung)
    }
}

/// `lot` acts on the events `poll` has now, as its driver would (every
/// woken connection handed over as one of a batch).
fn events<W: Callback<TestConn>>(lot: &ParkingLot<TestConn, W, Carrying>, poll: &Mutex<mio::Poll>) {
    let mut events = mio::Events::with_capacity(16);
    let mut poll = poll.lock().unwrap();
    poll.poll(&mut events, Some(Duration::ZERO))
        .expect("polled");
    drop(poll);
    let mut batch = Batch::default();
    lot.on_events(&events, &mut batch);
    lot.hand_over(&mut batch, None);
}

fn pair() -> (UnixStream, UnixStream) {
    let (ours, peer) = UnixStream::pair().expect("a socket pair");
    for end in [&ours, &peer] {
        end.set_nonblocking(true).expect("non-blocking");
    }
    (ours, peer)
}

/// What the peer can read now, and whether the lot closed the socket
/// after it.
fn peer_reads(peer: &mut UnixStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0; 256];
    loop {
        match peer.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return (got, false),
            Err(e) => panic!("the peer's read failed: {e}"),
        }
    }
}

const OPEN: (Vec<u8>, bool) = (Vec::new(), false);

fn closed_after(bytes: &[u8]) -> (Vec<u8>, bool) {
    (bytes.to_vec(), true)
}

#[test]
fn a_parked_connection_goes_dormant_at_its_due_time() {
    let rig = Rig::new(Pings::default(), None);
    let due = Due {
        dormant_at: Some(rig.at(5_000)),
        idle_at: Some(rig.at(60_000)),
        ..NOT_DUE
    };
    let (key, mut peer) = rig.park(due, None);
    assert_eq!(rig.expire(0), Some(ms(5_000)));
    assert_eq!(rig.expire(4_999), Some(ms(1)));
    assert_eq!(
        (rig.notes.take(), rig.rung(key)),
        (vec![], Some(Rung::Parked))
    );
    assert_eq!(
        rig.expire(5_000),
        Some(ms(55_000)),
        "then its idle deadline"
    );
    assert_eq!(rig.notes.take(), [Told::WentDormant(1)]);
    assert_eq!(rig.rung(key), Some(Rung::Dormant));
    assert_eq!(peer_reads(&mut peer), OPEN);
}

#[test]
fn a_dormant_connection_is_closed_at_its_idle_deadline() {
    let rig = Rig::new(Pings::default(), None);
    let due = Due {
        dormant_at: Some(rig.at(1_000)),
        idle_at: Some(rig.at(60_000)),
        ..NOT_DUE
    };
    let (key, mut peer) = rig.park(due, None);
    rig.expire(1_000);
    assert_eq!(rig.notes.take(), [Told::WentDormant(1)]);
    assert_eq!(rig.expire(59_999), Some(ms(1)));
    assert_eq!(
        (rig.notes.take(), rig.rung(key)),
        (vec![], Some(Rung::Dormant))
    );
    assert_eq!(rig.expire(60_000), None, "nothing left to wait for");
    let closed = Told::Closed(Rung::Dormant, Closed::Idle, 1);
    assert_eq!((rig.notes.take(), rig.rung(key)), (vec![closed], None));
    assert_eq!(peer_reads(&mut peer), closed_after(b""));
}

#[test]
fn a_parked_connection_is_closed_at_an_idle_deadline_before_its_due_time() {
    let rig = Rig::new(Pings::default(), None);
    let due = Due {
        dormant_at: Some(rig.at(10_000)),
        idle_at: Some(rig.at(5_000)),
        ..NOT_DUE
    };
    let (key, mut peer) = rig.park(due, None);
    assert_eq!(rig.expire(0), Some(ms(5_000)));
    assert_eq!(rig.expire(5_000), None);
    let closed = Told::Closed(Rung::Parked, Closed::Idle, 1);
    assert_eq!((rig.notes.take(), rig.rung(key)), (vec![closed], None));
    assert_eq!(peer_reads(&mut peer), closed_after(b""));
}

#[test]
fn a_parked_connection_whose_idle_deadline_passed_too_is_closed_not_dormant() {
    // The lot acts late (its slack, a busy runtime): both have passed.
    let rig = Rig::new(Pings::default(), None);
    let due = Due {
        dormant_at: Some(rig.at(1_000)),
        idle_at: Some(rig.at(2_000)),
        ..NOT_DUE
    };
    let (_, mut peer) = rig.park(due, None);
    assert_eq!(rig.expire(3_000), None);
    let closed = Told::Closed(Rung::Parked, Closed::Idle, 1);
    assert_eq!(rig.notes.take(), [closed]);
    assert_eq!(peer_reads(&mut peer), closed_after(b""));
}

#[test]
fn a_due_time_earlier_than_the_queues_back_waits_for_it() {
    // Two connections raced to the queue: the later one's earlier due time
    // moves to the back's, so neither is acted on early.
    let rig = Rig::new(Pings::default(), None);
    let first = Due {
        dormant_at: Some(rig.at(5_000)),
        ..NOT_DUE
    };
    let raced = Due {
        dormant_at: Some(rig.at(3_000)),
        ..NOT_DUE
    };
    let (a, _peer_a) = rig.park(first, None);
    let (b, _peer_b) = rig.park(raced, None);
    assert_eq!(rig.expire(3_000), Some(ms(2_000)));
    assert_eq!(rig.rung(b), Some(Rung::Parked));
    assert_eq!(rig.expire(5_000), None, "DORMANT without an idle timeout");
    assert_eq!(rig.notes.take(), [Told::WentDormant(2)]);
    assert_eq!(
        (rig.rung(a), rig.rung(b)),
        (Some(Rung::Dormant), Some(Rung::Dormant))
    );
}

#[test]
fn a_carrying_connection_says_goodbye_at_its_idle_deadline() {
    let rig = Rig::new(Pings::default(), None);
    let due = Due {
        dormant_at: Some(rig.at(1_000)),
        idle_at: Some(rig.at(10_000)),
        ..NOT_DUE
    };
    let (key, mut peer) = rig.park(due, Some(Carrying::new()));
    rig.expire(1_000);
    assert_eq!(rig.notes.take(), [Told::WentDormant(1)]);
    assert_eq!(rig.rung(key), Some(Rung::Dormant));
    assert_eq!(rig.expire(10_000), None);
    let closed = Told::Closed(Rung::Dormant, Closed::Idle, 1);
    assert_eq!(rig.notes.take(), [closed]);
    assert_eq!(peer_reads(&mut peer), closed_after(GOODBYE));
}

#[test]
fn a_carrying_connection_that_declines_to_go_dormant_is_closed() {
    let rig = Rig::new(Pings::default(), None);
    let due = Due {
        dormant_at: Some(rig.at(1_000)),
        idle_at: Some(rig.at(10_000)),
        ..NOT_DUE
    };
    let declines = Carrying {
        goes_dormant: false,
        ..Carrying::new()
    };
    let (key, mut peer) = rig.park(due, Some(declines));
    rig.expire(1_000);
    let closed = Told::Closed(Rung::Parked, Closed::Failed, 1);
    assert_eq!((rig.notes.take(), rig.rung(key)), (vec![closed], None));
    assert_eq!(peer_reads(&mut peer), closed_after(GOODBYE));
}

/// Pings every 30 s, each answered within 5 s.
fn pings() -> Pings {
    Pings {
        every: ms(30_000),
        answer_within: ms(5_000),
    }
}

#[test]
fn a_carrying_connection_is_pinged_at_its_ping_time_and_closed_unanswered() {
    // A ping's time is rounded up to an even millisecond, and its answer's
    // to an odd one (`Ping`): each is acted on up to 1 ms late.
    let rig = Rig::new(pings(), None);
    let due = Due {
        dormant_at: Some(rig.at(1_000)),
        ping_at: Some(rig.at(10_000)),
        ..NOT_DUE
    };
    let (key, mut peer) = rig.park(due, Some(Carrying::new()));
    rig.expire(1_000);
    assert_eq!(rig.notes.take(), [Told::WentDormant(1)]);
    let next = rig.expire(9_999).expect("the ping is due");
    assert!((ms(1)..=ms(2)).contains(&next), "{next:?}");
    assert_eq!(peer_reads(&mut peer), OPEN);
    let next = rig.expire(10_001).expect("the answer is due");
    assert!((ms(5_000)..=ms(5_001)).contains(&next), "{next:?}");
    assert_eq!(peer_reads(&mut peer), (PING.to_vec(), false));
    assert_eq!(
        (rig.notes.take(), rig.rung(key)),
        (vec![], Some(Rung::Dormant))
    );
    rig.expire(15_000);
    assert_eq!((rig.notes.take(), peer_reads(&mut peer)), (vec![], OPEN));
    assert_eq!(rig.expire(15_002), None);
    let closed = Told::Closed(Rung::Dormant, Closed::Unanswered, 1);
    assert_eq!((rig.notes.take(), rig.rung(key)), (vec![closed], None));
    assert_eq!(peer_reads(&mut peer), closed_after(GOODBYE));
}

#[test]
fn a_connection_that_carries_nothing_is_not_pinged() {
    let rig = Rig::new(pings(), None);
    let due = Due {
        ping_at: Some(rig.at(1_000)),
        ..NOT_DUE
    };
    let (key, mut peer) = rig.park(due, None);
    assert_eq!(rig.expire(0), None, "no deadline at all");
    assert_eq!(rig.expire(20_000), None);
    assert_eq!(
        (rig.notes.take(), rig.rung(key)),
        (vec![], Some(Rung::Parked))
    );
    assert_eq!(peer_reads(&mut peer), OPEN);
}

#[test]
fn a_ping_the_socket_does_not_take_closes_the_connection() {
    let rig = Rig::new(pings(), None);
    let (ours, peer) = pair();
    // Fill the socket: the ping finds no room.
    let filler = [0; 4096];
    for chunk in [&filler[..], &filler[..1]] {
        while (&ours).write(chunk).is_ok() {}
    }
    let due = Due {
        ping_at: Some(rig.at(1_000)),
        ..NOT_DUE
    };
    let (key, _peer) = rig.park_conn(ours, due, Some(Carrying::new()), peer);
    assert_eq!(rig.expire(1_001), None);
    let closed = Told::Closed(Rung::Parked, Closed::Failed, 1);
    assert_eq!((rig.notes.take(), rig.rung(key)), (vec![closed], None));
}

#[test]
fn a_carrying_connection_past_its_end_is_closed_at_the_next_sweep() {
    let rig = Rig::new(Pings::default(), Some(ms(10_000)));
    let ends = Carrying::ending_at(rig.at(1_000));
    let (key, mut peer) = rig.park(NOT_DUE, Some(ends));
    // Its end passed, its sweep is not due.
    assert_eq!(rig.expire(5_000), Some(ms(5_000)));
    assert_eq!(rig.expire(9_999), Some(ms(1)));
    assert_eq!(
        (rig.notes.take(), rig.rung(key)),
        (vec![], Some(Rung::Parked))
    );
    assert_eq!(peer_reads(&mut peer), OPEN);
    assert_eq!(rig.expire(10_000), None, "no end left to sweep for");
    let closed = Told::Closed(Rung::Parked, Closed::Age, 1);
    assert_eq!((rig.notes.take(), rig.rung(key)), (vec![closed], None));
    assert_eq!(peer_reads(&mut peer), closed_after(GOODBYE));
}

#[test]
fn a_sweep_leaves_the_connections_whose_end_has_not_come() {
    let rig = Rig::new(Pings::default(), Some(ms(10_000)));
    let dormant = Due {
        dormant_at: Some(rig.at(1_000)),
        ..NOT_DUE
    };
    let (early, mut early_peer) = rig.park(dormant, Some(Carrying::ending_at(rig.at(5_000))));
    let (late, mut late_peer) = rig.park(dormant, Some(Carrying::ending_at(rig.at(25_000))));
    rig.expire(1_000);
    assert_eq!(rig.notes.take(), [Told::WentDormant(2)]);
    assert_eq!(rig.expire(10_000), Some(ms(10_000)), "the next sweep");
    let closed = Told::Closed(Rung::Dormant, Closed::Age, 1);
    assert_eq!(rig.notes.take(), [closed]);
    assert_eq!(
        (rig.rung(early), rig.rung(late)),
        (None, Some(Rung::Dormant))
    );
    assert_eq!(peer_reads(&mut early_peer), closed_after(GOODBYE));
    assert_eq!(rig.expire(20_000), Some(ms(10_000)));
    assert_eq!(
        (rig.notes.take(), peer_reads(&mut late_peer)),
        (vec![], OPEN)
    );
    assert_eq!(rig.expire(30_000), None);
    assert_eq!(rig.notes.take(), [closed]);
    assert_eq!(peer_reads(&mut late_peer), closed_after(GOODBYE));
}

#[test]
fn the_time_to_the_next_deadline_is_the_earliest_of_every_queue() {
    let rig = Rig::new(pings(), Some(ms(7_000)));
    let plain = Due {
        dormant_at: Some(rig.at(3_000)),
        idle_at: Some(rig.at(4_000)),
        ..NOT_DUE
    };
    let pinged = Due {
        ping_at: Some(rig.at(20_000)),
        ..NOT_DUE
    };
    let _plain = rig.park(plain, None);
    let _pinged = rig.park(pinged, Some(Carrying::ending_at(rig.at(100_000))));
    assert_eq!(rig.expire(0), Some(ms(3_000)), "the due time");
    assert_eq!(rig.expire(3_000), Some(ms(1_000)), "the idle deadline");
    assert_eq!(rig.notes.take(), [Told::WentDormant(1)]);
    assert_eq!(rig.expire(4_000), Some(ms(3_000)), "the sweep");
    assert_eq!(rig.expire(7_000), Some(ms(7_000)), "the next sweep");
    let next = rig.expire(14_000).expect("the ping");
    assert!((ms(6_000)..=ms(6_001)).contains(&next), "{next:?}");
    let closed = Told::Closed(Rung::Dormant, Closed::Idle, 1);
    assert_eq!(rig.notes.take(), [closed]);
}

/// A sleeper that writes a ping at each of its deadlines, `pings` times,
/// then asks to be woken; notes how it was called back.
struct Pinger {
    pings: usize,
    every: Duration,
    woken: Arc<Mutex<Vec<&'static str>>>,
}

impl Callback<TestConn> for Pinger {
    fn call(self, woken: Wakeup<UnixStream>) {
        let how = match woken {
            Wakeup::Due(_) => "due",
            Wakeup::Readable(_) => "readable",
            _ => "other",
        };
        self.woken.lock().unwrap().push(how);
    }

    fn due(&mut self, conn: &mut UnixStream) -> Option<Duration> {
        if self.pings == 0 {
            return None;
        }
        self.pings -= 1;
        socket_call();
        conn.write_all(PING).unwrap();
        Some(self.every)
    }
}

/// A lot for sleepers.
fn sleeper_lot() -> ParkingLot<TestConn, Pinger, Carrying> {
    let poll = mio::Poll::new().expect("an epoll instance");
    let registry = poll.registry().try_clone().expect("the poll's registry");
    let owner = Box::new(Reports::default());
    ParkingLot::new(owner, Duration::ZERO, Pings::default(), None, registry)
}

#[test]
fn sleepers_are_asked_at_their_deadlines_and_woken_when_they_ask() {
    let lot = sleeper_lot();
    let t0 = Instant::now();
    let woken = Arc::new(Mutex::new(Vec::new()));
    let (conn, mut peer) = pair();
    let pinger = Pinger {
        pings: 2,
        every: ms(1_000),
        woken: woken.clone(),
    };
    // A second sleeper, on another delay, and one without a deadline.
    let (other, mut other_peer) = pair();
    let slower = Pinger {
        pings: 5,
        every: ms(3_000),
        woken: woken.clone(),
    };
    let (quiet, mut quiet_peer) = pair();
    let never = Pinger {
        pings: 5,
        every: ms(1),
        woken: woken.clone(),
    };
    assert!(lot.sleep(conn, pinger, Some(ms(1_000))).is_some());
    assert!(lot.sleep(other, slower, Some(ms(3_000))).is_some());
    assert!(lot.sleep(quiet, never, None).is_some());
    let expire = |after: u64| lot.expire(t0 + ms(after));
    assert!(expire(0).is_some_and(|next| next <= ms(1_000)));
    assert_eq!(peer_reads(&mut peer), OPEN);
    // Its first deadline: a ping where it sleeps, and the next deadline.
    assert!(expire(1_500).is_some());
    assert_eq!(peer_reads(&mut peer), (PING.to_vec(), false));
    assert!(expire(2_600).is_some());
    assert_eq!(peer_reads(&mut peer), (PING.to_vec(), false));
    assert!(woken.lock().unwrap().is_empty());
    // Its third: it asks to be woken, as `Due`, with its stream (which
    // this callback drops).
    assert!(expire(3_700).is_some());
    assert_eq!(*woken.lock().unwrap(), ["due"]);
    assert_eq!(peer_reads(&mut peer), closed_after(&[]));
    // The other sleeper kept its own delay; the third has no deadline.
    assert_eq!(peer_reads(&mut other_peer), (PING.to_vec(), false));
    assert_eq!(peer_reads(&mut quiet_peer), OPEN);
    assert_eq!(lot.sleeping(), 2);
}

/// A carrying connection that answers pings, DORMANT at 1 s and pinged at
/// 2 s, with its idle deadline at `idle` ms.
fn answering(rig: &Rig, idle: u64) -> (u32, UnixStream) {
    let due = Due {
        dormant_at: Some(rig.at(1_000)),
        idle_at: Some(rig.at(idle)),
        ping_at: Some(rig.at(2_000)),
    };
    let carrying = Carrying {
        answers: true,
        ..Carrying::new()
    };
    let parked = rig.park(due, Some(carrying));
    rig.expire(1_000);
    assert_eq!(rig.notes.take(), [Told::WentDormant(1)]);
    parked
}

#[test]
fn socket_calls_are_made_without_the_lots_lock() {
    let rig = Rig::new(pings(), None);
    let (lot, calls) = (rig.lot.clone(), Arc::new(Mutex::new(0)));
    let counted = calls.clone();
    in_socket_calls(move || {
        let free = lot.0.inner.try_lock().is_ok();
        assert!(free, "a socket call made under the lot's lock");
        *counted.lock().unwrap() += 1;
    });
    let (key, mut peer) = answering(&rig, 60_000);
    // Its ping, written where it sleeps; its answer, read there.
    rig.expire(2_000);
    assert_eq!(peer_reads(&mut peer), (PING.to_vec(), false));
    peer.write_all(PONG).unwrap();
    rig.events();
    // A ping of the client's, answered where it sleeps.
    peer.write_all(PING).unwrap();
    rig.events();
    assert_eq!(peer_reads(&mut peer), (PONG.to_vec(), false));
    assert_eq!(
        (rig.notes.take(), rig.rung(key)),
        (vec![], Some(Rung::Dormant))
    );
    // Its idle deadline: its goodbye.
    rig.expire(60_000);
    assert_eq!(peer_reads(&mut peer), closed_after(GOODBYE));
    assert_eq!(
        rig.notes.take(),
        [Told::Closed(Rung::Dormant, Closed::Idle, 1)]
    );
    // A sleeper's call where it sleeps (see `Pinger`).
    let (conn, _peer) = pair();
    let woken = Arc::new(Mutex::new(Vec::new()));
    let pinger = Pinger {
        pings: 1,
        every: ms(1_000),
        woken: woken.clone(),
    };
    let sleepers = sleeper_lot();
    let lot = sleepers.clone();
    let counted = calls.clone();
    in_socket_calls(move || {
        assert!(
            lot.0.inner.try_lock().is_ok(),
            "a sleeper's call under the lock"
        );
        *counted.lock().unwrap() += 1;
    });
    assert!(sleepers.sleep(conn, pinger, Some(ms(1_000))).is_some());
    sleepers.expire(Instant::now() + ms(1_500));
    in_socket_calls(|| {});
    // Ping, PONG read, PING read, PONG written, goodbye, the sleeper's.
    assert_eq!(*calls.lock().unwrap(), 6);
}

#[test]
fn a_deadline_that_passes_while_a_connection_is_lent_is_acted_on_once_it_is_back() {
    let rig = Rig::new(pings(), None);
    let (key, mut peer) = answering(&rig, 3_000);
    // While its ping is written, its idle deadline passes.
    let (lot, t0) = (rig.lot.clone(), rig.t0);
    in_socket_calls(move || {
        lot.expire(t0 + ms(3_000));
    });
    let next = rig.expire(2_000);
    in_socket_calls(|| {});
    assert_eq!(next, Some(ms(1_000)), "due again");
    assert_eq!(
        (rig.notes.take(), rig.rung(key)),
        (vec![], Some(Rung::Dormant))
    );
    rig.expire(3_000);
    assert_eq!(
        rig.notes.take(),
        [Told::Closed(Rung::Dormant, Closed::Idle, 1)]
    );
    let mut said = PING.to_vec();
    said.extend_from_slice(GOODBYE);
    assert_eq!(peer_reads(&mut peer), closed_after(&said));
}

#[test]
fn bytes_that_come_while_a_connection_is_lent_wake_it_once_it_is_back() {
    let rig = Rig::new(pings(), None);
    let (key, peer) = answering(&rig, 60_000);
    // While its ping is written, bytes come: their one event finds it
    // away from its slot.
    let (lot, poll) = (rig.lot.clone(), rig.poll.clone());
    let once = Flag::new(false);
    in_socket_calls(move || {
        if !once.replace(true) {
            (&peer).write_all(b"GET / HTTP/1.1\r\n").unwrap();
            events(&lot, &poll);
        }
    });
    rig.expire(2_000);
    in_socket_calls(|| {});
    assert_eq!((rig.notes.take(), rig.rung(key)), (vec![Told::Woken], None));
}

#[test]
fn a_connection_lent_when_the_lot_closes_is_closed_once_it_is_back() {
    let rig = Rig::new(pings(), None);
    let (key, mut peer) = answering(&rig, 60_000);
    let lot = rig.lot.clone();
    in_socket_calls(move || lot.close_all());
    rig.expire(2_000);
    in_socket_calls(|| {});
    let notes = rig.notes.take();
    assert_eq!(notes, [Told::Closed(Rung::Dormant, Closed::Shutdown, 1)]);
    assert_eq!(rig.rung(key), None);
    let mut said = PING.to_vec();
    said.extend_from_slice(GOODBYE);
    assert_eq!(peer_reads(&mut peer), closed_after(&said));
}
