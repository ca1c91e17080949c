//! The session: what a TLS connection keeps while it waits, whoever
//! protects its records (rustls through the handshake, dormant's record
//! layer after it), and what a served session keeps for the server beyond
//! that: the configuration to start over with, where its handshake's end
//! is counted, the notes for [`TlsInfo`], and the traffic secrets its
//! handshake derived.

use std::fmt;
use std::io;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::UnbufferedServerConnection;

use super::super::tls_info::TlsInfo;
use super::super::{Handshakes, Serving};
use super::buffers::Buffers;
use super::secrets::TrafficSecrets;
use super::traffic::Traffic;

/// The session: what a TLS connection keeps while it waits.
pub(crate) struct Tls {
    pub(super) session: Session,
    /// The bytes read and not yet discarded when the connection parked: the
    /// start of a record, and the pieces of a handshake message that
    /// rustls joins in place.
    pub(super) partial: Vec<u8>,
    /// Whole records may wait unprocessed in the bytes read: a read
    /// stopped at the plaintext of the one before them, or the handshake's
    /// end stopped processing. Cleared when processing asks for more bytes:
    /// what is left then is no progress, whatever it looks like (the start
    /// of a record, or the pieces of a handshake message rustls joins in
    /// place, records that were already processed).
    pub(super) records_waiting: bool,
    /// Records sealed for a connection that sleeps ([`Parkable::write_dormant`](crate::lot::Parkable::write_dormant))
    /// that its socket did not take: the buffers its stream starts with
    /// when it wakes, which write them first. `None` while it is served.
    pub(super) held: Option<Box<Buffers>>,
    /// The peer sent `close_notify`, or closed the socket: reads return
    /// the end of the stream.
    pub(super) eof: bool,
    /// `close_notify` was queued.
    pub(super) closing: bool,
    /// The session failed (a fatal alert was queued): nothing more is read
    /// or written through it.
    pub(super) failed: bool,
    /// What the session keeps for the server beyond rustls's state:
    /// `Some` from accept until its handshake completes, and after that
    /// only when the server reports [`TlsInfo`] to handlers.
    pub(super) served: Option<Box<ServerFacts>>,
}

/// Who protects the records.
pub(super) enum Session {
    /// rustls: through the handshake, and for the life of a session whose
    /// keys its crypto provider does not hand out.
    Rustls(Box<UnbufferedServerConnection>),
    /// rustls, its handshake done and its keys movable: the session moves
    /// to dormant's record layer at once, where the handshake's processing
    /// stops (`Step::HandshakeDone`); with the traffic secrets its
    /// handshake derived, if they were recorded.
    Moving(Box<UnbufferedServerConnection>, Option<Box<TrafficSecrets>>),
    /// dormant's record layer (see [`traffic`](super::traffic)).
    Own(Traffic),
    /// None: rustls refused to hand out a session it had said it would
    /// (not expected); the session is failed.
    Lost,
}

impl Session {
    /// Whether rustls protects the records.
    pub(super) fn is_rustls(&self) -> bool {
        matches!(self, Session::Rustls(_) | Session::Moving(..))
    }

    pub(super) fn rustls(&mut self) -> Option<&mut UnbufferedServerConnection> {
        match self {
            Session::Rustls(conn) | Session::Moving(conn, _) => Some(conn),
            Session::Own(_) | Session::Lost => None,
        }
    }
}

impl Tls {
    pub(super) fn is_handshaking(&self) -> bool {
        match &self.session {
            Session::Rustls(conn) | Session::Moving(conn, _) => conn.is_handshaking(),
            Session::Own(_) | Session::Lost => false,
        }
    }

    /// Whether the handshake completed (its end not noted yet) and rustls
    /// has nothing more to send: where processing stops, before rustls
    /// reads on (see `TlsStream::move_out_of_rustls`). rustls hands out
    /// what it has to send (its NewSessionTickets) before it reads the next
    /// record.
    pub(super) fn handshake_just_done(&mut self) -> bool {
        let noted = !matches!(
            self.served.as_deref(),
            Some(ServerFacts::Handshaking { .. })
        );
        match &self.session {
            Session::Rustls(conn) if !noted => !conn.is_handshaking() && !conn.wants_write(),
            _ => false,
        }
    }

    pub(super) fn alpn_protocol(&self) -> Option<&[u8]> {
        match &self.session {
            Session::Rustls(conn) | Session::Moving(conn, _) => conn.alpn_protocol(),
            Session::Own(traffic) => traffic.alpn_protocol(),
            Session::Lost => None,
        }
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("partial", &self.partial.len())
            .field("eof", &self.eof)
            .finish_non_exhaustive()
    }
}

pub(super) fn tls_error(error: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// What a session keeps for the server.
pub(super) enum ServerFacts {
    /// Accepted, not served yet: the configuration that offers HTTP/1.1
    /// alone, to start over with if the server's HTTP/2 is off.
    Accepted { http1: Arc<ServerConfig> },
    /// Served, its handshake under way.
    Handshaking {
        /// Where the handshake's end is counted.
        handshakes: Arc<dyn Handshakes>,
        notes: Notes,
        /// The traffic secrets the handshake derived, once it did (TLS
        /// 1.3).
        secrets: Option<Box<TrafficSecrets>>,
    },
    /// The handshake is complete, and the server reports what it
    /// negotiated.
    Negotiated(TlsInfo),
}

/// What a handshake under way notes for [`TlsInfo`].
pub(super) enum Notes {
    /// Nothing: the server does not report it.
    Nothing,
    /// The server name the client asked for, once its ClientHello is
    /// processed.
    ServerName(Option<Box<str>>),
}

impl Tls {
    /// Starts serving the session with what the server asks of it: the
    /// HTTP/1.1-only configuration when its HTTP/2 is off, the counting
    /// of the handshake's end, and the notes for [`TlsInfo`].
    pub(super) fn serve(&mut self, serving: &Serving<'_>) -> io::Result<()> {
        let accepted = self.served.take();
        if !self.is_handshaking() {
            return Ok(());
        }
        if let (Some(ServerFacts::Accepted { http1 }), false) =
            (accepted.as_deref(), serving.config.http2)
        {
            // No byte was processed yet: the session starts over.
            let conn = UnbufferedServerConnection::new(http1.clone()).map_err(tls_error)?;
            self.session = Session::Rustls(Box::new(conn));
        }
        let handshaking = ServerFacts::Handshaking {
            handshakes: serving.handshakes.clone(),
            secrets: None,
            notes: if serving.config.tls_info {
                Notes::ServerName(None)
            } else {
                Notes::Nothing
            },
        };
        self.served = Some(match accepted {
            Some(mut served) => {
                *served = handshaking;
                served
            }
            None => Box::new(handshaking),
        });
        Ok(())
    }

    /// The handshake of a served session completed: counts it, keeps what
    /// it negotiated if the server reports that, and readies the session
    /// to leave rustls if its keys can (counting it if they cannot).
    pub(super) fn handshake_done(&mut self) {
        let Some(mut served) = self.served.take() else {
            return;
        };
        let ServerFacts::Handshaking {
            handshakes,
            notes,
            secrets,
        } = &mut *served
        else {
            self.served = Some(served);
            return;
        };
        handshakes.tls_completed();
        let movable = match &self.session {
            Session::Rustls(conn) => Traffic::can_take(conn),
            _ => false,
        };
        if !movable {
            handshakes.tls_kept_by_rustls();
        }
        let secrets = secrets.take();
        if movable {
            if let Session::Rustls(conn) = std::mem::replace(&mut self.session, Session::Lost) {
                self.session = Session::Moving(conn, secrets);
            }
        }
        if let (Notes::ServerName(name), Some(conn)) = (notes, self.session.rustls()) {
            if let Some(info) = TlsInfo::new(conn, name.take()) {
                *served = ServerFacts::Negotiated(info);
                self.served = Some(served);
            }
        }
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        if let Some(ServerFacts::Handshaking { handshakes, .. }) = self.served.as_deref() {
            handshakes.tls_failed();
        }
    }
}
