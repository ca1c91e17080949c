//! The session after the handshake, on dormant's record layer: what a TLS
//! connection keeps once rustls has done its part, and the messages TLS
//! 1.3 still exchanges (alerts, key updates). The records themselves,
//! their protection and its limits, are `record.rs`'s.
//!
//! When a TLS 1.3 handshake ends (rustls has sent its NewSessionTickets
//! and read no record of the traffic yet), the session leaves rustls
//! through its kernel-TLS route
//! (`dangerous_into_kernel_connection`): dormant takes the traffic keys
//! and sequence numbers, and derives the next keys when either side
//! updates them from the traffic secrets ([`secrets`](super::secrets)), or
//! with rustls's `KernelConnection` where it cannot. Records are protected
//! by the crypto provider's own `MessageEncrypter` and `MessageDecrypter`,
//! built from those keys exactly as rustls builds them
//! ([`record`](super::record)): dormant frames records and writes no
//! cryptography. The move costs a few microseconds
//! per connection (keys derived and two ciphers built again); moving
//! later, at a connection's first sleep, would spare connections that
//! never sleep, but rustls would by then have read the client's records,
//! and a key update it answered waits, unsent, for its next write (see
//! `TlsStream::move_out_of_rustls`).
//!
//! Write keys are used from sequence number 0 only: a provider may insist
//! (aws-lc's AES-GCM seal takes the first nonce it sees as sequence 0 and
//! refuses nonces that do not grow from it). The keys rustls hands over
//! have protected its NewSessionTickets at least, so the first record
//! dormant sends is a `KeyUpdate`, under those keys at their first use, and
//! the next keys start at 0. TLS 1.2, which has no key update, stays on
//! rustls for the same reason (counted in `Stats::tls_kept_by_rustls`).
//!
//! What TLS 1.3 still asks after the handshake is done here as rustls does
//! it (`common_state.rs`, `conn.rs`, `server/tls13.rs` of rustls 0.23),
//! beside the record rules of [`record`](super::record):
//!
//! - alerts: `close_notify` ends the stream; a fatal alert closes; a
//!   warning other than `user_canceled` is `decode_error`, and four
//!   `user_canceled` at most are ignored;
//! - handshake messages: `KeyUpdate` alone, at the end of its record,
//!   answered with our own when the client asks (32 in a row at most
//!   without data between them); anything else (a `ClientHello`:
//!   renegotiation) is `unexpected_message`;
//! - `change_cipher_spec` after the handshake is `unexpected_message`;
//!   empty records are data, 32 in a row at most;
//! - a handshake message split across records admits no other record
//!   between its pieces;
//! - the write keys' limit ([`Writing::near_limit`]): a key update before
//!   they reach it.
//!
//! Each fatal error queues its alert (encrypted, as every record after the
//! handshake) and leaves the session failed: nothing more is read or
//! written through it.

use std::fmt;
use std::io;

use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::{
    AlertDescription, ConnectionTrafficSecrets, ContentType, SupportedCipherSuite, Tls13CipherSuite,
};

use super::record::{Fatal, Header, MAX_PLAINTEXT, Reading, Writing, check_header};
use super::secrets::{self, TrafficSecrets};

/// Empty records accepted in a row (rustls's and BoringSSL's limit).
const EMPTY_RECORDS_IN_A_ROW: u8 = 32;
/// Key updates accepted in a row without data between them.
const KEY_UPDATES_IN_A_ROW: u8 = 32;
/// `user_canceled` warnings accepted over a connection's life.
const WARNINGS: u8 = 4;

const HANDSHAKE_KEY_UPDATE: u8 = 24;
/// The largest handshake message rustls joins.
const MAX_HANDSHAKE_MESSAGE: u32 = 0xffff;

/// A session after its handshake, on dormant's record layer.
pub(super) struct Traffic {
    rx: Reading,
    tx: Writing,
    /// The write keys are rustls's and past sequence number 0 (its
    /// NewSessionTickets used them): the first record sent is a
    /// `KeyUpdate` under them, and the next keys start at 0.
    tx_handed_over: bool,
    suite: &'static Tls13CipherSuite,
    /// What derives the next keys.
    next_keys: NextKeys,
    alpn: ProtocolName,
    /// A handshake message whose record ended before it did.
    joining: Joining,
    empty_in_a_row: u8,
    key_updates_in_a_row: u8,
    warnings: u8,
}

impl fmt::Debug for Traffic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Traffic")
            .field("suite", &self.suite.common.suite)
            .field("rx_seq", &self.rx.seq())
            .field("tx_seq", &self.tx.seq())
            .finish_non_exhaustive()
    }
}

/// The name of the protocol ALPN chose (RFC 7301's `ProtocolName`),
/// kept without an allocation for the usual two. (The driver's view of
/// it is `transport::Alpn`.)
enum ProtocolName {
    None,
    H2,
    Http11,
    Other(Box<[u8]>),
}

/// A handshake message that continues in the next record: rustls joins
/// the pieces, and only then judges the message; dormant keeps no more
/// than a `KeyUpdate`'s header, since every other message is refused once
/// whole.
#[derive(Clone, Copy)]
enum Joining {
    None,
    /// The first bytes of a message's header (1 to 3), or a `KeyUpdate`'s
    /// whole header (4), its body still to come.
    Start {
        bytes: [u8; 4],
        len: u8,
    },
    /// A message refused with `alert` once its last `left` bytes come.
    Refused {
        left: u32,
        alert: AlertDescription,
    },
}

/// What reading the records at hand gave.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Opened {
    /// Records were read; the last one may be incomplete.
    Records,
    /// The peer sent `close_notify`: what follows it is not read.
    CloseNotify,
}

impl Traffic {
    /// Whether the session's keys can move to dormant's record layer: the
    /// handshake negotiated TLS 1.3, with a suite whose provider hands its
    /// keys out in a form dormant knows. Asked before the session is given
    /// up, which cannot be undone.
    pub(super) fn can_take(conn: &UnbufferedServerConnection) -> bool {
        let Some(SupportedCipherSuite::Tls13(suite)) = conn.negotiated_cipher_suite() else {
            return false;
        };
        suite
            .aead_alg
            .extract_keys(AeadKey::from([0; 32]), Iv::new([0; 12]))
            .is_ok_and(|keys| key_iv(keys).is_some())
    }

    /// Takes the session out of rustls, whose handshake is complete and
    /// whose output is all taken ([`can_take`](Self::can_take) said yes).
    pub(super) fn take(
        conn: UnbufferedServerConnection,
        secrets: Option<Box<TrafficSecrets>>,
    ) -> Result<Traffic, rustls::Error> {
        let Some(SupportedCipherSuite::Tls13(suite)) = conn.negotiated_cipher_suite() else {
            return Err(unsupported());
        };
        let alpn = match conn.alpn_protocol() {
            None => ProtocolName::None,
            Some(b"h2") => ProtocolName::H2,
            Some(b"http/1.1") => ProtocolName::Http11,
            Some(other) => ProtocolName::Other(other.into()),
        };
        let (extracted, kernel) = conn.dangerous_into_kernel_connection()?;
        let (rx_seq, rx) = extracted.rx;
        let (tx_seq, tx) = extracted.tx;
        let rx = key_iv(rx).ok_or_else(unsupported)?;
        let tx = key_iv(tx).ok_or_else(unsupported)?;
        // The recorded secrets, if they are this session's: the client's
        // derives the read IV rustls handed over (the two are recorded
        // together, in the same call).
        if let Some(secrets) = &secrets {
            // Write keys at sequence number 0 that are not the first ones:
            // rustls answered a client's key update whose record came with
            // the handshake's last (servers that send no tickets), and its
            // answer waits for a write that will not come.
            if tx_seq == 0 && secrets::iv(suite, &secrets.server) != tx.1.as_ref() {
                return Err(rustls::Error::General(
                    "a key update answered by rustls is pending".into(),
                ));
            }
        }
        let next_keys = match secrets {
            Some(secrets)
                if suite.aead_alg.key_len() == 32
                    && secrets::iv(suite, &secrets.client) == rx.1.as_ref() =>
            {
                NextKeys::Secrets(secrets)
            }
            _ => NextKeys::Kernel(Box::new(kernel)),
        };
        let traffic = Traffic {
            rx: Reading::new(suite, rx, rx_seq),
            tx: Writing::new(suite, tx, tx_seq),
            tx_handed_over: tx_seq != 0,
            suite,
            next_keys,
            alpn,
            joining: Joining::None,
            empty_in_a_row: 0,
            key_updates_in_a_row: 0,
            warnings: 0,
        };
        Ok(traffic)
    }

    /// Returns the protocol agreed on with ALPN.
    pub(super) fn alpn_protocol(&self) -> Option<&[u8]> {
        match &self.alpn {
            ProtocolName::None => None,
            ProtocolName::H2 => Some(b"h2"),
            ProtocolName::Http11 => Some(b"http/1.1"),
            ProtocolName::Other(protocol) => Some(protocol),
        }
    }

    /// Reads the whole records at the start of `incoming` (decrypting them
    /// in place): their data goes to `plain`, records the session answers
    /// with (a key update, a refusal) to `outgoing`. Returns how many bytes
    /// were read, and what they gave.
    pub(super) fn open(
        &mut self,
        incoming: &mut [u8],
        plain: &mut Vec<u8>,
        outgoing: &mut Vec<u8>,
    ) -> (usize, Result<Opened, Fatal>) {
        let mut read = 0;
        loop {
            let header = match check_header(&incoming[read..]) {
                Ok(Some(header)) => header,
                Ok(None) => return (read, Ok(Opened::Records)),
                Err(fatal) => return (read, Err(fatal)),
            };
            let end = read + 5 + header.len;
            let record = &mut incoming[read..end];
            read = end;
            match self.open_record(header, record, plain, outgoing) {
                Ok(None) => {}
                Ok(Some(opened)) => return (read, Ok(opened)),
                Err(fatal) => return (read, Err(fatal)),
            }
        }
    }

    /// Reads one whole record.
    fn open_record(
        &mut self,
        header: Header,
        record: &mut [u8],
        plain: &mut Vec<u8>,
        outgoing: &mut Vec<u8>,
    ) -> Result<Option<Opened>, Fatal> {
        if header.typ == ContentType::ChangeCipherSpec {
            // Never encrypted.
            return Err(change_cipher_spec(&record[5..]));
        }
        let message = self.rx.open(self.suite, header, record)?;
        let payload = message.payload;
        if !matches!(self.joining, Joining::None) && message.typ != ContentType::Handshake {
            return Err(Fatal {
                alert: None,
                error: rustls::PeerMisbehaved::MessageInterleavedWithHandshakeMessage.into(),
            });
        }
        if payload.is_empty() {
            if self.empty_in_a_row == EMPTY_RECORDS_IN_A_ROW {
                return Err(Fatal {
                    alert: None,
                    error: rustls::PeerMisbehaved::TooManyEmptyFragments.into(),
                });
            }
            self.empty_in_a_row += 1;
        } else {
            self.empty_in_a_row = 0;
        }
        match message.typ {
            ContentType::ApplicationData => {
                self.key_updates_in_a_row = 0;
                plain.extend_from_slice(payload);
                Ok(None)
            }
            ContentType::Alert => self.alert_received(payload),
            ContentType::Handshake => {
                self.handshake_received(payload, outgoing)?;
                Ok(None)
            }
            ContentType::ChangeCipherSpec => Err(change_cipher_spec(payload)),
            _ => Err(Fatal::decode("a record of an unknown type")),
        }
    }

    /// An alert arrived.
    fn alert_received(&mut self, payload: &[u8]) -> Result<Option<Opened>, Fatal> {
        let &[level, description] = payload else {
            return Err(Fatal::decode("an alert of the wrong length"));
        };
        let description = AlertDescription::from(description);
        match level {
            1 | 2 if description == AlertDescription::CloseNotify => Ok(Some(Opened::CloseNotify)),
            2 => Err(Fatal {
                alert: None,
                error: rustls::Error::AlertReceived(description),
            }),
            1 => {
                if self.warnings == WARNINGS {
                    return Err(Fatal {
                        alert: None,
                        error: rustls::PeerMisbehaved::TooManyWarningAlertsReceived.into(),
                    });
                }
                self.warnings += 1;
                if description != AlertDescription::UserCanceled {
                    return Err(Fatal::alert(
                        AlertDescription::DecodeError,
                        rustls::Error::AlertReceived(description),
                    ));
                }
                Ok(None)
            }
            _ => Err(Fatal::alert(
                AlertDescription::IllegalParameter,
                rustls::Error::AlertReceived(description),
            )),
        }
    }

    /// Handshake bytes arrived: a whole record's payload. The one message
    /// a client may send after the handshake is `KeyUpdate` (type 24,
    /// length 1, whether it asks for ours), and it ends its record.
    fn handshake_received(
        &mut self,
        mut payload: &[u8],
        outgoing: &mut Vec<u8>,
    ) -> Result<(), Fatal> {
        while !payload.is_empty() {
            let (mut bytes, held) = match self.joining {
                Joining::Refused { left, alert } => {
                    let took = payload.len().min(left as usize);
                    payload = &payload[took..];
                    let left = left - took as u32;
                    if left == 0 {
                        return Err(Fatal::alert(
                            alert,
                            rustls::Error::General(
                                "TLS peer sent a handshake message after the handshake".into(),
                            ),
                        ));
                    }
                    self.joining = Joining::Refused { left, alert };
                    continue;
                }
                Joining::Start { bytes, len } => (bytes, usize::from(len)),
                Joining::None => ([0; 4], 0),
            };
            let took = payload.len().min(4 - held);
            bytes[held..held + took].copy_from_slice(&payload[..took]);
            payload = &payload[took..];
            if held + took < 4 {
                self.joining = Joining::Start {
                    bytes,
                    len: (held + took) as u8,
                };
                return Ok(());
            }
            let len = u32::from_be_bytes([0, bytes[1], bytes[2], bytes[3]]);
            if len > MAX_HANDSHAKE_MESSAGE {
                return Err(Fatal {
                    alert: None,
                    error: rustls::InvalidMessage::HandshakePayloadTooLarge.into(),
                });
            }
            self.joining = match (bytes[0], len) {
                (HANDSHAKE_KEY_UPDATE, 1) => {
                    let Some((&request, rest)) = payload.split_first() else {
                        self.joining = Joining::Start { bytes, len: 4 };
                        return Ok(());
                    };
                    self.joining = Joining::None;
                    if !rest.is_empty() {
                        // The next keys start with the next record.
                        return Err(Fatal::unexpected(
                            "a KeyUpdate before the end of its record",
                        ));
                    }
                    return self.key_update_received(request, outgoing);
                }
                // A key update that does not parse.
                (HANDSHAKE_KEY_UPDATE, _) => Joining::Refused {
                    left: len,
                    alert: AlertDescription::DecodeError,
                },
                // Anything else has no place after the handshake.
                _ => Joining::Refused {
                    left: len,
                    alert: AlertDescription::UnexpectedMessage,
                },
            };
            if len == 0 {
                let Joining::Refused { alert, .. } = self.joining else {
                    unreachable!("set just above");
                };
                return Err(Fatal::alert(
                    alert,
                    rustls::Error::General(
                        "TLS peer sent a handshake message after the handshake".into(),
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The client updated its keys, asking for ours too if `request` is 1.
    fn key_update_received(&mut self, request: u8, outgoing: &mut Vec<u8>) -> Result<(), Fatal> {
        if self.key_updates_in_a_row == KEY_UPDATES_IN_A_ROW {
            return Err(Fatal {
                alert: None,
                error: rustls::PeerMisbehaved::TooManyKeyUpdateRequests.into(),
            });
        }
        self.key_updates_in_a_row += 1;
        if request > 1 {
            return Err(Fatal::alert(
                AlertDescription::IllegalParameter,
                rustls::Error::General("TLS peer sent an invalid KeyUpdate".into()),
            ));
        }
        if request == 1 {
            self.update_tx_keys(outgoing)?;
        }
        let keys = self
            .next_keys
            .next(self.suite, KeySide::Client)
            .map_err(internal)?;
        // Each key starts at sequence number 0.
        self.rx = Reading::new(self.suite, keys, 0);
        Ok(())
    }

    /// Sends a `KeyUpdate` (not asking the client for one) under the
    /// current write keys, and moves to the next ones.
    fn update_tx_keys(&mut self, outgoing: &mut Vec<u8>) -> Result<(), Fatal> {
        self.tx_handed_over = false;
        let keys = self
            .next_keys
            .next(self.suite, KeySide::Server)
            .map_err(internal)?;
        self.seal_record(
            ContentType::Handshake,
            &[HANDSHAKE_KEY_UPDATE, 0, 0, 1, 0],
            outgoing,
        )
        .map_err(internal)?;
        self.tx.rekey(self.suite, keys);
        Ok(())
    }

    /// Sets the read cipher aside while the connection sleeps, where its
    /// key can rebuild it (see [`Reading`]).
    pub(super) fn stow(&mut self) {
        self.rx.stow();
    }

    /// Encrypts at most a record of `data` into `outgoing`, updating the
    /// keys first if this record would reach their limit; returns how much
    /// of `data` it took.
    pub(super) fn seal(&mut self, data: &[u8], outgoing: &mut Vec<u8>) -> io::Result<usize> {
        let chunk = &data[..data.len().min(MAX_PLAINTEXT)];
        if self.tx.near_limit() {
            self.update_tx_keys(outgoing)
                .map_err(|fatal| io::Error::new(io::ErrorKind::InvalidData, fatal.error))?;
        }
        self.seal_record(ContentType::ApplicationData, chunk, outgoing)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
        Ok(chunk.len())
    }

    /// Encrypts an alert into `outgoing` (level 1: warning, 2: fatal).
    pub(super) fn seal_alert(
        &mut self,
        level: u8,
        description: AlertDescription,
        outgoing: &mut Vec<u8>,
    ) -> Result<(), Fatal> {
        self.seal_record(ContentType::Alert, &[level, description.into()], outgoing)
            .map_err(internal)
    }

    /// Encrypts one record of `typ` holding `payload` into `outgoing`.
    fn seal_record(
        &mut self,
        typ: ContentType,
        payload: &[u8],
        outgoing: &mut Vec<u8>,
    ) -> Result<(), rustls::Error> {
        if self.tx_handed_over {
            self.update_tx_keys(outgoing).map_err(|fatal| fatal.error)?;
        }
        self.tx.seal(typ, payload, outgoing)
    }
}

/// A `change_cipher_spec` after the handshake: refused once parsed.
fn change_cipher_spec(payload: &[u8]) -> Fatal {
    match payload {
        [1] => Fatal::unexpected("change_cipher_spec after the handshake"),
        _ => Fatal::decode("a malformed change_cipher_spec"),
    }
}

fn internal(error: rustls::Error) -> Fatal {
    Fatal::alert(AlertDescription::InternalError, error)
}

/// A suite's key and IV, from the forms rustls hands them out in.
fn key_iv(keys: ConnectionTrafficSecrets) -> Option<(AeadKey, Iv)> {
    match keys {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv }
        | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
        | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => Some((key, iv)),
        _ => None,
    }
}

fn unsupported() -> rustls::Error {
    rustls::Error::General("the cipher suite's keys cannot move out of rustls".into())
}

/// What derives a session's next keys, for key updates.
enum NextKeys {
    /// Its traffic secrets: the suite's HKDF derives the next ones (see
    /// [`secrets`](super::secrets)).
    Secrets(Box<TrafficSecrets>),
    /// rustls's `KernelConnection`: where the secrets were not recorded,
    /// or the suite's keys are ones rustls does not let dormant build.
    Kernel(Box<KernelConnection<ServerConnectionData>>),
}

/// Whose keys: the client's (what the session reads) or the server's
/// (what it writes).
#[derive(Clone, Copy)]
enum KeySide {
    Client,
    Server,
}

impl NextKeys {
    /// `side`'s next key and IV.
    fn next(
        &mut self,
        suite: &Tls13CipherSuite,
        side: KeySide,
    ) -> Result<(AeadKey, Iv), rustls::Error> {
        match self {
            NextKeys::Secrets(secrets) => {
                let secret = match side {
                    KeySide::Client => &mut secrets.client,
                    KeySide::Server => &mut secrets.server,
                };
                *secret = secrets::next(suite, secret);
                secrets::keys(suite, secret).ok_or_else(unsupported)
            }
            NextKeys::Kernel(kernel) => {
                let (_, keys) = match side {
                    KeySide::Client => kernel.update_rx_secret()?,
                    KeySide::Server => kernel.update_tx_secret()?,
                };
                key_iv(keys).ok_or_else(unsupported)
            }
        }
    }
}
