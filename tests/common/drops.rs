//! Drops counted: of request extensions, response bodies, services, the
//! state of sleeping streams.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts drops of the [`Dropped`] tokens it hands out.
#[derive(Clone, Default)]
pub(crate) struct DropCount(Arc<AtomicUsize>);

impl DropCount {
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    pub(crate) fn token(&self) -> Dropped {
        Dropped(self.0.clone())
    }
}

/// Adds one to its counter when dropped.
#[derive(Clone)]
pub(crate) struct Dropped(Arc<AtomicUsize>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}
