//! The PROXY protocol (feature `proxy-protocol`) over real sockets, on
//! every transport it goes under: TCP, a Unix socket, and TCP under TLS
//! (the header before the ClientHello).
//!
//! The headers of HAProxy's specification (v1 TCP4, TCP6 and UNKNOWN, v2
//! over IPv4 and IPv6, with TLVs, and `LOCAL`) give handlers the client's
//! address, or the socket's own; so does a header read byte by byte, and
//! one that shares its write with the first request (with the ClientHello,
//! under TLS), whose bytes reach hyper whole, also when the connection
//! parks in the middle of that request. `PeerAddr` stays the header's on
//! every rung of the idle ladder and over HTTP/2. Malformed and missing
//! headers close their connection and no other, counted; a slowloris
//! header is cut by the header read timeout, or by the handshake timeout
//! that bounds it alone (and ends with it), or with neither by the idle
//! timeout. A header in pieces, with pauses between them, keeps no worker
//! busy while it waits for its rest: on a server with one worker, another
//! client is served meanwhile.

use std::io::Write;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::client::{Client, Stream, get, ok};
use crate::common::h2::post;
use crate::common::ladder::ladder;
use crate::common::proxied::{
    HeaderWrite, Proxied, Tcp, Unix, over_every_proxied_transport, peer_service,
};
use crate::common::rungs::{DORMANT_AFTER, all_closed, client_runtime, sleep_until, woke};
use crate::common::servers::{Hooks, serve_on};
use crate::common::temp_dir::TempDir;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::wait::wait;
use dormant::Rung;
use dormant::Rung::{Active, Parked};
use dormant::proxy::ProxyProtocol;
use dormant::{Admit, ConnState};
use http::{StatusCode, Version};
use hyper_util::rt::TokioExecutor;

over_every_proxied_transport!(
    the_headers_of_the_specification_give_the_address,
    a_header_read_byte_by_byte_gives_the_address,
    bytes_in_the_write_of_the_header_reach_the_server,
    a_request_after_the_header_survives_a_park_in_its_middle,
    peer_addr_stays_the_headers_on_every_rung,
    malformed_headers_close_their_connection_only,
    a_client_that_leaves_before_its_header_is_whole,
    a_slowloris_header_is_cut_by_the_header_read_timeout,
    a_slowloris_header_is_cut_by_the_handshake_timeout,
    the_handshake_timeout_ends_with_the_header,
    the_hooks_see_the_headers_address,
    http2_behind_the_header_keeps_the_address_across_a_sleep,
    a_header_in_pieces_does_not_stop_another_connection,
);

/// The v2 signature.
const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

/// Version 1, the specification's example (section 2.1).
const V1_TCP4: &[u8] = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
/// Version 1 over IPv6, the longest line the specification names.
const V1_TCP6: &[u8] = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
    ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
const V1_UNKNOWN: &[u8] = b"PROXY UNKNOWN\r\n";
/// The worst case of the specification: 107 bytes.
const V1_UNKNOWN_LONGEST: &[u8] = b"PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
    ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";

/// The client of [`V1_TCP4`] and [`v2_tcp4`].
const CLIENT4: &str = "192.168.0.1:56324";
/// The client of [`V1_TCP6`].
const CLIENT6_MAX: &str = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535";
/// The client of [`v2_tcp6`].
const CLIENT6: &str = "[2001:db8::1]:4000";

/// A version 2 header: the command (0 `LOCAL`, 1 `PROXY`), the family and
/// protocol byte, the addresses and TLVs.
fn v2(command: u8, family: u8, rest: &[u8]) -> Vec<u8> {
    let len = u16::try_from(rest.len()).unwrap().to_be_bytes();
    [V2_SIGNATURE, &[0x20 | command, family], &len, rest].concat()
}

/// TCP over IPv4, from 192.168.0.1:56324 to 192.168.0.11:443, then
/// `tlvs`.
fn v2_tcp4(tlvs: &[u8]) -> Vec<u8> {
    let addresses = [192, 168, 0, 1, 192, 168, 0, 11, 0xdc, 0x04, 0x01, 0xbb];
    v2(1, 0x11, &[&addresses[..], tlvs].concat())
}

/// TCP over IPv6, from [2001:db8::1]:4000 to [2001:db8::2]:443.
fn v2_tcp6() -> Vec<u8> {
    let ip = |last: u8| {
        let mut ip = [0; 16];
        ip[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        ip[15] = last;
        ip
    };
    v2(
        1,
        0x21,
        &[&ip(1)[..], &ip(2), &[0x0f, 0xa0, 0x01, 0xbb]].concat(),
    )
}

/// What HAProxy and the clouds send after the addresses: an ALPN, an
/// authority, a unique id, HAProxy's TLS facts (with sub-TLVs), an AWS VPC
/// endpoint id and a NOOP.
fn tlvs() -> Vec<u8> {
    let tlv = |kind: u8, value: &[u8]| {
        let len = u16::try_from(value.len()).unwrap().to_be_bytes();
        [&[kind][..], &len, value].concat()
    };
    let ssl = [
        &[0x01, 0, 0, 0, 0][..],
        &tlv(0x21, b"TLSv1.3"),
        &tlv(0x23, b"TLS_AES_128_GCM_SHA256"),
    ]
    .concat();
    [
        tlv(0x01, b"h2"),
        tlv(0x02, b"example.com"),
        tlv(0x05, b"4f2d1c8a-unique"),
        tlv(0x20, &ssl),
        tlv(0xea, b"\x01vpce-08d2bf15fef86a2a1"),
        tlv(0x04, &[0; 3]),
    ]
    .concat()
}

/// The specification's headers, each with the client address it gives
/// (`None`: the socket's own peer).
fn headers() -> Vec<(&'static str, Vec<u8>, Option<&'static str>)> {
    vec![
        ("v1 TCP4", V1_TCP4.to_vec(), Some(CLIENT4)),
        ("v1 TCP6", V1_TCP6.to_vec(), Some(CLIENT6_MAX)),
        ("v1 UNKNOWN", V1_UNKNOWN.to_vec(), None),
        ("v1 UNKNOWN, 107 bytes", V1_UNKNOWN_LONGEST.to_vec(), None),
        ("v2 TCP over IPv4", v2_tcp4(&[]), Some(CLIENT4)),
        ("v2 TCP over IPv6", v2_tcp6(), Some(CLIENT6)),
        ("v2 with TLVs", v2_tcp4(&tlvs()), Some(CLIENT4)),
        ("v2 LOCAL", v2(0, 0x00, &[]), None),
        (
            "v2 LOCAL with addresses",
            v2(0, 0x11, &v2_tcp4(&[])[16..]),
            None,
        ),
        ("v2 UNSPEC", v2(1, 0x00, &[]), None),
    ]
}

/// A builder whose servers put the peer's address in every request.
fn with_peer_addr(mut builder: dormant::Builder) -> dormant::Builder {
    builder.peer_addr(true);
    builder
}

/// What the peer service answers `path` with `body` for a client whose
/// header gave `client` (`None`: its own address).
fn answer<T: Proxied>(
    c: &Client<T::Stream>,
    client: Option<&str>,
    path: &str,
    body: &str,
) -> String {
    let peer = client.map_or_else(|| T::own_peer(c), str::to_owned);
    ok(&format!("{peer} {path} {body}"))
}

/// Sends each header of the specification as `write` says, then a request;
/// the handler sees the address the header gave.
fn each_header_gives_the_address<T: Proxied>(write: HeaderWrite) {
    let srv = T::serve(&with_peer_addr(dormant::Server::builder()));
    for (name, header, client) in headers() {
        let mut c = T::connect(&srv.addr, &header, write);
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), answer::<T>(&c, client, "/", ""), "{name}");
    }
    assert_eq!(srv.stats().proxy_header_failures, 0);
}

fn the_headers_of_the_specification_give_the_address<T: Proxied>() {
    each_header_gives_the_address::<T>(HeaderWrite::Apart);
}

fn a_header_read_byte_by_byte_gives_the_address<T: Proxied>() {
    each_header_gives_the_address::<T>(HeaderWrite::ByteByByte);
}

fn bytes_in_the_write_of_the_header_reach_the_server<T: Proxied>() {
    // With the header in one write: over TCP and a Unix socket two
    // pipelined requests, one with a body; under TLS the ClientHello.
    let srv = T::serve(&with_peer_addr(dormant::Server::builder()));
    for (name, header, client) in headers() {
        let mut c = T::connect(&srv.addr, &header, HeaderWrite::Together);
        c.send(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(
            c.response(),
            answer::<T>(&c, client, "/a", "hello"),
            "{name}"
        );
        assert_eq!(c.response(), answer::<T>(&c, client, "/b", ""), "{name}");
    }
    assert_eq!(srv.stats().proxy_header_failures, 0);
}

fn a_request_after_the_header_survives_a_park_in_its_middle<T: Proxied>() {
    // The header and the start of a request in one write (under TLS, the
    // header with the ClientHello, then the start of the request), then a
    // pause long enough to park: the connection parks holding the start.
    let srv = T::serve(&with_peer_addr(ladder(None)));
    let mut c = T::connect(&srv.addr, V1_TCP4, HeaderWrite::Together);
    c.send(b"POST /split HTTP/1.1\r\nHost: x\r\nContent-");
    srv.wait_for("the connection parked in the middle of its request", |s| {
        s.parks >= 1 && s.connections[Parked] == 1 && s.connections[Active] == 0
    });
    c.send(b"Length: 4\r\n\r\nbody");
    assert_eq!(
        c.response(),
        answer::<T>(&c, Some(CLIENT4), "/split", "body")
    );
}

fn peer_addr_stays_the_headers_on_every_rung<T: Proxied>() {
    // A woken connection's peer is asked of the transport again: the
    // header's client for one, the socket's own for a LOCAL header.
    let srv = T::serve(&with_peer_addr(ladder(DORMANT_AFTER)));
    for (header, client) in [(v2_tcp6(), Some(CLIENT6)), (v2(0, 0, &[]), None)] {
        let mut c = T::connect(&srv.addr, &header, HeaderWrite::Apart);
        c.send(get("/accepted").as_bytes());
        assert_eq!(c.response(), answer::<T>(&c, client, "/accepted", ""));
        for (rung, path) in [(Rung::Parked, "/parked"), (Rung::Dormant, "/dormant")] {
            let before = srv.stats();
            sleep_until(&srv, rung, before);
            c.send(get(path).as_bytes());
            assert_eq!(c.response(), answer::<T>(&c, client, path, ""), "{rung:?}");
            woke(&srv, rung, before);
        }
        drop(c);
        all_closed(&srv);
    }
}

/// Behind a PROXY header the connection hooks see the client it names:
/// the admission hook rejects one client by its address (its connection
/// ends without a response and is counted) and admits another, whose
/// state changes the state hook sees with that address; a header without
/// an address gives the socket's own.
fn the_hooks_see_the_headers_address<T: Proxied>() {
    let admitted = Arc::new(Mutex::new(Vec::new()));
    let states = Arc::new(Mutex::new(Vec::new()));
    let hooks = Hooks {
        accept: Some(Arc::new({
            let admitted = admitted.clone();
            move |peer: String| {
                let admit = match peer == CLIENT6 {
                    true => Admit::Reject,
                    false => Admit::Accept,
                };
                admitted.lock().unwrap().push((peer, admit));
                admit
            }
        })),
        state: Some(Arc::new({
            let states = states.clone();
            move |peer: String, state| states.lock().unwrap().push((peer, state))
        })),
    };
    let srv = T::serve_hooked(&with_peer_addr(ladder(None)), 2, hooks);
    let mut rejected = T::connect(&srv.addr, &v2_tcp6(), HeaderWrite::Apart);
    rejected.send(get("/").as_bytes());
    assert_eq!(
        rejected.read_to_close(),
        "",
        "a rejected client was answered"
    );
    srv.wait_for("rejected", |s| {
        s.rejected == 1 && s.connections[Active] + s.connections[Parked] == 0
    });
    for (header, client) in [(V1_TCP4.to_vec(), Some(CLIENT4)), (v2(0, 0, &[]), None)] {
        states.lock().unwrap().clear();
        let mut c = T::connect(&srv.addr, &header, HeaderWrite::Together);
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), answer::<T>(&c, client, "/", ""));
        let peer = client.map_or_else(|| T::own_peer(&c), str::to_owned);
        drop(c);
        all_closed(&srv);
        wait("Closed seen", || {
            states
                .lock()
                .unwrap()
                .last()
                .is_some_and(|(_, s)| *s == ConnState::Closed)
        });
        let states = states.lock().unwrap().clone();
        assert!(states.iter().all(|(p, _)| *p == peer), "{states:?}");
        let seen: Vec<ConnState> = states.iter().map(|(_, s)| *s).collect();
        assert_eq!(
            seen[..2],
            [ConnState::New, ConnState::On(Rung::Active)],
            "{seen:?}"
        );
        assert_eq!(admitted.lock().unwrap().last().unwrap().0, peer);
    }
    let admitted = admitted.lock().unwrap();
    assert_eq!(admitted[0], (CLIENT6.to_owned(), Admit::Reject));
    assert_eq!(admitted.len(), 3);
}

/// Bytes that are not a PROXY header, each closing its connection; the
/// second says whether the client ends its side after them.
fn malformed() -> Vec<(&'static str, Vec<u8>, bool)> {
    let v2_with = |index: usize, byte: u8| {
        let mut header = v2_tcp4(&[]);
        header[index] = byte;
        header
    };
    vec![
        ("no header: an HTTP request", get("/").into_bytes(), false),
        (
            "no header: a TLS ClientHello",
            b"\x16\x03\x01\x00\xf4\x01\x00\x00\xf0\x03\x03".to_vec(),
            false,
        ),
        (
            "v1 longer than 107 bytes",
            [&b"PROXY TCP4 "[..], &[b'1'; 100], b"\r\n"].concat(),
            false,
        ),
        (
            "v1 without CRLF",
            [&b"PROXY UNKNOWN "[..], &[b'x'; 100]].concat(),
            false,
        ),
        (
            "v1 with a bad address",
            b"PROXY TCP4 192.168.0.256 192.168.0.11 56324 443\r\n".to_vec(),
            false,
        ),
        (
            "v1 ending in a lone CR",
            b"PROXY UNKNOWN\rGET / HTTP/1.1\r\n\r\n".to_vec(),
            false,
        ),
        (
            "v1 in lower case",
            b"proxy TCP4 192.168.0.1 192.168.0.11 56324 443\r\n".to_vec(),
            false,
        ),
        ("v2 with a bad signature", v2_with(11, b'\r'), false),
        ("v2 of version 1", v2_with(12, 0x11), false),
        ("v2 with an unknown command", v2_with(12, 0x2f), false),
        ("v2 with an unknown family", v2_with(13, 0x41), false),
        (
            "v2 longer than 4 KiB",
            v2(1, 0x11, &[0; 4096])[..16].to_vec(),
            false,
        ),
        (
            "v2 with a TLV past its end",
            v2_tcp4(b"\x04\x00\x09\x00"),
            false,
        ),
        ("v2 truncated", v2_tcp4(&[])[..22].to_vec(), true),
        ("v1 truncated", V1_TCP4[..30].to_vec(), true),
    ]
}

fn malformed_headers_close_their_connection_only<T: Proxied>() {
    let srv = T::serve(&with_peer_addr(dormant::Server::builder()));
    let mut good = T::connect(&srv.addr, V1_TCP4, HeaderWrite::Apart);
    for (i, (name, bytes, end)) in malformed().into_iter().enumerate() {
        let mut bad = T::socket(&srv.addr);
        bad.send(&bytes);
        if end {
            bad.stream.close_write().unwrap();
        }
        let (got, _) = bad.read_to_end();
        assert_eq!(got, "", "{name}: closed without an answer");
        srv.wait_for(&format!("{name} counted"), |s| {
            s.proxy_header_failures == i as u64 + 1
        });
        // The connection that sent a good header is served on.
        good.send(get("/good").as_bytes());
        assert_eq!(
            good.response(),
            answer::<T>(&good, Some(CLIENT4), "/good", ""),
            "{name}"
        );
    }
    drop(good);
    all_closed(&srv);
}

fn a_client_that_leaves_before_its_header_is_whole<T: Proxied>() {
    // The server counts a failed header before it closes the socket: once
    // the client sees the close, the count is final.
    let srv = T::serve(&with_peer_addr(dormant::Server::builder()));
    let leave = |first: &[u8]| {
        let mut c = T::socket(&srv.addr);
        c.send(first);
        c.stream.close_write().unwrap();
        assert_eq!(c.read_to_end().0, "");
    };
    // A connect and a close (a TCP health check) is not a failed header.
    leave(b"");
    assert_eq!(srv.stats().proxy_header_failures, 0);
    // A close in the middle of the header is.
    leave(&V1_TCP4[..20]);
    assert_eq!(srv.stats().proxy_header_failures, 1);
    leave(&v2_tcp6()[..20]);
    assert_eq!(srv.stats().proxy_header_failures, 2);
}

fn a_slowloris_header_is_cut_by_the_header_read_timeout<T: Proxied>() {
    let mut builder = with_peer_addr(dormant::Server::builder());
    builder.header_read_timeout(Duration::from_millis(300));
    let srv = T::serve(&builder);
    let mut good = T::connect(&srv.addr, &v2_tcp4(&tlvs()), HeaderWrite::Apart);
    good.send(get("/").as_bytes());
    assert_eq!(good.response(), answer::<T>(&good, Some(CLIENT4), "/", ""));
    assert_eq!(trickle::<T>(&srv.addr), "");
    srv.wait_for("the slow header cut and counted", |s| {
        s.header_read_timeouts == 1 && s.proxy_header_failures == 1
    });
    good.send(get("/after").as_bytes());
    assert_eq!(
        good.response(),
        answer::<T>(&good, Some(CLIENT4), "/after", "")
    );
}

/// Sends `V1_TCP4` but its CRLF one byte at a time, slowly: a header that
/// keeps coming and never ends. Returns what the server answered before it
/// closed the connection.
fn trickle<T: Proxied>(addr: &T::Addr) -> String {
    let mut slow = T::socket(addr);
    for byte in &V1_TCP4[..V1_TCP4.len() - 2] {
        if slow.stream.write_all(std::slice::from_ref(byte)).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(15));
    }
    slow.read_to_end().0
}

fn a_slowloris_header_is_cut_by_the_handshake_timeout<T: Proxied>() {
    // The header read timeout (30 s by default) would come much later.
    let mut builder = with_peer_addr(dormant::Server::builder());
    builder.handshake_timeout(Duration::from_millis(300));
    let srv = T::serve(&builder);
    let mut good = T::connect(&srv.addr, V1_TCP6, HeaderWrite::Apart);
    assert_eq!(trickle::<T>(&srv.addr), "");
    srv.wait_for("the slow header cut and counted", |s| {
        s.proxy_header_failures == 1 && s.header_read_timeouts == 0
    });
    good.send(get("/").as_bytes());
    assert_eq!(
        good.response(),
        answer::<T>(&good, Some(CLIENT6_MAX), "/", "")
    );
}

fn the_handshake_timeout_ends_with_the_header<T: Proxied>() {
    // A whole header (under TLS, and the handshake) and no request yet: past
    // the handshake timeout, the connection waits for its first request,
    // which no timeout bounds here.
    let mut builder = with_peer_addr(dormant::Server::builder());
    builder
        .handshake_timeout(Duration::from_millis(100))
        .header_read_timeout(None);
    let srv = T::serve(&builder);
    let mut c = T::connect(&srv.addr, V1_TCP4, HeaderWrite::Apart);
    std::thread::sleep(Duration::from_millis(400));
    c.send(get("/late").as_bytes());
    assert_eq!(c.response(), answer::<T>(&c, Some(CLIENT4), "/late", ""));
    assert_eq!(srv.stats().proxy_header_failures, 0);
}

fn http2_behind_the_header_keeps_the_address_across_a_sleep<T: Proxied>() {
    // h2c with prior knowledge over TCP and a Unix socket, ALPN `h2` under
    // TLS; the connection sleeps (DORMANT) and wakes between requests.
    let srv = T::serve(&with_peer_addr(ladder(DORMANT_AFTER)));
    let rt = client_runtime();
    for (header, client) in [(V1_TCP6.to_vec(), CLIENT6_MAX), (v2_tcp6(), CLIENT6)] {
        let (mut send, conn) = rt
            .block_on(async {
                let handshake = async {
                    let io = T::connect_h2(&srv.addr, &header).await;
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await
                };
                tokio::time::timeout(CLIENT_TIMEOUT, handshake).await
            })
            .expect("h2 handshake timed out")
            .expect("h2 handshake");
        let conn = rt.spawn(conn);
        let expect = |path: &str| format!("{client} {path} body");
        let (status, version, body) = rt.block_on(post(&mut send, "/awake", "body"));
        assert_eq!((status, version), (StatusCode::OK, Version::HTTP_2));
        assert_eq!(body, expect("/awake"));
        let before = srv.stats();
        sleep_until(&srv, Rung::Dormant, before);
        let (_, _, body) = rt.block_on(post(&mut send, "/woken", "body"));
        assert_eq!(body, expect("/woken"));
        woke(&srv, Rung::Dormant, before);
        drop(send);
        rt.block_on(async { tokio::time::timeout(CLIENT_TIMEOUT, conn).await })
            .expect("the h2 connection ends")
            .unwrap()
            .unwrap();
        all_closed(&srv);
    }
}

/// How long a client pauses between the pieces of a header: many times
/// the `park_after` and `dormant_after` of [`in_pieces`]'s server.
const PAUSE: Duration = Duration::from_millis(40);

/// A builder whose servers park after 1 ms and go dormant after 2 ms:
/// every pause of a client is a sleep.
fn in_pieces() -> dormant::Builder {
    let mut builder = with_peer_addr(dormant::Server::builder());
    builder
        .park_after(Duration::from_millis(1))
        .dormant_after(Duration::from_millis(2));
    builder
}

/// A server with one worker, and headers sent in pieces with a pause after
/// each: a v1 line cut in its signature and in its addresses, a v2 header
/// cut in its signature and right after its fixed part, whose length
/// promises more. While a connection waits for the rest of its header (in
/// its task: its first request is on the clock), the worker stays idle,
/// and serves another client, which then sleeps in the lot; the header,
/// once whole, gives its address.
fn a_header_in_pieces_does_not_stop_another_connection<T: Proxied>() {
    let srv = T::serve_with_workers(&in_pieces(), 1);
    let v2 = v2_tcp4(&tlvs());
    let mut others = Vec::new();
    for (name, header, cuts) in [("v1", V1_TCP4, [1, 5, 30]), ("v2", &v2[..], [1, 12, 16])] {
        let pieces = [
            &header[..cuts[0]],
            &header[cuts[0]..cuts[1]],
            &header[cuts[1]..cuts[2]],
            &header[cuts[2]..],
        ];
        let mut c = T::connect_in_pieces(&srv.addr, &pieces, |i| {
            srv.pause_idle(PAUSE, &format!("{name}: after piece {i}"));
            if i == 0 {
                let mut other = T::connect(&srv.addr, V1_TCP6, HeaderWrite::Apart);
                other.send(get("/other").as_bytes());
                let want = answer::<T>(&other, Some(CLIENT6_MAX), "/other", "");
                assert_eq!(other.response(), want, "{name}: another client");
                others.push(other);
            }
        });
        c.send(get("/pieces").as_bytes());
        let want = answer::<T>(&c, Some(CLIENT4), "/pieces", "");
        assert_eq!(c.response(), want, "{name}");
        srv.pause_idle(PAUSE, &format!("{name}: served"));
    }
    assert_eq!(srv.stats().proxy_header_failures, 0);
}

#[test]
fn with_no_handshake_or_header_read_timeout_the_idle_timeout_cuts_a_slow_header() {
    let mut builder = dormant::Server::builder();
    builder
        .handshake_timeout(None)
        .header_read_timeout(None)
        .idle_timeout(Duration::from_millis(300));
    let srv = Tcp::serve(&builder);
    let mut slow = Tcp::socket(&srv.addr);
    slow.send(&V1_TCP4[..20]);
    let (got, _) = slow.read_to_end();
    assert_eq!(got, "");
    srv.wait_for("the slow header cut and counted", |s| {
        s.idle_timeouts == 1 && s.proxy_header_failures == 1
    });
}

#[test]
fn a_proxied_tokio_unix_listener_gives_the_address() {
    let dir = TempDir::new();
    let path = dir.path.join("http.sock");
    let service = peer_service::<dormant::proxy::UnixPeer>();
    let builder = with_peer_addr(dormant::Server::builder());
    let srv = serve_on(
        &builder,
        service,
        2,
        dir,
        move || async move {
            let listener = tokio::net::UnixListener::bind(&path).unwrap();
            (ProxyProtocol::new(listener), path)
        },
        Hooks::default(),
    );
    for (header, client) in [(V1_TCP4.to_vec(), Some(CLIENT4)), (v2(0, 0, &[]), None)] {
        let mut c = Unix::connect(&srv.addr, &header, HeaderWrite::Apart);
        c.send(get("/").as_bytes());
        assert_eq!(c.response(), answer::<Unix>(&c, client, "/", ""));
    }
}
