//! A WebSocket between messages: asleep in the parking lot with its state,
//! woken by its client's next frame or by a write that found its socket
//! full; how it reads, answers and closes.
//!
//! # Where a socket is
//!
//! ```text
//!             101 written                 read found nothing, queue empty
//!  Upgrading ───────────► Awake (a task) ─────────────────────────────► Asleep(key)
//!     │ sends queue          │ ▲  sends queue; the task runs the           │ │
//!     │                      │ │  handler per message, answers pings,      │ │ sends write
//!     │                      │ │  flushes the queue                        │ │ to the socket
//!     │                      │ └──────── bytes arrived; or a send ─────────┘ │ at once
//!     │                      │           found the socket full               │
//!     └──────────────────────┴──► Closed ◄── the peer vanished, shutdown ────┘
//! ```
//!
//! Every socket has a [`Link`] (see [`link`](super::link)), shared by
//! its [`Sender`]s and whoever serves it.
//!
//! An awake socket's reads make progress or end: the reader takes every
//! byte it is fed (a header byte by byte, a payload as it comes), and a
//! read that found less than a buffer puts the socket back to sleep,
//! with the part of a frame it holds kept in the reader, not counted as
//! bytes to read; the lot's registration reports the next ones (tests:
//! tests/ws_sleep.rs, `a_frame_in_pieces_does_not_stop_another_socket`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Poll, ready};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::frame::Frame;
use super::link::{At, Link, Sender, overflowed, unless_overflowed};
use super::message::{CloseCode, CloseFrame, Message};
use super::reader::{Event, Reader, Refused, Rules};
use crate::pool::PooledBytes;
use crate::upgrade::{self, Drain, Lot, Upgraded, Woken};

/// What a closing socket reads at most beyond its limits: its client's
/// close frame comes after the rest of the frame in flight (a message it
/// refused), which may be as large as the limits, and after what the client
/// sent before it saw the server's close frame.
const CLOSING_READ: usize = 1 << 20;

/// The most a closing socket reads: its limits (at most 64 MiB) and
/// [`CLOSING_READ`].
fn closing_budget(rules: Rules) -> usize {
    let limits = rules.frame.max(rules.message) as usize;
    limits.min(64 << 20) + CLOSING_READ
}

/// What a socket is served over.
pub(crate) enum Wire {
    /// An upgraded HTTP/1.1 connection of the lot's: the socket sleeps in
    /// the lot between messages.
    Lot(Upgraded),
    /// An HTTP/2 stream (RFC 8441): hyper's, in its connection, so the
    /// socket stays awake in its task between messages.
    H2(Box<TokioIo<hyper::upgrade::Upgraded>>),
}

impl Wire {
    /// Reads what the client sends, waiting for it: `None` at its end.
    async fn read(&mut self) -> io::Result<Option<PooledBytes>> {
        match self {
            Wire::Lot(stream) => stream.read_pooled().await,
            Wire::H2(stream) => read_pooled(&mut **stream, true).await,
        }
    }

    /// Reads what is there now: `Err(WouldBlock)` if nothing is.
    async fn read_now(&mut self) -> io::Result<Option<PooledBytes>> {
        match self {
            Wire::Lot(stream) => stream.read_pooled_now().await,
            Wire::H2(stream) => read_pooled(&mut **stream, false).await,
        }
    }
}

/// Reads from `io` into a buffer of the upgraded streams' pool, taken
/// once bytes are there; waiting for them if `wait`, else
/// `Err(WouldBlock)` if none are.
async fn read_pooled(
    io: &mut (impl AsyncRead + Unpin),
    wait: bool,
) -> io::Result<Option<PooledBytes>> {
    std::future::poll_fn(|cx| {
        let mut buf = crate::pool::upgraded().take();
        let mut read = ReadBuf::new(&mut buf);
        match Pin::new(&mut *io).poll_read(cx, &mut read) {
            Poll::Pending if wait => Poll::Pending,
            Poll::Pending => Poll::Ready(Err(io::ErrorKind::WouldBlock.into())),
            Poll::Ready(Err(error)) => Poll::Ready(Err(error)),
            Poll::Ready(Ok(())) => Poll::Ready(Ok(match read.filled().len() {
                0 => None,
                n => Some(PooledBytes::new(buf, n)),
            })),
        }
    })
    .await
}

impl AsyncWrite for Wire {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Wire::Lot(stream) => Pin::new(stream).poll_write(cx, buf),
            Wire::H2(stream) => Pin::new(&mut **stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Lot(stream) => Pin::new(stream).poll_flush(cx),
            Wire::H2(stream) => Pin::new(&mut **stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Lot(stream) => Pin::new(stream).poll_shutdown(cx),
            Wire::H2(stream) => Pin::new(&mut **stream).poll_shutdown(cx),
        }
    }
}

/// A sleeping socket: what it keeps, boxed in the lot as its handler.
pub(crate) struct Sleeper<S, F> {
    link: Arc<Link>,
    /// The lot it sleeps in (for a drain at shutdown, without the link's
    /// lock, which may be held where the lot calls back at once).
    lot: Lot,
    state: S,
    handler: F,
    reader: Reader,
}

/// Serves a socket over an HTTP/2 stream (RFC 8441) once the answer is
/// written: awake in this task for its whole life (an HTTP/2 stream is
/// hyper's, inside its connection, and cannot sleep in the lot), not in
/// the server's WebSocket gauges, with no pings or idle timeout from the
/// lot (HTTP/2's own keep-alive applies to the connection).
pub(crate) async fn over_h2<S, F, Fut>(
    link: Arc<Link>,
    state: S,
    mut handler: F,
    upgrade: hyper::upgrade::OnUpgrade,
) where
    S: Send + 'static,
    F: FnMut(S, Message, Sender) -> Fut + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    let Ok(upgraded) = upgrade.await else {
        link.close();
        handler(state, Message::Close(None), Sender(link)).await;
        return;
    };
    link.lock().set_at(At::Awake);
    let awake = Awake {
        _closer: Closer(Some(link.clone())),
        link,
        lot: None,
        state: Some(state),
        handler,
        reader: Reader::default(),
    };
    awake
        .sleep(Wire::H2(Box::new(TokioIo::new(upgraded))))
        .await;
}

/// Serves a socket once its upgrade completes: it sleeps at once (or reads
/// the bytes that came with the upgrade first).
pub(crate) async fn upgraded<S, F, Fut>(
    link: Arc<Link>,
    state: S,
    mut handler: F,
    upgrade: upgrade::OnUpgrade,
) where
    S: Send + 'static,
    F: FnMut(S, Message, Sender) -> Fut + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    let parts = match upgrade.await {
        Ok(parts) => parts,
        Err(_) => {
            link.close();
            handler(state, Message::Close(None), Sender(link)).await;
            return;
        }
    };
    {
        let mut link = link.lock();
        link.lot = Some(parts.lot.clone());
        // What was sent before the upgrade counts from now on.
        let queued = link.queued();
        if let Some(counters) = link.counters() {
            counters.queued.fetch_add(queued, Relaxed);
        }
        link.set_at(At::Awake);
    }
    let sleeper = Sleeper {
        link,
        lot: parts.lot.clone(),
        state,
        handler,
        reader: Reader::default(),
    };
    Awake::from(sleeper)
        .sleep(Wire::Lot(Upgraded::from(parts)))
        .await;
}

impl<S, F, Fut> upgrade::Handler for Sleeper<S, F>
where
    S: Send + 'static,
    F: FnMut(S, Message, Sender) -> Fut + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    fn run(self: Box<Self>, woken: Woken) {
        // Taken before the task starts: the drain must not find the
        // server's connections all gone while a goodbye is on its way.
        let drain = match woken {
            Woken::Shutdown(_) => Some(self.lot.drain()),
            _ => None,
        };
        // The sleeper becomes a task's only once the task runs: a runtime
        // that shuts down drops the task at once, maybe under the link's
        // lock (a send that woke the socket), and only an `Awake` closes
        // the link when dropped.
        let sleeper = *self;
        tokio::spawn(async move { Awake::from(sleeper).woken(woken, drain).await });
    }

    fn sleeper(&self) -> usize {
        self.link.id()
    }

    fn due(&mut self, write: &mut dyn FnMut(&[u8]) -> bool) -> Option<Duration> {
        self.link.keep_alive.due(write)
    }
}

/// A socket with a task: what its sleeper kept.
struct Awake<S, F> {
    link: Arc<Link>,
    /// The lot it sleeps in; `None` over HTTP/2, where it never sleeps.
    lot: Option<Lot>,
    /// `None` only while the handler runs.
    state: Option<S>,
    handler: F,
    reader: Reader,
    /// Closes the link if the task unwinds (a handler's panic).
    _closer: Closer,
}

/// Closes a link when dropped, unless disarmed.
struct Closer(Option<Arc<Link>>);

impl Drop for Closer {
    fn drop(&mut self) {
        if let Some(link) = self.0.take() {
            link.close();
        }
    }
}

impl<S, F> From<Sleeper<S, F>> for Awake<S, F> {
    fn from(sleeper: Sleeper<S, F>) -> Self {
        let Sleeper {
            link,
            lot,
            state,
            handler,
            reader,
        } = sleeper;
        Awake {
            _closer: Closer(Some(link.clone())),
            link,
            lot: Some(lot),
            state: Some(state),
            handler,
            reader,
        }
    }
}

/// How far a closing socket goes.
struct Bounds {
    deadline: tokio::time::Instant,
    /// Bytes it may still read.
    budget: usize,
}

impl Bounds {
    /// Takes `n` bytes read from the budget: false if they were more.
    fn take(&mut self, n: usize) -> bool {
        match self.budget.checked_sub(n) {
            Some(left) => {
                self.budget = left;
                true
            }
            None => false,
        }
    }
}

/// How a socket's connection ended, and the goodbye still owed to it.
struct Ending {
    end: End,
    goodbye: Option<Goodbye>,
}

impl From<End> for Ending {
    /// An end that owes no goodbye: the connection is gone.
    fn from(end: End) -> Ending {
        Ending { end, goodbye: None }
    }
}

/// A connection's last words, said after the handler heard of its end
/// (see [`Goodbye::say`]).
struct Goodbye {
    stream: Wire,
    bounds: Bounds,
    /// The client's close frame did not come (and will not be read): read
    /// until the client closes its side.
    until_eof: bool,
}

impl Goodbye {
    /// The transport's own goodbye (TLS: `close_notify`) and the end of
    /// the stream (the server closes the connection first, RFC 6455,
    /// 7.1.1); then what the client sent is read and dropped, so that the
    /// socket is not closed with bytes unread (the kernel would answer
    /// with a reset, which can destroy the close frame on its way): what
    /// is there, once the client's close frame came (nothing should follow
    /// it); else everything until the client, which now has the server's
    /// close frame and end, closes its side. Within the bounds, not until
    /// a pause: a client still sending a large message pauses as it likes.
    async fn say(mut self) {
        let deadline = self.bounds.deadline;
        let bounds = &mut self.bounds;
        let stream = &mut self.stream;
        let until_eof = self.until_eof;
        let goodbye = async {
            stream.shutdown().await?;
            loop {
                let read = match until_eof {
                    true => stream.read().await?,
                    false => stream.read_now().await?,
                };
                match read {
                    Some(bytes) if bounds.take(bytes.len()) => {}
                    _ => break,
                }
            }
            io::Result::Ok(())
        };
        let _ = tokio::time::timeout_at(deadline, goodbye).await;
    }
}

/// How a socket's connection ends.
enum End {
    /// The client sent its close frame (the server answered it, if it had
    /// not sent its own first).
    Closed(Option<CloseFrame>),
    /// The connection ended without a close frame from the client.
    Lost,
}

impl<S, F, Fut> Awake<S, F>
where
    S: Send + 'static,
    F: FnMut(S, Message, Sender) -> Fut + Send + 'static,
    Fut: Future<Output = S> + Send + 'static,
{
    /// Serves a socket the lot woke; at shutdown, the drain waits for its
    /// goodbye.
    async fn woken(mut self, woken: Woken, drain: Option<Drain>) {
        let to_write = {
            let mut state = self.link.lock();
            state.set_at(At::Awake);
            std::mem::take(&mut state.woken_to_write)
        };
        let expired = self.link.keep_alive.expired();
        let ended = match woken {
            Woken::Readable(stream) | Woken::Eof(stream) if expired.is_some() => {
                let reason = expired.unwrap_or_default();
                // A client that stopped answering may not answer this
                // either: the handler hears of the end at once, and the
                // goodbye waits (bounded) for the client to close.
                self.push_control(Frame::close(CloseCode::GOING_AWAY, reason));
                self.hang_up(Wire::Lot(stream)).await
            }
            Woken::Readable(stream) | Woken::Eof(stream) => {
                let mut stream = Wire::Lot(stream);
                let served = if to_write {
                    // Woken by a send, not by bytes: write, then sleep (the
                    // lot wakes it at once if bytes came meanwhile).
                    match self.write_queue(&mut stream).await {
                        Ok(()) => Ok(stream),
                        Err(_) => Err(End::Lost.into()),
                    }
                } else {
                    // The first read waits for the readiness that woke the
                    // socket: its stream was just registered with tokio,
                    // which has not seen it yet.
                    let read = stream.read().await;
                    self.serve(stream, read).await
                };
                match served {
                    Ok(stream) => return self.sleep(stream).await,
                    Err(ended) => ended,
                }
            }
            Woken::Shutdown(stream) => self.shut_down(Wire::Lot(stream), drain.as_ref()).await,
            Woken::Failed(_) => End::Lost.into(),
        };
        self.end(ended).await;
    }

    /// Handles what the read `read` brought, and reads and handles what
    /// arrives after it until a read finds nothing: the stream, to sleep
    /// again; or how the connection ended.
    async fn serve(
        &mut self,
        mut stream: Wire,
        mut read: io::Result<Option<PooledBytes>>,
    ) -> Result<Wire, Ending> {
        // Set before the socket first slept: read once a wake.
        let rules = self.link.lock().settings.rules;
        loop {
            let bytes = match read {
                Ok(Some(bytes)) => bytes,
                Ok(None) | Err(_) => return Err(End::Lost.into()),
            };
            self.link.keep_alive.heard();
            let mut input = &bytes[..];
            loop {
                match self.reader.read(&mut input, rules) {
                    Ok(Some(Event::Close(frame))) => return Err(self.closed(frame, stream).await),
                    Ok(Some(event)) => self.handle(event).await,
                    Ok(None) => break,
                    Err(refused) => return Err(self.refuse(refused, stream, input).await),
                }
            }
            let full = bytes.is_full();
            drop(bytes);
            if self.write_queue(&mut stream).await.is_err() {
                return Err(End::Lost.into());
            }
            if !full {
                // Likely all there was: the lot's registration reports
                // bytes that came meanwhile at once, and a TLS session's
                // buffered records wake it again (`Lot::sleep`).
                return Ok(stream);
            }
            read = match stream.read_now().await {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(stream),
                read => read,
            };
        }
    }

    /// Acts on a message, a ping or a pong.
    async fn handle(&mut self, event: Event) {
        let closing = self.link.lock().closing;
        match event {
            // After its close frame, the server discards what comes.
            Event::Message(_) if closing => {}
            Event::Message(message) => {
                self.link.keep_alive.message();
                self.call(message).await;
            }
            Event::Ping(payload) => {
                if !closing {
                    self.push_control(Frame::pong(&payload));
                }
            }
            Event::Pong | Event::Close(_) => {}
        }
    }

    /// The client's close frame came: the server answers it (unless it
    /// sent its own first), and says goodbye.
    async fn closed(&mut self, frame: Option<CloseFrame>, mut stream: Wire) -> Ending {
        if !self.link.lock().closing {
            // The answer echoes the code (RFC 6455, 5.5.1).
            let code = frame.as_ref().map_or(CloseCode::NONE, |f| f.code);
            self.push_control(Frame::close(code, ""));
        }
        let bounds = self.bounds();
        let _ = tokio::time::timeout_at(bounds.deadline, self.write_queue(&mut stream)).await;
        Ending {
            end: End::Closed(frame),
            goodbye: Some(Goodbye {
                stream,
                bounds,
                until_eof: false,
            }),
        }
    }

    /// Runs the handler on a message: the state moves through it.
    async fn call(&mut self, message: Message) {
        if let Some(state) = self.state.take() {
            let sender = Sender(self.link.clone());
            self.state = Some((self.handler)(state, message, sender).await);
        }
    }

    /// Answers a client that broke the protocol or a limit with the close
    /// code for it (RFC 6455, 7.1.7), then waits for its close frame (the
    /// rest of this read, `rest`, first), as [`await_close`](Self::await_close).
    async fn refuse(&mut self, refused: Refused, stream: Wire, rest: &[u8]) -> Ending {
        if !self.link.lock().closing {
            self.push_control(Frame::close(refused.code, refused.reason));
        }
        self.await_close(stream, rest, Some(refused)).await
    }

    /// Queues a control frame the protocol owes (a pong, a close), past
    /// the queue's limit: it is small, and bounded by what the client sent.
    fn push_control(&self, frame: Frame) {
        let mut state = self.link.lock();
        state.closing |= frame.is_close();
        state.push(frame.bytes(false).clone());
    }

    /// The server shuts down: a close frame (1001) after what is queued,
    /// and a wait for the client's answer, cut short when the server's
    /// grace period is over (then no goodbye either).
    async fn shut_down(&mut self, mut stream: Wire, drain: Option<&Drain>) -> Ending {
        if !self.link.lock().closing {
            self.push_control(Frame::close(
                CloseCode::GOING_AWAY,
                "the server is shutting down",
            ));
        }
        self.reader.closing(None);
        let mut bounds = self.bounds();
        let deadline = bounds.deadline;
        let answer = async {
            if self.write_queue(&mut stream).await.is_err() {
                return End::Lost;
            }
            self.client_close(&mut stream, &mut bounds).await
        };
        let forced = async {
            match drain {
                Some(drain) => drain.forced().await,
                None => std::future::pending().await,
            }
        };
        let end = tokio::select! {
            answered = tokio::time::timeout_at(deadline, answer) => answered.unwrap_or(End::Lost),
            () = forced => End::Lost,
        };
        // The transport's goodbye (TLS: `close_notify`), unless the grace
        // period is over.
        let goodbye = drain
            .is_none_or(|drain| !drain.is_forced())
            .then_some(Goodbye {
                stream,
                bounds,
                until_eof: false,
            });
        Ending { end, goodbye }
    }

    /// How far a closing socket goes: until its close timeout
    /// (`WebSocketUpgrade::close_timeout`), reading at most its
    /// [`closing_budget`].
    fn bounds(&self) -> Bounds {
        let settings = self.link.lock().settings;
        let within = Duration::from_millis(settings.close_timeout.into());
        Bounds {
            deadline: tokio::time::Instant::now() + within,
            budget: closing_budget(settings.rules),
        }
    }

    /// The server sent (or queued) its close frame, maybe refusing what
    /// the client sent (`refused`): writes what is queued, then reads and
    /// drops what the client still sends (`rest` first: the rest of a
    /// refused message, what the client sent before it saw the close
    /// frame) until its close frame, within the close timeout and the
    /// closing budget. After a refusal of the client's framing itself
    /// (1002), its close frame cannot be found: the server hangs up at
    /// once ([`hang_up`](Self::hang_up)).
    async fn await_close(
        &mut self,
        mut stream: Wire,
        rest: &[u8],
        refused: Option<Refused>,
    ) -> Ending {
        self.reader.closing(refused);
        if self.reader.is_dropping() {
            return self.hang_up(stream).await;
        }
        let mut bounds = self.bounds();
        let deadline = bounds.deadline;
        let answer = async {
            if let Some(end) = self.close_frame_in(rest) {
                let _ = self.write_queue(&mut stream).await;
                return end;
            }
            // The close frame waits until the client has sent the rest of
            // the message the server refused.
            if let Some(end) = self.skip_refused(&mut stream, &mut bounds).await {
                let _ = self.write_queue(&mut stream).await;
                return end;
            }
            if self.write_queue(&mut stream).await.is_err() {
                return End::Lost;
            }
            self.client_close(&mut stream, &mut bounds).await
        };
        let end = match tokio::time::timeout_at(deadline, answer).await {
            Ok(end) => end,
            Err(_) => {
                // Out of time (a client that never finished its message, or
                // never answered): the close frame goes, if the socket takes
                // it now.
                let write = self.write_queue(&mut stream);
                let _ = tokio::time::timeout(Duration::from_millis(100), write).await;
                End::Lost
            }
        };
        Ending {
            end,
            goodbye: Some(Goodbye {
                stream,
                bounds,
                until_eof: false,
            }),
        }
    }

    /// Writes the close frame queued, and ends the socket without waiting
    /// for the client's: the goodbye reads until the client closes its
    /// side.
    async fn hang_up(&mut self, mut stream: Wire) -> Ending {
        let bounds = self.bounds();
        let _ = tokio::time::timeout_at(bounds.deadline, self.write_queue(&mut stream)).await;
        Ending {
            end: End::Lost,
            goodbye: Some(Goodbye {
                stream,
                bounds,
                until_eof: true,
            }),
        }
    }

    /// Reads (and drops) the rest of the message the server refused, while
    /// the client sends it: `Some` if the connection ended first (the
    /// client's close frame came, or it closed, or went past the closing
    /// budget).
    async fn skip_refused(&mut self, stream: &mut Wire, bounds: &mut Bounds) -> Option<End> {
        while self.reader.in_refused_message() {
            let Ok(Some(bytes)) = stream.read().await else {
                return Some(End::Lost);
            };
            if !bounds.take(bytes.len()) {
                return Some(End::Lost);
            }
            if let Some(end) = self.close_frame_in(&bytes) {
                return Some(end);
            }
        }
        None
    }

    /// Reads (and drops) what the client sends until its close frame, the
    /// reader closing.
    async fn client_close(&mut self, stream: &mut Wire, bounds: &mut Bounds) -> End {
        loop {
            let Ok(Some(bytes)) = stream.read().await else {
                return End::Lost;
            };
            if !bounds.take(bytes.len()) {
                return End::Lost;
            }
            if let Some(end) = self.close_frame_in(&bytes) {
                return end;
            }
        }
    }

    /// The client's close frame, if `input` completes it (the reader
    /// closing); `Some(End::Lost)` if the client broke even that.
    fn close_frame_in(&mut self, mut input: &[u8]) -> Option<End> {
        let rules = self.link.lock().settings.rules;
        loop {
            match self.reader.read(&mut input, rules) {
                Ok(Some(Event::Close(frame))) => return Some(End::Closed(frame)),
                Ok(Some(_)) => {}
                Ok(None) => return None,
                Err(_) => return Some(End::Lost),
            }
        }
    }

    /// Writes the queue until it is empty.
    ///
    /// # Errors
    ///
    /// When the socket fails, or a send found the queue full and the
    /// policy is to close.
    async fn write_queue(&mut self, stream: &mut (impl AsyncWrite + Unpin)) -> io::Result<()> {
        let link = &self.link;
        loop {
            let next = {
                let mut state = link.lock();
                if state.overflowed {
                    return Err(overflowed());
                }
                match state.pop() {
                    Some(next) => next,
                    None => break,
                }
            };
            let mut written = 0;
            unless_overflowed(link, |cx| {
                while written < next.len() {
                    match ready!(Pin::new(&mut *stream).poll_write(cx, &next[written..]))? {
                        0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                        n => written += n,
                    }
                }
                Poll::Ready(Ok(()))
            })
            .await?;
        }
        // What the transport holds (TLS records) goes out too.
        unless_overflowed(link, |cx| Pin::new(&mut *stream).poll_flush(cx)).await?;
        // Written: a socket that sleeps keeps no queue.
        link.lock().clear_outbox();
        Ok(())
    }

    /// Puts the socket to sleep, unless sends came meanwhile (it writes
    /// them first).
    async fn sleep(self, stream: Wire) {
        match stream {
            Wire::Lot(stream) => self.sleep_in_lot(stream).await,
            stream @ Wire::H2(_) => self.stay_awake(stream).await,
        }
    }

    /// A socket over HTTP/2 between messages: awake in its task, it waits
    /// for the client's next bytes, or for a send, which queues and wakes
    /// the task to write it.
    async fn stay_awake(mut self, mut stream: Wire) {
        loop {
            if self.write_queue(&mut stream).await.is_err() {
                return self.end(End::Lost.into()).await;
            }
            if self.link.lock().closing {
                let ended = self.await_close(stream, &[], None).await;
                return self.end(ended).await;
            }
            let link = self.link.clone();
            let read = tokio::select! {
                read = stream.read() => read,
                () = std::future::poll_fn(|cx| link.poll_sent(cx)) => continue,
            };
            stream = match self.serve(stream, read).await {
                Ok(stream) => stream,
                Err(ended) => return self.end(ended).await,
            };
        }
    }

    /// Puts a socket of the lot's to sleep, unless sends came meanwhile (it
    /// writes them first).
    async fn sleep_in_lot(mut self, mut stream: Upgraded) {
        let Some(lot) = self.lot.clone() else {
            return self.end(End::Lost.into()).await;
        };
        loop {
            if self.write_queue(&mut stream).await.is_err() {
                return self.end(End::Lost.into()).await;
            }
            if self.link.lock().closing {
                // Its close frame went out: it waits for the client's
                // answer rather than sleep (a client that never answers
                // would keep it forever).
                let ended = self.await_close(Wire::Lot(stream), &[], None).await;
                return self.end(ended).await;
            }
            let link = self.link.clone();
            {
                let mut state = link.lock();
                if !state.is_empty() {
                    continue;
                }
                let Some(user) = self.state.take() else {
                    // A handler that panicked.
                    break;
                };
                {
                    let Awake {
                        handler,
                        reader,
                        mut _closer,
                        ..
                    } = self;
                    _closer.0 = None;
                    let sleeper = Box::new(Sleeper {
                        link: link.clone(),
                        lot: lot.clone(),
                        state: user,
                        handler,
                        reader,
                    });
                    // Under the link's lock: a send finds the socket awake,
                    // or asleep at its key.
                    let after = link.keep_alive.period();
                    let at = match lot.sleep_boxed(stream, sleeper, after) {
                        Some(key) => At::Asleep(key),
                        None => At::Awake,
                    };
                    state.set_at(at);
                    return;
                }
            }
        }
        self.end(End::Lost.into()).await;
    }

    /// The socket ended: the link closes, the connection is let go, and
    /// the handler gets its last message.
    async fn end(mut self, ended: Ending) {
        self.link.close();
        let frame = match ended.end {
            End::Closed(frame) => frame,
            End::Lost => None,
        };
        self.call(Message::Close(frame)).await;
        if let Some(goodbye) = ended.goodbye {
            goodbye.say().await;
        }
    }
}
