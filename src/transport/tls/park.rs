//! A TLS stream as the parking lot and the driver see it: its parked form
//! (the transport's fd and the session), and the [`Seam`] and
//! [`Transport`] it implements.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::task::{Context, Poll};

use rustls::AlertDescription;
use rustls::unbuffered::ConnectionState;
use tokio::io::{AsyncRead, AsyncWrite};

use super::TlsStream;
use super::buffers::Buffers;
use super::session::{ServerFacts, Session, Tls};
use crate::lot::{Parkable, Registration, Wrote};
use crate::transport::sealed::Sealed;
use crate::transport::{Alpn, Connected, Handshake, Peer, Seam, Serving, Stream, Transport};

impl<IO: Sealed> Sealed for TlsStream<IO> {}

/// A TLS connection outside tokio: the transport's parked form and the
/// session.
#[derive(Debug)]
pub struct DormantTls<D> {
    fd: D,
    tls: Box<Tls>,
}

impl<D: AsFd> AsFd for DormantTls<D> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl<IO> TlsStream<IO> {
    /// Splits a quiet stream into its transport and its session, giving
    /// back the buffers; the stream back if it is not quiet.
    fn into_session(mut self) -> Result<(IO, Box<Tls>), Self> {
        if !self.is_quiet() || self.has_buffered() {
            // The driver parks only quiet connections (a read found
            // nothing, and every write was flushed), and the upgrade lot
            // hands back a stream with bytes to read: a record held here
            // would wait for a readiness the socket never gives again.
            return Err(self);
        }
        self.shed();
        let mut tls = self.rec.tls;
        if let Session::Own(traffic) = &mut tls.session {
            traffic.stow();
        }
        Ok((self.io, tls))
    }
}

impl<IO> Parkable for TlsStream<IO>
where
    IO: Parkable + AsyncRead + AsyncWrite + Unpin,
    IO::Dormant: io::Write,
{
    type Dormant = DormantTls<IO::Dormant>;

    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.has_buffered() {
            return Poll::Ready(Ok(()));
        }
        self.io.poll_read_ready(cx)
    }

    fn read_ready(&self) -> bool {
        self.has_buffered() || self.io.read_ready()
    }

    fn into_dormant(self) -> Result<(DormantTls<IO::Dormant>, Registration), Self> {
        let (io, tls) = self.into_session()?;
        match io.into_dormant() {
            Ok((fd, registration)) => Ok((DormantTls { fd, tls }, registration)),
            Err(io) => Err(TlsStream::from_parts(io, tls)),
        }
    }

    fn from_dormant(dormant: DormantTls<IO::Dormant>, registration: Registration) -> Self {
        TlsStream::from_parts(IO::from_dormant(dormant.fd, registration), dormant.tls)
    }

    fn peer_closed(_: &DormantTls<IO::Dormant>) -> Option<io::Result<bool>> {
        // A `close_notify` is a record to decrypt: the connection's first
        // read finds it.
        None
    }

    fn close_dormant(mut dormant: DormantTls<IO::Dormant>, goodbye: &[u8]) {
        // The goodbye in a record and `close_notify`, if the handshake is
        // done and the socket takes the few bytes at once; a close without
        // them otherwise.
        let mut records = Vec::new();
        if dormant
            .tls
            .seal_dormant(goodbye, &mut records, true)
            .is_ok()
        {
            let _ = io::Write::write(&mut dormant.fd, &records);
        }
        // A handshake cut short is counted before the socket closes: once
        // the client sees the close, the count is final.
        let DormantTls { fd, tls } = dormant;
        drop(tls);
        drop(fd);
    }

    fn send_dormant(dormant: &mut DormantTls<IO::Dormant>, bytes: &[u8]) -> io::Result<()> {
        // In a record, as in `close_dormant`.
        let mut records = Vec::new();
        dormant.tls.seal_dormant(bytes, &mut records, false)?;
        match io::Write::write(&mut dormant.fd, &records)? {
            written if written == records.len() => Ok(()),
            _ => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_dormant(dormant: &mut DormantTls<IO::Dormant>, bytes: &[u8]) -> io::Result<Wrote> {
        let tls = &mut *dormant.tls;
        if tls.held.is_some() {
            // Records wait already: nothing may pass them.
            return Ok(Wrote {
                taken: 0,
                held: true,
            });
        }
        let mut records = Vec::new();
        tls.seal_dormant(bytes, &mut records, false)?;
        let sent = match io::Write::write(&mut dormant.fd, &records) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            res => res?,
        };
        let held = sent < records.len();
        if held {
            // Sealed, so they must go before any other record.
            let mut bufs = Buffers::take(std::mem::take(&mut tls.partial));
            bufs.outgoing = records;
            bufs.sent = sent;
            tls.held = Some(bufs);
        }
        Ok(Wrote {
            taken: bytes.len(),
            held,
        })
    }

    fn read_dormant(_: &mut DormantTls<IO::Dormant>, _: &mut [u8]) -> Option<io::Result<usize>> {
        // Records to decrypt, which the session's read takes: a sleeping
        // TLS connection's bytes wake it.
        None
    }

    fn close(self) {
        if let Ok((dormant, _)) = self.into_dormant() {
            Self::close_dormant(dormant, &[]);
        }
    }
}

impl<IO> Seam for TlsStream<IO>
where
    IO: Seam,
    IO::Dormant: io::Write,
{
    type Addr = IO::Addr;

    fn peer_addr(&self) -> io::Result<IO::Addr> {
        self.io.peer_addr()
    }

    fn poll_peer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Peer>> {
        // `close_notify` is a record: a read, never a peek.
        crate::transport::poll_read_ahead(self, cx)
    }

    /// TLS's own handshake, over the client its transport names (a PROXY
    /// header under TLS).
    fn connected(&self) -> Connected<IO::Addr> {
        let tls = &*self.rec.tls;
        let client = self.io.connected().client;
        if tls.is_handshaking() {
            return Connected {
                handshake: Handshake::UnderWay,
                client,
                ..Connected::default()
            };
        }
        Connected {
            handshake: Handshake::Settled,
            client,
            alpn: match tls.alpn_protocol() {
                None => Alpn::Unchosen,
                Some(b"h2") => Alpn::H2,
                Some(_) => Alpn::Http1,
            },
            tls_info: match tls.served.as_deref() {
                Some(ServerFacts::Negotiated(info)) => Some(info.clone()),
                _ => None,
            },
        }
    }

    fn into_stream(self) -> io::Result<Stream> {
        let TlsStream { io, rec } = self;
        Ok(Stream::from_tls(TlsStream {
            io: io.into_stream()?,
            rec,
        }))
    }

    fn dormant_from_stream(stream: Stream) -> Result<io::Result<DormantTls<IO::Dormant>>, Stream> {
        let tls = stream.into_tls()?;
        let (inner, tls) = match tls.into_session() {
            Ok(parts) => parts,
            Err(_) => {
                return Ok(Err(io::Error::other(
                    "a TLS stream with data on its way cannot sleep",
                )));
            }
        };
        match IO::dormant_from_stream(inner) {
            Ok(fd) => Ok(fd.map(|fd| DormantTls { fd, tls })),
            Err(inner) => Err(Stream::from_tls(TlsStream::from_parts(inner, tls))),
        }
    }

    fn dormant_into_stream(dormant: DormantTls<IO::Dormant>) -> io::Result<Stream> {
        let inner = IO::dormant_into_stream(dormant.fd)?;
        Ok(Stream::from_tls(TlsStream::from_parts(inner, dormant.tls)))
    }
}

impl<IO> Transport for TlsStream<IO>
where
    IO: Transport,
    <IO::Served as Parkable>::Dormant: io::Write,
{
    type Addr = IO::Addr;

    fn peer_addr(&self) -> io::Result<IO::Addr> {
        self.io.peer_addr()
    }

    type Served = TlsStream<IO::Served>;

    fn serve_in(self, serving: &Serving<'_>) -> io::Result<TlsStream<IO::Served>> {
        let TlsStream { io, mut rec } = self;
        let io = io.serve_in(serving)?;
        rec.tls.serve(serving)?;
        Ok(TlsStream { io, rec })
    }
}

impl Tls {
    /// Encrypts `bytes` (and `close_notify` if `close`) into `records` for
    /// a connection that sleeps: its session has no buffers, and nothing it
    /// was sent is half-read.
    fn seal_dormant(
        &mut self,
        mut bytes: &[u8],
        records: &mut Vec<u8>,
        close: bool,
    ) -> io::Result<()> {
        if self.failed || self.closing {
            return Err(io::Error::other("the TLS session cannot write"));
        }
        match &mut self.session {
            Session::Own(traffic) => {
                while !bytes.is_empty() {
                    let n = traffic.seal(bytes, records)?;
                    bytes = &bytes[n..];
                }
                if close {
                    traffic
                        .seal_alert(1, AlertDescription::CloseNotify, records)
                        .map_err(|fatal| io::Error::other(fatal.error))?;
                }
                Ok(())
            }
            Session::Rustls(conn) | Session::Moving(conn, _) => {
                // rustls is given the bytes it was given last, as it must be.
                let status = conn.process_tls_records(&mut self.partial);
                let Ok(ConnectionState::WriteTraffic(mut traffic)) = status.state else {
                    return Err(io::Error::other("the TLS session cannot write"));
                };
                records.resize(bytes.len() + 256, 0);
                let mut n = 0;
                if !bytes.is_empty() {
                    n = traffic.encrypt(bytes, records).map_err(io::Error::other)?;
                }
                if close {
                    if let Ok(alert) = traffic.queue_close_notify(&mut records[n..]) {
                        n += alert;
                    }
                }
                records.truncate(n);
                Ok(())
            }
            Session::Lost => Err(io::Error::other("the TLS session failed")),
        }
    }
}
