// Loads a page in headless Chromium and prints what it logged: the text of
// its `#out` element once it holds `END` (the page's `fetch`es and
// WebSocket are done). Chromium is driven over its DevTools protocol
// (devtools.mjs).
//
//   node tests/node/chromium.mjs URL
//
// Exits 1 with a message on stderr if the page does not finish in 30 s.

import { launch, open } from "./devtools.mjs";

const { send, evaluate, close } = launch([], 30_000, "the page did not finish in 30 s");
const session = await open(send, process.argv[2]);
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
  const value = await evaluate(waitForLog, session);
  if (typeof value === "string") {
    process.stdout.write(value);
    break;
  }
  await new Promise((resolve) => setTimeout(resolve, 50));
}
await close();
