//! The accept loop of a `serve` call, with its connection permit and its
//! backoff on resource errors, and the drain that ends the call.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::{debug, error, trace};

use crate::conn::{self, Admission, Origin};
use crate::hooks::Admitted;
use crate::listener::Listener;
use crate::service::{HttpService, ResBody, SharedService};
use crate::shutdown::Level;
use crate::state::{Open, ServeState};
use crate::transport::{ClientAddr, Handshakes, Seam, Serving, Transport};

/// How a listener's connections are served.
type Served<L> = <<L as Listener>::Io as Transport>::Served;

/// First pause after an accept error that is not about one connection
/// (EMFILE and the like); doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Errors that concern one connection only: accept the next one at once.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Accepts and serves connections until `signal` completes, then returns
/// and drops the listener (it is this function's): no connection waits in
/// its backlog for a server that stopped accepting.
pub(super) async fn accept_until<L, S, B, F>(
    mut listener: L,
    signal: F,
    state: &Arc<ServeState<Served<L>>>,
    service: &Arc<SharedService<S>>,
) where
    L: Listener,
    S: HttpService<B>,
    B: ResBody,
    F: Future<Output = ()> + Send + 'static,
{
    let handshakes: Arc<dyn Handshakes> = state.shared.clone();
    let serving = Serving {
        lot: &state.lot,
        config: &state.shared.config,
        handshakes: &handshakes,
    };
    let mut signal = std::pin::pin!(signal);
    let mut backoff = MIN_BACKOFF;
    loop {
        // The permit comes before accept: over the limit, connections wait
        // in the listen backlog.
        let accepted = tokio::select! {
            biased;
            () = &mut signal => return,
            accepted = async {
                state.held.below_max().await;
                listener.accept().await
            } => accepted,
        };
        let error = match accepted {
            Ok((stream, peer)) => {
                backoff = MIN_BACKOFF;
                let stats = &state.shared.stats;
                stats.accepted.fetch_add(1, Ordering::Relaxed);
                let stream = match stream.serve_in(&serving) {
                    Ok(stream) => stream,
                    Err(error) => {
                        // Out of memory, or of epoll watches: the socket
                        // is closed.
                        error!(%error, "registering an accepted connection failed");
                        continue;
                    }
                };
                // Behind a PROXY header, the hooks wait for its address
                // (`conn::serve`).
                let admission = match stream.connected().client {
                    ClientAddr::InHeader => Admission::InHeader,
                    ClientAddr::Socket | ClientAddr::Named(_) => match state.admit(&peer) {
                        Admitted::Serve(watched) => Admission::Done(watched),
                        Admitted::Close => continue,
                    },
                };
                let open = Open::accepted(state);
                tokio::spawn(conn::serve(
                    stream,
                    Some(peer),
                    service.clone(),
                    open,
                    Origin::Accepted(admission),
                ));
                continue;
            }
            Err(error) => error,
        };
        if is_connection_error(&error) {
            trace!(%error, "accept: connection failed before it was accepted");
            continue;
        }
        // Out of file descriptors (EMFILE, ENFILE), buffers and the like:
        // the listener stays readable, so retrying at once would spin.
        state
            .shared
            .stats
            .accept_errors
            .fetch_add(1, Ordering::Relaxed);
        error!(%error, retry_in = ?backoff, "accept failed");
        tokio::select! {
            biased;
            () = &mut signal => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Graceful shutdown: closes idle connections, lets requests in flight
/// finish (for `grace`, if given, and until `now` resolves), and waits for
/// every connection to be gone.
pub(super) async fn drain<T: Seam>(
    state: &ServeState<T>,
    grace: Option<Duration>,
    now: impl Future<Output = ()>,
) {
    debug!("graceful shutdown: draining connections");
    state.signal.raise(Level::Draining);
    state.lot.close_all();
    let grace_over = async {
        match grace {
            Some(grace) => tokio::time::sleep(grace).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        () = now => debug!("shutdown: closing connections now"),
        () = state.held.all_released() => return,
        () = grace_over => debug!("graceful shutdown: grace period over, closing connections"),
    }
    state.signal.raise(Level::Forced);
    state.held.all_released().await;
}
