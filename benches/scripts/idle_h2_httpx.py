"""A client process of benches/experiments/idle_memory.rs (its
`h2c-httpx-` kinds): Python's httpx on h2 with its defaults (HTTP/2's
65,535-byte windows, topped up only at half), over h2c with prior
knowledge, one `httpx.Client` per connection. It speaks the bench's
client protocol (benches/common/procs.rs, `client_main`), one command a
line on stdin, each answered `ready`:

    cycle K tcp:ADDR   K connections, one after another, each one `GET /`
                       (its response checked), then closed
    open N tcp:ADDR    N connections, one after another, each one `GET /`,
                       kept open
    close (or EOF)     closes them all and exits

Needs httpx with HTTP/2 (`python3 -m pip install 'httpx[http2]'`).
"""

import ssl
import sys

import httpx

# One for all: httpx makes one per client otherwise (loading the system's
# CAs each time: ~800 KB and milliseconds a client), which plain HTTP
# never uses.
SSL = ssl.create_default_context()


def get(addr):
    client = httpx.Client(http1=False, http2=True, timeout=10, verify=SSL)
    res = client.get(f"http://{addr}/")
    if res.http_version != "HTTP/2" or res.text != "Hello, World!":
        sys.exit(f"idle_h2_httpx.py: unexpected response {res.http_version} {res.text!r}")
    return client


kept = []
for line in sys.stdin:
    words = line.split()
    if words == ["close"]:
        break
    command, count, endpoint = words
    addr = endpoint.removeprefix("tcp:")
    for _ in range(int(count)):
        client = get(addr)
        if command == "cycle":
            client.close()
        else:
            kept.append(client)
    print("ready", flush=True)
for client in kept:
    client.close()
