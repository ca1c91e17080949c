//! TLS over a plain transport, on rustls's unbuffered API.
//!
//! rustls's buffered `ServerConnection` keeps its incoming-record buffer
//! (resized before every read and never freed) and its outgoing queue for
//! the life of the session: kilobytes an idle connection, before the socket
//! and the task. Its unbuffered API (`UnbufferedServerConnection`)
//! leaves both buffers to the caller, so here they exist only while bytes
//! are on their way:
//!
//! ```text
//! TlsStream { io, tls: Box<Tls>, bufs: Option<Box<Buffers>> }
//!   tls         the session and, between reads, the start of a record
//!               that arrived, copied to its size: what a parked or
//!               dormant connection keeps beside its fd. The session is
//!               rustls's through the handshake; after a TLS 1.3
//!               handshake it moves to dormant's record layer
//!               ([`traffic`]: alerts and key updates, over [`record`]:
//!               the provider's ciphers and their sequence numbers; the
//!               traffic secrets for key updates, [`secrets`])
//!   bufs        while bytes move, from a per-thread cache, given back
//!               when a read finds nothing:
//!     incoming  ciphertext read and not yet processed: a buffer for the
//!               largest record; while rustls joins a handshake message
//!               larger than that (a large ClientHello, a client's
//!               certificate chain), as large as the message (64 KiB at
//!               most, rustls's limit) and a record more
//!     outgoing  records encrypted and not yet written: freed once written
//!     plain     plaintext decrypted and not yet read: freed once read
//! ```
//!
//! A waiting stream is thus its transport and two pointers; the lot's
//! parked slots hold it whole.
//!
//! The handshake runs inside the reads (the server waits for the
//! ClientHello like for a request), so a connection still handshaking is
//! a PARKED connection like any other, under the header read timeout that
//! counts from accept. Records that arrive with the handshake's last flight
//! (a request sent with the client's Finished) are decrypted in the same
//! read: a wait for socket readiness never hides bytes rustls already has.
//!
//! Parking (see [`Parkable`]): a stream is quiet when its last read found
//! nothing (so no plaintext is held) and its writes are flushed (so no
//! record is unsent); what remains is the session and, at most, the start
//! of a record (or the pieces of a handshake message rustls is joining),
//! which travels with the session (I2).
//!
//! Every read either makes progress, waits for the socket, or fails: a
//! record that is not whole waits for the socket, and so do bytes that
//! processing left behind (the pieces of a handshake message rustls joins
//! in place stay in the buffer, looking like whole records, until the
//! message is whole). Only records a read did not process yet (it stopped
//! at the plaintext before them) count as bytes to read without the
//! socket (`has_buffered`); a wait that counted the joined pieces would
//! never wait, and would spin its worker. The peer's close
//! while a request is answered is a read, never a peek: a `close_notify`
//! ends the stream, application data is read ahead and replayed.

mod buffers;
mod erased;
mod park;
mod record;
mod secrets;
mod session;
mod traffic;

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use rustls::server::ServerConnectionData;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, ReadTraffic, UnbufferedStatus,
};
use rustls::{AlertDescription, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

#[cfg(doc)]
use super::TlsInfo;
use super::tls_info::recording_server_name;
#[cfg(doc)]
use crate::lot::Parkable;
use buffers::{Buffers, JOINING, RECORD, append, room};
use record::MAX_PLAINTEXT;
pub(crate) use secrets::RecordSecrets;
use secrets::recording_secrets;
use session::{Notes, ServerFacts, Session, Tls, tls_error};
use traffic::{Opened, Traffic};

/// A TLS server connection over a plain transport `IO`.
pub struct TlsStream<IO> {
    // Dropped first: a handshake cut short is counted before the socket
    // closes (once the client sees the close, the count is final).
    rec: Records,
    io: IO,
}

/// The session and its buffers: everything of a [`TlsStream`] but the
/// transport.
struct Records {
    tls: Box<Tls>,
    /// `Some` while bytes move (see [`shed`](TlsStream::shed)).
    bufs: Option<Box<Buffers>>,
}

impl Records {
    /// The session and the buffers, taken from this thread's cache if the
    /// stream has none; the start of a record the session kept moves into
    /// them.
    fn split(&mut self) -> (&mut Tls, &mut Buffers) {
        let tls = &mut *self.tls;
        let bufs = self
            .bufs
            .get_or_insert_with(|| Buffers::take(std::mem::take(&mut tls.partial)));
        (tls, bufs)
    }

    /// The bytes read and not yet processed.
    fn unprocessed(&self) -> &[u8] {
        match &self.bufs {
            Some(bufs) => &bufs.incoming[..bufs.in_len],
            None => &self.tls.partial,
        }
    }
}

/// The error of every read and write through a session that failed.
fn session_failed() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "the TLS session failed")
}

/// What processing the records at hand led to.
enum Step {
    /// Plaintext is waiting in `plain`.
    Plain,
    /// More records from the peer are needed.
    NeedRead,
    /// `n` bytes of the caller's data were encrypted into `outgoing`.
    Written(usize),
    /// The peer closed (`close_notify`).
    Eof,
    /// Both sides closed: nothing can be written any more.
    Closed,
    /// The handshake completed, and rustls sent what it had to (its
    /// NewSessionTickets): processing stopped before rustls looked at a
    /// record of the traffic that follows.
    HandshakeDone,
}

impl<IO> TlsStream<IO> {
    /// A connection whose handshake has not begun, on `config`; `http1`
    /// is the configuration to start over with if the server's HTTP/2 is
    /// off, when it differs.
    pub(crate) fn new(
        io: IO,
        config: Arc<ServerConfig>,
        http1: Option<Arc<ServerConfig>>,
    ) -> io::Result<Self> {
        let conn = UnbufferedServerConnection::new(config).map_err(tls_error)?;
        Ok(TlsStream::from_parts(
            io,
            Box::new(Tls {
                session: Session::Rustls(Box::new(conn)),
                partial: Vec::new(),
                records_waiting: false,
                held: None,
                eof: false,
                closing: false,
                failed: false,
                served: http1.map(|http1| Box::new(ServerFacts::Accepted { http1 })),
            }),
        ))
    }

    /// A stream of a session that slept: its buffers are those holding
    /// records the socket did not take while it slept, if any.
    fn from_parts(io: IO, mut tls: Box<Tls>) -> Self {
        let bufs = tls.held.take();
        TlsStream {
            io,
            rec: Records { tls, bufs },
        }
    }

    /// The same session over another kind of transport.
    pub(crate) fn map_io<J>(self, f: impl FnOnce(IO) -> J) -> TlsStream<J> {
        TlsStream {
            io: f(self.io),
            rec: self.rec,
        }
    }

    /// The same session over another kind of transport, if `f` can make
    /// it; gives the stream back otherwise.
    pub(crate) fn try_map_io<J>(
        self,
        f: impl FnOnce(IO) -> Result<J, IO>,
    ) -> Result<TlsStream<J>, Self> {
        let rec = self.rec;
        match f(self.io) {
            Ok(io) => Ok(TlsStream { io, rec }),
            Err(io) => Err(TlsStream { io, rec }),
        }
    }

    /// Whether decrypted bytes wait to be read.
    pub(crate) fn has_plain(&self) -> bool {
        (self.rec.bufs.as_ref()).is_some_and(|bufs| bufs.plain_read < bufs.plain.len())
    }

    /// Whether a read can make progress without the transport: plaintext
    /// waits, or a whole record not yet processed does. A read that returns
    /// plaintext leaves the records after it unprocessed, and their bytes
    /// may have come in the same read from the socket, which cleared its
    /// readiness: a wait for the socket alone would never see them. Bytes
    /// that processing left (a handshake message rustls is joining in
    /// place keeps its records in the buffer) are no progress: a wait that
    /// took them for some would never wait.
    pub(crate) fn has_buffered(&self) -> bool {
        self.has_plain()
            || self.rec.tls.records_waiting
                && match self.rec.unprocessed() {
                    bytes @ [_, _, _, high, low, ..] => {
                        bytes.len() >= 5 + usize::from(u16::from_be_bytes([*high, *low]))
                    }
                    _ => false,
                }
    }

    /// Returns the protocol the client and the server agreed on with ALPN.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.rec.tls.alpn_protocol()
    }

    /// Returns the underlying transport.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// Whether no plaintext waits to be read and no record to be written:
    /// the session alone is left.
    fn is_quiet(&self) -> bool {
        self.rec.bufs.as_ref().is_none_or(|bufs| bufs.is_quiet())
    }

    /// [`process_records`](Self::process_records); while a served
    /// session's handshake is under way, also notes the server name asked
    /// for (when the server reports [`TlsInfo`]) and the handshake's end.
    fn process(&mut self, write: &[u8]) -> io::Result<Step> {
        let step = if let Session::Own(_) = self.rec.tls.session {
            self.process_own(write)?
        } else {
            let step = self.process_handshake(write)?;
            if let (Step::HandshakeDone, Session::Moving(..)) = (&step, &self.rec.tls.session) {
                self.move_out_of_rustls();
            }
            step
        };
        // Processing that stopped early may have left whole records; one
        // that needs more bytes, or took the caller's, went through all.
        self.rec.tls.records_waiting = matches!(step, Step::Plain | Step::HandshakeDone);
        Ok(step)
    }

    /// [`process_records`](Self::process_records) on rustls's session;
    /// while a served session's handshake is under way, also notes its
    /// traffic secrets, the server name asked for (when the server reports
    /// [`TlsInfo`]) and the handshake's end.
    fn process_handshake(&mut self, write: &[u8]) -> io::Result<Step> {
        let Some(ServerFacts::Handshaking { notes, .. }) = self.rec.tls.served.as_deref() else {
            return self.process_records(write);
        };
        let ((step, asked), recorded) = match notes {
            Notes::Nothing => recording_secrets(|| (self.process_records(write), None)),
            Notes::ServerName(_) => {
                recording_secrets(|| recording_server_name(|| self.process_records(write)))
            }
        };
        if let Some(ServerFacts::Handshaking { notes, secrets, .. }) =
            self.rec.tls.served.as_deref_mut()
        {
            if let (Notes::ServerName(name), Some(asked)) = (notes, asked) {
                *name = Some(asked);
            }
            if recorded.is_some() {
                *secrets = recorded;
            }
        }
        let tls = &mut *self.rec.tls;
        if !tls.is_handshaking() {
            tls.handshake_done();
        }
        step
    }

    /// Moves a session whose handshake just completed to dormant's record
    /// layer: rustls has sent all it had to, and has not looked at a record
    /// of the traffic ([`Step::HandshakeDone`]). Later, rustls would have
    /// seen the client's records: a `KeyUpdate` asking for the server's
    /// would leave rustls's answer queued until its next write, which
    /// `dangerous_into_kernel_connection` does not check, and the answer
    /// would be lost.
    fn move_out_of_rustls(&mut self) {
        let tls = &mut *self.rec.tls;
        if tls.eof || tls.closing || tls.failed {
            return;
        }
        let Session::Moving(conn, _) = &mut tls.session else {
            return;
        };
        // rustls is ready to send data once its own records are out (and
        // their transmission acknowledged); it is given no byte, so it
        // reads nothing more.
        loop {
            match conn.process_tls_records(&mut []).state {
                Ok(ConnectionState::WriteTraffic(_)) => break,
                Ok(ConnectionState::TransmitTlsData(data)) => data.done(),
                _ => return,
            }
        }
        let Session::Moving(conn, secrets) = std::mem::replace(&mut tls.session, Session::Lost)
        else {
            return;
        };
        match Traffic::take(*conn, secrets) {
            Ok(traffic) => tls.session = Session::Own(traffic),
            Err(error) => {
                // Not expected (the checks above are rustls's own), but for
                // a key update rustls answered and holds (see
                // `Traffic::take`): the session is gone; so is the
                // connection.
                tracing::debug!(%error, "a TLS session could not leave rustls");
                tls.failed = true;
            }
        }
    }

    /// Reads and writes through dormant's record layer.
    fn process_own(&mut self, write: &[u8]) -> io::Result<Step> {
        let (tls, bufs) = self.rec.split();
        if tls.failed {
            return Err(session_failed());
        }
        let Session::Own(traffic) = &mut tls.session else {
            unreachable!("process_own runs on dormant's record layer");
        };
        if !tls.eof {
            let plain_before = bufs.plain.len();
            let (read, opened) = traffic.open(
                &mut bufs.incoming[..bufs.in_len],
                &mut bufs.plain,
                &mut bufs.outgoing,
            );
            bufs.consume(read);
            match opened {
                Err(fatal) => {
                    tls.failed = true;
                    bufs.in_len = 0;
                    if let Some(alert) = fatal.alert {
                        let _ = traffic.seal_alert(2, alert, &mut bufs.outgoing);
                    }
                    return Err(tls_error(fatal.error));
                }
                Ok(Opened::CloseNotify) => {
                    // What follows `close_notify` is not read.
                    tls.eof = true;
                    bufs.in_len = 0;
                    return Ok(Step::Eof);
                }
                Ok(Opened::Records) if bufs.plain.len() > plain_before => return Ok(Step::Plain),
                Ok(Opened::Records) => {}
            }
        }
        if write.is_empty() {
            Ok(Step::NeedRead)
        } else if tls.closing {
            Ok(Step::Closed)
        } else {
            Ok(Step::Written(traffic.seal(write, &mut bufs.outgoing)?))
        }
    }

    /// Processes the records at hand; with `write` non-empty, encrypts as
    /// much of it as one record holds once the session can send data.
    fn process_records(&mut self, write: &[u8]) -> io::Result<Step> {
        if self.rec.tls.failed {
            return Err(session_failed());
        }
        loop {
            let (tls, bufs) = self.rec.split();
            let Some(conn) = tls.session.rustls() else {
                return Err(session_failed());
            };
            let UnbufferedStatus { discard, state } =
                conn.process_tls_records(&mut bufs.incoming[..bufs.in_len]);
            let step = match state {
                Err(error) => {
                    bufs.consume(discard);
                    self.fail();
                    return Err(tls_error(error));
                }
                Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                    let (extra, failure) = decrypt_into(&mut traffic, &mut bufs.plain);
                    bufs.consume(discard + extra);
                    return match failure {
                        Some(error) => {
                            self.fail();
                            Err(tls_error(error))
                        }
                        None => Ok(Step::Plain),
                    };
                }
                Ok(ConnectionState::EncodeTlsData(mut data)) => {
                    append(
                        &mut bufs.outgoing,
                        256,
                        |room| data.encode(room),
                        encode_size,
                    )?;
                    tls.handshake_just_done().then_some(Ok(Step::HandshakeDone))
                }
                // `outgoing` keeps what was encoded, in order, until it is
                // written: for rustls it is sent.
                Ok(ConnectionState::TransmitTlsData(data)) => {
                    data.done();
                    tls.handshake_just_done().then_some(Ok(Step::HandshakeDone))
                }
                Ok(ConnectionState::BlockedHandshake) => Some(Ok(Step::NeedRead)),
                Ok(ConnectionState::WriteTraffic(mut traffic)) => {
                    if write.is_empty() {
                        Some(Ok(Step::NeedRead))
                    } else if tls.closing {
                        Some(Ok(Step::Closed))
                    } else {
                        let chunk = &write[..write.len().min(MAX_PLAINTEXT)];
                        append(
                            &mut bufs.outgoing,
                            chunk.len() + 64,
                            |room| traffic.encrypt(chunk, room),
                            |e| match e {
                                EncryptError::InsufficientSize(e) => Some(e.required_size),
                                _ => None,
                            },
                        )?;
                        Some(Ok(Step::Written(chunk.len())))
                    }
                }
                Ok(ConnectionState::PeerClosed) => {
                    tls.eof = true;
                    Some(Ok(Step::Eof))
                }
                Ok(ConnectionState::Closed) => {
                    tls.eof = true;
                    Some(Ok(Step::Closed))
                }
                // Early data is never enabled here, and later states are
                // unknown: refuse rather than guess.
                Ok(_) => Some(Err(rustls::Error::General(
                    "unexpected TLS connection state".into(),
                ))),
            };
            bufs.consume(discard);
            match step {
                Some(Ok(step)) => return Ok(step),
                Some(Err(error)) => {
                    self.fail();
                    return Err(tls_error(error));
                }
                None => {}
            }
        }
    }

    /// The session failed: encodes the alert rustls queued, if any, for the
    /// caller to send, and refuses everything from now on.
    ///
    /// rustls hands out queued records before it looks at incoming bytes,
    /// and is asked for them only while it has some: it never sees the
    /// failed bytes again (it would queue a second fatal alert), nor an
    /// empty buffer in their place (handshake messages it has started to
    /// join are ranges of the old one: it would index out of bounds).
    fn fail(&mut self) {
        let (tls, bufs) = self.rec.split();
        tls.failed = true;
        bufs.in_len = 0;
        let Some(conn) = tls.session.rustls() else {
            return;
        };
        while conn.wants_write() {
            let status = conn.process_tls_records(&mut []);
            let Ok(ConnectionState::EncodeTlsData(mut data)) = status.state else {
                return;
            };
            // The alert, and what rustls queued before it failed (a
            // ServerHello and its flight, whose keys protect the alert).
            if append(
                &mut bufs.outgoing,
                256,
                |room| data.encode(room),
                encode_size,
            )
            .is_err()
            {
                return;
            }
        }
    }

    /// Before a wait: gives the buffers back if they are quiet; the start
    /// of a record they hold stays with the session, copied to its size.
    fn shed(&mut self) {
        if let Some(bufs) = self.rec.bufs.take_if(|bufs| bufs.is_quiet()) {
            self.rec.tls.partial = bufs.give();
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    /// Writes `outgoing` to the transport until it is empty.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(bufs) = self.rec.bufs.as_deref_mut() else {
            return Poll::Ready(Ok(()));
        };
        while bufs.sent < bufs.outgoing.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &bufs.outgoing[bufs.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            bufs.sent += n;
        }
        if bufs.outgoing.capacity() > 0 {
            bufs.outgoing = Vec::new();
            bufs.sent = 0;
        }
        Poll::Ready(Ok(()))
    }

    /// [`process`](Self::process); if it fails, the alert it queued goes
    /// out (best effort: as far as the transport takes it now) before the
    /// error is returned.
    fn process_or_alert(&mut self, cx: &mut Context<'_>, write: &[u8]) -> io::Result<Step> {
        self.process(write).inspect_err(|_| {
            let _ = self.poll_send(cx);
        })
    }

    /// Reads more records from the transport: `Ready(Ok(false))` at its
    /// end.
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let (tls, bufs) = self.rec.split();
        // Bytes past a record stay only while rustls joins a handshake
        // message in place; dormant's record layer keeps none.
        let limit = if tls.session.is_rustls() {
            JOINING
        } else {
            RECORD
        };
        if !bufs.make_room(limit) {
            // Not reached while rustls refuses messages over its own limit
            // at their header ("message buffer full" in rustls's own
            // deframer buffer, which sends no alert either).
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS handshake message larger than the protocol allows",
            )));
        }
        let mut read = ReadBuf::new(&mut bufs.incoming[bufs.in_len..]);
        match Pin::new(&mut self.io).poll_read(cx, &mut read) {
            Poll::Pending => {
                self.shed();
                Poll::Pending
            }
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                bufs.in_len += n;
                Poll::Ready(Ok(n > 0))
            }
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
        }
    }

    /// Copies waiting plaintext into `buf`.
    fn read_plain(&mut self, buf: &mut ReadBuf<'_>) {
        let (_, bufs) = self.rec.split();
        let n = buf.remaining().min(bufs.plain.len() - bufs.plain_read);
        buf.put_slice(&bufs.plain[bufs.plain_read..bufs.plain_read + n]);
        bufs.plain_read += n;
        if bufs.plain_read == bufs.plain.len() {
            bufs.plain.clear();
            bufs.plain_read = 0;
        }
    }
}

super::unpin_io!(impl[IO: AsyncRead + AsyncWrite + Unpin] AsyncRead for TlsStream<IO>);
super::unpin_io!(impl[IO: AsyncRead + AsyncWrite + Unpin] AsyncWrite for TlsStream<IO>);

/// tokio's reads and writes (see `unpin_io!`).
impl<IO: AsyncRead + AsyncWrite + Unpin> TlsStream<IO> {
    fn poll_read_unpin(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if self.has_plain() {
                self.read_plain(buf);
                return Poll::Ready(Ok(()));
            }
            if self.rec.tls.eof {
                return Poll::Ready(Ok(()));
            }
            match self.process_or_alert(cx, &[])? {
                // The records after a handshake are the next step's.
                Step::Plain | Step::Eof | Step::Closed | Step::HandshakeDone => continue,
                Step::NeedRead | Step::Written(_) => {}
            }
            // Handshake messages go out before the peer is waited for.
            ready!(self.poll_send(cx))?;
            if !ready!(self.poll_receive(cx))? {
                // The transport's end without `close_notify`: the end of
                // the stream, as clients that just close expect; a record
                // cut short is an error.
                self.rec.tls.eof = true;
                if !self.rec.unprocessed().is_empty() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the connection in the middle of a TLS record",
                    )));
                }
            }
        }
    }

    fn poll_write_unpin(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // Encrypt only once the last records are written: the stream
        // buffers one write at most.
        ready!(self.poll_send(cx))?;
        loop {
            match self.process_or_alert(cx, buf)? {
                Step::Written(n) => {
                    // Started now; whatever the socket does not take yet
                    // goes on the next write or flush.
                    if let Poll::Ready(Err(error)) = self.poll_send(cx) {
                        return Poll::Ready(Err(error));
                    }
                    return Poll::Ready(Ok(n));
                }
                Step::Closed => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                // Plaintext waits for the reader; the peer's close does not
                // stop this side from writing.
                Step::Plain | Step::Eof | Step::HandshakeDone => continue,
                // Still handshaking: the peer has to speak first.
                Step::NeedRead => {
                    ready!(self.poll_send(cx))?;
                    if !ready!(self.poll_receive(cx))? {
                        return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
                    }
                }
            }
        }
    }

    fn poll_flush_unpin(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_send(cx))?;
        // A protocol that keeps a read pending (HTTP/2) may write after its
        // read found nothing: the buffers that write took go back now, not
        // at the next read's wait.
        self.shed();
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown_unpin(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.rec.tls.closing {
            self.queue_close_notify();
        }
        ready!(self.poll_send(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<IO> TlsStream<IO> {
    /// Queues `close_notify`, if the session got that far (a handshake cut
    /// short just closes); nothing is written through the session after
    /// it.
    fn queue_close_notify(&mut self) {
        if self.rec.tls.session.is_rustls() {
            // rustls writes once it has processed the records at hand (their
            // plaintext waits for a reader).
            while let Ok(Step::Plain | Step::HandshakeDone) = self.process(&[]) {}
        }
        let (tls, bufs) = self.rec.split();
        tls.closing = true;
        if tls.failed {
            return;
        }
        match &mut tls.session {
            Session::Own(traffic) => {
                let _ = traffic.seal_alert(1, AlertDescription::CloseNotify, &mut bufs.outgoing);
            }
            Session::Rustls(conn) | Session::Moving(conn, _) => {
                let status = conn.process_tls_records(&mut bufs.incoming[..bufs.in_len]);
                let discard = status.discard;
                if let Ok(ConnectionState::WriteTraffic(mut traffic)) = status.state {
                    let start = bufs.outgoing.len();
                    match traffic.queue_close_notify(room(&mut bufs.outgoing, 64)) {
                        Ok(n) => bufs.outgoing.truncate(start + n),
                        Err(_) => bufs.outgoing.truncate(start),
                    }
                }
                bufs.consume(discard);
            }
            Session::Lost => {}
        }
    }
}

impl<IO: fmt::Debug> fmt::Debug for TlsStream<IO> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsStream")
            .field("io", &self.io)
            .field("alpn", &self.alpn_protocol().map(String::from_utf8_lossy))
            .finish_non_exhaustive()
    }
}

/// The room an `EncodeTlsData` asks for, when it asked for more.
fn encode_size(error: &EncodeError) -> Option<usize> {
    match error {
        EncodeError::InsufficientSize(e) => Some(e.required_size),
        _ => None,
    }
}

/// Decrypts the records `traffic` holds into `plain`: how many more bytes
/// of the incoming buffer they took, and the error that stopped it, if one
/// did.
fn decrypt_into(
    traffic: &mut ReadTraffic<'_, '_, ServerConnectionData>,
    plain: &mut Vec<u8>,
) -> (usize, Option<rustls::Error>) {
    let mut taken = 0;
    while let Some(record) = traffic.next_record() {
        match record {
            Ok(record) => {
                taken += record.discard;
                plain.extend_from_slice(record.payload);
            }
            Err(error) => return (taken, Some(error)),
        }
    }
    (taken, None)
}
