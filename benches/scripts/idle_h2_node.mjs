// A client process of benches/experiments/idle_memory.rs (its `h2c-node-`
// kinds): Node's http2 module with its defaults (HTTP/2's 65,535-byte
// windows, topped up only at half), over h2c with prior knowledge. It
// speaks the bench's client protocol (benches/common/procs.rs,
// `client_main`), one command a line on stdin, each answered `ready`:
//
//   cycle K tcp:ADDR   K connections, one after another, each one `GET /`
//                      (its response checked), then closed
//   open N tcp:ADDR    N connections, one after another, each one `GET /`,
//                      kept open
//   close (or EOF)     closes them all and exits; fails if the server
//                      closed any meanwhile
import http2 from 'node:http2';
import net from 'node:net';
import readline from 'node:readline';

const open = [];
let closing = false;

function fail(message) {
  process.stderr.write(`idle_h2_node.mjs: ${message}\n`);
  process.exit(1);
}

function get(addr) {
  const [host, port] = addr.split(':');
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://localhost:${port}`, {
      createConnection: () => net.connect({ host, port: Number(port) }),
    });
    session.on('error', reject);
    const req = session.request({ ':path': '/' });
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      if (Buffer.concat(chunks).toString() !== 'Hello, World!') reject(new Error('unexpected body'));
      resolve(session);
    });
    req.on('error', reject);
    req.end();
  });
}

async function run(line) {
  const [command, count, endpoint] = line.split(' ');
  if (command === 'close') {
    closing = true;
    open.forEach((s) => s.destroy());
    process.exit(0);
  }
  const addr = endpoint.replace(/^tcp:/, '');
  for (let i = 0; i < Number(count); i++) {
    const session = await get(addr);
    if (command === 'cycle') {
      session.close();
    } else {
      session.on('close', () => closing || fail('the server closed a connection'));
      open.push(session);
    }
  }
  console.log('ready');
}

const lines = [];
let busy = false;
readline.createInterface({ input: process.stdin })
  .on('line', (l) => { lines.push(l.trim()); drain(); })
  .on('close', () => { lines.push('close'); drain(); });

async function drain() {
  if (busy) return;
  busy = true;
  while (lines.length) {
    try {
      await run(lines.shift());
    } catch (e) {
      fail(e.message);
    }
  }
  busy = false;
}
