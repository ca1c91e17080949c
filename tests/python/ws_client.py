"""Python's `websockets` (its asyncio client), driven by tests/ws_clients.rs
against a dormant::ws echo server (tests/common/ws.rs: every message comes
back; the text `close CODE` has the server close with that code and the
reason "asked to").

It reads commands from stdin, one a line, and answers each with one line
on stdout once done, so that the test decides when the socket is left
idle (to sleep): the command language of the tests' WebSocket clients
(go/wsclient and node/chromium_ws.mjs speak it too). It opens one
connection (TCP, a Unix socket, or TLS trusting the server's
certificate), with `max_size=None` (16 MiB messages), `ping_interval=None`
(the server pings; this client does not by itself) and websockets' default
compression (it offers `permessage-deflate; client_max_window_bits`, and
compresses what it sends when the server accepts):

    connect PATH        opens a connection to PATH; "connected"
    extensions          the server's `Sec-WebSocket-Extensions` answer (its
                        lines joined with ", "); "extensions VALUE", or
                        "extensions none" without one
    text N              sends a text of N bytes ("é" repeated, and an "a"
                        if N is odd), checks that the same comes back;
                        "text N echoed"
    binary N            the same with the bytes 0, 1, ..., 255, 0, ...;
                        "binary N echoed"
    echo-compressed N   sends a text of N bytes that compresses well (a
                        JSON-like line repeated), checks that the same
                        comes back and that fewer than N/4 bytes came on
                        the connection for it (frame headers included:
                        the server compressed it); "echo N compressed"
                        (the count goes to stderr)
    fragment TEXT       sends TEXT (the rest of the line) as the next
                        fragment of a text message (`send` of an async
                        iterable fed by an asyncio.Queue); "fragment sent"
    end                 ends the message (websockets sends its last frame,
                        empty, with FIN) and reads the echo; "echoed TEXT"
    ping                pings (between fragments too) with a payload of its
                        own, waits for the pong with it; "pong"
    pings N             waits until N pings from the server have come since
                        it connected (websockets answers each by itself as
                        it reads); "pinged N times", or "closed CODE
                        \"REASON\"" if the connection closed first
    send TEXT           sends TEXT, reads nothing; "sent"
    send-binary N       sends N bytes, reads nothing; "sent"
    send-zeros N        sends N zero bytes (binary: websockets compresses
                        8 MiB of them to about 8 KB), reads nothing, checks
                        that fewer than N/4 bytes were written for it (a
                        decompression bomb, not a message the server can
                        refuse by its length); "sent" (the count goes to
                        stderr)
    send-invalid        sends a text message of the bytes ff fe; "sent"
    wait-close          reads (and drops) messages until the connection
                        closes; "closed CODE \"REASON\"" (what the server's
                        close frame had, the reason as a JSON string;
                        "closed 1006 \"\"" without one)
    close CODE REASON   closes with CODE and REASON, waits for the end of
                        the handshake; "closed CODE \"REASON\"" (what the
                        server answered)
    EOF                 closes the connection if open, prints "closed
                        after N commands" and exits 0

A send the server's close cuts short counts as sent: `wait-close` then
tells the close. Any error or mismatch exits 1 with a message on stderr.

    python3 ws_client.py (--addr HOST:PORT [--tls --ca FILE] | --unix PATH)

Needs websockets 13 or newer (`python3 -m pip install 'websockets==17.4'`).
"""

import asyncio
import json
import ssl
import sys

try:
    from websockets.asyncio.client import ClientConnection, connect, unix_connect
    from websockets.exceptions import ConnectionClosed
    from websockets.frames import Frame, Opcode
except ImportError as e:
    sys.stderr.write(
        f"ws_client.py: {e}: install websockets with "
        "`python3 -m pip install 'websockets==17.4'`\n"
    )
    sys.exit(1)

import dial

# Every command is done within this, or the client fails (the test waits
# 40 s for an answer).
COMMAND_TIMEOUT = 30


class Failed(Exception):
    pass


class Counting(ClientConnection):
    """A connection that counts the pings it got (and answered: the
    protocol queues the pong before the frame gets here), and the bytes it
    received and wrote (over TLS: the plaintext)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pings = 0
        self.pinged = asyncio.Event()
        self.received = 0
        self.written = 0

    def data_received(self, data):
        self.received += len(data)
        super().data_received(data)

    def send_data(self):
        # What the Sans-I/O protocol queued, which this writes out.
        self.written += sum(len(data) for data in self.protocol.writes)
        super().send_data()

    def process_event(self, event):
        if isinstance(event, Frame) and event.opcode is Opcode.PING:
            self.pings += 1
            self.pinged.set()
        super().process_event(event)


def text_of(n):
    return "é" * (n // 2) + "a" * (n % 2)


def compressible_of(n):
    line = '{"id":1,"ok":true}\n'
    return (line * (n // len(line) + 1))[:n]


def binary_of(n):
    return (bytes(range(256)) * (n // 256 + 1))[:n]


def closed(code, reason):
    return f"closed {code} {json.dumps(reason or '', ensure_ascii=False)}"


class Client:
    def __init__(self, args):
        self.args = args
        self.ws = None
        # A fragmented message being sent: its queue, the event set when
        # a fragment is written, the task of `send`, and its text.
        self.fragments = None
        # The pings this client sent.
        self.pings_sent = 0

    async def connect(self, path):
        options = dict(
            max_size=None,
            ping_interval=None,
            open_timeout=COMMAND_TIMEOUT,
            create_connection=Counting,
        )
        if self.args.unix:
            self.ws = await unix_connect(self.args.unix, uri=f"ws://localhost{path}", **options)
        elif self.args.tls:
            # The certificate is for `localhost`; connect to the address
            # the server listens on.
            tls = ssl.create_default_context(cafile=self.args.ca)
            host, port = self.args.addr.rsplit(":", 1)
            self.ws = await connect(
                f"wss://localhost:{port}{path}", ssl=tls, host=host, port=int(port), **options
            )
        else:
            self.ws = await connect(f"ws://{self.args.addr}{path}", **options)
        return "connected"

    async def wait_close(self):
        while True:
            try:
                await self.ws.recv()
            except ConnectionClosed as e:
                if e.rcvd is None:
                    return closed(1006, "")
                return closed(e.rcvd.code, e.rcvd.reason)

    async def send(self, message, **kwargs):
        try:
            await self.ws.send(message, **kwargs)
        except ConnectionClosed:
            pass
        return "sent"

    async def echo(self, kind, n):
        message = text_of(n) if kind == "text" else binary_of(n)
        await self.ws.send(message)
        got = await self.ws.recv()
        if got != message:
            what = f"{type(got).__name__} of {len(got)}"
            raise Failed(f"{kind} {n}: {what} came back, or other bytes")
        return f"{kind} {n} echoed"

    async def echo_compressed(self, n):
        message = compressible_of(n)
        before = self.ws.received
        await self.ws.send(message)
        got = await self.ws.recv()
        received = self.ws.received - before
        sys.stderr.write(f"ws_client.py: echo-compressed {n}: {received} bytes received\n")
        if got != message:
            what = f"{type(got).__name__} of {len(got)}"
            raise Failed(f"echo-compressed {n}: {what} came back, or other bytes")
        if received >= n / 4:
            raise Failed(
                f"echo-compressed {n}: {received} bytes came for the echo, not fewer "
                f"than {n / 4}: the server did not compress it"
            )
        return f"echo {n} compressed"

    async def send_zeros(self, n):
        before = self.ws.written
        answer = await self.send(bytes(n))
        written = self.ws.written - before
        sys.stderr.write(f"ws_client.py: send-zeros {n}: {written} bytes written\n")
        if written >= n / 4:
            raise Failed(
                f"send-zeros {n}: {written} bytes written, not fewer than {n / 4}: "
                "the client did not compress it"
            )
        return answer

    def extensions(self):
        values = self.ws.response.headers.get_all("Sec-WebSocket-Extensions")
        return f"extensions {', '.join(values) if values else 'none'}"

    async def fragment(self, text):
        if self.fragments is None:
            queue, written = asyncio.Queue(), asyncio.Event()

            async def chunks():
                while (chunk := await queue.get()) is not None:
                    yield chunk
                    # `send` asks for the next fragment once it wrote this
                    # one.
                    written.set()

            task = asyncio.create_task(self.ws.send(chunks()))
            self.fragments = (queue, written, task, [])
        queue, written, task, sent = self.fragments
        written.clear()
        queue.put_nowait(text)
        sent.append(text)
        waiting = asyncio.create_task(written.wait())
        done, _ = await asyncio.wait([waiting, task], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if task in done:
            task.result()
            raise Failed("the fragmented send ended early")
        return "fragment sent"

    async def end_fragments(self):
        if self.fragments is None:
            raise Failed("no fragments were sent")
        queue, _, task, sent = self.fragments
        self.fragments = None
        queue.put_nowait(None)
        await task
        got = await self.ws.recv()
        if got != "".join(sent):
            raise Failed(f"fragments: {got!r} came back for {sent!r}")
        return f"echoed {got}"

    async def ping(self):
        self.pings_sent += 1
        pong = await self.ws.ping(f"ping {self.pings_sent}")
        await pong
        return "pong"

    async def pings(self, n):
        target = n
        closing = asyncio.create_task(self.ws.wait_closed())
        try:
            while self.ws.pings < target:
                self.ws.pinged.clear()
                pinged = asyncio.create_task(self.ws.pinged.wait())
                await asyncio.wait([pinged, closing], return_when=asyncio.FIRST_COMPLETED)
                pinged.cancel()
                if closing.done():
                    return closed(self.ws.close_code, self.ws.close_reason)
        finally:
            closing.cancel()
        return f"pinged {n} times"

    async def close(self, code, reason):
        await self.ws.close(code, reason)
        return closed(self.ws.close_code, self.ws.close_reason)

    async def run(self, line):
        command, _, rest = line.partition(" ")
        if command == "connect":
            return await self.connect(rest)
        if self.ws is None:
            raise Failed(f"{command}: not connected")
        if command in ("text", "binary"):
            return await self.echo(command, int(rest))
        if line == "extensions":
            return self.extensions()
        if command == "echo-compressed":
            return await self.echo_compressed(int(rest))
        if command == "fragment":
            return await self.fragment(rest)
        if line == "end":
            return await self.end_fragments()
        if line == "ping":
            return await self.ping()
        if command == "pings":
            return await self.pings(int(rest))
        if command == "send":
            return await self.send(rest)
        if command == "send-binary":
            return await self.send(binary_of(int(rest)))
        if command == "send-zeros":
            return await self.send_zeros(int(rest))
        if line == "send-invalid":
            return await self.send(b"\xff\xfe", text=True)
        if line == "wait-close":
            return await self.wait_close()
        if command == "close":
            code, _, reason = rest.partition(" ")
            return await self.close(int(code), reason)
        raise Failed(f"unknown command {line!r}")


async def main():
    args = dial.args()
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    client = Client(args)
    commands = 0
    while line := await stdin.readline():
        line = line.decode().removesuffix("\n")
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT):
                answer = await client.run(line)
        except TimeoutError:
            raise Failed(f"{line}: not done in {COMMAND_TIMEOUT} s") from None
        print(answer, flush=True)
        commands += 1
    if client.ws is not None:
        try:
            await client.ws.close()
        except (OSError, AttributeError, ConnectionClosed):
            # Closed already (websockets 17.4 can fail on a transport the
            # server closed while its own close was under way).
            pass
    print(f"closed after {commands} commands", flush=True)


if __name__ == "__main__":
    sys.stdout.reconfigure(encoding="utf-8")
    try:
        asyncio.run(main())
    except Failed as e:
        sys.stderr.write(f"ws_client.py: {e}\n")
        sys.exit(1)
