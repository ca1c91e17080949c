//! The buffer pool: where a waking connection gets its first read buffer.
//!
//! A parked connection owns no buffer (invariant I4 of the design). When its
//! socket turns readable, the driver takes one fixed-size buffer from the
//! pool, `try_read`s into it, and hands it to hyper's first read; the buffer
//! goes back as soon as hyper has copied the bytes out, usually within the
//! same poll. So the pool only ever holds as many buffers as there are
//! connections *waking at the same instant*, not as many as are open.
//!
//! ```text
//!   take() ──► thread cache hit? ──yes──► PoolBuf (RAII) ──drop──► thread cache
//!                    │ no                                       (full? free it)
//!                    ▼
//!               allocate (miss)
//! ```
//!
//! The fast path is a per-thread free list: no lock, no atomic beyond the
//! statistics. Each thread keeps at most [`THREAD_CACHE`] buffers, so the
//! memory kept for reuse is bounded by `threads × THREAD_CACHE × BUF_SIZE`.
//! Buffers are interchangeable between servers (they all have one size), so
//! the free lists are per thread rather than per server; the statistics are
//! per server.
//!
//! Upgraded streams read into the same buffers through one process-wide
//! handle ([`upgraded`]) with statistics of its own: a stream handed off in
//! an upgrade keeps no reference to the server it came from (invariant I5),
//! so it cannot use, or count in, the server's handle. A buffer it reads
//! into reaches its user as [`PooledBytes`].

use std::cell::RefCell;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, LazyLock};

/// Size of one pool buffer.
///
/// Request heads are rarely larger than 1–2 KiB; whatever does not fit stays
/// in the socket and hyper reads it itself. 4 KiB holds a typical head, and
/// several small pipelined requests, in one `read`.
pub(crate) const BUF_SIZE: usize = 4096;

/// How many free buffers one thread keeps for reuse.
pub(crate) const THREAD_CACHE: usize = 32;

thread_local! {
    static FREE: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// Buffers kept in thread caches, process-wide.
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// A server's handle on the buffer pool.
#[derive(Clone, Default)]
pub(crate) struct Pool {
    stats: Arc<PoolCounters>,
}

/// What the pool counts: buffers taken and not given back, and takes
/// that found a free buffer or had to allocate.
#[derive(Default)]
struct PoolCounters {
    in_use: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Pool {
    /// Takes a buffer of [`BUF_SIZE`] bytes.
    pub(crate) fn take(&self) -> PoolBuf {
        let reused = FREE.with(|free| free.borrow_mut().pop());
        let buf = match reused {
            Some(buf) => {
                KEPT.fetch_sub(1, Relaxed);
                self.stats.hits.fetch_add(1, Relaxed);
                buf
            }
            None => {
                self.stats.misses.fetch_add(1, Relaxed);
                vec![0; BUF_SIZE].into_boxed_slice()
            }
        };
        self.stats.in_use.fetch_add(1, Relaxed);
        PoolBuf {
            buf: Some(buf),
            stats: self.stats.clone(),
        }
    }

    pub(crate) fn stats(&self) -> PoolStats {
        PoolStats {
            in_use: self.stats.in_use.load(Relaxed),
            kept: KEPT.load(Relaxed),
            hits: self.stats.hits.load(Relaxed),
            misses: self.stats.misses.load(Relaxed),
        }
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.stats().fmt(f)
    }
}

/// The process-wide handle upgraded streams take their buffers from.
pub(crate) fn upgraded() -> &'static Pool {
    static UPGRADED: LazyLock<Pool> = LazyLock::new(Pool::default);
    &UPGRADED
}

/// Buffer pool figures, part of [`Stats`](crate::Stats), and of
/// [`upgrade::pool_stats`](crate::upgrade::pool_stats) for upgraded streams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Buffers of this server currently taken (0 whenever no connection is
    /// in the middle of waking up).
    pub in_use: usize,
    /// Free buffers kept for reuse, in all threads of the process.
    pub kept: usize,
    /// Takes served from a thread's free list.
    pub hits: u64,
    /// Takes that had to allocate.
    pub misses: u64,
}

/// A pool buffer. On drop it goes to the free list of the thread that drops
/// it, or is freed if that list is full.
pub(crate) struct PoolBuf {
    // `Option` only so that `Drop` can move the box out.
    buf: Option<Box<[u8]>>,
    stats: Arc<PoolCounters>,
}

impl Deref for PoolBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_deref().unwrap_or_default()
    }
}

impl DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().unwrap_or_default()
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        self.stats.in_use.fetch_sub(1, Relaxed);
        let Some(buf) = self.buf.take() else { return };
        // `try_with`: during thread teardown the cache may be gone; then the
        // buffer is simply freed.
        let _ = FREE.try_with(|free| {
            let mut free = free.borrow_mut();
            if free.len() < THREAD_CACHE {
                free.push(buf);
                KEPT.fetch_add(1, Relaxed);
            }
        });
    }
}

impl fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuf").field("len", &self.len()).finish()
    }
}

/// Bytes read from an upgraded stream, in a buffer from dormant's pool;
/// the buffer goes back to the pool when this is dropped.
///
/// Dereferences to the bytes read (at most 4 KiB). Drop it before the
/// stream waits for more, so that an idle stream holds no buffer.
pub struct PooledBytes {
    buf: PoolBuf,
    len: usize,
}

impl PooledBytes {
    pub(crate) fn new(buf: PoolBuf, len: usize) -> Self {
        debug_assert!(len <= buf.len());
        PooledBytes { buf, len }
    }

    /// Whether the read filled the buffer (more may be waiting).
    #[cfg(feature = "ws")]
    pub(crate) fn is_full(&self) -> bool {
        self.len == self.buf.len()
    }
}

impl Deref for PooledBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl DerefMut for PooledBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
}

impl AsRef<[u8]> for PooledBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for PooledBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledBytes")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_return_on_drop_and_are_reused() {
        let pool = Pool::default();
        let before = pool.stats();
        let a = pool.take();
        assert_eq!(a.len(), BUF_SIZE);
        assert_eq!(pool.stats().in_use, 1);
        drop(a);
        assert_eq!(pool.stats().in_use, 0);
        let b = pool.take();
        let after = pool.stats();
        assert_eq!(
            after.hits,
            before.hits + 1,
            "second take reuses the first buffer"
        );
        drop(b);
    }

    #[test]
    fn thread_cache_is_bounded() {
        let pool = Pool::default();
        std::thread::spawn(move || {
            let bufs: Vec<_> = (0..THREAD_CACHE * 2).map(|_| pool.take()).collect();
            drop(bufs);
            assert_eq!(FREE.with(|f| f.borrow().len()), THREAD_CACHE);
            assert_eq!(pool.stats().in_use, 0);
        })
        .join()
        .unwrap();
    }
}
