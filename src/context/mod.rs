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

mod key;
mod map;
mod request;
#[cfg(test)]
mod tests;

pub use key::Key;
pub use map::Context;
pub use request::{ContextExt, RequestContext};
