//! Idle HTTP/2 connections sleep (PARKED, then DORMANT) and wake with
//! nothing a client can notice, over every transport (TCP and a Unix socket
//! with prior knowledge, TLS with ALPN `h2`): hyper's and h2's clients with
//! many streams, request and response bodies from 0 B to 1 MiB, client
//! windows from h2's defaults to a browser's, header tables of 0, 4,096 and
//! 65,536 bytes whose entries are reused across a sleep, a client PING, a
//! SETTINGS change, a GOAWAY and a close while asleep, graceful shutdown and
//! the idle timeout of sleeping connections, and server keep-alive PINGs,
//! which the lot sends to sleeping connections. Pauses between rounds cross PARKED and
//! DORMANT; every response is checked byte for byte. The preface and
//! frames in pieces, with pauses that let the connection sleep, keep no
//! worker busy while they wait for their rest: on a server with one
//! worker, another client is served meanwhile.

use std::future::{Future, poll_fn};
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::common::h2::close;
use crate::common::h2_raw::{
    ACK, DATA, END_HEADERS, END_STREAM, Frame, GOAWAY, HEADERS, NO_ERROR, PING, PREFACE, RawClient,
    frame, get_frame,
};
use crate::common::ladder::ladder;
use crate::common::rungs::{DORMANT_AFTER, all_closed, client_runtime, sleep_until, woke};
use crate::common::servers::Serve;
use crate::common::services::{mirror_service, pattern};
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{AsyncStream, HyperSend, Transport, over_every_transport};
use bytes::BytesMut;
use dormant::Rung;
use dormant::Rung::{Active, Dormant, Parked};
use http::{Request, StatusCode, Version, response};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::timeout;

over_every_transport!(
    many_concurrent_streams_across_sleeps,
    request_bodies_from_empty_to_a_mebibyte_across_sleeps,
    browser_like_client_across_sleeps,
    h2_default_client_sleeps_and_stays_correct,
    a_woken_connection_never_sends_more_than_the_clients_window,
    dynamic_table_entries_are_reused_across_sleeps_with_the_default_table,
    dynamic_table_entries_are_reused_across_sleeps_with_no_client_table,
    dynamic_table_entries_are_reused_across_sleeps_with_a_64_kib_client_table,
    a_client_ping_while_asleep_is_answered,
    a_client_settings_change_while_asleep_applies_after_the_wake,
    a_client_goaway_while_asleep_closes_the_connection,
    a_client_close_while_asleep_closes_the_connection,
    graceful_shutdown_closes_parked_h2_connections,
    graceful_shutdown_closes_dormant_h2_connections,
    idle_timeout_closes_parked_h2_connections,
    idle_timeout_closes_dormant_h2_connections,
    keep_alive_pings_reach_sleeping_h2_connections,
    sleeping_h2_connections_that_do_not_answer_pings_are_closed,
    late_ping_acks_go_to_the_side_that_sent_the_ping,
    a_client_that_stops_reading_is_sent_no_byte_past_its_window,
    a_client_that_reads_only_for_its_responses_sleeps,
    adaptive_window_uploads_across_pauses,
    a_frame_in_pieces_does_not_stop_another_connection,
);

/// A keep-alive interval whose PINGs find a connection at `rung`: the
/// connections park after 3 ms (`ladder`), and go DORMANT after
/// [`DORMANT_AFTER`].
fn keep_alive_at(rung: Rung) -> Duration {
    match rung {
        Rung::Active => panic!("a pause reaches PARKED or DORMANT"),
        Rung::Parked => DORMANT_AFTER / 4,
        Rung::Dormant => DORMANT_AFTER * 2,
    }
}

/// The pauses between the rounds of a conversation: PARKED, DORMANT, and
/// PARKED again after a DORMANT wake.
const PAUSES: [Rung; 3] = [Rung::Parked, Rung::Dormant, Rung::Parked];

/// Runs `round` 0 on the new connection (which may already have slept
/// between the client's preface and its first request), then round 1, 2,
/// ... after each pause of [`PAUSES`]: a pause waits, the client idle,
/// until the connection has slept to its rung, and the round after it must
/// have woken it.
async fn rounds<A>(srv: &Serve<A>, mut round: impl AsyncFnMut(usize)) {
    let mut before = srv.stats();
    round(0).await;
    for (i, rung) in PAUSES.into_iter().enumerate() {
        sleep_until(srv, rung, before);
        before = srv.stats();
        round(i + 1).await;
        woke(srv, rung, before);
    }
}

// ---- hyper's client ----

/// Sends `POST path` with `body`; checks the answer is `200` over HTTP/2
/// and returns its body.
async fn hyper_post(mut send: HyperSend, path: String, body: Bytes) -> Bytes {
    let req = Request::post(format!("http://localhost{path}"))
        .body(Full::new(body))
        .unwrap();
    let res = timeout(CLIENT_TIMEOUT, send.send_request(req))
        .await
        .unwrap_or_else(|_| panic!("{path}: response timed out"))
        .unwrap_or_else(|e| panic!("{path}: {e:?}"));
    assert_eq!(
        (res.status(), res.version()),
        (StatusCode::OK, Version::HTTP_2)
    );
    timeout(CLIENT_TIMEOUT, res.into_body().collect())
        .await
        .unwrap_or_else(|_| panic!("{path}: body timed out"))
        .unwrap_or_else(|e| panic!("{path}: body: {e:?}"))
        .to_bytes()
}

/// POSTs each body of `bodies` at once, each on its own stream, and checks
/// that each comes back byte for byte.
async fn mirror_all(send: &HyperSend, round: usize, bodies: Vec<Bytes>) {
    let mut streams = JoinSet::new();
    for (i, body) in bodies.into_iter().enumerate() {
        let path = format!("/round/{round}/stream/{i}");
        let send = send.clone();
        streams.spawn(async move {
            let got = hyper_post(send.clone(), path.clone(), body.clone()).await;
            assert!(
                got == body,
                "{path}: {} bytes back for {} sent, or other bytes",
                got.len(),
                body.len()
            );
        });
    }
    while let Some(done) = streams.join_next().await {
        done.expect("a stream's check failed");
    }
}

// ---- h2's client ----

/// A connection of h2's client with the settings a test chose, driven by a
/// task of its own that also sends the SETTINGS changes the test asks for;
/// it counts the bytes it writes.
struct H2Client {
    send: h2::client::SendRequest<Bytes>,
    ping: h2::PingPong,
    /// New values of SETTINGS_INITIAL_WINDOW_SIZE to send.
    initial_window: mpsc::UnboundedSender<u32>,
    conn: JoinHandle<Result<(), h2::Error>>,
    written: Arc<AtomicUsize>,
}

impl H2Client {
    async fn connect<T: Transport>(addr: &T::Addr, builder: &h2::client::Builder) -> H2Client {
        let io = timeout(CLIENT_TIMEOUT, T::connect_h2(addr))
            .await
            .expect("connect timed out")
            .into_inner();
        let written = Arc::new(AtomicUsize::new(0));
        let io = CountWrites {
            io,
            written: written.clone(),
        };
        let (send, mut conn) = timeout(CLIENT_TIMEOUT, builder.handshake::<_, Bytes>(io))
            .await
            .expect("h2 handshake timed out")
            .expect("h2 handshake");
        let ping = conn.ping_pong().expect("the connection's PingPong");
        let (initial_window, mut changes) = mpsc::unbounded_channel();
        let conn = tokio::spawn(async move {
            poll_fn(|cx| {
                while let Poll::Ready(Some(size)) = changes.poll_recv(cx) {
                    conn.set_initial_window_size(size)
                        .expect("no SETTINGS change pending");
                }
                Pin::new(&mut conn).poll(cx)
            })
            .await
        });
        H2Client {
            send,
            ping,
            initial_window,
            conn,
            written,
        }
    }

    /// Bytes written to the server so far (before TLS).
    fn written(&self) -> usize {
        self.written.load(Ordering::SeqCst)
    }

    /// Sends a PING and waits for its answer.
    async fn ping(&mut self) {
        timeout(CLIENT_TIMEOUT, self.ping.ping(h2::Ping::opaque()))
            .await
            .expect("no answer to the PING")
            .expect("PING");
    }

    /// Ends the connection: without a `SendRequest` and streams left, h2
    /// sends a GOAWAY and closes.
    async fn close(self) {
        let H2Client {
            send,
            ping,
            initial_window,
            conn,
            ..
        } = self;
        drop((send, ping, initial_window));
        timeout(CLIENT_TIMEOUT, conn)
            .await
            .expect("the client connection did not end")
            .unwrap()
            .expect("the client connection ended in an error");
    }
}

/// Sends `method path` with `headers` on a connection of h2's client; with
/// `body` `None`, the request's body stays open for the test to send.
async fn h2_request(
    send: &h2::client::SendRequest<Bytes>,
    method: &str,
    path: &str,
    headers: &[(&'static str, String)],
    body: Option<Bytes>,
) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
    let mut req = Request::builder()
        .method(method)
        .uri(format!("http://localhost{path}"));
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    let mut send = timeout(CLIENT_TIMEOUT, send.clone().ready())
        .await
        .expect("the connection was not ready in time")
        .expect("the connection is gone");
    let end = body.as_ref().is_some_and(Bytes::is_empty);
    let (res, mut stream) = send
        .send_request(req.body(()).unwrap(), end)
        .expect("send the request");
    if let Some(body) = body.filter(|b| !b.is_empty()) {
        stream.send_data(body, true).expect("send the body");
    }
    (res, stream)
}

/// The head of a response of h2's client, checked to be `200`, and its
/// body, read to its end; each chunk's window is given back as it is read,
/// as clients do.
async fn h2_response(res: h2::client::ResponseFuture) -> (response::Parts, Bytes) {
    let (parts, mut body) = timeout(CLIENT_TIMEOUT, res)
        .await
        .expect("response timed out")
        .expect("response")
        .into_parts();
    assert_eq!(parts.status, StatusCode::OK);
    let read = async {
        let mut got = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("response body");
            body.flow_control().release_capacity(chunk.len()).unwrap();
            got.extend_from_slice(&chunk);
        }
        got.freeze()
    };
    let got = timeout(CLIENT_TIMEOUT, read).await.expect("body timed out");
    (parts, got)
}

/// `GET /bytes/len` on h2's client; checks the body is `len` bytes of
/// [`pattern`].
async fn h2_get_bytes(send: h2::client::SendRequest<Bytes>, len: usize) {
    let path = format!("/bytes/{len}");
    let (res, _) = h2_request(&send, "GET", &path, &[], Some(Bytes::new())).await;
    let (_, got) = h2_response(res).await;
    assert!(
        got == pattern(len, 0),
        "{path}: {} bytes, or other bytes",
        got.len()
    );
}

/// How long a response's body may send nothing before the client takes it
/// for a server waiting for window.
const STALL: Duration = Duration::from_millis(50);

/// `GET /bytes/len` on h2's client, giving back window only when the
/// server has stopped sending (nothing for [`STALL`]): the client's stream
/// and connection windows run down to nothing, so a server that believes
/// it may send more than they allow sends past them, which h2 refuses
/// (FLOW_CONTROL_ERROR: the read fails). Checks the body is `len` bytes of
/// [`pattern`].
async fn h2_get_bytes_at_the_window_edge(send: &h2::client::SendRequest<Bytes>, len: usize) {
    let path = format!("/bytes/{len}");
    let (res, _) = h2_request(send, "GET", &path, &[], Some(Bytes::new())).await;
    let mut body = timeout(CLIENT_TIMEOUT, res)
        .await
        .expect("response timed out")
        .expect("response")
        .into_body();
    let read = async {
        let mut got = BytesMut::new();
        let mut unreleased = 0;
        loop {
            match timeout(STALL, body.data()).await {
                Ok(Some(chunk)) => {
                    let chunk = chunk.unwrap_or_else(|e| {
                        panic!("{path}: {e} (did the server send past the client's window?)")
                    });
                    unreleased += chunk.len();
                    got.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                // The server waits for window (or is slow): give back what
                // was read.
                Err(_) if unreleased > 0 => {
                    body.flow_control().release_capacity(unreleased).unwrap();
                    unreleased = 0;
                }
                Err(_) => {}
            }
        }
        body.flow_control().release_capacity(unreleased).unwrap();
        got.freeze()
    };
    let got = timeout(CLIENT_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| panic!("{path}: body timed out"));
    assert!(
        got == pattern(len, 0),
        "{path}: {} bytes, or other bytes",
        got.len()
    );
}

/// A client stream that counts the bytes written to it.
struct CountWrites {
    io: Box<dyn AsyncStream>,
    written: Arc<AtomicUsize>,
}

impl AsyncRead for CountWrites {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountWrites {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let done = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = done {
            self.written.fetch_add(n, Ordering::SeqCst);
        }
        done
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A browser's HTTP/2 settings (Firefox's): a 12 MiB connection window,
/// 128 KiB stream windows, a 64 KiB header table, the largest frames.
fn browser_like() -> h2::client::Builder {
    let mut b = h2::client::Builder::new();
    b.initial_connection_window_size(12 << 20)
        .initial_window_size(128 << 10)
        .header_table_size(65_536)
        .max_frame_size(16_777_215);
    b
}

// ---- the behaviours ----

/// 64 concurrent streams in each round (hyper's client), the connection
/// PARKED, then DORMANT, then PARKED between rounds: the stream ids go on
/// from where they were, every body comes back byte for byte.
fn many_concurrent_streams_across_sleeps<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    client_runtime().block_on(async {
        let (send, conn) = T::hyper_h2(&srv.addr).await;
        rounds(&srv, async |round| {
            let bodies = (0..64).map(|i| pattern(40 + 97 * i + round, (round * 64 + i) as u64));
            mirror_all(&send, round, bodies.collect()).await;
        })
        .await;
        close(send, conn).await;
    });
    all_closed(&srv);
    assert_eq!(srv.stats().accepted, 1);
}

/// Request bodies of 0 B, 1 KiB, 100 KiB and three of 1 MiB at once
/// (hyper's client), across PARKED and DORMANT: the server's receive
/// window after a wake takes what the client may send (three 1 MiB bodies
/// at once are more than the 1 MiB a fresh connection's opening
/// WINDOW_UPDATE grants, were it to reach the client on top of what the
/// client already had).
fn request_bodies_from_empty_to_a_mebibyte_across_sleeps<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    client_runtime().block_on(async {
        let (send, conn) = T::hyper_h2(&srv.addr).await;
        rounds(&srv, async |round| {
            let sizes = [0, 1 << 10, 100 << 10, 1 << 20, 1 << 20, 1 << 20];
            let bodies = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| pattern(len, (round * 8 + i) as u64));
            mirror_all(&send, round, bodies.collect()).await;
        })
        .await;
        close(send, conn).await;
    });
    all_closed(&srv);
}

/// A client with a browser's settings (a large connection window and
/// header table, 128 KiB stream windows, the largest frames): responses of
/// 0 B to 1 MiB at once, larger than 65,535 B and than the client's stream
/// window, across PARKED and DORMANT. Such a client's window stays far
/// above 65,535 B, so its connection sleeps in every pause.
fn browser_like_client_across_sleeps<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    client_runtime().block_on(async {
        let client = H2Client::connect::<T>(&srv.addr, &browser_like()).await;
        rounds(&srv, async |_| {
            let mut streams = JoinSet::new();
            for len in [0, 1, 70_000, 200 << 10, 1 << 20] {
                streams.spawn(h2_get_bytes(client.send.clone(), len));
            }
            while let Some(done) = streams.join_next().await {
                done.expect("a stream's check failed");
            }
        })
        .await;
        client.close().await;
    });
    all_closed(&srv);
}

/// h2's client with its defaults: 65,535-byte windows that it tops up only
/// once half is used. After a 1 KiB response its window is below 65,535 B,
/// less than a fresh connection believes it may send; the connection
/// sleeps anyway, PARKED and DORMANT, never declining for its window (the
/// woken connection's gate holds back what h2 would send past the window,
/// see `wire`). Bodies larger than its windows both ways are exact, and so
/// are responses read at the window's edge: a woken server that sent past
/// the client's window would fail the read (FLOW_CONTROL_ERROR).
fn h2_default_client_sleeps_and_stays_correct<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    client_runtime().block_on(async {
        let client = H2Client::connect::<T>(&srv.addr, &h2::client::Builder::new()).await;
        rounds(&srv, async |round| {
            h2_get_bytes(client.send.clone(), 1024).await;
            for len in [0, 1 << 10, 100 << 10] {
                let body = pattern(len, round as u64);
                let (res, _) =
                    h2_request(&client.send, "POST", "/echo", &[], Some(body.clone())).await;
                let (_, got) = h2_response(res).await;
                assert!(got == body, "{len} bytes sent, {} back", got.len());
            }
            h2_get_bytes_at_the_window_edge(&client.send, 100 << 10).await;
            h2_get_bytes_at_the_window_edge(&client.send, 200 << 10).await;
            h2_get_bytes(client.send.clone(), 1 << 20).await;
            h2_get_bytes(client.send.clone(), 100 + round).await;
        })
        .await;
        client.close().await;
    });
    all_closed(&srv);
    assert_eq!(srv.stats().h2_sleep_declines.window, 0);
}

/// h2's client with a 1 MiB connection window and 2 MiB stream windows,
/// giving back window only when the server stops sending: a 200 KiB
/// response leaves the client's connection window at 824 KiB (h2 tops it
/// up only when a third is used), and after each pause a response of
/// 1.1 MiB must stop at what the window allows — a woken connection that
/// believed the client's window larger than it is would send past it.
fn a_woken_connection_never_sends_more_than_the_clients_window<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    let mut b = h2::client::Builder::new();
    b.initial_connection_window_size(1 << 20)
        .initial_window_size(2 << 20);
    client_runtime().block_on(async {
        let client = H2Client::connect::<T>(&srv.addr, &b).await;
        rounds(&srv, async |round| {
            let len = if round == 0 {
                200 << 10
            } else {
                (1 << 20) + (100 << 10)
            };
            h2_get_bytes_at_the_window_edge(&client.send, len).await;
        })
        .await;
        client.close().await;
    });
    all_closed(&srv);
}

fn dynamic_table_entries_are_reused_across_sleeps_with_the_default_table<T: Transport>() {
    dynamic_table_entries_across_sleeps::<T>(None);
}

fn dynamic_table_entries_are_reused_across_sleeps_with_no_client_table<T: Transport>() {
    dynamic_table_entries_across_sleeps::<T>(Some(0));
}

fn dynamic_table_entries_are_reused_across_sleeps_with_a_64_kib_client_table<T: Transport>() {
    dynamic_table_entries_across_sleeps::<T>(Some(65_536));
}

/// The headers each request of [`dynamic_table_entries_across_sleeps`]
/// sends: a session header of 2,900 bytes (a browser's cookie; h2 indexes
/// no `cookie` but does index this, so it enters the tables as a browser's
/// cookie does), small custom ones, and one that changes each round.
fn reused_headers(round: usize) -> Vec<(&'static str, String)> {
    let session: String = (0..2_900)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    vec![
        ("x-session", session),
        ("x-trace-id", "4bf92f3577b34da6a3ce929d0e0e4736".to_owned()),
        ("x-client", "dormant-tests/1.0".to_owned()),
        ("x-tenant", "blue".to_owned()),
        ("x-round", round.to_string()),
    ]
}

/// HPACK across sleeps, with h2's client, whose decoder checks every index
/// it is sent, advertising a header table of `table` bytes (`None`: the
/// default 4,096). Each round, the same headers enter the tables of both
/// sides (the mirror service sends them back) and are reused, on a stream
/// held open (so the connection cannot sleep within the round) and six
/// requests beside it; between rounds the connection sleeps (PARKED,
/// DORMANT), so the first requests of a round reuse what the client's
/// encoder and decoder kept from before the sleep. Every header comes back
/// byte for byte; and compression comes back once a woken connection is
/// busy (the server gives the client its 4,096-byte table back after four
/// streams): the sixth request beside the held stream, whose headers are
/// all in the table by then, costs the client far fewer bytes than the
/// 2,900-byte header.
fn dynamic_table_entries_across_sleeps<T: Transport>(table: Option<u32>) {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    let mut b = h2::client::Builder::new();
    b.initial_connection_window_size(1 << 20);
    if let Some(size) = table {
        b.header_table_size(size);
    }
    client_runtime().block_on(async {
        let client = H2Client::connect::<T>(&srv.addr, &b).await;
        rounds(&srv, async |round| {
            let headers = reused_headers(round);
            let check = |what: &str, parts: &response::Parts| {
                for (name, value) in &headers {
                    let got: Vec<_> = parts.headers.get_all(*name).iter().collect();
                    assert!(
                        got.len() == 1 && got[0] == value.as_str(),
                        "round {round}, {what}: header {name} came back as {got:?}"
                    );
                }
            };
            let (held, mut held_body) =
                h2_request(&client.send, "POST", "/held", &headers, None).await;
            let mut cost = 0;
            for i in 0..6 {
                let written = client.written();
                let (res, _) = h2_request(
                    &client.send,
                    "GET",
                    "/headers",
                    &headers,
                    Some(Bytes::new()),
                )
                .await;
                let (parts, body) = h2_response(res).await;
                cost = client.written() - written;
                check(&format!("request {i}"), &parts);
                assert!(body.is_empty());
            }
            assert!(
                cost < 1_000,
                "round {round}: the sixth request with the same headers cost the client \
                 {cost} bytes: compression did not come back"
            );
            let body = pattern(100, round as u64);
            held_body
                .send_data(body.clone(), true)
                .expect("the held body");
            let (parts, got) = h2_response(held).await;
            check("the held stream", &parts);
            assert_eq!(got, body);
        })
        .await;
        client.close().await;
    });
    all_closed(&srv);
}

/// Client PINGs to a PARKED and to a DORMANT connection are answered: by
/// the lot, without a wake, over TCP and Unix sockets (the rung kept);
/// over TLS by waking the connection, which then sleeps again. Either way
/// it serves the next request.
fn a_client_ping_while_asleep_is_answered<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    client_runtime().block_on(async {
        let mut client = H2Client::connect::<T>(&srv.addr, &browser_like()).await;
        let mut before = srv.stats();
        h2_get_bytes(client.send.clone(), 100).await;
        for rung in [Rung::Parked, Rung::Dormant] {
            sleep_until(&srv, rung, before);
            let asleep = srv.stats();
            for _ in 0..3 {
                client.ping().await;
            }
            if T::ANSWERS_ASLEEP {
                // Answered where it sleeps: no wake, the rung kept.
                let s = srv.stats();
                assert_eq!(s.wakes, asleep.wakes, "{rung:?}: {s:?}");
                assert_eq!(s.connections, asleep.connections, "{rung:?}");
            }
            srv.wait_for("asleep after the PINGs", |s| {
                s.connections[Active] == 0 && s.connections[Parked] + s.connections[Dormant] == 1
            });
            before = srv.stats();
            h2_get_bytes(client.send.clone(), 70_000).await;
            srv.wait_for("the request after the PINGs woke the connection", |s| {
                s.wakes > before.wakes
            });
        }
        client.ping().await;
        client.close().await;
    });
    all_closed(&srv);
}

/// A client's SETTINGS change reaching a PARKED connection (stream windows
/// from 65,535 B down to 16 KiB) applies from the wake on and across later
/// sleeps: 48 KiB responses read at the window's edge stop at 16 KiB until
/// the client gives window back (a server that kept the old setting sends
/// past it, which h2 refuses), and the client gets exactly one
/// acknowledgement of its SETTINGS (h2 fails the connection on another).
fn a_client_settings_change_while_asleep_applies_after_the_wake<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    let mut b = h2::client::Builder::new();
    b.initial_connection_window_size(16 << 20);
    client_runtime().block_on(async {
        let client = H2Client::connect::<T>(&srv.addr, &b).await;
        let mut before = srv.stats();
        h2_get_bytes_at_the_window_edge(&client.send, 48 << 10).await;
        sleep_until(&srv, Rung::Parked, before);

        before = srv.stats();
        client.initial_window.send(16 << 10).unwrap();
        srv.wait_for("the client's SETTINGS woke the connection", |s| {
            s.wakes > before.wakes
        });
        h2_get_bytes_at_the_window_edge(&client.send, 48 << 10).await;
        for rung in [Rung::Dormant, Rung::Parked] {
            sleep_until(&srv, rung, before);
            before = srv.stats();
            h2_get_bytes_at_the_window_edge(&client.send, 48 << 10).await;
            woke(&srv, rung, before);
        }
        client.close().await;
    });
    all_closed(&srv);
}

/// A client's GOAWAY to a PARKED and to a DORMANT connection, the client
/// keeping its end open: the server closes the connection, and its gauges
/// return to 0.
fn a_client_goaway_while_asleep_closes_the_connection<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    client_runtime().block_on(async {
        for rung in [Rung::Parked, Rung::Dormant] {
            let before = srv.stats();
            let io = T::connect_h2(&srv.addr).await.into_inner();
            let mut client = RawClient::start(io).await;
            client.get(1).await;
            sleep_until(&srv, rung, before);
            client.go_away().await;
            client.until_closed().await;
            all_closed(&srv);
        }
    });
}

/// A client's close (no GOAWAY) of a PARKED and of a DORMANT connection:
/// the server's gauges return to 0.
fn a_client_close_while_asleep_closes_the_connection<T: Transport>() {
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    client_runtime().block_on(async {
        for rung in [Rung::Parked, Rung::Dormant] {
            let before = srv.stats();
            let io = T::connect_h2(&srv.addr).await.into_inner();
            let mut client = RawClient::start(io).await;
            client.get(1).await;
            sleep_until(&srv, rung, before);
            drop(client);
            all_closed(&srv);
        }
    });
}

fn graceful_shutdown_closes_parked_h2_connections<T: Transport>() {
    graceful_shutdown_closes_sleeping_h2_connections::<T>(Rung::Parked);
}

fn graceful_shutdown_closes_dormant_h2_connections<T: Transport>() {
    graceful_shutdown_closes_sleeping_h2_connections::<T>(Rung::Dormant);
}

/// A builder whose h2 connections sleep to `rung` and stay there.
fn ladder_to(rung: Rung) -> dormant::Builder {
    ladder(match rung {
        Rung::Active => panic!("a pause reaches PARKED or DORMANT"),
        Rung::Parked => None,
        Rung::Dormant => Some(Duration::from_millis(20)),
    })
}

/// Two h2 connections, hyper's client's and a raw one, each served once,
/// then asleep at `rung`.
async fn two_sleeping_connections<T: Transport>(
    srv: &Serve<T::Addr>,
    rung: Rung,
) -> (HyperSend, JoinHandle<hyper::Result<()>>, RawClient) {
    let (send, conn) = T::hyper_h2(&srv.addr).await;
    let body = hyper_post(send.clone(), "/one".to_owned(), Bytes::from_static(b"one")).await;
    assert_eq!(body, "one");
    let mut raw = RawClient::start(T::connect_h2(&srv.addr).await.into_inner()).await;
    raw.get(1).await;
    srv.wait_for(&format!("both connections {rung:?}"), |s| {
        s.parks >= 2 && s.connections[rung] == 2 && s.connections[Active] == 0
    });
    (send, conn, raw)
}

/// Asserts that the server sent a GOAWAY (no error) among `frames`, the
/// last it sent before it closed.
fn assert_goaway(frames: &[crate::common::h2_raw::Frame]) {
    assert!(
        frames
            .iter()
            .any(|f| f.kind == GOAWAY && f.error_code() == NO_ERROR),
        "no GOAWAY before the close: {frames:?}"
    );
}

/// Graceful shutdown with two h2 connections asleep at `rung`: each gets a
/// GOAWAY and is closed (hyper's client's connection ends cleanly; the raw
/// client sees the GOAWAY before the close), and `serve` returns.
fn graceful_shutdown_closes_sleeping_h2_connections<T: Transport>(rung: Rung) {
    let mut srv = T::serve(&ladder_to(rung), mirror_service());
    client_runtime().block_on(async {
        let (send, conn, mut raw) = two_sleeping_connections::<T>(&srv, rung).await;
        srv.begin_shutdown();
        timeout(CLIENT_TIMEOUT, conn)
            .await
            .expect("the shutdown did not end hyper's client connection")
            .unwrap()
            .expect("hyper's client connection ended in an error");
        drop(send);
        assert_goaway(&raw.until_closed().await);
    });
    srv.wait_stopped();
    let s = srv.stats();
    assert_eq!(s.connections.total(), 0, "{s:?}");
}

fn idle_timeout_closes_parked_h2_connections<T: Transport>() {
    idle_timeout_closes_sleeping_h2_connections::<T>(Rung::Parked);
}

fn idle_timeout_closes_dormant_h2_connections<T: Transport>() {
    idle_timeout_closes_sleeping_h2_connections::<T>(Rung::Dormant);
}

/// The idle timeout of two h2 connections asleep at `rung`: each gets a
/// GOAWAY and is closed, counted as idle timeouts.
fn idle_timeout_closes_sleeping_h2_connections<T: Transport>(rung: Rung) {
    let mut b = ladder_to(rung);
    b.idle_timeout(Duration::from_secs(1));
    let srv = T::serve(&b, mirror_service());
    client_runtime().block_on(async {
        let (send, conn, mut raw) = two_sleeping_connections::<T>(&srv, rung).await;
        timeout(CLIENT_TIMEOUT, conn)
            .await
            .expect("the idle timeout did not end hyper's client connection")
            .unwrap()
            .expect("hyper's client connection ended in an error");
        drop(send);
        assert_goaway(&raw.until_closed().await);
    });
    srv.wait_for("two idle timeouts", |s| {
        s.idle_timeouts == 2 && s.connections.total() == 0
    });
}

/// With server keep-alive PINGs, an idle h2 connection still sleeps: the
/// lot pings it PARKED and DORMANT, and the client's answers never reach
/// h2, which did not send the PINGs. Over TCP and Unix sockets the lot
/// takes the answers itself, without a wake, and pings again an interval
/// later (the second PING shows it); over TLS the answer wakes the
/// connection, which sleeps again. It serves on.
fn keep_alive_pings_reach_sleeping_h2_connections<T: Transport>() {
    for rung in [Rung::Parked, Rung::Dormant] {
        let mut b = ladder(DORMANT_AFTER);
        b.http2_keep_alive_interval(keep_alive_at(rung));
        let srv = T::serve(&b, mirror_service());
        client_runtime().block_on(async {
            let io = T::connect_h2(&srv.addr).await.into_inner();
            let mut client = RawClient::start(io).await;
            let before = srv.stats();
            client.get(1).await;
            sleep_until(&srv, rung, before);
            let asleep = srv.stats();
            // Answered by the client (`RawClient`), twice.
            for _ in 0..2 {
                next_ping(&mut client).await;
            }
            if T::ANSWERS_ASLEEP {
                let s = srv.stats();
                assert_eq!(s.wakes, asleep.wakes, "{rung:?}: {s:?}");
            } else {
                srv.wait_for("woken by the answers, and asleep again", |s| {
                    s.wakes >= asleep.wakes + 2
                        && s.connections[Active] == 0
                        && s.connections[Parked] + s.connections[Dormant] == 1
                });
            }
            client.get(3).await;
            assert_eq!(srv.stats().keep_alive_timeouts, 0);
        });
        all_closed(&srv);
    }
}

/// A sleeping h2 connection whose client stops answering keep-alive PINGs
/// is sent a GOAWAY and closed, PARKED or DORMANT; also DORMANT when the
/// PING went out while it was PARKED (the lot then keeps the PING's state
/// across the step to DORMANT, into a smaller box).
fn sleeping_h2_connections_that_do_not_answer_pings_are_closed<T: Transport>() {
    // (keep-alive interval, its timeout, the rung the PING finds, the rung
    // the connection is closed on)
    let cases = [
        (
            keep_alive_at(Rung::Parked),
            DORMANT_AFTER / 4,
            Rung::Parked,
            Rung::Parked,
        ),
        (
            keep_alive_at(Rung::Dormant),
            DORMANT_AFTER / 4,
            Rung::Dormant,
            Rung::Dormant,
        ),
        // Sent half-way to DORMANT, due half-way past it.
        (
            DORMANT_AFTER / 2,
            DORMANT_AFTER,
            Rung::Parked,
            Rung::Dormant,
        ),
    ];
    for (interval, timeout, pinged, closed) in cases {
        let mut b = ladder(DORMANT_AFTER);
        b.http2_keep_alive_interval(interval)
            .http2_keep_alive_timeout(timeout);
        let srv = T::serve(&b, mirror_service());
        client_runtime().block_on(async {
            let before = srv.stats();
            let io = T::connect_h2(&srv.addr).await.into_inner();
            let mut client = RawClient::start(io).await;
            client.get(1).await;
            client.stop_answering_pings();
            sleep_until(&srv, pinged, before);
            let frames = client.until_closed().await;
            assert!(frames.iter().any(|f| f.is_ping()), "{frames:?}");
            assert_goaway(&frames);
            all_closed(&srv);
            let after = srv.stats();
            assert_eq!(after.keep_alive_timeouts, 1);
            let went_dormant = after.dormancies > before.dormancies;
            assert_eq!(went_dormant, matches!(closed, Rung::Dormant), "{closed:?}");
        });
    }
}

/// With keep-alive on, the lot's PING to a sleeping connection may be
/// answered late: after the connection woke for a stream that stays open
/// and h2 sent a PING of its own. The client's two ACKs, in the order of
/// the PINGs, each go to the side that sent its PING (told apart by their
/// payload): h2 gets its own, and its keep-alive, answered, keeps the
/// connection (swallowed, it would close it after its timeout instead of
/// pinging again).
fn late_ping_acks_go_to_the_side_that_sent_the_ping<T: Transport>() {
    let mut b = ladder(DORMANT_AFTER);
    b.http2_keep_alive_interval(keep_alive_at(Rung::Parked))
        .http2_keep_alive_timeout(Duration::from_secs(1));
    let srv = T::serve(&b, mirror_service());
    client_runtime().block_on(async {
        let io = T::connect_h2(&srv.addr).await.into_inner();
        let mut client = RawClient::start(io).await;
        client.stop_answering_pings();
        let before = srv.stats();
        client.get(1).await;
        sleep_until(&srv, Rung::Parked, before);
        let lots = next_ping(&mut client).await;
        // A POST whose body is still to come: stream 3 stays open, and the
        // woken connection awake.
        let mut block = vec![0x83, 0x86, 0x84, 0x01, 9];
        block.extend_from_slice(b"localhost");
        client.send(&frame(HEADERS, END_HEADERS, 3, &block)).await;
        let h2s = next_ping(&mut client).await;
        assert_ne!(h2s.payload, lots.payload, "h2's PING, then the lot's");
        let ack = |ping: &Frame| frame(PING, ACK, 0, &ping.payload);
        client.send(&[ack(&lots), ack(&h2s)].concat()).await;
        let again = next_ping(&mut client).await;
        client.send(&ack(&again)).await;
        client.send(&frame(DATA, END_STREAM, 3, b"the body")).await;
        loop {
            let f = client.next().await.expect("the connection closed");
            if f.stream == 3 && f.flags & END_STREAM != 0 {
                break;
            }
        }
        client.get(5).await;
        assert_eq!(srv.stats().keep_alive_timeouts, 0);
    });
}

/// The next PING the server sends, skipping other frames; fails if the
/// connection closes first.
async fn next_ping(client: &mut RawClient) -> Frame {
    loop {
        let f = client.next().await.expect("the connection closed");
        if f.is_ping() {
            return f;
        }
    }
}

/// A WINDOW_UPDATE frame's type (RFC 9113, 6.9).
const WINDOW_UPDATE: u8 = 0x8;

/// A raw client that keeps the default 65,535-byte windows and gives no
/// window back: after a 100-byte response, its connection window is
/// 65,435 bytes and its connection sleeps (PARKED, then DORMANT). The woken
/// connection believes the client's window is 65,535 bytes; it must send
/// 65,435 bytes of the next response and stop there (the rest waits, held,
/// while a PING's ACK passes it), then send the rest once the client gives
/// window back.
fn a_client_that_stops_reading_is_sent_no_byte_past_its_window<T: Transport>() {
    const WINDOW: usize = 65_535 - 100;
    let srv = T::serve(&ladder(DORMANT_AFTER), mirror_service());
    client_runtime().block_on(async {
        for (i, rung) in [Rung::Parked, Rung::Dormant].into_iter().enumerate() {
            let io = T::connect_h2(&srv.addr).await.into_inner();
            let mut client = RawClient::start(io).await;
            let before = srv.stats();
            client.send(&get_frame(1, "/bytes/100")).await;
            assert_eq!(body_of(&mut client, 1, usize::MAX).await.len(), 100);
            sleep_until(&srv, rung, before);
            let len = 200_000 + i;
            client.send(&get_frame(3, &format!("/bytes/{len}"))).await;
            let mut body = body_of(&mut client, 3, WINDOW).await;
            assert_eq!(body.len(), WINDOW, "from {rung:?}");
            // Anything past the window would come before the PING's ACK.
            client.send(&frame(PING, 0, 0, b"are you?")).await;
            loop {
                let f = client.next().await.expect("the connection closed");
                assert!(f.kind != DATA, "from {rung:?}: DATA past the window: {f:?}");
                if (f.kind, f.flags) == (PING, ACK) {
                    break;
                }
            }
            let more = (len as u32).to_be_bytes();
            let updates = [
                frame(WINDOW_UPDATE, 0, 0, &more),
                frame(WINDOW_UPDATE, 0, 3, &more),
            ];
            client.send(&updates.concat()).await;
            body.extend(body_of(&mut client, 3, usize::MAX).await);
            assert!(
                body == pattern(len, 0),
                "from {rung:?}: {} bytes",
                body.len()
            );
            drop(client);
            all_closed(&srv);
        }
    });
    assert_eq!(srv.stats().h2_sleep_declines.window, 0);
}

/// DATA of `stream` read, until its end or `until` bytes.
async fn body_of(client: &mut RawClient, stream: u32, until: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < until {
        let f = client.next().await.expect("the connection closed");
        if (f.kind, f.stream) == (DATA, stream) {
            body.extend_from_slice(&f.payload);
            if f.flags & END_STREAM != 0 {
                break;
            }
        }
    }
    body
}

/// A client that reads only while it waits for a response, as a
/// synchronous one does (Python's httpx): it never sees a SETTINGS frame
/// sent while it idles, so a fence sent once the connection is quiet goes
/// unacknowledged. A new connection's fence goes out with its first
/// response instead, so it sleeps after it; a connection whose client let
/// a fence go unacknowledged (after a busy spell gave the client its table
/// back) sends its fences with its responses from then on, and sleeps
/// after each later request, PARKED and DORMANT.
fn a_client_that_reads_only_for_its_responses_sleeps<T: Transport>() {
    // Its five requests in a row must fall in one busy spell: a pause of
    // 3 ms between two, on a busy machine, would put it to sleep between
    // them.
    let mut builder = ladder(DORMANT_AFTER);
    builder.park_after(Duration::from_millis(50));
    let srv = T::serve(&builder, mirror_service());
    client_runtime().block_on(async {
        let io = T::connect_h2(&srv.addr).await.into_inner();
        let mut client = ReadingOnlyForResponses::start(io).await;
        let before = srv.stats();
        client.get(1, "/bytes/10").await;
        sleep_until(&srv, Rung::Parked, before);
        // Busy: five requests give the client its table back, and the
        // fence that follows goes unacknowledged while the client idles.
        for stream in [3, 5, 7, 9, 11] {
            client.get(stream, "/bytes/10").await;
        }
        srv.wait_for("a fence unacknowledged", |s| {
            s.h2_sleep_declines.unacknowledged == 1
        });
        let mut stream = 13;
        for rung in [Rung::Parked, Rung::Dormant, Rung::Parked] {
            let before = srv.stats();
            client.get(stream, "/bytes/70000").await;
            for _ in 0..5 {
                stream += 2;
                client.get(stream, "/bytes/10").await;
            }
            stream += 2;
            sleep_until(&srv, rung, before);
        }
        let s = srv.stats();
        assert_eq!(s.h2_sleep_declines.unacknowledged, 1, "{s:?}");
        assert_eq!(s.h2_sleep_declines.window, 0, "{s:?}");
    });
    all_closed(&srv);
}

/// An HTTP/2 client that reads only while it waits for a response (see
/// [`a_client_that_reads_only_for_its_responses_sleeps`]): it acknowledges
/// the server's SETTINGS, answers its PINGs and gives back the window of
/// the DATA it reads then, and reads nothing between requests.
struct ReadingOnlyForResponses {
    io: Box<dyn AsyncStream>,
}

impl ReadingOnlyForResponses {
    async fn start(mut io: Box<dyn AsyncStream>) -> Self {
        use tokio::io::AsyncWriteExt;
        let mut opening = crate::common::h2_raw::PREFACE.to_vec();
        opening.extend(frame(crate::common::h2_raw::SETTINGS, 0, 0, &[]));
        io.write_all(&opening).await.expect("write the preface");
        ReadingOnlyForResponses { io }
    }

    /// `GET path` on `stream`; reads until its response ends, and returns
    /// its body.
    async fn get(&mut self, stream: u32, path: &str) -> Vec<u8> {
        use crate::common::h2_raw::{SETTINGS, read_frame};
        use tokio::io::AsyncWriteExt;
        self.io
            .write_all(&get_frame(stream, path))
            .await
            .expect("write");
        let mut body = Vec::new();
        loop {
            let f = timeout(CLIENT_TIMEOUT, read_frame(&mut self.io))
                .await
                .expect("no frame from the server")
                .expect("the connection closed");
            let reply = match (f.kind, f.flags & ACK) {
                (SETTINGS, 0) => frame(SETTINGS, ACK, 0, &[]),
                (PING, 0) => frame(PING, ACK, 0, &f.payload),
                (DATA, _) if !f.payload.is_empty() => {
                    let n = (f.payload.len() as u32).to_be_bytes();
                    [
                        frame(WINDOW_UPDATE, 0, 0, &n),
                        frame(WINDOW_UPDATE, 0, f.stream, &n),
                    ]
                    .concat()
                }
                _ => Vec::new(),
            };
            self.io.write_all(&reply).await.expect("write");
            if f.kind == DATA && f.stream == stream {
                body.extend_from_slice(&f.payload);
            }
            if f.stream == stream && f.flags & END_STREAM != 0 && matches!(f.kind, DATA | HEADERS) {
                return body;
            }
        }
    }
}

/// hyper's adaptive window (BDP) raises the server's windows, the streams'
/// by a SETTINGS frame, as uploads show it a fast path: a fresh connection
/// would open with the protocol's 65,535 bytes and reject what the client
/// may now send on a stream. Such a connection stays awake (hyper's, with
/// its grown windows; the rule is `wire::watch`'s unit test); before they
/// grow, it sleeps. Uploads of 1 to 3 MiB at once after pauses that would
/// cross PARKED and DORMANT all arrive byte for byte.
fn adaptive_window_uploads_across_pauses<T: Transport>() {
    let mut builder = ladder(DORMANT_AFTER);
    builder.http2_adaptive_window(true);
    let srv = T::serve(&builder, mirror_service());
    client_runtime().block_on(async {
        let (send, conn) = T::hyper_h2(&srv.addr).await;
        let before = srv.stats();
        // Too little for the estimate to grow the windows.
        mirror_all(&send, 0, vec![pattern(1 << 10, 0)]).await;
        sleep_until(&srv, Rung::Dormant, before);
        for round in 1..4 {
            let sizes = [1 << 20, 1 << 20, 3 << 20];
            let bodies = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| pattern(len, (round * 8 + i) as u64));
            mirror_all(&send, round, bodies.collect()).await;
            tokio::time::sleep(DORMANT_AFTER * 2).await;
        }
        close(send, conn).await;
    });
    all_closed(&srv);
}

/// How long a client pauses between the pieces of a frame: many times the
/// `park_after` and `dormant_after` of [`in_pieces`]'s server.
const PAUSE: Duration = Duration::from_millis(40);

/// A builder whose servers park after 1 ms and go dormant after 2 ms:
/// every pause of a client is a sleep.
fn in_pieces() -> dormant::Builder {
    let mut b = dormant::Server::builder();
    b.park_after(Duration::from_millis(1))
        .dormant_after(Duration::from_millis(2));
    b
}

/// Sends `bytes` with `write` in pieces, cut at `cuts`, with a pause after
/// each piece in which the workers of `srv` stay idle; during the first
/// pause, another client (hyper's) is served.
async fn send_in_pieces<T: Transport>(
    srv: &Serve<T::Addr>,
    mut write: impl AsyncFnMut(&[u8]),
    bytes: &[u8],
    cuts: &[usize],
) {
    let mut start = 0;
    for (i, &cut) in cuts.iter().enumerate() {
        write(&bytes[start..cut]).await;
        start = cut;
        srv.pause_idle(PAUSE, &format!("after the piece that ends at {cut}"));
        if i == 0 {
            let (send, conn) = T::hyper_h2(&srv.addr).await;
            let body = hyper_post(send.clone(), "/other".into(), Bytes::from("other")).await;
            assert_eq!(body, "other", "another client");
            close(send, conn).await;
        }
    }
    write(&bytes[start..]).await;
}

/// A server with one worker, and HTTP/2 sent in pieces with a pause after
/// each: the client's preface (over TCP and a Unix socket, its first
/// bytes do not yet tell HTTP/2 from HTTP/1), a HEADERS frame to a
/// DORMANT connection (over TCP and a Unix socket the lot reads its first
/// byte, which it cannot answer where the connection sleeps, and wakes
/// it), a PING to a connection asleep again, a whole PING with the first
/// byte of the next frame (the lot wakes the connection with both), and
/// the DATA of a request in flight; the frames cut in their header and in
/// their payload. While the connection waits for the rest, awake, the
/// worker stays idle and serves another client.
fn a_frame_in_pieces_does_not_stop_another_connection<T: Transport>() {
    let srv = T::serve_with_workers(&in_pieces(), mirror_service(), 1);
    client_runtime().block_on(async {
        let before = srv.stats();
        let mut io = T::connect_h2(&srv.addr).await.into_inner();
        let write = async |piece: &[u8]| {
            io.write_all(piece).await.unwrap();
            io.flush().await.unwrap();
        };
        send_in_pieces::<T>(&srv, write, PREFACE, &[1, 4, 16, 23]).await;
        let mut client = RawClient::start_after(io, PREFACE.len()).await;
        client.send(&get_frame(1, "/bytes/10")).await;
        assert_eq!(body_of(&mut client, 1, usize::MAX).await, pattern(10, 0));

        sleep_until(&srv, Rung::Dormant, before);
        let before = srv.stats();
        let headers = get_frame(3, "/bytes/20");
        let write = async |piece: &[u8]| client.send(piece).await;
        send_in_pieces::<T>(&srv, write, &headers, &[1, 5, 9, 12]).await;
        assert_eq!(body_of(&mut client, 3, usize::MAX).await, pattern(20, 0));
        woke(&srv, Rung::Dormant, before);

        sleep_until(&srv, Rung::Dormant, before);
        let before = srv.stats();
        let ping = frame(PING, 0, 0, b"in parts");
        let write = async |piece: &[u8]| client.send(piece).await;
        send_in_pieces::<T>(&srv, write, &ping, &[1, 9, 13]).await;
        loop {
            let f = client.next().await.expect("the connection closed");
            if (f.kind, f.flags) == (PING, ACK) {
                assert_eq!(f.payload, b"in parts");
                break;
            }
        }

        // A PING the lot could answer, and the first byte of a HEADERS
        // frame, which it cannot: it wakes the connection with both.
        sleep_until(&srv, Rung::Dormant, before);
        let both = [frame(PING, 0, 0, b"together"), get_frame(5, "/bytes/30")].concat();
        let write = async |piece: &[u8]| client.send(piece).await;
        send_in_pieces::<T>(&srv, write, &both, &[18, 26]).await;
        assert_eq!(body_of(&mut client, 5, usize::MAX).await, pattern(30, 0));

        // POST / on stream 7, its body to come: `:method: POST`, `:scheme:
        // http` and `:path: /` from HPACK's static table, and
        // `:authority: localhost` as a literal that enters no table.
        let mut block = vec![0x83, 0x86, 0x84, 0x01, 9];
        block.extend_from_slice(b"localhost");
        client.send(&frame(HEADERS, END_HEADERS, 7, &block)).await;
        let data = frame(DATA, END_STREAM, 7, b"hello");
        let write = async |piece: &[u8]| client.send(piece).await;
        send_in_pieces::<T>(&srv, write, &data, &[1, 9, 11]).await;
        assert_eq!(body_of(&mut client, 7, usize::MAX).await, b"hello");
        srv.pause_idle(PAUSE, "every request answered");
        drop(client);
        all_closed(&srv);
    });
}
