//! [`Context`]: the slot array indexed by key, cleared by moving to the
//! next generation.

use std::any::Any;
use std::fmt;

use super::Key;
#[cfg(doc)]
use super::{ContextExt, RequestContext};

/// One slot: a key's typed cell, kept from request to request.
///
/// Reaching the value costs one indirect call (`Any::type_id`, the downcast
/// check). A `trait KeySlot { fn as_any(&self) -> &dyn Any; .. }` object would
/// cost two (`as_any`, then `type_id`); trait upcasting would avoid that but
/// needs Rust 1.86.
struct KeySlot {
    /// A `Box<Option<T>>` once the slot's key has stored a value in this
    /// context; before that a `Box<()>` (which allocates nothing).
    cell: Box<dyn Any + Send + Sync>,
    /// The slot holds a value iff this equals [`Context::generation`].
    ///
    /// So a clear empties every slot at once by moving to the next
    /// generation. A cell left behind still holds its last value when `T`
    /// has no drop glue (dropping it would do nothing, and it is never read
    /// again); values with drop glue are taken out and dropped by the clear.
    generation: u64,
    /// Drops the value in the cell; `None` when `T` has no drop glue.
    drop_value: Option<fn(&mut (dyn Any + Send + Sync))>,
}

impl KeySlot {
    /// A slot never used in its context: never equal to the generation.
    fn vacant() -> Self {
        KeySlot {
            cell: Box::new(()),
            generation: 0,
            drop_value: None,
        }
    }
}

/// Drops the value in a cell, keeping the cell.
fn drop_value<T: 'static>(cell: &mut (dyn Any + Send + Sync)) {
    if let Some(cell) = cell.downcast_mut::<Option<T>>() {
        // take() first: if the value's Drop panics the cell is already empty.
        drop(cell.take());
    }
}

/// A per-request map from [`Key`]s to values.
///
/// Usually reached through [`ContextExt`] on a request; see the
/// [module documentation](super) for how it is stored and recycled.
///
/// Purposefully not `Clone`: values are not required to be `Clone`.
pub struct Context {
    /// Indexed by key index. A slot keeps its cell (and its allocation)
    /// for the next value under its key.
    slots: Vec<KeySlot>,
    /// One bit per slot: set when a value with drop glue was stored there
    /// since the last clear, so the clear visits only those slots.
    needs_drop: Vec<u64>,
    /// Whether any bit of `needs_drop` may be set.
    pending_drops: bool,
    /// The current generation; never 0 (the generation of vacant slots).
    pub(super) generation: u64,
}

impl Context {
    /// Makes an empty context. Allocates nothing until the first insert.
    ///
    /// Prefer [`RequestContext::new`] (or [`ContextExt::context_mut`]),
    /// which reuses a recycled context.
    #[must_use]
    pub const fn new() -> Self {
        Context {
            slots: Vec::new(),
            needs_drop: Vec::new(),
            pending_drops: false,
            generation: 1,
        }
    }

    /// The typed cell of `key`'s slot, if the slot holds a value.
    #[inline]
    fn cell<T: Send + Sync + 'static>(&self, key: &Key<T>) -> Option<&Option<T>> {
        let slot = self.slots.get(key.raw())?;
        if slot.generation != self.generation {
            return None;
        }
        // The downcast cannot fail (a key index belongs to one key, so one
        // type), but it is the check that lets this module forbid `unsafe`.
        slot.cell.downcast_ref()
    }

    #[inline]
    fn cell_mut<T: Send + Sync + 'static>(&mut self, key: &Key<T>) -> Option<&mut Option<T>> {
        let slot = self.slots.get_mut(key.raw())?;
        if slot.generation != self.generation {
            return None;
        }
        slot.cell.downcast_mut()
    }

    /// Stores `value` under `key`, returning the value it replaces.
    ///
    /// Allocates only the first time `key` stores a value in this context
    /// (and when the slot array must grow); after [`clear`](Self::clear) or
    /// recycling, storing under the same key reuses the allocation.
    #[inline]
    pub fn insert<T: Send + Sync + 'static>(&mut self, key: &Key<T>, value: T) -> Option<T> {
        let index = key.index();
        if let Some(slot) = self.slots.get_mut(index) {
            if let Some(cell) = slot.cell.downcast_mut::<Option<T>>() {
                let old = cell.replace(value);
                if slot.generation == self.generation {
                    return old;
                }
                slot.generation = self.generation;
                if std::mem::needs_drop::<T>() {
                    self.needs_drop[index / 64] |= 1 << (index % 64);
                    self.pending_drops = true;
                    // An empty slot's cell is None, unless an earlier clear
                    // was interrupted by a panicking Drop before reaching
                    // it: then this is that value's one drop.
                    drop(old);
                }
                return None;
            }
        }
        self.insert_new(index, value);
        None
    }

    /// The first value for `index` in this context: allocates its cell.
    #[cold]
    #[inline(never)]
    fn insert_new<T: Send + Sync + 'static>(&mut self, index: usize, value: T) {
        if index >= self.slots.len() {
            self.slots.resize_with(index + 1, KeySlot::vacant);
            self.needs_drop.resize(self.slots.len().div_ceil(64), 0);
        }
        let slot = &mut self.slots[index];
        // The slot is vacant: indices are unique, so it never holds a cell
        // of another type (if it did, that value would be dropped here).
        slot.cell = Box::new(Some(value));
        slot.generation = self.generation;
        if std::mem::needs_drop::<T>() {
            slot.drop_value = Some(drop_value::<T>);
            self.needs_drop[index / 64] |= 1 << (index % 64);
            self.pending_drops = true;
        } else {
            slot.drop_value = None;
        }
    }

    /// Returns the value stored under `key`.
    #[inline]
    pub fn get<T: Send + Sync + 'static>(&self, key: &Key<T>) -> Option<&T> {
        self.cell(key)?.as_ref()
    }

    /// Returns the value stored under `key`, mutably.
    #[inline]
    pub fn get_mut<T: Send + Sync + 'static>(&mut self, key: &Key<T>) -> Option<&mut T> {
        self.cell_mut(key)?.as_mut()
    }

    /// Returns the value stored under `key`, storing `make()` first if there is none.
    pub fn get_or_insert_with<T: Send + Sync + 'static>(
        &mut self,
        key: &Key<T>,
        make: impl FnOnce() -> T,
    ) -> &mut T {
        if !self.contains(key) {
            self.insert(key, make());
        }
        self.get_mut(key)
            .expect("dormant::context: value stored just above")
    }

    /// Removes and returns the value stored under `key`.
    ///
    /// The slot's allocation stays for the next value under `key`.
    pub fn remove<T: Send + Sync + 'static>(&mut self, key: &Key<T>) -> Option<T> {
        let generation = self.generation;
        let slot = self.slots.get_mut(key.raw())?;
        if slot.generation != generation {
            return None;
        }
        let old = slot.cell.downcast_mut::<Option<T>>()?.take();
        slot.generation = 0;
        old
    }

    /// Returns whether a value is stored under `key`.
    #[inline]
    pub fn contains<T: Send + Sync + 'static>(&self, key: &Key<T>) -> bool {
        self.get(key).is_some()
    }

    /// Returns how many values are stored.
    ///
    /// Counted, not kept (keeping a count would cost every insert): linear
    /// in the number of keys this context has seen.
    pub fn len(&self) -> usize {
        let generation = self.generation;
        self.slots
            .iter()
            .filter(|slot| slot.generation == generation)
            .count()
    }

    /// Returns whether no value is stored. Linear like [`len`](Self::len).
    pub fn is_empty(&self) -> bool {
        let generation = self.generation;
        !self.slots.iter().any(|slot| slot.generation == generation)
    }

    /// Drops every value, keeping the allocations for the next request.
    ///
    /// Values of types without drop glue (integers, `&'static str`, plain
    /// structs of those) are not visited at all: moving to the next
    /// generation makes them unreachable. Values with drop glue are dropped
    /// here, visiting only the slots that held one since the last clear.
    ///
    /// If a value's `Drop` panics, the context is already empty; values not
    /// yet dropped are dropped by the next `clear` (or with the context).
    #[inline]
    pub fn clear(&mut self) {
        // Bookkeeping first, so a panicking Drop below leaves an empty,
        // consistent context.
        self.generation = match self.generation.checked_add(1) {
            Some(next) => next,
            None => self.restart_generations(),
        };
        if self.pending_drops {
            self.drop_values();
        }
    }

    /// Drops the values marked in `needs_drop`.
    #[inline(never)]
    fn drop_values(&mut self) {
        for word in 0..self.needs_drop.len() {
            while self.needs_drop[word] != 0 {
                let bit = self.needs_drop[word].trailing_zeros() as usize;
                // Unmark first: if this Drop panics, the next clear
                // resumes with the slots after it.
                self.needs_drop[word] &= self.needs_drop[word] - 1;
                let slot = &mut self.slots[word * 64 + bit];
                if let Some(drop_value) = slot.drop_value {
                    drop_value(&mut *slot.cell);
                }
            }
        }
        self.pending_drops = false;
    }

    /// After 2^64 clears: makes every slot stale again and starts over.
    #[cold]
    fn restart_generations(&mut self) -> u64 {
        for slot in &mut self.slots {
            slot.generation = 0;
        }
        1
    }
}

#[cfg(test)]
impl Context {
    /// How long the slot array is: the largest index seen, plus one.
    pub(super) fn slot_count(&self) -> usize {
        self.slots.len()
    }
}

impl Default for Context {
    fn default() -> Self {
        Context::new()
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values need not be Debug; say how many there are.
        f.debug_struct("Context")
            .field("values", &self.len())
            .field("slots", &self.slots.len())
            .finish()
    }
}
