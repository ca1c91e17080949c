//! A tiny seeded xorshift64 (no rand crate): the same sequence on every
//! machine, for tests that generate their cases.

/// xorshift64; seed it with a non-zero number.
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `n` random bytes.
    #[cfg_attr(
        not(any(feature = "tls", feature = "tls-ring")),
        allow(dead_code, reason = "only the TLS record tests make random bytes")
    )]
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}
