//! One axum application, two servers: the same `Router` (state,
//! `ConnectInfo`, a WebSocket echo, server-sent events, and tower-http's
//! trace, compression, timeout and CORS layers) served by `axum::serve` and
//! by dormant (`dormant::axum::App`), driven by the same clients (hyper's
//! HTTP/1.1 client on one keep-alive connection, tokio-tungstenite, curl,
//! and over TCP headless Chromium's `fetch` and `WebSocket`) across
//! pauses that cross PARKED and DORMANT on dormant's side: the responses,
//! messages and close codes must be the same. Over TCP and a Unix socket
//! (`axum::serve` has no TLS; dormant's TLS serves the same application in
//! `axum_app.rs` and `upgrade_hyper.rs`).

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{ConnectInfo, State};
use axum::response::sse::{Event, Sse};
use axum::routing::get;
use axum::serve::ListenerExt;
use futures_util::{SinkExt, StreamExt};
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite;
use tower_http::compression::CompressionLayer;
use tower_http::cors::CorsLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::common::axum::{bye, echo};
use crate::common::child::{Child, program};
use crate::common::hyper::send_http1;
use crate::common::timeout::CLIENT_TIMEOUT;
use dormant::Rung::{Active, Dormant, Parked};

/// The page headless Chromium loads: `fetch`es and a WebSocket, whose
/// results it writes into the document that `--dump-dom` prints.
const PAGE: &str = r#"<!doctype html><html><body><pre id="out"></pre><script>
const out = document.getElementById("out");
const log = (line) => { out.textContent += line + "\n"; };
(async () => {
  for (const path of ["/", "/peer", "/big", "/events", "/nope"]) {
    const res = await fetch(path);
    const body = await res.text();
    log(path + " " + res.status + " " + res.headers.get("content-type") + " " + body.length + " " + body.slice(0, 40));
  }
  const ws = new WebSocket("ws://" + location.host + "/ws");
  ws.onopen = () => ws.send("hello from chromium");
  ws.onmessage = (event) => { log("ws " + event.data); ws.close(4000, "done"); };
  ws.onclose = (event) => { log("closed " + event.code + " " + event.reason); log("END"); };
})().catch((error) => log("error " + error));
</script></body></html>"#;

/// What the application's state carries.
#[derive(Clone)]
struct AppState {
    greeting: Arc<str>,
}

/// The peer as `ConnectInfo` gives it, the same for every connection of a
/// transport (the port differs).
trait Peer: Clone + Send + Sync + 'static {
    fn describe(&self) -> String;
}

impl Peer for SocketAddr {
    fn describe(&self) -> String {
        format!("tcp {}", self.ip())
    }
}

impl Peer for tokio::net::unix::SocketAddr {
    fn describe(&self) -> String {
        format!("unix unnamed={}", self.is_unnamed())
    }
}

/// The application, with `A` the listener's address type.
fn app<A: Peer>() -> axum::Router {
    let state = AppState {
        greeting: "hello from axum".into(),
    };
    axum::Router::new()
        .route(
            "/",
            get(|State(state): State<AppState>| async move { state.greeting.to_string() }),
        )
        .route(
            "/peer",
            get(|ConnectInfo(peer): ConnectInfo<A>| async move { peer.describe() }),
        )
        .route(
            "/big",
            get(|| async { "compressible text, ".repeat(2_000) }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "too late"
            }),
        )
        .route(
            "/events",
            get(|| async {
                let events = futures_util::stream::iter(0..3).map(|n| {
                    Ok::<_, std::convert::Infallible>(
                        Event::default()
                            .id(n.to_string())
                            .data(format!("event {n}")),
                    )
                });
                Sse::new(events)
            }),
        )
        .route("/page", get(|| async { axum::response::Html(PAGE) }))
        .route(
            "/ws",
            get(|ws: WebSocketUpgrade| async move { ws.on_upgrade(echo) }),
        )
        .route("/bye", get(bye))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_millis(300),
        ))
        .layer(CompressionLayer::new())
        .layer(CorsLayer::permissive())
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// What a client sees of one exchange, to compare between the servers.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Response {
        path: &'static str,
        status: u16,
        headers: Vec<(String, String)>,
        body: Bytes,
    },
    WebSocket(Vec<String>),
    /// What curl printed: the body (decompressed) and its status line.
    Curl(String),
    /// What the page logged in headless Chromium.
    Browser(String),
}

/// The headers the layers set (`date` and the like differ by nature).
const COMPARED: [&str; 5] = [
    "content-type",
    "content-encoding",
    "access-control-allow-origin",
    "vary",
    "content-length",
];

async fn fetch(send: &mut SendRequest<Empty<Bytes>>, path: &'static str) -> Seen {
    let req = Request::get(path)
        .header(header::HOST, "localhost")
        .header(header::ACCEPT_ENCODING, "gzip")
        .header(header::ORIGIN, "http://example.com")
        .body(Empty::new())
        .unwrap();
    let res = send_http1(send, req).await;
    let status = res.status().as_u16();
    let mut headers: Vec<_> = COMPARED
        .iter()
        .filter_map(|name| {
            let value = res.headers().get(*name)?;
            Some((name.to_string(), value.to_str().unwrap().to_owned()))
        })
        .collect();
    headers.sort();
    let body = timeout(CLIENT_TIMEOUT, res.into_body().collect())
        .await
        .expect("no body")
        .expect("the body")
        .to_bytes();
    Seen::Response {
        path,
        status,
        headers,
        body,
    }
}

/// A WebSocket on a connection of its own: text and binary echo, a close
/// with a code; then a socket the server closes with 4001.
async fn websockets<S, F>(connect: impl Fn() -> F) -> Seen
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: Future<Output = S>,
{
    use tungstenite::protocol::CloseFrame as ClientClose;
    use tungstenite::protocol::frame::coding::CloseCode;

    let mut seen = Vec::new();
    let (mut ws, res) = tokio_tungstenite::client_async("ws://localhost/ws", connect().await)
        .await
        .expect("the WebSocket handshake");
    seen.push(format!("{}", res.status()));
    for message in [
        tungstenite::Message::text("hello"),
        tungstenite::Message::binary(vec![9; 70_000]),
    ] {
        ws.send(message).await.unwrap();
        let back = timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no echo");
        let back = back.expect("closed").expect("an echo");
        seen.push(format!("{:?} {}", back.is_text(), back.len()));
    }
    let close = ClientClose {
        code: CloseCode::Normal,
        reason: "done".into(),
    };
    ws.close(Some(close)).await.unwrap();
    let back = timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no close");
    seen.push(format!("{back:?}"));

    let (mut ws, _) = tokio_tungstenite::client_async("ws://localhost/bye", connect().await)
        .await
        .expect("the WebSocket handshake");
    let back = timeout(CLIENT_TIMEOUT, ws.next()).await.expect("no close");
    seen.push(format!("{back:?}"));
    Seen::WebSocket(seen)
}

/// curl (`--compressed`, with an `Origin`) on each route, at `base`
/// (`http://host:port`, or `http://localhost` with `--unix-socket PATH`
/// in `args`).
async fn curl(args: &[String], base: &str) -> Vec<Seen> {
    let mut seen = Vec::new();
    for path in ["/", "/peer", "/big", "/events"] {
        let mut all = args.to_vec();
        all.extend(["-sS", "--compressed", "-H", "Origin: http://example.com"].map(String::from));
        all.extend(["-w".into(), "\n%{http_code} %{content_type}".into()]);
        all.push(format!("{base}{path}"));
        seen.push(Seen::Curl(
            run(move || Child::start("curl", program("CURL", "curl", "curl"), all)).await,
        ));
    }
    seen
}

/// Headless Chromium on the page at `base`: what its `fetch`es and its
/// WebSocket logged (`tests/node/chromium.mjs` drives it over its DevTools
/// protocol and prints the page's log once it is complete).
async fn chromium(base: &str) -> Seen {
    let page = format!("{base}/page");
    let log = run(move || Child::chromium("chromium.mjs", vec![page.into()])).await;
    assert!(log.ends_with("END\n"), "the page did not finish: {log}");
    Seen::Browser(log)
}

/// Runs the program `start` starts to its end ([`Child::output`]) on a
/// thread of tokio's blocking pool, beside the servers' tasks: its stdout.
async fn run(start: impl FnOnce() -> Child + Send + 'static) -> String {
    tokio::task::spawn_blocking(move || start().output())
        .await
        .expect("the client's thread")
}

/// Rounds of every route on one keep-alive connection, with pauses
/// between them, then the WebSockets.
async fn drive<S, F>(
    connect: impl Fn() -> F,
    curl_at: (Vec<String>, String),
    pause: impl AsyncFn(usize),
) -> Vec<Seen>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    F: Future<Output = S>,
{
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(connect().await))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut seen = Vec::new();
    for round in 0..3 {
        for path in ["/", "/peer", "/big", "/events", "/nope"] {
            seen.push(fetch(&mut send, path).await);
        }
        pause(round).await;
    }
    // The timeout layer answers 408 on a connection of its own (the
    // handler's future is dropped; the connection stays usable).
    seen.push(fetch(&mut send, "/slow").await);
    seen.push(fetch(&mut send, "/").await);
    seen.push(websockets(connect).await);
    seen.extend(curl(&curl_at.0, &curl_at.1).await);
    seen
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// dormant's server with a short ladder, so that the pauses cross it.
fn dormant_server() -> dormant::Server {
    dormant::Server::builder()
        .park_after(Duration::from_millis(3))
        .dormant_after(Duration::from_millis(200))
        .peer_addr(true)
        .build()
        .unwrap()
}

/// Waits, for dormant, until its connections slept to `rung` (pause 0:
/// PARKED, then DORMANT); for axum, as long.
async fn pause_for(server: Option<&dormant::Server>, round: usize) {
    let Some(server) = server else {
        tokio::time::sleep(Duration::from_millis(250)).await;
        return;
    };
    // The round's responses are in: the connection is ACTIVE until it
    // sleeps again (it may have parked before this look, even gone
    // DORMANT).
    let deadline = tokio::time::Instant::now() + CLIENT_TIMEOUT;
    loop {
        let s = server.stats();
        let slept = match round {
            0 => s.connections[Parked] + s.connections[Dormant] == 1,
            _ => s.connections[Dormant] == 1,
        };
        if slept && s.connections[Active] == 0 {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "never slept: {s:?}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[test]
fn one_axum_app_two_servers_over_tcp() {
    runtime().block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let make = app::<SocketAddr>().into_make_service_with_connect_info::<SocketAddr>();
        tokio::spawn(axum::serve(listener, make).into_future());
        let connect = || async move { tokio::net::TcpStream::connect(addr).await.unwrap() };
        let at = (Vec::new(), format!("http://{addr}"));
        let mut by_axum = drive(connect, at, async |round| pause_for(None, round).await).await;
        by_axum.push(chromium(&format!("http://{addr}")).await);

        let server = dormant_server();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let serving = server.serve(listener, dormant::axum::App::new(app::<SocketAddr>()));
        tokio::spawn(serving.into_future());
        let connect = || async move { tokio::net::TcpStream::connect(addr).await.unwrap() };
        let at = (Vec::new(), format!("http://{addr}"));
        let mut by_dormant = drive(connect, at, async |round| {
            pause_for(Some(&server), round).await
        })
        .await;
        by_dormant.push(chromium(&format!("http://{addr}")).await);

        compare(&by_axum, &by_dormant);
    });
}

#[test]
fn one_axum_app_two_servers_over_a_unix_socket() {
    let dir = std::env::temp_dir().join(format!("dormant-two-servers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    runtime().block_on(async {
        type Unix = tokio::net::unix::SocketAddr;
        let path = dir.join("axum.sock");
        let listener = tokio::net::UnixListener::bind(&path)
            .unwrap()
            .tap_io(|_| {});
        let make = app::<Unix>().into_make_service_with_connect_info::<Unix>();
        tokio::spawn(axum::serve(listener, make).into_future());
        let connect = connect_unix(&path);
        let by_axum = drive(connect, curl_unix(&path), async |round| {
            pause_for(None, round).await
        })
        .await;

        let server = dormant_server();
        let path = dir.join("dormant.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let serving = server.serve(listener, dormant::axum::App::new(app::<Unix>()));
        tokio::spawn(serving.into_future());
        let connect = connect_unix(&path);
        let by_dormant = drive(connect, curl_unix(&path), async |round| {
            pause_for(Some(&server), round).await
        })
        .await;

        compare(&by_axum, &by_dormant);
    });
    let _ = std::fs::remove_dir_all(&dir);
}

fn curl_unix(path: &Path) -> (Vec<String>, String) {
    let args = vec!["--unix-socket".to_owned(), path.display().to_string()];
    (args, "http://localhost".to_owned())
}

fn connect_unix(
    path: &Path,
) -> impl Fn() -> std::pin::Pin<Box<dyn Future<Output = tokio::net::UnixStream>>> {
    let path = path.to_owned();
    move || {
        let path = path.clone();
        Box::pin(async move { tokio::net::UnixStream::connect(path).await.unwrap() })
    }
}

/// The two servers' exchanges, one by one, and a sanity check that the
/// layers did act.
fn compare(by_axum: &[Seen], by_dormant: &[Seen]) {
    assert_eq!(by_axum.len(), by_dormant.len());
    for (a, d) in by_axum.iter().zip(by_dormant) {
        assert_eq!(a, d);
    }
    let big = by_dormant.iter().find_map(|seen| match seen {
        Seen::Response {
            path: "/big",
            headers,
            ..
        } => Some(headers),
        _ => None,
    });
    assert!(
        big.unwrap()
            .contains(&("content-encoding".into(), "gzip".into())),
        "compressed: {big:?}"
    );
    let slow = by_dormant.iter().find_map(|seen| match seen {
        Seen::Response {
            path: "/slow",
            status,
            ..
        } => Some(*status),
        _ => None,
    });
    assert_eq!(slow, Some(408), "the timeout layer answered");
    let curled: Vec<_> = by_dormant
        .iter()
        .filter_map(|seen| match seen {
            Seen::Curl(out) => Some(out.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        curled[2].starts_with("compressible text, "),
        "{:?}",
        curled[2]
    );
    assert!(curled[3].contains("data: event 2\n"), "{:?}", curled[3]);
    assert!(
        curled[3].ends_with("200 text/event-stream"),
        "{:?}",
        curled[3]
    );
    let browser = by_dormant.iter().find_map(|seen| match seen {
        Seen::Browser(log) => Some(log),
        _ => None,
    });
    if let Some(log) = browser {
        assert!(log.contains("\nws hello from chromium\n"), "{log}");
        assert!(log.contains("\nclosed 4000 done\n"), "{log}");
        assert!(
            log.contains("/peer 200 text/plain; charset=utf-8 13 tcp 127.0.0.1"),
            "{log}"
        );
    }
}
