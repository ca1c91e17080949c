//! [`Key`]: a typed key, which takes its index from one process-wide
//! counter the first time it stores a value.

use std::any::type_name;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

#[cfg(doc)]
use super::Context;

/// Next index to hand out. `usize::MAX` is never handed out: inside a
/// [`Key`] it means "unassigned", and as an index it is out of bounds of
/// every slot array, so a read with an unassigned key needs no extra check.
static NEXT_INDEX: AtomicUsize = AtomicUsize::new(0);

/// A [`Key`]'s index before the key first stores a value.
const UNASSIGNED: usize = usize::MAX;

/// A typed key for values of type `T` in a [`Context`].
///
/// Declare keys as statics:
///
/// ```
/// use dormant::context::Key;
///
/// static REQUEST_ID: Key<u64> = Key::new();
/// ```
///
/// Each `Key` *value* is a distinct key: two statics of the same type never
/// see each other's values. Keys can also be made at run time
/// (`Box::leak(Box::new(Key::new()))` or a key owned by a long-lived
/// struct), but each one takes a new index the first time it stores a
/// value, indices are never reused, and every context's slot array grows to
/// the largest index it has seen: make run-time keys a bounded number of
/// times (at start-up), never per request.
///
/// Keys are process-global, so a key works with every [`Context`] of every
/// server in the process; there is no registry to get wrong.
///
/// Purposefully not `Clone`: a copy would share the index once one had been
/// assigned and not before, so whether two copies are "the same key" would
/// depend on timing. Share a key by reference (`&'static Key<T>` is `Copy`).
pub struct Key<T> {
    /// The index; [`UNASSIGNED`] until the key first stores a value.
    index: AtomicUsize,
    // `fn() -> T`: a key stores no `T`, so it is `Send + Sync` (a static)
    // whatever `T` is.
    _type: PhantomData<fn() -> T>,
}

impl<T> Key<T> {
    /// Makes a new key, distinct from every other key.
    ///
    /// Its index is assigned on first use, so this is free and `const`.
    #[must_use]
    pub const fn new() -> Self {
        Key {
            index: AtomicUsize::new(UNASSIGNED),
            _type: PhantomData,
        }
    }

    /// The index, or [`UNASSIGNED`] (out of bounds of every slot array).
    #[inline]
    pub(super) fn raw(&self) -> usize {
        // Relaxed is enough: the index is a plain number published through
        // this one atomic, no other memory depends on it.
        self.index.load(Ordering::Relaxed)
    }

    /// The index, if this key has one already.
    pub(super) fn assigned(&self) -> Option<usize> {
        match self.raw() {
            UNASSIGNED => None,
            index => Some(index),
        }
    }

    /// The index, assigning one on first use.
    #[inline]
    pub(super) fn index(&self) -> usize {
        match self.raw() {
            UNASSIGNED => self.assign(),
            index => index,
        }
    }

    #[cold]
    fn assign(&self) -> usize {
        let fresh = NEXT_INDEX
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                n.checked_add(1).filter(|&next| next < UNASSIGNED)
            })
            .expect("dormant::context::Key: out of key indices");
        // Two threads may race to assign: the first compare_exchange wins and
        // both use its index; the loser's number is simply never used.
        match self
            .index
            .compare_exchange(UNASSIGNED, fresh, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => fresh,
            Err(winner) => winner,
        }
    }
}

impl<T> Default for Key<T> {
    /// Same as [`Key::new`]: a new, distinct key.
    fn default() -> Self {
        Key::new()
    }
}

impl<T> fmt::Debug for Key<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("type", &type_name::<T>())
            .field("index", &self.assigned())
            .finish()
    }
}
