// Opens a page in headless Chromium (certificate errors ignored: the
// tests' certificates are self-signed), with the profile directory of its
// second argument; prints `loaded` and the page's text once it is there,
// then, for each line `fetch PATH` of its stdin, has the page `fetch` it
// and prints `fetched STATUS BODY PROTOCOL` (the protocol from the
// resource timing, `h2` for HTTP/2). At the end of its stdin it closes
// the browser. Driven over its DevTools protocol (devtools.mjs).
//
//   node tests/node/chromium_steps.mjs URL PROFILE_DIR
//
// The test bounds each step; a backstop fails it after 5 minutes.

import { createInterface } from "node:readline";
import { launch, open } from "./devtools.mjs";

const { send, evaluate, fail, close } = launch(
  ["--ignore-certificate-errors", `--user-data-dir=${process.argv[3]}`],
  300_000,
  "still running after 5 minutes",
);
const session = await open(send, process.argv[2]);
for (let tries = 0; ; tries++) {
  const text = await evaluate("document.body ? document.body.innerText : ''", session);
  if (typeof text === "string" && text.includes("read=")) {
    console.log(`loaded ${text.trim()}`);
    break;
  }
  if (tries > 600) fail("the page did not load");
  await new Promise((resolve) => setTimeout(resolve, 50));
}
for await (const line of createInterface({ input: process.stdin })) {
  const path = line.replace(/^fetch /, "");
  const got = await evaluate(
    `fetch(${JSON.stringify(path)}, { cache: "no-store" })
      .then((r) => r.text().then((t) => {
        const [entry] = performance.getEntriesByName(r.url).slice(-1);
        return r.status + " " + t + " " + (entry ? entry.nextHopProtocol : "?");
      }))
      .catch((e) => "error " + e)`,
    session,
  );
  console.log(`fetched ${got}`);
}
await close();
