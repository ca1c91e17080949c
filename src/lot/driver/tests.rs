//! The driver's deadlines under a clock the test sets: connections park at
//! a chosen time with chosen [`Due`]s, and [`ParkingLot::expire`] is given the
//! time to act at. Nothing runs the lot's poll: no event reaches it.
//!
//! A connection is one end of a Unix socket pair, served through the lot
//! as `transport::Socket` serves it; the test holds the other end and reads
//! what the lot wrote, and whether it closed the socket.

use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use crate::lot::{
    Answered, Callback, Carry, Closed, Direction, Due, Owner, Parkable, ParkingLot, Pings,
    Registration, Rung, Slot, Wakeup, Woke, Wrote,
};

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
        None
    }

    fn close_dormant(io: UnixStream, goodbye: &[u8]) {
        if !goodbye.is_empty() {
            let _ = (&io).write(goodbye);
        }
    }

    fn send_dormant(io: &mut UnixStream, bytes: &[u8]) -> io::Result<()> {
        match io.write(bytes)? {
            n if n == bytes.len() => Ok(()),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_dormant(io: &mut UnixStream, bytes: &[u8]) -> io::Result<Wrote> {
        let taken = io.write(bytes)?;
        Ok(Wrote { taken, held: false })
    }

    fn read_dormant(io: &mut UnixStream, buf: &mut [u8]) -> Option<io::Result<usize>> {
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
}

const GOODBYE: &[u8] = b"goodbye";
const PING: &[u8] = b"ping";

impl Carrying {
    fn new() -> Self {
        Carrying {
            ends_at: None,
            goes_dormant: true,
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

    fn answer(&self, _: &[u8], _: &mut Vec<u8>) -> Option<Answered> {
        None
    }

    fn answers(&self) -> bool {
        false
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

    /// Where the connection at `key` waits; `None` once it left the lot.
    fn rung(&self, key: u32) -> Option<Rung> {
        self.lot.0.lock().slots.get(key).and_then(Slot::rung)
    }
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
        conn.write_all(PING).unwrap();
        Some(self.every)
    }
}

#[test]
fn sleepers_are_asked_at_their_deadlines_and_woken_when_they_ask() {
    let poll = mio::Poll::new().expect("an epoll instance");
    let registry = poll.registry().try_clone().expect("the poll's registry");
    let lot: ParkingLot<TestConn, Pinger, Carrying> = ParkingLot::new(
        Box::new(Reports::default()),
        Duration::ZERO,
        Pings::default(),
        None,
        registry,
    );
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
