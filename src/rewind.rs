//! [`Rewind`]: bytes read ahead of a reader, served before its socket
//! (hyper's `Rewind`).
//!
//! Bytes are often read before the reader that needs them exists, or past
//! what one reader took: the start of a request read while a connection
//! waited PARKED, what hyper had read past its last message, bytes a look
//! for the peer's close found, what the HTTP/2 watcher let through, bytes
//! after an upgrade request. Each is served first, before the socket is
//! read again (invariant I2: lossless), and let go as soon as the last of
//! it is served: a copied allocation freed, a pool buffer back to the pool
//! (invariant I4: no buffer across an idle wait).
//!
//! Where the bytes are kept differs ([`Ahead`]): copied out (`Bytes`), the
//! pool buffer of a read ([`Fresh`]), or both, copied bytes first (the
//! driver's [`Replay`]). The rule that serves them is written once,
//! here, for the three kinds of reader: tokio's `ReadBuf`, hyper's
//! `ReadBufCursor`, and a plain slice.

use std::ops::Range;

use bytes::{Buf, Bytes};
use hyper::rt::ReadBufCursor;
use tokio::io::ReadBuf;

use crate::pool::PoolBuf;

/// Where bytes read ahead are kept.
pub(crate) trait Ahead: Default {
    /// The next bytes to serve, contiguous: empty only once every byte was
    /// served.
    fn chunk(&self) -> &[u8];

    /// Notes that the first `n` bytes of [`chunk`](Self::chunk) were
    /// served.
    fn advance(&mut self, n: usize);

    /// Whether every byte was served: [`chunk`](Self::chunk) is empty, or
    /// a cheaper test where a [`Rewind`] keeps it true (it lets go of the
    /// bytes once their chunk is empty).
    #[inline]
    fn is_empty(&self) -> bool {
        self.chunk().is_empty()
    }
}

/// Bytes copied out of an earlier reader's buffer.
impl Ahead for Bytes {
    fn chunk(&self) -> &[u8] {
        self
    }

    fn advance(&mut self, n: usize) {
        Buf::advance(self, n);
    }
}

/// The pool buffer of a read, and the part of it not served yet: back to
/// the pool once served (the `Default`, `None`, holds none).
pub(crate) type Fresh = Option<(PoolBuf, Range<usize>)>;

impl Ahead for Fresh {
    fn chunk(&self) -> &[u8] {
        match self {
            Some((buf, range)) => &buf[range.clone()],
            None => &[],
        }
    }

    fn advance(&mut self, n: usize) {
        if let Some((_, range)) = self {
            range.start += n;
        }
    }
}

/// Bytes read ahead of a reader, served before its socket; let go once
/// served.
#[derive(Debug, Default)]
pub(crate) struct Rewind<B>(B);

impl<B: Ahead> Rewind<B> {
    /// Serves `ahead` first.
    pub(crate) fn new(ahead: B) -> Self {
        Rewind(ahead)
    }

    /// Whether every byte was served.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The bytes not served yet, as they are kept.
    pub(crate) fn get_ref(&self) -> &B {
        &self.0
    }

    /// The bytes not served yet, as they are kept.
    pub(crate) fn into_inner(self) -> B {
        self.0
    }

    /// Copies up to `dst.remaining()` bytes into tokio's `dst`; returns
    /// how many.
    #[inline]
    pub(crate) fn serve(&mut self, dst: &mut ReadBuf<'_>) -> usize {
        let max = dst.remaining();
        self.hand_over(max, |bytes| dst.put_slice(bytes))
    }

    /// Copies up to `dst.remaining()` bytes into hyper's `dst`; returns
    /// how many.
    #[inline]
    pub(crate) fn serve_hyper(&mut self, dst: &mut ReadBufCursor<'_>) -> usize {
        let max = dst.remaining();
        self.hand_over(max, |bytes| dst.put_slice(bytes))
    }

    /// Copies up to `dst.len()` bytes into `dst`; returns how many.
    pub(crate) fn take_into(&mut self, dst: &mut [u8]) -> usize {
        let max = dst.len();
        self.hand_over(max, |bytes| dst[..bytes.len()].copy_from_slice(bytes))
    }

    /// Hands up to `max` bytes, contiguous, to `put`; returns how many.
    /// The last byte served lets go of where they were kept.
    #[inline]
    fn hand_over(&mut self, max: usize, put: impl FnOnce(&[u8])) -> usize {
        let chunk = self.0.chunk();
        let n = max.min(chunk.len());
        put(&chunk[..n]);
        self.0.advance(n);
        if self.0.chunk().is_empty() {
            // An empty view would still keep its allocation, or its pool
            // buffer, alive.
            self.0 = B::default();
        }
        n
    }
}

/// Bytes read from the socket before hyper was built, which its first
/// reads get (through a [`Rewind`]).
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// Unparsed bytes carried over from an earlier hyper connection, or an
    /// incomplete HTTP/2 preface.
    pub(crate) carried: Bytes,
    /// The pool buffer of the read that woke the connection, and how many
    /// bytes of it are filled and not yet handed over.
    pub(crate) fresh: Fresh,
}

impl Replay {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.carried.len() + self.fresh.as_ref().map_or(0, |(_, r)| r.len())
    }

    /// Whether every byte was handed over (a `fresh` buffer is dropped
    /// once it has been).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.fresh.is_none() && self.carried.is_empty()
    }

    /// The first `n` bytes, contiguous (copies only if they straddle the two
    /// parts). Used to recognise the HTTP/2 preface.
    pub(crate) fn starts_with(&self, prefix: &[u8]) -> bool {
        let mut prefix = prefix;
        let c = self.carried.len().min(prefix.len());
        if self.carried[..c] != prefix[..c] {
            return false;
        }
        prefix = &prefix[c..];
        match &self.fresh {
            Some((buf, range)) => {
                let f = range.len().min(prefix.len());
                buf[range.start..range.start + f] == prefix[..f]
            }
            None => true,
        }
    }

    /// Moves every byte into `carried`, releasing the pool buffer.
    pub(crate) fn into_carried(mut self) -> Bytes {
        match self.fresh.take() {
            None => self.carried,
            Some((buf, range)) if self.carried.is_empty() => Bytes::copy_from_slice(&buf[range]),
            Some((buf, range)) => {
                let mut all = Vec::with_capacity(self.carried.len() + range.len());
                all.extend_from_slice(&self.carried);
                all.extend_from_slice(&buf[range]);
                all.into()
            }
        }
    }
}

/// The carried bytes first, then the fresh ones.
impl Ahead for Replay {
    #[inline]
    fn chunk(&self) -> &[u8] {
        match self.carried.is_empty() {
            false => &self.carried,
            true => self.fresh.chunk(),
        }
    }

    #[inline]
    fn advance(&mut self, n: usize) {
        match self.carried.is_empty() {
            false => Buf::advance(&mut self.carried, n),
            true => self.fresh.advance(n),
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        Replay::is_empty(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copied bytes let go of their allocation once served.
    #[test]
    fn copied_bytes_are_freed_once_served() {
        let mut rewind = Rewind::new(Bytes::from(b"abc".to_vec()));
        let mut all = [0; 8];
        assert_eq!(rewind.take_into(&mut all), 3);
        assert!(rewind.is_empty());
        assert_eq!(rewind.into_inner(), Bytes::new());
    }
}
