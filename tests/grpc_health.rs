//! gRPC over HTTP/2 connections that sleep: tonic-health's Health service
//! served through dormant over every transport (prior knowledge over TCP
//! and a Unix socket, TLS with ALPN `h2`), called by tonic's client (its
//! codec on one hyper HTTP/2 connection) with pauses that cross PARKED and
//! DORMANT, and a server-streaming `Watch` open across a pause, during
//! which the connection must stay awake.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::common::h2::close;
use crate::common::ladder::ladder;
use crate::common::rungs::{DORMANT_AFTER, all_closed, client_runtime, sleep_until, woke};
use crate::common::servers::Serve;
use crate::common::timeout::CLIENT_TIMEOUT;
use crate::common::transport::{Transport, over_every_transport};
use dormant::Rung;
use dormant::Rung::Active;
use http::Uri;
use hyper::client::conn::http2::SendRequest;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tonic::Code;
use tonic_health::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus as Wire;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::server::{HealthReporter, health_reporter};

over_every_transport!(
    checks_across_sleeps,
    an_open_watch_keeps_the_connection_awake,
);

/// The service whose health the tests set and read.
const ECHO: &str = "dormant.test.Echo";

/// tonic's client transport, reduced to one hyper HTTP/2 connection: a
/// broken connection fails the call instead of being replaced by a new one
/// (as tonic's `Channel` would), so a wake that goes wrong shows.
#[derive(Clone)]
struct H2Channel(SendRequest<tonic::body::Body>);

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for H2Channel {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(req))
    }
}

type Client = HealthClient<H2Channel>;

/// tonic-health's service on a dormant server over `T` whose connections
/// park after 3 ms and go dormant after [`DORMANT_AFTER`], and the
/// reporter that sets the statuses it serves (`ECHO` serving from the
/// start).
fn serve_health<T: Transport>() -> (Serve<T::Addr>, HealthReporter) {
    let (reporter, service) = health_reporter();
    client_runtime().block_on(reporter.set_service_status(ECHO, ServingStatus::Serving));
    let srv = T::serve(
        &ladder(DORMANT_AFTER),
        dormant::TowerToHyperService::new(service),
    );
    (srv, reporter)
}

/// A Health client on a new HTTP/2 connection, and the task that drives
/// the connection.
async fn connect<T: Transport>(addr: &T::Addr) -> (Client, JoinHandle<hyper::Result<()>>) {
    let (send, conn) = T::hyper_h2(addr).await;
    let client = HealthClient::with_origin(H2Channel(send), Uri::from_static("http://localhost"));
    (client, conn)
}

/// Calls `Check` for `service`.
async fn check(client: &mut Client, service: &str) -> Result<Wire, tonic::Status> {
    let req = HealthCheckRequest {
        service: service.to_owned(),
    };
    let res = timeout(CLIENT_TIMEOUT, client.check(req))
        .await
        .expect("Check timed out")?;
    Ok(res.into_inner().status())
}

/// `Check` before and after pauses that cross PARKED, DORMANT and PARKED
/// again, the statuses changed while the connection sleeps: each answer is
/// the status of the moment (unary calls, and a NOT_FOUND sent as
/// trailers only), and each round after a pause woke the connection.
fn checks_across_sleeps<T: Transport>() {
    let (srv, reporter) = serve_health::<T>();
    client_runtime().block_on(async {
        let (mut client, conn) = connect::<T>(&srv.addr).await;
        let mut before = srv.stats();
        assert_eq!(check(&mut client, "").await.unwrap(), Wire::Serving);
        assert_eq!(check(&mut client, ECHO).await.unwrap(), Wire::Serving);
        let pauses = [
            (Rung::Parked, ServingStatus::NotServing, Wire::NotServing),
            (Rung::Dormant, ServingStatus::Serving, Wire::Serving),
            (Rung::Parked, ServingStatus::NotServing, Wire::NotServing),
        ];
        for (rung, status, expected) in pauses {
            sleep_until(&srv, rung, before);
            reporter.set_service_status(ECHO, status).await;
            before = srv.stats();
            assert_eq!(check(&mut client, ECHO).await.unwrap(), expected);
            assert_eq!(check(&mut client, "").await.unwrap(), Wire::Serving);
            let unknown = check(&mut client, "dormant.test.Unknown").await;
            assert_eq!(unknown.unwrap_err().code(), Code::NotFound);
            woke(&srv, rung, before);
        }
        close(client, conn).await;
    });
    all_closed(&srv);
    assert_eq!(srv.stats().accepted, 1);
}

/// A server-streaming `Watch` that wakes a DORMANT connection and stays
/// open: through a pause longer than `park_after` and `dormant_after` the
/// connection stays ACTIVE (a connection with an open stream never
/// sleeps), and a status change made during the pause reaches the
/// watcher; a `Check` beside it is answered. Once the client cancels the
/// `Watch`, the connection sleeps again and serves the next `Check`.
fn an_open_watch_keeps_the_connection_awake<T: Transport>() {
    let (srv, reporter) = serve_health::<T>();
    client_runtime().block_on(async {
        let (mut client, conn) = connect::<T>(&srv.addr).await;
        let mut before = srv.stats();
        assert_eq!(check(&mut client, ECHO).await.unwrap(), Wire::Serving);
        sleep_until(&srv, Rung::Dormant, before);

        before = srv.stats();
        let req = HealthCheckRequest {
            service: ECHO.to_owned(),
        };
        let mut watch = timeout(CLIENT_TIMEOUT, client.watch(req))
            .await
            .expect("Watch timed out")
            .expect("Watch")
            .into_inner();
        let mut next = async || -> Wire {
            timeout(CLIENT_TIMEOUT, watch.message())
                .await
                .expect("no Watch message")
                .expect("Watch message")
                .expect("the Watch ended")
                .status()
        };
        assert_eq!(next().await, Wire::Serving);
        woke(&srv, Rung::Dormant, before);

        // Twice `dormant_after`, far longer than `park_after`.
        tokio::time::sleep(DORMANT_AFTER).await;
        reporter
            .set_service_status(ECHO, ServingStatus::NotServing)
            .await;
        tokio::time::sleep(DORMANT_AFTER).await;
        let s = srv.stats();
        assert_eq!(
            (s.connections.total(), s.connections[Active], s.parks),
            (1, 1, before.parks),
            "the connection slept with a Watch open: {s:?}"
        );
        assert_eq!(next().await, Wire::NotServing);
        assert_eq!(check(&mut client, ECHO).await.unwrap(), Wire::NotServing);

        drop(watch);
        sleep_until(&srv, Rung::Dormant, before);
        before = srv.stats();
        assert_eq!(check(&mut client, ECHO).await.unwrap(), Wire::NotServing);
        woke(&srv, Rung::Dormant, before);
        close(client, conn).await;
    });
    all_closed(&srv);
}
