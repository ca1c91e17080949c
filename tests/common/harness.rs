//! A server on a runtime the test owns, which keeps running after `serve`
//! returned: upgraded streams outlive `serve`, and their callbacks run
//! after it.

use std::any::Any;

use super::runtime::{ResponseBody, Servable, assert_no_server_panic, server_runtime};
use super::timeout::CLIENT_TIMEOUT;
use super::wait::wait;

/// A server on a runtime owned by the test. `A` is where it listens.
pub(crate) struct Harness<A> {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) addr: A,
    pub(crate) server: dormant::Server,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    serving: Option<tokio::task::JoinHandle<()>>,
    /// What must outlive the runtime, and with it the listener (the
    /// temporary directory of a Unix socket).
    _keep: Box<dyn Any + Send + Sync>,
}

impl<A> Harness<A> {
    /// Serves `service` on a runtime of two workers, on the listener
    /// `bind` makes on it (which returns the address clients connect to
    /// too). `keep` lives as long as the runtime.
    pub(crate) fn start<L, S, B>(
        builder: &dormant::Builder,
        service: S,
        keep: impl Any + Send + Sync,
        bind: impl FnOnce(&tokio::runtime::Runtime) -> (L, A),
    ) -> Harness<A>
    where
        L: dormant::Listener,
        S: Servable<B>,
        B: ResponseBody,
    {
        let rt = server_runtime(2);
        let server = builder.build().unwrap();
        let (listener, addr) = bind(&rt);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serve = server
            .serve(listener, service)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            });
        let serving = rt.spawn(async move { serve.await.unwrap() });
        Harness {
            rt,
            addr,
            server,
            stop: Some(stop),
            serving: Some(serving),
            _keep: Box::new(keep),
        }
    }

    pub(crate) fn stats(&self) -> dormant::Stats {
        self.server.stats()
    }

    pub(crate) fn wait_for(&self, what: &str, cond: impl Fn(&dormant::Stats) -> bool) {
        wait(what, || cond(&self.stats()));
    }

    /// Graceful shutdown; waits (bounded) until `serve` has returned.
    pub(crate) fn shutdown(&mut self) {
        let _ = self.stop.take().expect("running").send(());
        let serving = self.serving.take().expect("running");
        self.rt
            .block_on(async { tokio::time::timeout(CLIENT_TIMEOUT, serving).await })
            .expect("serve did not return after shutdown")
            .expect("serve panicked");
        assert_no_server_panic();
    }
}
