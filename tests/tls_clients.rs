//! TLS clients written independently of rustls against a dormant TLS
//! server whose connection sleeps (DORMANT) between their steps: OpenSSL's
//! `s_client` (TLS 1.3 KeyUpdates of both kinds, `k` and `K`, before,
//! between and after sleeps; each TLS 1.3 cipher suite; TLS 1.2), curl
//! (HTTP/1.1 and HTTP/2 on one connection, paused between its transfers),
//! Python's `ssl` module (TLS 1.3 and 1.2, its `close_notify` sent to a
//! DORMANT connection and answered), and headless Chromium (HTTP/2
//! `fetch`es with a sleep between them).
//!
//! Since commit ab43cea a TLS 1.3 session leaves rustls after its
//! handshake for dormant's own record layer, which sends a KeyUpdate at
//! once (its write keys restart at sequence 0); TLS 1.2 stays on rustls
//! (`Stats::tls_kept_by_rustls`). These clients check that record layer
//! with TLS stacks other than rustls: every record the server sends must
//! decrypt and authenticate there, and every record they send (after
//! their own KeyUpdates too) must be read. `s_client`, curl and Python's
//! `ssl` are three programs on one library, the system's OpenSSL 3;
//! Chromium has BoringSSL.
//!
//! Each client is a child process: each of its steps is bounded by
//! [`STEP_TIMEOUT`], and it is killed if the test fails. The test waits
//! for the server's `stats()` to show the connection DORMANT before the
//! client's next step, never for a time. The tests need `openssl`, `curl`,
//! `mkfifo`, `python3`, `node` and `chromium` on PATH.
//!
//! Built only with a crypto provider (features `tls` or `tls-ring`).

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::child::{Child, STEP_TIMEOUT, program};
use crate::common::client::get;
use crate::common::ladder::ladder;
use crate::common::rungs::none_open;
use crate::common::runtime::bind_tcp;
use crate::common::servers::{Hooks, Serve, serve_on};
use crate::common::services::echo_service;
use crate::common::temp_dir::TempDir;
use crate::common::tls::Cert;
use dormant::Rung::{Active, Dormant, Parked};
use dormant::Stats;
use dormant::tls::TlsListener;

/// `dormant_after` of the servers here (they park after 3 ms): the
/// connection is DORMANT soon after each step.
const DORMANT_AFTER: Duration = Duration::from_millis(20);

/// The echo service over TLS (a certificate for `localhost`, made for the
/// test) on 127.0.0.1, with the idle ladder in short pauses.
fn echo_over_tls() -> (Cert, Serve<SocketAddr>) {
    let cert = Cert::new();
    let config = cert.config();
    let srv = serve_on(
        &ladder(DORMANT_AFTER),
        echo_service(),
        2,
        (),
        move || async move {
            let (tcp, addr) = bind_tcp().await;
            (TlsListener::new(tcp, config), addr)
        },
        Hooks::default(),
    );
    (cert, srv)
}

/// Waits until the server's one open connection is DORMANT; returns the
/// stats that saw it. Called once the client has its response: the
/// connection is then DORMANT only if it went there after serving it.
fn dormant_now(srv: &Serve<SocketAddr>) -> Stats {
    srv.wait_for("the connection DORMANT", |s| {
        s.connections[Dormant] == 1 && s.connections[Active] + s.connections[Parked] == 0
    });
    srv.stats()
}

/// Waits until the connection, DORMANT at `before`, has been woken from
/// the lot and gone DORMANT again; returns the stats that saw it.
fn slept_again(srv: &Serve<SocketAddr>, before: &Stats) -> Stats {
    srv.wait_for("woken from DORMANT, and DORMANT again", |s| {
        s.lot_wakes > before.lot_wakes
            && s.dormancies > before.dormancies
            && s.connections[Dormant] == 1
            && s.connections[Active] + s.connections[Parked] == 0
    });
    srv.stats()
}

/// What the tests (but Chromium's) assert at their end, once the clients
/// are gone: no failed handshake, and `kept` sessions left on rustls (the
/// TLS 1.2 ones).
fn assert_clean(srv: &Serve<SocketAddr>, kept: u64) {
    srv.wait_for("every connection closed", none_open);
    let s = srv.stats();
    assert_eq!(s.tls_handshake_failures, 0, "{s:?}");
    assert_eq!(s.tls_kept_by_rustls, kept, "{s:?}");
}

// ---- openssl s_client ----

/// `openssl s_client` connected to the server, interactive (neither
/// `-quiet` nor `-ign_eof`: a line of stdin that starts with `k` or `K` is
/// a command, a KeyUpdate; EOF on stdin sends `close_notify` and exits),
/// with its protocol messages traced to a file (`-msgfile`), so that its
/// stdout holds only the session's summary and the plaintext it read.
struct SClient {
    proc: Child,
    trace: PathBuf,
    _dir: TempDir,
}

/// Which side sent a KeyUpdate, and whether it asked the other for one
/// (`request_update`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyUpdate {
    /// s_client's, `k`.
    Client,
    /// s_client's, `K`: update requested.
    ClientRequesting,
    /// The server's, not requesting one.
    Server,
    /// The server's, requesting one (dormant never sends it).
    ServerRequesting,
}

impl SClient {
    /// Connects to `addr` as `localhost`, trusting `cert`, with the extra
    /// `args` (the version, the suites); waits for the handshake to be
    /// over and checks that it negotiated `protocol` and `suite`.
    fn connect(addr: SocketAddr, cert: &Cert, args: &[&str], protocol: &str, suite: &str) -> Self {
        let dir = TempDir::new();
        let trace = dir.path.join("msg.txt");
        let connect = addr.to_string();
        let mut all: Vec<&OsStr> = vec![
            "s_client".as_ref(),
            "-connect".as_ref(),
            connect.as_ref(),
            "-servername".as_ref(),
            "localhost".as_ref(),
            "-CAfile".as_ref(),
            cert.cert.as_ref(),
            "-verify_return_error".as_ref(),
            "-msg".as_ref(),
            "-msgfile".as_ref(),
            trace.as_ref(),
        ];
        all.extend(args.iter().map(OsStr::new));
        let openssl = program("OPENSSL", "openssl", "OpenSSL 3");
        let mut proc = Child::start("openssl s_client", openssl, all);
        // The summary s_client prints once the handshake is over.
        let out = proc.wait_stdout("the session's summary", |out| {
            out.contains("Verify return code: 0 (ok)")
        });
        let line = format!("New, {protocol}, Cipher is {suite}\n");
        if !out.contains(&line) {
            proc.fail(&format!("expected {line:?} in the summary"));
        }
        SClient {
            proc,
            trace,
            _dir: dir,
        }
    }

    /// The KeyUpdates traced so far, in order.
    fn key_updates(&self) -> Vec<KeyUpdate> {
        let trace = std::fs::read_to_string(&self.trace).unwrap_or_default();
        let mut lines = trace.lines();
        let mut found = Vec::new();
        while let Some(line) = lines.next() {
            if !line.ends_with("KeyUpdate") {
                continue;
            }
            // The message in hex on the next line: type 24, length 1,
            // request_update.
            let hex = lines.next().unwrap_or_default().trim();
            let requested = match hex {
                "18 00 00 01 00" => false,
                "18 00 00 01 01" => true,
                _ => panic!("a KeyUpdate traced as {line:?} {hex:?}"),
            };
            found.push(match (line.starts_with(">>>"), requested) {
                (true, false) => KeyUpdate::Client,
                (true, true) => KeyUpdate::ClientRequesting,
                (false, false) => KeyUpdate::Server,
                (false, true) => KeyUpdate::ServerRequesting,
            });
        }
        found
    }

    /// Waits (bounded) until the trace shows `expected`, exactly.
    fn wait_key_updates(&mut self, expected: &[KeyUpdate]) {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let seen = self.key_updates();
            if seen == expected {
                return;
            }
            if Instant::now() > deadline || seen.len() > expected.len() {
                self.proc.fail(&format!(
                    "the KeyUpdates traced: {seen:?}, expected {expected:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Has s_client send a KeyUpdate (`K`: requesting the server's) and
    /// waits until the trace shows the KeyUpdates `then` (s_client reads
    /// a command only at the start of what one read of its stdin returns,
    /// so nothing else is written until it has sent it).
    fn key_update(&mut self, requesting: bool, then: &[KeyUpdate]) {
        self.proc.send(if requesting { b"K\n" } else { b"k\n" });
        self.wait_key_updates(then);
    }

    /// `GET path`, and its response from the echo service in the
    /// plaintext s_client printed: `200 OK`, the body exact (after the
    /// head, of its `content-length`).
    fn get_ok(&mut self, path: &str) {
        self.proc.send(get(path).as_bytes());
        let body = format!("GET {path} read=");
        let length = format!("\r\ncontent-length: {}\r\n", body.len());
        self.proc
            .wait_stdout(&format!("the response to {path}"), |out| {
                out.split("HTTP/1.1 ").any(|response| {
                    response.split_once("\r\n\r\n").is_some_and(|(head, rest)| {
                        head.starts_with("200 OK\r\n")
                            && (head.to_owned() + "\r\n").contains(&length)
                            && rest.starts_with(&body)
                    })
                })
            });
    }

    /// Closes stdin: s_client sends `close_notify` and must exit 0.
    fn close(mut self) {
        self.proc.exit_ok();
    }
}

/// OpenSSL's `s_client` over TLS 1.3, driven through its stdin: KeyUpdates
/// (`K`, requesting the server's, and `k`, not) right after the
/// handshake, on a DORMANT connection (the KeyUpdate alone wakes it, and it
/// sleeps again), and with a request right behind them; requests between
/// them, each on a connection woken from DORMANT. The server must answer
/// each `K` with one KeyUpdate of its own, not requesting one, and send
/// nothing else (the first record dormant sends after the handshake is a
/// KeyUpdate: here, the answer to the first `K`); every response
/// must decrypt (under the keys of both sides' updates) and be exact. The
/// session is on dormant's record layer (none kept by rustls).
#[test]
fn openssl_key_updates_before_between_and_after_sleeps() {
    use KeyUpdate::{Client, ClientRequesting, Server};
    let (cert, srv) = echo_over_tls();
    let mut c = SClient::connect(
        srv.addr,
        &cert,
        &["-tls1_3"],
        "TLSv1.3",
        "TLS_AES_256_GCM_SHA384",
    );
    // `K` before the first request (the new connection waits for it): the
    // server's one answer also starts its write keys at 0 (the first
    // record dormant sends is a KeyUpdate).
    let mut expected = vec![ClientRequesting, Server];
    c.key_update(true, &expected);
    c.get_ok("/1");
    let s = dormant_now(&srv);

    // `K` alone on a DORMANT connection: it wakes, answers, and sleeps
    // again; the next request wakes it again.
    expected.extend([ClientRequesting, Server]);
    c.key_update(true, &expected);
    let s = slept_again(&srv, &s);
    c.get_ok("/2");
    let s = slept_again(&srv, &s);

    // `k` alone on a DORMANT connection: nothing to answer.
    expected.push(Client);
    c.key_update(false, &expected);
    let s = slept_again(&srv, &s);
    c.get_ok("/3");
    let s = slept_again(&srv, &s);

    // KeyUpdates with a request right behind them, each pair sent to a
    // DORMANT connection.
    expected.push(Client);
    c.key_update(false, &expected);
    c.get_ok("/4");
    let s = slept_again(&srv, &s);
    // The request goes out once s_client has sent the KeyUpdate; the
    // server's answer may come before or after the response.
    expected.push(ClientRequesting);
    c.proc.send(b"K\n");
    c.wait_key_updates_prefix(&expected);
    c.get_ok("/5");
    expected.push(Server);
    c.wait_key_updates(&expected);
    let s = slept_again(&srv, &s);
    c.get_ok("/6");
    let s = slept_again(&srv, &s);

    // close_notify to a DORMANT connection: s_client sends it and exits.
    c.close();
    srv.wait_for("woken by the close", |now| now.lot_wakes > s.lot_wakes);
    assert_clean(&srv, 0);
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.tls_handshakes, s.requests),
        (1, 1, 6),
        "{s:?}"
    );
}

impl SClient {
    /// Waits (bounded) until the trace starts with `expected` (the
    /// server's answer to the last may follow).
    fn wait_key_updates_prefix(&mut self, expected: &[KeyUpdate]) {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            let seen = self.key_updates();
            if seen.starts_with(expected) {
                return;
            }
            if Instant::now() > deadline {
                self.proc.fail(&format!(
                    "the KeyUpdates traced: {seen:?}, expected {expected:?} first"
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// `s_client` with each TLS 1.3 cipher suite forced in turn
/// (`-ciphersuites`): a request, a DORMANT sleep, a `K` KeyUpdate on the
/// DORMANT connection (it wakes, answers with the server's, and sleeps
/// again), a request that wakes it; the suite is the one forced, every
/// record decrypts and every response is exact, and no session stays on
/// rustls.
#[test]
fn openssl_each_tls13_suite_across_sleeps_and_a_key_update() {
    use KeyUpdate::{ClientRequesting, Server};
    let (cert, srv) = echo_over_tls();
    for suite in [
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    ] {
        srv.wait_for("the last client's connection closed", none_open);
        let args = ["-tls1_3", "-ciphersuites", suite];
        let mut c = SClient::connect(srv.addr, &cert, &args, "TLSv1.3", suite);
        c.get_ok(&format!("/{suite}/before"));
        let s = dormant_now(&srv);
        // The first record dormant sends is a KeyUpdate: before the first
        // response, unless rustls sent that response (the request came
        // with the handshake's last flight), and then as the answer to `K`.
        let mut expected = c.key_updates();
        assert!(expected.is_empty() || expected == [Server], "{expected:?}");
        expected.extend([ClientRequesting, Server]);
        c.key_update(true, &expected);
        let s = slept_again(&srv, &s);
        c.get_ok(&format!("/{suite}/after"));
        slept_again(&srv, &s);
        c.close();
    }
    assert_clean(&srv, 0);
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.tls_handshakes, s.requests),
        (3, 3, 6),
        "{s:?}"
    );
}

/// `s_client` over TLS 1.2 with each ECDHE-ECDSA suite rustls has (the
/// test's certificate is ECDSA P-256): a request, then two more, each
/// after a DORMANT sleep that it wakes, exact; no KeyUpdate (TLS 1.2 has
/// none); every session is one rustls keeps (`tls_kept_by_rustls`), and
/// none failed.
#[test]
fn openssl_tls12_suites_across_sleeps_stay_on_rustls() {
    let (cert, srv) = echo_over_tls();
    let suites = [
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    ];
    for suite in suites {
        srv.wait_for("the last client's connection closed", none_open);
        let args = ["-tls1_2", "-cipher", suite];
        let mut c = SClient::connect(srv.addr, &cert, &args, "TLSv1.2", suite);
        c.get_ok(&format!("/{suite}/0"));
        let mut s = dormant_now(&srv);
        for step in 1..3 {
            c.get_ok(&format!("/{suite}/{step}"));
            s = slept_again(&srv, &s);
        }
        assert!(c.key_updates().is_empty(), "TLS 1.2 has no KeyUpdate");
        c.close();
    }
    assert_clean(&srv, 3);
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.tls_handshakes, s.requests),
        (3, 3, 9),
        "{s:?}"
    );
}

// ---- curl ----

/// Makes a FIFO at `path` (`mkfifo`).
fn mkfifo(path: &Path) {
    Child::start("mkfifo", "mkfifo", [path]).exit_ok();
}

/// Writes `text` to the FIFO at `path` and closes it: its reader, blocked
/// until then, reads it to its end. Bounded: the writer's `open` waits for
/// a reader, on a thread of its own.
fn write_fifo(path: &Path, text: &'static str) {
    let (tx, rx) = mpsc::channel();
    let path = path.to_owned();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::write(path, text));
    });
    rx.recv_timeout(STEP_TIMEOUT)
        .expect("no reader opened the FIFO")
        .expect("write the FIFO");
}

/// curl fetches three URLs of the server, one after the other, on one
/// connection (`--http1.1` or `--http2`: ALPN `http/1.1`, or `h2`), with a `file://` URL of a FIFO between them: curl blocks reading it
/// while its connection waits idle in its cache, until the test writes the
/// FIFO, once the server has the connection DORMANT. Every response is
/// exact, the second and third transfers reuse the first one's connection
/// (`num_connects` 0), and each woke it from DORMANT.
fn curl_across_sleeps(version: &str, shown: &str) {
    let (cert, srv) = echo_over_tls();
    let dir = TempDir::new();
    let fifos = [dir.path.join("pause-1"), dir.path.join("pause-2")];
    for fifo in &fifos {
        mkfifo(fifo);
    }
    let port = srv.addr.port();
    let url = |path: &str| format!("https://localhost:{port}{path}");
    let file = |fifo: &Path| format!("file://{}", fifo.display());
    let mut curl = Child::start(
        "curl",
        program("CURL", "curl", "curl"),
        [
            "-sS".to_owned(),
            "--max-time".to_owned(),
            STEP_TIMEOUT.as_secs().to_string(),
            version.to_owned(),
            "--cacert".to_owned(),
            cert.cert.display().to_string(),
            "--resolve".to_owned(),
            format!("localhost:{port}:127.0.0.1"),
            "-w".to_owned(),
            " [%{num_connects} %{http_version} %{response_code}]\n".to_owned(),
            url("/one"),
            file(&fifos[0]),
            url("/two"),
            file(&fifos[1]),
            url("/three"),
        ],
    );
    let line = |path: &str, connects: u32| format!("GET {path} read= [{connects} {shown} 200]\n");
    let pause = |i: u32| format!("pause {i}\n [0 0 000]\n");
    // curl writes a transfer's `-w` out only after the next one's body
    // (its stdout is buffered): the bodies tell how far it got.
    curl.wait_for_text("GET /one read=");
    let s = dormant_now(&srv);
    write_fifo(&fifos[0], "pause 1\n");
    curl.wait_for_text("GET /two read=");
    let s = slept_again(&srv, &s);
    write_fifo(&fifos[1], "pause 2\n");
    curl.exit_ok();
    let expected = [
        line("/one", 1),
        pause(1),
        line("/two", 0),
        pause(2),
        line("/three", 0),
    ];
    assert_eq!(curl.stdout.now(), expected.concat());
    srv.wait_for("woken from DORMANT", |now| now.lot_wakes > s.lot_wakes);
    assert_clean(&srv, 0);
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.tls_handshakes, s.requests),
        (1, 1, 3),
        "one connection: {s:?}"
    );
    let declined = s.h2_sleep_declines;
    assert_eq!((declined.window, declined.unacknowledged), (0, 0), "{s:?}");
}

/// [`curl_across_sleeps`] over HTTP/1.1.
#[test]
fn curl_http1_reuses_its_connection_across_sleeps() {
    curl_across_sleeps("--http1.1", "1.1");
}

/// [`curl_across_sleeps`] over HTTP/2 (ALPN `h2`): curl acknowledges
/// the server's SETTINGS before its connection sleeps (the fence goes out
/// with the first response), so the connection sleeps while curl is
/// blocked on the FIFO; no sleep declined (`h2_sleep_declines`).
#[test]
fn curl_http2_reuses_its_connection_across_sleeps() {
    curl_across_sleeps("--http2", "2");
}

// ---- Python's ssl module ----

/// A client on Python's `ssl` module (OpenSSL underneath, its own
/// settings: `ssl.create_default_context`), driven by commands on its
/// stdin, one a line: `get PATH` (a request, and its whole response read:
/// it prints `response STATUS-LINE BODY`), `unwrap` (`close_notify`, and
/// the server's awaited: it prints `unwrapped`, then `eof` if the socket
/// then reads its end). It first prints `connected VERSION SUITE`.
const PYTHON_CLIENT: &str = r#"
import socket, ssl, sys

port, cafile, version = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=cafile)
v = {"1.3": ssl.TLSVersion.TLSv1_3, "1.2": ssl.TLSVersion.TLSv1_2}[version]
ctx.minimum_version = v
ctx.maximum_version = v
sock = socket.create_connection(("127.0.0.1", port), timeout=20)
tls = ctx.wrap_socket(sock, server_hostname="localhost")
print("connected", tls.version(), tls.cipher()[0], flush=True)
buf = b""

def recv():
    chunk = tls.recv(65536)
    if not chunk:
        sys.exit("the connection ended before a whole response")
    return chunk

def response():
    global buf
    while b"\r\n\r\n" not in buf:
        buf += recv()
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = [int(l.split(":")[1]) for l in lines if l.lower().startswith("content-length:")][0]
    while len(rest) < length:
        rest += recv()
    buf = rest[length:]
    return lines[0], rest[:length].decode()

for line in sys.stdin:
    command, _, arg = line.strip().partition(" ")
    if command == "get":
        tls.sendall(f"GET {arg} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        status, body = response()
        print("response", status, body, flush=True)
    elif command == "unwrap":
        plain = tls.unwrap()
        print("unwrapped", flush=True)
        print("eof" if plain.recv(1) == b"" else "more", flush=True)
        plain.close()
        break
"#;

/// Python's `ssl` over TLS `version`: a request, a DORMANT sleep, a
/// request, a DORMANT sleep, then `unwrap()` (`close_notify`) to the
/// DORMANT connection, which must answer with its own `close_notify`
/// (unwrap returns) and close the TCP connection; every response exact.
fn python_across_sleeps_and_close_notify(version: &str, protocol: &str, suite: &str) {
    let (cert, srv) = echo_over_tls();
    let mut py = Child::start(
        "Python's ssl client",
        program("PYTHON", "python3", "Python 3"),
        [
            "-c".as_ref(),
            PYTHON_CLIENT.as_ref(),
            OsStr::new(&srv.addr.port().to_string()),
            cert.cert.as_os_str(),
            version.as_ref(),
        ],
    );
    py.wait_for_text(&format!("connected {protocol} {suite}\n"));
    py.send(b"get /first\n");
    py.wait_for_text("response HTTP/1.1 200 OK GET /first read=\n");
    let s = dormant_now(&srv);
    py.send(b"get /second\n");
    py.wait_for_text("response HTTP/1.1 200 OK GET /second read=\n");
    let s = slept_again(&srv, &s);
    py.send(b"unwrap\n");
    py.wait_for_text("unwrapped\neof\n");
    py.exit_ok();
    srv.wait_for("woken by the close_notify", |now| {
        now.lot_wakes > s.lot_wakes
    });
    let kept = u64::from(version == "1.2");
    assert_clean(&srv, kept);
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.tls_handshakes, s.requests),
        (1, 1, 2),
        "{s:?}"
    );
}

/// [`python_across_sleeps_and_close_notify`] over TLS 1.3 (dormant's
/// record layer).
#[test]
fn python_tls13_close_notify_to_a_dormant_connection_is_answered() {
    python_across_sleeps_and_close_notify("1.3", "TLSv1.3", "TLS_AES_256_GCM_SHA384");
}

/// [`python_across_sleeps_and_close_notify`] over TLS 1.2 (rustls's
/// session, kept).
#[test]
fn python_tls12_close_notify_to_a_dormant_connection_is_answered() {
    python_across_sleeps_and_close_notify("1.2", "TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384");
}

// ---- headless Chromium ----

/// Headless Chromium (driven through Node, `tests/node/chromium_steps.mjs`,
/// with a profile of its own that does not preconnect) loads a page of the
/// server, then `fetch`es twice from it, each time once the server has
/// every connection DORMANT: both responses exact, over HTTP/2, each
/// `fetch` waking a connection from DORMANT, on the connections opened for
/// the page; no session on rustls, and no handshake failed after the page
/// loaded.
///
/// Chromium sometimes gives up a connection of its first navigation
/// right after its ClientHello and opens another (its net log: the
/// connect job ends `ERR_ABORTED` within milliseconds, before the
/// server's answer; the socket is closed with a FIN, no alert), which the
/// server counts as a failed handshake, so failures are counted from the
/// page's load on.
#[test]
fn chromium_fetches_over_h2_across_sleeps() {
    let (_cert, srv) = echo_over_tls();
    let dir = TempDir::new();
    let profile = dir.path.join("profile");
    std::fs::create_dir_all(profile.join("Default")).unwrap();
    std::fs::write(
        profile.join("Default/Preferences"),
        r#"{"net":{"network_prediction_options":2}}"#,
    )
    .unwrap();
    let page = format!("https://localhost:{}/page", srv.addr.port());
    let mut node = Child::chromium("chromium_steps.mjs", vec![page.into(), profile.into()]);
    node.wait_for_text("loaded GET /page read=\n");
    let loaded = srv.stats();
    assert!(loaded.tls_handshakes >= 1, "{loaded:?}");
    for path in ["/one", "/two"] {
        // Chromium may have opened a second connection; all sleep.
        srv.wait_for("every connection DORMANT", |s| {
            s.connections[Dormant] >= 1 && s.connections[Active] + s.connections[Parked] == 0
        });
        let before = srv.stats();
        node.send(format!("fetch {path}\n").as_bytes());
        node.wait_for_text(&format!("fetched 200 GET {path} read= h2\n"));
        srv.wait_for("woken from DORMANT", |s| s.lot_wakes > before.lot_wakes);
    }
    node.exit_ok();
    srv.wait_for("every connection closed", none_open);
    let s = srv.stats();
    assert_eq!(
        (s.accepted, s.tls_handshake_failures, s.tls_kept_by_rustls),
        (loaded.accepted, loaded.tls_handshake_failures, 0),
        "no new connection, no failed handshake after the page loaded: {s:?}"
    );
}
