//! The idle ladder in short pauses, and what `build` says of a setting.

use std::time::Duration;

/// A builder that parks after 3 ms and goes dormant after `dormant_after`
/// (never with `None`): the whole idle ladder in short pauses.
pub(crate) fn ladder(dormant_after: impl Into<Option<Duration>>) -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(3))
        .dormant_after(dormant_after);
    b
}

/// The setting `set` makes fails `build` with a configuration error that
/// names `name`.
pub(crate) fn rejects(
    set: impl FnOnce(&mut dormant::Builder) -> &mut dormant::Builder,
    name: &str,
) {
    let mut builder = dormant::Server::builder();
    let err = set(&mut builder).build().expect_err(name);
    assert!(err.is_config(), "{err:?}");
    assert!(err.to_string().contains(name), "{name}: {err}");
}

/// The setting `set` makes builds.
pub(crate) fn accepts(set: impl FnOnce(&mut dormant::Builder) -> &mut dormant::Builder) {
    let mut builder = dormant::Server::builder();
    set(&mut builder).build().expect("valid config");
}
