//! What the WebSocket CPU benches share (`ws_broadcast`, `ws_wake`): their
//! settings, the server's CPU time, and the client's upgrade. No counting
//! allocator here: these benches measure time.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A WebSocket upgrade request (RFC 6455's example key).
pub(crate) const WEBSOCKET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n\
    Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: \
    dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

/// The environment variable `name` as a number, or `default`.
pub(crate) fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `cargo bench` runs it (not `cargo test --benches`).
pub(crate) fn is_bench() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Nanoseconds this process's threads have run.
pub(crate) fn cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|task| {
            let path = task.ok()?.path().join("schedstat");
            let text = std::fs::read_to_string(path).ok()?;
            text.split(' ').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Connects to `addr`, sends `request` and reads the `101` head: the
/// stream and the head.
pub(crate) async fn upgrade(addr: SocketAddr, request: &[u8]) -> (tokio::net::TcpStream, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    s.write_all(request).await.expect("write");
    let mut head = Vec::new();
    let mut byte = [0];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).await.expect("the 101");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "not a 101");
    (s, head)
}
