//! A scripted HTTP/2 client for the differential tests, on
//! [`h2_raw`](super::h2_raw)'s frames: it sends the preface and the
//! settings of a [`Profile`], requests whose header blocks its own HPACK
//! encoder writes (literals with incremental indexing, so that its dynamic
//! table is used, sized by the server's SETTINGS_HEADER_TABLE_SIZE), PINGs,
//! SETTINGS changes and a GOAWAY; and it behaves as a client does: it
//! acknowledges the server's SETTINGS (applying them first), answers its
//! PINGs, sends bodies within the server's windows and gives back window
//! for the DATA it receives. It records every frame it receives, and
//! decodes each response (head, body, trailers) with a strict HPACK
//! decoder. Every wait is bounded, so a hang fails.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::pin::pin;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::h2_raw::{
    ACK, END_HEADERS, END_STREAM, Frame, GOAWAY, HEADERS, NO_ERROR, PING, PREFACE, SETTINGS, frame,
    read_frame,
};
use super::hpack::{DEFAULT_TABLE_SIZE, Decoder, Encoder, Field};
use super::timeout::CLIENT_TIMEOUT;
use super::transport::AsyncStream;

// The frame types and flags `h2_raw` has no use for (RFC 9113, 6).
pub(crate) const DATA: u8 = 0x0;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

// Settings (RFC 9113, 6.5.2).
pub(crate) const HEADER_TABLE_SIZE: u16 = 0x1;
pub(crate) const INITIAL_WINDOW_SIZE: u16 = 0x4;

/// Every connection's and stream's window before SETTINGS and
/// WINDOW_UPDATEs change it.
const INITIAL_WINDOW: i64 = 65_535;

/// The largest frame payload either side sends (the protocol's smallest
/// SETTINGS_MAX_FRAME_SIZE, which neither raises here).
const MAX_FRAME: usize = 16_384;

/// How a client opens its connection.
#[derive(Clone, Debug)]
pub(crate) struct Profile {
    /// The settings of its first SETTINGS frame.
    pub(crate) settings: Vec<(u16, u32)>,
    /// What it grants the server's DATA beyond the connection's initial
    /// 65,535 bytes, with a WINDOW_UPDATE right after its SETTINGS.
    pub(crate) connection_window: u32,
}

/// One request of a script.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub(crate) method: &'static str,
    pub(crate) path: String,
    pub(crate) headers: Vec<Field>,
    pub(crate) body: Vec<u8>,
    /// Sent in a HEADERS frame after the body, if any.
    pub(crate) trailers: Vec<Field>,
}

/// What came back on one stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stream {
    /// The type and flags of each frame, in order.
    pub(crate) frames: Vec<(u8, u8)>,
    /// The response's header fields, `:status` first.
    pub(crate) head: Vec<Field>,
    pub(crate) body: Vec<u8>,
    pub(crate) trailers: Vec<Field>,
    /// END_STREAM came, or a RST_STREAM.
    pub(crate) ended: bool,
}

/// What the client received.
#[derive(Debug, Default)]
pub(crate) struct Received {
    /// The frames on stream 0, in order.
    pub(crate) connection: Vec<Frame>,
    pub(crate) streams: BTreeMap<u32, Stream>,
    /// The most the server ever let the client send on the connection at
    /// once, as the client saw it (65,535 + the server's connection
    /// WINDOW_UPDATEs − the DATA the client sent, when one arrives).
    pub(crate) largest_window: i64,
    /// The connection ended (the server closed it, or an error below).
    pub(crate) closed: bool,
    /// What the server did wrong, if anything (a frame or a header block
    /// the client refuses, DATA beyond the window it granted).
    pub(crate) error: Option<String>,
}

impl Received {
    fn count(&self, kind: u8, flags: u8) -> usize {
        self.connection
            .iter()
            .filter(|f| (f.kind, f.flags) == (kind, flags))
            .count()
    }
}

/// The client's state, under one lock: what it received, and what it
/// sends with. Header blocks are encoded and queued for the writer task
/// under it, so that they reach the wire in the order they were encoded,
/// and a server SETTINGS is applied before its ACK is queued. Nothing
/// waits under it: the reader never waits for the writer, so a server
/// that stops reading while its writes are blocked cannot stall the
/// client.
struct Conn {
    received: Received,
    /// To the writer task.
    out: mpsc::UnboundedSender<Vec<u8>>,
    encoder: Encoder,
    decoder: Decoder,
    /// A header block whose CONTINUATION frames are still to come.
    block: Option<(u32, Vec<u8>)>,
    /// The SETTINGS_HEADER_TABLE_SIZE of each SETTINGS the server has not
    /// acknowledged yet, if it had one.
    table_sizes: VecDeque<Option<usize>>,
    /// What the server may still send on the connection: the client's
    /// receive window.
    receive_window: i64,
    /// What the server lets the client send: on the connection, and on
    /// each stream it opened.
    window: i64,
    windows: HashMap<u32, i64>,
    /// The server's SETTINGS_INITIAL_WINDOW_SIZE.
    initial_window: i64,
    next_stream: u32,
}

impl Conn {
    /// Queues `bytes` for the writer; if it has gone (the connection
    /// failed), the reader sees the end.
    fn send(&self, bytes: Vec<u8>) {
        let _ = self.out.send(bytes);
    }

    /// Notes a frame the server sent, and answers it.
    fn on_frame(&mut self, f: &Frame) -> Result<(), String> {
        match (f.kind, f.stream) {
            (SETTINGS, 0) if f.flags & ACK == 0 => {
                // Applied, then acknowledged (RFC 9113, 6.5.3).
                for (id, value) in parse_settings(&f.payload)? {
                    match id {
                        HEADER_TABLE_SIZE => self.encoder.set_max_size(value as usize),
                        INITIAL_WINDOW_SIZE => {
                            let delta = i64::from(value) - self.initial_window;
                            self.initial_window = i64::from(value);
                            self.windows.values_mut().for_each(|w| *w += delta);
                        }
                        _ => {}
                    }
                }
                self.send(frame(SETTINGS, ACK, 0, &[]));
            }
            (SETTINGS, 0) => match self.table_sizes.pop_front() {
                None => return Err("an ACK of no SETTINGS".into()),
                Some(Some(size)) => self.decoder.acknowledged(size),
                Some(None) => {}
            },
            (PING, 0) if f.flags & ACK == 0 => self.send(frame(PING, ACK, 0, &f.payload)),
            (PING | GOAWAY, 0) => {}
            (WINDOW_UPDATE, 0) => {
                self.window += i64::from(increment(&f.payload)?);
                let r = &mut self.received;
                r.largest_window = r.largest_window.max(self.window);
            }
            (WINDOW_UPDATE, id) => {
                let n = increment(&f.payload)?;
                if let Some(w) = self.windows.get_mut(&id) {
                    *w += i64::from(n);
                }
            }
            (DATA, id) if id != 0 && f.flags & PADDED == 0 => {
                let len = f.payload.len();
                self.receive_window -= len as i64;
                if self.receive_window < 0 {
                    return Err(format!("DATA beyond the connection window on {id}"));
                }
                let stream = self.received.streams.entry(id).or_default();
                stream.body.extend_from_slice(&f.payload);
                stream.ended |= f.flags & END_STREAM != 0;
                if len > 0 {
                    // The window back at once: for the connection, and
                    // for the stream while it lasts.
                    self.receive_window += len as i64;
                    let mut updates = window_update(0, len as u32);
                    if f.flags & END_STREAM == 0 {
                        updates.extend(window_update(id, len as u32));
                    }
                    self.send(updates);
                }
            }
            (HEADERS, id) if id != 0 && f.flags & (PADDED | PRIORITY) == 0 => {
                if self.block.is_some() {
                    return Err("HEADERS inside a header block".into());
                }
                self.block = Some((id, f.payload.clone()));
                let stream = self.received.streams.entry(id).or_default();
                stream.ended |= f.flags & END_STREAM != 0;
                if f.flags & END_HEADERS != 0 {
                    self.end_block()?;
                }
            }
            (CONTINUATION, id) => {
                match &mut self.block {
                    Some((on, block)) if *on == id => block.extend_from_slice(&f.payload),
                    _ => return Err(format!("CONTINUATION on {id} without its HEADERS")),
                }
                if f.flags & END_HEADERS != 0 {
                    self.end_block()?;
                }
            }
            (RST_STREAM, id) if id != 0 => {
                self.received.streams.entry(id).or_default().ended = true
            }
            _ => return Err(format!("an unexpected frame: {f:?}")),
        }
        Ok(())
    }

    /// Decodes the header block just completed: a response's head, or its
    /// trailers.
    fn end_block(&mut self) -> Result<(), String> {
        let (id, block) = self.block.take().expect("a header block");
        let fields = self.decoder.decode(&block)?;
        let stream = self.received.streams.entry(id).or_default();
        if stream.head.is_empty() {
            stream.head = fields;
        } else {
            stream.trailers = fields;
        }
        Ok(())
    }
}

/// A connection of the scripted client.
pub(crate) struct Client {
    conn: Arc<Mutex<Conn>>,
    /// Told after every frame the client receives.
    changed: Arc<Notify>,
    tasks: [JoinHandle<()>; 2],
}

impl Client {
    /// Starts HTTP/2 on `io` as `profile` says: the preface, the SETTINGS,
    /// and the connection WINDOW_UPDATE if any.
    pub(crate) async fn start(io: Box<dyn AsyncStream>, profile: &Profile) -> Client {
        let (read, write) = tokio::io::split(io);
        let (out, queue) = mpsc::unbounded_channel();
        let table_size = table_size(&profile.settings);
        let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
        if let Some(size) = table_size {
            decoder.sent(size);
        }
        let conn = Arc::new(Mutex::new(Conn {
            received: Received {
                largest_window: INITIAL_WINDOW,
                ..Received::default()
            },
            out,
            encoder: Encoder::new(DEFAULT_TABLE_SIZE, true),
            decoder,
            block: None,
            table_sizes: VecDeque::from([table_size]),
            receive_window: INITIAL_WINDOW + i64::from(profile.connection_window),
            window: INITIAL_WINDOW,
            windows: HashMap::new(),
            initial_window: INITIAL_WINDOW,
            next_stream: 1,
        }));
        let changed = Arc::new(Notify::new());
        let mut opening = PREFACE.to_vec();
        opening.extend(settings_frame(&profile.settings));
        if profile.connection_window > 0 {
            opening.extend(window_update(0, profile.connection_window));
        }
        conn.lock().unwrap().send(opening);
        let tasks = [
            tokio::spawn(read_frames(read, conn.clone(), changed.clone())),
            tokio::spawn(write_frames(write, queue)),
        ];
        Client {
            conn,
            changed,
            tasks,
        }
    }

    /// Sends `requests` at once, each on a stream of its own (ids in their
    /// order), their bodies side by side as the server's windows allow,
    /// and waits until every response has ended; returns the stream ids.
    pub(crate) async fn exchange(&self, requests: &[Request]) -> Vec<u32> {
        let mut ids = Vec::new();
        {
            let mut c = self.conn.lock().unwrap();
            let mut bytes = Vec::new();
            for r in requests {
                let id = c.next_stream;
                c.next_stream += 2;
                let pseudo = [
                    (":method", r.method),
                    (":scheme", "http"),
                    (":path", r.path.as_str()),
                    (":authority", "localhost"),
                ];
                let fields = r.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
                let block = c.encoder.encode(pseudo.into_iter().chain(fields));
                let end = r.body.is_empty() && r.trailers.is_empty();
                bytes.extend(header_frames(id, &block, end));
                let window = c.initial_window;
                c.windows.insert(id, window);
                ids.push(id);
            }
            c.send(bytes);
        }

        // The bodies, a frame of each in turn, then the trailers.
        let mut left: Vec<&[u8]> = requests.iter().map(|r| &r.body[..]).collect();
        let mut done: Vec<bool> = requests
            .iter()
            .map(|r| r.body.is_empty() && r.trailers.is_empty())
            .collect();
        while done.contains(&false) {
            let mut changed = pin!(self.changed.notified());
            changed.as_mut().enable();
            let mut wrote = false;
            {
                let mut c = self.conn.lock().unwrap();
                for (i, r) in requests.iter().enumerate() {
                    if done[i] {
                        continue;
                    }
                    let id = ids[i];
                    if left[i].is_empty() {
                        let fields = r.trailers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
                        let block = c.encoder.encode(fields);
                        c.send(header_frames(id, &block, true));
                        (done[i], wrote) = (true, true);
                        continue;
                    }
                    let room = c.window.min(c.windows[&id]).min(MAX_FRAME as i64);
                    if room <= 0 {
                        continue;
                    }
                    let (chunk, rest) = left[i].split_at(left[i].len().min(room as usize));
                    let end = rest.is_empty() && r.trailers.is_empty();
                    c.send(frame(DATA, if end { END_STREAM } else { 0 }, id, chunk));
                    c.window -= chunk.len() as i64;
                    *c.windows.get_mut(&id).unwrap() -= chunk.len() as i64;
                    (left[i], done[i], wrote) = (rest, end, true);
                }
            }
            if !wrote {
                timeout(CLIENT_TIMEOUT, changed)
                    .await
                    .expect("the server gave no window for the request bodies");
            }
        }
        self.wait_for("the responses", |r| {
            ids.iter()
                .all(|id| r.streams.get(id).is_some_and(|s| s.ended))
        })
        .await;
        ids
    }

    /// Sends a PING and waits for its ACK.
    pub(crate) async fn ping(&self, payload: [u8; 8]) {
        let acks = |r: &Received| {
            r.connection
                .iter()
                .filter(|f| (f.kind, f.flags) == (PING, ACK) && f.payload == payload)
                .count()
        };
        let before = {
            let c = self.conn.lock().unwrap();
            c.send(frame(PING, 0, 0, &payload));
            acks(&c.received)
        };
        self.wait_for("the PING's ACK", |r| acks(r) > before).await;
    }

    /// Sends a SETTINGS frame of `settings` and waits for its ACK.
    pub(crate) async fn settings(&self, settings: &[(u16, u32)]) {
        let before = {
            let mut c = self.conn.lock().unwrap();
            let size = table_size(settings);
            if let Some(size) = size {
                c.decoder.sent(size);
            }
            c.table_sizes.push_back(size);
            c.send(settings_frame(settings));
            c.received.count(SETTINGS, ACK)
        };
        self.wait_for("the SETTINGS' ACK", |r| r.count(SETTINGS, ACK) > before)
            .await;
    }

    /// Sends a GOAWAY (no stream of the server's processed, no error),
    /// waits until the server closes the connection, and returns what the
    /// client received.
    pub(crate) async fn go_away(self) -> Received {
        let mut payload = 0u32.to_be_bytes().to_vec();
        payload.extend_from_slice(&NO_ERROR.to_be_bytes());
        self.conn
            .lock()
            .unwrap()
            .send(frame(GOAWAY, 0, 0, &payload));
        self.wait_for("the server's close", |r| r.closed).await;
        std::mem::take(&mut self.conn.lock().unwrap().received)
    }

    /// Waits until `done` holds of what the client received; fails the
    /// test if the server did something wrong, closed the connection
    /// first, or took too long.
    async fn wait_for(&self, what: &str, done: impl Fn(&Received) -> bool) {
        let wait = async {
            loop {
                let mut changed = pin!(self.changed.notified());
                changed.as_mut().enable();
                {
                    let r = &self.conn.lock().unwrap().received;
                    assert_eq!(r.error, None, "waiting for {what}");
                    if done(r) {
                        return;
                    }
                    assert!(!r.closed, "the server closed before {what}");
                }
                changed.await;
            }
        };
        timeout(CLIENT_TIMEOUT, wait)
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    }
}

impl Drop for Client {
    /// Closes the connection once both tasks are gone (each holds half of
    /// the stream).
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// The reader task: notes and answers the server's frames until the
/// connection ends or the server does something wrong.
async fn read_frames(
    mut read: ReadHalf<Box<dyn AsyncStream>>,
    conn: Arc<Mutex<Conn>>,
    changed: Arc<Notify>,
) {
    // The end of the stream, or an error (a TLS close without
    // close_notify), ends the connection.
    while let Ok(f) = read_frame(&mut read).await {
        let mut c = conn.lock().unwrap();
        let handled = c.on_frame(&f);
        match f.stream {
            0 => c.received.connection.push(f),
            id => {
                let stream = c.received.streams.entry(id).or_default();
                stream.frames.push((f.kind, f.flags));
            }
        }
        if let Err(e) = handled {
            c.received.error = Some(e);
            break;
        }
        drop(c);
        changed.notify_waiters();
    }
    conn.lock().unwrap().received.closed = true;
    changed.notify_waiters();
}

/// The writer task: writes what is queued, as it comes, until the
/// connection fails.
async fn write_frames(
    mut write: WriteHalf<Box<dyn AsyncStream>>,
    mut queue: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    while let Some(mut bytes) = queue.recv().await {
        while let Ok(more) = queue.try_recv() {
            bytes.extend(more);
        }
        if write.write_all(&bytes).await.is_err() || write.flush().await.is_err() {
            return;
        }
    }
}

/// The HEADERS frame of a header block, and CONTINUATION frames for what
/// does not fit in one.
fn header_frames(stream: u32, block: &[u8], end_stream: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut flags = if end_stream { END_STREAM } else { 0 };
    let mut chunks = block.chunks(MAX_FRAME).peekable();
    let mut kind = HEADERS;
    loop {
        let chunk = chunks.next().unwrap_or_default();
        if chunks.peek().is_none() {
            out.extend(frame(kind, flags | END_HEADERS, stream, chunk));
            return out;
        }
        out.extend(frame(kind, flags, stream, chunk));
        (kind, flags) = (CONTINUATION, 0);
    }
}

fn settings_frame(settings: &[(u16, u32)]) -> Vec<u8> {
    let payload: Vec<u8> = settings
        .iter()
        .flat_map(|(id, value)| [&id.to_be_bytes()[..], &value.to_be_bytes()].concat())
        .collect();
    frame(SETTINGS, 0, 0, &payload)
}

/// A SETTINGS frame's settings.
pub(crate) fn parse_settings(payload: &[u8]) -> Result<Vec<(u16, u32)>, String> {
    if payload.len() % 6 != 0 {
        return Err(format!("a SETTINGS payload of {} bytes", payload.len()));
    }
    Ok(payload
        .chunks(6)
        .map(|s| {
            let id = u16::from_be_bytes([s[0], s[1]]);
            (id, u32::from_be_bytes([s[2], s[3], s[4], s[5]]))
        })
        .collect())
}

fn table_size(settings: &[(u16, u32)]) -> Option<usize> {
    settings
        .iter()
        .rev()
        .find(|(id, _)| *id == HEADER_TABLE_SIZE)
        .map(|&(_, size)| size as usize)
}

fn window_update(stream: u32, n: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, stream, &n.to_be_bytes())
}

/// A WINDOW_UPDATE's increment.
fn increment(payload: &[u8]) -> Result<u32, String> {
    let bytes: [u8; 4] = payload
        .try_into()
        .map_err(|_| format!("a WINDOW_UPDATE of {} bytes", payload.len()))?;
    match u32::from_be_bytes(bytes) & 0x7fff_ffff {
        0 => Err("a WINDOW_UPDATE of 0".into()),
        n => Ok(n),
    }
}
