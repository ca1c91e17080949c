//! The crate's error type.

use std::fmt;

/// An error from dormant's API.
///
/// Serving never returns the errors of single connections (they are logged
/// with `tracing`); this type reports what the caller can act on, such as an
/// invalid configuration.
pub struct Error {
    inner: Box<ErrorImpl>,
}

struct ErrorImpl {
    kind: Kind,
    message: &'static str,
}

#[derive(Debug)]
enum Kind {
    Config,
}

impl Error {
    pub(crate) fn config(message: &'static str) -> Self {
        Error {
            inner: Box::new(ErrorImpl {
                kind: Kind::Config,
                message,
            }),
        }
    }

    /// The builder was given an invalid configuration.
    pub fn is_config(&self) -> bool {
        matches!(self.inner.kind, Kind::Config)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("dormant::Error")
            .field("kind", &self.inner.kind)
            .field("message", &self.inner.message)
            .finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.inner.kind {
            Kind::Config => write!(f, "invalid configuration: {}", self.inner.message),
        }
    }
}

impl std::error::Error for Error {}
