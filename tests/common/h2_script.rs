//! A scripted HTTP/2 client for the differential tests, on
//! [`h2_raw`](super::h2_raw)'s frames: it sends the preface and the
//! settings of a [`Profile`], requests whose header blocks its own HPACK
//! encoder writes (literals with incremental indexing, so that its dynamic
//! table is used, sized by the server's SETTINGS_HEADER_TABLE_SIZE), PINGs,
//! SETTINGS changes, WINDOW_UPDATEs, PRIORITY frames and a GOAWAY; and it
//! behaves as a client does: it acknowledges the server's SETTINGS
//! (applying them first), answers its PINGs, sends bodies within the
//! server's windows and gives back window for the DATA it receives. How a
//! request's frames are cut and decorated (padding, priority, header
//! blocks split into CONTINUATION frames, an empty DATA frame at the end,
//! a reset before the end) is its [`Framing`]. It records every frame it
//! receives, and decodes each response (head, body, trailers) with a
//! strict HPACK decoder; it checks that the server keeps to its frame size
//! and to every window it granted. Every wait is bounded, so a hang fails.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::pin::pin;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::h2_raw::{
    ACK, END_HEADERS, END_STREAM, Frame, GOAWAY, HEADERS, NO_ERROR, PING, PREFACE, SETTINGS, frame,
};
use super::hpack::{DEFAULT_TABLE_SIZE, Decoder, Encoder, Field};
use super::timeout::CLIENT_TIMEOUT;
use super::transport::AsyncStream;

// The frame types and flags `h2_raw` has no use for (RFC 9113, 6).
pub(crate) const DATA: u8 = 0x0;
pub(crate) const PRIORITY: u8 = 0x2;
pub(crate) const RST_STREAM: u8 = 0x3;
pub(crate) const WINDOW_UPDATE: u8 = 0x8;
pub(crate) const CONTINUATION: u8 = 0x9;
const PADDED: u8 = 0x8;
/// HEADERS' flag for a priority block in the frame (not the frame type).
const PRIORITY_FLAG: u8 = 0x20;

/// RST_STREAM's error code for a request the client no longer wants.
pub(crate) const CANCEL: u32 = 0x8;

// Settings (RFC 9113, 6.5.2).
pub(crate) const HEADER_TABLE_SIZE: u16 = 0x1;
pub(crate) const ENABLE_PUSH: u16 = 0x2;
pub(crate) const MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub(crate) const INITIAL_WINDOW_SIZE: u16 = 0x4;
pub(crate) const MAX_FRAME_SIZE: u16 = 0x5;
pub(crate) const MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// Every connection's and stream's window before SETTINGS and
/// WINDOW_UPDATEs change it.
const INITIAL_WINDOW: i64 = 65_535;

/// The largest frame payload the client sends (the protocol's smallest
/// SETTINGS_MAX_FRAME_SIZE, which servers here do not raise), and the
/// largest it accepts until it says otherwise.
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

/// How a request goes on the wire, beyond its content: what an HTTP/2
/// client may vary without changing what it asks. The default is the
/// plainest: no padding, no priority, a header block in as few frames as
/// fit, END_STREAM on the last frame of the request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Framing {
    /// The frames of the request's head.
    pub(crate) head: Block,
    /// The frames of its trailers, if any.
    pub(crate) trailers: Block,
    /// The pad length of each DATA frame of the body, in turn (repeated;
    /// empty: no padding). A frame for which the window has no room for
    /// the padding and a byte goes unpadded.
    pub(crate) data_padding: Vec<u8>,
    /// With no trailers, END_STREAM comes on an empty DATA frame of its
    /// own after the body (after the HEADERS, with no body).
    pub(crate) empty_end: bool,
    /// A WINDOW_UPDATE of this much for the stream, right after its
    /// HEADERS.
    pub(crate) window_update: Option<u32>,
    /// A PRIORITY frame for the stream, right after its HEADERS.
    pub(crate) priority: Option<Priority>,
    /// The client cancels the request before it ends.
    pub(crate) reset: Option<Reset>,
}

/// How a header block goes on the wire.
#[derive(Clone, Debug, Default)]
pub(crate) struct Block {
    /// The HEADERS frame is PADDED with this many bytes.
    pub(crate) padding: Option<u8>,
    /// The HEADERS frame carries a priority block (flag PRIORITY).
    pub(crate) priority: Option<Priority>,
    /// Where the block is cut into a HEADERS frame and CONTINUATION
    /// frames, each in thousandths of its length (cuts that would make an
    /// empty fragment are left out); besides, no frame is larger than the
    /// largest frame.
    pub(crate) cuts: Vec<u16>,
}

/// A priority block (RFC 9113, 5.3.2 and 6.3), of a PRIORITY frame or a
/// HEADERS frame.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Priority {
    /// The stream it depends on, counted in the client's streams back
    /// from the one it is about: 0 (or beyond the first stream) is the
    /// root, never the stream itself.
    pub(crate) back: u32,
    pub(crate) weight: u8,
    pub(crate) exclusive: bool,
}

/// How the client cancels a request with RST_STREAM (CANCEL).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reset {
    /// Once `after` bytes of the request body have gone (fewer than the
    /// body's length): the server never sees its end.
    Request { after: usize },
    /// Once the response's head and at least `after` bytes of its body
    /// have come, unless the response has ended. The client gives the
    /// stream no window back, so a response larger than the stream's
    /// initial window cannot end first.
    Response { after: usize },
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
    /// END_STREAM came, or a RST_STREAM either way.
    pub(crate) ended: bool,
    /// The error code of the server's RST_STREAM, if it sent one.
    pub(crate) reset: Option<u32>,
    /// The client reset the stream ([`Reset`]).
    pub(crate) cancelled: bool,
}

/// What the client received.
#[derive(Clone, Debug, Default)]
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
    /// the client refuses, DATA beyond a window the client granted, a
    /// frame larger than the client allows).
    pub(crate) error: Option<String>,
}

impl Received {
    fn count(&self, kind: u8, flags: u8) -> usize {
        self.connection
            .iter()
            .filter(|f| (f.kind, f.flags) == (kind, flags))
            .count()
    }

    /// How many ACKs of PINGs with `payload` came.
    fn pongs(&self, payload: [u8; 8]) -> usize {
        self.connection
            .iter()
            .filter(|f| (f.kind, f.flags) == (PING, ACK) && f.payload == payload)
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
    /// The settings of each SETTINGS frame the server has not
    /// acknowledged yet, in order.
    unacked: VecDeque<Vec<(u16, u32)>>,
    /// SETTINGS frames the client sent, and PINGs (by payload).
    settings_sent: usize,
    pings_sent: Vec<[u8; 8]>,
    /// The client's SETTINGS_MAX_FRAME_SIZE, as the server acknowledged
    /// it.
    max_frame: usize,
    /// What the server may still send on the connection: the client's
    /// receive window.
    receive_window: i64,
    /// What the server may still send on each stream the client opened
    /// and did not reset.
    receive_windows: HashMap<u32, i64>,
    /// The client gives window back only once half of it is used, as
    /// many clients do ([`Client::lazy_windows`]); at once otherwise.
    lazy: bool,
    /// The connection's receive window at its fullest (what a lazy client
    /// gives back half of at a time), and the DATA not given back yet.
    full_window: i64,
    unreturned: i64,
    /// The same for each stream.
    full_windows: HashMap<u32, i64>,
    unreturned_on: HashMap<u32, i64>,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE, as last sent: the
    /// receive window of the streams it opens next.
    own_initial_window: i64,
    /// Streams the client gives no window back ([`Reset::Response`]).
    withheld: HashSet<u32>,
    /// Streams to reset once this much of their response body came.
    cancels: HashMap<u32, usize>,
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

    /// The largest frame the server may send now: the client's
    /// SETTINGS_MAX_FRAME_SIZE, or a larger one it sent that the server
    /// has not acknowledged yet.
    fn frame_limit(&self) -> usize {
        self.unacked
            .iter()
            .flatten()
            .filter(|(id, _)| *id == MAX_FRAME_SIZE)
            .map(|&(_, size)| size as usize)
            .fold(self.max_frame, usize::max)
    }

    /// Notes a SETTINGS frame the client sends now.
    fn sent_settings(&mut self, settings: &[(u16, u32)]) {
        for &(id, value) in settings {
            match id {
                HEADER_TABLE_SIZE => self.decoder.sent(value as usize),
                INITIAL_WINDOW_SIZE => self.own_initial_window = i64::from(value),
                _ => {}
            }
        }
        self.unacked.push_back(settings.to_vec());
        self.settings_sent += 1;
    }

    /// Notes a frame the server sent, and answers it.
    fn on_frame(&mut self, f: &Frame) -> Result<(), String> {
        if f.payload.len() > self.frame_limit() {
            return Err(format!(
                "a frame of {} bytes, beyond the client's {}: {:?}",
                f.payload.len(),
                self.frame_limit(),
                (f.kind, f.flags, f.stream)
            ));
        }
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
            (SETTINGS, 0) => {
                let settings = self.unacked.pop_front().ok_or("an ACK of no SETTINGS")?;
                for (id, value) in settings {
                    match id {
                        HEADER_TABLE_SIZE => self.decoder.acknowledged(value as usize),
                        MAX_FRAME_SIZE => self.max_frame = value as usize,
                        _ => {}
                    }
                }
            }
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
                let len = f.payload.len() as i64;
                self.receive_window -= len;
                if self.receive_window < 0 {
                    return Err(format!("DATA beyond the connection window on {id}"));
                }
                let stream = self.received.streams.entry(id).or_default();
                // A stream the client reset is closed: what still comes
                // on it counts only for the connection (RFC 9113, 6.4).
                let cancelled = stream.cancelled;
                stream.body.extend_from_slice(&f.payload);
                stream.ended |= f.flags & END_STREAM != 0;
                if !cancelled {
                    let w = self
                        .receive_windows
                        .get_mut(&id)
                        .ok_or_else(|| format!("DATA on {id}, which the client did not open"))?;
                    *w -= len;
                    if *w < 0 {
                        return Err(format!("DATA beyond the window of stream {id}"));
                    }
                }
                if len > 0 {
                    // The window back: for the connection, and for the
                    // stream while it lasts; at once, or once half of it
                    // is used.
                    let mut updates = Vec::new();
                    self.unreturned += len;
                    if !self.lazy || 2 * self.unreturned >= self.full_window {
                        updates.extend(window_update(0, self.unreturned as u32));
                        self.receive_window += self.unreturned;
                        self.unreturned = 0;
                    }
                    if f.flags & END_STREAM == 0 && !cancelled && !self.withheld.contains(&id) {
                        let unreturned = self.unreturned_on.entry(id).or_default();
                        *unreturned += len;
                        if !self.lazy || 2 * *unreturned >= self.full_windows[&id] {
                            updates.extend(window_update(id, *unreturned as u32));
                            *self.receive_windows.get_mut(&id).expect("checked") += *unreturned;
                            *unreturned = 0;
                        }
                    }
                    if !updates.is_empty() {
                        self.send(updates);
                    }
                }
                self.cancel_if_due(id);
            }
            (HEADERS, id) if id != 0 && f.flags & (PADDED | PRIORITY_FLAG) == 0 => {
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
                let code: [u8; 4] = f.payload[..]
                    .try_into()
                    .map_err(|_| format!("a RST_STREAM of {} bytes", f.payload.len()))?;
                let stream = self.received.streams.entry(id).or_default();
                stream.ended = true;
                stream.reset = Some(u32::from_be_bytes(code));
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
        self.cancel_if_due(id);
        Ok(())
    }

    /// Resets stream `id` if its [`Reset::Response`] is due.
    fn cancel_if_due(&mut self, id: u32) {
        let Some(&after) = self.cancels.get(&id) else {
            return;
        };
        let stream = self.received.streams.entry(id).or_default();
        if stream.ended {
            self.cancels.remove(&id);
        } else if !stream.head.is_empty() && stream.body.len() >= after {
            self.cancels.remove(&id);
            self.cancel(id);
        }
    }

    /// Resets stream `id` (CANCEL): it is closed from now on.
    fn cancel(&mut self, id: u32) {
        self.send(frame(RST_STREAM, 0, id, &CANCEL.to_be_bytes()));
        let stream = self.received.streams.entry(id).or_default();
        stream.cancelled = true;
        stream.ended = true;
    }
}

/// The bytes of a priority block: the dependency of stream `id` and the
/// weight.
fn priority_block(id: u32, p: Priority) -> [u8; 5] {
    let on = id
        .checked_sub(2 * p.back)
        .filter(|&on| p.back > 0 && on > 0)
        .unwrap_or(0);
    let on = if p.exclusive { on | 0x8000_0000 } else { on };
    let [a, b, c, d] = on.to_be_bytes();
    [a, b, c, d, p.weight]
}

/// A connection of the scripted client.
pub(crate) struct Client {
    conn: Arc<Mutex<Conn>>,
    /// Told after every frame the client receives.
    changed: Arc<Notify>,
    /// Whether the reader task reads.
    reading: watch::Sender<bool>,
    tasks: [JoinHandle<()>; 2],
}

impl Client {
    /// Starts HTTP/2 on `io` as `profile` says: the preface, the SETTINGS,
    /// and the connection WINDOW_UPDATE if any.
    pub(crate) async fn start(io: Box<dyn AsyncStream>, profile: &Profile) -> Client {
        let (read, write) = tokio::io::split(io);
        let (out, queue) = mpsc::unbounded_channel();
        let mut conn = Conn {
            received: Received {
                largest_window: INITIAL_WINDOW,
                ..Received::default()
            },
            out,
            encoder: Encoder::new(DEFAULT_TABLE_SIZE, true),
            decoder: Decoder::new(DEFAULT_TABLE_SIZE),
            block: None,
            unacked: VecDeque::new(),
            settings_sent: 0,
            pings_sent: Vec::new(),
            max_frame: MAX_FRAME,
            receive_window: INITIAL_WINDOW + i64::from(profile.connection_window),
            receive_windows: HashMap::new(),
            lazy: false,
            full_window: INITIAL_WINDOW + i64::from(profile.connection_window),
            unreturned: 0,
            full_windows: HashMap::new(),
            unreturned_on: HashMap::new(),
            own_initial_window: INITIAL_WINDOW,
            withheld: HashSet::new(),
            cancels: HashMap::new(),
            window: INITIAL_WINDOW,
            windows: HashMap::new(),
            initial_window: INITIAL_WINDOW,
            next_stream: 1,
        };
        conn.sent_settings(&profile.settings);
        let mut opening = PREFACE.to_vec();
        opening.extend(settings_frame(&profile.settings));
        if profile.connection_window > 0 {
            opening.extend(window_update(0, profile.connection_window));
        }
        conn.send(opening);
        let conn = Arc::new(Mutex::new(conn));
        let changed = Arc::new(Notify::new());
        let (reading, reading_rx) = watch::channel(true);
        let tasks = [
            tokio::spawn(read_frames(read, conn.clone(), changed.clone(), reading_rx)),
            tokio::spawn(write_frames(write, queue)),
        ];
        Client {
            conn,
            changed,
            reading,
            tasks,
        }
    }

    /// Stops reading from the connection (`false`), or goes on (`true`):
    /// a client that reads only while it waits for something, as
    /// synchronous clients do, leaves what the server sends meanwhile
    /// unread, and unanswered. Every wait of the client's turns reading
    /// back on.
    pub(crate) fn reading(&self, on: bool) {
        self.reading.send_replace(on);
    }

    /// Sends `requests` at once, each on a stream of its own (ids in their
    /// order), their bodies side by side as the server's windows allow,
    /// and waits until every response has ended; returns the stream ids.
    pub(crate) async fn exchange(&self, requests: &[Request]) -> Vec<u32> {
        let framed: Vec<_> = requests
            .iter()
            .map(|r| (r.clone(), Framing::default()))
            .collect();
        self.try_exchange(&framed, None)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`exchange`](Client::exchange), each request framed as its
    /// [`Framing`] says, and with `hold`, that long between the requests'
    /// HEADERS and their bodies (a slow upload: the streams stay open); an
    /// error if the server does something wrong, closes the connection
    /// first, or takes too long.
    pub(crate) async fn try_exchange(
        &self,
        requests: &[(Request, Framing)],
        hold: Option<std::time::Duration>,
    ) -> Result<Vec<u32>, String> {
        self.reading(true);
        let mut ids = Vec::new();
        // Each request: the body still to send, DATA frames sent, and
        // whether its end went.
        let mut left: Vec<&[u8]> = Vec::new();
        let mut sent_frames = vec![0usize; requests.len()];
        let mut done = Vec::new();
        {
            let mut c = self.conn.lock().unwrap();
            let mut bytes = Vec::new();
            for (r, framing) in requests {
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
                let end = r.body.is_empty()
                    && r.trailers.is_empty()
                    && !framing.empty_end
                    && !matches!(framing.reset, Some(Reset::Request { .. }));
                bytes.extend(header_frames(id, &block, end, &framing.head));
                if let Some(n) = framing.window_update {
                    bytes.extend(window_update(id, n));
                }
                if let Some(p) = framing.priority {
                    bytes.extend(frame(PRIORITY, 0, id, &priority_block(id, p)));
                }
                let window = c.initial_window;
                c.windows.insert(id, window);
                let own = c.own_initial_window + i64::from(framing.window_update.unwrap_or(0));
                c.receive_windows.insert(id, own);
                c.full_windows.insert(id, own);
                if let Some(Reset::Response { after }) = framing.reset {
                    c.withheld.insert(id);
                    c.cancels.insert(id, after);
                }
                c.received.streams.entry(id).or_default();
                ids.push(id);
                left.push(&r.body[..]);
                done.push(end);
            }
            c.send(bytes);
        }
        if let Some(hold) = hold {
            tokio::time::sleep(hold).await;
        }

        // The bodies, a frame of each in turn, then their ends.
        while done.contains(&false) {
            let mut changed = pin!(self.changed.notified());
            changed.as_mut().enable();
            let mut wrote = false;
            {
                let mut c = self.conn.lock().unwrap();
                if let Some(e) = &c.received.error {
                    return Err(format!("sending the request bodies: {e}"));
                }
                if c.received.closed {
                    return Err("the server closed while the requests were sent".into());
                }
                for (i, (r, framing)) in requests.iter().enumerate() {
                    if done[i] {
                        continue;
                    }
                    let id = ids[i];
                    if c.received.streams[&id].reset.is_some() {
                        // Reset by the server: nothing more goes on it.
                        (done[i], wrote) = (true, true);
                        continue;
                    }
                    let sent = r.body.len() - left[i].len();
                    let mut limit = left[i].len();
                    if let Some(Reset::Request { after }) = framing.reset {
                        if sent >= after {
                            c.cancel(id);
                            (done[i], wrote) = (true, true);
                            continue;
                        }
                        limit = limit.min(after - sent);
                    }
                    if left[i].is_empty() {
                        if r.trailers.is_empty() {
                            c.send(frame(DATA, END_STREAM, id, &[]));
                        } else {
                            let fields = r.trailers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
                            let block = c.encoder.encode(fields);
                            c.send(header_frames(id, &block, true, &framing.trailers));
                        }
                        (done[i], wrote) = (true, true);
                        continue;
                    }
                    let room = c.window.min(c.windows[&id]).min(MAX_FRAME as i64);
                    let pad = match framing.data_padding[..] {
                        [] => None,
                        ref pads => Some(pads[sent_frames[i] % pads.len()]),
                    }
                    .filter(|&pad| room >= i64::from(pad) + 2);
                    let overhead = pad.map_or(0, |pad| usize::from(pad) + 1);
                    if room <= overhead as i64 {
                        continue;
                    }
                    let n = limit.min(room as usize - overhead);
                    let (chunk, rest) = left[i].split_at(n);
                    let end = rest.is_empty()
                        && r.trailers.is_empty()
                        && !framing.empty_end
                        && !matches!(framing.reset, Some(Reset::Request { .. }));
                    let mut flags = if end { END_STREAM } else { 0 };
                    let payload = match pad {
                        None => chunk.to_vec(),
                        Some(pad) => {
                            flags |= PADDED;
                            let mut p = vec![pad];
                            p.extend_from_slice(chunk);
                            p.resize(p.len() + usize::from(pad), 0);
                            p
                        }
                    };
                    c.send(frame(DATA, flags, id, &payload));
                    c.window -= payload.len() as i64;
                    *c.windows.get_mut(&id).unwrap() -= payload.len() as i64;
                    sent_frames[i] += 1;
                    (left[i], done[i], wrote) = (rest, end, true);
                }
            }
            if !wrote && timeout(CLIENT_TIMEOUT, changed).await.is_err() {
                let c = self.conn.lock().unwrap();
                let waiting: Vec<_> = (0..ids.len())
                    .filter(|&i| !done[i])
                    .map(|i| (ids[i], left[i].len(), c.windows[&ids[i]]))
                    .collect();
                return Err(format!(
                    "the server gave no window for the request bodies: connection window {}, \
                     (stream, bytes left, window) {waiting:?}",
                    c.window
                ));
            }
        }
        self.try_wait_for("the responses", |r| {
            ids.iter()
                .all(|id| r.streams.get(id).is_some_and(|s| s.ended))
        })
        .await?;
        Ok(ids)
    }

    /// Sends a PING and waits for its ACK.
    pub(crate) async fn ping(&self, payload: [u8; 8]) {
        self.try_ping(payload, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Sends a PING, and waits for its ACK if `wait`.
    pub(crate) async fn try_ping(&self, payload: [u8; 8], wait: bool) -> Result<(), String> {
        let before = {
            let mut c = self.conn.lock().unwrap();
            c.send(frame(PING, 0, 0, &payload));
            c.pings_sent.push(payload);
            c.received.pongs(payload)
        };
        if !wait {
            return Ok(());
        }
        self.try_wait_for("the PING's ACK", |r| r.pongs(payload) > before)
            .await
    }

    /// Sends a SETTINGS frame of `settings` and waits for its ACK.
    pub(crate) async fn settings(&self, settings: &[(u16, u32)]) {
        self.try_settings(settings, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Sends a SETTINGS frame of `settings`, and waits for its ACK if
    /// `wait`.
    pub(crate) async fn try_settings(
        &self,
        settings: &[(u16, u32)],
        wait: bool,
    ) -> Result<(), String> {
        let sent = {
            let mut c = self.conn.lock().unwrap();
            c.sent_settings(settings);
            c.send(settings_frame(settings));
            c.settings_sent
        };
        if !wait {
            return Ok(());
        }
        self.try_wait_for("the SETTINGS' ACK", |r| r.count(SETTINGS, ACK) >= sent)
            .await
    }

    /// Sends a WINDOW_UPDATE of `n` for the connection.
    pub(crate) fn window_update(&self, n: u32) {
        let mut c = self.conn.lock().unwrap();
        c.receive_window += i64::from(n);
        c.full_window += i64::from(n);
        c.send(window_update(0, n));
    }

    /// From now on, the client gives window back (connection and streams)
    /// only once half of it is used, as Node's, Python's h2 and Netty's
    /// clients do, instead of at once.
    pub(crate) fn lazy_windows(&self) {
        self.conn.lock().unwrap().lazy = true;
    }

    /// Sends a PRIORITY frame for stream `id` (any stream but 0: idle,
    /// open or closed).
    pub(crate) fn priority(&self, id: u32, p: Priority) {
        assert_ne!(id, 0, "PRIORITY is for a stream");
        let c = self.conn.lock().unwrap();
        c.send(frame(PRIORITY, 0, id, &priority_block(id, p)));
    }

    /// Waits for the server's first SETTINGS (the client's ACK of it goes
    /// before anything the client sends next). Until the server has that
    /// ACK, its new streams have the protocol's 65,535-byte window, not
    /// the one it announced (RFC 9113, 6.5.3): a request sent at once
    /// meets one or the other by timing, and so do the server's
    /// WINDOW_UPDATEs for its body.
    /// With `window`, it also waits for the server's first connection
    /// WINDOW_UPDATE (of a server that grants more than the initial
    /// window), which otherwise gives back some of the first requests'
    /// DATA or not by timing.
    pub(crate) async fn try_ready(&self, window: bool) -> Result<(), String> {
        self.try_wait_for("the server's SETTINGS", |r| {
            r.count(SETTINGS, 0) > 0 && (!window || r.count(WINDOW_UPDATE, 0) > 0)
        })
        .await
    }

    /// The id of the stream the next request opens.
    pub(crate) fn next_stream(&self) -> u32 {
        self.conn.lock().unwrap().next_stream
    }

    /// Waits until every PING and SETTINGS the client sent is
    /// acknowledged.
    pub(crate) async fn settle(&self) -> Result<(), String> {
        let (pings, settings) = {
            let c = self.conn.lock().unwrap();
            (c.pings_sent.clone(), c.settings_sent)
        };
        self.try_wait_for("every PING's and SETTINGS' ACK", |r| {
            r.count(SETTINGS, ACK) >= settings
                && pings
                    .iter()
                    .all(|&p| r.pongs(p) >= pings.iter().filter(|&&q| q == p).count())
        })
        .await
    }

    /// What the client received so far.
    pub(crate) fn received(&self) -> Received {
        self.conn.lock().unwrap().received.clone()
    }

    /// Sends a GOAWAY (no stream of the server's processed, no error),
    /// waits until the server closes the connection, and returns what the
    /// client received.
    pub(crate) async fn go_away(self) -> Received {
        self.try_go_away()
            .await
            .unwrap_or_else(|(e, _)| panic!("{e}"))
    }

    /// [`go_away`](Client::go_away); an error, with what the client
    /// received, if the server did something wrong or did not close.
    pub(crate) async fn try_go_away(self) -> Result<Received, (String, Received)> {
        let mut payload = 0u32.to_be_bytes().to_vec();
        payload.extend_from_slice(&NO_ERROR.to_be_bytes());
        self.conn
            .lock()
            .unwrap()
            .send(frame(GOAWAY, 0, 0, &payload));
        let closed = self.try_wait_for("the server's close", |r| r.closed).await;
        let received = std::mem::take(&mut self.conn.lock().unwrap().received);
        match closed {
            Ok(()) => Ok(received),
            Err(e) => Err((e, received)),
        }
    }

    /// Waits until `done` holds of what the client received; an error if
    /// the server did something wrong, closed the connection first, or
    /// took too long.
    async fn try_wait_for(
        &self,
        what: &str,
        done: impl Fn(&Received) -> bool,
    ) -> Result<(), String> {
        self.reading(true);
        let wait = async {
            loop {
                let mut changed = pin!(self.changed.notified());
                changed.as_mut().enable();
                {
                    let r = &self.conn.lock().unwrap().received;
                    if let Some(e) = &r.error {
                        return Err(format!("waiting for {what}: {e}"));
                    }
                    if done(r) {
                        return Ok(());
                    }
                    if r.closed {
                        return Err(format!("the server closed before {what}"));
                    }
                }
                changed.await;
            }
        };
        timeout(CLIENT_TIMEOUT, wait)
            .await
            .unwrap_or_else(|_| Err(format!("timed out waiting for {what}")))
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
/// connection ends or the server does something wrong; it reads only while
/// `reading` says so ([`Client::reading`]).
async fn read_frames(
    mut read: ReadHalf<Box<dyn AsyncStream>>,
    conn: Arc<Mutex<Conn>>,
    changed: Arc<Notify>,
    mut reading: watch::Receiver<bool>,
) {
    let mut buf = Vec::new();
    let mut chunk = vec![0; 64 << 10];
    'conn: loop {
        while let Some(f) = take_frame(&mut buf) {
            let mut c = conn.lock().unwrap();
            match f.stream {
                0 => {}
                id => {
                    let stream = c.received.streams.entry(id).or_default();
                    stream.frames.push((f.kind, f.flags));
                }
            }
            let handled = c.on_frame(&f);
            if f.stream == 0 {
                c.received.connection.push(f);
            }
            if let Err(e) = handled {
                c.received.error = Some(e);
                break 'conn;
            }
            drop(c);
            changed.notify_waiters();
        }
        if !*reading.borrow_and_update() {
            match reading.changed().await {
                Ok(()) => continue,
                Err(_) => break,
            }
        }
        // A read stops (without losing bytes) when reading is turned off.
        tokio::select! {
            n = read.read(&mut chunk) => match n {
                // The end of the stream, or an error (a TLS close without
                // close_notify), ends the connection.
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            },
            turned = reading.changed() => if turned.is_err() {
                break;
            },
        }
    }
    conn.lock().unwrap().received.closed = true;
    changed.notify_waiters();
}

/// The first frame in `buf`, taken out of it, if all of it is there.
fn take_frame(buf: &mut Vec<u8>) -> Option<Frame> {
    let head: [u8; 9] = buf.get(..9)?.try_into().unwrap();
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let payload = buf.get(9..9 + len)?.to_vec();
    buf.drain(..9 + len);
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff,
        payload,
    })
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

/// The HEADERS frame of a header block, and CONTINUATION frames for the
/// rest: cut where `framing` says, and wherever a frame would be larger
/// than [`MAX_FRAME`].
fn header_frames(stream: u32, block: &[u8], end_stream: bool, framing: &Block) -> Vec<u8> {
    let mut cuts: Vec<usize> = framing
        .cuts
        .iter()
        .map(|&c| block.len() * usize::from(c.min(1000)) / 1000)
        .filter(|&c| c > 0 && c < block.len())
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.push(block.len());
    let mut fragments = Vec::new();
    let mut from = 0;
    for to in cuts {
        fragments.push(&block[from..to]);
        from = to;
    }

    let mut out = Vec::new();
    // The HEADERS frame: its padding and priority block around the first
    // fragment (or as much of it as fits).
    let mut prefix = Vec::new();
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if let Some(pad) = framing.padding {
        prefix.push(pad);
        flags |= PADDED;
    }
    if let Some(p) = framing.priority {
        prefix.extend(priority_block(stream, p));
        flags |= PRIORITY_FLAG;
    }
    let padding = usize::from(framing.padding.unwrap_or(0));
    let room = MAX_FRAME - prefix.len() - padding;
    let first = fragments[0];
    let (head, rest) = first.split_at(first.len().min(room));
    let mut frames: Vec<(u8, u8, Vec<u8>)> = Vec::new();
    let mut payload = prefix;
    payload.extend_from_slice(head);
    payload.resize(payload.len() + padding, 0);
    frames.push((HEADERS, flags, payload));
    for fragment in std::iter::once(rest).chain(fragments[1..].iter().copied()) {
        for chunk in fragment.chunks(MAX_FRAME) {
            frames.push((CONTINUATION, 0, chunk.to_vec()));
        }
    }
    let last = frames.len() - 1;
    frames[last].1 |= END_HEADERS;
    for (kind, flags, payload) in frames {
        out.extend(frame(kind, flags, stream, &payload));
    }
    out
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
