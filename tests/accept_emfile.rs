//! Running out of file descriptors: accept backs off instead of spinning,
//! and the server serves again once descriptors are free.
//!
//! The server runs in a child process (this test binary again, running the
//! ignored `emfile_server` test alone) whose descriptor limit `ulimit -n`
//! lowers; the client side runs here, with the normal limit.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::Duration;

use crate::common::process::{alone, test_name};

/// The child's descriptor limit: the runtime, the listener and the lot take
/// about ten, connections the rest.
const CHILD_FDS: usize = 64;

#[test]
#[ignore = "the server half of `accept_backs_off_when_out_of_descriptors`"]
fn emfile_server() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("addr {}", listener.local_addr().unwrap());
        std::io::stdout().flush().unwrap();
        let server = dormant::Server::builder().build().unwrap();
        let stats = server.clone();
        // `/stats` answers with the accept error count.
        let service = hyper::service::service_fn(move |req: http::Request<dormant::Body>| {
            let body = if req.uri().path() == "/stats" {
                stats.stats().accept_errors.to_string()
            } else {
                "hello".to_owned()
            };
            async move {
                Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                    bytes::Bytes::from(body),
                )))
            }
        });
        // Ends when the parent kills this process, or after a minute.
        let _ =
            tokio::time::timeout(Duration::from_secs(60), server.serve(listener, service)).await;
    });
}

/// Kills the child server when the test ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `GET path` and returns the body, or `None` if no response came
/// within `wait`.
fn get(stream: &mut TcpStream, path: &str, wait: Duration) -> Option<String> {
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .unwrap();
    response(stream, wait)
}

/// The body of the next response, or `None` if none began within `wait`.
fn response(stream: &mut TcpStream, wait: Duration) -> Option<String> {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let head = String::from_utf8_lossy(&buf).into_owned();
        if let Some(end) = head.find("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .expect("content-length");
            if buf.len() >= end + 4 + len {
                return Some(head[end + 4..end + 4 + len].to_owned());
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) => panic!("closed before a response"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                assert!(buf.is_empty(), "partial response");
                return None;
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

#[test]
fn accept_backs_off_when_out_of_descriptors() {
    let server = test_name().replace("accept_backs_off_when_out_of_descriptors", "emfile_server");
    let child = alone(&server, Some(CHILD_FDS))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the server");
    let mut child = Child(child);
    let addr: SocketAddr = BufReader::new(child.0.stdout.take().unwrap())
        .lines()
        .map(|l| l.unwrap())
        // libtest prints the test's name on the same line.
        .find_map(|l| {
            l.split_once("addr ")
                .map(|(_, a)| a.trim().parse().unwrap())
        })
        .expect("the server's address");

    // Open connections until one is not served: the server is out of
    // descriptors and that one waits in the listen backlog.
    let mut served = Vec::new();
    let mut waiting = loop {
        assert!(served.len() <= CHILD_FDS, "never ran out of descriptors");
        let mut c = TcpStream::connect(addr).unwrap();
        match get(&mut c, "/", Duration::from_secs(1)) {
            Some(body) => {
                assert_eq!(body, "hello");
                served.push(c);
            }
            None => break c,
        }
    };

    // While exhausted, accept retries with a doubling pause (5 ms up to
    // 1 s): a handful of errors in two seconds, where a spinning loop would
    // count millions.
    std::thread::sleep(Duration::from_secs(2));
    let errors: u64 = get(&mut served[0], "/stats", Duration::from_secs(5))
        .expect("an accepted connection is still served")
        .parse()
        .unwrap();
    assert!(
        (1..100).contains(&errors),
        "accept errors while exhausted: {errors}"
    );

    // Free some descriptors: the waiting connection is accepted and served,
    // and so is a new one.
    served.truncate(served.len() - 5);
    let deadline = Duration::from_secs(10);
    assert_eq!(response(&mut waiting, deadline).as_deref(), Some("hello"));
    let mut fresh = TcpStream::connect(addr).unwrap();
    assert_eq!(get(&mut fresh, "/", deadline).as_deref(), Some("hello"));
}
