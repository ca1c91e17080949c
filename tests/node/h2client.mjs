// Node's HTTP/2 client (the built-in `http2` module, on nghttp2) driven by
// tests/http2_clients.rs against a dormant server serving the tests'
// mirror service (tests/common/services.rs): POST bodies come back byte for
// byte, GET /bytes/N answers N bytes of the tests' pattern, and `x-`
// headers are copied into the response.
//
// Node keeps HTTP/2's default windows: 65,535 bytes for the connection and
// each stream, topped up (by nghttp2) only once half is used. It opens ONE
// connection (h2c with prior knowledge over TCP or a Unix socket, or TLS
// with ALPN h2) and reads commands from stdin, one a line, so that the test
// decides when the connection is left idle (to sleep):
//
//   round   5 requests at once (GETs of 100 B, 70,000 B and 200,000 B:
//           larger than the window, and than what is left of it; POSTs of
//           0 B and 150,000 B), then 3 GETs one after the other (one of
//           65,536 B), each with an `x-round` header that must come back;
//           checks every byte; prints "round N done"
//   ping    a PING (ClientHttp2Session.ping), answered; prints "ping done"
//   EOF     closes the connection gracefully (GOAWAY), prints "closed after
//           N requests" and exits 0
//
// Any error, timeout or mismatch exits 1 with a message on stderr.
//
//   node h2client.mjs (--addr HOST:PORT [--tls --ca FILE] | --unix PATH)

import fs from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import readline from 'node:readline';
import tls from 'node:tls';

const args = process.argv.slice(2);
const arg = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const TIMEOUT_MS = 20_000;

function fail(message) {
  process.stderr.write(`h2client.mjs: ${message}\n`);
  process.exit(1);
}

// tests/common/services.rs `pattern`: `len` bytes, each a hash of its
// offset, of `len` and of `seed`.
function pattern(len, seed) {
  const mask = (1n << 64n) - 1n;
  const salt = ((BigInt(len) << 32n) ^ (BigInt(seed) * 0xff51afd7ed558ccdn)) & mask;
  const out = Buffer.alloc(len);
  for (let i = 0; i < len; i++) {
    out[i] = Number((((BigInt(i) ^ salt) * 0x9e3779b97f4a7c15n) & mask) >> 56n);
  }
  return out;
}

function connect() {
  const unix = arg('--unix');
  if (unix) {
    return http2.connect('http://localhost', { createConnection: () => net.connect(unix) });
  }
  const [host, port] = arg('--addr').split(':');
  if (args.includes('--tls')) {
    const ca = fs.readFileSync(arg('--ca'));
    return http2.connect(`https://localhost:${port}`, {
      createConnection: () =>
        tls.connect({ host, port: Number(port), servername: 'localhost', ca, ALPNProtocols: ['h2'] }),
    });
  }
  return http2.connect(`http://localhost:${port}`, {
    createConnection: () => net.connect({ host, port: Number(port) }),
  });
}

const session = connect();
session.on('error', (e) => fail(`session: ${e.message}`));
session.on('goaway', (code) => {
  if (!closing) fail(`a GOAWAY (${code}) before the close`);
});
let closing = false;
let requests = 0;

function request(method, path, body, round) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${method} ${path}: no response in ${TIMEOUT_MS} ms`)), TIMEOUT_MS);
    const req = session.request({ ':method': method, ':path': path, 'x-round': String(round) });
    const chunks = [];
    let head;
    req.on('response', (headers) => { head = headers; });
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      clearTimeout(timer);
      requests += 1;
      resolve({ head, body: Buffer.concat(chunks) });
    });
    req.on('error', (e) => { clearTimeout(timer); reject(e); });
    req.end(body);
  });
}

async function check(method, path, body, expected, round) {
  const { head, body: got } = await request(method, path, body, round);
  if (head[':status'] !== 200) fail(`${method} ${path}: status ${head[':status']}`);
  if (head['x-round'] !== String(round)) fail(`${method} ${path}: x-round ${head['x-round']}`);
  if (!got.equals(expected)) fail(`${method} ${path}: ${got.length} bytes back, ${expected.length} expected, or other bytes`);
}

async function round(n) {
  const get = (len) => check('GET', `/bytes/${len}`, undefined, pattern(len, 0), n);
  const post = (len) => {
    const body = pattern(len, n + 1);
    return check('POST', '/echo', body, body, n);
  };
  await Promise.all([get(100), get(70_000), get(200_000), post(0), post(150_000)]);
  for (const len of [10, 65_536, 1_000]) {
    await get(len);
  }
}

function ping() {
  return new Promise((resolve) => {
    const sent = session.ping(Buffer.from('node!pin'), (err) => {
      if (err) fail(`PING: ${err.message}`);
      resolve();
    });
    if (!sent) fail('PING not sent');
  });
}

let rounds = 0;
const lines = readline.createInterface({ input: process.stdin });
const queue = [];
let busy = false;
lines.on('line', (line) => { queue.push(line.trim()); drain(); });
lines.on('close', () => { queue.push('EOF'); drain(); });

async function drain() {
  if (busy) return;
  busy = true;
  while (queue.length > 0) {
    const command = queue.shift();
    try {
      if (command === 'round') {
        await round(rounds);
        console.log(`round ${rounds} done`);
        rounds += 1;
      } else if (command === 'ping') {
        await ping();
        console.log('ping done');
      } else if (command === 'EOF') {
        closing = true;
        session.close(() => {
          console.log(`closed after ${requests} requests`);
          process.exit(0);
        });
        setTimeout(() => fail('the close took too long'), TIMEOUT_MS);
        return;
      } else {
        fail(`unknown command ${command}`);
      }
    } catch (e) {
      fail(e.message);
    }
  }
  busy = false;
}
