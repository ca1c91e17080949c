// Headless Chromium's own `WebSocket`, driven through its DevTools protocol
// (devtools.mjs) by commands on stdin, one a line, each answered by one
// line on stdout once done: the command language of the tests' WebSocket
// clients (tests/ws_clients.rs; go/wsclient and python/ws_client.py speak
// it too), as far as a page can. The page (about:blank) keeps one
// WebSocket in a global, `t.ws`; certificate errors are ignored (the
// tests' certificates are self-signed).
//
//   node tests/node/chromium_ws.mjs --addr HOST:PORT [--tls] --profile DIR
//
// Over TLS the URL is `wss://localhost:PORT` (the name the certificate is
// for); a browser's WebSocket reaches no Unix socket (`--unix` fails).
// Commands and their answers:
//
//   connect PATH       a new WebSocket to the server's PATH → `connected`
//   extensions         the extensions the server answered (`ws.extensions`)
//                                        → `extensions VALUE` (or `none`)
//   text N             sends N bytes of UTF-8 text ("é"s, an "a" if N is
//                      odd), and checks the next message is the same
//                                                    → `text N echoed`
//   binary N           sends N bytes (byte i is i % 256) as an ArrayBuffer,
//                      and checks the next message byte for byte
//                                                    → `binary N echoed`
//   echo-compressed N  sends N bytes of text that compresses well (a
//                      JSON-like line repeated), checks the next message is
//                      the same, and that it went compressed (RSV1 set on
//                      its first frame) and came back compressed, in frames
//                      whose payloads add up to fewer than N/4 bytes (as
//                      the browser's net log shows them: the page cannot
//                      see them)
//                                                        → `echo N compressed`
//   send-binary N      the same bytes, not waiting for an answer → `sent`
//   send TEXT          a text message, not waiting for an answer → `sent`
//   pings N            waits until the browser has received N pings and
//                      sent N pongs (since it started, as its net log
//                      shows them: the page cannot see them), the
//                      socket still open                 → `pinged N times`
//   close CODE REASON  `ws.close(CODE, REASON)`, then its close event
//   wait-close         its close event
//                        → `closed CODE "REASON"` (the reason as a JSON
//                          string), and ` unclean` after it if the close
//                          was not clean
//   kill               SIGKILLs the browser's processes (the WebSocket
//                      vanishes, with no close frame; Linux: they are
//                      found in /proc)                   → `killed`
//
// Any other outcome is answered with what happened instead (a message
// that differs, `closed ...` when the socket closed meanwhile, `error
// ...`). At the end of stdin it closes the browser and prints `closed
// after N commands`. The test bounds each step; a backstop fails it
// after 5 minutes.

import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { launch, open } from "./devtools.mjs";

const args = process.argv.slice(2);
const arg = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
if (args.includes("--unix")) {
  process.stderr.write("chromium_ws.mjs: a browser's WebSocket reaches no Unix socket\n");
  process.exit(1);
}
const port = arg("--addr").split(":").pop();
const base = args.includes("--tls") ? `wss://localhost:${port}` : `ws://${arg("--addr")}`;
const profile = arg("--profile");
// The browser's net log, beside the profile: where its WebSockets' frame
// headers are seen, pings and pongs included.
const netlog = join(dirname(profile), "netlog.json");
const { send, fail, close } = launch(
  [
    "--ignore-certificate-errors",
    `--user-data-dir=${profile}`,
    `--log-net-log=${netlog}`,
    "--net-log-capture-mode=Default",
  ],
  300_000,
  "still running after 5 minutes",
);
const session = await open(send, "about:blank");

// Evaluates `expression` in the page (awaiting its promise): its value, or
// `error ...` for an exception.
async function evaluate(expression) {
  const reply = await send(
    "Runtime.evaluate",
    { expression, awaitPromise: true, returnByValue: true },
    session,
  );
  if (reply.error) return `error ${JSON.stringify(reply.error)}`;
  const { result, exceptionDetails } = reply.result;
  if (exceptionDetails) {
    return `error ${exceptionDetails.exception?.description ?? exceptionDetails.text}`;
  }
  return result.value;
}

// What the page keeps: its WebSocket, the messages that came and were not
// taken yet, and its close event.
const page = `window.t = {
  ws: null,
  inbox: [],
  waiting: null,
  closed: null,
  closeWaiters: [],
  describe(e) {
    return "closed " + e.code + " " + JSON.stringify(e.reason) + (e.wasClean ? "" : " unclean");
  },
  open(url) {
    t.inbox = [];
    t.waiting = null;
    t.closed = null;
    t.closeWaiters = [];
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    t.ws = ws;
    return new Promise((resolve) => {
      ws.onopen = () => resolve("connected");
      ws.onmessage = (e) => {
        if (t.waiting) {
          const w = t.waiting;
          t.waiting = null;
          w(e.data);
        } else {
          t.inbox.push(e.data);
        }
      };
      ws.onclose = (e) => {
        t.closed = t.describe(e);
        resolve(t.closed);
        if (t.waiting) {
          const w = t.waiting;
          t.waiting = null;
          w({ closed: t.closed });
        }
        for (const w of t.closeWaiters) w(t.closed);
        t.closeWaiters = [];
      };
    });
  },
  // The next message; { closed } if the socket closed first.
  next() {
    if (t.inbox.length > 0) return Promise.resolve(t.inbox.shift());
    if (t.closed) return Promise.resolve({ closed: t.closed });
    return new Promise((resolve) => (t.waiting = resolve));
  },
  closeEvent() {
    if (t.closed) return Promise.resolve(t.closed);
    return new Promise((resolve) => t.closeWaiters.push(resolve));
  },
  text(n) {
    return "é".repeat(n >> 1) + (n % 2 ? "a" : "");
  },
  compressible(n) {
    const line = '{"id":1,"ok":true}\\n';
    return line.repeat(Math.ceil(n / line.length)).slice(0, n);
  },
  bytes(n) {
    const bytes = new Uint8Array(n);
    for (let i = 0; i < n; i++) bytes[i] = i & 255;
    return bytes;
  },
  what(got) {
    if (got && got.closed) return got.closed;
    if (typeof got === "string") return "text of " + new TextEncoder().encode(got).length + " bytes";
    if (got instanceof ArrayBuffer) return "binary of " + got.byteLength + " bytes";
    return "something else: " + String(got);
  },
  async echoText(n) {
    const sent = t.text(n);
    if (new TextEncoder().encode(sent).length !== n) return "error: the text is not " + n + " bytes";
    t.ws.send(sent);
    const got = await t.next();
    return got === sent ? "text " + n + " echoed" : "text " + n + " got " + t.what(got);
  },
  async echoCompressible(n) {
    const sent = t.compressible(n);
    t.ws.send(sent);
    const got = await t.next();
    return got === sent ? "ok" : "echo-compressed " + n + " got " + t.what(got);
  },
  async echoBinary(n) {
    const sent = t.bytes(n);
    t.ws.send(sent.buffer);
    const got = await t.next();
    if (!(got instanceof ArrayBuffer) || got.byteLength !== n) {
      return "binary " + n + " got " + t.what(got);
    }
    const back = new Uint8Array(got);
    for (let i = 0; i < n; i++) {
      if (back[i] !== sent[i]) return "binary " + n + " differs at byte " + i;
    }
    return "binary " + n + " echoed";
  },
  state() {
    if (t.closed) return t.closed;
    return t.ws.readyState === WebSocket.OPEN ? "open" : "state " + t.ws.readyState;
  },
};
"ready"`;
const ready = await evaluate(page);
if (ready !== "ready") fail(`the page did not take the script: ${ready}`);

// The browser's processes, for `kill`: its main process (Node's child) and
// its descendants (the zygotes, the renderer, the network service's
// process, which holds the sockets), from /proc, in the order to kill
// them.
function browserProcesses() {
  const parents = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^[0-9]+$/.test(name)) continue;
    try {
      // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      parents.set(Number(name), ppid);
    } catch {
      // Gone meanwhile.
    }
  }
  const found = [];
  const add = (parent) => {
    for (const [pid, ppid] of parents) {
      if (ppid === parent && !found.includes(pid)) {
        found.push(pid);
        add(pid);
      }
    }
  };
  add(process.pid);
  // The network service first (before anything it would notice going, a
  // renderer or the browser, and answer with a close frame), then
  // children before their parents.
  const network = (pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("NetworkService");
    } catch {
      return false;
    }
  };
  found.reverse();
  return [...found.filter(network), ...found.filter((pid) => !network(pid))];
}

// The frame headers the browser received and sent so far, in its net log
// (written as it goes, an event a line, after the constants that name the
// event types): `{ received, sent }`, each a list of the headers' params
// (`opcode`, `final`, `reserved1`, `payload_length`, ...).
let headerTypes;
function frameHeaders() {
  const headers = { received: [], sent: [] };
  let text;
  try {
    text = readFileSync(netlog, "utf8");
  } catch {
    return headers;
  }
  if (!headerTypes) {
    const types = /"logEventTypes":(\{[^}]*\})/.exec(text);
    if (!types) return headers;
    const ids = JSON.parse(types[1]);
    headerTypes = {
      received: ids.WEBSOCKET_RECV_FRAME_HEADER,
      sent: ids.WEBSOCKET_SENT_FRAME_HEADER,
    };
  }
  for (const line of text.split("\n")) {
    if (!line.includes('"opcode":')) continue;
    let event;
    try {
      event = JSON.parse(line.replace(/,\s*$/, ""));
    } catch {
      continue; // The last line, half written.
    }
    if (event.type === headerTypes.received) headers.received.push(event.params);
    if (event.type === headerTypes.sent) headers.sent.push(event.params);
  }
  return headers;
}

// The pings the browser received and the pongs it sent so far.
function pingsAndPongs() {
  const { received, sent } = frameHeaders();
  return {
    pings: received.filter((h) => h.opcode === 9).length,
    pongs: sent.filter((h) => h.opcode === 10).length,
  };
}

// The data frames (text, binary, continuation) the browser received and
// sent, after the first `skip.received` and `skip.sent`.
function dataFrames(skip = { received: 0, sent: 0 }) {
  const { received, sent } = frameHeaders();
  const data = (h) => h.opcode <= 2;
  return {
    received: received.filter(data).slice(skip.received),
    sent: sent.filter(data).slice(skip.sent),
  };
}

// A message's frames, as an answer tells them.
function described(frames) {
  const payload = frames.reduce((sum, h) => sum + h.payload_length, 0);
  const flags = frames.map((h) => (h.reserved1 ? 1 : 0)).join("");
  return `${frames.length} frames, RSV1 ${flags}, ${payload} bytes of payload`;
}

// The echo of a compressible text of `n` bytes, checked in the page, and
// the frames it went and came in, checked in the net log (waited for: the
// log is written a moment after the page has the message).
async function echoCompressed(n) {
  const { received, sent } = dataFrames();
  const skip = { received: received.length, sent: sent.length };
  const echoed = await evaluate(`t.echoCompressible(${n})`);
  if (echoed !== "ok") return echoed;
  const deadline = Date.now() + 10_000;
  let frames = dataFrames(skip);
  while (!frames.received.some((h) => h.final)) {
    if (Date.now() > deadline) return `echo-compressed ${n}: its frames are not in the net log`;
    await new Promise((resolve) => setTimeout(resolve, 20));
    frames = dataFrames(skip);
  }
  const what = `sent in ${described(frames.sent)}, came back in ${described(frames.received)}`;
  process.stderr.write(`chromium_ws.mjs: echo-compressed ${n}: ${what}\n`);
  const payload = frames.received.reduce((sum, h) => sum + h.payload_length, 0);
  if (!frames.sent[0]?.reserved1 || !frames.received[0].reserved1 || payload >= n / 4) {
    return `echo-compressed ${n}: ${what}`;
  }
  return `echo ${n} compressed`;
}

let commands = 0;
let killed = false;
for await (const line of createInterface({ input: process.stdin })) {
  commands++;
  const [command, ...words] = line.split(" ");
  let answer;
  switch (command) {
    case "connect":
      answer = await evaluate(`t.open(${JSON.stringify(base + words[0])})`);
      break;
    case "extensions":
      answer = `extensions ${(await evaluate("t.ws.extensions")) || "none"}`;
      break;
    case "echo-compressed":
      answer = await echoCompressed(Number(words[0]));
      break;
    case "text":
      answer = await evaluate(`t.echoText(${Number(words[0])})`);
      break;
    case "binary":
      answer = await evaluate(`t.echoBinary(${Number(words[0])})`);
      break;
    case "send-binary":
      answer = await evaluate(`(t.ws.send(t.bytes(${Number(words[0])}).buffer), "sent")`);
      break;
    case "send":
      answer = await evaluate(`(t.ws.send(${JSON.stringify(words.join(" "))}), "sent")`);
      break;
    case "pings": {
      const n = Number(words[0]);
      for (;;) {
        const { pings, pongs } = pingsAndPongs();
        const state = await evaluate("t.state()");
        if (state !== "open") {
          answer = `pings: ${pings} came, ${pongs} answered, then ${state}`;
          break;
        }
        if (pings >= n && pongs >= n) {
          answer = `pinged ${n} times`;
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      break;
    }
    case "close":
      answer = await evaluate(
        `(t.ws.close(${Number(words[0])}, ${JSON.stringify(words.slice(1).join(" "))}), t.closeEvent())`,
      );
      break;
    case "wait-close":
      answer = await evaluate("t.closeEvent()");
      break;
    case "kill": {
      // Every process at once, the network service first: it closes its
      // WebSockets politely (1001) when the browser or the page goes.
      const pids = browserProcesses();
      if (pids.length === 0) fail("no browser process found");
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // Gone meanwhile.
        }
      }
      killed = true;
      answer = "killed";
      break;
    }
    default:
      answer = `error: unknown command ${JSON.stringify(line)}`;
  }
  console.log(answer);
}
console.log(`closed after ${commands} commands`);
if (killed) process.exit(0);
await close();
