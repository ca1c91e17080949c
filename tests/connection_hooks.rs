//! Connection hooks over every transport: the state hook sees each
//! connection go New, Active, Parked, Dormant, Active again, and Closed
//! (or Upgraded), HTTP/1.1 and HTTP/2, with its peer's address; the
//! admission hook rejects connections before a byte is read. (A hook that
//! panics: `connection_hooks_panic.rs`.)

use std::convert::Infallible;
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::client::{Client, Endpoint, Stream, get, ok};
use crate::common::h2_raw::RawClient;
use crate::common::ladder::ladder;
use crate::common::rungs::{client_runtime, sleep_until};
use crate::common::servers::{Hooks, Serve};
use crate::common::services::{echo_service, mirror_service};
use crate::common::transport::{Tcp, Transport, over_every_transport};
use crate::common::wait::wait;
use dormant::{Admit, ConnState};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use ConnState::{Closed, New, Upgraded};
use dormant::Rung;
use dormant::Rung::{Active, Dormant};

/// The rungs as the state hook reports them.
const ACTIVE: ConnState = ConnState::On(Rung::Active);
const PARKED: ConnState = ConnState::On(Rung::Parked);
const DORMANT: ConnState = ConnState::On(Rung::Dormant);

over_every_transport!(
    state_hook_sees_every_rung_of_an_http1_connection,
    state_hook_sees_every_rung_of_an_h2_connection,
    state_hook_sees_an_upgrade_last,
    admission_rejects_connections_before_a_byte_is_read,
);

/// The states a state hook saw, with each one's peer (its `Debug` form).
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<(String, ConnState)>>>);

impl Seen {
    fn hooks(&self) -> Hooks {
        let seen = self.clone();
        Hooks {
            state: Some(Arc::new(move |peer, state| {
                seen.0.lock().unwrap().push((peer, state));
            })),
            ..Hooks::default()
        }
    }

    fn states(&self) -> Vec<ConnState> {
        self.0.lock().unwrap().iter().map(|(_, s)| *s).collect()
    }

    /// Waits until `n` states were seen.
    fn wait_for(&self, n: usize) {
        wait(&format!("{n} states seen"), || {
            self.0.lock().unwrap().len() >= n
        });
    }

    /// Checks that one connection was seen, from one peer (the client's
    /// own address on TCP), going through `expected`, with DORMANT
    /// perhaps reached again before it closed.
    fn check_one_connection(&self, local: Option<String>, expected: &[ConnState]) {
        let seen = self.0.lock().unwrap().clone();
        let states: Vec<ConnState> = seen.iter().map(|(_, s)| *s).collect();
        let last = *expected.last().unwrap();
        let (head, tail) = states.split_at(expected.len() - 1);
        assert_eq!(head, &expected[..expected.len() - 1], "{states:?}");
        assert_eq!(tail.last(), Some(&last), "{states:?}");
        assert!(
            tail[..tail.len() - 1].iter().all(|s| *s == DORMANT),
            "{states:?}"
        );
        let peer = &seen[0].0;
        assert!(seen.iter().all(|(p, _)| p == peer), "{seen:?}");
        if let Some(local) = local {
            assert_eq!(*peer, local, "the hook's peer is the client");
        }
    }
}

/// The client's own address as the server sees it, on TCP (and TLS over
/// it); `None` for a Unix socket, whose clients are unnamed.
fn local<S: Stream>(c: &Client<S>) -> Option<String> {
    c.stream.local().map(|addr| format!("{addr:?}"))
}

/// An HTTP/1.1 connection served, DORMANT, served again, PARKED, then
/// closed by its client: the hook sees each state in order, with the
/// client's address.
fn state_hook_sees_every_rung_of_an_http1_connection<T: Transport>() {
    let seen = Seen::default();
    let srv = T::serve_hooked(
        &ladder(Duration::from_millis(50)),
        echo_service(),
        2,
        seen.hooks(),
    );
    let mut c = srv.connect();
    let local = local(&c);
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("GET / read="));
    // Carrying its `Watched` in the lot, it holds no pool buffer (I1, I4).
    srv.wait_for("DORMANT, holding no buffer", |s| {
        s.connections[Dormant] == 1 && s.connections[Active] == 0 && s.pool.in_use == 0
    });
    seen.wait_for(4);
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("GET / read="));
    seen.wait_for(6);
    drop(c);
    srv.wait_for("closed", |s| s.connections.total() == 0);
    wait("Closed seen", || seen.states().last() == Some(&Closed));
    seen.check_one_connection(
        local,
        &[New, ACTIVE, PARKED, DORMANT, ACTIVE, PARKED, Closed],
    );
}

/// The same over HTTP/2: a sleeping connection is PARKED, then DORMANT.
fn state_hook_sees_every_rung_of_an_h2_connection<T: Transport>() {
    let seen = Seen::default();
    let srv = T::serve_hooked(
        &ladder(Duration::from_millis(50)),
        mirror_service(),
        2,
        seen.hooks(),
    );
    client_runtime().block_on(async {
        let mut raw = RawClient::start(T::connect_h2(&srv.addr).await.into_inner()).await;
        let before = srv.stats();
        raw.get(1).await;
        sleep_until(&srv, Rung::Dormant, before);
        seen.wait_for(4);
        raw.get(3).await;
        seen.wait_for(6);
    });
    srv.wait_for("closed", |s| s.connections.total() == 0);
    wait("Closed seen", || seen.states().last() == Some(&Closed));
    seen.check_one_connection(
        None,
        &[New, ACTIVE, PARKED, DORMANT, ACTIVE, PARKED, Closed],
    );
}

/// A connection handed to an upgrade reports `Upgraded` last: the stream
/// is its handler's, and its close is not the server's to report.
fn state_hook_sees_an_upgrade_last<T: Transport>() {
    let seen = Seen::default();
    let echoed = Arc::new(AtomicBool::new(false));
    let service = {
        let echoed = echoed.clone();
        service_fn(move |mut req: Request<dormant::Body>| {
            let upgrade = dormant::upgrade::on(&mut req).expect("an upgrade");
            let echoed = echoed.clone();
            tokio::spawn(async move {
                let mut stream = dormant::upgrade::Upgraded::from(upgrade.await.unwrap());
                let mut byte = [0u8; 1];
                stream.read_exact(&mut byte).await.unwrap();
                stream.write_all(&byte).await.unwrap();
                echoed.store(true, Ordering::SeqCst);
            });
            let mut res = Response::new(Empty::<Bytes>::new());
            *res.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            res.headers_mut().insert("upgrade", "echo".parse().unwrap());
            res.headers_mut()
                .insert("connection", "upgrade".parse().unwrap());
            async move { Ok::<_, Infallible>(res) }
        })
    };
    let srv = T::serve_hooked(&ladder(None), service, 2, seen.hooks());
    let mut c = srv.connect();
    c.send(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n");
    assert!(c.response_head().starts_with("HTTP/1.1 101"));
    c.send(b"!");
    let mut byte = [0u8; 1];
    c.stream.read_exact(&mut byte).unwrap();
    assert_eq!(&byte, b"!");
    wait("echoed", || echoed.load(Ordering::SeqCst));
    drop(c);
    srv.wait_for("upgraded", |s| s.upgrades == 1);
    wait("Upgraded seen", || seen.states().contains(&Upgraded));
    assert_eq!(seen.states(), [New, ACTIVE, Upgraded]);
}

/// The admission hook rejects every other connection: each rejected one
/// is closed before a byte is read (a plain client reads the end; a TLS
/// client's handshake fails), counted, never seen by the state hook, and
/// the admitted ones are served.
fn admission_rejects_connections_before_a_byte_is_read<T: Transport>() {
    let seen = Seen::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let mut hooks = seen.hooks();
    hooks.accept = {
        let calls = calls.clone();
        Some(Arc::new(move |_peer| {
            match calls.fetch_add(1, Ordering::SeqCst) % 2 {
                0 => Admit::Accept,
                _ => Admit::Reject,
            }
        }))
    };
    let srv = T::serve_hooked(&ladder(None), echo_service(), 2, hooks);
    for round in 0..2 {
        let mut admitted = srv.connect();
        admitted.send(get("/").as_bytes());
        assert_eq!(admitted.response(), ok("GET / read="));
        assert_rejected(&srv);
        srv.wait_for("counted", |s| s.rejected == round + 1);
    }
    assert_eq!(seen.states().iter().filter(|s| **s == New).count(), 2);
}

/// Admission by address (TCP, where clients have one: a Unix socket's are
/// unnamed): a client from 127.0.0.2 is rejected, one from 127.0.0.1 is
/// served, and the hook saw each one's address.
#[test]
fn admission_rejects_by_peer_address() {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let hooks = Hooks {
        accept: Some(Arc::new({
            let asked = asked.clone();
            move |peer: String| {
                let admit = match peer.starts_with("127.0.0.2:") {
                    true => Admit::Reject,
                    false => Admit::Accept,
                };
                asked.lock().unwrap().push((peer, admit));
                admit
            }
        })),
        ..Hooks::default()
    };
    let srv = Tcp::serve_hooked(&ladder(None), echo_service(), 2, hooks);
    let from = |ip: [u8; 4]| {
        let socket = bound_socket(ip);
        let stream = client_runtime()
            .block_on(socket.connect(srv.addr))
            .expect("connect");
        let stream = stream.into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        Client::new(stream)
    };
    let mut rejected = from([127, 0, 0, 2]);
    let rejected_from = rejected.stream.local_addr().unwrap();
    assert_eq!(rejected.read_to_close(), "");
    let mut admitted = from([127, 0, 0, 1]);
    let admitted_from = admitted.stream.local_addr().unwrap();
    admitted.send(get("/").as_bytes());
    assert_eq!(admitted.response(), ok("GET / read="));
    assert_eq!(
        *asked.lock().unwrap(),
        [
            (format!("{rejected_from:?}"), Admit::Reject),
            (format!("{admitted_from:?}"), Admit::Accept)
        ]
    );
    assert_eq!(srv.stats().rejected, 1);
}

/// A client socket bound to `ip` on a free port.
fn bound_socket(ip: [u8; 4]) -> tokio::net::TcpSocket {
    let _guard = client_runtime().enter();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind((ip, 0).into())
        .expect("bind a loopback address");
    socket
}

/// A connection the admission hook rejects ends before any byte.
fn assert_rejected<A: Endpoint>(srv: &Serve<A>) {
    match srv.addr.try_connect() {
        // The TLS handshake found the connection closed.
        Err(_) => {}
        Ok(mut c) => assert_eq!(c.read_to_close(), "", "a rejected connection sent a byte"),
    }
}
