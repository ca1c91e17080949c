//! [`RequestContext`]: a request's context in its extensions, recycled
//! through a per-thread free list, and [`ContextExt`], which reaches it.

use std::cell::RefCell;
use std::fmt;
use std::ops::{Deref, DerefMut};

use http::{Extensions, Request};

use super::Context;

/// At most this many cleared contexts wait on each thread's free list.
///
/// A request needs one; a few cover a task that holds several requests at
/// once. More would only keep memory that nobody asked for.
pub(super) const FREE_LIST_CAP: usize = 8;

thread_local! {
    /// Cleared contexts waiting for the next request on this thread.
    ///
    /// Boxed on purpose: the box itself is what a `RequestContext` holds,
    /// so taking one and giving it back moves a pointer, not the context.
    #[allow(clippy::vec_box)]
    pub(super) static FREE: RefCell<Vec<Box<Context>>> = const { RefCell::new(Vec::new()) };
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
