//! A limit of connections per client address, with the admission and
//! state hooks: `on_accept` refuses a client that already has
//! `PER_CLIENT` connections open (before a byte is read), and
//! `on_conn_state` gives the slot back when a connection closes or is
//! handed to an upgrade. Connections also live at most an hour (jittered)
//! and serve at most 1,000 requests, so that a load balancer in front can
//! spread them.
//!
//! ```text
//! cargo run --example admission [ADDR]     # default 127.0.0.1:3000
//! for i in $(seq 5); do curl -s http://127.0.0.1:3000/ & done; wait
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dormant::{Admit, ConnState};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::net::TcpListener;

/// The most connections one client address may hold open.
pub const PER_CLIENT: usize = 4;

/// Open connections by client address.
#[derive(Clone, Debug, Default)]
pub struct PerClient(Arc<Mutex<HashMap<IpAddr, usize>>>);

impl PerClient {
    /// The admission hook: takes a slot of `peer`'s address, if one is
    /// left.
    pub fn admit(&self, peer: &SocketAddr) -> Admit {
        let mut open = self.0.lock().unwrap();
        let n = open.entry(peer.ip()).or_default();
        if *n >= PER_CLIENT {
            return Admit::Reject;
        }
        *n += 1;
        Admit::Accept
    }

    /// The state hook: gives the slot back when the connection closes or
    /// is handed to an upgrade.
    pub fn state(&self, peer: &SocketAddr, state: ConnState) {
        if let ConnState::Closed | ConnState::Upgraded = state {
            let mut open = self.0.lock().unwrap();
            if let Some(n) = open.get_mut(&peer.ip()) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&peer.ip());
                }
            }
        }
    }
}

async fn hello(_req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(
        b"Hello, World!",
    ))))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);

    let server = dormant::Server::builder()
        .max_connection_age(Duration::from_secs(3600))
        .max_connection_age_grace(Duration::from_secs(30))
        .max_requests_per_connection(1000)
        .build()?;
    let per_client = PerClient::default();
    let states = per_client.clone();
    server
        .serve(listener, service_fn(hello))
        .on_accept(move |peer| per_client.admit(peer))
        .on_conn_state(move |peer, state| states.state(peer, state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    println!("stats: {:?}", server.stats());
    Ok(())
}
