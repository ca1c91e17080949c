//! The idle ladder in short pauses.

use std::time::Duration;

/// A builder that parks after 3 ms and goes dormant after `dormant_after`
/// (never with `None`): the whole idle ladder in short pauses.
pub(crate) fn ladder(dormant_after: impl Into<Option<Duration>>) -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(3))
        .dormant_after(dormant_after);
    b
}
