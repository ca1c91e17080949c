//! The crate's error type.

use std::fmt;

/// An error from dormant's API.
///
/// Serving never returns the errors of single connections (they are logged
/// with `tracing`); this type reports what the caller can act on, such as an
/// invalid configuration or an upgrade that did not happen
/// ([`upgrade::on`](crate::upgrade::on)).
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
    /// Nothing to upgrade: not an HTTP/1.1 upgrade request, HTTP/2, or the
    /// upgrade was already taken.
    Unsupported,
    /// The handler answered without switching protocols.
    Declined,
    /// The connection closed, failed or was shut down before the hand-off.
    Closed,
}

impl Error {
    pub(crate) fn config(message: &'static str) -> Self {
        Error::new(Kind::Config, message)
    }

    fn new(kind: Kind, message: &'static str) -> Self {
        Error {
            inner: Box::new(ErrorImpl { kind, message }),
        }
    }

    pub(crate) fn unsupported(message: &'static str) -> Self {
        Error::new(Kind::Unsupported, message)
    }

    pub(crate) fn declined() -> Self {
        Error::new(
            Kind::Declined,
            "the handler answered without switching protocols (101, or 2xx to CONNECT); \
             the connection goes on serving HTTP",
        )
    }

    pub(crate) fn closed() -> Self {
        Error::new(
            Kind::Closed,
            "the connection closed, failed or was shut down before the hand-off",
        )
    }

    /// Returns true if the builder was given an invalid configuration.
    pub fn is_config(&self) -> bool {
        matches!(self.inner.kind, Kind::Config)
    }

    /// Returns true if [`upgrade::on`](crate::upgrade::on) found nothing to upgrade: the
    /// request is not an HTTP/1.1 upgrade request (`Connection: upgrade`
    /// with an `Upgrade` header, or `CONNECT`), it came over HTTP/2, or
    /// `on` was already called for it.
    pub fn is_unsupported(&self) -> bool {
        matches!(self.inner.kind, Kind::Unsupported)
    }

    /// Returns true if the handler answered the upgrade request without switching
    /// protocols (`101 Switching Protocols`, or a 2xx to `CONNECT`); the
    /// connection goes on serving HTTP.
    pub fn is_declined(&self) -> bool {
        matches!(self.inner.kind, Kind::Declined)
    }

    /// Returns true if the connection closed, failed, or was closed by a forced shutdown
    /// before the upgraded stream could be handed off.
    pub fn is_closed(&self) -> bool {
        matches!(self.inner.kind, Kind::Closed)
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
            Kind::Unsupported | Kind::Declined | Kind::Closed => {
                write!(f, "no upgrade: {}", self.inner.message)
            }
        }
    }
}

impl std::error::Error for Error {}
