//! A middleware stores a request id and a user in the request's context map;
//! the handler reads them.
//!
//! ```text
//! cargo run --example context [ADDR]      # default 127.0.0.1:3000
//! curl -H 'authorization: Bearer ada' http://127.0.0.1:3000/
//! ```

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};

use dormant::context::{ContextExt, Key};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::net::TcpListener;

static REQUEST_ID: Key<u64> = Key::new();
static USER: Key<User> = Key::new();

#[derive(Debug)]
struct User {
    name: String,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The "middleware": a plain function in front of the handler. A tower
/// layer would do the same through `req.context_mut()`.
fn authenticate(req: &mut Request<dormant::Body>) {
    let user = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|name| User {
            name: name.to_owned(),
        });
    let ctx = req.context_mut();
    ctx.insert(&REQUEST_ID, NEXT_ID.fetch_add(1, Ordering::Relaxed));
    if let Some(user) = user {
        ctx.insert(&USER, user);
    }
}

async fn handler(mut req: Request<dormant::Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    authenticate(&mut req);
    let ctx = req.context().expect("authenticate inserted the context");
    let id = ctx.get(&REQUEST_ID).copied().unwrap_or_default();
    let (status, text) = match ctx.get(&USER) {
        Some(user) => (
            StatusCode::OK,
            format!("request {id}: hello, {}\n", user.name),
        ),
        None => (
            StatusCode::UNAUTHORIZED,
            format!("request {id}: who are you?\n"),
        ),
    };
    let mut res = Response::new(Full::new(Bytes::from(text)));
    *res.status_mut() = status;
    Ok(res)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!("listening on {}", listener.local_addr()?);
    dormant::Server::builder()
        .build()?
        .serve(listener, service_fn(handler))
        .await?;
    Ok(())
}
