// Node's own process warnings reach the runtime's JSON log, never stderr as bare lines a log pipeline cannot parse.
// A preload raises one in the real process once it serves /livez (after the log is set up), as a library would.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startArchiver, tempDir, waitFor } from "../../../e2e/support/archiver.ts";

const PRELOAD = `
const addr = process.argv[process.argv.indexOf("--metrics-addr") + 1];
let raised = false;
const poll = setInterval(async () => {
  const live = await fetch("http://" + addr + "/livez").then((r) => r.ok, () => false);
  // On a loaded machine a poll's fetch outlasts the interval, and two polls saw /livez answer: raised once only.
  if (!live || raised) return;
  raised = true;
  clearInterval(poll);
  process.emitWarning("a library set a timer of -5 ms", "TimeoutNegativeWarning");
}, 100);
poll.unref();
`;

test("a process warning is logged as a JSON line, with its name and message; none reaches stderr bare", async (t) => {
  const dir = tempDir(t);
  const preload = join(dir, "preload.mjs");
  writeFileSync(preload, PRELOAD);
  // No destination: the runtime idles, serving /livez.
  const a = await startArchiver(
    t,
    { logger: { level: "warn" } },
    { dir, waitReady: false, env: { NODE_OPTIONS: `--import=${preload}` } },
  );
  await waitFor(
    async () => a.output().includes("a library set a timer"),
    20_000,
    () => `no warning logged; output:\n${a.output()}`,
  );
  await a.stop();
  const lines = a
    .output()
    .split("\n")
    .filter((l) => l.includes("a library set a timer"));
  assert.equal(lines.length, 1, a.output());
  const entry = JSON.parse(lines[0] ?? "") as { level: number; msg: string; err?: { type?: string; stack?: string } };
  assert.equal(entry.level, 40);
  assert.equal(entry.msg, "node warning: TimeoutNegativeWarning: a library set a timer of -5 ms");
  assert.match(entry.err?.stack ?? "", /TimeoutNegativeWarning/);
  assert.doesNotMatch(a.output(), /\(node:\d+\)/, "Node's bare warning line");
});
