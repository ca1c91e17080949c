//! A raw HTTP/2 client, frames written and read by hand, for what hyper's
//! and h2's clients cannot do or do not show: send a GOAWAY and keep the
//! connection open, close without a GOAWAY, and see the server's GOAWAY
//! before its close. Every wait is bounded, so a hang fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::timeout::CLIENT_TIMEOUT;
use super::transport::AsyncStream;

pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types and flags (RFC 9113, 6).
pub(crate) const DATA: u8 = 0x0;
pub(crate) const HEADERS: u8 = 0x1;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const SETTINGS: u8 = 0x4;
pub(crate) const PING: u8 = 0x6;
pub(crate) const GOAWAY: u8 = 0x7;
pub(crate) const ACK: u8 = 0x1;
pub(crate) const END_STREAM: u8 = 0x1;
pub(crate) const END_HEADERS: u8 = 0x4;

/// GOAWAY's and RST_STREAM's error code for a graceful end.
pub(crate) const NO_ERROR: u32 = 0x0;
/// RST_STREAM's error code for a stream the server did not process.
pub(crate) const REFUSED_STREAM: u32 = 0x7;

/// One frame as read off the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    pub(crate) kind: u8,
    pub(crate) flags: u8,
    pub(crate) stream: u32,
    pub(crate) payload: Vec<u8>,
}

impl Frame {
    /// Whether it is a PING (not the ACK of one).
    pub(crate) fn is_ping(&self) -> bool {
        self.kind == PING && self.flags & ACK == 0
    }

    /// A GOAWAY's error code.
    pub(crate) fn error_code(&self) -> u32 {
        assert_eq!(self.kind, GOAWAY, "{self:?}");
        u32::from_be_bytes(self.payload[4..8].try_into().unwrap())
    }
}

/// The bytes of one frame.
pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&len[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The HEADERS frame of `GET path` on `stream`, with no body.
pub(crate) fn get_frame(stream: u32, path: &str) -> Vec<u8> {
    // HPACK: `:method: GET` and `:scheme: http` from the static table,
    // `:path` (`/` from the static table too), and `:authority: localhost`
    // as literals that enter no table.
    let mut block = vec![0x82, 0x86];
    match path {
        "/" => block.push(0x84),
        path => {
            block.extend([0x04, u8::try_from(path.len()).unwrap()]);
            block.extend_from_slice(path.as_bytes());
        }
    }
    block.extend([0x01, 9]);
    block.extend_from_slice(b"localhost");
    frame(HEADERS, END_STREAM | END_HEADERS, stream, &block)
}

/// An HTTP/2 client connection whose frames the test writes; a task reads
/// the server's frames, acknowledges its SETTINGS and answers its PINGs (as
/// any client does, and as a connection needs to sleep), and hands every
/// frame to the test.
pub(crate) struct RawClient {
    writer: Arc<Mutex<WriteHalf<Box<dyn AsyncStream>>>>,
    /// Whether the client still answers the server's PINGs.
    answers_pings: Arc<AtomicBool>,
    frames: mpsc::UnboundedReceiver<Frame>,
    reader: JoinHandle<()>,
}

impl RawClient {
    /// Starts HTTP/2 on `io` (a connection from
    /// [`Transport::connect_h2`](super::transport::Transport::connect_h2)):
    /// the preface and an empty SETTINGS frame, written before anything
    /// else.
    pub(crate) async fn start(io: Box<dyn AsyncStream>) -> RawClient {
        Self::start_after(io, 0).await
    }

    /// [`start`](Self::start) on `io`, on which the first `sent` bytes of
    /// the preface were written already (by the test, in pieces).
    pub(crate) async fn start_after(io: Box<dyn AsyncStream>, sent: usize) -> RawClient {
        let (mut read, mut write) = tokio::io::split(io);
        // The preface goes first, before the reader may acknowledge the
        // server's SETTINGS: an ACK before it is a PROTOCOL_ERROR, which
        // hyper answers with GOAWAY (a server sends its SETTINGS without
        // waiting for the client's preface).
        let mut opening = PREFACE[sent..].to_vec();
        opening.extend(frame(SETTINGS, 0, 0, &[]));
        write.write_all(&opening).await.expect("write the preface");
        write.flush().await.expect("flush the preface");
        let writer = Arc::new(Mutex::new(write));
        let (tx, frames) = mpsc::unbounded_channel();
        let acks = writer.clone();
        let answers_pings = Arc::new(AtomicBool::new(true));
        let answers = answers_pings.clone();
        let reader = tokio::spawn(async move {
            // The end of the stream, or an error (a TLS close without
            // close_notify), ends the channel.
            while let Ok(f) = read_frame(&mut read).await {
                let reply = match f.kind {
                    SETTINGS if f.flags & ACK == 0 => Some(frame(SETTINGS, ACK, 0, &[])),
                    PING if f.flags & ACK == 0 && answers.load(Ordering::Relaxed) => {
                        Some(frame(PING, ACK, 0, &f.payload))
                    }
                    _ => None,
                };
                if let Some(reply) = reply {
                    let mut w = acks.lock().await;
                    if w.write_all(&reply).await.is_err() || w.flush().await.is_err() {
                        break;
                    }
                }
                if tx.send(f).is_err() {
                    break;
                }
            }
        });
        RawClient {
            writer,
            answers_pings,
            frames,
            reader,
        }
    }

    /// From now on, the server's PINGs go unanswered.
    pub(crate) fn stop_answering_pings(&self) {
        self.answers_pings.store(false, Ordering::Relaxed);
    }

    /// Writes `bytes` and flushes them.
    pub(crate) async fn send(&self, bytes: &[u8]) {
        self.try_send(bytes).await.expect("write");
    }

    /// Writes `bytes` and flushes them, if the server has not closed the
    /// connection.
    pub(crate) async fn try_send(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut w = self.writer.lock().await;
        w.write_all(bytes).await?;
        w.flush().await
    }

    /// Sends `GET /` on `stream` (an odd id above the last one) and waits
    /// for the end of its response.
    pub(crate) async fn get(&mut self, stream: u32) {
        self.send(&get_frame(stream, "/")).await;
        loop {
            let f = self.next().await.expect("the connection closed");
            if f.stream == stream && f.flags & END_STREAM != 0 {
                return;
            }
        }
    }

    /// Sends a GOAWAY (no stream processed, no error), keeping the
    /// connection open.
    pub(crate) async fn go_away(&self) {
        let mut payload = 0u32.to_be_bytes().to_vec();
        payload.extend_from_slice(&NO_ERROR.to_be_bytes());
        self.send(&frame(GOAWAY, 0, 0, &payload)).await;
    }

    /// The server's next frame, or `None` once the connection has ended;
    /// fails the test if none comes.
    pub(crate) async fn next(&mut self) -> Option<Frame> {
        timeout(CLIENT_TIMEOUT, self.frames.recv())
            .await
            .expect("no frame and no close from the server")
    }

    /// The server's frames up to the end of the connection; fails the test
    /// if the server does not close it.
    pub(crate) async fn until_closed(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(f) = self.next().await {
            frames.push(f);
        }
        frames
    }
}

impl Drop for RawClient {
    /// Closes the connection, without a GOAWAY, once the reader task is
    /// gone (it holds the other half of the stream).
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Reads one frame; an error at the end of the stream.
pub(crate) async fn read_frame<S: tokio::io::AsyncRead + Unpin>(
    io: &mut S,
) -> std::io::Result<Frame> {
    let mut head = [0u8; 9];
    io.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0u8; len];
    io.read_exact(&mut payload).await?;
    Ok(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
        payload,
    })
}
