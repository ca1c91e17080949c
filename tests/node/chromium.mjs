// Loads a page in headless Chromium and prints what it logged: the text of
// its `#out` element once it holds `END` (the page's `fetch`es and
// WebSocket are done). Chromium is driven over its DevTools protocol on a
// pipe (`--remote-debugging-pipe`: fd 3 in, fd 4 out, messages ending in
// a NUL byte), so nothing but Node and Chromium is needed.
//
//   node tests/node/chromium.mjs URL
//
// Exits 1 with a message on stderr if the page does not finish in 30 s.

import { spawn } from "node:child_process";

const url = process.argv[2];
const browser = spawn(
  process.env.CHROMIUM ?? "chromium",
  [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--remote-debugging-pipe",
    "about:blank",
  ],
  { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] },
);
let stderr = "";
browser.stderr.on("data", (chunk) => (stderr += chunk));

const fail = (why) => {
  process.stderr.write(`${why}\n${stderr}`);
  browser.kill("SIGKILL");
  process.exit(1);
};
setTimeout(() => fail("the page did not finish in 30 s"), 30_000).unref();

let nextId = 1;
const pending = new Map();
let buffered = "";
browser.stdio[4].on("data", (chunk) => {
  buffered += chunk.toString("utf8");
  let end;
  while ((end = buffered.indexOf("\0")) >= 0) {
    const message = JSON.parse(buffered.slice(0, end));
    buffered = buffered.slice(end + 1);
    const waiter = pending.get(message.id);
    if (waiter) {
      pending.delete(message.id);
      waiter(message);
    }
  }
});

function send(method, params = {}, sessionId) {
  const id = nextId++;
  const message = { id, method, params };
  if (sessionId) message.sessionId = sessionId;
  browser.stdio[3].write(JSON.stringify(message) + "\0");
  return new Promise((resolve) => pending.set(id, resolve));
}

const { result: target } = await send("Target.createTarget", { url });
const { result: attached } = await send("Target.attachToTarget", {
  targetId: target.targetId,
  flatten: true,
});
const waitForLog = `new Promise((resolve) => {
  const check = () => {
    const out = document.getElementById("out");
    if (out && out.textContent.includes("END")) resolve(out.textContent);
    else setTimeout(check, 20);
  };
  check();
})`;
// The first evaluation may run in the blank document the target starts
// with, and fail when the page replaces it: evaluate again.
for (;;) {
  const reply = await send(
    "Runtime.evaluate",
    { expression: waitForLog, awaitPromise: true, returnByValue: true },
    attached.sessionId,
  );
  const value = reply.result?.result?.value;
  if (typeof value === "string") {
    process.stdout.write(value);
    break;
  }
  await new Promise((resolve) => setTimeout(resolve, 50));
}
await send("Browser.close");
browser.kill("SIGKILL");
process.exit(0);
