//! The differential tests' scenario (tests/http1_differential.rs over TCP,
//! tests/tls_differential.rs over TLS): one pipelined request stream, the
//! handler that describes each request, and the cuts it is sent in.

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;

/// Describes the request: method, path and query, body and trailers.
pub async fn describe<B>(req: Request<B>) -> Result<Response<Full<Bytes>>, Infallible>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let line = format!("{} {}", req.method(), req.uri());
    let text = match req.into_body().collect().await {
        Ok(c) => {
            let trailers = c.trailers().map(|t| format!("{t:?}")).unwrap_or_default();
            let body = c.to_bytes();
            format!(
                "{line} body={} trailers={trailers}",
                String::from_utf8_lossy(&body)
            )
        }
        Err(e) => format!("{line} error={e}"),
    };
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// Content-Length and chunked bodies (with an extension and a trailer),
/// HEAD, `Expect: 100-continue`, and a last request that closes.
pub const STREAM: &[u8] = b"POST /p1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
GET /g1?q=1 HTTP/1.1\r\nHost: x\r\n\r\n\
POST /c1 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n\
HEAD /h1 HTTP/1.1\r\nHost: x\r\n\r\n\
POST /e1 HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\nbody\
GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// Pause between writes: long enough for dormant (park_after 1 ms) to
/// park when hyper is between messages. Equality is the assertion; the
/// pause only makes parking possible.
pub const PAUSE: Duration = Duration::from_millis(10);

/// How many cases run at once.
pub const CONCURRENCY: usize = 16;

/// Every two-way split of [`STREAM`], then 1,000 seeded three-way splits:
/// the cut points of each case, ascending.
pub fn split_cases() -> Vec<Vec<usize>> {
    let mut cases: Vec<Vec<usize>> = (1..STREAM.len()).map(|i| vec![i]).collect();
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for _ in 0..1000 {
        let a = 1 + rng.below(STREAM.len() - 2);
        let b = a + 1 + rng.below(STREAM.len() - a - 1);
        cases.push(vec![a, b]);
    }
    cases
}

/// A tiny xorshift64 (no rand crate).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
