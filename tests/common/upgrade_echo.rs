//! The echo protocol of [`UPGRADE`] on streams that sleep in the lot
//! between messages, spoken by the raw client.

use std::convert::Infallible;
use std::sync::atomic::Ordering;

use dormant::upgrade::{self, Lot, Upgraded, Woken};
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper::service::service_fn;
use tokio::io::AsyncWriteExt;

use super::client::{Client, Endpoint, Stream};
use super::runtime::Servable;
use super::servers::Serve;
use super::sleepers::{SWITCHED, Sleeper, Sleepers, UPGRADE};
use super::wait::wait;

/// Puts `stream` to sleep; each wake-up echoes one read and sleeps again.
fn sleep_echo(lot: Lot, stream: Upgraded, state: Sleeper) {
    lot.clone().sleep(stream, move |woken| async move {
        state.woken();
        match woken {
            Woken::Readable(mut stream) => match stream.read_pooled().await {
                Ok(Some(bytes)) => {
                    if stream.write_all(&bytes).await.is_ok() {
                        drop(bytes);
                        sleep_echo(lot, stream, state);
                    }
                }
                Ok(None) => state.report("readable, then a read found EOF"),
                Err(e) => state.report(format!("read failed: {e}")),
            },
            Woken::Eof(_) => state.report("eof"),
            Woken::Shutdown(mut stream) => {
                state.report("shutdown");
                let _ = stream.write_all(b"bye").await;
            }
            Woken::Failed(e) => state.report(format!("failed {e}")),
            _ => state.report("unknown"),
        }
    });
}

/// A service that upgrades every request and puts the stream to sleep in
/// the lot between messages ([`sleep_echo`]).
pub(crate) fn sleepy_service() -> (impl Servable<Empty<Bytes>>, Sleepers) {
    let (sleepers, reports) = Sleepers::new();
    let service = service_fn(move |mut req: Request<dormant::Body>| {
        let upgrade = upgrade::on(&mut req).expect("an upgrade request");
        let (reports, state) = (reports.clone(), reports.sleeper());
        tokio::spawn(async move {
            let parts = upgrade.await.expect("hand-off");
            let unix = parts.stream.as_unix().is_some() && parts.stream.as_tcp().is_none();
            reports.handed_off(
                format!("handed off: unix={unix} read_buf={:?}", parts.read_buf),
                &parts.lot,
            );
            sleep_echo(parts.lot.clone(), Upgraded::from(parts), state);
        });
        async {
            Ok::<_, Infallible>(
                Response::builder()
                    .status(StatusCode::SWITCHING_PROTOCOLS)
                    .header("connection", "upgrade")
                    .header("upgrade", "echo")
                    .body(Empty::<Bytes>::new())
                    .unwrap(),
            )
        }
    });
    (service, sleepers)
}

/// `n` connections to `srv`, each upgraded with [`UPGRADE`], kept open.
pub(crate) fn connect_upgraded<A: Endpoint>(srv: &Serve<A>, n: usize) -> Vec<Client<A::Stream>> {
    (0..n)
        .map(|_| {
            let mut c = srv.connect();
            c.send(UPGRADE.as_bytes());
            assert_eq!(c.response(), SWITCHED);
            c
        })
        .collect()
}

/// A client stream whose writes can go on in another thread while the
/// test reads.
pub(crate) trait Clonable: Stream {
    fn try_clone(&self) -> std::io::Result<Self>;
}

impl Clonable for std::net::TcpStream {
    fn try_clone(&self) -> std::io::Result<Self> {
        std::net::TcpStream::try_clone(self)
    }
}

impl Clonable for std::os::unix::net::UnixStream {
    fn try_clone(&self) -> std::io::Result<Self> {
        std::os::unix::net::UnixStream::try_clone(self)
    }
}

/// `c`'s upgraded stream, asleep in the lot ([`sleepy_service`]), echoes
/// messages with one wake each, then a burst far longer than one pool
/// buffer (many wakes) without losing a byte, and sleeps again.
pub(crate) fn check_sleeping_echo<S: Clonable>(c: &mut Client<S>, s: &Sleepers) {
    for i in 0..3 {
        let before = s.wakes.load(Ordering::SeqCst);
        let msg = format!("message {i}");
        c.send(msg.as_bytes());
        assert_eq!(c.read_exact_bytes(msg.len()), msg.as_bytes());
        wait("asleep again", || s.sleeping() == 1);
        assert_eq!(
            s.wakes.load(Ordering::SeqCst),
            before + 1,
            "one wake per message"
        );
    }

    // Far more than one pool buffer: many wakes, no byte lost.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let mut writer = c.stream.try_clone().unwrap();
    let sent = big.clone();
    let writing = std::thread::spawn(move || writer.write_all(&sent).unwrap());
    assert_eq!(c.read_exact_bytes(big.len()), big);
    writing.join().unwrap();
    wait("asleep after the burst", || s.sleeping() == 1);
}
