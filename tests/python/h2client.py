"""Python's httpx on h2 (the `h2` package), driven by
tests/http2_clients.rs against a dormant server serving the tests'
mirror service (tests/common/services.rs): POST bodies come back byte for
byte, GET /bytes/N answers N bytes of the tests' pattern, and `x-` headers
are copied into the response.

httpx keeps HTTP/2's default windows (65,535 bytes for the connection and
each stream, topped up only once half is used), and it is synchronous: it
reads only while it waits for a response. It opens ONE connection (h2c with
prior knowledge over TCP or a Unix socket, or TLS with ALPN h2) and reads
commands from stdin, one a line, so that the test decides when the
connection is left idle (to sleep):

    round   GETs of 100 B, 70,000 B and 200,000 B (larger than the window,
            and than what is left of it), POSTs of 0 B and 150,000 B, then
            GETs of 10 B and 65,536 B, one after the other, each with an
            `x-round` header that must come back; checks every byte;
            prints "round N done"
    EOF     closes the connection, prints "closed after N requests" and
            exits 0

Any error or mismatch exits 1 with a message on stderr.

    python3 h2client.py (--addr HOST:PORT [--tls --ca FILE] | --unix PATH)

Needs httpx with HTTP/2 (`python3 -m pip install 'httpx[http2]'`).
"""

import ssl
import sys

import httpx

import dial

MASK = (1 << 64) - 1


def fail(message):
    sys.stderr.write(f"h2client.py: {message}\n")
    sys.exit(1)


def pattern(length, seed):
    """tests/common/services.rs `pattern`."""
    salt = ((length << 32) ^ (seed * 0xFF51AFD7ED558CCD)) & MASK
    return bytes(((((i ^ salt) * 0x9E3779B97F4A7C15) & MASK) >> 56) for i in range(length))


def main():
    args = dial.args()
    if args.unix:
        transport = httpx.HTTPTransport(http1=False, http2=True, uds=args.unix)
        base = "http://localhost"
    elif args.tls:
        # The certificate is for `localhost`.
        tls = ssl.create_default_context(cafile=args.ca)
        transport = httpx.HTTPTransport(http1=False, http2=True, verify=tls)
        base = f"https://localhost:{args.addr.rsplit(':', 1)[1]}"
    else:
        transport = httpx.HTTPTransport(http1=False, http2=True)
        base = f"http://{args.addr}"
    client = httpx.Client(transport=transport, timeout=20)
    requests = 0

    def check(method, path, body, expected, n):
        nonlocal requests
        try:
            res = client.request(method, f"{base}{path}", content=body, headers={"x-round": str(n)})
        except httpx.HTTPError as e:
            fail(f"{method} {path}: {e!r}")
        requests += 1
        if res.http_version != "HTTP/2" or res.status_code != 200:
            fail(f"{method} {path}: {res.http_version} {res.status_code}")
        if res.headers.get("x-round") != str(n):
            fail(f"{method} {path}: x-round {res.headers.get('x-round')}")
        if res.content != expected:
            fail(f"{method} {path}: {len(res.content)} bytes back, {len(expected)} expected, or other bytes")

    rounds = 0
    for line in sys.stdin:
        command = line.strip()
        if command != "round":
            fail(f"unknown command {command!r}")
        n = rounds
        for length in (100, 70_000, 200_000):
            check("GET", f"/bytes/{length}", None, pattern(length, 0), n)
        for length in (0, 150_000):
            body = pattern(length, n + 1)
            check("POST", "/echo", body, body, n)
        for length in (10, 65_536):
            check("GET", f"/bytes/{length}", None, pattern(length, 0), n)
        print(f"round {n} done", flush=True)
        rounds += 1
    client.close()
    print(f"closed after {requests} requests", flush=True)


main()
