//! The sleeping form of an HTTP/2 connection: [`Asleep`], what it keeps
//! while hyper is gone, and what it does with it where it sleeps (answer
//! PINGs, send keep-alive PINGs and a closing GOAWAY) and when it wakes
//! (the prelude a fresh connection reads first, and the settling of that
//! connection's answer). The watcher it wakes with is `watch.rs`'s
//! (`Watch::woken`).

use std::sync::Arc;

use super::frame::{
    self, Field, Fields, HEAD_LEN, Head, INITIAL_WINDOW, Piece, Scanner, flag, kind,
};
use super::settings::Settings;

/// What a sleeping HTTP/2 connection keeps: what the client told it and
/// what a fresh hyper connection must be told to take over (see
/// `conn::h2`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Asleep {
    pub(super) settings: Arc<Settings>,
    pub(super) last_stream: u32,
    pub(super) recv_window: u32,
    pub(super) send_window: u32,
    /// Keep-alive PINGs sent while asleep, not answered yet.
    pub(super) pings: u16,
    /// The client acknowledges a fence only while it reads a response (see
    /// `Watch::fence_early`).
    pub(super) fence_early: bool,
    /// The client changed its header table size since the server's last
    /// header block: its decoder is owed a size update (see
    /// [`Asleep::prelude`]).
    pub(super) table_size_owed: bool,
}

/// A wake that cannot bring a fresh connection to where the old one was.
#[derive(Debug)]
pub(crate) struct Unsettled;

impl Asleep {
    /// What a fresh connection reads before the client's next bytes: the
    /// client's preface and settings, as if just sent; an ACK of the fresh
    /// connection's own settings, which the client already lives by (h2
    /// applies its settings, such as a stream's initial window, only once
    /// acknowledged), so that they never need to reach the client; and a
    /// connection WINDOW_UPDATE for the window the client had granted
    /// beyond the initial one.
    ///
    /// HPACK, server to client: the fresh encoder starts empty, believing
    /// the client's decoder's table is the initial 4,096 bytes, and the
    /// replayed header table size makes it open its first block with an
    /// update to that size (if not 4,096). That is where the old encoder
    /// left the decoder, unless it owed the decoder an update when it
    /// slept: a client that lowered its table size and raised it again
    /// before the next response is owed one to the lower size (RFC 7541,
    /// 4.2; nghttp2 empties its table at the ACK). Then the settings come
    /// in two frames: a header table size of 0, then the client's settings
    /// with its own, and the fresh encoder opens with updates to 0 and to
    /// the client's size, which empty the decoder's table and bring both
    /// sides to the same size.
    pub(crate) fn prelude(&self) -> Vec<u8> {
        // Its longest: every setting, and the WINDOW_UPDATE.
        let fence = HEAD_LEN + 6;
        let settings = HEAD_LEN + 6 * usize::from(frame::MAX_SETTING);
        let capacity = frame::PREFACE.len() + fence + settings + HEAD_LEN + HEAD_LEN + 4;
        let mut out = Vec::with_capacity(capacity);
        out.extend_from_slice(frame::PREFACE);
        if self.table_size_owed {
            frame::settings(&mut out, [(frame::HEADER_TABLE_SIZE, 0)]);
        }
        frame::settings(&mut out, self.settings.replayed(self.table_size_owed));
        frame::settings_ack(&mut out);
        if self.send_window > INITIAL_WINDOW {
            frame::window_update(&mut out, self.send_window - INITIAL_WINDOW);
        }
        out
    }

    /// The SETTINGS frames the prelude replays, whose ACKs never reach the
    /// client.
    fn replayed_frames(&self) -> usize {
        1 + usize::from(self.table_size_owed)
    }

    /// Rewrites what a fresh connection wrote in answer to the prelude
    /// before the client sees it: its SETTINGS (the client has them, and
    /// the prelude acknowledged them) and its ACKs of the replayed ones go,
    /// and its connection WINDOW_UPDATEs become one that brings the
    /// client's view of the window to the fresh connection's. `Err` if the
    /// fresh connection lets the client send less than it may already
    /// (the sleep should have been declined).
    pub(crate) fn settle(&self, written: &[u8]) -> Result<Vec<u8>, Unsettled> {
        let mut out = Vec::with_capacity(written.len());
        let mut scanner = Scanner::default();
        let mut fields = Fields::default();
        let mut fresh_window = u64::from(INITIAL_WINDOW);
        let mut acks = 0;
        let mut keep = true;
        let mut at = 0;
        while let Some(piece) = scanner.next(written, &mut at) {
            match piece {
                Piece::Head(head) => {
                    fields.reset();
                    keep = match head.kind {
                        kind::SETTINGS if !head.has(flag::ACK) => false,
                        kind::SETTINGS if acks < self.replayed_frames() => {
                            acks += 1;
                            false
                        }
                        kind::WINDOW_UPDATE if head.stream == 0 => false,
                        _ => true,
                    };
                    if keep {
                        out.extend_from_slice(&head.bytes());
                    }
                }
                Piece::Payload(head, r) => {
                    fields.feed(head, &written[r.clone()], |field| {
                        if let (Field::Increment(n), 0) = (field, head.stream) {
                            fresh_window += u64::from(n);
                        }
                    });
                    if keep {
                        out.extend_from_slice(&written[r]);
                    }
                }
                Piece::Preface(_) | Piece::End(_) => {}
            }
        }
        let grant = fresh_window
            .checked_sub(self.recv_window.into())
            .ok_or(Unsettled)?;
        if grant > 0 {
            frame::window_update(&mut out, u32::try_from(grant).map_err(|_| Unsettled)?);
        }
        Ok(out)
    }

    /// A GOAWAY for the client (`NO_ERROR`, every stream it opened
    /// processed): what the server says before it closes a sleeping
    /// connection.
    pub(crate) fn goaway(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD_LEN + 8);
        frame::goaway(&mut out, self.last_stream);
        out
    }

    /// A keep-alive PING for the client while the connection sleeps
    /// (sent by the lot), noted as sent.
    pub(crate) fn keep_alive_ping(&mut self) -> Vec<u8> {
        self.pings = self.pings.saturating_add(1);
        let mut out = Vec::with_capacity(HEAD_LEN + 8);
        frame::ping(&mut out, frame::KEEP_ALIVE_PING);
        out
    }

    /// Answers `read`, bytes the client sent while the connection sleeps,
    /// without waking it, if they are only frames that need no h2: PINGs
    /// (their ACKs appended to `reply`) and ACKs of the keep-alive PINGs
    /// sent while asleep. Returns how many of those ACKs came, to be noted
    /// by [`answered`](Self::answered) once the reply is written; `None`
    /// if any byte needs h2 (any other frame, a PING of another length,
    /// part of a frame), and the connection wakes.
    pub(crate) fn answer(&self, read: &[u8], reply: &mut Vec<u8>) -> Option<u32> {
        let mut pongs = 0;
        let mut frames = read.chunks(HEAD_LEN + 8);
        for bytes in &mut frames {
            let head: &[u8; HEAD_LEN] = bytes.get(..HEAD_LEN)?.try_into().ok()?;
            let head = Head::parse(head);
            let payload: [u8; 8] = bytes.get(HEAD_LEN..)?.try_into().ok()?;
            if (head.kind, head.len, head.stream) != (kind::PING, 8, 0) {
                return None;
            }
            if !head.has(flag::ACK) {
                frame::ping_ack(reply, payload);
            } else if payload == frame::KEEP_ALIVE_PING && pongs < u32::from(self.pings) {
                pongs += 1;
            } else {
                return None;
            }
        }
        Some(pongs)
    }

    /// Notes the ACKs of keep-alive PINGs that [`answer`](Self::answer)
    /// found.
    pub(crate) fn answered(&mut self, pongs: u32) {
        self.pings -= u16::try_from(pongs).unwrap_or(self.pings);
    }
}
