//! What dormant's bench servers `hello_dormant` and `hello_dormant_tls`
//! share: the hello handler, the server with the settings the scripts of
//! `benches/scripts/` vary, and serving until Ctrl-C. Each includes this
//! file with `#[path = "../common/server.rs"] mod server;`.
//!
//! The settings come from the environment, so that a script can start the
//! same binary with different ones:
//!
//! - `PARK_AFTER_MS` sets [`park_after`](dormant::Builder::park_after) in
//!   milliseconds (`off` or `none`: never park), for the `park_after` sweep
//!   of `wrk.sh` and the ablations of `load.sh` and `wake_instructions.sh`;
//! - `DORMANT_AFTER_MS` sets [`dormant_after`](dormant::Builder::dormant_after)
//!   the same way (`off` or `none`: parked connections stay in tokio);
//! - `PEER_ADDR=on` turns the [`PeerAddr`](dormant::PeerAddr) extension on,
//!   to measure its cost (`wrk.sh`, `instructions.sh`);
//! - `HOOKS=on` sets a connection state hook
//!   ([`on_conn_state`](dormant::Serve::on_conn_state)) that counts the
//!   states it sees, as a metrics hook would, to measure what a hook costs
//!   (`wrk.sh`, `load.sh`, `idle_memory`'s method);
//! - `STATS=on` prints the server's [`Stats`](dormant::Stats) to stderr
//!   when it stops on Ctrl-C (how often connections slept, say);
//! - `RUST_LOG` filters the `tracing` output (stderr), as in the examples;
//! - `TOKIO_WORKER_THREADS` sets the number of runtime threads, as for any
//!   `#[tokio::main]` program.
//!
//! Unset, the server has dormant's defaults, as `examples/hello.rs`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tracing_subscriber::EnvFilter;

/// The handler of every bench server: `200 Hello, World!`.
async fn hello(_req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

/// Logs to stderr as `RUST_LOG` says, as the examples do, so that a bench
/// server pays for the same subscriber as a server built from them.
pub(crate) fn init_tracing() {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
}

/// The server, with the settings the benches vary.
pub(crate) fn server() -> Result<dormant::Server, Box<dyn std::error::Error>> {
    let mut builder = dormant::Server::builder();
    if let Some(after) = millis("PARK_AFTER_MS")? {
        builder.park_after(after);
    }
    if let Some(after) = millis("DORMANT_AFTER_MS")? {
        builder.dormant_after(after);
    }
    if std::env::var("PEER_ADDR").is_ok_and(|v| v == "on") {
        builder.peer_addr(true);
    }
    Ok(builder.build()?)
}

/// Reads a duration in milliseconds from the environment variable `name`:
/// `None` if it is unset, `Some(None)` for `off` or `none`.
fn millis(name: &str) -> Result<Option<Option<Duration>>, Box<dyn std::error::Error>> {
    let Ok(ms) = std::env::var(name) else {
        return Ok(None);
    };
    Ok(Some(match ms.as_str() {
        "off" | "none" => None,
        ms => Some(Duration::from_millis(
            ms.parse().map_err(|e| format!("{name}={ms}: {e}"))?,
        )),
    }))
}

/// What `HOOKS=on` counts: connections that went to each state.
static STATES: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];

fn state_index(state: dormant::ConnState) -> usize {
    use dormant::{ConnState::*, Rung};
    match state {
        New => 0,
        On(Rung::Active) => 1,
        On(Rung::Parked) => 2,
        On(Rung::Dormant) => 3,
        Upgraded => 4,
        _ => 5,
    }
}

/// Serves `hello` until Ctrl-C, then shuts down gracefully. (The scripts
/// stop their servers with `kill`: SIGTERM ends the process at once.)
pub(crate) async fn serve(
    server: dormant::Server,
    listener: impl dormant::Listener,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut serve = server.serve(listener, service_fn(hello));
    if std::env::var("HOOKS").is_ok_and(|v| v == "on") {
        serve = serve.on_conn_state(|_peer, state| {
            STATES[state_index(state)].fetch_add(1, Ordering::Relaxed);
        });
    }
    serve
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    if std::env::var("STATS").is_ok_and(|v| v == "on") {
        eprintln!("{:#?}", server.stats());
        let states = STATES.each_ref().map(|n| n.load(Ordering::Relaxed));
        eprintln!("hook states (new, active, parked, dormant, upgraded, closed): {states:?}");
    }
    Ok(())
}
