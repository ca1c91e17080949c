//! PARKED in the connection's task: a wait for readiness that holds no
//! buffer.
//!
//! A wait ends with bytes, an end, a deadline or shutdown, or `Quiet`: the
//! transport was readable but its read returned `Pending` (its readiness
//! cleared, its waker registered), for a connection that carries nothing
//! and has no head on the clock. The park step then hands it to the lot,
//! or, if the lot refuses it because a read may find bytes
//! (`Parkable::read_ready`), waits again in the task, without returning to
//! the runtime: so a transport must never report readiness that a read
//! does not consume, or this loop would never end (the TLS record buffer
//! once did). A connection holding part of a request waits here, under
//! its head's deadline, for its socket only. Tests: tests/http1_park.rs,
//! `a_request_in_pieces_does_not_stop_another_connection`, and the other
//! tests of messages in pieces on a one-worker server.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use pin_project_lite::pin_project;
use tokio::io::ReadBuf;
use tokio::time::{Instant, Sleep};
use tracing::{debug, trace};

use super::phase::Clocks;
use crate::life::Life;
use crate::lot::Parkable;
use crate::rewind::Replay;
use crate::shutdown::{Level, Watch};
use crate::state::ServeState;
use crate::timeout::Expiry;
use crate::transport::{Handshake, Seam};

/// How a PARKED wait ended.
pub(super) enum Waited {
    /// Bytes arrived: serve them.
    Readable(Replay),
    /// The peer ended the stream (over TLS, with `close_notify`): close
    /// our side as the transport does (TLS answers with `close_notify`).
    Ended,
    /// The connection is finished: it failed, or a timeout passed.
    Closed,
    /// The server is shutting down, or the connection's age passed: close,
    /// with a goodbye if the protocol has one.
    Shutdown,
    /// The socket was readable but brought nothing for the protocol (TLS
    /// records of its own, such as a KeyUpdate, or the start of a record),
    /// and the connection carries nothing and has no head on the clock: it
    /// may wait without its task again.
    Quiet,
}

pin_project! {
    /// Waits until the transport is readable, then reads into a pool
    /// buffer; or until `deadline` (closes), or shutdown. Written out by
    /// hand because it is most of a PARKED connection's task: an `async`
    /// block would keep more.
    pub(super) struct ParkedWait<'a, T: Seam> {
        stream: &'a mut T,
        state: &'a ServeState<T>,
        carried: Bytes,
        // What closes the connection, unpacked: the task's size is counted
        // in bytes.
        why: Expiry,
        expired: bool,
        // May end with `Waited::Quiet` (see there).
        may_sleep: bool,
        #[pin]
        timer: Option<Sleep>,
        #[pin]
        watch: Watch<'a>,
    }
}

impl<'a, T: Seam> ParkedWait<'a, T> {
    pub(super) fn new(
        stream: &'a mut T,
        state: &'a ServeState<T>,
        carried: Bytes,
        clocks: &Clocks,
        life: &Life,
    ) -> Self {
        let config = &state.shared.config;
        let mut deadline = match clocks.head_since {
            Some(since) => config
                .timeouts
                .head_deadline(since)
                .or_else(|| config.timeouts.idle_deadline(since)),
            None => config.timeouts.idle_deadline(clocks.quiet_since),
        };
        if let Some(at) = life.ends_at {
            if deadline.is_none_or(|(other, _)| at < other) {
                deadline = Some((at, Expiry::Age));
            }
        }
        // A handshake under way (TLS, or a PROXY header) has its own,
        // shorter bound, counted from accept like the head's (see
        // `handshake_done`). (Asked only for a connection whose first
        // request is on the clock: a woken one's wait does not ask its
        // transport.)
        if let (Some(since), Some(limit)) = (clocks.head_since, config.handshake_timeout) {
            let at = since + limit;
            let why = match stream.connected().handshake {
                Handshake::Settled => None,
                Handshake::UnderWay => Some(Expiry::Handshake),
                Handshake::ProxyHeader => Some(Expiry::ProxyHeader),
            };
            if let Some(why) = why.filter(|_| deadline.is_none_or(|(head, _)| at < head)) {
                deadline = Some((at, why));
            }
        }
        ParkedWait {
            may_sleep: clocks.head_since.is_none() && carried.is_empty(),
            stream,
            state,
            carried,
            why: deadline.map_or(Expiry::Idle, |(_, why)| why),
            // A zero delay acts at once: the timer wheel would round it up
            // to its next tick.
            expired: deadline.is_some_and(|(at, _)| at <= Instant::now()),
            timer: deadline.map(|(at, _)| tokio::time::sleep_until(at)),
            watch: state.signal.watch(),
        }
    }
}

impl<T: Seam> ParkedWait<'_, T> {
    /// The bytes it carries, to serve without waiting.
    pub(super) fn into_replay(self) -> Replay {
        Replay {
            carried: self.carried,
            fresh: None,
        }
    }

    /// The deadline of a handshake (TLS, or a PROXY header) passed:
    /// closes the connection if it is still handshaking (`Ready`);
    /// otherwise the handshake completed in time, and the timer moves on to
    /// the request head's deadline, counted from the same accept
    /// (`Pending`, the timer registered).
    fn handshake_done(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Waited> {
        let mut this = self.project();
        if this.stream.connected().handshake != Handshake::Settled {
            return Poll::Ready(timed_out(*this.why, this.state));
        }
        let timeouts = &this.state.shared.config.timeouts;
        let limit = this.state.shared.config.handshake_timeout;
        let accepted = match (this.timer.as_ref().as_pin_ref(), limit) {
            (Some(timer), Some(limit)) => timer.deadline() - limit,
            _ => Instant::now(),
        };
        *this.expired = false;
        match timeouts
            .head_deadline(accepted)
            .or_else(|| timeouts.idle_deadline(accepted))
        {
            Some((at, why)) => {
                *this.why = why;
                let mut timer = this.timer.as_mut();
                timer.set(Some(tokio::time::sleep_until(at)));
                if let Some(timer) = timer.as_pin_mut() {
                    if timer.poll(cx).is_ready() {
                        return Poll::Ready(timed_out(why, this.state));
                    }
                }
            }
            None => this.timer.set(None),
        }
        Poll::Pending
    }
}

/// The deadline of a PARKED wait passed.
fn timed_out<T: Seam>(why: Expiry, state: &ServeState<T>) -> Waited {
    debug!(?why, "timeout while parked");
    why.count(&state.shared.stats);
    match why {
        Expiry::Age => Waited::Shutdown,
        _ => Waited::Closed,
    }
}

impl<T: Seam> Future for ParkedWait<'_, T> {
    type Output = Waited;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Waited> {
        if self.expired && self.why.bounds_handshake() {
            std::task::ready!(self.as_mut().handshake_done(cx));
        }
        let this = self.as_mut().project();
        if *this.expired {
            return Poll::Ready(timed_out(*this.why, this.state));
        }
        // Registered only before returning `Pending`: a woken connection's
        // wait ends in its first poll.
        if this.watch.level() >= Level::Draining {
            return Poll::Ready(Waited::Shutdown);
        }
        // `poll_read_ready` keeps its waker in the connection's readiness
        // cell (the lot's); nothing is added to this task.
        if let Poll::Ready(ready) = Parkable::poll_read_ready(&**this.stream, cx) {
            if let Err(error) = ready {
                closed_while_idle("parked", Some(&error));
                return Poll::Ready(Waited::Closed);
            }
            // The buffer is taken only now, after readiness (I4).
            let mut buf = this.state.shared.pool.take();
            // `poll_read`: after a short read it clears the readiness, so
            // hyper's next read does not make a system call to find the
            // socket empty.
            let mut read = ReadBuf::new(&mut buf);
            match Pin::new(&mut **this.stream).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        // EOF. Bytes of an incomplete request die with the
                        // connection, as they would on plain hyper.
                        closed_while_idle("parked", None);
                        return Poll::Ready(Waited::Ended);
                    }
                    return Poll::Ready(Waited::Readable(Replay {
                        carried: std::mem::take(this.carried),
                        fresh: Some((buf, 0..n)),
                    }));
                }
                Poll::Ready(Err(error)) => {
                    closed_while_idle("parked", Some(&error));
                    return Poll::Ready(Waited::Closed);
                }
                // Nothing for the protocol: readiness cleared, the waker
                // registered, the buffer back to the pool.
                Poll::Pending if *this.may_sleep => return Poll::Ready(Waited::Quiet),
                Poll::Pending => {}
            }
        }
        if let Some(timer) = this.timer.as_pin_mut() {
            if timer.poll(cx).is_ready() {
                if this.why.bounds_handshake() {
                    return self.handshake_done(cx);
                }
                return Poll::Ready(timed_out(*this.why, this.state));
            }
        }
        if this.watch.poll_level(cx) >= Level::Draining {
            return Poll::Ready(Waited::Shutdown);
        }
        Poll::Pending
    }
}

/// Logs a connection its peer closed, or reset, while it waited: a normal
/// end, logged the same way on every rung. Other errors are logged at
/// debug.
pub(crate) fn closed_while_idle(rung: &'static str, error: Option<&io::Error>) {
    use io::ErrorKind::*;
    match error {
        None => trace!(rung, "connection closed by the peer"),
        Some(e)
            if matches!(
                e.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | NotConnected | UnexpectedEof
            ) =>
        {
            trace!(rung, error = %e, "connection closed by the peer")
        }
        Some(e) => debug!(rung, error = %e, "connection failed while idle"),
    }
}
