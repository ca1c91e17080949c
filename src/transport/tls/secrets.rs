//! A TLS 1.3 session's traffic secrets, for the key updates of a session
//! that left rustls, and how they are learnt.
//!
//! The keys a session's records use derive from its two traffic secrets,
//! and so does each key update (RFC 8446, 7.2 and 7.3):
//!
//! ```text
//! next secret = HKDF-Expand-Label(secret, "traffic upd", "", Hash.length)
//! key         = HKDF-Expand-Label(secret, "key", "", key length)
//! iv          = HKDF-Expand-Label(secret, "iv", "", 12)
//! ```
//!
//! rustls hands out a session's keys, not its secrets, and derives the
//! next keys in a `KernelConnection`: about 800 bytes a sleeping
//! connection would keep for the one thing it may never do. The secrets
//! themselves rustls tells a configuration's `KeyLog`, as the handshake
//! derives them, on the thread that processes the handshake: the
//! configuration dormant serves with wraps the user's key log in
//! [`RecordSecrets`], which passes the two secrets on to
//! [`recording_secrets`] around that processing (and everything to the
//! user's key log, as before).
//!
//! The derivation is the crypto provider's HKDF with the suite's hash;
//! dormant writes only the labels. A session uses its secrets only if they
//! are its own (the client's secret derives the read IV rustls handed
//! over, checked once, when the session leaves rustls), and only where
//! rustls lets a key be built from bytes (32-byte keys: AES-256-GCM,
//! ChaCha20-Poly1305); otherwise it keeps the `KernelConnection`.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use rustls::KeyLog;
use rustls::Tls13CipherSuite;
use rustls::crypto::cipher::{AeadKey, Iv};
use rustls::crypto::tls13::{HkdfExpander, OkmBlock, expand};

const CLIENT_TRAFFIC_SECRET: &str = "CLIENT_TRAFFIC_SECRET_0";
const SERVER_TRAFFIC_SECRET: &str = "SERVER_TRAFFIC_SECRET_0";

/// A session's two traffic secrets (zeroed when dropped).
pub(super) struct TrafficSecrets {
    pub(super) client: OkmBlock,
    pub(super) server: OkmBlock,
}

impl fmt::Debug for TrafficSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TrafficSecrets")
    }
}

#[derive(Default)]
struct Recording {
    client: Option<OkmBlock>,
    server: Option<OkmBlock>,
}

thread_local! {
    /// `Some` while [`recording_secrets`] runs on this thread.
    static RECORDING: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// Runs `process`, in which rustls processes one connection's handshake
/// records on this thread, and returns the traffic secrets its handshake
/// derived meanwhile, if it did.
pub(super) fn recording_secrets<R>(
    process: impl FnOnce() -> R,
) -> (R, Option<Box<TrafficSecrets>>) {
    RECORDING.with(|recording| *recording.borrow_mut() = Some(Recording::default()));
    let result = process();
    let recorded = RECORDING.with(|recording| recording.borrow_mut().take());
    let secrets = match recorded {
        Some(Recording {
            client: Some(client),
            server: Some(server),
        }) => Some(Box::new(TrafficSecrets { client, server })),
        _ => None,
    };
    (result, secrets)
}

/// The user's key log, noting a TLS 1.3 session's traffic secrets for
/// [`recording_secrets`].
#[derive(Debug)]
pub(crate) struct RecordSecrets(pub(crate) Arc<dyn KeyLog>);

impl KeyLog for RecordSecrets {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        if label == CLIENT_TRAFFIC_SECRET || label == SERVER_TRAFFIC_SECRET {
            let _ = RECORDING.try_with(|recording| {
                if let Some(recording) = recording.borrow_mut().as_mut() {
                    let slot = match label {
                        CLIENT_TRAFFIC_SECRET => &mut recording.client,
                        _ => &mut recording.server,
                    };
                    *slot = Some(OkmBlock::new(secret));
                }
            });
        }
        if self.0.will_log(label) {
            self.0.log(label, client_random, secret);
        }
    }

    fn will_log(&self, label: &str) -> bool {
        label == CLIENT_TRAFFIC_SECRET || label == SERVER_TRAFFIC_SECRET || self.0.will_log(label)
    }
}

/// The key and IV `secret` derives for `suite`, if its key is 32 bytes.
pub(super) fn keys(suite: &Tls13CipherSuite, secret: &OkmBlock) -> Option<(AeadKey, Iv)> {
    if suite.aead_alg.key_len() != 32 {
        return None;
    }
    let expander = suite.hkdf_provider.expander_for_okm(secret);
    let key: AeadKey = expand_label::<AeadKey, 32>(&*expander, b"key");
    let iv: Iv = expand_label::<Iv, 12>(&*expander, b"iv");
    Some((key, iv))
}

/// The IV `secret` derives (the check that recorded secrets are a
/// session's, and that its keys are the first ones: cheaper than the key).
pub(super) fn iv(suite: &Tls13CipherSuite, secret: &OkmBlock) -> [u8; 12] {
    let expander = suite.hkdf_provider.expander_for_okm(secret);
    expand_label::<[u8; 12], 12>(&*expander, b"iv")
}

/// The secret after `secret`, for a key update.
pub(super) fn next(suite: &Tls13CipherSuite, secret: &OkmBlock) -> OkmBlock {
    let expander = suite.hkdf_provider.expander_for_okm(secret);
    let len = (expander.hash_len() as u16).to_be_bytes();
    let label = b"traffic upd";
    expander.expand_block(&[
        &len,
        &[(PREFIX.len() + label.len()) as u8],
        PREFIX,
        label,
        &[0],
    ])
}

const PREFIX: &[u8] = b"tls13 ";

/// HKDF-Expand-Label with an empty context, `N` bytes long.
fn expand_label<T: From<[u8; N]>, const N: usize>(expander: &dyn HkdfExpander, label: &[u8]) -> T {
    let len = (N as u16).to_be_bytes();
    expand(
        expander,
        &[
            &len,
            &[(PREFIX.len() + label.len()) as u8],
            PREFIX,
            label,
            &[0],
        ],
    )
}

#[cfg(all(test, any(feature = "tls", feature = "tls-ring")))]
mod tests {
    use super::*;

    #[cfg(feature = "tls")]
    use rustls::crypto::aws_lc_rs::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256 as SUITE;
    #[cfg(not(feature = "tls"))]
    use rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256 as SUITE;

    /// The application traffic secrets of rustls's key schedule test
    /// vectors (`tls13/key_schedule.rs`, generated with OpenSSL, SHA-256),
    /// and the key (16 bytes) and IV they derive.
    const VECTORS: [([u8; 32], [u8; 16], [u8; 12]); 2] = [
        (
            [
                0xc1, 0x4a, 0x6d, 0x79, 0x76, 0xd8, 0x10, 0x2b, 0x5a, 0x0c, 0x99, 0x51, 0x49, 0x3f,
                0xee, 0x87, 0xdc, 0xaf, 0xf8, 0x2c, 0x24, 0xca, 0xb2, 0x14, 0xe8, 0xbe, 0x71, 0xa8,
                0x20, 0x6d, 0xbd, 0xa5,
            ],
            [
                0xcc, 0x9f, 0x5f, 0x98, 0x0b, 0x5f, 0x10, 0x30, 0x6c, 0xba, 0xd7, 0xbe, 0x98, 0xd7,
                0x57, 0x2e,
            ],
            [
                0xb8, 0x09, 0x29, 0xe8, 0xd0, 0x2c, 0x70, 0xf6, 0x11, 0x62, 0xed, 0x6b,
            ],
        ),
        (
            [
                0x2c, 0x90, 0x77, 0x38, 0xd3, 0xf8, 0x37, 0x02, 0xd1, 0xe4, 0x59, 0x8f, 0x48, 0x48,
                0x53, 0x1d, 0x9f, 0x93, 0x65, 0x49, 0x1b, 0x9f, 0x7f, 0x52, 0xc8, 0x22, 0x29, 0x0d,
                0x4c, 0x23, 0x21, 0x92,
            ],
            [
                0x0c, 0xb2, 0x95, 0x62, 0xd8, 0xd8, 0x8f, 0x48, 0xb0, 0x2c, 0xbf, 0xbe, 0xd7, 0xe6,
                0x2b, 0xb3,
            ],
            [
                0x0d, 0xb2, 0x8f, 0x98, 0x85, 0x86, 0xa1, 0xb7, 0xe4, 0xd5, 0xc6, 0x9c,
            ],
        ),
    ];

    #[test]
    fn labels_derive_what_openssl_derives() {
        let suite = SUITE.tls13().unwrap();
        for (secret, key, iv) in VECTORS {
            let secret = OkmBlock::new(&secret);
            let expander = suite.hkdf_provider.expander_for_okm(&secret);
            assert_eq!(expand_label::<[u8; 16], 16>(&*expander, b"key"), key);
            assert_eq!(self::iv(suite, &secret), iv);
            let (_, iv_with_key) = keys(suite, &secret).unwrap();
            assert_eq!(iv_with_key.as_ref(), &iv);
        }
    }

    #[test]
    fn the_next_secret_is_another_and_derives_other_keys() {
        let suite = SUITE.tls13().unwrap();
        let secret = OkmBlock::new(&VECTORS[0].0);
        let next = next(suite, &secret);
        assert_eq!(next.as_ref().len(), 32);
        assert_ne!(next.as_ref(), secret.as_ref());
        assert_ne!(self::iv(suite, &next), self::iv(suite, &secret));
    }
}
