//! Test servers: a real dormant server on a runtime thread of its own
//! ([`Serve`]), on whatever listener the test binds there.

use std::any::Any;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::client::{Client, Endpoint};
use super::runtime::{Panics, ResponseBody, Servable, server_runtime};
use super::timeout::CLIENT_TIMEOUT;

/// What the tests do with a [`dormant::Handle`], whatever the listener's
/// address type.
pub(crate) trait Steer: Send + Sync {
    fn shutdown(&self);
    fn graceful_shutdown(&self, grace: Option<Duration>);
    fn connection_count(&self) -> usize;
}

impl<A: Send + Sync> Steer for dormant::Handle<A> {
    fn shutdown(&self) {
        dormant::Handle::shutdown(self);
    }

    fn graceful_shutdown(&self, grace: Option<Duration>) {
        dormant::Handle::graceful_shutdown(self, grace);
    }

    fn connection_count(&self) -> usize {
        dormant::Handle::connection_count(self)
    }
}

/// A running server, on a runtime of its own on a thread of its own. Its
/// runtime outlives `serve`: upgraded streams, which `serve` hands off and
/// does not wait for, run (and their callbacks are called) until the test
/// drops the server, which shuts it down gracefully, checks that `serve`
/// returned and that none of its tasks panicked, then ends the runtime.
/// `A` is where it listens ([`Endpoint`]).
pub(crate) struct Serve<A = SocketAddr> {
    pub(crate) addr: A,
    pub(crate) server: dormant::Server,
    /// The `serve` call's [`dormant::Handle`], whatever its address type.
    pub(crate) handle: Box<dyn Steer>,
    /// The server's runtime (for its task metrics, and for a test's task
    /// beside the server's).
    runtime: tokio::runtime::Handle,
    panics: Panics,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// Set once `serve` has returned.
    served: Arc<AtomicBool>,
    /// Whether the test saw `serve` return (and checked for panics).
    stopped: bool,
    /// Ends the runtime when dropped.
    release: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// What must outlive the server (the temporary directory of a Unix
    /// socket); dropped after the server stopped, since fields drop after
    /// `Drop::drop`.
    _keep: Box<dyn Any + Send + Sync>,
}

impl<A> Serve<A> {
    pub(crate) fn stats(&self) -> dormant::Stats {
        self.server.stats()
    }

    /// Starts graceful shutdown without waiting for it.
    pub(crate) fn begin_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    /// Waits (bounded) until `serve` has returned; panics if it does not,
    /// or if a task of the server panicked.
    pub(crate) fn wait_stopped(&mut self) {
        if self.stopped {
            return;
        }
        let thread = self.thread.as_ref().expect("server thread");
        self.wait_until("serve to return after shutdown", || {
            self.served.load(Ordering::SeqCst) || thread.is_finished()
        });
        if !self.served.load(Ordering::SeqCst) {
            let thread = self.thread.take().unwrap();
            thread.join().expect("server thread panicked");
        }
        self.stopped = true;
        self.panics.assert_none();
    }

    /// Graceful shutdown, waited for ([`wait_stopped`](Self::wait_stopped)).
    pub(crate) fn stop(&mut self) {
        self.begin_shutdown();
        self.wait_stopped();
    }

    /// Takes back the panics of the server's tasks counted so far (a test
    /// that causes them on purpose): how many.
    pub(crate) fn take_panics(&self) -> usize {
        self.panics.take()
    }

    /// Runs `future` to its end on the server's runtime, beside the
    /// server.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Waits (polling, bounded) until `cond(stats)` holds; panics with the
    /// last stats otherwise.
    pub(crate) fn wait_for(&self, what: &str, cond: impl Fn(&dormant::Stats) -> bool) {
        self.wait_until(what, || cond(&self.stats()));
    }

    /// Waits (bounded) until the server's runtime has `n` tasks alive.
    pub(crate) fn wait_tasks(&self, n: usize) {
        self.wait_until(&format!("{n} tasks alive"), || {
            self.runtime.metrics().num_alive_tasks() == n
        });
    }

    /// Waits `pause`, and fails the test if the server's workers were busy
    /// for half of it or more (tokio's `worker_total_busy_duration`, of
    /// every worker), or if a task spawned on the server's runtime then
    /// does not run: a connection that waits for the rest of a message
    /// must wait for its socket, not be polled again and again. A task
    /// that wakes itself every poll leaves the other tasks their turns, so
    /// only its worker's time shows it; a poll that never returns keeps
    /// its worker from counting that time, and from running any other
    /// task.
    pub(crate) fn pause_idle(&self, pause: Duration, what: &str) {
        let busy = || {
            let metrics = self.runtime.metrics();
            (0..metrics.num_workers())
                .map(|worker| metrics.worker_total_busy_duration(worker))
                .sum::<Duration>()
        };
        let before = busy();
        std::thread::sleep(pause);
        let spent = busy().saturating_sub(before);
        assert!(
            spent < pause / 2,
            "{what}: the server's workers were busy {spent:?} of a pause of {pause:?}: {:?}",
            self.stats()
        );
        let probe = self.runtime.spawn(async {});
        self.wait_until(
            &format!("{what}: a task spawned on the server's runtime to run"),
            || probe.is_finished(),
        );
    }

    /// Keeps the server's runtime busy until the returned guard drops: a
    /// thread outside it spawns an empty task on it every millisecond, as
    /// requests and timers do on a server with work to do. Each spawn
    /// unparks an idle worker, which then parks on tokio's I/O driver if
    /// no other holds it. (A tokio worker that took the driver's events
    /// and then runs a task that spins leaves the driver unpolled while the
    /// other workers wait on a condition variable: the spin then holds up
    /// every socket's readiness, on any tokio server.)
    pub(crate) fn ticking(&self) -> Ticking {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ticker, runtime) = (stop.clone(), self.runtime.clone());
        let thread = std::thread::spawn(move || {
            while !ticker.load(std::sync::atomic::Ordering::SeqCst) {
                drop(runtime.spawn(async {}));
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        Ticking(stop, Some(thread))
    }

    /// Polls `done` until it holds (bounded); panics saying what it waited
    /// for, with the server's stats, otherwise.
    fn wait_until(&self, what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + CLIENT_TIMEOUT;
        while !done() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {:?}",
                self.stats()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Keeps a server's runtime busy ([`Serve::ticking`]) until dropped.
pub(crate) struct Ticking(
    Arc<std::sync::atomic::AtomicBool>,
    Option<std::thread::JoinHandle<()>>,
);

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.1.take() {
            let _ = thread.join();
        }
    }
}

impl<A: Endpoint> Serve<A> {
    pub(crate) fn connect(&self) -> Client<A::Stream> {
        self.addr.connect()
    }
}

impl<A> Drop for Serve<A> {
    fn drop(&mut self) {
        self.begin_shutdown();
        // Don't wait while panicking: a stuck server must not hide the
        // original failure.
        if std::thread::panicking() {
            return;
        }
        self.wait_stopped();
        drop(self.release.take());
        if let Some(thread) = self.thread.take() {
            self.wait_until("the server's runtime to end", || thread.is_finished());
            thread.join().expect("server thread panicked");
        }
    }
}

/// The connection hooks a test sets, with the peer address as its `Debug`
/// form (whatever the listener's address type).
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) accept: Option<Arc<dyn Fn(String) -> dormant::Admit + Send + Sync>>,
    pub(crate) state: Option<Arc<dyn Fn(String, dormant::ConnState) + Send + Sync>>,
}

/// Starts `service` on a dormant server built by `builder`, with `hooks`
/// set on the `serve` call, on its own runtime of `workers` worker threads
/// (with one, the server serves a woken connection's first poll in the
/// lot's task instead of spawning it), on the listener `bind` makes there
/// (it runs inside the runtime and returns the listener and the address
/// clients connect to). `keep` lives as long as the server.
pub(crate) fn serve_on<L, A, Bind, Fut, S, B>(
    builder: &dormant::Builder,
    service: S,
    workers: usize,
    keep: impl Any + Send + Sync,
    bind: Bind,
    hooks: Hooks,
) -> Serve<A>
where
    L: dormant::Listener,
    A: Send + 'static,
    Bind: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = (L, A)>,
    S: Servable<B>,
    B: ResponseBody,
{
    let server = builder.build().expect("valid config");
    let handle = dormant::Handle::<dormant::Addr<L>>::new();
    let steer = Box::new(handle.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let served = Arc::new(AtomicBool::new(false));
    let (srv, done) = (server.clone(), served.clone());
    let thread = std::thread::spawn(move || {
        let (rt, panics) = server_runtime(workers);
        rt.block_on(async move {
            let (listener, addr) = bind().await;
            addr_tx
                .send((addr, tokio::runtime::Handle::current(), panics))
                .unwrap_or_else(|_| panic!("the test went away"));
            let mut serve = srv.serve(listener, service).with_handle(handle);
            if let Some(accept) = hooks.accept {
                serve = serve.on_accept(move |peer| accept(format!("{peer:?}")));
            }
            if let Some(state) = hooks.state {
                serve = serve.on_conn_state(move |peer, s| state(format!("{peer:?}"), s));
            }
            serve
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        done.store(true, Ordering::SeqCst);
        // Upgraded streams live on until the test drops the server.
        let _ = released.recv();
    });
    let (addr, runtime, panics) = addr_rx.recv().expect("server started");
    Serve {
        addr,
        server,
        handle: steer,
        runtime,
        panics,
        shutdown: Some(tx),
        served,
        stopped: false,
        release: Some(release),
        thread: Some(thread),
        _keep: Box::new(keep),
    }
}
