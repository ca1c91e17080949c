//! [`Handle`]: a `serve` call steered from outside its future, from any
//! task or thread (the shape of axum-server's `Handle`).
//!
//! Two `watch` channels carry it: one from the call to the handle (where
//! it listens, or that it failed), one from the handle to the call (the
//! shutdown asked for). The call keeps a weak reference to its held count
//! in the handle, so a handle kept after the call ends keeps nothing of it
//! alive. Without a handle, a `serve` call makes none of this.

use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;

/// Steers a [`serve`](crate::Server::serve) call from outside its future:
/// waits until it listens, counts its connections, shuts it down. Made
/// before the call and given to it with [`Serve::with_handle`](crate::Serve::with_handle); cloning is
/// cheap, and clones steer the same call. `A` is the listener's address
/// type ([`Addr`](crate::Addr)): `SocketAddr` for TCP (and TLS over TCP).
///
/// ```no_run
/// # use std::convert::Infallible;
/// # use std::time::Duration;
/// # use http::{Request, Response};
/// # use http_body_util::Full;
/// # use hyper::body::Bytes;
/// # use hyper::service::service_fn;
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let handle = dormant::Handle::new();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let server = dormant::Server::builder().build()?;
/// let serving = tokio::spawn(
///     server
///         .serve(listener, service_fn(|_req: Request<dormant::Body>| async {
///             Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("Hello"))))
///         }))
///         .with_handle(handle.clone())
///         .into_future(),
/// );
/// let addr = handle.listening().await.expect("serving");
/// println!("listening on {addr}, {} connections", handle.connection_count());
/// handle.graceful_shutdown(Some(Duration::from_secs(10)));
/// serving.await??;
/// # Ok(())
/// # }
/// # use std::future::IntoFuture;
/// ```
pub struct Handle<A = SocketAddr> {
    inner: Arc<Inner<A>>,
}

struct Inner<A> {
    listening: watch::Sender<Listening<A>>,
    command: watch::Sender<Command>,
    held: Mutex<Option<Weak<dyn Count>>>,
}

/// Where a `serve` call listens, as far as its handle knows.
#[derive(Clone, Debug)]
enum Listening<A> {
    NotYet,
    At(A),
    /// The call failed to start, or ended (or was dropped) before it
    /// listened.
    Failed,
}

/// The shutdown a handle asks for. Only ever goes forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Command {
    Serve,
    /// With a grace period of its own, or the server's.
    Graceful(Option<Duration>),
    Now,
}

/// What a handle counts: the connections a `serve` call holds.
pub(super) trait Count: Send + Sync {
    fn count(&self) -> usize;
}

impl<A> Handle<A> {
    /// A handle for one `serve` call.
    pub fn new() -> Self {
        Handle {
            inner: Arc::new(Inner {
                listening: watch::Sender::new(Listening::NotYet),
                command: watch::Sender::new(Command::Serve),
                held: Mutex::new(None),
            }),
        }
    }

    /// Resolves with the address the `serve` call listens on once it has
    /// started, or with `None` if it failed to start (or was dropped, or
    /// its listener could not tell its address).
    pub async fn listening(&self) -> Option<A>
    where
        A: Clone,
    {
        let mut rx = self.inner.listening.subscribe();
        // The sender lives in `inner`, which `self` keeps.
        let listening = rx
            .wait_for(|l| !matches!(l, Listening::NotYet))
            .await
            .ok()?;
        match &*listening {
            Listening::At(addr) => Some(addr.clone()),
            Listening::NotYet | Listening::Failed => None,
        }
    }

    /// Shuts the `serve` call down gracefully, as
    /// [`with_graceful_shutdown`](crate::Serve::with_graceful_shutdown)'s
    /// signal does: stops accepting, closes idle connections (PARKED,
    /// DORMANT, sleeping upgraded streams) at once, lets requests in
    /// flight finish for `grace` (`None`: the server's
    /// [`shutdown_grace`](crate::Builder::shutdown_grace)), then closes
    /// their connections. The call's future resolves once every
    /// connection is gone. Does nothing once a shutdown was asked for.
    pub fn graceful_shutdown(&self, grace: Option<Duration>) {
        self.inner.command.send_if_modified(|command| {
            let first = *command == Command::Serve;
            if first {
                *command = Command::Graceful(grace);
            }
            first
        });
    }

    /// Shuts the `serve` call down now: stops accepting and closes every
    /// connection, requests in flight included (a sleeping HTTP/2
    /// connection still gets its GOAWAY). Also cuts a graceful shutdown
    /// short.
    pub fn shutdown(&self) {
        self.inner.command.send_replace(Command::Now);
    }

    /// The connections the `serve` call holds: ACTIVE, PARKED and DORMANT
    /// (0 before it starts and after it ends).
    pub fn connection_count(&self) -> usize {
        let held = self
            .inner
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.as_ref()
            .and_then(Weak::upgrade)
            .map_or(0, |held| held.count())
    }

    /// The `serve` call's side: says where it listens (and keeps `held`
    /// to count), or that it failed if the returned guard drops first.
    pub(super) fn announcer(&self) -> Announcer<A> {
        Announcer {
            handle: self.clone(),
        }
    }

    /// The shutdown asked for so far.
    pub(super) fn command(&self) -> Command {
        *self.inner.command.borrow()
    }

    /// Resolves once a shutdown is asked for (at once if one was).
    pub(super) fn shutdown_asked(&self) -> impl Future<Output = ()> + Send + 'static
    where
        A: Send + Sync + 'static,
    {
        self.until(|command| *command != Command::Serve)
    }

    /// Resolves once [`shutdown`](Handle::shutdown) is called (at once if
    /// it was).
    pub(super) fn shutdown_now(&self) -> impl Future<Output = ()> + Send + 'static
    where
        A: Send + Sync + 'static,
    {
        self.until(|command| *command == Command::Now)
    }

    fn until(
        &self,
        done: impl Fn(&Command) -> bool + Send + Sync + 'static,
    ) -> impl Future<Output = ()> + Send + 'static
    where
        A: Send + Sync + 'static,
    {
        let mut rx = self.inner.command.subscribe();
        // The handle's `Inner` (the sender) outlives the wait.
        let keep = self.inner.clone();
        async move {
            let _keep = keep;
            let _ = rx.wait_for(done).await;
        }
    }
}

/// A `serve` call's hold on its handle's listening state: it announces
/// where the call listens, or, dropped before, that it failed.
pub(super) struct Announcer<A> {
    handle: Handle<A>,
}

impl<A> Announcer<A> {
    /// The call listens on `addr` (`None`: its listener could not say),
    /// holding `held`.
    pub(super) fn listening(&self, addr: Option<A>, held: Weak<dyn Count>) {
        let inner = &self.handle.inner;
        *inner.held.lock().unwrap_or_else(PoisonError::into_inner) = Some(held);
        inner
            .listening
            .send_replace(addr.map_or(Listening::Failed, Listening::At));
    }
}

impl<A> Drop for Announcer<A> {
    fn drop(&mut self) {
        self.handle.inner.listening.send_if_modified(|listening| {
            let first = matches!(listening, Listening::NotYet);
            if first {
                *listening = Listening::Failed;
            }
            first
        });
    }
}

impl<A> Default for Handle<A> {
    fn default() -> Self {
        Handle::new()
    }
}

impl<A> Clone for Handle<A> {
    fn clone(&self) -> Self {
        Handle {
            inner: self.inner.clone(),
        }
    }
}

impl<A: fmt::Debug> fmt::Debug for Handle<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("listening", &*self.inner.listening.borrow())
            .field("command", &*self.inner.command.borrow())
            .field("connections", &self.connection_count())
            .finish()
    }
}
