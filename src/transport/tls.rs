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
//!   tls         the session (keys, sequence numbers, state) and, between
//!               reads, the start of a record that arrived, copied to its
//!               size: what a parked or dormant connection keeps beside
//!               its fd
//!   bufs        while bytes move, from a per-thread cache, given back
//!               when a read finds nothing:
//!     incoming  ciphertext read and not yet processed: a buffer for the
//!               largest record
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
//! of a record, which travels with the session (I2). The peer's close
//! while a request is answered is a read, never a peek: a `close_notify`
//! ends the stream, application data is read ahead and replayed.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use rustls::ServerConfig;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::tls_info::{TlsInfo, recording_server_name};
use super::{Alpn, Connected, Handshake, Handshakes, Peer, Seam, Serving, Stream, Transport};
use crate::lot::{Parkable, Registration};

/// The largest TLS record on the wire: 16 KiB of plaintext plus TLS 1.2's
/// largest expansion and the header.
const RECORD: usize = 16 * 1024 + 2048 + 5;

/// The most plaintext encrypted per record.
const MAX_PLAINTEXT: usize = 16 * 1024;

/// How many [`Buffers`] one thread keeps for reuse.
const CACHED_BUFFERS: usize = 16;

thread_local! {
    // Boxed: a stream takes the box itself, so taking and giving back
    // moves a pointer, never allocates.
    #[allow(clippy::vec_box)]
    static BUFFERS: RefCell<Vec<Box<Buffers>>> = const { RefCell::new(Vec::new()) };
}

/// The session: what a TLS connection keeps while it waits.
pub(crate) struct Tls {
    conn: UnbufferedServerConnection,
    /// The start of a record that arrived before the connection parked.
    partial: Vec<u8>,
    /// The peer sent `close_notify`, or closed the socket: reads return
    /// the end of the stream.
    eof: bool,
    /// `close_notify` was queued.
    closing: bool,
    /// The session failed (a fatal alert was queued): nothing more is read
    /// or written through it.
    failed: bool,
    /// What the session keeps for the server beyond rustls's state:
    /// `Some` from accept until its handshake completes, and after that
    /// only when the server reports [`TlsInfo`] to handlers.
    served: Option<Box<Served>>,
}

/// What a session keeps for the server.
enum Served {
    /// Accepted, not served yet: the configuration that offers HTTP/1.1
    /// alone, to start over with if the server's HTTP/2 is off.
    Accepted { http1: Arc<ServerConfig> },
    /// Served, its handshake under way.
    Handshaking {
        /// Where the handshake's end is counted.
        handshakes: Arc<dyn Handshakes>,
        notes: Notes,
    },
    /// The handshake is complete, and the server reports what it
    /// negotiated.
    Negotiated(TlsInfo),
}

/// What a handshake under way notes for [`TlsInfo`].
enum Notes {
    /// Nothing: the server does not report it.
    Nothing,
    /// The server name the client asked for, once its ClientHello is
    /// processed.
    ServerName(Option<Box<str>>),
}

impl Tls {
    /// Starts serving the session with what the server asks of it: the
    /// HTTP/1.1-only configuration when its HTTP/2 is off, the counting
    /// of the handshake's end, and the notes for [`TlsInfo`].
    fn serve(&mut self, serving: &Serving<'_>) -> io::Result<()> {
        let accepted = self.served.take();
        if !self.conn.is_handshaking() {
            return Ok(());
        }
        if let (Some(Served::Accepted { http1 }), false) =
            (accepted.as_deref(), serving.config.http2)
        {
            // No byte was processed yet: the session starts over.
            self.conn = UnbufferedServerConnection::new(http1.clone()).map_err(tls_error)?;
        }
        let handshaking = Served::Handshaking {
            handshakes: serving.handshakes.clone(),
            notes: if serving.config.tls_info {
                Notes::ServerName(None)
            } else {
                Notes::Nothing
            },
        };
        self.served = Some(match accepted {
            Some(mut served) => {
                *served = handshaking;
                served
            }
            None => Box::new(handshaking),
        });
        Ok(())
    }

    /// The handshake of a served session completed: counts it, and keeps
    /// what it negotiated if the server reports that.
    fn handshake_done(&mut self) {
        let Some(mut served) = self.served.take() else {
            return;
        };
        let Served::Handshaking { handshakes, notes } = &mut *served else {
            self.served = Some(served);
            return;
        };
        handshakes.completed();
        if let Notes::ServerName(name) = notes {
            if let Some(info) = TlsInfo::new(&self.conn, name.take()) {
                *served = Served::Negotiated(info);
                self.served = Some(served);
            }
        }
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        if let Some(Served::Handshaking { handshakes, .. }) = self.served.as_deref() {
            handshakes.failed();
        }
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("partial", &self.partial.len())
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

/// A TLS server connection over a plain transport `IO`.
pub struct TlsStream<IO> {
    io: IO,
    rec: Records,
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

/// What a stream uses while bytes move.
struct Buffers {
    /// [`RECORD`] bytes while reading (or the start of a record, until a
    /// read needs room), `in_len` of them filled.
    incoming: Vec<u8>,
    in_len: usize,
    outgoing: Vec<u8>,
    /// Bytes of `outgoing` already written.
    sent: usize,
    plain: Vec<u8>,
    /// Bytes of `plain` already read.
    plain_read: usize,
}

impl Buffers {
    /// Buffers from this thread's cache (or new ones), holding `partial`
    /// (the start of a record) first. New ones get their record buffer
    /// from the first read that needs it ([`Self::make_room`]): a write
    /// needs none.
    fn take(partial: Vec<u8>) -> Box<Buffers> {
        let mut bufs = BUFFERS
            .with(|cache| cache.borrow_mut().pop())
            .unwrap_or_else(|| {
                Box::new(Buffers {
                    incoming: Vec::new(),
                    in_len: 0,
                    outgoing: Vec::new(),
                    sent: 0,
                    plain: Vec::new(),
                    plain_read: 0,
                })
            });
        bufs.in_len = partial.len();
        if bufs.incoming.len() == RECORD && partial.len() <= RECORD {
            bufs.incoming[..partial.len()].copy_from_slice(&partial);
        } else {
            bufs.incoming = partial;
        }
        bufs
    }

    /// Makes `incoming` a whole record buffer, to read into.
    fn make_room(&mut self) {
        if self.incoming.len() != RECORD {
            let mut record = vec![0; RECORD.max(self.in_len)];
            record[..self.in_len].copy_from_slice(&self.incoming[..self.in_len]);
            self.incoming = record;
        }
    }

    /// Gives quiet buffers back to this thread's cache (or frees them);
    /// returns the start of a record they held, copied to its size.
    fn give(mut self: Box<Self>) -> Vec<u8> {
        let partial = self.incoming[..self.in_len].to_vec();
        if self.incoming.len() != RECORD {
            self.incoming = Vec::new();
        }
        self.in_len = 0;
        self.outgoing = Vec::new();
        self.sent = 0;
        self.plain = Vec::new();
        self.plain_read = 0;
        let _ = BUFFERS.try_with(|cache| {
            let mut cache = cache.borrow_mut();
            if cache.len() < CACHED_BUFFERS {
                cache.push(self);
            }
        });
        partial
    }

    /// Whether no plaintext waits to be read and no record to be written.
    fn is_quiet(&self) -> bool {
        self.plain_read == self.plain.len() && self.sent == self.outgoing.len()
    }

    /// Drops the first `n` processed bytes of `incoming`.
    fn consume(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.incoming.copy_within(n..self.in_len, 0);
        self.in_len -= n;
    }
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
}

fn tls_error(error: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// Appends to `buf` what `encode` writes into the room it is given: `need`
/// bytes first, then as many as its error says it needs (`required`).
fn append<E>(
    buf: &mut Vec<u8>,
    mut need: usize,
    mut encode: impl FnMut(&mut [u8]) -> Result<usize, E>,
    required: impl Fn(&E) -> Option<usize>,
) -> io::Result<()>
where
    E: std::error::Error + Send + Sync + 'static,
{
    loop {
        let start = buf.len();
        match encode(room(buf, need)) {
            Ok(n) => {
                buf.truncate(start + n);
                return Ok(());
            }
            Err(error) => {
                buf.truncate(start);
                match required(&error) {
                    Some(n) if n > need => need = n,
                    _ => return Err(io::Error::other(error)),
                }
            }
        }
    }
}

/// Appends `n` zeroed bytes to `buf` and returns them, to be written into.
fn room(buf: &mut Vec<u8>, n: usize) -> &mut [u8] {
    let start = buf.len();
    buf.resize(start + n, 0);
    &mut buf[start..]
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
                conn,
                partial: Vec::new(),
                eof: false,
                closing: false,
                failed: false,
                served: http1.map(|http1| Box::new(Served::Accepted { http1 })),
            }),
        ))
    }

    fn from_parts(io: IO, tls: Box<Tls>) -> Self {
        TlsStream {
            io,
            rec: Records { tls, bufs: None },
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
    /// waits, or a whole record does. A read that returns plaintext leaves
    /// the records after it unprocessed, and their bytes may have come in
    /// the same read from the socket, which cleared its readiness: a wait
    /// for the socket alone would never see them.
    pub(crate) fn has_buffered(&self) -> bool {
        self.has_plain()
            || match self.rec.unprocessed() {
                bytes @ [_, _, _, high, low, ..] => {
                    bytes.len() >= 5 + usize::from(u16::from_be_bytes([*high, *low]))
                }
                _ => false,
            }
    }

    /// Returns the protocol the client and the server agreed on with ALPN.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.rec.tls.conn.alpn_protocol()
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
        let Some(Served::Handshaking { notes, .. }) = self.rec.tls.served.as_deref() else {
            return self.process_records(write);
        };
        let step = match notes {
            Notes::Nothing => self.process_records(write),
            Notes::ServerName(_) => {
                let (step, asked) = recording_server_name(|| self.process_records(write));
                if let Some(Served::Handshaking {
                    notes: Notes::ServerName(name),
                    ..
                }) = self.rec.tls.served.as_deref_mut()
                {
                    if asked.is_some() {
                        *name = asked;
                    }
                }
                step
            }
        };
        let tls = &mut *self.rec.tls;
        if !tls.conn.is_handshaking() {
            tls.handshake_done();
        }
        step
    }

    /// Processes the records at hand; with `write` non-empty, encrypts as
    /// much of it as one record holds once the session can send data.
    fn process_records(&mut self, write: &[u8]) -> io::Result<Step> {
        if self.rec.tls.failed {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the TLS session failed",
            ));
        }
        loop {
            let (tls, bufs) = self.rec.split();
            let UnbufferedStatus { discard, state } = tls
                .conn
                .process_tls_records(&mut bufs.incoming[..bufs.in_len]);
            let step = match state {
                Err(error) => {
                    bufs.consume(discard);
                    self.fail();
                    return Err(tls_error(error));
                }
                Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                    let mut extra = 0;
                    let mut failure = None;
                    while let Some(record) = traffic.next_record() {
                        match record {
                            Ok(record) => {
                                extra += record.discard;
                                bufs.plain.extend_from_slice(record.payload);
                            }
                            Err(error) => {
                                failure = Some(error);
                                break;
                            }
                        }
                    }
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
                        |e| match e {
                            EncodeError::InsufficientSize(e) => Some(e.required_size),
                            _ => None,
                        },
                    )?;
                    None
                }
                // `outgoing` keeps what was encoded, in order, until it is
                // written: for rustls it is sent.
                Ok(ConnectionState::TransmitTlsData(data)) => {
                    data.done();
                    None
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
        while tls.conn.wants_write() {
            let status = tls.conn.process_tls_records(&mut []);
            let Ok(ConnectionState::EncodeTlsData(mut data)) = status.state else {
                return;
            };
            let start = bufs.outgoing.len();
            match data.encode(room(&mut bufs.outgoing, 64)) {
                Ok(n) => bufs.outgoing.truncate(start + n),
                Err(_) => {
                    bufs.outgoing.truncate(start);
                    return;
                }
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

    /// Reads more records from the transport: `Ready(Ok(false))` at its
    /// end.
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        let (_, bufs) = self.rec.split();
        bufs.make_room();
        if bufs.in_len >= RECORD {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "TLS record larger than the protocol allows",
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

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.has_plain() {
                this.read_plain(buf);
                return Poll::Ready(Ok(()));
            }
            if this.rec.tls.eof {
                return Poll::Ready(Ok(()));
            }
            let step = match this.process(&[]) {
                Ok(step) => step,
                Err(error) => {
                    // Best effort: an alert rustls queued goes out first.
                    let _ = this.poll_send(cx);
                    return Poll::Ready(Err(error));
                }
            };
            match step {
                Step::Plain | Step::Eof | Step::Closed => continue,
                Step::NeedRead | Step::Written(_) => {}
            }
            // Handshake messages go out before the peer is waited for.
            ready!(this.poll_send(cx))?;
            if !ready!(this.poll_receive(cx))? {
                // The transport's end without `close_notify`: the end of
                // the stream, as clients that just close expect; a record
                // cut short is an error.
                this.rec.tls.eof = true;
                if !this.rec.unprocessed().is_empty() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed the connection in the middle of a TLS record",
                    )));
                }
            }
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // Encrypt only once the last records are written: the stream
        // buffers one write at most.
        ready!(this.poll_send(cx))?;
        loop {
            match this.process(buf)? {
                Step::Written(n) => {
                    // Started now; whatever the socket does not take yet
                    // goes on the next write or flush.
                    if let Poll::Ready(Err(error)) = this.poll_send(cx) {
                        return Poll::Ready(Err(error));
                    }
                    return Poll::Ready(Ok(n));
                }
                Step::Closed => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                // Plaintext waits for the reader; the peer's close does not
                // stop this side from writing.
                Step::Plain | Step::Eof => continue,
                // Still handshaking: the peer has to speak first.
                Step::NeedRead => {
                    ready!(this.poll_send(cx))?;
                    if !ready!(this.poll_receive(cx))? {
                        return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
                    }
                }
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.rec.tls.closing {
            let (tls, bufs) = this.rec.split();
            tls.closing = true;
            // `close_notify`, if the session got that far; a handshake cut
            // short just closes.
            let status = tls
                .conn
                .process_tls_records(&mut bufs.incoming[..bufs.in_len]);
            if let Ok(ConnectionState::WriteTraffic(mut traffic)) = status.state {
                let start = bufs.outgoing.len();
                match traffic.queue_close_notify(room(&mut bufs.outgoing, 64)) {
                    Ok(n) => bufs.outgoing.truncate(start + n),
                    Err(_) => bufs.outgoing.truncate(start),
                }
            }
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
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

/// A TLS connection outside tokio: the transport's parked form and the
/// session.
#[derive(Debug)]
pub struct DormantTls<D> {
    fd: D,
    tls: Box<Tls>,
}

impl<D: AsFd> AsFd for DormantTls<D> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl<IO> TlsStream<IO> {
    /// Splits a quiet stream into its transport and its session, giving
    /// back the buffers; the stream back if it is not quiet.
    fn into_session(mut self) -> Result<(IO, Box<Tls>), Self> {
        if !self.is_quiet() || self.has_buffered() {
            // The driver parks only quiet connections (a read found
            // nothing, and every write was flushed), and the upgrade lot
            // hands back a stream with bytes to read: a record held here
            // would wait for a readiness the socket never gives again.
            return Err(self);
        }
        self.shed();
        Ok((self.io, self.rec.tls))
    }
}

impl<IO> Parkable for TlsStream<IO>
where
    IO: Parkable + AsyncRead + AsyncWrite + Unpin,
    IO::Dormant: io::Write,
{
    type Dormant = DormantTls<IO::Dormant>;

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_buffered() {
            return Poll::Ready(Ok(()));
        }
        self.io.poll_read_ready(cx)
    }

    fn read_ready(&self) -> bool {
        self.has_buffered() || self.io.read_ready()
    }

    fn into_dormant(self) -> Result<(DormantTls<IO::Dormant>, Registration), Self> {
        let (io, tls) = self.into_session()?;
        match io.into_dormant() {
            Ok((fd, registration)) => Ok((DormantTls { fd, tls }, registration)),
            Err(io) => Err(TlsStream::from_parts(io, tls)),
        }
    }

    fn from_dormant(dormant: DormantTls<IO::Dormant>, registration: Registration) -> Self {
        TlsStream::from_parts(IO::from_dormant(dormant.fd, registration), dormant.tls)
    }

    fn peer_closed(_: &DormantTls<IO::Dormant>) -> Option<io::Result<bool>> {
        // A `close_notify` is a record to decrypt: the connection's first
        // read finds it.
        None
    }

    fn close_dormant(mut dormant: DormantTls<IO::Dormant>) {
        // `close_notify`, if the handshake is done and the socket takes
        // the few bytes at once; a close without it otherwise. (rustls is
        // given the bytes it was given last, as it must be.)
        let tls = &mut *dormant.tls;
        let status = tls.conn.process_tls_records(&mut tls.partial);
        if let Ok(ConnectionState::WriteTraffic(mut traffic)) = status.state {
            let mut alert = [0; 64];
            if let Ok(n) = traffic.queue_close_notify(&mut alert) {
                let _ = io::Write::write(&mut dormant.fd, &alert[..n]);
            }
        }
    }

    fn close(self) {
        if let Ok((dormant, _)) = self.into_dormant() {
            Self::close_dormant(dormant);
        }
    }
}

impl<IO> Seam for TlsStream<IO>
where
    IO: Seam,
    IO::Dormant: io::Write,
{
    type Addr = IO::Addr;

    fn peer_addr(&self) -> io::Result<IO::Addr> {
        self.io.peer_addr()
    }

    fn poll_peer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Peer>> {
        // `close_notify` is a record: a read, never a peek.
        super::poll_read_ahead(self, cx)
    }

    fn connected(&self) -> Connected {
        let tls = &*self.rec.tls;
        if tls.conn.is_handshaking() {
            return Connected {
                handshake: Handshake::UnderWay,
                ..Connected::default()
            };
        }
        Connected {
            handshake: Handshake::Settled,
            alpn: match tls.conn.alpn_protocol() {
                None => Alpn::Unchosen,
                Some(b"h2") => Alpn::H2,
                Some(_) => Alpn::Http1,
            },
            tls_info: match tls.served.as_deref() {
                Some(Served::Negotiated(info)) => Some(info.clone()),
                _ => None,
            },
        }
    }

    fn into_stream(self) -> io::Result<Stream> {
        let TlsStream { io, rec } = self;
        Ok(Stream::from_tls(TlsStream {
            io: io.into_stream()?,
            rec,
        }))
    }

    fn dormant_from_stream(stream: Stream) -> Result<io::Result<DormantTls<IO::Dormant>>, Stream> {
        let tls = stream.into_tls()?;
        let (inner, tls) = match tls.into_session() {
            Ok(parts) => parts,
            Err(_) => {
                return Ok(Err(io::Error::other(
                    "a TLS stream with data on its way cannot sleep",
                )));
            }
        };
        match IO::dormant_from_stream(inner) {
            Ok(fd) => Ok(fd.map(|fd| DormantTls { fd, tls })),
            Err(inner) => Err(Stream::from_tls(TlsStream::from_parts(inner, tls))),
        }
    }

    fn dormant_into_stream(dormant: DormantTls<IO::Dormant>) -> io::Result<Stream> {
        let inner = IO::dormant_into_stream(dormant.fd)?;
        Ok(Stream::from_tls(TlsStream::from_parts(inner, dormant.tls)))
    }
}

impl<IO> Transport for TlsStream<IO>
where
    IO: Transport,
    <IO::Served as Parkable>::Dormant: io::Write,
{
    type Addr = IO::Addr;

    fn peer_addr(&self) -> io::Result<IO::Addr> {
        self.io.peer_addr()
    }

    type Served = TlsStream<IO::Served>;

    fn serve_in(self, serving: &Serving<'_>) -> io::Result<TlsStream<IO::Served>> {
        let TlsStream { io, mut rec } = self;
        let io = io.serve_in(serving)?;
        rec.tls.serve(serving)?;
        Ok(TlsStream { io, rec })
    }
}
