//! Reading a PROXY header (HAProxy's protocol, versions 1 and 2) from the
//! bytes that came so far: [`parse`] says whether they hold a whole
//! header, its start, or something else, on the `ppp` crate's parsers.
//!
//! Every answer is final: bytes that hold a header (or that cannot start
//! one) say so whatever follows them, so a header read in one piece and
//! the same header read byte by byte end alike. `ppp` is given what it
//! judges right:
//!
//! - version 1, only whole lines (up to the CRLF, at most 107 bytes, as the
//!   specification asks): on a line cut short its parser may call a valid
//!   start an error (`PROXY TCP4 1.2.3.4 5.6.7.8 80 ` fails on the empty
//!   port after the space) or a complete but broken line incomplete
//!   (`PROXY TCP4\r\n`);
//! - version 2, any prefix: it needs the 16 fixed bytes, then the length
//!   they announce. A header longer than [`MAX_V2`] is refused before its
//!   bytes are kept, and its TLVs must be well formed (their contents are
//!   not read).
//!
//! `ppp` borrows the bytes it parses and allocates nothing; none of the
//! calls here can panic on any input (indexes are checked first, and
//! `tests::mutated_headers_are_judged_once` runs it on many broken ones).

use std::fmt;
use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};

use ppp::PartialResult;
use ppp::v2::{Addresses, Command, Protocol};

/// The signature a version 2 header starts with.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// A version 2 header's fixed part: the signature, version and command,
/// family and protocol, and the length of the rest.
const V2_FIXED: usize = 16;

/// The longest version 1 line, its CRLF included.
const V1_MAX: usize = 107;

/// The longest version 2 header accepted, addresses and TLVs included: the
/// specification allows 64 KiB of them, but the TLVs proxies send (an
/// AWS, GCP or Azure endpoint id, HAProxy's TLS facts, a unique id) take
/// a few hundred bytes, and a header that arrives in pieces is kept until
/// it is whole.
pub(super) const MAX_V2: usize = 4096;

/// A whole header.
#[derive(Debug, PartialEq)]
pub(super) struct Header {
    /// How many bytes it takes.
    pub(super) len: usize,
    /// The client's address it carries; `None` when the connection's own
    /// peer stands (a v2 `LOCAL` command, a v1 `UNKNOWN` line, an address
    /// family without an IP address).
    pub(super) client: Option<Client>,
}

/// A client's address as a PROXY header carries it (no IPv6 flow label or
/// scope): the compact form a proxied connection keeps while it sleeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Client {
    V4([u8; 4], u16),
    V6([u8; 16], u16),
}

impl From<Client> for SocketAddr {
    fn from(client: Client) -> SocketAddr {
        match client {
            Client::V4(ip, port) => SocketAddr::from((ip, port)),
            Client::V6(ip, port) => SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, 0).into(),
        }
    }
}

/// Why bytes are not a PROXY header.
#[derive(Debug)]
pub(super) enum Invalid {
    /// Version 1, as `ppp` judged the line.
    V1(ppp::v1::BinaryParseError),
    /// Version 2, as `ppp` judged it.
    V2(ppp::v2::ParseError),
    /// Neither signature: the client sent no PROXY header.
    Signature,
    /// A version 1 line longer than 107 bytes.
    V1TooLong,
    /// A version 1 line that ends in a CR or an LF alone.
    V1LineEnd,
    /// A version 2 header longer than [`MAX_V2`] (its length).
    V2TooLong(usize),
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Invalid::V1(error) => write!(f, "PROXY v1: {error}"),
            Invalid::V2(error) => write!(f, "PROXY v2: {error}"),
            Invalid::Signature => f.write_str("no PROXY header"),
            Invalid::V1TooLong => write!(f, "PROXY v1: no CRLF within {V1_MAX} bytes"),
            Invalid::V1LineEnd => f.write_str("PROXY v1: a line that does not end in CRLF"),
            Invalid::V2TooLong(len) => write!(f, "PROXY v2: {len} bytes, more than {MAX_V2}"),
        }
    }
}

impl std::error::Error for Invalid {}

/// Judges the bytes a connection sent so far: a whole header (`Some`),
/// the start of one (`None`: read more), or not a header at all. At most
/// [`MAX_V2`] bytes are ever `None`.
pub(super) fn parse(bytes: &[u8]) -> Result<Option<Header>, Invalid> {
    if bytes.starts_with(&V2_SIGNATURE[..bytes.len().min(V2_SIGNATURE.len())]) {
        parse_v2(bytes)
    } else if bytes.starts_with(&b"PROXY"[..bytes.len().min(5)]) {
        parse_v1(bytes)
    } else {
        Err(Invalid::Signature)
    }
}

fn parse_v1(bytes: &[u8]) -> Result<Option<Header>, Invalid> {
    let cr = match bytes.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(cr) if bytes[cr] == b'\r' => cr,
        Some(_) => return Err(Invalid::V1LineEnd),
        None if bytes.len() >= V1_MAX => return Err(Invalid::V1TooLong),
        None => return Ok(None),
    };
    let len = cr + 2;
    if len > V1_MAX {
        return Err(Invalid::V1TooLong);
    }
    match bytes.get(cr + 1) {
        None => Ok(None),
        Some(b'\n') => match ppp::v1::Header::try_from(&bytes[..len]) {
            Ok(header) => Ok(Some(Header {
                len,
                client: match header.addresses {
                    ppp::v1::Addresses::Tcp4(a) => {
                        Some(Client::V4(a.source_address.octets(), a.source_port))
                    }
                    ppp::v1::Addresses::Tcp6(a) => {
                        Some(Client::V6(a.source_address.octets(), a.source_port))
                    }
                    ppp::v1::Addresses::Unknown => None,
                },
            })),
            // The whole line is there: nothing is missing any more.
            Err(error) => Err(Invalid::V1(error)),
        },
        Some(_) => Err(Invalid::V1LineEnd),
    }
}

fn parse_v2(bytes: &[u8]) -> Result<Option<Header>, Invalid> {
    if let Some(&[high, low]) = bytes.get(V2_FIXED - 2..V2_FIXED) {
        let len = V2_FIXED + usize::from(u16::from_be_bytes([high, low]));
        if len > MAX_V2 {
            return Err(Invalid::V2TooLong(len));
        }
    }
    let header = match ppp::v2::Header::try_from(bytes) {
        Ok(header) => header,
        Err(error) if error.is_incomplete() => return Ok(None),
        Err(error) => return Err(Invalid::V2(error)),
    };
    if let Some(Err(error)) = header.tlvs().find(Result::is_err) {
        return Err(Invalid::V2(error));
    }
    // `LOCAL` (a proxy's own health check) keeps the connection's
    // endpoints; so do an unspecified protocol and the families without an
    // IP address (the specification asks the receiver to ignore them).
    let client = match (header.command, header.protocol, header.addresses) {
        (Command::Local, ..) | (_, Protocol::Unspecified, _) => None,
        (Command::Proxy, _, Addresses::IPv4(a)) => {
            Some(Client::V4(a.source_address.octets(), a.source_port))
        }
        (Command::Proxy, _, Addresses::IPv6(a)) => {
            Some(Client::V6(a.source_address.octets(), a.source_port))
        }
        (Command::Proxy, _, Addresses::Unix(_) | Addresses::Unspecified) => None,
    };
    Ok(Some(Header {
        len: header.len(),
        client,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The examples of HAProxy's specification (sections 2.1 and 2.2) and
    /// the longest lines it names.
    const V1_TCP4: &[u8] = b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
    const V1_TCP6: &[u8] = b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
        ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    const V1_UNKNOWN: &[u8] = b"PROXY UNKNOWN\r\n";
    const V1_UNKNOWN_LONGEST: &[u8] = b"PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
        ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";

    /// A version 2 header: `command` (0 `LOCAL`, 1 `PROXY`), `family` and
    /// protocol byte, then `rest` (addresses and TLVs).
    fn v2(command: u8, family: u8, rest: &[u8]) -> Vec<u8> {
        let mut header = V2_SIGNATURE.to_vec();
        header.push(0x20 | command);
        header.push(family);
        header.extend_from_slice(&u16::try_from(rest.len()).unwrap().to_be_bytes());
        header.extend_from_slice(rest);
        header
    }

    /// TCP over IPv4: 192.168.0.1:56324 to 192.168.0.11:443, then `tlvs`.
    fn v2_tcp4(tlvs: &[u8]) -> Vec<u8> {
        let mut rest = vec![192, 168, 0, 1, 192, 168, 0, 11];
        rest.extend_from_slice(&56324u16.to_be_bytes());
        rest.extend_from_slice(&443u16.to_be_bytes());
        rest.extend_from_slice(tlvs);
        v2(1, 0x11, &rest)
    }

    /// TCP over IPv6: [2001:db8::1]:4000 to [2001:db8::2]:443.
    fn v2_tcp6() -> Vec<u8> {
        let mut rest = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets().to_vec();
        rest.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        rest.extend_from_slice(&4000u16.to_be_bytes());
        rest.extend_from_slice(&443u16.to_be_bytes());
        v2(1, 0x21, &rest)
    }

    /// An AWS VPC endpoint id (0xEA, a custom type) and a NOOP.
    const TLVS: &[u8] = b"\xea\x00\x15\x01vpce-08d2bf15fef86a2\x04\x00\x02\x00\x00";

    fn client(header: &[u8]) -> Option<SocketAddr> {
        let parsed = parse(header).unwrap().expect("a whole header");
        assert_eq!(parsed.len, header.len());
        parsed.client.map(SocketAddr::from)
    }

    #[test]
    fn the_specification_examples_are_read() {
        let tcp4 = Some("192.168.0.1:56324".parse().unwrap());
        assert_eq!(client(V1_TCP4), tcp4);
        assert_eq!(
            client(V1_TCP6),
            Some(
                "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"
                    .parse()
                    .unwrap()
            )
        );
        assert_eq!(client(V1_UNKNOWN), None);
        assert_eq!(V1_UNKNOWN_LONGEST.len(), V1_MAX);
        assert_eq!(client(V1_UNKNOWN_LONGEST), None);
        assert_eq!(client(&v2_tcp4(&[])), tcp4);
        assert_eq!(client(&v2_tcp4(TLVS)), tcp4);
        assert_eq!(
            client(&v2_tcp6()),
            Some("[2001:db8::1]:4000".parse().unwrap())
        );
        // LOCAL: a health check, with or without addresses.
        assert_eq!(client(&v2(0, 0x00, &[])), None);
        assert_eq!(client(&v2(0, 0x11, &v2_tcp4(&[])[16..])), None);
        // UNSPEC, and AF_UNIX: no IP address to take.
        assert_eq!(client(&v2(1, 0x00, &[1, 2, 3])), None);
        assert_eq!(client(&v2(1, 0x31, &[0; 216])), None);
    }

    #[test]
    fn bytes_after_the_header_are_not_part_of_it() {
        for header in [V1_TCP4.to_vec(), v2_tcp4(TLVS)] {
            let mut bytes = header.clone();
            bytes.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
            assert_eq!(parse(&bytes).unwrap().unwrap().len, header.len());
        }
    }

    #[test]
    fn every_start_of_a_header_asks_for_more() {
        let headers = [
            V1_TCP4.to_vec(),
            V1_TCP6.to_vec(),
            V1_UNKNOWN.to_vec(),
            V1_UNKNOWN_LONGEST.to_vec(),
            v2_tcp4(TLVS),
            v2_tcp6(),
            v2(0, 0, &[]),
        ];
        for header in headers {
            for end in 1..header.len() {
                assert!(
                    matches!(parse(&header[..end]), Ok(None)),
                    "{:?} of {:?}",
                    &header[..end],
                    String::from_utf8_lossy(&header)
                );
            }
        }
    }

    #[test]
    fn malformed_headers_are_refused() {
        let long_v1 = [b"PROXY TCP4 ".as_slice(), &[b'1'; 100], b"\r\n"].concat();
        let mut bad_version = v2_tcp4(&[]);
        bad_version[12] = 0x11;
        let mut bad_command = v2_tcp4(&[]);
        bad_command[12] = 0x22;
        let mut bad_family = v2_tcp4(&[]);
        bad_family[13] = 0x41;
        let mut short_addresses = v2_tcp4(&[]);
        short_addresses[15] = 8;
        let refused: [(&str, &[u8]); 16] = [
            ("an HTTP request", b"GET / HTTP/1.1\r\n\r\n"),
            ("TLS", b"\x16\x03\x01\x02\x00\x01"),
            ("lower case", b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n"),
            (
                "108 bytes, no CRLF",
                &[b"PROXY ".as_slice(), &[b'x'; 102]].concat(),
            ),
            ("a line longer than 107 bytes", &long_v1),
            ("a lone CR", b"PROXY UNKNOWN\rGET"),
            ("a lone LF", b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\nGET"),
            ("no addresses", b"PROXY TCP4\r\n"),
            ("a bad protocol", b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n"),
            ("a bad address", b"PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n"),
            (
                "a port with a leading zero",
                b"PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",
            ),
            ("version 1 of the binary format", &bad_version),
            ("an unknown command", &bad_command),
            ("an unknown family", &bad_family),
            ("addresses shorter than their family", &short_addresses),
            (
                "a TLV longer than the header",
                &v2_tcp4(b"\x04\x00\x09\x00"),
            ),
        ];
        for (what, bytes) in refused {
            assert!(parse(bytes).is_err(), "{what}: {:?}", parse(bytes));
        }
        let too_long = v2(1, 0x11, &[0; MAX_V2 - V2_FIXED + 1]);
        assert!(matches!(
            parse(&too_long[..V2_FIXED]),
            Err(Invalid::V2TooLong(_))
        ));
        assert!(parse(&v2(1, 0x11, &[0; MAX_V2 - V2_FIXED])).is_ok());
    }

    /// Judges `bytes` as a connection would read them, `step` bytes at a
    /// time: the first answer that is not "more".
    fn judged_in_steps(bytes: &[u8], step: usize) -> Result<Option<Header>, String> {
        let mut end = 0;
        loop {
            end = (end + step).min(bytes.len());
            match parse(&bytes[..end]) {
                Ok(None) if end < bytes.len() => {}
                other => return other.map_err(|e| e.to_string()),
            }
        }
    }

    #[test]
    fn mutated_headers_are_judged_once() {
        // A small fuzzer: valid headers with bytes changed, cut or
        // repeated. No input panics, a judged prefix holds at most
        // `MAX_V2` bytes, and the answer does not depend on how the bytes
        // were split.
        let seeds = [
            V1_TCP4.to_vec(),
            V1_TCP6.to_vec(),
            V1_UNKNOWN.to_vec(),
            b"PROXY TCP6 ::1 ::ffff:1.2.3.4 0 65535\r\n".to_vec(),
            v2_tcp4(TLVS),
            v2_tcp6(),
            v2(0, 0, &[]),
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut random = move |below: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % below as u64) as usize
        };
        let (mut headers, mut refused) = (0, 0);
        for round in 0..20_000 {
            let mut bytes = seeds[round % seeds.len()].clone();
            for _ in 0..1 + random(3) {
                let at = random(bytes.len());
                match random(4) {
                    0 => bytes[at] = random(256) as u8,
                    1 => bytes[at] = b" \r\n:.0PROXY\x00\x21\x11\xff"[random(14)],
                    2 => bytes.truncate(at.max(1)),
                    _ => bytes.insert(at, bytes[at]),
                }
            }
            bytes.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
            let whole = parse(&bytes).map_err(|e| e.to_string());
            match &whole {
                Ok(Some(header)) => {
                    assert!(header.len <= bytes.len());
                    headers += 1;
                }
                Ok(None) => assert!(bytes.len() <= MAX_V2),
                Err(_) => refused += 1,
            }
            for step in [1, 2, 7] {
                assert_eq!(judged_in_steps(&bytes, step), whole, "{bytes:?} by {step}");
            }
        }
        // Both answers were given often, so both were checked.
        assert!(
            headers > 1_000 && refused > 1_000,
            "{headers} headers, {refused} refused"
        );
    }
}
