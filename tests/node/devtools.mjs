// Headless Chromium driven over its DevTools protocol on a pipe
// (`--remote-debugging-pipe`: fd 3 in, fd 4 out, messages ending in a NUL
// byte), so that nothing but Node and Chromium is needed: what
// chromium.mjs and chromium_steps.mjs share.

import { spawn } from "node:child_process";

// Starts Chromium with `args` besides the usual headless ones; after
// `limitMs`, fails with `why`. Returns `send(method, params, sessionId)`
// (a promise of the reply), `evaluate(expression, sessionId)` (a promise
// of its value), `fail(why)` (prints why and Chromium's stderr, exits 1)
// and `close()` (closes the browser and exits 0).
export function launch(args, limitMs, why) {
  const browser = spawn(
    process.env.CHROMIUM ?? "chromium",
    [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-dev-shm-usage",
      "--no-first-run",
      ...args,
      "--remote-debugging-pipe",
      "about:blank",
    ],
    { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] },
  );
  let stderr = "";
  browser.stderr.on("data", (chunk) => (stderr += chunk));
  const fail = (reason) => {
    process.stderr.write(`${reason}\n${stderr}`);
    browser.kill("SIGKILL");
    process.exit(1);
  };
  setTimeout(() => fail(why), limitMs).unref();

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
  const send = (method, params = {}, sessionId) => {
    const id = nextId++;
    const message = { id, method, params };
    if (sessionId) message.sessionId = sessionId;
    browser.stdio[3].write(JSON.stringify(message) + "\0");
    return new Promise((resolve) => pending.set(id, resolve));
  };
  const evaluate = async (expression, sessionId) => {
    const reply = await send(
      "Runtime.evaluate",
      { expression, awaitPromise: true, returnByValue: true },
      sessionId,
    );
    return reply.result?.result?.value;
  };
  const close = async () => {
    // The browser may exit before its answer comes (its pipe closes
    // first), and then nothing would answer: its exit ends the wait too.
    if (browser.exitCode === null && browser.signalCode === null) {
      const exited = new Promise((resolve) => browser.once("exit", resolve));
      await Promise.race([send("Browser.close"), exited]);
    }
    browser.kill("SIGKILL");
    process.exit(0);
  };
  return { send, evaluate, fail, close };
}

// Opens `url` in a new target; returns the session to evaluate in.
export async function open(send, url) {
  const { result: target } = await send("Target.createTarget", { url });
  const { result: attached } = await send("Target.attachToTarget", {
    targetId: target.targetId,
    flatten: true,
  });
  return attached.sessionId;
}
