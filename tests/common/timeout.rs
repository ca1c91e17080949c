//! How long a test waits for anything (a byte, a state, a task) before it
//! fails instead of hanging.

use std::time::Duration;

/// How long a client waits for bytes, and a test for a state, before the
/// test fails.
pub(crate) const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
