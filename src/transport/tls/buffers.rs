//! The buffers a TLS stream uses while bytes move, from a per-thread
//! cache: a record buffer for ciphertext read, records encrypted and not
//! yet written, plaintext decrypted and not yet read.

use std::cell::RefCell;
use std::io;

/// The largest TLS record on the wire: 16 KiB of plaintext plus TLS 1.2's
/// largest expansion and the header.
pub(super) const RECORD: usize = 16 * 1024 + 2048 + 5;

/// The most bytes read and not yet discarded while rustls joins a
/// handshake message in place: the record holding the message's start
/// (and the messages before it), the message's other pieces moved up to
/// it (rustls joins no message over 64 KiB: its `MAX_HANDSHAKE_SIZE`,
/// refused at its header), and the record in flight.
pub(super) const JOINING: usize = RECORD + 4 + 0xffff + RECORD;

/// How many [`Buffers`] one thread keeps for reuse.
const CACHED_BUFFERS: usize = 16;

thread_local! {
    // Boxed: a stream takes the box itself, so taking and giving back
    // moves a pointer, never allocates.
    #[allow(clippy::vec_box)]
    static BUFFERS: RefCell<Vec<Box<Buffers>>> = const { RefCell::new(Vec::new()) };
}

/// What a stream uses while bytes move.
pub(super) struct Buffers {
    /// [`RECORD`] bytes while reading (or the start of a record, until a
    /// read needs room), `in_len` of them filled.
    pub(super) incoming: Vec<u8>,
    pub(super) in_len: usize,
    pub(super) outgoing: Vec<u8>,
    /// Bytes of `outgoing` already written.
    pub(super) sent: usize,
    pub(super) plain: Vec<u8>,
    /// Bytes of `plain` already read.
    pub(super) plain_read: usize,
}

impl Buffers {
    /// Buffers from this thread's cache (or new ones), holding `partial`
    /// (the start of a record) first. New ones get their record buffer
    /// from the first read that needs it ([`Self::make_room`]): a write
    /// needs none.
    pub(super) fn take(partial: Vec<u8>) -> Box<Buffers> {
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

    /// Makes room in `incoming` to read into: a whole record buffer; when
    /// the bytes held fill it (a handshake message joined in place), a
    /// record more, up to `limit`; back to one record once the bytes held
    /// fit in one. False if the bytes held reach `limit`.
    pub(super) fn make_room(&mut self, limit: usize) -> bool {
        let len = self.incoming.len();
        let size = if self.in_len < RECORD {
            RECORD
        } else if self.in_len < len {
            len
        } else if self.in_len < limit {
            (self.in_len + RECORD).min(limit)
        } else {
            return false;
        };
        if size != len {
            let mut resized = vec![0; size];
            resized[..self.in_len].copy_from_slice(&self.incoming[..self.in_len]);
            self.incoming = resized;
        }
        true
    }

    /// Gives quiet buffers back to this thread's cache (or frees them);
    /// returns the start of a record they held, copied to its size.
    pub(super) fn give(mut self: Box<Self>) -> Vec<u8> {
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
    pub(super) fn is_quiet(&self) -> bool {
        self.plain_read == self.plain.len() && self.sent == self.outgoing.len()
    }

    /// Drops the first `n` processed bytes of `incoming`.
    pub(super) fn consume(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.incoming.copy_within(n..self.in_len, 0);
        self.in_len -= n;
    }
}
/// Appends to `buf` what `encode` writes into the room it is given: `need`
/// bytes first, then as many as its error says it needs (`required`).
pub(super) fn append<E>(
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
pub(super) fn room(buf: &mut Vec<u8>, n: usize) -> &mut [u8] {
    let start = buf.len();
    buf.resize(start + n, 0);
    &mut buf[start..]
}
