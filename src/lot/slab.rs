//! A slab: entries in a `Vec`, addressed by `u32` keys, vacant keys reused
//! last-freed first (as the `slab` crate does).
//!
//! Keys are `u32` because they travel in mio tokens and deadline queues
//! next to 32-bit times; an entry type with a niche (an fd) makes a vacant
//! entry cost nothing beyond the entry itself: `Option<Entry>` is as large
//! as `Entry`.
//!
//! The slab grows by a quarter at a time ([`grow`]), not by the `Vec`'s
//! doubling: its 16-byte slot is most of what a DORMANT connection costs,
//! and doubling leaves up to as many vacant slots as connections behind the
//! last growth (at 10,000 connections, 6,384 of them: 10 bytes per
//! connection). A quarter costs more, smaller copies while a server grows.

/// Entries addressed by `u32` keys.
#[derive(Debug)]
pub(crate) struct Slab<E> {
    entries: Vec<Option<E>>,
    /// Vacant keys, the last freed on top.
    free: Vec<u32>,
}

impl<E> Default for Slab<E> {
    fn default() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<E> Slab<E> {
    /// The key the next [`insert`](Self::insert) will use, if there is one
    /// (`None` once `u32` keys run out). Lets a caller register a key with
    /// a poll before the entry exists.
    pub(crate) fn vacant_key(&self) -> Option<u32> {
        match self.free.last() {
            Some(&key) => Some(key),
            None => u32::try_from(self.entries.len()).ok(),
        }
    }

    /// Stores `entry`; returns its key, or gives the entry back once `u32`
    /// keys run out.
    pub(crate) fn insert(&mut self, entry: E) -> Result<u32, E> {
        if let Some(key) = self.free.pop() {
            self.entries[key as usize] = Some(entry);
            return Ok(key);
        }
        let Ok(key) = u32::try_from(self.entries.len()) else {
            return Err(entry);
        };
        grow(&mut self.entries);
        self.entries.push(Some(entry));
        Ok(key)
    }

    /// Takes the entry at `key` out, if there is one.
    pub(crate) fn remove(&mut self, key: u32) -> Option<E> {
        let entry = self.entries.get_mut(key as usize)?.take()?;
        self.free.push(key);
        Some(entry)
    }

    pub(crate) fn get(&self, key: u32) -> Option<&E> {
        self.entries.get(key as usize)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, key: u32) -> Option<&mut E> {
        self.entries.get_mut(key as usize)?.as_mut()
    }

    /// Puts an entry back at the key [`remove`](Self::remove) just freed,
    /// so that an entry can change form under its key.
    pub(crate) fn put_back(&mut self, key: u32, entry: E) {
        debug_assert_eq!(self.free.last(), Some(&key), "not the key just freed");
        if self.free.last() == Some(&key) {
            self.free.pop();
            self.entries[key as usize] = Some(entry);
        }
    }

    /// One past the highest key ever handed out (and not forgotten).
    pub(crate) fn end(&self) -> u32 {
        self.entries.len() as u32
    }

    /// How many entries are stored.
    pub(crate) fn len(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// Frees the slab's memory if it is empty and has grown past `keep`
    /// keys: a burst would otherwise leave its high-water mark behind.
    /// Returns whether it did; keys handed out before are vacant either
    /// way.
    pub(crate) fn shrink_if_empty(&mut self, keep: usize) -> bool {
        if self.len() == 0 && self.entries.len() > keep {
            self.entries = Vec::new();
            self.free = Vec::new();
            return true;
        }
        false
    }
}

/// Makes room for one more entry in a full `vec`: a quarter of its length
/// (at least 16) at a time.
pub(crate) fn grow<E>(vec: &mut Vec<E>) {
    if vec.len() == vec.capacity() {
        vec.reserve_exact((vec.len() / 4).max(16));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_reused_last_freed_first() {
        let mut slab = Slab::default();
        assert_eq!(slab.vacant_key(), Some(0));
        let a = slab.insert('a').unwrap();
        let b = slab.insert('b').unwrap();
        let c = slab.insert('c').unwrap();
        assert_eq!((a, b, c), (0, 1, 2));
        assert_eq!(slab.remove(a), Some('a'));
        assert_eq!(slab.remove(c), Some('c'));
        assert_eq!(slab.len(), 1);
        assert_eq!(slab.vacant_key(), Some(c));
        assert_eq!(slab.insert('d'), Ok(c));
        assert_eq!(slab.insert('e'), Ok(a));
        assert_eq!(slab.vacant_key(), Some(3));
        assert_eq!(slab.get(b), Some(&'b'));
        assert_eq!(slab.remove(b), Some('b'));
        slab.put_back(b, 'B');
        assert_eq!((slab.get(b), slab.len(), slab.end()), (Some(&'B'), 3, 3));
        *slab.get_mut(b).unwrap() = 'b';
        assert_eq!(slab.get(b), Some(&'b'));
    }

    #[test]
    fn a_vacant_or_unknown_key_holds_nothing() {
        let mut slab = Slab::default();
        let a = slab.insert(1).unwrap();
        assert_eq!(slab.remove(a), Some(1));
        assert_eq!(slab.remove(a), None, "removed twice");
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.get(7), None);
        assert_eq!(slab.remove(7), None);
        assert_eq!(slab.len(), 0);
    }

    #[test]
    fn shrink_frees_the_memory() {
        let mut slab = Slab::default();
        for i in 0..10 {
            slab.insert(i).unwrap();
        }
        assert!(!slab.shrink_if_empty(4), "not empty");
        for key in 0..10 {
            slab.remove(key);
        }
        assert!(!slab.shrink_if_empty(10), "small enough to keep");
        assert_eq!(slab.vacant_key(), Some(9), "the last freed");
        assert!(slab.shrink_if_empty(4));
        assert_eq!(slab.vacant_key(), Some(0), "all keys forgotten");
    }

    #[test]
    fn it_grows_by_a_quarter() {
        let mut slab = Slab::default();
        for i in 0..10_000 {
            slab.insert(i).unwrap();
        }
        let capacity = slab.entries.capacity();
        assert!((10_000..=12_500).contains(&capacity), "{capacity}");
    }

    #[test]
    fn a_vacant_fd_entry_costs_nothing_extra() {
        // The DORMANT slot: an fd and a 32-bit deadline.
        struct Slot {
            _fd: std::os::fd::OwnedFd,
            _deadline: u32,
        }
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 8);
    }
}
