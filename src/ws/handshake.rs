//! The opening handshake (RFC 6455, 4.2): what a request must say to be a
//! WebSocket upgrade, and the server's `101` answer.

use std::fmt;

use http::header::{
    CONNECTION, HeaderMap, HeaderValue, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use http::{Method, Response, StatusCode, Version};
use sha1::{Digest, Sha1};

/// Why a request is not a WebSocket upgrade the server can accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    status: StatusCode,
    reason: &'static str,
}

impl Rejection {
    fn new(status: StatusCode, reason: &'static str) -> Self {
        Rejection { status, reason }
    }

    pub(crate) fn upgrade(reason: &'static str) -> Self {
        Rejection::new(StatusCode::UPGRADE_REQUIRED, reason)
    }

    /// The status to answer with: `426 Upgrade Required` for a request
    /// that is not a WebSocket upgrade or asks for another version, `400
    /// Bad Request` for a broken one, `405 Method Not Allowed` for one that
    /// is not a `GET`.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The answer to the request: the status, with `Upgrade: websocket` and
    /// `Sec-WebSocket-Version: 13` when it is `426`, and an empty body.
    pub fn response<B: Default>(&self) -> Response<B> {
        let mut response = Response::new(B::default());
        *response.status_mut() = self.status;
        if self.status == StatusCode::UPGRADE_REQUIRED {
            let headers = response.headers_mut();
            headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
            headers.insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        }
        response
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a WebSocket upgrade: {}", self.reason)
    }
}

impl std::error::Error for Rejection {}

/// Checks an upgrade request's method, version and headers; returns the
/// `Sec-WebSocket-Accept` value of its key.
pub(crate) fn check(
    method: &Method,
    version: Version,
    headers: &HeaderMap,
    protocol: Option<&hyper::ext::Protocol>,
) -> Result<Opening, Rejection> {
    if version == Version::HTTP_2 {
        return check_h2(method, headers, protocol).map(|()| Opening::H2);
    }
    if version != Version::HTTP_11 {
        return Err(Rejection::upgrade(
            "WebSockets are served over HTTP/1.1 and HTTP/2",
        ));
    }
    if !has_token(headers, &UPGRADE, "websocket") || !has_token(headers, &CONNECTION, "upgrade") {
        return Err(Rejection::upgrade(
            "no `Connection: upgrade` with `Upgrade: websocket`",
        ));
    }
    if method != Method::GET {
        return Err(Rejection::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "the method is not GET",
        ));
    }
    if headers.get(SEC_WEBSOCKET_VERSION).is_none_or(|v| v != "13") {
        return Err(Rejection::upgrade("`Sec-WebSocket-Version` is not 13"));
    }
    let mut keys = headers.get_all(SEC_WEBSOCKET_KEY).iter();
    match (keys.next(), keys.next()) {
        (Some(key), None) if is_key(key.as_bytes()) => Ok(Opening::Http1 {
            accept: accept(key.as_bytes()),
        }),
        _ => Err(Rejection::new(
            StatusCode::BAD_REQUEST,
            "`Sec-WebSocket-Key` is not one base64-encoded 16-byte value",
        )),
    }
}

/// How a checked WebSocket opens.
#[derive(Debug)]
pub(crate) enum Opening {
    /// An HTTP/1.1 upgrade: `101`, with the `Sec-WebSocket-Accept` value of
    /// the client's key.
    Http1 { accept: HeaderValue },
    /// An HTTP/2 extended CONNECT (RFC 8441): `200`, on the request's
    /// stream.
    H2,
}

/// Checks an HTTP/2 extended CONNECT for a WebSocket (RFC 8441, 4 and 5):
/// `:method` CONNECT, `:protocol` websocket, version 13. (There is no key:
/// the stream is the client's own.)
fn check_h2(
    method: &Method,
    headers: &HeaderMap,
    protocol: Option<&hyper::ext::Protocol>,
) -> Result<(), Rejection> {
    if method != Method::CONNECT || protocol.is_none_or(|p| p.as_str() != "websocket") {
        return Err(Rejection::upgrade(
            "not a WebSocket over HTTP/2 (extended CONNECT with `:protocol` websocket, RFC 8441)",
        ));
    }
    if headers.get(SEC_WEBSOCKET_VERSION).is_none_or(|v| v != "13") {
        return Err(Rejection::upgrade("`Sec-WebSocket-Version` is not 13"));
    }
    Ok(())
}

/// Whether a comma-separated header has `token` (case-insensitive).
fn has_token(headers: &HeaderMap, name: &http::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|value| {
        value
            .as_bytes()
            .split(|&b| b == b',')
            .any(|part| part.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// Whether `key` is 16 bytes in base64: 22 characters and `==`.
fn is_key(key: &[u8]) -> bool {
    key.len() == 24
        && key.ends_with(b"==")
        && key[..22]
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// `Sec-WebSocket-Accept`: the base64 of the SHA-1 of the key and RFC
/// 6455's GUID.
fn accept(key: &[u8]) -> HeaderValue {
    let mut sha1 = Sha1::new();
    sha1.update(key);
    sha1.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    let encoded = base64(&sha1.finalize());
    HeaderValue::from_str(&encoded).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 0x3F) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The answer that opens the socket (`101 Switching Protocols` over
/// HTTP/1.1, `200` over HTTP/2), with the subprotocol and the extensions
/// chosen.
pub(crate) fn response<B: Default>(
    opening: Opening,
    protocol: Option<HeaderValue>,
    extensions: Option<HeaderValue>,
) -> Response<B> {
    let mut response = Response::new(B::default());
    if let Opening::Http1 { .. } = opening {
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    }
    let headers = response.headers_mut();
    if let Opening::Http1 { accept } = opening {
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(http::header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if let Some(protocol) = protocol {
        headers.insert(http::header::SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    if let Some(extensions) = extensions {
        headers.insert(http::header::SEC_WEBSOCKET_EXTENSIONS, extensions);
    }
    response
}

/// The first of the client's subprotocols (`Sec-WebSocket-Protocol`, in its
/// order of preference) that the server speaks.
pub(crate) fn choose_protocol<'a>(
    offered: impl IntoIterator<Item = &'a HeaderValue>,
    ours: &[std::borrow::Cow<'static, str>],
) -> Option<HeaderValue> {
    offered
        .into_iter()
        .flat_map(|value| value.as_bytes().split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .find_map(|offered| ours.iter().find(|ours| ours.as_bytes() == offered))
        .and_then(|chosen| HeaderValue::from_str(chosen).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc_example_key() {
        // RFC 6455, 1.3.
        assert_eq!(
            accept(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    http::HeaderName::from_static(k),
                    HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    #[test]
    fn checks() {
        let good = [
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "WebSocket"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        let status = |method: Method, version, pairs: &[_]| {
            check(&method, version, &headers(pairs), None)
                .map(|_| ())
                .map_err(|r| r.status())
        };
        assert_eq!(status(Method::GET, Version::HTTP_11, &good), Ok(()));
        assert_eq!(
            status(Method::POST, Version::HTTP_11, &good),
            Err(StatusCode::METHOD_NOT_ALLOWED)
        );
        assert_eq!(
            status(Method::GET, Version::HTTP_2, &good),
            Err(StatusCode::UPGRADE_REQUIRED)
        );
        let mut old = good;
        old[2].1 = "8";
        assert_eq!(
            status(Method::GET, Version::HTTP_11, &old),
            Err(StatusCode::UPGRADE_REQUIRED)
        );
        let mut bad_key = good;
        bad_key[3].1 = "short==";
        assert_eq!(
            status(Method::GET, Version::HTTP_11, &bad_key),
            Err(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            status(Method::GET, Version::HTTP_11, &good[1..]),
            Err(StatusCode::UPGRADE_REQUIRED)
        );
        // HTTP/2: an extended CONNECT with `:protocol` websocket.
        let websocket = hyper::ext::Protocol::from_static("websocket");
        let h2 = |method: &Method, protocol, pairs: &[_]| {
            check(method, Version::HTTP_2, &headers(pairs), protocol)
                .map(|opening| matches!(opening, Opening::H2))
                .map_err(|r| r.status())
        };
        let version = [("sec-websocket-version", "13")];
        assert_eq!(h2(&Method::CONNECT, Some(&websocket), &version), Ok(true));
        assert_eq!(
            h2(&Method::CONNECT, None, &version),
            Err(StatusCode::UPGRADE_REQUIRED)
        );
        let other = hyper::ext::Protocol::from_static("webtransport");
        assert_eq!(
            h2(&Method::CONNECT, Some(&other), &version),
            Err(StatusCode::UPGRADE_REQUIRED)
        );
        assert_eq!(
            h2(&Method::CONNECT, Some(&websocket), &[]),
            Err(StatusCode::UPGRADE_REQUIRED)
        );
    }

    #[test]
    fn protocols_in_the_clients_order() {
        let offered = headers(&[("sec-websocket-protocol", "v2.chat, v1.chat")]);
        let offered = offered.get_all("sec-websocket-protocol");
        let ours = ["v1.chat".into(), "v2.chat".into()];
        assert_eq!(choose_protocol(offered.iter(), &ours).unwrap(), "v2.chat");
        assert_eq!(choose_protocol(offered.iter(), &["other".into()]), None);
    }
}
