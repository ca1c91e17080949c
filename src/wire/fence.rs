//! The fence: `SETTINGS_HEADER_TABLE_SIZE = 0`, which empties the client's
//! HPACK table before a connection sleeps, since a woken connection's
//! fresh decoder starts empty; the restore, which gives a woken connection
//! that got busy its table back; and the SETTINGS frames in flight, whose
//! ACKs come in the order the frames went and so tell dormant's from h2's
//! (see `wire` for why, and when a fence goes out).

use std::collections::VecDeque;

use super::frame::{self, HEAD_LEN, INITIAL_TABLE_SIZE};

/// Whose SETTINGS frame, sent to the client, its ACK answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sent {
    /// h2's: the ACK goes to h2.
    H2,
    /// dormant's fence, sent when the connection had reset this many
    /// streams on which the client could still send: the ACK is kept from
    /// h2.
    Fence { resets: u32 },
    /// dormant's restore, `SETTINGS_HEADER_TABLE_SIZE = 4096`: the ACK is
    /// kept from h2.
    Restore,
}

/// A woken connection gives the client its HPACK table back
/// ([`Fence::restore`]) once the client has opened this many streams
/// since the table was emptied: a connection that wakes for a request or
/// two goes back to sleep without another round trip, a busy one gets its
/// compression back.
const RESTORE_AFTER: u32 = 4;

/// When a connection's fence goes out: the client must acknowledge it
/// before the connection may sleep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FenceTiming {
    /// Before the server frame that ends the last open stream, once: a new
    /// connection's. Many connections idle after their first request, and
    /// a client that reads only while it waits for a response (Python's
    /// httpx) acknowledges a fence only among a response's frames; after
    /// it, the client's table stays empty until the connection is busy
    /// ([`RESTORE_AFTER`]).
    FirstResponse,
    /// Once the connection is quiet: the client's table is emptied only
    /// if it idles.
    Quiet,
    /// Before the frame that ends the last open stream, every time: the
    /// client did not acknowledge a fence sent while it was quiet
    /// ([`Fence::go_early`]).
    Early,
}

/// A connection's fence, its restore, and the SETTINGS in flight.
#[derive(Debug)]
pub(super) struct Fence {
    /// SETTINGS frames sent to the client and not acknowledged yet.
    sent: VecDeque<Sent>,
    /// The client acknowledged a fence and no restore since: its HPACK
    /// encoder's table is empty and stays so.
    table_empty: bool,
    /// Streams opened since the table was emptied.
    streams_since_empty: u32,
    timing: FenceTiming,
}

impl Fence {
    /// A new connection's: the client's table in use, its fence to go
    /// with its first response.
    pub(super) fn new() -> Fence {
        Fence {
            sent: VecDeque::new(),
            table_empty: false,
            streams_since_empty: 0,
            timing: FenceTiming::FirstResponse,
        }
    }

    /// A woken connection's, which starts where it slept: with the
    /// client's table empty; its fences early if they were before.
    pub(super) fn woken(early: bool) -> Fence {
        Fence {
            table_empty: true,
            timing: match early {
                true => FenceTiming::Early,
                false => FenceTiming::Quiet,
            },
            ..Fence::new()
        }
    }

    /// Notes a SETTINGS frame of h2's, sent to the client.
    pub(super) fn h2_sent(&mut self) {
        self.sent.push_back(Sent::H2);
    }

    /// Notes the client's ACK of the oldest SETTINGS frame in flight:
    /// `Some` if the frame was dormant's (its ACK is kept from h2), with
    /// the resets a fence fenced (0 for a restore); `None` if it was h2's,
    /// or if nothing asked for it (an error h2 reports).
    pub(super) fn acknowledged(&mut self) -> Option<u32> {
        match self.sent.pop_front()? {
            Sent::H2 => None,
            Sent::Restore => Some(0),
            Sent::Fence { resets } => {
                self.table_empty = true;
                self.streams_since_empty = 0;
                Some(resets)
            }
        }
    }

    /// Notes a stream the client opened.
    pub(super) fn stream_opened(&mut self) {
        self.streams_since_empty += 1;
    }

    /// Whether a SETTINGS frame of h2's is unacknowledged.
    pub(super) fn h2_in_flight(&self) -> bool {
        self.sent.contains(&Sent::H2)
    }

    /// Whether any SETTINGS frame, h2's or dormant's, is unacknowledged.
    pub(super) fn in_flight(&self) -> bool {
        !self.sent.is_empty()
    }

    /// Whether the connection needs a fence before it sleeps: the client's
    /// HPACK table is in use, or `resets` streams were reset while the
    /// client could still send on them.
    pub(super) fn needed(&self, resets: u32) -> bool {
        !self.table_empty || resets > 0
    }

    /// The fence's frame, noted as sent after `resets` resets.
    pub(super) fn frame(&mut self, resets: u32) -> Vec<u8> {
        self.sent.push_back(Sent::Fence { resets });
        if self.timing == FenceTiming::FirstResponse {
            self.timing = FenceTiming::Quiet;
        }
        let mut out = Vec::with_capacity(HEAD_LEN + 6);
        frame::settings(&mut out, [(frame::HEADER_TABLE_SIZE, 0)]);
        out
    }

    /// From now on the fence goes out with the response that leaves no
    /// stream open, not once the connection is quiet (see
    /// `Watch::fence_early`).
    pub(super) fn go_early(&mut self) {
        self.timing = FenceTiming::Early;
    }

    /// Whether the fences go out early for good (a sleeping connection
    /// keeps it).
    pub(super) fn is_early(&self) -> bool {
        self.timing == FenceTiming::Early
    }

    /// Whether a fence may go out before a frame that ends the last open
    /// stream: a new connection's first, or any once the client showed it
    /// needs them so. h2's own SETTINGS may be in flight (a new
    /// connection's first response usually goes out before the client's
    /// ACK of them): ACKs come in order.
    pub(super) fn early_allowed(&self) -> bool {
        self.timing != FenceTiming::Quiet && self.sent.iter().all(|sent| *sent == Sent::H2)
    }

    /// The frame that gives the client its HPACK table back, once a
    /// connection whose table was emptied has become busy (see
    /// [`RESTORE_AFTER`]) and no fence is out; noted as sent.
    pub(super) fn restore(&mut self) -> Option<Vec<u8>> {
        let fence_out = (self.sent.iter()).any(|sent| matches!(sent, Sent::Fence { .. }));
        if !self.table_empty || self.streams_since_empty < RESTORE_AFTER || fence_out {
            return None;
        }
        self.table_empty = false;
        self.sent.push_back(Sent::Restore);
        let mut out = Vec::with_capacity(HEAD_LEN + 6);
        frame::settings(&mut out, [(frame::HEADER_TABLE_SIZE, INITIAL_TABLE_SIZE)]);
        Some(out)
    }
}
