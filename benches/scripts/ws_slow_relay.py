#!/usr/bin/env python3
"""A TCP relay that slows a WebSocket client's frames down, so that the
server's sockets sleep between frames and inside them: the variant
`SLOW=1 benches/scripts/autobahn.sh` puts it between the Autobahn|Testsuite
(wstest, which sends each frame in one write) and the echo server.

    python3 benches/scripts/ws_slow_relay.py TARGET_HOST:PORT [LISTEN_PORT]

Listens on 127.0.0.1 (LISTEN_PORT, default 0: a free port) and prints
`listening on 127.0.0.1:PORT` once it accepts connections. Each
connection gets its own connection to TARGET. What the server sends goes
to the client as it comes. What the client sends goes to the server in
pieces, each written alone (TCP_NODELAY) with a pause after it:

- the HTTP request head (the handshake) in two halves;
- each WebSocket frame's first byte alone, then the rest of its header
  (length and mask), then its payload in pieces of at most PIECE bytes:
  a frame arrives in several reads, and the next frame only after a pause.

Client frames are parsed only to place the cuts (a frame's length is in
its header; every byte is forwarded unchanged, in order, whatever it is).

Bounded in time: the pauses of one connection add up to at most BUDGET
milliseconds; past that its bytes flow at full speed. The suite kills a
case's connection 0.5 to 1 s after its last frame (`killAfter`), so the
budget stays well under that, and the 16 MiB messages of the 9.* cases
are slowed only for their first frames. A half-close is forwarded as a
half-close, so that the closing handshake is the server's own.

Environment: SLOW_PAUSE_MS (default 3: more than the `dormant_after` of
2 ms that `ws_echo` runs with, so an HTTP connection goes to the lot, and
a socket reads nothing between two pieces and sleeps), SLOW_PIECE (bytes
of payload per piece, default 16), SLOW_BUDGET_MS (default 200). On
SIGTERM or SIGINT it prints to stderr how many connections, pieces and
pauses it relayed and how many connections used up their budget.

Needs Python 3.8 or later, standard library only.
"""

import asyncio
import os
import signal
import socket
import sys

PAUSE = int(os.environ.get("SLOW_PAUSE_MS", "3")) / 1000
PIECE = max(1, int(os.environ.get("SLOW_PIECE", "16")))
BUDGET = int(os.environ.get("SLOW_BUDGET_MS", "200")) / 1000

STATS = {"connections": 0, "pieces": 0, "pauses": 0, "over_budget": 0}


class Cutter:
    """Cuts the client's byte stream into the pieces to send one by one:
    the handshake's head in two, each frame's first byte, the rest of its
    header, its payload in pieces of PIECE bytes."""

    def __init__(self):
        self.http = True
        self.head = b""  # what arrived of the HTTP head (its end is looked for)
        self.header = b""  # what arrived of the current frame's header
        self.left = 0  # payload bytes of the current frame still to come

    def cut(self, data):
        pieces = []
        while data:
            if self.http:
                seen = len(self.head)
                self.head += data
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    pieces.append(data)
                    self.head = self.head[-3:]
                    return pieces
                # The head ends `take` bytes into `data`: two halves.
                take = end + 4 - seen
                half = take // 2
                pieces += [data[:half], data[half:take]] if half else [data[:take]]
                data = data[take:]
                self.http = False
                self.head = b""
            elif self.left > 0:
                n = min(self.left, PIECE, len(data))
                pieces.append(data[:n])
                data = data[n:]
                self.left -= n
            else:
                # The first byte alone, then the rest of the header (its
                # length is known from its second byte on).
                if self.header:
                    whole = header_len(self.header + data[:1])
                    n = min(whole - len(self.header), len(data))
                else:
                    n = 1
                self.header += data[:n]
                pieces.append(data[:n])
                data = data[n:]
                if len(self.header) >= 2 and len(self.header) == header_len(self.header):
                    self.left = payload_len(self.header)
                    self.header = b""
        return pieces


def header_len(header):
    """The length of a frame header that starts with `header` (its first
    two bytes at least)."""
    n = 2 + {126: 2, 127: 8}.get(header[1] & 0x7F, 0)
    return n + (4 if header[1] & 0x80 else 0)


def payload_len(header):
    """The payload length of a whole frame header."""
    n = header[1] & 0x7F
    if n == 126:
        return int.from_bytes(header[2:4], "big")
    if n == 127:
        return int.from_bytes(header[2:10], "big")
    return n


async def client_to_server(reader, writer):
    cutter = Cutter()
    budget = BUDGET
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if budget <= 0:
                writer.write(data)
                await writer.drain()
                continue
            for piece in cutter.cut(data):
                writer.write(piece)
                await writer.drain()
                STATS["pieces"] += 1
                if budget > 0:
                    await asyncio.sleep(PAUSE)
                    STATS["pauses"] += 1
                    budget -= PAUSE
                    if budget <= 0:
                        STATS["over_budget"] += 1
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()


async def server_to_client(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.transport.abort()


async def relay(target, client_reader, client_writer):
    STATS["connections"] += 1
    host, port = target
    try:
        server_reader, server_writer = await asyncio.open_connection(host, port)
    except OSError:
        client_writer.transport.abort()
        return
    for w in (client_writer, server_writer):
        sock = w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    await asyncio.gather(
        client_to_server(client_reader, server_writer),
        server_to_client(server_reader, client_writer),
    )
    for w in (client_writer, server_writer):
        w.close()


async def main():
    if len(sys.argv) < 2:
        sys.exit("usage: ws_slow_relay.py TARGET_HOST:PORT [LISTEN_PORT]")
    host, _, port = sys.argv[1].rpartition(":")
    target = (host, int(port))
    listen = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    server = await asyncio.start_server(
        lambda r, w: relay(target, r, w), "127.0.0.1", listen
    )
    addr = server.sockets[0].getsockname()
    print(f"listening on {addr[0]}:{addr[1]}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    print(
        "relay: {connections} connections, {pieces} pieces, {pauses} pauses "
        "of {pause} ms, {over_budget} connections over the budget of "
        "{budget} ms".format(
            pause=PAUSE * 1000, budget=BUDGET * 1000, **STATS
        ),
        file=sys.stderr,
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
