//! Servers on a Unix socket in a temporary directory.

use std::path::PathBuf;

use super::runtime::{ResponseBody, Servable};
use super::servers::{Hooks, Serve, serve_on};
use super::temp_dir::TempDir;

/// Starts `service` on a dormant server built by `builder`, on its own
/// runtime of `workers` worker threads, on a `dormant::UnixListener` at a
/// fresh path (`http.sock`) in a fresh temporary directory, removed when
/// the server is dropped.
pub(crate) fn serve_unix<B: ResponseBody>(
    builder: &dormant::Builder,
    service: impl Servable<B>,
    workers: usize,
) -> Serve<PathBuf> {
    serve_unix_hooked(builder, service, workers, Hooks::default())
}

/// [`serve_unix`], with `hooks` set on the `serve` call.
pub(crate) fn serve_unix_hooked<B: ResponseBody>(
    builder: &dormant::Builder,
    service: impl Servable<B>,
    workers: usize,
    hooks: Hooks,
) -> Serve<PathBuf> {
    let dir = TempDir::new();
    let path = dir.path.join("http.sock");
    let bind = move || async move {
        let listener = dormant::UnixListener::bind(&path).expect("bind the Unix socket");
        (listener, path)
    };
    serve_on(builder, service, workers, dir, bind, hooks)
}
