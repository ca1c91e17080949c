//! The typed-index request context map.
//!
//! Middleware often needs to hang values on a request: a request id, the
//! authenticated user, a tracing span, a deadline. This module gives each
//! request one [`Context`] in which such values are stored under typed
//! [`Key`]s, and makes storing them cheap enough to do on every request.
//!
//! # Why not `context.WithValue` or `http::Extensions`
//!
//! Caddy built each request's context with chains of Go's
//! `context.WithValue` and string keys: every lookup walked the chain and
//! compared strings, and every value cost an allocation. Moving to typed
//! integer keys and one pooled map per request made request setup several
//! times faster, with about half the allocations (BENCHMARKS.md, "Context
//! map", measures this module).
//!
//! [`http::Extensions`] is the type-keyed map every Rust HTTP stack uses. It
//! is a good general tool but not a cheap one: the map itself is boxed and
//! allocated on the first insert of every request, each value is boxed
//! again, every lookup hashes a `TypeId`, and everything is freed when the
//! request ends, so the next request allocates it all again. Keys are types,
//! so two middlewares that both want to store a `u64` need newtypes.
//!
//! # How it works
//!
//! A [`Key<T>`] is usually a `static`. The first time a key is used to store
//! a value it takes the next number from one process-wide atomic counter;
//! that number is its index for the rest of the process. A [`Context`] is a
//! slot array indexed by it: a lookup is a bounds check, a generation
//! compare, one `TypeId` comparison (the downcast that keeps this module
//! free of `unsafe`; it cannot fail, since an index belongs to one key and
//! so to one type) and a pointer read. No hashing, no string compares.
//!
//! ```text
//! static REQUEST_ID: Key<u64>   index 0 ─┐
//! static USER: Key<String>      index 1 ─┼─┐
//! static DEADLINE: Key<Instant> index 2 ─┼─┼─┐
//!                                        ▼ ▼ ▼
//! Context.slots: [ gen 7, cell | gen 7, cell | gen 0, () ] ...  generation: 7
//!                          │             │
//!             Box<Option<u64>>   Box<Option<String>>   (kept when cleared)
//! ```
//!
//! A slot holds a value when its generation is the context's. Clearing moves
//! the context to the next generation, which empties every slot at once.
//!
//! Because keys are process-global there is no "key from another server"
//! failure mode: every key is valid with every `Context`, of any server, and
//! nothing here panics on a key. A key that was never used to store anything
//! has no index yet, and reading with it just finds nothing (without
//! assigning one); a key whose index is beyond a context's slot array finds
//! nothing in that context.
//!
//! # What is recycled, and when
//!
//! A slot's cell (a small box holding an `Option<T>`) is allocated the first
//! time its key stores a value in that `Context`. [`Context::clear`] drops the
//! *values* but keeps the cells and the slot array, so storing the same keys
//! again allocates nothing, whatever the size of the values: a value is
//! moved into its key's existing cell. Values of types without drop glue
//! (integers, `&'static str`, plain structs of those) are not even visited:
//! the new generation hides them. Values with drop glue are dropped by the
//! clear, which visits only the slots that held one (a bit per slot).
//!
//! The per-request context travels in the request's extensions as one
//! [`RequestContext`] entry (a pointer to a boxed `Context`). When that entry
//! is dropped (the request ends), its `Context` is cleared and put on a small
//! bounded per-thread free list; [`RequestContext::new`] takes from that
//! list. In steady state a request that stores values of the same keys as
//! earlier requests on the same thread allocates nothing for its context.
//! Inserting the entry into the request's own `http::Extensions` is another
//! matter: that map is boxed and allocated per request by `http` (three
//! allocations when it was empty), which is why [`ContextExt::context_mut`]
//! inserts the entry only when a request first needs it.
//!
//! Values are dropped exactly once: when they are replaced or removed, when
//! the context is cleared, or when the request ends. Nothing stored by one
//! request is visible to the next.
//!
//! # Example
//!
//! ```
//! use dormant::context::{ContextExt, Key};
//! use http::Request;
//!
//! static REQUEST_ID: Key<u64> = Key::new();
//! static USER: Key<String> = Key::new();
//!
//! // A middleware-like step: stores values on the request.
//! fn authenticate(req: &mut Request<()>) {
//!     let ctx = req.context_mut();
//!     ctx.insert(&REQUEST_ID, 42);
//!     ctx.insert(&USER, "ada".to_owned());
//! }
//!
//! // A handler-like step: reads them.
//! fn handle(req: &Request<()>) -> String {
//!     let ctx = req.context().expect("authenticate ran");
//!     let id = ctx.get(&REQUEST_ID).copied().unwrap_or(0);
//!     let user = ctx.get(&USER).map_or("anonymous", String::as_str);
//!     format!("request {id} by {user}")
//! }
//!
//! let mut req = Request::new(());
//! authenticate(&mut req);
//! assert_eq!(handle(&req), "request 42 by ada");
//! ```

use std::any::{Any, type_name};
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{Extensions, Request};

/// Next index to hand out. `usize::MAX` is never handed out: inside a
/// [`Key`] it means "unassigned", and as an index it is out of bounds of
/// every slot array, so a read with an unassigned key needs no extra check.
static NEXT_INDEX: AtomicUsize = AtomicUsize::new(0);

/// A [`Key`]'s index before the key first stores a value.
const UNASSIGNED: usize = usize::MAX;

/// At most this many cleared contexts wait on each thread's free list.
///
/// A request needs one; a few cover a task that holds several requests at
/// once. More would only keep memory that nobody asked for.
const FREE_LIST_CAP: usize = 8;

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
    fn raw(&self) -> usize {
        // Relaxed is enough: the index is a plain number published through
        // this one atomic, no other memory depends on it.
        self.index.load(Ordering::Relaxed)
    }

    /// The index, if this key has one already.
    fn assigned(&self) -> Option<usize> {
        match self.raw() {
            UNASSIGNED => None,
            index => Some(index),
        }
    }

    /// The index, assigning one on first use.
    #[inline]
    fn index(&self) -> usize {
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

/// One slot: a key's typed cell, kept from request to request.
///
/// Reaching the value costs one indirect call (`Any::type_id`, the downcast
/// check). A `trait Slot { fn as_any(&self) -> &dyn Any; .. }` object would
/// cost two (`as_any`, then `type_id`); trait upcasting would avoid that but
/// needs Rust 1.86.
struct Slot {
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

impl Slot {
    /// A slot never used in its context: never equal to the generation.
    fn vacant() -> Self {
        Slot {
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
/// [module documentation](self) for how it is stored and recycled.
///
/// Purposefully not `Clone`: values are not required to be `Clone`.
pub struct Context {
    /// Indexed by key index. A slot keeps its cell (and its allocation)
    /// for the next value under its key.
    slots: Vec<Slot>,
    /// One bit per slot: set when a value with drop glue was stored there
    /// since the last clear, so the clear visits only those slots.
    needs_drop: Vec<u64>,
    /// Whether any bit of `needs_drop` may be set.
    pending_drops: bool,
    /// The current generation; never 0 (the generation of vacant slots).
    generation: u64,
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
            self.slots.resize_with(index + 1, Slot::vacant);
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

thread_local! {
    /// Cleared contexts waiting for the next request on this thread.
    ///
    /// Boxed on purpose: the box itself is what a `RequestContext` holds,
    /// so taking one and giving it back moves a pointer, not the context.
    #[allow(clippy::vec_box)]
    static FREE: RefCell<Vec<Box<Context>>> = const { RefCell::new(Vec::new()) };
}

/// Takes a cleared context from this thread's free list, or makes one.
#[inline]
fn take_free() -> Box<Context> {
    FREE.try_with(|free| free.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten()
        .unwrap_or_else(new_context)
}

/// The first context of a thread (or one more than the free list held).
#[cold]
fn new_context() -> Box<Context> {
    Box::new(Context::new())
}

/// Puts a cleared context on this thread's free list, if there is room.
#[inline]
fn give_back(ctx: Box<Context>) {
    debug_assert!(ctx.is_empty());
    // try_with: the thread may be exiting; try_borrow_mut: never panic in
    // drop. Either way the context is just freed.
    let _ = FREE.try_with(|free| {
        if let Ok(mut free) = free.try_borrow_mut() {
            if free.len() < FREE_LIST_CAP {
                // One allocation per thread, then never again.
                if free.capacity() == 0 {
                    free.reserve_exact(FREE_LIST_CAP);
                }
                free.push(ctx);
            }
        }
    });
}

/// A request's [`Context`], as stored in the request's extensions.
///
/// [`ContextExt::context_mut`] inserts one when a request first needs it, so
/// middleware works the same inside a `dormant` server and outside one (in
/// unit tests, behind another server). Inserting one eagerly is also fine:
/// `req.extensions_mut().insert(RequestContext::new())`. It dereferences to
/// its [`Context`].
///
/// Creating one takes a cleared context from a per-thread free list;
/// dropping one clears its context (dropping the values) and returns it to
/// the free list of the thread that drops it, so steady-state requests
/// allocate nothing for their context (the first one on a thread allocates
/// it).
///
/// `Clone` exists because [`http::Extensions::insert`] requires it, and it
/// is deliberately shallow: **a clone is a new, empty context**. Values are
/// not required to be `Clone`, and a cloned request (a retry, a mirror) is
/// a new request.
pub struct RequestContext {
    /// `None` only inside `drop`, once the context is back on the free list.
    ctx: Option<Box<Context>>,
}

impl RequestContext {
    /// Creates an empty context, recycled from this thread's free list when possible.
    #[must_use]
    #[inline]
    pub fn new() -> Self {
        RequestContext {
            ctx: Some(take_free()),
        }
    }
}

impl Default for RequestContext {
    fn default() -> Self {
        RequestContext::new()
    }
}

impl Clone for RequestContext {
    /// A new, *empty* context: values are not cloned (see the type's docs).
    fn clone(&self) -> Self {
        RequestContext::new()
    }
}

impl Drop for RequestContext {
    #[inline]
    fn drop(&mut self) {
        if let Some(mut ctx) = self.ctx.take() {
            // Clear before touching the free list: a value's Drop may itself
            // drop a request (and so reach the free list).
            ctx.clear();
            give_back(ctx);
        }
    }
}

impl Deref for RequestContext {
    type Target = Context;

    #[inline]
    fn deref(&self) -> &Context {
        self.ctx
            .as_deref()
            .expect("dormant::context: RequestContext is only empty in drop")
    }
}

impl DerefMut for RequestContext {
    #[inline]
    fn deref_mut(&mut self) -> &mut Context {
        self.ctx
            .as_deref_mut()
            .expect("dormant::context: RequestContext is only empty in drop")
    }
}

impl fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RequestContext").field(&**self).finish()
    }
}

mod sealed {
    /// Private supertrait of [`super::ContextExt`].
    pub trait Sealed {}
    impl<B> Sealed for http::Request<B> {}
    impl Sealed for http::request::Parts {}
    impl Sealed for http::Extensions {}
}

/// Reaches a request's [`Context`].
///
/// Implemented for [`http::Request`], [`http::request::Parts`] and
/// [`http::Extensions`]. Sealed: the context lives in exactly one place (the
/// [`RequestContext`] entry of the request's extensions), and every type
/// that can reach that entry already has an impl; keeping the trait sealed
/// also lets methods be added without breaking anyone.
pub trait ContextExt: sealed::Sealed {
    /// The request's context, if it has one.
    fn context(&self) -> Option<&Context>;

    /// The request's context, inserting a recycled empty one if it has none.
    fn context_mut(&mut self) -> &mut Context;
}

impl ContextExt for Extensions {
    #[inline]
    fn context(&self) -> Option<&Context> {
        self.get::<RequestContext>().map(|rc| &**rc)
    }

    #[inline]
    fn context_mut(&mut self) -> &mut Context {
        self.get_or_insert_with(RequestContext::new)
    }
}

impl<B> ContextExt for Request<B> {
    #[inline]
    fn context(&self) -> Option<&Context> {
        self.extensions().context()
    }

    #[inline]
    fn context_mut(&mut self) -> &mut Context {
        self.extensions_mut().context_mut()
    }
}

impl ContextExt for http::request::Parts {
    #[inline]
    fn context(&self) -> Option<&Context> {
        self.extensions.context()
    }

    #[inline]
    fn context_mut(&mut self) -> &mut Context {
        self.extensions.context_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    /// Counts its drops into a shared counter.
    #[derive(Debug)]
    struct Tracked(Arc<AtomicUsize>);

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> Arc<AtomicUsize> {
        Arc::new(AtomicUsize::new(0))
    }

    fn drops(c: &Arc<AtomicUsize>) -> usize {
        c.load(Ordering::SeqCst)
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Point {
        x: i32,
        y: i32,
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Sixteen {
        a: u64,
        b: u64,
    }

    #[test]
    fn insert_get_replace_remove() {
        static ID: Key<u64> = Key::new();
        let mut ctx = Context::new();
        assert!(ctx.is_empty());
        assert_eq!(ctx.get(&ID), None);
        assert!(!ctx.contains(&ID));

        assert_eq!(ctx.insert(&ID, 7), None);
        assert_eq!(ctx.get(&ID), Some(&7));
        assert!(ctx.contains(&ID));
        assert_eq!(ctx.len(), 1);

        assert_eq!(ctx.insert(&ID, 8), Some(7));
        assert_eq!(ctx.get(&ID), Some(&8));
        assert_eq!(ctx.len(), 1);

        *ctx.get_mut(&ID).unwrap() += 1;
        assert_eq!(ctx.get(&ID), Some(&9));

        assert_eq!(ctx.remove(&ID), Some(9));
        assert_eq!(ctx.remove(&ID), None);
        assert_eq!(ctx.get(&ID), None);
        assert!(ctx.is_empty());

        assert_eq!(*ctx.get_or_insert_with(&ID, || 1), 1);
        assert_eq!(*ctx.get_or_insert_with(&ID, || 2), 1);
    }

    #[test]
    fn several_types_and_keys_of_one_type() {
        static A: Key<u64> = Key::new();
        static B: Key<u64> = Key::new();
        static NAME: Key<String> = Key::new();
        static POINT: Key<Point> = Key::new();
        static SIXTEEN: Key<Sixteen> = Key::new();
        static TEXT: Key<&'static str> = Key::new();

        let mut ctx = Context::new();
        ctx.insert(&A, 1);
        ctx.insert(&B, 2);
        ctx.insert(&NAME, "ada".to_owned());
        ctx.insert(&POINT, Point { x: 1, y: -1 });
        ctx.insert(&SIXTEEN, Sixteen { a: 3, b: 4 });
        ctx.insert(&TEXT, "static");

        assert_eq!(ctx.get(&A), Some(&1));
        assert_eq!(ctx.get(&B), Some(&2));
        assert_eq!(ctx.get(&NAME).map(String::as_str), Some("ada"));
        assert_eq!(ctx.get(&POINT), Some(&Point { x: 1, y: -1 }));
        assert_eq!(ctx.get(&SIXTEEN), Some(&Sixteen { a: 3, b: 4 }));
        assert_eq!(ctx.get(&TEXT), Some(&"static"));
        assert_eq!(ctx.len(), 6);
        assert!(format!("{ctx:?}").contains("values: 6"));

        ctx.get_mut(&NAME).unwrap().push_str(" lovelace");
        assert_eq!(ctx.get(&NAME).unwrap(), "ada lovelace");

        ctx.clear();
        assert!(ctx.is_empty());
        assert_eq!(ctx.get(&A), None);
        assert_eq!(ctx.get(&NAME), None);
    }

    #[test]
    fn cleared_plain_values_are_gone() {
        // Types without drop glue are cleared by a flag; their stale bytes
        // must never be seen again.
        static N: Key<u64> = Key::new();
        static S: Key<&'static str> = Key::new();
        let mut ctx = Context::new();
        ctx.insert(&N, 1);
        ctx.insert(&S, "old");
        ctx.clear();
        assert!(ctx.is_empty());
        assert_eq!(ctx.get(&N), None);
        assert_eq!(ctx.get_mut(&S), None);
        assert!(!ctx.contains(&N));
        assert_eq!(ctx.remove(&N), None);
        assert_eq!(ctx.insert(&N, 2), None, "no stale value comes back");
        assert_eq!(ctx.insert(&N, 3), Some(2));
        assert_eq!(ctx.remove(&N), Some(3));
        assert_eq!(ctx.insert(&N, 4), None);
        assert_eq!(*ctx.get_or_insert_with(&S, || "new"), "new");
        assert_eq!(ctx.len(), 2);
    }

    #[test]
    fn a_panicking_drop_leaves_the_context_consistent() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("boom");
            }
        }
        static BOMB: Key<Bomb> = Key::new();
        static AFTER: Key<Tracked> = Key::new();
        let c = counter();
        let mut ctx = Context::new();
        ctx.insert(&BOMB, Bomb);
        ctx.insert(&AFTER, Tracked(c.clone()));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.clear()));
        assert!(caught.is_err());
        assert!(!ctx.contains(&BOMB));
        assert_eq!(ctx.len(), usize::from(ctx.contains(&AFTER)));
        ctx.clear();
        assert!(ctx.is_empty());
        assert_eq!(drops(&c), 1);
    }

    #[test]
    fn unused_key_reads_without_taking_an_index() {
        static NEVER_STORED: Key<u8> = Key::new();
        let mut ctx = Context::new();
        assert_eq!(ctx.get(&NEVER_STORED), None);
        assert_eq!(ctx.get_mut(&NEVER_STORED), None);
        assert_eq!(ctx.remove(&NEVER_STORED), None);
        assert!(!ctx.contains(&NEVER_STORED));
        assert_eq!(NEVER_STORED.assigned(), None);
    }

    #[test]
    fn runtime_keys_are_distinct() {
        let a: &'static Key<u32> = Box::leak(Box::new(Key::new()));
        let b = Key::<u32>::default();
        let mut ctx = Context::new();
        ctx.insert(a, 1);
        ctx.insert(&b, 2);
        assert_eq!(ctx.get(a), Some(&1));
        assert_eq!(ctx.get(&b), Some(&2));
        assert_ne!(a.index(), b.index());
    }

    #[test]
    fn dropped_once_on_replace_remove_and_clear() {
        static T: Key<Tracked> = Key::new();
        let (first, second, third) = (counter(), counter(), counter());
        let mut ctx = Context::new();

        ctx.insert(&T, Tracked(first.clone()));
        let old = ctx.insert(&T, Tracked(second.clone()));
        assert_eq!(
            drops(&first),
            0,
            "the replaced value is returned, not dropped"
        );
        drop(old);
        assert_eq!(drops(&first), 1);

        let removed = ctx.remove(&T);
        assert_eq!(drops(&second), 0);
        drop(removed);
        assert_eq!(drops(&second), 1);

        ctx.insert(&T, Tracked(third.clone()));
        ctx.clear();
        assert_eq!(drops(&third), 1);
        ctx.clear();
        drop(ctx);
        assert_eq!((drops(&first), drops(&second), drops(&third)), (1, 1, 1));
    }

    #[test]
    fn dropped_once_when_context_is_dropped() {
        static T: Key<Tracked> = Key::new();
        let c = counter();
        let mut ctx = Context::new();
        ctx.insert(&T, Tracked(c.clone()));
        drop(ctx);
        assert_eq!(drops(&c), 1);
    }

    #[test]
    fn dropped_once_when_request_ends() {
        static T: Key<Tracked> = Key::new();
        let c = counter();
        let mut req = Request::new(());
        req.context_mut().insert(&T, Tracked(c.clone()));
        assert_eq!(drops(&c), 0);
        drop(req);
        assert_eq!(drops(&c), 1);
        // The recycled context is taken again and dropped again: no second
        // drop of the value.
        drop(RequestContext::new());
        assert_eq!(drops(&c), 1);
    }

    #[test]
    fn no_values_leak_between_requests_on_a_thread() {
        static ID: Key<u64> = Key::new();
        static NAME: Key<String> = Key::new();

        let mut first = RequestContext::new();
        first.insert(&ID, 1);
        first.insert(&NAME, "first".to_owned());
        drop(first);

        let mut second = RequestContext::new();
        assert!(second.is_empty());
        assert_eq!(second.get(&ID), None);
        assert_eq!(second.get(&NAME), None);
        // The recycled slots are reused: same slot array as before.
        assert!(second.slots.len() > ID.index().max(NAME.index()));
        second.insert(&ID, 2);
        assert_eq!(second.get(&ID), Some(&2));
    }

    #[test]
    fn clone_is_a_new_empty_context() {
        static ID: Key<u64> = Key::new();
        let mut rc = RequestContext::new();
        rc.insert(&ID, 5);
        let copy = rc.clone();
        assert!(copy.is_empty());
        assert_eq!(rc.get(&ID), Some(&5));

        let mut req = Request::new(());
        req.context_mut().insert(&ID, 6);
        let cloned_ext = req.extensions().clone();
        assert_eq!(cloned_ext.context().unwrap().get(&ID), None);
    }

    #[test]
    fn ext_trait_on_request_parts_and_extensions() {
        static ID: Key<u64> = Key::new();
        let mut req = Request::new(());
        assert!(req.context().is_none());
        req.context_mut().insert(&ID, 1);
        // One entry, found again rather than replaced.
        req.context_mut().insert(&ID, 2);
        assert_eq!(req.extensions().len(), 1);
        assert_eq!(req.context().unwrap().get(&ID), Some(&2));

        let (mut parts, ()) = req.into_parts();
        assert_eq!(parts.context().unwrap().get(&ID), Some(&2));
        parts.context_mut().remove(&ID);
        assert!(parts.extensions.context().unwrap().is_empty());
    }

    #[test]
    fn free_list_is_bounded() {
        static ID: Key<u64> = Key::new();
        let many: Vec<RequestContext> = (0..FREE_LIST_CAP * 3)
            .map(|i| {
                let mut rc = RequestContext::new();
                rc.insert(&ID, i as u64);
                rc
            })
            .collect();
        drop(many);
        assert!(FREE.with(|f| f.borrow().len()) <= FREE_LIST_CAP);
    }

    #[test]
    fn many_threads_use_contexts_concurrently() {
        static ID: Key<u64> = Key::new();
        static NAME: Key<String> = Key::new();
        static T: Key<Tracked> = Key::new();
        let c = counter();
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..1_000u64 {
                        let mut req = Request::new(());
                        let ctx = req.context_mut();
                        assert!(ctx.is_empty(), "leak from an earlier request");
                        ctx.insert(&ID, t * 1_000_000 + i);
                        ctx.insert(&NAME, format!("{t}-{i}"));
                        ctx.insert(&T, Tracked(c.clone()));
                        let ctx = req.context().unwrap();
                        assert_eq!(ctx.get(&ID), Some(&(t * 1_000_000 + i)));
                        assert_eq!(ctx.get(&NAME).unwrap(), &format!("{t}-{i}"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(drops(&c), 8 * 1_000);
    }

    #[test]
    fn keys_assigned_concurrently_get_distinct_indices() {
        const THREADS: usize = 8;
        const KEYS: usize = 64;
        let keys: &'static [Key<u8>] = Box::leak(
            (0..KEYS)
                .map(|_| Key::new())
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let barrier = Arc::new(std::sync::Barrier::new(THREADS));
        let seen: Vec<Vec<usize>> = (0..THREADS)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    keys.iter().map(Key::index).collect::<Vec<_>>()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        // Every thread saw the same index for each key...
        assert!(seen.iter().all(|s| *s == seen[0]));
        // ...and no two keys share one.
        let mut indices = seen[0].clone();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), KEYS);
    }

    #[test]
    fn clear_after_remove_drops_nothing_twice() {
        static T: Key<Tracked> = Key::new();
        let (first, second) = (counter(), counter());
        let mut ctx = Context::new();
        ctx.insert(&T, Tracked(first.clone()));
        let removed = ctx.remove(&T);
        ctx.clear();
        assert_eq!(drops(&first), 0, "the removed value belongs to the caller");
        drop(removed);
        assert_eq!(drops(&first), 1);

        // Removed, stored again, then cleared: the second value once.
        ctx.insert(&T, Tracked(second.clone()));
        drop(ctx.remove(&T));
        ctx.insert(&T, Tracked(second.clone()));
        ctx.clear();
        ctx.clear();
        drop(ctx);
        assert_eq!((drops(&first), drops(&second)), (1, 2));
    }

    #[test]
    fn values_larger_than_sixteen_bytes_are_recycled_too() {
        #[derive(Debug, PartialEq)]
        struct Big {
            words: [u64; 8],
            name: String,
        }
        static WORDS: Key<[u64; 8]> = Key::new();
        static BIG: Key<Big> = Key::new();
        for i in 0..3u64 {
            let mut rc = RequestContext::new();
            assert_eq!(rc.get(&WORDS), None, "nothing from request {}", i);
            assert_eq!(rc.get(&BIG), None);
            rc.insert(&WORDS, [i; 8]);
            rc.insert(
                &BIG,
                Big {
                    words: [i; 8],
                    name: i.to_string(),
                },
            );
            assert_eq!(rc.get(&WORDS), Some(&[i; 8]));
            assert_eq!(
                rc.get(&BIG).map(|b| (b.words[7], b.name.as_str())),
                Some((i, &*i.to_string()))
            );
        }
    }

    #[test]
    fn a_key_beyond_the_slot_array_finds_nothing() {
        // A key that stored a value elsewhere (another context, another
        // server) has an index this context's slot array may not reach.
        let elsewhere: &'static Key<u64> = Box::leak(Box::new(Key::new()));
        let mut other = Context::new();
        other.insert(elsewhere, 1);
        let mut ctx = Context::new();
        assert_eq!(ctx.get(elsewhere), None);
        assert_eq!(ctx.get_mut(elsewhere), None);
        assert_eq!(ctx.remove(elsewhere), None);
        assert!(!ctx.contains(elsewhere));
        assert_eq!(ctx.insert(elsewhere, 2), None);
        assert_eq!(
            (ctx.get(elsewhere), other.get(elsewhere)),
            (Some(&2), Some(&1))
        );
    }

    #[test]
    fn insert_after_an_interrupted_clear_drops_the_leftover_once() {
        struct Bomb;
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("boom");
            }
        }
        static BOMB: Key<Bomb> = Key::new();
        static AFTER: Key<Tracked> = Key::new();
        let (left, next) = (counter(), counter());
        let mut ctx = Context::new();
        // BOMB takes its index first, so the clear reaches it first.
        ctx.insert(&BOMB, Bomb);
        ctx.insert(&AFTER, Tracked(left.clone()));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.clear()));
        assert!(caught.is_err());
        assert!(ctx.is_empty());
        assert_eq!(ctx.get(&AFTER).map(|_| ()), None);
        // The value the clear did not reach is dropped when its slot is
        // stored into again, and not by the next clear.
        assert!(ctx.insert(&AFTER, Tracked(next.clone())).is_none());
        assert_eq!(drops(&left), 1);
        ctx.clear();
        assert_eq!((drops(&left), drops(&next)), (1, 1));
    }

    #[test]
    fn drop_glue_values_beyond_one_bitmap_word_are_dropped_once() {
        let keys: Vec<&'static Key<Tracked>> = (0..130)
            .map(|_| &*Box::leak(Box::new(Key::new())))
            .collect();
        let c = counter();
        let mut ctx = Context::new();
        for round in 1..=2 {
            for key in &keys {
                ctx.insert(key, Tracked(c.clone()));
            }
            assert_eq!(ctx.len(), keys.len());
            ctx.clear();
            assert_eq!(drops(&c), round * keys.len());
            assert!(ctx.is_empty());
        }
        drop(ctx);
        assert_eq!(drops(&c), 2 * keys.len());
    }

    #[test]
    fn generations_start_over_after_the_last_one() {
        static N: Key<u64> = Key::new();
        static T: Key<Tracked> = Key::new();
        let c = counter();
        let mut ctx = Context::new();
        ctx.insert(&N, 1);
        ctx.insert(&T, Tracked(c.clone()));
        ctx.generation = u64::MAX;
        // Both slots now look stale; store again in the last generation.
        assert_eq!(ctx.insert(&N, 2), None);
        assert!(ctx.insert(&T, Tracked(c.clone())).is_none());
        assert_eq!(drops(&c), 1);
        ctx.clear();
        assert_eq!(ctx.generation, 1);
        assert_eq!(drops(&c), 2);
        assert!(ctx.is_empty());
        assert_eq!(ctx.get(&N), None, "no stale value after the restart");
        assert_eq!(ctx.insert(&N, 3), None);
        assert_eq!(ctx.get(&N), Some(&3));
    }

    #[test]
    fn context_types_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Context>();
        assert_send_sync::<RequestContext>();
        assert_send_sync::<Key<std::rc::Rc<u8>>>();
    }
}
