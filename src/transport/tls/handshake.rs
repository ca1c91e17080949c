//! What a served session keeps for the server beyond rustls's state: the
//! configuration to start over with, where its handshake's end is
//! counted, and the notes for [`TlsInfo`].

use std::io;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::server::UnbufferedServerConnection;

use super::super::tls_info::TlsInfo;
use super::super::{Handshakes, Serving};
use super::secrets::TrafficSecrets;
use super::traffic::Traffic;
use super::{Session, Tls, tls_error};

/// What a session keeps for the server.
pub(super) enum Served {
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
        if let (Some(Served::Accepted { http1 }), false) =
            (accepted.as_deref(), serving.config.http2)
        {
            // No byte was processed yet: the session starts over.
            let conn = UnbufferedServerConnection::new(http1.clone()).map_err(tls_error)?;
            self.session = Session::Rustls(Box::new(conn));
        }
        let handshaking = Served::Handshaking {
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
        let Served::Handshaking {
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
                *served = Served::Negotiated(info);
                self.served = Some(served);
            }
        }
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        if let Some(Served::Handshaking { handshakes, .. }) = self.served.as_deref() {
            handshakes.tls_failed();
        }
    }
}
