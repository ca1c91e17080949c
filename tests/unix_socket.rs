//! What only a Unix domain socket (`dormant::UnixListener` in a temporary
//! directory) has: upgraded streams asleep in the lot, which a client's
//! close wakes as readable (a Unix socket cannot be peeked), the
//! listener's socket file and bind errors, the peer address, and a real
//! client (curl). The ladder's behaviours over a Unix socket (keep-alive,
//! pipelining, split requests, client close, descriptors, timeouts,
//! shutdown, the differential against hyper, HTTP/2) are in the files of
//! each behaviour, which run over every transport.

use std::convert::Infallible;
use std::ffi::OsStr;
use std::io::ErrorKind;
use std::net::Shutdown;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::common::child::{Child, program};
use crate::common::client::{Client, get, ok};
use crate::common::ladder::ladder;
use crate::common::rungs::client_runtime;
use crate::common::services::echo_service;
use crate::common::sleepers::{SWITCHED, UPGRADE};
use crate::common::temp_dir::TempDir;
use crate::common::transport::{Transport, Unix};
use crate::common::upgrade_echo::{check_sleeping_echo, connect_upgraded, sleepy_service};
use crate::common::wait::wait;
use dormant::PeerAddr;
use dormant::Rung::Dormant;
use dormant::upgrade;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;

/// 5. An upgraded Unix stream sleeps in the lot between messages, wakes on
///    data (no byte lost over many wakes), and on the client's close: a
///    Unix socket cannot be peeked, so the close wakes it as readable and
///    the read finds EOF.
#[test]
fn sleeping_upgraded_stream_wakes_on_data_and_on_close() {
    let (service, s) = sleepy_service();
    let srv = Unix::serve(&ladder(None), service);
    let mut c = srv.connect();
    // The leftover wakes it at once.
    c.send(format!("{UPGRADE}first").as_bytes());
    assert_eq!(c.response(), SWITCHED);
    assert_eq!(s.hand_off(), r#"handed off: unix=true read_buf=b"first""#);
    assert_eq!(c.read_exact_bytes(5), b"first");
    wait("asleep", || s.sleeping() == 1);
    srv.wait_for("connection handed off", |st| {
        st.upgrades == 1 && st.connections.total() == 0
    });

    check_sleeping_echo(&mut c, &s);
    assert_eq!(s.drops.get(), 0, "the state lives while asleep");

    // The client's close: woken, the read finds EOF, state dropped once.
    c.stream.shutdown(Shutdown::Write).unwrap();
    assert_eq!(s.next(), "readable, then a read found EOF");
    wait("state dropped", || s.drops.get() == 1);
    assert_eq!(s.sleeping(), 0);
    assert_eq!(c.read_to_close(), "", "the handler closed the stream");
    assert!(s.events.try_recv().is_err(), "called back once");
    wait("upgrade buffers back", || upgrade::pool_stats().in_use == 0);

    // A client that closes entirely, while its stream sleeps.
    let mut c = srv.connect();
    c.send(UPGRADE.as_bytes());
    assert_eq!(c.response(), SWITCHED);
    assert_eq!(s.hand_off(), r#"handed off: unix=true read_buf=b"""#);
    wait("asleep", || s.sleeping() == 1);
    drop(c);
    assert_eq!(s.next(), "readable, then a read found EOF");
    wait("state dropped", || s.drops.get() == 2);
    assert_eq!(s.sleeping(), 0);
}

/// 6. Graceful shutdown hands upgraded Unix streams asleep in the lot back
///    to their callbacks (`Woken::Shutdown`), which still can write. The
///    server runs on a runtime of the test's own: handed-off streams do
///    not hold `serve` back, and their callbacks run after it returned.
#[test]
fn graceful_shutdown_hands_back_sleeping_upgraded_streams() {
    let (service, s) = sleepy_service();
    let mut srv = Unix::serve(&ladder(Duration::from_millis(10)), service);
    let path = srv.addr.clone();

    let mut clients = connect_upgraded(&srv, 3);
    for _ in 0..3 {
        assert!(s.hand_off().starts_with("handed off: unix=true"));
    }
    wait("all asleep", || s.sleeping() == 3);
    srv.wait_for("connections handed off", |st| {
        st.upgrades == 3 && st.connections.total() == 0
    });
    srv.stop();
    assert!(!path.exists(), "the socket file outlived the listener");
    for c in &mut clients {
        assert_eq!(c.read_to_close(), "bye");
    }
    for _ in 0..3 {
        assert_eq!(s.next(), "shutdown");
    }
    wait("states dropped", || s.drops.get() == 3);
    assert_eq!(s.sleeping(), 0);
}

/// 7. `dormant::UnixListener::bind` errors name the path, and the listener
///    removes its socket file when dropped, only if it is still its own.
#[test]
fn bind_errors_and_the_socket_file() {
    let rt = client_runtime();
    let _enter = rt.enter();
    let dir = TempDir::new();

    // The directory does not exist.
    let missing = dir.path.join("missing").join("http.sock");
    let err = dormant::UnixListener::bind(&missing).expect_err("no such directory");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "the error names the path: {err}"
    );

    // A regular file is in the way: AddrInUse, and it is left alone.
    let file = dir.path.join("file.sock");
    std::fs::write(&file, "not a socket").unwrap();
    let err = dormant::UnixListener::bind(&file).expect_err("a file is in the way");
    assert_eq!(err.kind(), ErrorKind::AddrInUse, "{err}");
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "the error names the path: {err}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a socket");

    // A stale socket (a listener that did not remove its file) is left
    // alone too.
    let stale = dir.path.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let err = dormant::UnixListener::bind(&stale).expect_err("a stale socket");
    assert_eq!(err.kind(), ErrorKind::AddrInUse, "{err}");
    assert!(is_socket(&stale), "the stale socket is still there");

    // Bound: the path and the address; dropped: the file is gone.
    let path = dir.path.join("own.sock");
    let listener = dormant::UnixListener::bind(&path).unwrap();
    assert_eq!(listener.path(), path);
    let local = dormant::Listener::local_addr(&listener).unwrap();
    assert_eq!(local.as_pathname(), Some(path.as_path()));
    assert!(is_socket(&path));
    drop(listener);
    assert!(!path.exists(), "dropping the listener removes its file");

    // After a server shuts down, the socket file it created is gone (its
    // directory is still there).
    let mut srv = Unix::serve(&ladder(None), echo_service());
    assert!(is_socket(&srv.addr));
    srv.begin_shutdown();
    srv.wait_stopped();
    assert!(srv.addr.parent().unwrap().is_dir());
    assert!(!srv.addr.exists(), "the socket file outlived the server");

    // Replaced by a regular file while serving: left alone at shutdown.
    let mut srv = Unix::serve(&ladder(None), echo_service());
    let mut c = srv.connect();
    std::fs::remove_file(&srv.addr).unwrap();
    std::fs::write(&srv.addr, "someone else's").unwrap();
    c.send(get("/").as_bytes());
    assert_eq!(
        c.response(),
        ok("GET / read="),
        "served after the file went"
    );
    srv.begin_shutdown();
    assert_eq!(c.read_to_close(), "");
    srv.wait_stopped();
    assert_eq!(
        std::fs::read_to_string(&srv.addr).unwrap(),
        "someone else's",
        "the listener removed a file it did not create"
    );

    // Replaced by another server's socket while serving: left alone, and
    // that server still gets connections.
    let mut srv = Unix::serve(&ladder(None), echo_service());
    std::fs::remove_file(&srv.addr).unwrap();
    let other = std::os::unix::net::UnixListener::bind(&srv.addr).unwrap();
    srv.begin_shutdown();
    srv.wait_stopped();
    assert!(is_socket(&srv.addr), "the other socket file was removed");
    let _client = UnixStream::connect(&srv.addr).expect("the other server");
    other.accept().expect("accepted by the other server");
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Answers with what the `PeerAddr` extension says: `unnamed`, the peer's
/// path, or `none`.
async fn peer(req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    let text = match req
        .extensions()
        .get::<PeerAddr<tokio::net::unix::SocketAddr>>()
    {
        _ if req.extensions().get::<PeerAddr>().is_some() => "a TCP address".to_owned(),
        None => "none".to_owned(),
        Some(PeerAddr(addr)) if addr.is_unnamed() => "unnamed".to_owned(),
        Some(PeerAddr(addr)) => match addr.as_pathname() {
            Some(path) => format!("path={}", path.display()),
            None => format!("other={addr:?}"),
        },
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// 8. With `peer_addr(true)`, requests on a Unix listener carry
///    `PeerAddr<tokio::net::unix::SocketAddr>`: unnamed for a client that
///    did not bind, its path for one that did; on a new connection and on
///    one woken from DORMANT. Off by default.
#[test]
fn peer_addr_on_a_unix_listener() {
    let mut b = ladder(Duration::from_millis(10));
    b.peer_addr(true);
    let srv = Unix::serve(&b, service_fn(peer));

    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("unnamed"), "new connection");
    srv.wait_for("dormant", |s| s.connections[Dormant] == 1);
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("unnamed"), "woken from DORMANT");
    assert_eq!(srv.stats().lot_wakes, 1);
    drop(c);

    // A client bound to a path of its own.
    let client_path = srv.addr.parent().unwrap().join("client.sock");
    let rt = client_runtime();
    let stream = rt
        .block_on(async {
            let socket = tokio::net::UnixSocket::new_stream()?;
            socket.bind(&client_path)?;
            socket.connect(&srv.addr).await
        })
        .expect("a named client");
    let stream = stream.into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    let mut c = Client::new(stream);
    let want = ok(&format!("path={}", client_path.display()));
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), want, "new connection");
    srv.wait_for("dormant", |s| {
        s.connections[Dormant] == 1 && s.lot_wakes == 1
    });
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), want, "woken from DORMANT");
    assert_eq!(srv.stats().lot_wakes, 2);

    let srv = Unix::serve(&ladder(Duration::from_millis(10)), service_fn(peer));
    let mut c = srv.connect();
    c.send(get("/").as_bytes());
    assert_eq!(c.response(), ok("none"), "off by default");
}

/// 9. A real client: curl over the Unix socket.
#[test]
fn curl_over_the_unix_socket() {
    let srv = Unix::serve(&ladder(Duration::from_millis(10)), echo_service());
    let curl = |urls: &[&str]| {
        let mut args: Vec<&OsStr> = ["--silent", "--show-error", "--unix-socket"]
            .map(OsStr::new)
            .into();
        args.push(srv.addr.as_os_str());
        args.extend(urls.iter().map(OsStr::new));
        Child::start("curl", program("CURL", "curl", "curl"), args).output()
    };
    assert_eq!(curl(&["http://localhost/"]), "GET / read=");
    // Two requests on one kept-alive connection.
    assert_eq!(
        curl(&["http://localhost/a", "http://localhost/b"]),
        "GET /a read=GET /b read="
    );
    srv.wait_for("curl gone", |s| s.connections.total() == 0);
    let s = srv.stats();
    assert_eq!((s.accepted, s.requests), (2, 3), "{s:?}");
}
