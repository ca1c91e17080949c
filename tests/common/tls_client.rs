//! The raw client over TLS: a blocking [`Stream`] on a real TLS client
//! (tokio-rustls, through a [`Tap`]).

use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::rustls::pki_types::ServerName;

use super::client::Stream;
use super::tls::{APPLICATION_DATA, Tap, block, client_rt, records};

/// The most plaintext one TLS record carries.
const MAX_RECORD: usize = 16 * 1024;

/// A TLS client stream whose reads and writes block on the client runtime.
/// Each write is flushed, and a write of at most one record's plaintext
/// goes out as one record in one TCP write (after any record the session
/// had queued, a KeyUpdate): a test that splits its bytes across writes
/// splits them across records too.
pub(crate) struct TlsStream {
    pub(crate) tls: tokio_rustls::client::TlsStream<Tap>,
    read_timeout: Option<Duration>,
}

impl TlsStream {
    /// Completes the handshake over `io` with the server `name`.
    pub(crate) fn handshake(
        io: Tap,
        config: &Arc<ClientConfig>,
        name: &str,
    ) -> io::Result<TlsStream> {
        let connector = TlsConnector::from(config.clone());
        let name = ServerName::try_from(name.to_owned()).unwrap();
        let tls = block("handshake", connector.connect(name, io))?;
        Ok(TlsStream {
            tls,
            read_timeout: None,
        })
    }
}

/// A connected TCP stream, without Nagle's delay.
pub(crate) fn tcp(addr: SocketAddr) -> TcpStream {
    let tcp = block("connect", TcpStream::connect(addr)).expect("connect");
    tcp.set_nodelay(true).unwrap();
    tcp
}

impl Read for TlsStream {
    /// `Ok(0)` is the server's `close_notify`; a TCP close without it is
    /// `UnexpectedEof`.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (tls, timeout) = (&mut self.tls, self.read_timeout);
        client_rt().block_on(async {
            match timeout {
                Some(timeout) => tokio::time::timeout(timeout, tls.read(buf))
                    .await
                    .unwrap_or_else(|_| Err(ErrorKind::TimedOut.into())),
                None => tls.read(buf).await,
            }
        })
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // Records the session queued before (a KeyUpdate) go first.
        let queued = self.tls.get_ref().1.wants_write();
        let writes = self.tls.get_ref().0.writes;
        let n = block("write", async {
            let n = self.tls.write(buf).await?;
            self.tls.flush().await?;
            Ok::<_, io::Error>(n)
        })?;
        let tap = self.tls.get_ref().0;
        if buf.len() <= MAX_RECORD && !queued && tap.held.is_none() && tap.cut.is_none() {
            let recs = records(&tap.last_write);
            assert!(
                tap.writes == writes + 1 && recs.len() == 1 && recs[0].0 == APPLICATION_DATA,
                "{n} bytes of plaintext are one record in one TCP write: {} writes, {recs:?}",
                tap.writes - writes
            );
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        block("flush", self.tls.flush())
    }
}

impl Stream for TlsStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.read_timeout = timeout;
        Ok(())
    }

    fn close_write(&mut self) -> io::Result<()> {
        block("close_notify and FIN", self.tls.shutdown())
    }

    fn local(&self) -> Option<SocketAddr> {
        self.tls.get_ref().0.tcp.local_addr().ok()
    }

    fn socket(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.tls.get_ref().0.tcp)
    }
}
