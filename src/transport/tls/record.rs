//! Record protection and its limits, after the handshake (what rustls keeps
//! alone in its `record_layer.rs`): a record's header, checked before its
//! bytes are waited for; each direction's cipher and sequence number; the
//! limits on those numbers; and the read key set aside while a connection
//! sleeps. What the records carry (data, alerts, handshake messages) is
//! `traffic.rs`'s.
//!
//! Records are sealed and opened by the crypto provider's own
//! `MessageEncrypter` and `MessageDecrypter`, built from the traffic keys
//! exactly as rustls builds them (`Tls13AeadAlgorithm::encrypter`,
//! `decrypter`): the AEAD and the nonces (the IV xor the sequence number)
//! are the provider's. The rules, as rustls 0.23 keeps them:
//!
//! - a record's header is checked (content type, version, length) before
//!   its bytes are waited for: a malformed header (a length beyond the
//!   protocol's too) is `decode_error`;
//! - a record that does not decrypt is `bad_record_mac`; a plaintext over
//!   16 KiB is `record_overflow`;
//! - read keys are not used past rustls's soft limit of sequence numbers
//!   (the connection closes), write keys never past its hard limit;
//! - the confidentiality limit: before the write keys reach their suite's
//!   limit (or the soft limit), they are updated ([`Writing::near_limit`]).

use rustls::crypto::cipher::{
    AeadKey, InboundOpaqueMessage, InboundPlainMessage, Iv, MessageDecrypter, MessageEncrypter,
    OutboundChunks, OutboundPlainMessage,
};
use rustls::{AlertDescription, ContentType, ProtocolVersion, Tls13CipherSuite};

/// The most plaintext a record carries.
pub(super) const MAX_PLAINTEXT: usize = 16 * 1024;

/// The most a record's payload may be on the wire: 16 KiB of plaintext and
/// TLS 1.2's largest expansion (rustls's `MAX_PAYLOAD`, exclusive).
const MAX_PAYLOAD: usize = 16 * 1024 + 2048;

/// Sequence numbers past which keys are not used: rustls's soft limit
/// (close, or update the keys) and hard limit (refuse).
const SEQ_SOFT_LIMIT: u64 = 0xffff_ffff_ffff_0000;
const SEQ_HARD_LIMIT: u64 = 0xffff_ffff_ffff_fffe;

/// A fatal error: the alert to send, if any, and the error to report.
pub(super) struct Fatal {
    pub(super) alert: Option<AlertDescription>,
    pub(super) error: rustls::Error,
}

impl Fatal {
    pub(super) fn alert(alert: AlertDescription, error: impl Into<rustls::Error>) -> Fatal {
        Fatal {
            alert: Some(alert),
            error: error.into(),
        }
    }

    pub(super) fn unexpected(what: &str) -> Fatal {
        Fatal::alert(
            AlertDescription::UnexpectedMessage,
            rustls::Error::General(format!("TLS peer sent {what}")),
        )
    }

    pub(super) fn decode(what: &str) -> Fatal {
        Fatal::alert(
            AlertDescription::DecodeError,
            rustls::Error::General(format!("TLS peer sent {what}")),
        )
    }
}

/// A record's header.
#[derive(Clone, Copy)]
pub(super) struct Header {
    pub(super) typ: ContentType,
    version: ProtocolVersion,
    pub(super) len: usize,
}

/// The header of the record at the start of `bytes`, if the whole record
/// is there (`None` if not yet); checked as rustls checks it, before the
/// rest of the record is waited for.
pub(super) fn check_header(bytes: &[u8]) -> Result<Option<Header>, Fatal> {
    let &[typ, major, minor, high, low, ..] = bytes else {
        return Ok(None);
    };
    let typ = ContentType::from(typ);
    if let ContentType::Unknown(_) = typ {
        return Err(Fatal::decode("a record of an unknown content type"));
    }
    if major != 3 {
        return Err(Fatal::decode("a record of an unknown version"));
    }
    let len = usize::from(u16::from_be_bytes([high, low]));
    if typ != ContentType::ApplicationData && len == 0 {
        return Err(Fatal::decode("an empty record that may not be empty"));
    }
    if len >= MAX_PAYLOAD {
        return Err(Fatal::decode("a record longer than the protocol allows"));
    }
    if bytes.len() < 5 + len {
        return Ok(None);
    }
    Ok(Some(Header {
        typ,
        version: ProtocolVersion::from(u16::from_be_bytes([major, minor])),
        len,
    }))
}

/// The read side's record protection: the provider's decrypter (its
/// expanded key, which aws-lc keeps in C), and a copy of its key and IV
/// where rustls 0.23 lets one be made: 32-byte keys (AES-256-GCM,
/// ChaCha20-Poly1305), since its `AeadKey` has no public constructor for
/// AES-128's 16 bytes. With the copy, a sleeping connection keeps the key
/// alone (52 bytes, zeroed when dropped), and the decrypter is rebuilt
/// when the connection wakes.
///
/// The write side keeps its encrypter ([`Writing`]): one rebuilt past
/// sequence 0 may be refused (aws-lc's AES-GCM seal counts nonces from its
/// first), and restarting the keys at 0 would take a `KeyUpdate` on every
/// wake.
pub(super) struct Reading {
    cipher: Option<Box<dyn MessageDecrypter>>,
    spare: Option<(AeadKey, Iv)>,
    seq: u64,
}

impl Reading {
    /// Reading with the key and IV `keys` of `suite` from sequence number
    /// `seq`.
    pub(super) fn new(suite: &Tls13CipherSuite, (key, iv): (AeadKey, Iv), seq: u64) -> Reading {
        let spare = copy_key(&key).map(|copy| (copy, Iv::copy(iv.as_ref())));
        Reading {
            cipher: Some(suite.aead_alg.decrypter(key, iv)),
            spare,
            seq,
        }
    }

    /// The sequence number of the next record.
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// Drops the decrypter if the spare key can rebuild it.
    pub(super) fn stow(&mut self) {
        if self.spare.is_some() {
            self.cipher = None;
        }
    }

    /// Decrypts in place `record`, a whole record (its 5 header bytes
    /// first) whose checked header is `header`; returns its plaintext.
    pub(super) fn open<'a>(
        &mut self,
        suite: &Tls13CipherSuite,
        header: Header,
        record: &'a mut [u8],
    ) -> Result<InboundPlainMessage<'a>, Fatal> {
        if self.seq >= SEQ_SOFT_LIMIT {
            // rustls closes before its read keys run out.
            return Err(Fatal {
                alert: None,
                error: rustls::Error::General("TLS read sequence numbers exhausted".into()),
            });
        }
        let message = InboundOpaqueMessage::new(header.typ, header.version, &mut record[5..]);
        let seq = self.seq;
        let message = (self.cipher(suite))
            .decrypt(message, seq)
            .map_err(|error| match error {
                rustls::Error::DecryptError => Fatal::alert(AlertDescription::BadRecordMac, error),
                rustls::Error::PeerSentOversizedRecord => {
                    Fatal::alert(AlertDescription::RecordOverflow, error)
                }
                rustls::Error::PeerMisbehaved(
                    rustls::PeerMisbehaved::IllegalMiddleboxChangeCipherSpec,
                ) => Fatal::alert(AlertDescription::UnexpectedMessage, error),
                rustls::Error::PeerMisbehaved(_) => Fatal { alert: None, error },
                error => Fatal::alert(AlertDescription::DecodeError, error),
            })?;
        self.seq += 1;
        Ok(message)
    }

    /// The decrypter, rebuilt from the spare key if it was stowed.
    fn cipher(&mut self, suite: &Tls13CipherSuite) -> &mut dyn MessageDecrypter {
        let spare = &self.spare;
        &mut **self.cipher.get_or_insert_with(|| {
            let (key, iv) = spare
                .as_ref()
                .expect("a decrypter is stowed only with its key");
            let key = copy_key(key).expect("a spare key is one that copies");
            suite.aead_alg.decrypter(key, Iv::copy(iv.as_ref()))
        })
    }
}

/// A copy of `key`, where rustls lets one be made (32-byte keys).
fn copy_key(key: &AeadKey) -> Option<AeadKey> {
    <[u8; 32]>::try_from(key.as_ref()).ok().map(AeadKey::from)
}

/// The write side's record protection: the provider's encrypter, its
/// sequence number, and the number the keys must not reach.
pub(super) struct Writing {
    cipher: Box<dyn MessageEncrypter>,
    seq: u64,
    /// The suite's confidentiality limit, or rustls's soft limit if lower.
    limit: u64,
}

impl Writing {
    /// Writing with the key and IV `keys` of `suite` from sequence number
    /// `seq`.
    pub(super) fn new(suite: &Tls13CipherSuite, (key, iv): (AeadKey, Iv), seq: u64) -> Writing {
        Writing {
            cipher: suite.aead_alg.encrypter(key, iv),
            seq,
            limit: SEQ_SOFT_LIMIT.min(suite.common.confidentiality_limit),
        }
    }

    /// The sequence number of the next record.
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether the next record would reach the keys' limit: they are to be
    /// updated first.
    pub(super) fn near_limit(&self) -> bool {
        self.seq + 1 >= self.limit
    }

    /// Moves to the next keys of `suite`, from sequence number 0.
    pub(super) fn rekey(&mut self, suite: &Tls13CipherSuite, (key, iv): (AeadKey, Iv)) {
        self.cipher = suite.aead_alg.encrypter(key, iv);
        self.seq = 0;
    }

    /// Encrypts one record of `typ` holding `payload` into `outgoing`.
    pub(super) fn seal(
        &mut self,
        typ: ContentType,
        payload: &[u8],
        outgoing: &mut Vec<u8>,
    ) -> Result<(), rustls::Error> {
        if self.seq >= SEQ_HARD_LIMIT {
            return Err(rustls::Error::EncryptError);
        }
        let message = OutboundPlainMessage {
            typ,
            version: ProtocolVersion::TLSv1_2,
            payload: OutboundChunks::Single(payload),
        };
        let record = self.cipher.encrypt(message, self.seq)?.encode();
        self.seq += 1;
        if outgoing.is_empty() {
            *outgoing = record;
        } else {
            outgoing.extend_from_slice(&record);
        }
        Ok(())
    }
}
